"""AADP-FL: budget by data volume, longitudinal clipping, Nadam-moment budget increase.

Paper: "AADP-FL" (`../shared/papers/001_eb1ccabc0a8cbe35.txt`, Sec. 4.1 steps 1-8,
Sec. 4.3, eqs. 2-3, Theorem 1); spec `aadp_fl.md`, whose Amendments override its body.
Per round:

1. every client joins with probability `q_user` (Poisson; default 1: everyone);
2. a client runs non-private local SGD from the broadcast model (learning rate 0.01,
   batch `B`, `local_epochs`) and uploads its delta;
3. the aggregator (`aggregators.longitudinal_clipping_factory` around
   `aggregators.PerClientGaussianFactory` around the unweighted mean) zeroes the
   smallest-magnitude coordinates of each delta until its L2 norm is `<= S` (Sec. 4.3),
   adds `N(0, (sigma_i S / B)^2)` per coordinate (Amendment 1; `noise_scale='update'`:
   `sigma_i S`) and averages;
4. the server applies Nadam (beta 0.9 / 0.999, lr 0.01) with the mean as its
   pseudo-gradient (`optimizers.build_nadam`);
5. the convergence test (eq. 3): if the root mean square of the change of both Nadam
   moments is below `l`, every client whose budget is below `epsilon_max` has it raised
   to `epsilon_i / (1 - rho)`.

Budgets start at eq. 2, `epsilon_i = n d_i / sum_j d_j * epsilon`. `sigma_i` is the
smallest noise multiplier whose `T` rounds of the Poisson-subsampled Gaussian with
`q_i = B / d_i` meet `(epsilon_i, delta)` by Theorem 1 (integer RDP orders 2-256, the
classic conversion of the paper's Def. 4; Amendment 2); it is recalibrated whenever a
budget changes. A client's budget and sigma depend on its sample count only, so they are
kept per distinct sample count.

The process state is `<learning=LearningAlgorithmState, budget=<budgets float32[u],
rms_first_moment_change, rms_second_moment_change, increases int32>>@SERVER` with `u`
distinct client sizes; the sigma table is in the aggregator state
(`learning.aggregator.inner_agg.per_client_noise.noise_multipliers`). The budget step
runs inside the TFF process (server placement); the recalibration of sigma from a changed
budget runs between rounds (`dp_accounting` is Python) and writes the table back into the
state, so a checkpoint holds both and a resumed run continues exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import typing
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, optimizers, privacy, seeds
from tffdp.algorithms import common, registry
from tffdp.algorithms.baselines import client_work as dp_sgd_client_work
from tffdp.data.federated import FederatedData, ShuffleBatch

# Theorem 1 / Def. 4: integer RDP orders 2..256 (Amendment 2).
THEOREM1_ORDERS: tuple[float, ...] = tuple(float(a) for a in range(2, 257))
NOISE_SCALES = ('batch', 'update', 'none')
NOISE_ON = aggregators.NOISE_ON
KEPT_REASON = aggregators.KEPT_REASON


def data_volume_budgets(sizes, epsilon: float) -> np.ndarray:
  """Eq. 2: `epsilon_i = n d_i / sum_j d_j * epsilon` (mean budget `epsilon`).

  Args:
    sizes: `[n]` client sample counts `d_i` (positive).
    epsilon: The mean budget, `> 0`.

  Returns:
    float64 `[n]` budgets summing to `n * epsilon`.

  Raises:
    ValueError: On an empty or non-positive `sizes` or `epsilon <= 0`.
  """
  d = np.asarray(sizes, dtype=np.float64)
  if d.size == 0 or np.any(d <= 0):
    raise ValueError(f'client sizes must be positive. Found {d.tolist()[:10]}.')
  if epsilon <= 0:
    raise ValueError(f'epsilon must be positive. Found epsilon={epsilon!r}.')
  return d.size * d / d.sum() * epsilon


@functools.lru_cache(maxsize=4096)
def theorem1_noise_multiplier(epsilon: float, delta: float, sampling_rate: float,
                              rounds: int) -> float:
  """Theorem 1: the smallest sigma giving `(epsilon, delta)` after `rounds` releases.

  Each release is a Poisson-subsampled Gaussian with rate `q_i = B / d_i`, composed by
  RDP at integer orders 2-256 and converted with Def. 4 (`privacy.CLASSIC_CONVERSION`);
  `dp_accounting.calibrate_dp_mechanism` bisects (tolerance 1e-4 in sigma). Cached.

  Raises:
    ValueError: On invalid arguments (see `privacy.calibrate_noise_multiplier`).
  """
  return privacy.calibrate_noise_multiplier(
      float(epsilon), delta, float(sampling_rate), int(rounds), THEOREM1_ORDERS,
      privacy.CLASSIC_CONVERSION)


def _rms(a, b) -> tf.Tensor:
  a, b = tf.nest.flatten(a), tf.nest.flatten(b)
  sq = tf.add_n([tf.reduce_sum(tf.square(x - y)) for x, y in zip(a, b)])
  n = sum(int(np.prod(x.shape)) for x in a)
  return tf.sqrt(sq / float(max(n, 1)))


def budget_increase_step(budgets, rms_first, rms_second, *, l: float, rho: float,
                         epsilon_max: float, cap_at_max: bool):
  """Eq. 3: raise every budget below `epsilon_max` by `1 / (1 - rho)` if both moments settled.

  The test fires when `rms(m_t - m_{t-1}) < l` and `rms(n_t - n_{t-1}) < l`. The paper
  checks `epsilon_i^{t-1} < epsilon_max`, so a budget may overshoot `epsilon_max` by up
  to a factor `1 / (1 - rho)` (Amendment 3); `cap_at_max` clips it at `epsilon_max`.

  Args:
    budgets: float32 `[u]` budgets `epsilon_i^{t-1}`.
    rms_first, rms_second: float32 scalars, rms change of the Nadam moments.
    l, rho, epsilon_max, cap_at_max: As `AADPFLHparams`.

  Returns:
    `(new budgets float32 [u], fired bool)`.
  """
  fired = tf.logical_and(rms_first < l, rms_second < l)
  raised = budgets / (1.0 - rho)
  if cap_at_max:
    raised = tf.minimum(raised, epsilon_max)
  new = tf.where(tf.logical_and(fired, budgets < epsilon_max), raised, budgets)
  return new, fired


def with_budget_increase(inner: tff.learning.templates.LearningProcess, initial_budgets,
                         *, l: float, rho: float, epsilon_max: float,
                         cap_at_max: bool) -> tff.learning.templates.LearningProcess:
  """Eq. 3 around a learning process whose finalizer is `optimizers.build_nadam`.

  State `<learning=inner state, budget=<budgets, rms_first_moment_change,
  rms_second_moment_change, increases>>@SERVER`; each round runs `inner.next`, compares
  the Nadam moments (`accumulator` m, `preconditioner` n) of the finalizer state before
  and after, and applies `budget_increase_step`. Metrics `<learning=..., budget=...>`.
  """
  initial = np.asarray(initial_budgets, np.float32)
  inner_state_type = inner.initialize.type_signature.result.member

  @tff.tensorflow.computation
  def initial_budget():
    return collections.OrderedDict(budgets=tf.constant(initial),
                                   rms_first_moment_change=tf.constant(0.0),
                                   rms_second_moment_change=tf.constant(0.0),
                                   increases=tf.constant(0, tf.int32))

  budget_type = initial_budget.type_signature.result

  @tff.tensorflow.computation(inner_state_type, inner_state_type, budget_type)
  def test(before, after, budget):
    m0, m1 = before.finalizer[optimizers.ACCUMULATOR], after.finalizer[optimizers.ACCUMULATOR]
    n0 = before.finalizer[optimizers.PRECONDITIONER]
    n1 = after.finalizer[optimizers.PRECONDITIONER]
    rms_m, rms_n = _rms(m1, m0), _rms(n1, n0)
    new, fired = budget_increase_step(budget['budgets'], rms_m, rms_n, l=l, rho=rho,
                                      epsilon_max=epsilon_max, cap_at_max=cap_at_max)
    return collections.OrderedDict(
        budgets=new, rms_first_moment_change=rms_m, rms_second_moment_change=rms_n,
        increases=budget['increases'] + tf.cast(
            tf.reduce_any(tf.not_equal(new, budget['budgets'])), tf.int32))

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict(
        learning=inner.initialize(), budget=tff.federated_eval(initial_budget, tff.SERVER)))

  state_type = init_fn.type_signature.result
  data_type = inner.next.type_signature.parameter[1]

  @tff.federated_computation(state_type, data_type)
  def next_fn(state, client_data):
    out = inner.next(state.learning, client_data)
    budget = tff.federated_map(test, (state.learning, out.state, state.budget))
    return tff.learning.templates.LearningProcessOutput(
        tff.federated_zip(collections.OrderedDict(learning=out.state, budget=budget)),
        tff.federated_zip(collections.OrderedDict(learning=out.metrics, budget=budget)))

  return common.wrapped_learning_process(init_fn, next_fn, 'budget')


def _aggregator_path(state):
  return state['learning'].aggregator['inner_agg']['per_client_noise']


def noise_multipliers_of(state) -> np.ndarray:
  """The sigma table (`[u]`, per distinct client size) the next round adds noise with."""
  return np.asarray(_aggregator_path(state)['noise_multipliers'], np.float64)


def budgets_of(state) -> np.ndarray:
  return np.asarray(state['budget']['budgets'], np.float64)


def _check_arguments(clip_norm: float, rounds: int, delta: float) -> None:
  """Raises ValueError unless `clip_norm > 0`, `rounds > 0` and `delta` is in (0, 1)."""
  if clip_norm <= 0:
    raise ValueError(f'clip_norm S must be positive. Found clip_norm={clip_norm!r}.')
  if rounds <= 0:
    raise ValueError(f'rounds must be positive. Found rounds={rounds!r}.')
  privacy.check_delta(delta)


@dataclasses.dataclass(frozen=True)
class SizeTable:
  """Eq. 2's budgets by client size: they depend on `d_i` only, so the noise table has one
  entry per distinct size (`u` of them).

  Attributes:
    client_budgets: float64 `[N]`, eq. 2's `epsilon_i` of every client.
    unique_sizes: int64 `[u]`, the distinct `d_i`, ascending.
    client_key: int64 `[N]`, each client's entry in `unique_sizes`.
    initial_budgets: float64 `[u]`, the budget of each entry.
    rates: float64 `[u]`, Theorem 1's sampling rate `q_i = min(1, B / d_i)` of each entry.
  """
  client_budgets: np.ndarray
  unique_sizes: np.ndarray
  client_key: np.ndarray
  initial_budgets: np.ndarray
  rates: np.ndarray

  @classmethod
  def of(cls, client_sizes, epsilon: float, batch_size: int) -> 'SizeTable':
    """The table of clients of `client_sizes` (`[N]`) at mean budget `epsilon`, batch `B`."""
    sizes = np.asarray(client_sizes, np.int64)
    client_budgets = data_volume_budgets(sizes, epsilon)
    unique_sizes, client_key = np.unique(sizes, return_inverse=True)
    initial_budgets = client_budgets[
        [np.flatnonzero(client_key == j)[0] for j in range(len(unique_sizes))]]
    return cls(client_budgets, unique_sizes, client_key, initial_budgets,
               np.minimum(1.0, batch_size / unique_sizes))


def theorem1_table(budgets, *, rates, delta: float, rounds: int) -> np.ndarray:
  """Theorem 1's sigma per distinct client size, as float32 (what the clients use).

  Args:
    budgets: `[u]` budgets `epsilon_i` (rounded to float32 first, as the state holds them).
    rates: `[u]` sampling rates `q_i = B / d_i`.
    delta, rounds: As `theorem1_noise_multiplier`.

  Returns:
    float32 `[u]`.
  """
  return np.array([theorem1_noise_multiplier(float(np.float32(b)), delta, float(q), rounds)
                   for b, q in zip(budgets, rates)], np.float32)


def recalibrated(state, calibrate):
  """`state` with its sigma table recomputed from its budgets by `calibrate` (`[u]` budgets
  -> float32 `[u]` sigmas); the same object when nothing changed (recalibration is
  cached, and only a budget increase costs)."""
  table = calibrate(budgets_of(state))
  if np.array_equal(table, noise_multipliers_of(state).astype(np.float32)):
    return state
  learning = state['learning']
  return collections.OrderedDict(
      learning=learning._replace(aggregator=aggregators.with_noise_multipliers(
          learning.aggregator, table)),
      budget=state['budget'])


def run_round(cohort_run_round, calibrate, state, cohort, round_num, run_seed):
  """`Method.run_round`: the cohort's round (`cohort_run_round`, see `common.cohort_round`),
  the clipping norm it measured added to the metrics (`update_norm`), then the sigma
  table recalibrated from the budgets the round left (`recalibrated`)."""
  state, metrics = cohort_run_round(state, cohort, round_num, run_seed)
  metrics = collections.OrderedDict(metrics)
  metrics['update_norm'] = float(state['learning'].aggregator['longitudinal_clipping_norm'])
  return recalibrated(state, calibrate), metrics


def poisson_cohort(num_clients: int, q_user: float, seed: int, round_num: int) -> np.ndarray:
  """Step 8: each client joins round `round_num` with probability `q_user` (everyone at
  1); the runner's Poisson draw (`seeds.COHORT` stream of `seed`), sorted indices."""
  if q_user >= 1.0:
    return np.arange(num_clients)
  rng = seeds.round_rng(seed, round_num, seeds.COHORT)
  return np.flatnonzero(rng.random(num_clients) < q_user)


