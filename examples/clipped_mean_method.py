"""An example method on tffdp's public API: client-level DP with a seeded clipped mean.

A method is four parts; this module has one of each, in the order they depend on:

1. `ClippedMeanFactory`: the mechanism, a `tff.aggregators` factory that also states the
   `dp_accounting` event of one round it runs (`event`).
2. `ClippedMeanHparams`: the method's own options (`registry.option` fields).
3. `build`: `(registry.BuildContext, hparams) -> common.Method`, the TFF learning process
   plus the DP events the runner composes per round (`common.Accounting`'s `claimed` and
   `guaranteed`).
4. `SPEC` and `register()`: the registry line. Importing this module registers the method
   `clipped_mean`; after that `tffdp.runner.run(RunConfig.create(method='clipped_mean',
   ...))` runs it like a built-in method.

The mechanism is client-level DP-FedAvg (McMahan et al. 2018, "Learning Differentially
Private Recurrent Language Models", ICLR, Alg. 1 with the fixed-denominator estimator
`f_f`): each client's model update is clipped to L2 norm `S`, the server sums the clipped
updates, adds `N(0, (sigma S)^2)` per coordinate and divides by the expected cohort size
`K`. Each client takes part in a round independently with probability `q = K / N`
(Poisson cohort), so one round is `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` for
every client (RDP of the sampled Gaussian: Mironov, Talwar & Zhang 2019). The built-in
`dp_fedavg` is the same mechanism on TFF's `DifferentiallyPrivateFactory`; here it is
written out as a plain aggregation process, its noise drawn from a stateless seed of the
run seed, so a run (and a resumed one) repeats bit for bit.

Run it (toy size; prints the final accuracy and both epsilons):

    python -m examples.clipped_mean_method --dataset synthetic
    python -m examples.clipped_mean_method --dataset mnist --data-dir DIR
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import tempfile
import typing

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # before TensorFlow: quiet its C++ log

import dp_accounting  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import config as config_lib
from tffdp import privacy, queries, runner, runtime
from tffdp.algorithms import baselines, common, registry
from tffdp.data.federated import ShuffleBatch
from tffdp.data.loaders import DATASETS, DataError

NAME = 'clipped_mean'
# Second word of the server noise's base seed `[seed, NOISE_SALT]`: negative, so no
# `tffdp.seeds.client_seeds` entry (second word a client id >= 0) shares its stream.
NOISE_SALT = -2


class ClippedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Clips each client value to L2 norm `S`, sums, adds `N(0, (sigma S)^2)`, divides by `K`.

  The result is `(sum_i v_i min(1, S / ||v_i||) + z) / K`, with `||v_i||` the global L2
  norm over all tensors of client `i`'s value and `z` drawn on the server by
  `tffdp.queries.GaussianSumQuery(sigma, S).add_noise` from the stateless seed
  `stateless_fold_in([seed, NOISE_SALT], t)`, `t` the rounds run so far. The same query
  states the DP event (`event`). Adding or removing one client changes the sum by at most
  `S` in L2 norm; dividing by the constant `K` is post-processing.

  Process types, for a value type `V` (a structure of float32 tensors of any shapes):
  state `<seed=int64[2], round=int64>@SERVER`; `next(state, V@CLIENTS) -> <state, V@SERVER,
  measurements=<clipped=int32>@SERVER>`, `clipped` the number of clients whose value
  had norm `> S`.

  Args:
    noise_multiplier: sigma, `>= 0`, rounded to float32 (the value the noise is drawn
      with, and the one `event` states).
    clip_norm: S, `> 0`, in the units of the values (here model-weight deltas).
    expected_clients: K, `> 0`, the constant denominator (the expected cohort size).
    seed: The run seed (int).

  Raises:
    ValueError: If `noise_multiplier < 0`, `clip_norm <= 0` or `expected_clients <= 0`,
      or one of them is not finite.
  """

  def __init__(self, noise_multiplier: float, clip_norm: float, expected_clients: float,
               seed: int = 0):
    if not (0 <= noise_multiplier < np.inf and 0 < clip_norm < np.inf
            and 0 < expected_clients < np.inf):
      raise ValueError('need finite noise_multiplier >= 0, clip_norm > 0 and '
                       f'expected_clients > 0. Found {noise_multiplier}, {clip_norm}, '
                       f'{expected_clients}.')
    self.query = queries.GaussianSumQuery(float(np.float32(noise_multiplier)),
                                          float(clip_norm))
    self.expected_clients, self.seed = float(expected_clients), int(seed)

  def event(self, sampling_rate: float) -> dp_accounting.DpEvent:
    """One round's event: `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` for `q < 1`,
    `GaussianDpEvent(sigma)` for `q = 1` (`privacy.subsampled_gaussian_event`)."""
    return self.query.event(sampling_rate)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    query, k, seed = self.query, self.expected_clients, self.seed

    @tff.tensorflow.computation
    def initial_state():
      return collections.OrderedDict(seed=tf.constant([seed, NOISE_SALT], tf.int64),
                                     round=tf.constant(0, tf.int64))

    @tff.federated_computation
    def init_fn():
      return tff.federated_eval(initial_state, tff.SERVER)

    @tff.tensorflow.computation(value_type)
    def clip(value):
      clipped, norm = tf.clip_by_global_norm(tf.nest.flatten(value), query.l2_norm_clip)
      return (tf.nest.pack_sequence_as(value, clipped),
              tf.cast(norm > query.l2_norm_clip, tf.int32))

    @tff.tensorflow.computation(initial_state.type_signature.result,
                                clip.type_signature.result[0])
    def noised_mean(state, total):
      noise_seed = tf.random.experimental.stateless_fold_in(state['seed'], state['round'])
      noised = query.add_noise(tf.nest.flatten(total), noise_seed)
      return (collections.OrderedDict(seed=state['seed'], round=state['round'] + 1),
              tf.nest.pack_sequence_as(total, [x / k for x in noised]))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      clipped, was_clipped = tff.federated_map(clip, value)
      state, mean = tff.federated_map(noised_mean, (state, tff.federated_sum(clipped)))
      measurements = tff.federated_zip(collections.OrderedDict(
          clipped=tff.federated_sum(was_clipped)))
      return tff.templates.MeasuredProcessOutput(state, mean, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


@dataclasses.dataclass(frozen=True)
class ClippedMeanHparams(registry.MethodHparams):
  """Options of `clipped_mean`. sigma, `S` and `K` are the shared `noise_multiplier`,
  `clip_norm` and `clients_per_round`; the clients run local SGD (`learning_rate`,
  `batch_size`, `local_epochs`).

  Attributes:
    server_learning_rate: eta_s (float, `> 0`), the server SGD step on the noised mean
      update: `w <- w - eta_s * mean`.
  """
  default_cohort_sampling: typing.ClassVar[str] = 'poisson'
  cohort_sampling_note: typing.ClassVar[str] = 'poisson (q = K / N), as its DP event assumes'

  server_learning_rate: float = registry.option(
      1.0, 'server SGD learning rate eta_s on the noised mean update',
      note='not tuned: 1 is FedAvg\'s step (McMahan et al. 2018 tune it)')

  def __post_init__(self):
    super().__post_init__()
    if not self.server_learning_rate > 0:
      raise ValueError('server_learning_rate must be positive. '
                       f'Found server_learning_rate={self.server_learning_rate!r}.')

  def check_run(self, config) -> None:
    """Raises `ValueError` for cohort slices (the aggregator must see each client's update
    to clip it) or a uniform cohort (its Poisson event would not hold)."""
    if config.clients_per_slice is not None or config.cohort_sampling == 'uniform':
      raise ValueError(f'{NAME} needs one update per client and a poisson (or all) cohort. '
                       f'Found clients_per_slice={config.clients_per_slice!r}, '
                       f'cohort_sampling={config.cohort_sampling!r}.')


def build(ctx: registry.BuildContext, hp: ClippedMeanHparams) -> common.Method:
  """The `clipped_mean` method of a run.

  Args:
    ctx: The run's context: `ctx.config` holds the shared settings (sigma =
      `noise_multiplier`, `S` = `clip_norm`, `K` = `clients_per_round`, the clients'
      `learning_rate`, `batch_size`, `local_epochs`, the run `seed`), `ctx.data` the
      clients' data, `ctx.keras_builder` the model.
    hp: The method's own options.

  Returns:
    A `common.Method` whose every round is, for every client (Poisson cohort), one
    `PoissonSampledDpEvent(K / N, GaussianDpEvent(sigma))` in both ledgers; with
    `noise_multiplier=0` no finite guarantee (`inf`).
  """
  c, data = ctx.config, ctx.data
  factory = ClippedMeanFactory(c.noise_multiplier, c.clip_norm, c.clients_per_round, c.seed)
  work = baselines.client_work(ctx.keras_builder, data, learning_rate=c.learning_rate,
                               dp_sgd='none')
  process = common.compose_fedavg_style(
      ctx.keras_builder, work, factory, c.seed,
      tff.learning.optimizers.build_sgdm(learning_rate=hp.server_learning_rate))
  batching = ShuffleBatch(c.batch_size, c.local_epochs)
  run_round, round_computation = common.cohort_round(process, data, batching)
  everyone, q = np.arange(data.num_clients), c.clients_per_round / data.num_clients

  def releases(cohort, state):  # [(clients, DpEvent or None, reason)]; Poisson: everyone
    del cohort, state
    if factory.query.noise_multiplier == 0:
      return [(everyone, None, 'noise multiplier is 0: no noise, no finite guarantee')]
    return [(everyone, factory.event(q), '')]

  return common.Method(
      name=NAME, process=process, batching=batching, dp_unit=privacy.CLIENT_LEVEL,
      cohort_sampling=c.cohort_sampling, run_round=run_round,
      round_computation=round_computation,
      accounting=common.Accounting(claimed=releases, guaranteed=releases),
      round_metrics=lambda m: {'clipped_clients': int(m['aggregator']['clipped'])},
      adaptive_quantities=lambda state: {}, hyperparameters=dataclasses.asdict(hp))


SPEC = registry.MethodSpec(
    NAME, build, ClippedMeanHparams,
    'example: client-level DP-FedAvg, seeded clipped-mean aggregator (McMahan et al. 2018)',
    shared_meanings=dict(clip_norm='per-update clipping norm S',
                         noise_multiplier='server sigma (noise std sigma S on the sum)'))


def register() -> registry.MethodSpec:
  """Adds `SPEC` to tffdp's registry; a no-op if it is there already.

  Raises:
    ValueError: If another method already has the name `clipped_mean`.
  """
  if NAME not in registry.names() or registry.get(NAME) is not SPEC:
    registry.register(SPEC)
  return SPEC


register()  # the registry line: importing this module makes `--method clipped_mean` known


def main(argv=None) -> int:
  """Runs `clipped_mean` at toy size and prints its summary; returns the exit code
  (0 done, 2 bad arguments or missing data)."""
  p = argparse.ArgumentParser(prog='python -m examples.clipped_mean_method',
                              description='Run the example method at toy size.')
  p.add_argument('--dataset', default='mnist', choices=DATASETS)
  p.add_argument('--data-dir', help='folder with one folder per dataset (not for synthetic)')
  p.add_argument('--out', help='output folder (default: a new temporary folder)')
  p.add_argument('--rounds', type=int, default=5)
  p.add_argument('--noise-multiplier', type=float, default=1.0, help='sigma')
  args = p.parse_args(argv)
  cfg = config_lib.RunConfig.create(
      method=NAME, dataset=args.dataset, data_dir=args.data_dir, rounds=args.rounds,
      out=args.out or tempfile.mkdtemp(prefix='tffdp-clipped-mean-'),
      noise_multiplier=args.noise_multiplier, clip_norm=1.0, clients=100,
      clients_per_round=20, partition='iid', model='logistic_regression', batch_size=50,
      learning_rate=0.1, num_validation=500, checkpoint_every=args.rounds)
  runtime.use_local_context()
  try:
    summary = runner.run(cfg, log=print)
  except (DataError, runner.ResumeError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  finally:
    runtime.shutdown_workers()
  print(f'{NAME} on {args.dataset}, {summary["rounds_completed"]} rounds, out {cfg.out}: '
        f'final test accuracy {summary["final_test_accuracy"]:.4f}, epsilon_claimed '
        f'{summary["epsilon_claimed"]}, epsilon_guaranteed {summary["epsilon_guaranteed"]} '
        f'(delta {summary["delta"]:g}, {summary["dp_unit"]})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
