"""Canaries inside a TFF learning process (issue 40's audit).

**Client-level canaries** (Andrew et al. 2024, "One-shot Empirical Privacy Estimation
for Federated Learning", Sec. 3): a canary client's model update is a fixed random
direction `u_j` (a unit vector in `R^d`, drawn independently of everything else) times a
norm at least the clip norm. `with_canaries` wraps a method's client work so that each
client's value carries a canary index: `-1` for a real client (its update passes
unchanged), `j >= 0` for canary `j` (its update is replaced by `norm * u_j`). Everything
after the client work, the method's own aggregator (clipping, noise, weighting) and
server update, treats the canary's update like any other: nothing bypasses the mechanism
being audited.

**Sample-level gradient canaries**: canary `j` is an example of one host client whose
per-example gradient is `norm * u_j`; the DP-SGD client work (`tffdp.algorithms.dp_sgd`)
adds it to the host's steps as that example would enter them (`gradient_sum`), and scores
the host's upload against every `u_j` (`upload_projections`).

`canary_directions` gives the same `u_j` outside TFF, for the auditor's scores (the
cosine between `u_j` and a release, `tffdp.audit`).

In a run (`RunConfig.audit_canaries`, `--audit-canaries M`): while the method is built,
`inserting(...)` makes the method's client work take canaries (`wrap_client_work`, which
`tffdp.algorithms.common.compose_fedavg_style` calls, or the DP-SGD client work's gradient
canaries) and its cohort round take their indices (`common.cohort_round`, or a builder's
own). `Auditor` (client-level) draws which canaries are included (each with probability
1/2, Steinke et al. 2023 Sec. 3), which included canaries join each round (as a real
client does under Poisson sampling, rate `clients_per_round / clients`, or the method's
own `Method.participation_rate`), scores them from the released model deltas, and
reports the audit (`Auditor.report`); `GradientAuditor` does the same for gradient
canaries.
"""

from __future__ import annotations

import collections
import contextlib
import math
from typing import Iterator, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import audit
from tffdp.data.federated import PoissonLot, ShuffleBatch

NOT_A_CANARY = -1
# The audit's draws: `np.random.SeedSequence(seed, spawn_key=(AUDIT_STREAM, what, ...))`.
# A spawn key keeps them apart from every `default_rng([seed, ...])` of the run (NumPy
# treats `[seed, 2]` and `[seed, 2, 0]` alike: entropy lists would collide with
# `seeds.round_rng(seed, 2, COHORT)`).
AUDIT_STREAM = 2
_INCLUSION, _JOINS, _DIRECTIONS = 0, 1, 2


def audit_rng(seed: int, *key: int) -> np.random.Generator:
  """The audit's generator for `key` (`_INCLUSION`, or `_JOINS, round`)."""
  return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(AUDIT_STREAM, *key)))


def direction(seed: int, index: tf.Tensor, shapes: Sequence[Sequence[int]]) -> list[tf.Tensor]:
  """Canary `index`'s unit direction `u_j`, split into tensors of `shapes` (float32).

  Drawn from the stateless seed `(seed, index)`: `N(0, I_d)` normalised to norm 1 over
  all tensors together.
  """
  sizes = [int(np.prod(s)) for s in shapes]
  z = tf.random.stateless_normal([sum(sizes)], seed=tf.stack(
      [tf.constant(seed, tf.int64), tf.cast(index, tf.int64)]))
  z = z / tf.norm(z)
  return [tf.reshape(part, s) for part, s in zip(tf.split(z, sizes), shapes)]


def canary_directions(seed: int, count: int, shapes: Sequence[Sequence[int]]) -> np.ndarray:
  """`[count, d]` float32: each canary's unit direction, flattened in `shapes`' order."""
  return np.stack([np.concatenate([t.numpy().ravel() for t in direction(seed, j, shapes)])
                   for j in range(count)])