@dataclasses.dataclass
class AADPFLLedgers:
  """AADP-FL's releases in both ledgers, and the check of each round against them.

  Attributes:
    client_key: int `[N]`, each client's index into the distinct client sizes.
    initial_sigmas: float32 `[u]`, the sigma per distinct size at the eq.-2 budgets.
    rates: `[u]`, Theorem 1's `q_i = B / d_i`.
    noise_per_sensitivity: Noise std per unit of sigma over the sensitivity `S`
      (`1 / B` with `noise_scale='batch'`, 1 with `update`, 0 with `none`).
    q_user, noise_scale, noise_on: As `build_aadp_fl`.
    noise: The `PerClientGaussianFactory` whose stated events `executed` reads.
  """
  client_key: np.ndarray
  initial_sigmas: np.ndarray
  rates: np.ndarray
  noise_per_sensitivity: float
  q_user: float
  noise_scale: str
  noise_on: str
  noise: aggregators.PerClientGaussianFactory

  def _members(self, j: int) -> np.ndarray:
    return np.flatnonzero(self.client_key == j)

  def claimed(self, cohort, state) -> common.Releases:
    """Theorem 1: every client, every round, `q_i = B / d_i`, the initial sigma_i."""
    del cohort, state
    if self.noise_scale == 'none':
      return [(np.arange(len(self.client_key)), None, 'noise_scale=none: no noise')]
    return [(self._members(j), privacy.subsampled_gaussian_event(float(s), float(q)), '')
            for j, (s, q) in enumerate(zip(self.initial_sigmas, self.rates))]

  def guaranteed(self, cohort, state) -> common.Releases:
    """Per round and client: the Gaussian on an update of L2 sensitivity S, noise std
    `sigma_i^t * per_multiplier`, amplified only by the Poisson draw `q_user`."""
    del cohort
    table = noise_multipliers_of(state)
    if self.noise_on == 'kept':
      return [(np.arange(len(self.client_key)), None, KEPT_REASON)]
    out = []
    for j, sigma in enumerate(table):
      z = float(sigma) * self.noise_per_sensitivity
      if z == 0:
        out.append((self._members(j), None, 'noise_scale=none: no noise'
                    if self.noise_scale == 'none' else 'noise multiplier is 0: no noise'))
      else:
        out.append((self._members(j), privacy.subsampled_gaussian_event(z, self.q_user), ''))
    return out

  def executed(self, cohort, state, metrics) -> common.Releases:
    """The round's guaranteed releases from the events the aggregator states
    (`PerClientGaussianFactory.executed_events`: one Gaussian per table entry), each
    amplified by the Poisson draw `q_user`, for every client of the entry."""
    del cohort, state
    out = []
    for j, (event, reason) in enumerate(self.noise.executed_events(_noise_metrics(metrics))):
      if event is None:
        out.append((self._members(j), None, 'noise_scale=none: no noise'
                    if self.noise_scale == 'none' and reason.startswith('noise multiplier is 0')
                    else reason))
      else:
        out.append((self._members(j), privacy.subsampled_gaussian_event(
            event.noise_multiplier, self.q_user), ''))
    return out

  def check_round(self, cohort, state, metrics) -> Optional[str]:
    """Which clients the aggregator states added noise (`PerClientGaussianFactory`'s
    `clients_per_key`) against the cohort (the events themselves are checked by the
    runner: `executed`). A canary client (audit) is noised as the client whose data it
    runs on."""
    del state
    keys = self.client_key[canaries.data_clients(cohort, len(self.client_key))]
    expected = np.bincount(keys, minlength=len(self.rates))
    counted = np.asarray(_noise_metrics(metrics)['clients_per_key'])
    if not np.array_equal(counted, expected):
      return (f'clients added noise per sigma-table entry {counted.tolist()}, the cohort '
              f'has {expected.tolist()}')
    return None


