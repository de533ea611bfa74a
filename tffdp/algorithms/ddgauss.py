"""DDGauss: FedAvg with the distributed discrete Gaussian mechanism and secure aggregation.

Kairouz, Liu & Steinke 2021 ("The Distributed Discrete Gaussian Mechanism for Federated
Learning with Secure Aggregation", ICML), one of AADP-FL's baselines (spec
`../shared/specs/baselines.md`). Nothing of the mechanism is written here: the
aggregator is TFF's own `DistributedDpSumFactory(mechanism='distributed_dgauss')`
(clip to L2 norm `S`, random rotation, scaling and randomised rounding to integers,
a discrete Gaussian noise share per client, modular SecAgg sum, the inverse steps on the
server) inside `tff.aggregators.UnweightedMeanFactory` with a secure count, as
`tff.learning.ddp_secure_aggregator` composes it, but with a fixed clip `S` (no adaptive
clipping, no zeroing) so the run's clip is the paper's. Without zeroing, a client whose
local training diverged (NaN/inf update) fails the norm check of TFF's DP query; the
method declares that failure (`round_failure`) and the runner ends the run there as
diverged instead of crashing.

Secure aggregation is simulated: `tffdp.runtime.use_local_context` compiles TFF's secure
sum intrinsics to their plain-sum bodies, as TFF's own test context does (there is one
process, no adversary to hide the client values from).

Accounting (client-level, the paper's: `privacy.DistributedDiscreteGaussianDpEvent`,
Theorem 1 + Proposition 14) uses the parameters the DP query of TFF's aggregator states:
the scaled, rounding-inflated L2 bound, the scaled local noise std and the padded
dimension; the runner checks them against the event the round's measurements state
(`DDGaussLedgers.executed`) and accounts that. Both ledgers
compose one such release per round for each client of the cohort (the draw does not
depend on the data): `epsilon_claimed` with `n` the expected cohort size (how the paper
accounts), `epsilon_guaranteed` with `n` the number of noise shares that went into the
sum (the cohort actually drawn). Neither applies amplification by sampling (their
subsampled analysis, Zhu & Wang 2019, is not implemented): with `q < 1` both are upper
bounds.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import typing
from typing import Optional

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import distributed_dp

from tffdp import privacy, runtime
from tffdp.algorithms import common, registry
from tffdp.algorithms.baselines import client_work
from tffdp.data.federated import FederatedData, ShuffleBatch

ROTATIONS = ('hd', 'dft')
# The assertion TFF's discrete Gaussian query makes on each clipped, rounded client update
# (tensorflow_privacy `DistributedDiscreteGaussianSumQuery.preprocess_record`). After the
# aggregator's own clip it fails only on a non-finite update (or one whose norm overflows
# float32, which the clip turns into NaN): NaN cast to int32 is INT_MIN in every
# coordinate (norm 2^31 sqrt(padded_dim)).
NORM_CHECK_MESSAGE = 'Global L2 norm exceeds'


def padded_dim(dim: int, rotation_type: str) -> int:
  """The dimension TFF's rotation pads `dim` to: a power of 2 (`hd`) or even (`dft`)."""
  if rotation_type == 'hd':
    return 2 ** math.ceil(math.log2(max(1, dim)))
  return math.ceil(max(1, dim) / 2) * 2


def ddgauss_factory(noise_multiplier: float, clip_norm: float, clients_per_round: int,
                    bits: int = 20, rotation_type: str = 'hd', beta: float = 0.0,
                    modclip_prob: float = 1e-4) -> tff.aggregators.UnweightedAggregationFactory:
  """TFF's distributed discrete Gaussian mean with a fixed clip.

  Args:
    noise_multiplier: Central sigma: the noise shares sum to std `sigma S` (before
      scaling); `>= 0`.
    clip_norm: `S`, the L2 clip of each client update (`> 0`).
    clients_per_round: `n`, the expected cohort size: each client adds a share of std
      `sigma S / sqrt(n)`.
    bits: SecAgg bit-width (1-22; TFF's `ddp_secure_aggregator` uses 20).
    rotation_type: `hd` (randomised Hadamard, TFF's learning default) or `dft`.
    beta: Conditional randomised rounding bias in `[0, 1)` (0: unconditional).
    modclip_prob: Target probability of modular wrap-around.

  Returns:
    An unweighted factory (`UnweightedMeanFactory(DistributedDpSumFactory, secure count)`).

  Raises:
    ValueError: As `DistributedDpSumFactory` (bits too small for `n`, bad ranges).
  """
  return tff.aggregators.UnweightedMeanFactory(
      value_sum_factory=distributed_dp.DistributedDpSumFactory(
          noise_multiplier=noise_multiplier, expected_clients_per_round=clients_per_round,
          bits=bits, l2_clip=clip_norm, modclip_prob=modclip_prob, beta=beta,
          mechanism='distributed_dgauss', rotation_type=rotation_type, auto_l2_clip=False),
      count_sum_factory=tff.aggregators.SecureSumFactory(
          upper_bound_threshold=1, lower_bound_threshold=0))


