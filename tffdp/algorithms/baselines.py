"""The three foundation baselines (spec `../shared/specs/baselines.md`).

- **FedAvg** (McMahan et al. 2017, AISTATS): local SGD, example-weighted mean of the
  client models. No privacy.
- **DPFL**: FedAvg whose clients run DP-SGD (per-example clip `C`, Gaussian
  `sigma * C` per batch, Abadi et al. 2016), fixed sigma, uniform cohort. Sample-level.
- **DP-FedAvg (client-level)** / CL-FL (McMahan et al. 2018, ICLR; Geyer et al. 2017):
  non-private clients; the server clips each update to L2 norm `S`, sums, adds
  `N(0, sigma^2 S^2)` and divides by the expected cohort size —
  `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`'s query, its noise drawn
  from the run's seed (`seeded_gaussian_fixed`). Client-level, one
  `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` per round.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
from tensorflow_federated.python.aggregators import differential_privacy

from tffdp import privacy, queries, seeds
from tffdp.algorithms import common, registry
from tffdp.algorithms.dp_sgd import build_dp_sgd_client_work, build_sliced_dp_sgd_client_work
from tffdp.data.federated import FederatedData, ShuffleBatch


def client_work(keras_builder, data: FederatedData, *, learning_rate, dp_sgd,
                noise_multiplier=0.0, clip_norm=1.0, batching=None, clients_per_slice=None,
                stated_steps=False, update_clip=None):
  """DP-SGD client work per client, or per cohort slice when `clients_per_slice` is set
  (then with `update_clip` each client's update clipped to it and the slice's sum
  returned); with `stated_steps`, each client states its steps and noise
  (`max_clients`)."""
  kw = dict(learning_rate=learning_rate, dp_sgd=dp_sgd, noise_multiplier=noise_multiplier,
            clip_norm=clip_norm, max_clients=data.num_clients if stated_steps else None)
  if clients_per_slice:
    return build_sliced_dp_sgd_client_work(
        keras_builder, common.weights_type_of(keras_builder), data, batching,
        clients_per_slice, update_clip=update_clip, **kw)
  if update_clip is not None:
    raise ValueError('update_clip clips inside cohort slices: set clients_per_slice.')
  return build_dp_sgd_client_work(
      keras_builder, common.weights_type_of(keras_builder), data.client_data_type, **kw)


def seeded_gaussian_fixed(noise_multiplier: float, clients_per_round: float, clip: float,
                          seed, preclipped: bool = False
                          ) -> tff.aggregators.DifferentiallyPrivateFactory:
  """`DifferentiallyPrivateFactory.gaussian_fixed` whose noise comes from `seed`.

  The same query as TFF's (`NormalizedQuery(GaussianSumQuery(clip, clip * sigma),
  clients_per_round)`: clip each update to L2 norm `clip`, sum, add `N(0, (sigma
  clip)^2)` per coordinate, divide by the expected cohort size; McMahan et al. 2018,
  Alg. 1), with the sum query replaced by `queries.StatelessGaussianSumQuery`, which
  draws release `t`'s noise from `fold_in(seed, t)` and keeps `t` in the aggregator
  state. The same argument checks as TFF's.

  Args:
    noise_multiplier: `sigma >= 0`.
    clients_per_round: Expected cohort size (the denominator), `> 0`.
    clip: L2 clipping norm `S > 0`.
    seed: int64 `[2]` base seed (`seeds.server_noise_seed`).
    preclipped: The values it aggregates are sums of updates the client work clipped to
      `clip` (cohort slices: `queries.PreclippedGaussianSumQuery`), not one update each.

  Returns:
    A `tff.aggregators.DifferentiallyPrivateFactory` (unweighted).

  Raises:
    ValueError: On a negative `noise_multiplier` or a non-positive `clients_per_round`
      or `clip`.
  """
  if not noise_multiplier >= 0:
    raise ValueError(f'noise_multiplier must be >= 0. Found {noise_multiplier!r}.')
  for name, value in (('clients_per_round', clients_per_round), ('clip', clip)):
    if not value > 0:
      raise ValueError(f'{name} must be positive. Found {value!r}.')
  sum_query = (queries.PreclippedGaussianSumQuery if preclipped
               else queries.StatelessGaussianSumQuery)
  query = tfp.NormalizedQuery(
      sum_query(l2_norm_clip=clip, stddev=clip * noise_multiplier, seed=seed),
      denominator=float(clients_per_round))
  return tff.aggregators.DifferentiallyPrivateFactory(query)


def factory_event(factory: tff.aggregators.DifferentiallyPrivateFactory
                  ) -> dp_accounting.GaussianDpEvent:
  """The `DpEvent` of one release of `factory`'s DP query, before any round.

  tensorflow-privacy's `DPQuery.get_noised_result` returns the event of the noise it adds;
  TFF's factory keeps that query private (`_query`) and puts each release's event in the
  aggregator state (`extract_dp_event_from_state`), whose initial value is a placeholder.
  The noise multiplier is the query's own float32 value.
  """
  query = factory._query  # pylint: disable=protected-access
  sample = query.initial_sample_state(tf.TensorSpec([1], tf.float32))
  _, _, event = query.get_noised_result(sample, query.initial_global_state())
  return dp_accounting.GaussianDpEvent(float(event.noise_multiplier))


def _sigma_and_clip(state) -> dict:
  cw = state.client_work
  return {'noise_multiplier': float(cw['noise_multiplier']),
          'clip_norm': float(cw['clip_norm'])}


def _non_private(cohort, state=None):
  return [(cohort, None, 'non-private method: no noise is added')]


def build_fedavg(keras_builder, data: FederatedData, *, learning_rate: float,
                 batch_size: int, local_epochs: int = 1, seed: int = 0,
                 cohort_sampling: str = 'uniform',
                 clients_per_slice: Optional[int] = None) -> common.Method:
  """Non-private FedAvg (McMahan et al. 2017, Alg. 1).

  `clients_per_slice`: run the cohort in slices of this many clients per TFF client
  computation (`dp_sgd.build_sliced_dp_sgd_client_work`; same results).
  """
  batching = ShuffleBatch(batch_size, local_epochs)
  process = common.compose_fedavg_style(
      keras_builder,
      client_work(keras_builder, data, learning_rate=learning_rate, dp_sgd='none',
                  batching=batching, clients_per_slice=clients_per_slice),
      tff.aggregators.MeanFactory(), seed)
  run_round, round_computation = common.cohort_round(process, data, batching, clients_per_slice)
  return common.Method(
      name='fedavg', process=process, batching=batching, clients_per_slice=clients_per_slice,
      run_round=run_round, round_computation=round_computation,
      dp_unit='none', cohort_sampling=cohort_sampling,
      accounting=common.Accounting(_non_private, _non_private),
      adaptive_quantities=lambda state: {},
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           local_epochs=local_epochs))


def build_dpfl(keras_builder, data: FederatedData, *, learning_rate: float,
               batch_size: int, noise_multiplier: float, clip_norm: float,
               local_epochs: int = 1, seed: int = 0,
               cohort_sampling: str = 'uniform',
               clients_per_slice: Optional[int] = None) -> common.Method:
  """DPFL: FedAvg with DP-SGD clients (fixed sigma, uniform cohort).

  `clients_per_slice`: as for `build_fedavg`.

  `epsilon_claimed`: per client, `E * ceil(n_i / B)` Poisson-subsampled Gaussian steps
  with `q = B / n_i` for each round it took part in (the DP-SGD analysis the papers
  use). `epsilon_guaranteed`: the executed batching is a shuffle into disjoint batches,
  for which that amplification is not proven; per epoch each example is in exactly one
  batch, so a client's epoch is one Gaussian release (see `common.dp_sgd_releases`).
  """
  batching = ShuffleBatch(batch_size, local_epochs)
  # The clients draw their noise with the float32 sigma of the client-work state.
  executed_sigma = float(np.float32(noise_multiplier))
  process = common.compose_fedavg_style(
      keras_builder,
      client_work(keras_builder, data, learning_rate=learning_rate,
                  dp_sgd='clip_then_noise', noise_multiplier=noise_multiplier,
                  clip_norm=clip_norm, batching=batching, clients_per_slice=clients_per_slice,
                  stated_steps=True),
      tff.aggregators.MeanFactory(), seed)
  run_round, round_computation = common.cohort_round(process, data, batching, clients_per_slice)
  return common.Method(
      name='dpfl', process=process, batching=batching, dp_unit=privacy.SAMPLE_LEVEL,
      clients_per_slice=clients_per_slice,
      run_round=run_round, round_computation=round_computation,
      cohort_sampling=cohort_sampling,
      accounting=common.dp_sgd_accounting(data, batching, executed_sigma),
      adaptive_quantities=_sigma_and_clip,
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           local_epochs=local_epochs, noise_multiplier=noise_multiplier,
                           clip_norm=clip_norm))


def build_dp_fedavg(keras_builder, data: FederatedData, *, learning_rate: float,
                    batch_size: int, noise_multiplier: float, clip_norm: float,
                    clients_per_round: int, local_epochs: int = 1, seed: int = 0,
                    cohort_sampling: str = 'poisson',
                    clients_per_slice: Optional[int] = None) -> common.Method:
  """DP-FedAvg with client-level DP (McMahan et al. 2018; CL-FL, Geyer et al. 2017).

  The aggregator is `DifferentiallyPrivateFactory.gaussian_fixed(sigma,
  clients_per_round, S)` with its noise drawn from `seed` (`seeded_gaussian_fixed`), so
  reruns and resumed runs release the same noise. With `cohort_sampling='poisson'`
  (default: each client joins with probability `q = K / N`) both epsilons are the exact RDP of
  `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` per round for every client. With
  `uniform` (fixed K), `epsilon_claimed` keeps that analysis while
  `epsilon_guaranteed` composes one unamplified Gaussian release per round a client
  took part in (the Poisson amplification does not cover fixed-size draws).

  `clients_per_slice`: run the cohort in slices of this many clients per TFF client
  computation; each client's update is clipped to `S` inside its slice, which sends
  the sum (`update_clip`), and the aggregator sums the slices' sums and adds the same
  noise (`queries.PreclippedGaussianSumQuery`): the same mechanism and event, the same
  results up to float32 summation order, TFF's per-client cost paid once per slice.
  """
  factory = seeded_gaussian_fixed(noise_multiplier, float(clients_per_round), clip_norm,
                                 seeds.server_noise_seed(seed),
                                 preclipped=clients_per_slice is not None)
  batching = ShuffleBatch(batch_size, local_epochs)
  process = common.compose_fedavg_style(
      keras_builder,
      client_work(keras_builder, data, learning_rate=learning_rate, dp_sgd='none',
                  batching=batching, clients_per_slice=clients_per_slice,
                  update_clip=clip_norm if clients_per_slice else None),
      factory, seed)
  q = clients_per_round / data.num_clients
  everyone = np.arange(data.num_clients)
  stated = factory_event(factory)

  def release_event(state) -> dp_accounting.GaussianDpEvent:
    """The aggregator's event: the last release's (`extract_dp_event_from_state`), or
    before the first round the one its DP query states (`factory_event`)."""
    aggregator = getattr(state, 'aggregator', None)
    if aggregator is None or bool(aggregator.is_init_state):
      return stated
    return differential_privacy.extract_dp_event_from_state(aggregator)

  def releases(clients, state, rate):
    sigma = float(release_event(state).noise_multiplier)
    if sigma == 0:
      return [(clients, None, 'noise multiplier is 0')]
    return [(clients, privacy.subsampled_gaussian_event(sigma, rate), '')]

  def claimed(cohort, state=None):
    return releases(everyone, state, q)

  def guaranteed(cohort, state=None):
    if cohort_sampling == 'poisson':
      return claimed(cohort, state)
    return releases(cohort, state, 1.0)  # fixed-size cohorts: no amplification

  def executed(cohort, state, metrics):
    """The releases of the event TFF's DP aggregator states for the round just run (in
    its new state: `extract_dp_event_from_state`)."""
    del metrics
    return guaranteed(cohort, state)

  run_round, round_computation = common.cohort_round(process, data, batching,
                                                     clients_per_slice)
  return common.Method(
      name='dp_fedavg', process=process, batching=batching,
      clients_per_slice=clients_per_slice,
      run_round=run_round, round_computation=round_computation,
      dp_unit=privacy.CLIENT_LEVEL, cohort_sampling=cohort_sampling,
      accounting=common.Accounting(claimed, guaranteed, executed),
      adaptive_quantities=lambda state: {'noise_multiplier': noise_multiplier,
                                         'clip_norm': clip_norm},
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           local_epochs=local_epochs, noise_multiplier=noise_multiplier,
                           clip_norm=clip_norm, clients_per_round=clients_per_round))


# ----- registry ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DPFedAvgHparams(registry.NoOptions):
  """DP-FedAvg has no options of its own (sigma and S are the shared settings)."""
  default_cohort_sampling: typing.ClassVar[str] = 'poisson'
  cohort_sampling_note: typing.ClassVar[str] = (
      'poisson for client-level DP-FedAvg, so that its accountant is exact')

  def check_run(self, config) -> None:
    if config.clients_per_slice is not None and config.audit_canaries:
      raise ValueError('clients_per_slice must be unset for a dp_fedavg audit '
                       '(--audit-canaries: canary clients join per-client rounds only). '
                       f'Found clients_per_slice={config.clients_per_slice!r}.')


def _shared(config) -> dict:
  return dict(learning_rate=config.learning_rate, batch_size=config.batch_size,
              local_epochs=config.local_epochs, seed=config.seed,
              cohort_sampling=config.cohort_sampling)


def _build_fedavg(ctx: registry.BuildContext, hp) -> common.Method:
  del hp
  return build_fedavg(ctx.keras_builder, ctx.data, clients_per_slice=ctx.config.clients_per_slice,
                      **_shared(ctx.config))


def _build_dpfl(ctx: registry.BuildContext, hp) -> common.Method:
  del hp
  c = ctx.config
  return build_dpfl(ctx.keras_builder, ctx.data, noise_multiplier=c.noise_multiplier,
                    clip_norm=c.clip_norm, clients_per_slice=c.clients_per_slice, **_shared(c))


def _build_dp_fedavg(ctx: registry.BuildContext, hp) -> common.Method:
  del hp
  c = ctx.config
  return build_dp_fedavg(ctx.keras_builder, ctx.data, noise_multiplier=c.noise_multiplier,
                         clip_norm=c.clip_norm, clients_per_round=c.clients_per_round,
                         clients_per_slice=c.clients_per_slice, **_shared(c))


METHODS = (
    registry.MethodSpec('fedavg', _build_fedavg, registry.NoOptions,
                        'FedAvg (McMahan et al. 2017), non-private',
                        shared_meanings=dict(noise_multiplier='unused: FedAvg adds no noise',
                                             clip_norm='unused: FedAvg clips nothing (an audit '
                                             'takes it as the canaries\' norm)'),
                        slices_of_one=True),
    registry.MethodSpec('dpfl', _build_dpfl, registry.NoOptions,
                        'DPFL: FedAvg with DP-SGD clients (fixed sigma)',
                        shared_meanings=dict(clip_norm='per-example clipping norm C',
                                             noise_multiplier='DP-SGD sigma'),
                        slices_of_one=True),
    registry.MethodSpec('dp_fedavg', _build_dp_fedavg, DPFedAvgHparams,
                        'client-level DP-FedAvg / CL-FL (McMahan et al. 2018; Geyer et al. '
                        '2017)',
                        shared_meanings=dict(clip_norm='per-update clipping norm S',
                                             noise_multiplier='server sigma (noise std '
                                             'sigma S on the sum)'),
                        slices_of_one=True),
)