def _noise_metrics(metrics):
  """The `PerClientGaussianFactory` measurements of a round's metrics."""
  return metrics['learning']['aggregator']['longitudinal_clipping']['per_client_noise']


def adaptive_quantities(state, *, client_key: np.ndarray, clip_norm: float) -> dict:
  """The per-round sigma and budget ranges over clients, and the clients' root mean
  square sigma (`Method.adaptive_quantities`)."""
  table, budgets = noise_multipliers_of(state), budgets_of(state)
  per_client_sigma, per_client_budget = table[client_key], budgets[client_key]
  return {'noise_multiplier_min': float(per_client_sigma.min()),
          'noise_multiplier_max': float(per_client_sigma.max()),
          'noise_multiplier_rms': float(np.sqrt(np.mean(
              np.square(per_client_sigma, dtype=np.float64)))),
          'epsilon_budget_min': float(per_client_budget.min()),
          'epsilon_budget_max': float(per_client_budget.max()),
          'clip_norm': clip_norm}


def round_metrics(metrics) -> dict:
  """The eq.-3 test, clipping and noise measurements of a round (`Method.round_metrics`)."""
  agg = metrics['learning']['aggregator']
  noise = agg['longitudinal_clipping']['per_client_noise']
  budget = metrics['budget']
  return {'rms_first_moment_change': float(budget['rms_first_moment_change']),
          'rms_second_moment_change': float(budget['rms_second_moment_change']),
          'budget_increases': int(budget['increases']),
          'nonzero_fraction_after_clip': float(noise['nonzero_fraction']),
          'clipped_clients': int(agg['longitudinal_clipped_count']),
          'update_norm': float(metrics.get('update_norm', float('nan')))}