def with_canaries(client_work: tff.learning.templates.ClientWorkProcess, norm: float,
                  seed: int) -> tff.learning.templates.ClientWorkProcess:
  """`client_work` whose client data is `<data=D, canary=int32*>` (one element).

  Args:
    client_work: A client work process whose `next` takes `(state, weights, D@CLIENTS)`
      and whose result is a `ClientResult(update, update_weight)`.
    norm: The L2 norm of a canary's update (at least the clip norm, so that the
      aggregator's clip binds).
    seed: The audit seed of the directions (`direction`).

  Returns:
    A `ClientWorkProcess` with the same state, weights and result types: a client with
    `canary = -1` runs `client_work` as before; one with `canary = j >= 0` runs it too
    (same cost) and its update is then replaced by `norm * u_j` (its weight kept). Where
    the result's update is a struct with an `update` field (the model update beside
    other values a client sends, e.g. DP-FedAGS's loss and example count), only that
    field is replaced: the rest stay those of the data the canary ran on.

  Raises:
    ValueError: If `norm` is not positive.
  """
  if not norm > 0:
    raise ValueError(f'norm must be positive. Found {norm!r}.')
  state_type, weights_type, data_type = client_work.next.type_signature.parameter
  member = data_type.member
  result_type = client_work.next.type_signature.result.result.member
  # The model update: the result's `update`, or its `update.update` where the client
  # sends more (DP-FedAGS: `<update, loss, num_examples>`; those stay the client's own).
  names = tff.structure.name_list(result_type.update)
  nested = 'update' in names
  model_update = result_type.update.update if nested else result_type.update
  update_shapes = [t.shape for t in model_update]
  # TFF's client work takes sequences only: the index is a one-element sequence.
  wrapped = tff.StructType([('data', member),
                            ('canary', tff.SequenceType(tff.TensorType(np.int32)))])

  @tff.tensorflow.computation(wrapped)
  def data_of(value):
    return value['data']

  @tff.tensorflow.computation(wrapped)
  def canary_of(value):
    return value['canary'].reduce(tf.constant(NOT_A_CANARY), lambda _, x: x)

  @tff.tensorflow.computation(result_type, tff.TensorType(np.int32))
  def substitute(result, canary):
    update = list(result.update['update'] if nested else result.update)
    canary_update = [norm * u for u in direction(seed, tf.maximum(canary, 0), update_shapes)]
    chosen = tf.nest.map_structure(lambda c, u: tf.where(canary >= 0, c, u),
                                   canary_update, update)
    if nested:
      chosen = collections.OrderedDict(
          (k, chosen if k == 'update' else result.update[k]) for k in names)
    return tff.learning.templates.ClientResult(update=chosen,
                                               update_weight=result.update_weight)

  @tff.federated_computation(state_type, weights_type, tff.FederatedType(wrapped,
                                                                        tff.CLIENTS))
  def next_fn(state, weights, values):
    out = client_work.next(state, weights, tff.federated_map(data_of, values))
    result = tff.federated_map(substitute, (out.result, tff.federated_map(canary_of, values)))
    return tff.templates.MeasuredProcessOutput(out.state, result, out.measurements)

  return tff.learning.templates.ClientWorkProcess(client_work.initialize, next_fn)


def _value_with(client_data_comp: tff.Computation, name: str,
                extra_type: tff.Type) -> tff.Computation:
  """`(client id, seed, extra) -> <data=its dataset, <name>=<extra>*>` (a one-element
  sequence: TFF's client work takes sequences only)."""
  id_type, seed_type = client_data_comp.type_signature.parameter

  @tff.tensorflow.computation(id_type, seed_type, extra_type)
  def value(client_id, seed, extra):
    return collections.OrderedDict([('data', client_data_comp(client_id, seed)),
                                    (name, tf.data.Dataset.from_tensors(extra))])
  return value


def _round_with(process: tff.learning.templates.LearningProcess,
                value: tff.Computation) -> tff.Computation:
  """`(state, ids@CLIENTS, seeds@CLIENTS, extras@CLIENTS) -> process.next output`, each
  client's data `value(id, seed, extra)`."""
  state_type = process.next.type_signature.parameter[0]
  id_type, seed_type, extra_type = value.type_signature.parameter

  @tff.federated_computation(state_type, tff.FederatedType(id_type, tff.CLIENTS),
                             tff.FederatedType(seed_type, tff.CLIENTS),
                             tff.FederatedType(extra_type, tff.CLIENTS))
  def round_fn(state, client_ids, client_seeds, extras):
    return process.next(state, tff.federated_map(value, (client_ids, client_seeds, extras)))
  return round_fn