def ddgauss_measurements(metrics) -> dict:
  """The DDP sum's measurements in a round's metrics (`l2_clip`, `scale_factor`,
  `scaled_inflated_l2`, `scaled_local_stddev`, `actual_num_clients`, `padded_dim`)."""
  return metrics['aggregator']['mean_value']


def stated_event(noise_multiplier: float, clip_norm: float, clients_per_round: int,
                 dim: int, bits: int = 20, rotation_type: str = 'hd', beta: float = 0.0,
                 modclip_prob: float = 1e-4) -> privacy.DistributedDiscreteGaussianDpEvent:
  """The DP event of one release of `ddgauss_factory(...)` on a `dim`-vector, `n` shares.

  TFF's factory derives its DP query in Python when it is created (scale factor from the
  bit-width, rounding-inflated L2 bound, scaled local std): this creates it on a float32
  `[dim]` vector (the factory flattens any structure to one vector first) and reads the
  query from the initial state, computed in the current TFF context (tffdp's local one,
  `runtime.ensure_local_context()`, only when this process has installed none: the
  context in use is never switched).
  """
  runtime.ensure_local_context()
  proc = ddgauss_factory(noise_multiplier, clip_norm, clients_per_round, bits,
                         rotation_type, beta, modclip_prob).create(
      tff.TensorType(np.float32, [dim]))
  query = _query_state(proc.initialize())
  return privacy.DistributedDiscreteGaussianDpEvent(
      l2_sensitivity=float(query.l2_norm_bound), local_stddev=float(query.local_stddev),
      num_clients=int(clients_per_round), dim=padded_dim(dim, rotation_type))


def calibrate_noise_multiplier(epsilon: float, delta: float, rounds: int, clip_norm: float,
                               clients_per_round: int, dim: int, bits: int = 20,
                               rotation_type: str = 'hd', tol: float = 1e-4,
                               **kwargs) -> float:
  """The smallest central sigma whose DDGauss accountant gives `epsilon` after `rounds`.

  Client-level, every client in every round (`q = 1`), `stated_event` composed `rounds`
  times by `privacy.PrivacyLedger`; bisection from the continuous Gaussian's sigma
  (the rounding inflation only raises the sigma needed), to relative `tol`.

  Raises:
    ValueError: If even 4x the Gaussian sigma does not reach `epsilon`.
  """
  ledger = privacy.PrivacyLedger(1, delta, privacy.CLIENT_LEVEL)

  def eps(sigma):
    e = stated_event(sigma, clip_norm, clients_per_round, dim, bits, rotation_type,
                     **kwargs)
    return privacy.epsilon_from_rdp(ledger.orders, rounds * ledger.event_rdp(e), delta)

  lo = privacy.calibrate_noise_multiplier(epsilon, delta, 1.0, rounds)
  hi = lo * 1.01
  while eps(hi) > epsilon:
    lo, hi = hi, hi * 1.1
    if hi > 4 * lo:
      raise ValueError(f'no sigma up to {hi} reaches epsilon {epsilon}.')
  while (hi - lo) / hi > tol:
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if eps(mid) <= epsilon else (mid, hi)
  return hi


def _query_state(state):
  """The DP query state (`l2_norm_bound`, `local_stddev`) nested in a DDP aggregator state."""
  if hasattr(state, 'l2_norm_bound') and hasattr(state, 'local_stddev'):
    return state
  children = (state.values() if isinstance(state, collections.abc.Mapping) else
              state if isinstance(state, (tuple, list)) else ())
  for child in children:
    found = _query_state(child)
    if found is not None:
      return found
  return None