_NOT_GIVEN = 'not given in the paper; chosen because '
NOTES = dict(
    local_epochs=_NOT_GIVEN + 'one pass over the client data is the FedAvg default',
    epsilon_claimed='Theorem 1 as the paper reads it: every client every round, '
    'q_i = B / d_i, the initial sigma_i (budget increases ignored), integer RDP '
    'orders 2-256, Def. 4 conversion; the paper states it per sample',
    epsilon_guaranteed='client-level (an update of L2 norm <= S after longitudinal '
    'clipping; sample-level is bounded by the same): per round the Gaussian with '
    'noise multiplier sigma_i^t * (S/B) / S (noise_scale=batch) or sigma_i^t '
    '(update), amplified only by q_user; dp_accounting conversion',
    rdp_orders='integer orders 2-256 (Theorem 1, Amendment 2), both ledgers',
    noise_rng='per-client noise from TF\'s stateful RNG: runs are not bit-reproducible; '
    'sigma_i^t follows the budget increases, which follow the noisy model from round 2 '
    'on, so a rerun\'s epsilons are comparable in round 1 only')


def build_aadp_fl(keras_builder, data: FederatedData, *, rounds: int,
                  hp: Optional['AADPFLHparams'] = None, delta: float = 1e-5,
                  learning_rate: float = 0.01, batch_size: int = 32,
                  clip_norm: float = 0.25, local_epochs: int = 1,
                  seed: int = 0, clients_per_slice: Optional[int] = None) -> common.Method:
  """Builds AADP-FL (see the module docstring).

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' data; `data.client_sizes` are the `d_i` of eq. 2.
    rounds: `T` of Theorem 1 (the calibration horizon; the run's rounds).
    hp: AADP-FL's own options (`AADPFLHparams`, validated on creation; None takes their
      defaults): the mean budget `epsilon` of eq. 2 (Table 2: 4), Nadam's
      `server_learning_rate` (Sec. 6: 0.01) and `nadam_epsilon`, the participation
      probability `q_user`, eq. 3's increase rate `rho`, the convergence threshold `l`,
      the ceiling `epsilon_max` (Sec. 6: 20) and `cap_at_max` (Amendment 3), and the
      noise readings `noise_scale` (`batch`: `sigma_i S / B`, Amendment 1; `update`:
      `sigma_i S`; `none`: Fig. 5's clipping sweep, no finite guarantee) and `noise_on`
      (`all`, or `kept`: no finite guarantee).
    delta: Target delta (Sec. 6: 1e-5).
    learning_rate: Local SGD learning rate (Sec. 6: 0.01).
    batch_size: `B` (Sec. 6: 32 MNIST/FMNIST, 50 CIFAR-10), also the divisor of the
      noise (Amendment 1).
    clip_norm: `S` of longitudinal clipping (Fig. 5: 0.25 MNIST MLP, 0.2 CIFAR-10 CNN).
    local_epochs: Passes over the client data per round (not given: 1).
    seed: Model-initialisation and client-sampling seed.
    clients_per_slice: None (one TFF client per client, its batches a `tf.data`
      pipeline) or 1: cohort slices of one client, each read by index tensors
      (`dp_sgd.build_sliced_dp_sgd_client_work`; a round of 50 clients of 55 examples took
      0.65 s instead of 1.18 s, `benchmarks/README.md`). Each TFF client value is still one client's
      update and weight, so the aggregator clips and noises the same values.

  Returns:
    A `common.Method`.

  Raises:
    ValueError: On invalid hyperparameters, or `clients_per_slice` other than None or 1.
  """
  common.check_one_client_per_slice('aadp_fl', clients_per_slice)
  hp = AADPFLHparams() if hp is None else hp
  (epsilon, q_user, rho, l, epsilon_max, cap_at_max, noise_scale, noise_on,
   server_learning_rate, nadam_epsilon) = (
       hp.epsilon, hp.q_user, hp.rho, hp.l, hp.epsilon_max, hp.cap_at_max, hp.noise_scale,
       hp.noise_on, hp.server_learning_rate, hp.nadam_epsilon)
  _check_arguments(clip_norm, rounds, delta)
  table = SizeTable.of(data.client_sizes, epsilon, batch_size)
  calibrate = functools.partial(theorem1_table, rates=table.rates, delta=delta,
                                rounds=rounds)
  initial_sigmas = calibrate(table.initial_budgets)
  per_multiplier = {'batch': clip_norm / batch_size, 'update': clip_norm, 'none': 0.0}[
      noise_scale]
  noise = aggregators.PerClientGaussianFactory(
      local_epochs * table.unique_sizes, initial_sigmas, per_multiplier,
      tff.aggregators.UnweightedMeanFactory(), noise_on=noise_on, l2_sensitivity=clip_norm)
  aggregator = aggregators.longitudinal_clipping_factory(
      aggregators.norm_recording_constant(clip_norm), noise)
  client_key = table.client_key
  batching = ShuffleBatch(batch_size, local_epochs)
  inner = common.compose_fedavg_style(
      keras_builder,
      dp_sgd_client_work(keras_builder, data, learning_rate=learning_rate, dp_sgd='none',
                         batching=batching, clients_per_slice=clients_per_slice),
      aggregator, seed, server_optimizer=optimizers.build_nadam(
          server_learning_rate, epsilon=nadam_epsilon))
  process = with_budget_increase(inner, table.initial_budgets, l=l, rho=rho,
                                 epsilon_max=epsilon_max, cap_at_max=cap_at_max)
  cohort_run_round, round_computation = common.cohort_round(process, data, batching,
                                                            clients_per_slice)

  ledgers = AADPFLLedgers(client_key, initial_sigmas, table.rates,
                          per_multiplier / clip_norm,
                          q_user, noise_scale, noise_on, noise)
  return common.Method(
      name='aadp_fl', process=process, batching=batching, dp_unit=privacy.CLIENT_LEVEL,
      run_round=functools.partial(run_round, cohort_run_round, calibrate),
      round_computation=round_computation, cohort_sampling='poisson', participation_rate=q_user,
      select_cohort=functools.partial(poisson_cohort, data.num_clients, q_user, seed),
      clients_per_slice=clients_per_slice,
      accounting=common.Accounting(
          ledgers.claimed, ledgers.guaranteed, ledgers.executed, ledgers.check_round,
          claimed_conversion=privacy.CLASSIC_CONVERSION, rdp_orders=THEOREM1_ORDERS),
      adaptive_quantities=functools.partial(adaptive_quantities, client_key=client_key,
                                            clip_norm=clip_norm),
      round_metrics=round_metrics,
      hyperparameters=dict(
          rounds=rounds, epsilon=epsilon, delta=delta, learning_rate=learning_rate,
          server_learning_rate=server_learning_rate, nadam_epsilon=nadam_epsilon,
          batch_size=batch_size, clip_norm=clip_norm, local_epochs=local_epochs,
          q_user=q_user, rho=rho, l=l,
          epsilon_max=epsilon_max, cap_at_max=cap_at_max, noise_scale=noise_scale,
          noise_on=noise_on,
          initial_budgets=[float(b) for b in table.client_budgets],
          initial_noise_multipliers=[float(initial_sigmas[k]) for k in client_key]),
      notes=dict(NOTES))