def client_value(client_data_comp: tff.Computation) -> tff.Computation:
  """`(client id, seed, canary index) -> <data=its dataset, canary=<index>*>`: a client's
  value for a client work wrapped by `with_canaries` (`client_data_comp`:
  `FederatedData.client_data_computation`)."""
  return _value_with(client_data_comp, 'canary', tff.TensorType(np.int32))


def cohort_round_computation(process: tff.learning.templates.LearningProcess,
                             client_data_comp: tff.Computation) -> tff.Computation:
  """One round of a canary-wrapped `process` on a cohort given by ids, seeds and canary
  indices: `(state, ids@CLIENTS, seeds@CLIENTS, canaries@CLIENTS) -> process.next output`.

  A canary client still needs data for the client work it replaces: give it any real
  client's id (its training is discarded).
  """
  return _round_with(process, client_value(client_data_comp))


# Sample-level gradient canaries: a canary *table* per client and round, int32 `[S, P]`:
# row `s` lists the canaries (indices `j >= 0`, padded with `NOT_A_CANARY`) whose gradient
# joins the host client's DP-SGD step `s`; any other client has `[[NOT_HOST]]`.
CANARY_TABLE = tff.TensorType(np.int32, [None, None])
NOT_HOST = -2


def no_canaries() -> np.ndarray:
  """The canary table of a client that is not the host."""
  return np.full((1, 1), NOT_HOST, np.int32)