@dataclasses.dataclass(frozen=True)
class DDGaussLedgers:
  """DDGauss's releases in both ledgers and the check of each round against the DP query
  TFF's aggregator states it ran with (`ddgauss_measurements`).

  Attributes:
    stated: The event of one release (`stated_event`), for `clients_per_round` shares.
    clients_per_round: `n`, the shares the claimed analysis assumes.
  """
  stated: privacy.DistributedDiscreteGaussianDpEvent
  clients_per_round: int

  def event(self, n: int) -> privacy.DistributedDiscreteGaussianDpEvent:
    """The event of a release summing `n` clients' noise shares."""
    return dataclasses.replace(self.stated, num_clients=int(n))

  def claimed(self, cohort, state=None) -> common.Releases:
    """Every round the `n` shares the mechanism is built for."""
    del state
    return [(cohort, self.event(self.clients_per_round), '')]

  def guaranteed(self, cohort, state=None) -> common.Releases:
    """The shares of the clients that took part (fewer shares: less noise)."""
    del state
    return [(cohort, self.event(len(cohort)), '')] if len(cohort) else []

  def executed(self, cohort, state, metrics) -> common.Releases:
    """The release TFF's DDGauss aggregator states it ran (`ddgauss_measurements`: the
    scaled, rounding-inflated L2 bound, the scaled local std, the padded dimension and
    the shares summed), for the cohort; the runner checks it against `guaranteed`."""
    del state
    m = ddgauss_measurements(metrics)
    return [(cohort, privacy.DistributedDiscreteGaussianDpEvent(
        l2_sensitivity=float(m['scaled_inflated_l2']),
        local_stddev=float(m['scaled_local_stddev']), num_clients=int(m['actual_num_clients']),
        dim=int(m['padded_dim'])), '')]

  def round_failure(self, exc: BaseException) -> Optional[str]:
    """`Method.round_failure`: TFF's norm check failing means local training diverged."""
    if NORM_CHECK_MESSAGE not in str(exc):
      return None
    return (f'a client update reached the DDGauss aggregator non-finite: TFF\'s check '
            f'"{NORM_CHECK_MESSAGE} {self.stated.l2_sensitivity:g}" failed on the clipped, '
            'rounded update, which only a NaN/inf update (or one whose norm overflows '
            'float32) can do: local training diverged')


def round_metrics(metrics) -> dict:
  """The scaled query of a round (`Method.round_metrics`)."""
  m = ddgauss_measurements(metrics)
  return {'scale_factor': float(m['scale_factor']),
          'scaled_inflated_l2': float(m['scaled_inflated_l2']),
          'scaled_local_stddev': float(m['scaled_local_stddev'])}


def build_ddgauss(keras_builder, data: FederatedData, *, learning_rate: float,
                  batch_size: int, noise_multiplier: float, clip_norm: float,
                  clients_per_round: int, local_epochs: int = 1, seed: int = 0,
                  cohort_sampling: str = 'uniform',
                  hp: Optional['DDGaussHparams'] = None,
                  clients_per_slice: Optional[int] = None) -> common.Method:
  """DDGauss FedAvg (see module doc): local SGD, then `ddgauss_factory`, then `w -= mean`.

  `hp` holds DDGauss's own options (`DDGaussHparams`: SecAgg `bits`, `rotation_type`,
  rounding `beta`, `modclip_prob`; validated on creation; None takes their defaults,
  TFF's `ddp_secure_aggregator` settings). `clients_per_slice`: None (one TFF client per
  client) or 1 (cohort slices of one client, read by index tensors: each TFF client value
  is still one client's update, which the aggregator clips, quantises and noises). The
  other arguments are the shared settings.

  Raises:
    ValueError: On `noise_multiplier <= 0` (the event needs noise; use `fedavg`),
      `clients_per_slice` other than None or 1, or as `ddgauss_factory`.
  """
  common.check_one_client_per_slice('ddgauss', clients_per_slice)
  if noise_multiplier <= 0:
    raise ValueError(f'noise_multiplier must be positive for ddgauss (without noise it is '
                     f'quantised FedAvg). Found {noise_multiplier}.')
  hp = DDGaussHparams() if hp is None else hp
  bits, rotation_type, beta, modclip_prob = hp.bits, hp.rotation_type, hp.beta, hp.modclip_prob
  runtime.allow_deep_protos()
  batching = ShuffleBatch(batch_size, local_epochs)
  factory = ddgauss_factory(noise_multiplier, clip_norm, clients_per_round, bits,
                            rotation_type, beta, modclip_prob)
  process = common.compose_fedavg_style(
      keras_builder,
      client_work(keras_builder, data, learning_rate=learning_rate, dp_sgd='none',
                  batching=batching, clients_per_slice=clients_per_slice),
      factory, seed)
  dim = sum(int(np.prod(t.shape)) for t in common.weights_type_of(keras_builder).trainable)
  stated = stated_event(noise_multiplier, clip_norm, clients_per_round, dim, bits,
                        rotation_type, beta, modclip_prob)
  ledgers = DDGaussLedgers(stated, clients_per_round)
  run_round, round_computation = common.cohort_round(process, data, batching,
                                                     clients_per_slice)
  return common.Method(
      name='ddgauss', process=process, batching=batching, clients_per_slice=clients_per_slice,
      run_round=run_round, round_computation=round_computation,
      dp_unit=privacy.CLIENT_LEVEL, cohort_sampling=cohort_sampling,
      accounting=common.Accounting(ledgers.claimed, ledgers.guaranteed, ledgers.executed),
      round_metrics=round_metrics,
      round_failure=ledgers.round_failure,
      adaptive_quantities=lambda state: {'noise_multiplier': noise_multiplier,
                                         'clip_norm': clip_norm},
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           local_epochs=local_epochs, noise_multiplier=noise_multiplier,
                           clip_norm=clip_norm, clients_per_round=clients_per_round,
                           bits=bits, rotation_type=rotation_type, beta=beta,
                           modclip_prob=modclip_prob, padded_dim=stated.dim,
                           scaled_l2_sensitivity=stated.l2_sensitivity,
                           scaled_local_stddev=stated.local_stddev),
      notes=dict(accounting='client-level, Kairouz et al. 2021 Theorem 1 + Prop. 14 on '
                 'the DP query TFF states; no amplification by sampling (upper bound '
                 'when q < 1)',
                 secure_aggregation='simulated: secure sums compiled to plain sums',
                 noise_rng='TFF\'s DDGauss aggregator seeds its rotation and rounding from '
                 'the clock (tf.timestamp) and draws its noise shares with no seed tffdp '
                 'sets: runs are not bit-reproducible'))