# ----- registry ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AADPFLHparams(registry.MethodHparams):
  """AADP-FL's own options (Sec. 4.1, eqs. 2-3; Sec. 6 where the paper gives them)."""
  default_cohort_sampling: typing.ClassVar[str] = 'poisson'
  cohort_sampling_note: typing.ClassVar[str] = (
      'poisson: each client joins with probability q_user (AADP-FL step 8)')

  epsilon: float = registry.option(4.0, 'mean privacy budget epsilon of eq. 2 (Table 2: 4)')
  q_user: float = registry.option(
      1.0, 'probability q_user that a client joins a round, in (0, 1]',
      note=_NOT_GIVEN + 'Sec. 4.1 samples users but gives no rate outside Fig. 7; 1 '
      'makes Theorem 1 (which ignores it) and the executed rounds agree')
  rho: float = registry.option(0.1, 'budget increase rate rho of eq. 3, in (0, 1) '
                               '(Sec. 6: 0.1)')
  l: float = registry.option(  # pylint: disable=invalid-name
      1e-4, 'threshold l of the convergence test (eq. 3) on the rms change of the Nadam '
      'moments', note=_NOT_GIVEN + 'small enough that the test fires only when both '
      'Nadam moments have settled (Amendment 4: it measures noise; see the figures README)')
  epsilon_max: float = registry.option(20.0, 'budget ceiling epsilon_max (Sec. 6: 20)')
  cap_at_max: bool = registry.option(
      False, 'clip raised budgets at epsilon_max (the paper tests epsilon^{t-1} < '
      'epsilon_max, so a budget may overshoot it; Amendment 3)')
  noise_scale: str = registry.option(
      'batch', 'noise std per coordinate: batch (sigma_i S / B, Amendment 1), update '
      '(sigma_i S) or none (Fig. 5: clipping without noise)', choices=NOISE_SCALES)
  noise_on: str = registry.option(
      'all', 'noise on all coordinates, or only the kept ones (kept: support leaked, '
      'epsilon_guaranteed = inf)', choices=NOISE_ON)
  server_learning_rate: float = registry.option(0.01, 'Nadam learning rate (Sec. 6: 0.01)')
  nadam_epsilon: float = registry.option(
      1e-7, 'Nadam epsilon, added to the root of the second moment',
      note='not given in the paper; Keras\' default')

  def __post_init__(self):
    super().__post_init__()
    if self.epsilon <= 0:
      raise ValueError(f'epsilon must be positive. Found epsilon={self.epsilon!r}.')
    if not 0 < self.q_user <= 1:
      raise ValueError(f'q_user must be in (0, 1]. Found q_user={self.q_user!r}.')
    if not 0 < self.rho < 1:
      raise ValueError(f'rho must be in (0, 1). Found rho={self.rho!r}.')
    if self.l <= 0:
      raise ValueError(f'l must be positive. Found l={self.l!r}.')
    if self.epsilon_max < self.epsilon:
      raise ValueError(f'epsilon_max must be >= epsilon={self.epsilon!r}. '
                       f'Found epsilon_max={self.epsilon_max!r}.')
    if self.server_learning_rate <= 0:
      raise ValueError('server_learning_rate must be positive. Found '
                       f'server_learning_rate={self.server_learning_rate!r}.')
    if not self.nadam_epsilon > 0:
      raise ValueError('nadam_epsilon must be positive. Found '
                       f'nadam_epsilon={self.nadam_epsilon!r}.')

  def check_run(self, config) -> None:
    common.check_one_client_per_slice('aadp_fl', config.clients_per_slice)



def _build(ctx: registry.BuildContext, hp: AADPFLHparams) -> common.Method:
  c = ctx.config
  return build_aadp_fl(
      ctx.keras_builder, ctx.data, rounds=c.rounds, hp=hp, delta=c.delta,
      learning_rate=c.learning_rate, batch_size=c.batch_size, clip_norm=c.clip_norm,
      local_epochs=c.local_epochs, seed=c.seed, clients_per_slice=c.clients_per_slice)


METHODS = (registry.MethodSpec(
    'aadp_fl', _build, AADPFLHparams,
    'AADP-FL (spec aadp_fl.md): budget by data volume, longitudinal clipping, per-client '
    'Gaussian noise, Nadam, budget increase on converged moments',
    shared_meanings=dict(clip_norm='longitudinal clipping norm S',
                         learning_rate='local SGD learning rate (Sec. 6: 0.01)',
                         batch_size='B: local batch, sampling rate B/d_i, noise divisor',
                         noise_multiplier='unused: sigma_i is calibrated from the budget',
                         clients_per_round='unused: each client joins with q_user'),
    slices_of_one=True),)