def upload_projections(insertion: 'Insertion', table: tf.Tensor,
                       update: Sequence[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
  """Inside TF: `([m] float32, float32)`: the host's upload `update` projected on each
  canary direction `u_j`, and its L2 norm; zeros for a client that is not the host.

  What the server receives from the host (the release a sample-level guarantee covers),
  scored by the auditor as `cosine_j = projection_j / norm` (`GradientAuditor.observe`).
  Summed over the cohort by the client work's measurements, only the host's remain.
  """
  shapes = [u.shape for u in update]
  is_host = tf.not_equal(table[0, 0], NOT_HOST)

  def score():
    def one(j):
      return tf.add_n([tf.reduce_sum(u * t) for u, t in
                       zip(direction(insertion.seed, j, shapes), update)])
    return (tf.map_fn(one, tf.range(insertion.count), fn_output_signature=tf.float32),
            tf.linalg.global_norm(update))

  return tf.cond(is_host, score,
                 lambda: (tf.zeros([insertion.count], tf.float32), tf.constant(0.0)))


def step_canaries(table: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
  """Inside TF: int32 `[P]`, the canaries of DP-SGD step `step` (`NOT_A_CANARY` past the
  table's rows)."""
  rows = tf.shape(table)[0]
  row = tf.gather(table, tf.minimum(tf.cast(step, tf.int32), rows - 1))
  return tf.where(tf.cast(step, tf.int32) < rows, row, NOT_A_CANARY)


def gradient_sum(insertion: 'Insertion', indices: tf.Tensor,
                 shapes: Sequence[Sequence[int]], clip) -> list[tf.Tensor]:
  """Inside TF: the summed canary gradients of one DP-SGD step, shaped like `shapes`.

  Canary `j`'s gradient is `norm * u_j` (`direction(seed, j, shapes)`), a per-example
  gradient of the host client's step like any other: `clip(gradient)` gives what the
  step adds to its sum for it (the step's own per-example clipping, or the identity where
  the step does not clip examples). Entries `NOT_A_CANARY` add nothing.
  """
  zeros = [tf.zeros(s, tf.float32) for s in shapes]

  def add(acc, j):
    g = [insertion.norm * u for u in direction(insertion.seed, tf.maximum(j, 0), shapes)]
    g = clip(g)
    keep = tf.cast(j >= 0, tf.float32)
    return [a + keep * t for a, t in zip(acc, g)]
  return tf.foldl(add, indices, initializer=zeros)


def with_table_type(client_data_type: tff.Type) -> tff.StructType:
  """`<data=client_data_type, canary_steps=int32[S, P]*>`: a DP-SGD client's data in an
  audit with gradient canaries."""
  return tff.StructType([('data', client_data_type),
                         ('canary_steps', tff.SequenceType(CANARY_TABLE))])


def table_value(client_data_comp: tff.Computation) -> tff.Computation:
  """`(client id, seed, canary table) -> <data=its dataset, canary_steps=<table>*>`."""
  return _value_with(client_data_comp, 'canary_steps', CANARY_TABLE)


def gradient_round_computation(process: tff.learning.templates.LearningProcess,
                               client_data_comp: tff.Computation) -> tff.Computation:
  """One round of a process whose DP-SGD client work takes gradient canaries:
  `(state, ids@CLIENTS, seeds@CLIENTS, tables@CLIENTS) -> process.next output`, each
  client's value `<data=its dataset, canary_steps=<its table>*>`."""
  return _round_with(process, table_value(client_data_comp))


class Insertion:
  """Canaries asked for while a method is built (see `inserting`).

  Two kinds, fixed by what the method's build asks for first:

  - `client` (client-level canaries): `wrap_client_work` calls `wrap`
    (`tffdp.algorithms.common.compose_fedavg_style` does, and the DP-FedAGS and cosAFed
    builders); the cohort holds canary clients (`N + j`).
  - `gradient` (sample-level gradient canaries): a DP-SGD client work calls
    `take_gradients` and adds canary gradients to the host client's steps
    (`tffdp.algorithms.dp_sgd`, DP-SCAFFOLD, Adap DP-FL's lots);
    `compose_fedavg_style` then leaves the client work as it is. The runner sets `plan`
    (`GradientAuditor.tables`) before the first round.

  Attributes:
    norm: A canary update's (or gradient's) L2 norm.
    seed: The seed of the directions (`direction`).
    num_clients: `N`: cohort entries `>= N` are canaries (`N + j` is canary `j`).
    count: `m`, the number of canaries (gradient canaries: the host's upload is scored
      against each, `upload_projections`).
    kind: None (nothing took canaries yet), `client` or `gradient`.
    wrapped: How many client works took canaries (1 in an auditable method).
    rounds: How many cohort rounds took canaries (`round_computation`, or a builder's
      own canary round; 1 in an auditable method).
    plan: `(round, cohort) -> [int32 [S, P] per cohort client]`: each client's canary
      table (`GradientAuditor.tables`); set by the runner for `gradient` canaries.
  """

  def __init__(self, norm: float, seed: int, num_clients: int, count: int = 0):
    self.norm, self.seed, self.num_clients, self.count = norm, seed, num_clients, count
    self.kind: Optional[str] = None
    self.wrapped = self.rounds = 0
    self.plan = None

  def wrap(self, client_work):
    """`client_work` with client-level canaries (`with_canaries`); unchanged if it
    already took gradient canaries."""
    if self.kind == 'gradient':
      return client_work
    self.kind = 'client'
    self.wrapped += 1
    return with_canaries(client_work, self.norm, self.seed)

  def take_gradients(self) -> 'Insertion':
    """Called by a DP-SGD client work that adds gradient canaries (`gradient_sum`)."""
    self.kind = 'gradient'
    self.wrapped += 1
    return self

  def took_round(self) -> None:
    """Called by a builder whose own cohort round takes canaries (not
    `round_computation`), so that the runner can check there is exactly one."""
    self.rounds += 1

  def round_computation(self, process, client_data_comp):
    self.took_round()
    if self.kind == 'gradient':
      return gradient_round_computation(process, client_data_comp)
    return cohort_round_computation(process, client_data_comp)

  def tables(self, round_num: int, cohort: np.ndarray) -> list[np.ndarray]:
    """The cohort's canary tables of round `round_num` (`plan`)."""
    if self.plan is None:
      raise RuntimeError('gradient canaries need a plan (GradientAuditor.tables) before '
                         'a round runs')
    return self.plan(round_num, cohort)

  def split(self, cohort: np.ndarray) -> tuple[list[str], list[int]]:
    """A cohort with canaries -> `(client ids, canary indices)`: each canary runs on
    client 0's data (its training is discarded, its update replaced)."""
    real = np.asarray(cohort) < self.num_clients
    ids = [str(c) if r else '0' for c, r in zip(cohort, real)]
    index = [NOT_A_CANARY if r else int(c - self.num_clients) for c, r in zip(cohort, real)]
    return ids, index


_insertion: Optional[Insertion] = None


@contextlib.contextmanager
def inserting(norm: float, seed: int, num_clients: int,
              count: int = 0) -> Iterator[Insertion]:
  """Within it, methods are built with canaries (module docstring; `count`: how many,
  needed by gradient canaries)."""
  global _insertion
  if _insertion is not None:
    raise RuntimeError('canaries are already being inserted')
  _insertion = Insertion(norm, seed, num_clients, count)
  try:
    yield _insertion
  finally:
    _insertion = None


def active() -> Optional[Insertion]:
  """The `Insertion` of the method being built, or None."""
  return _insertion


def wrap_client_work(client_work):
  """`client_work` with client-level canaries in an audit build (`Insertion.wrap`),
  unchanged otherwise: the hook of a builder that composes its own process."""
  return client_work if _insertion is None else _insertion.wrap(client_work)


def data_clients(cohort: np.ndarray, num_clients: int) -> np.ndarray:
  """`cohort` with each canary id (`>= num_clients`) replaced by the client whose data it
  runs on (0, `Insertion.split`): for a method whose DP events or checks read the
  cohort's data sizes."""
  cohort = np.asarray(cohort)
  return np.where(cohort < num_clients, cohort, 0)


def direction_seed(seed: int) -> int:
  """The directions' seed of a run with seed `seed` (independent of its other draws)."""
  return int(np.random.SeedSequence(seed, spawn_key=(AUDIT_STREAM, _DIRECTIONS))
             .generate_state(1, np.uint32)[0])


def _flat(weights) -> np.ndarray:
  return np.concatenate([np.asarray(w, np.float64).ravel() for w in weights])


class Auditor:
  """The auditor of a run with `m` client-level canaries (issue 40's audit).

  Each canary is included with probability 1/2, independently, before the run
  (Steinke et al. 2023, Alg. 1); an included canary joins each round with probability
  `sampling_rate`, independently, as a client under Poisson sampling does (for a method
  that draws fixed-size cohorts this is the same rate, not the same draw). A left-out
  canary never joins. After each round the auditor sees the model delta
  `w_before - w_after` (the every-round threat model: the releases the DP accounting
  covers, post-processed by the server step) and keeps, per canary, the largest cosine
  over rounds between `u_j` and that delta (Andrew et al. 2024, Sec. 3.2); at the end,
  the cosine with `w_0 - w_T` (the final-model threat model).

  Args:
    count: `m`, the number of canaries (`>= 4`).
    seed: The run's seed (inclusions and joins: `audit_rng`; directions:
      `direction(direction_seed(seed), j, shapes)`).
    num_clients: `N`, the number of real clients.
    sampling_rate: A canary's per-round joining probability (in (0, 1]).
    initial_weights: The trainable weights `w_0` (list of arrays).

  Raises:
    ValueError: On `count < 4` or a rate outside (0, 1].
  """

  def __init__(self, count: int, seed: int, num_clients: int, sampling_rate: float,
               initial_weights: Sequence[np.ndarray]):
    if count < 4 or not 0 < sampling_rate <= 1:
      raise ValueError(f'need at least 4 canaries and a sampling rate in (0, 1]. Found '
                       f'{count}, {sampling_rate}.')
    self.count, self.seed, self.num_clients = count, seed, num_clients
    self.sampling_rate = sampling_rate
    self.included = audit_rng(seed, _INCLUSION).random(count) < 0.5
    shapes = [np.shape(w) for w in initial_weights]
    self.directions = canary_directions(direction_seed(seed), count, shapes).astype(np.float64)
    self.initial = _flat(initial_weights)
    self.previous = self.initial  # the weights the next round starts from
    self.max_cosine = np.full(count, -1.0)
    self.joins = np.zeros(count, np.int64)

  @property
  def dimension(self) -> int:
    return self.initial.size

  def joining(self, round_num: int) -> np.ndarray:
    """Indices of the canaries that join round `round_num` (a pure function of it)."""
    rng = audit_rng(self.seed, _JOINS, round_num)
    return np.flatnonzero(self.included & (rng.random(self.count) < self.sampling_rate))

  def cohort(self, round_num: int, cohort: np.ndarray) -> np.ndarray:
    """`cohort` plus the joining canaries as ids `N + j`."""
    return np.concatenate([np.asarray(cohort, np.int64),
                           self.num_clients + self.joining(round_num)])

  def cosines(self, delta: np.ndarray) -> np.ndarray:
    """`[m]`: each direction's cosine with `delta` (0 for a zero delta)."""
    n = np.linalg.norm(delta)
    return self.directions @ delta / n if n > 0 else np.zeros(self.count)

  def joined(self, round_num: int, cohort: np.ndarray) -> int:
    """Canaries that join round `round_num` on `cohort` (with its canaries)."""
    del round_num
    return int(np.sum(np.asarray(cohort) >= self.num_clients))

  def observe(self, cohort: np.ndarray, after: Sequence[np.ndarray],
              round_num: Optional[int] = None, upload=None) -> None:
    """Scores one round (`round_num`) that ran on `cohort` (with its canaries) from the
    model weights after it (the delta from the weights after the round before), and
    counts its canaries' joins. (`upload`: unused, see `GradientAuditor`.)"""
    del round_num, upload
    cohort = np.asarray(cohort)
    self.joins[cohort[cohort >= self.num_clients] - self.num_clients] += 1
    after = _flat(after)
    self.max_cosine = np.maximum(self.max_cosine, self.cosines(self.previous - after))
    self.previous = after

  def state_dict(self) -> dict:
    return dict(max_cosine=self.max_cosine.copy(), joins=self.joins.copy())

  def load_state_dict(self, state: dict, weights: Sequence[np.ndarray]) -> None:
    """Restores a `state_dict` taken when the model had trainable `weights`."""
    self.max_cosine = np.asarray(state['max_cosine'], np.float64)
    self.joins = np.asarray(state['joins'], np.int64)
    self.previous = _flat(weights)

  def report(self, final_weights: Sequence[np.ndarray], delta: float,
             alpha: float = 0.05) -> dict:
    """Both threat models' `epsilon_lower_bound` and `epsilon_estimate` at `delta`.

    The lower bound is Steinke et al. 2023's one-run bound (`audit.one_run_lower_bound`)
    at confidence `1 - alpha`, with `k_plus = k_minus = k` guesses for each `k` in
    `guess_counts(m)` at `alpha / len(...)` each (Bonferroni), the largest kept. The
    estimate is Andrew et al. 2024's: final model, the included canaries' cosines
    against the closed-form null `N(0, 1/d)` (`audit.one_shot_estimate`); every round,
    their largest cosines against the left-out canaries' (the maximum over rounds of
    `N(0, 1/d)` draws has no Gaussian closed form), each fitted by a Gaussian
    (`audit.two_gaussian_epsilon`).

    Returns:
      `{'every_round': {...}, 'final_model': {...}, 'canaries', 'included', 'joins',
      'max_joins' (the most rounds one canary joined), 'dimension'}`; each threat model:
      `epsilon_lower_bound`, `epsilon_estimate`, `mean_in`, `std_in`, `mean_out`,
      `std_out` (of the scores), `lower_bound_k`.
    """
    final = self.cosines(self.initial - _flat(final_weights))
    out = dict(canaries=self.count, included=int(self.included.sum()),
               joins=int(self.joins.sum()),
               max_joins=int(self.joins[self.included].max()) if self.included.any() else 0,
               dimension=self.dimension,
               lower_bound='Steinke, Nasr and Jagielski 2023, one run (95%, Bonferroni '
               'over k)', estimate='Andrew et al. 2024, one-shot (Gaussian fits)')
    for name, scores in (('every_round', self.max_cosine), ('final_model', final)):
      inc, exc = scores[self.included], scores[~self.included]
      bound, best_k = bonferroni_lower_bound(scores, self.included, delta, alpha)
      if name == 'final_model':
        estimate = audit.one_shot_estimate(inc, self.dimension, delta)['epsilon'] \
            if inc.size >= 2 else math.nan
      elif inc.size >= 2 and exc.size >= 2:
        estimate = audit.two_gaussian_epsilon(
            float(np.mean(inc)), max(float(np.std(inc, ddof=1)), 1e-12),
            float(np.mean(exc)), max(float(np.std(exc, ddof=1)), 1e-12), delta)
      else:
        estimate = math.nan
      out[name] = dict(epsilon_lower_bound=bound, epsilon_estimate=estimate,
                       lower_bound_k=best_k,
                       mean_in=_stat(np.mean, inc), std_in=_stat(np.std, inc),
                       mean_out=_stat(np.mean, exc), std_out=_stat(np.std, exc))
    return out


class GradientAuditor(Auditor):
  """The auditor of a run with `m` sample-level gradient canaries.

  The canaries are examples of one *host* client (the first client of the first
  non-empty cohort; a sample-level guarantee is per client, so the audit compares with
  the host's epsilon). Each canary is included with probability 1/2 (Steinke et al.
  2023, Alg. 1); an included canary's gradient `norm * u_j` joins the host's DP-SGD
  steps as one of its examples would: with shuffled batches (`ShuffleBatch`), once in
  each local epoch, in a step drawn uniformly from that epoch's `ceil(n / B)`; with a Poisson lot
  (`PoissonLot`), each lot with the host's own rate (`lot_rates[host]`, else `rate`).
  There it is clipped (where the step clips its examples) and noised with the step's own
  examples (`gradient_sum`). Threat models: every round, the auditor sees
  the host's upload (the model delta the host sends the server: the release its
  sample-level guarantee covers; a round without the host carries no canary), each
  canary scored by its largest cosine with those uploads (`upload_projections`); or only
  the final model, scored as `Auditor` does.

  Args:
    count, seed, initial_weights: As for `Auditor`.
    client_sizes: int `[N]`, each client's number of examples.
    batching: The method's `ShuffleBatch` or `PoissonLot`.
    lot_rates: Each client's own Poisson lot rate, where they differ
      (`Method.lot_rates`); None: `batching.rate` for every client.

  Raises:
    ValueError: On `count < 4` or another batching.
  """

  def __init__(self, count: int, seed: int, client_sizes: Sequence[int], batching,
               initial_weights: Sequence[np.ndarray],
               lot_rates: Optional[Sequence[float]] = None):
    if not isinstance(batching, (ShuffleBatch, PoissonLot)):
      raise ValueError(f'batching must be ShuffleBatch or PoissonLot. Found {batching!r}.')
    super().__init__(count, seed, len(client_sizes), 1.0, initial_weights)
    self.client_sizes, self.batching = np.asarray(client_sizes), batching
    self.lot_rates = None if lot_rates is None else np.asarray(lot_rates, np.float64)
    self.host: Optional[int] = None
    self._steps: tuple = (None, None)  # (round, its steps)

  def cohort(self, round_num: int, cohort: np.ndarray) -> np.ndarray:
    """`cohort` unchanged (the canaries are the host's examples); fixes the host."""
    if self.host is None and len(cohort):
      self.host = int(np.asarray(cohort)[0])
    return np.asarray(cohort)

  def steps(self, round_num: int) -> list[np.ndarray]:
    """Per DP-SGD step of the host's round `round_num`, the canaries that join it (drawn
    once per round: `tables`, `joined` and `observe` all read it)."""
    if self._steps[0] != round_num:
      self._steps = (round_num, self._draw_steps(round_num))
    return self._steps[1]

  def _draw_steps(self, round_num: int) -> list[np.ndarray]:
    rng = audit_rng(self.seed, _JOINS, round_num)
    included = np.flatnonzero(self.included)
    if isinstance(self.batching, PoissonLot):  # one lot a round, at the host's rate
      rate = (self.batching.rate if self.lot_rates is None
              else float(self.lot_rates[self.host]))
      return [included[rng.random(included.size) < rate]]
    b, epochs = self.batching.batch_size, self.batching.local_epochs
    per_epoch = max(1, -(-int(self.client_sizes[self.host]) // b))
    step = rng.integers(0, per_epoch, size=(epochs, included.size))
    return [included[step[e] == s] for e in range(epochs) for s in range(per_epoch)]

  def tables(self, round_num: int, cohort: np.ndarray) -> list[np.ndarray]:
    """`Insertion.plan`: each cohort client's int32 `[S, P]` canary table."""
    out = [no_canaries()] * len(cohort)
    if self.host is None or self.host not in cohort:
      return out
    steps = self.steps(round_num)
    table = np.full((len(steps), max(1, max(len(s) for s in steps))), NOT_A_CANARY, np.int32)
    for i, s in enumerate(steps):
      table[i, :len(s)] = s
    out[int(np.flatnonzero(np.asarray(cohort) == self.host)[0])] = table
    return out

  def joined(self, round_num: int, cohort: np.ndarray) -> int:
    """Canary gradients that join round `round_num` on `cohort`."""
    if self.host is None or self.host not in cohort:
      return 0
    return int(sum(len(s) for s in self.steps(round_num)))

  def observe(self, cohort: np.ndarray, after: Sequence[np.ndarray],
              round_num: Optional[int] = None, upload=None) -> None:
    """Scores round `round_num` from the host's upload: `upload = (projections [m],
    norm)` (`upload_projections`, the client work's measurements), and counts the
    canary gradients that joined it.

    Raises:
      ValueError: If the host took part but `upload` or `round_num` is missing.
    """
    if self.host is not None and self.host in np.asarray(cohort):
      if upload is None or round_num is None:
        raise ValueError('the host took part: its upload scores and the round are needed')
      for s in self.steps(round_num):
        self.joins[s] += 1
      projections, norm = upload
      if norm > 0:
        self.max_cosine = np.maximum(self.max_cosine,
                                     np.asarray(projections, np.float64) / float(norm))
    self.previous = _flat(after)

  def state_dict(self) -> dict:
    return dict(super().state_dict(), host=self.host)

  def load_state_dict(self, state: dict, weights: Sequence[np.ndarray]) -> None:
    super().load_state_dict(state, weights)
    self.host = None if state.get('host') is None else int(state['host'])

  def report(self, final_weights: Sequence[np.ndarray], delta: float,
             alpha: float = 0.05) -> dict:
    return dict(super().report(final_weights, delta, alpha), host=self.host,
                unit='sample-level (gradient canaries of one host client)')


def _stat(fn, x: np.ndarray) -> float:
  return float(fn(x)) if x.size else math.nan


def bonferroni_lower_bound(scores: np.ndarray, included: np.ndarray, delta: float,
                           alpha: float = 0.05) -> tuple[float, int]:
  """`(bound, k)`: the largest of Steinke et al.'s one-run bounds with `k` guesses each
  way for every `k` in `guess_counts(m)`, each at `alpha / len(...)` (Bonferroni), so
  the largest holds at `1 - alpha`; and the `k` that gave it."""
  ks = guess_counts(len(scores))
  bounds = [audit.one_run_lower_bound(scores, included, delta, k, k, alpha / len(ks))
            for k in ks]
  best = int(np.argmax(bounds))
  return float(bounds[best]), ks[best]


def guess_counts(m: int) -> list[int]:
  """The `k` (guesses each way) tried for `m` canaries: 2%, 5%, 10% and 20% of `m`
  (at least 1, distinct, `2k <= m`)."""
  return sorted({k for k in (max(1, round(f * m)) for f in (0.02, 0.05, 0.1, 0.2))
                 if 2 * k <= m})