# ----- registry ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DDGaussHparams(registry.MethodHparams):
  """DDGauss's own options (TFF's `DistributedDpSumFactory` arguments)."""
  default_cohort_sampling: typing.ClassVar[str] = 'uniform'
  cohort_sampling_note: typing.ClassVar[str] = (
      'uniform: a fixed cohort of n clients, the n noise shares the mechanism expects')

  bits: int = registry.option(
      20, 'SecAgg bit-width of the aggregate, 1-22',
      note='TFF\'s ddp_secure_aggregator default (Kairouz et al. 2021 use 12-20)')
  rotation_type: str = registry.option(
      'hd', 'random rotation before quantisation: hd (Hadamard) or dft', choices=ROTATIONS,
      note='TFF\'s ddp_secure_aggregator default')
  beta: float = registry.option(0.0, 'conditional randomised rounding bias, in [0, 1)',
                                note='TFF default (unconditional rounding)')
  modclip_prob: float = registry.option(1e-4, 'target modular wrap-around probability',
                                        note='TFF default')

  def __post_init__(self):
    super().__post_init__()
    if not 1 <= self.bits <= 22:
      raise ValueError(f'bits must be in 1-22. Found bits={self.bits!r}.')
    if not 0 <= self.beta < 1:
      raise ValueError(f'beta must be in [0, 1). Found beta={self.beta!r}.')
    if not 0 < self.modclip_prob < 1:
      raise ValueError(f'modclip_prob must be in (0, 1). Found {self.modclip_prob!r}.')

  def check_run(self, config) -> None:
    common.check_one_client_per_slice('ddgauss', config.clients_per_slice)



def _build(ctx: registry.BuildContext, hp: DDGaussHparams) -> common.Method:
  c = ctx.config
  return build_ddgauss(
      ctx.keras_builder, ctx.data, learning_rate=c.learning_rate, batch_size=c.batch_size,
      noise_multiplier=c.noise_multiplier, clip_norm=c.clip_norm,
      clients_per_round=c.clients_per_round, local_epochs=c.local_epochs, seed=c.seed,
      cohort_sampling=c.cohort_sampling, hp=hp, clients_per_slice=c.clients_per_slice)


METHODS = (registry.MethodSpec(
    'ddgauss', _build, DDGaussHparams,
    'DDGauss (Kairouz et al. 2021): FedAvg with TFF\'s distributed discrete Gaussian '
    'mechanism and (simulated) secure aggregation, client-level',
    shared_meanings=dict(clip_norm='per-update L2 clip S',
                         noise_multiplier='central sigma (shares sum to std sigma S)',
                         clients_per_round='n: expected cohort, the number of noise '
                         'shares'),
    slices_of_one=True),)
