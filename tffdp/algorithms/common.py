"""Shared pieces of tffdp's learning processes: composition and the `Method` interface."""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import canaries, queries, seeds
from tffdp.algorithms import dp_sgd
from tffdp.data.federated import FederatedData, PoissonLot, ShuffleBatch

KerasBuilder = Callable[[], tf.keras.Model]


def weights_type_of(keras_builder: KerasBuilder) -> tff.Type:
  """TFF type of the `ModelWeights` of the model `keras_builder` makes."""
  with tf.Graph().as_default():
    model = keras_builder()
    weights = tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables],
        non_trainable=[tf.TensorSpec(v.shape, v.dtype) for v in model.non_trainable_variables])
  return tff.types.tensorflow_to_type(weights)


def initial_weights_computation(keras_builder: KerasBuilder, seed: int) -> tff.Computation:
  """No-arg TFF computation returning the seeded initial `ModelWeights`."""
  tf.keras.utils.set_random_seed(seed)
  model = keras_builder()
  trainable = [v.numpy() for v in model.trainable_variables]
  non_trainable = [v.numpy() for v in model.non_trainable_variables]

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights(
        trainable=[tf.constant(w) for w in trainable],
        non_trainable=[tf.constant(w) for w in non_trainable])
  return initial_weights


def server_split_metric(keras_builder: KerasBuilder, data: FederatedData, name: str,
                        metric: Callable[[tf.keras.Model, tf.Tensor, tf.Tensor], tf.Tensor]):
  """Inside a TF computation: `trainable -> metric(model, x, y)` on a server-side split.

  Builds the model once; the returned `tf.function` loads the given trainable weights
  and evaluates `metric` on the split `name` (`FederatedData.add_server_split`), e.g. the
  validation accuracy of A-DPFL's Alg. 4 or the validation loss `J` of Adap DP-FL.
  """
  model = keras_builder()

  @tf.function
  def evaluate(trainable):
    for v, w in zip(model.trainable_variables, trainable):
      v.assign(w)
    xs, ys = data.server_examples(name)
    return metric(model, xs, ys)
  return evaluate


def compose_fedavg_style(keras_builder: KerasBuilder, client_work, aggregator_factory,
                         seed: int,
                         server_optimizer: Optional[tff.learning.optimizers.Optimizer] = None
                         ) -> tff.learning.templates.LearningProcess:
  """Broadcast, client work, weighted aggregator, server optimizer step.

  `aggregator_factory` may be weighted or unweighted (then applied via
  `tff.aggregators.factory_utils.as_weighted_aggregator`). The aggregated client delta
  (`initial - trained`) is the server optimizer's pseudo-gradient; the default,
  SGD with learning rate 1, gives FedAvg's `w <- w - aggregated delta`.

  Built inside `tffdp.canaries.inserting(...)` (an audit run), the client work is
  wrapped by `canaries.with_canaries`: its client data is then `<data, canary>`.
  """
  client_work = canaries.wrap_client_work(client_work)
  init = initial_weights_computation(keras_builder, seed)
  weights_type = init.type_signature.result
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  update_type = tff.types.tensorflow_to_type(
      [tf.TensorSpec(t.shape, t.dtype) for t in weights_type.trainable])
  if isinstance(aggregator_factory, tff.aggregators.UnweightedAggregationFactory):
    aggregator_factory = tff.aggregators.factory_utils.as_weighted_aggregator(
        aggregator_factory)
  aggregator = aggregator_factory.create(update_type, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer or tff.learning.optimizers.build_sgdm(learning_rate=1.0), weights_type)
  return tff.learning.templates.compose_learning_process(
      init, distributor, client_work, aggregator, finalizer)


def wrapped_learning_process(init_fn: tff.Computation, next_fn: tff.Computation,
                             extra: str) -> tff.learning.templates.LearningProcess:
  """A `LearningProcess` whose state is `<learning=inner state, <extra>=...>@SERVER`.

  For components that wrap an inner learning process with server state of their own
  (A-DPFL's Alg. 4, AADP-FL's eq. 3): the model weights are the inner state's
  `global_model_weights`; `set_model_weights` keeps the `extra` part unchanged.
  """
  state_type = init_fn.type_signature.result

  @tff.tensorflow.computation(state_type.member)
  def get_model_weights(state):
    return state['learning'].global_model_weights

  @tff.tensorflow.computation(state_type.member, state_type.member.learning.global_model_weights)
  def set_model_weights(state, weights):
    return collections.OrderedDict(
        [('learning', state['learning']._replace(global_model_weights=weights)),
         (extra, state[extra])])

  return tff.learning.templates.LearningProcess(init_fn, next_fn, get_model_weights,
                                                set_model_weights)


Releases = list[tuple[np.ndarray, Optional[dp_accounting.DpEvent], str]]
RunRound = Callable[[Any, np.ndarray, int, int], tuple[Any, Any]]


def cohort_round_computation(process: tff.learning.templates.LearningProcess,
                             data: FederatedData, batching: ShuffleBatch | PoissonLot,
                             clients_per_slice: Optional[int] = None) -> tff.Computation:
  """One round of `process` on a cohort given by client ids, as one TFF computation.

  Without slices: `(state@SERVER, client_ids=string@CLIENTS, client_seeds=int64[2]@CLIENTS)
  -> process.next output`, each client's dataset built inside TFF from its id
  (`FederatedData.client_data_computation`); the seeds fix its batching and noise. With
  `clients_per_slice`, `process.next` itself: `(state, cohort slices@CLIENTS)` (see
  `cohort_slices`).
  """
  if clients_per_slice:
    return process.next  # (state, cohort slices): datasets are built inside
  client_data_comp = data.client_data_computation(batching)
  state_type = process.next.type_signature.parameter[0]

  @tff.federated_computation(state_type, tff.FederatedType(np.str_, tff.CLIENTS),
                             tff.FederatedType(tff.TensorType(np.int64, [2]), tff.CLIENTS))
  def round_fn(state, client_ids, client_seeds):
    return process.next(state, tff.federated_map(client_data_comp, (client_ids, client_seeds)))
  return round_fn


def cohort_slices(cohort: np.ndarray, seeds: Sequence[np.ndarray],
                  clients_per_slice: int) -> list:
  """The cohort as TFF client values of `clients_per_slice` clients each.

  Each value is a one-element sequence (`dp_sgd.slice_input_type`). The last slice is
  padded with inactive entries (`active=False`: no work, no weight).
  """
  ids = [str(c) for c in cohort]
  seeds = list(seeds)
  active = [True] * len(ids)
  while len(ids) % clients_per_slice:
    ids.append(ids[0])
    seeds.append(np.zeros(2, np.int64))
    active.append(False)
  s = clients_per_slice
  return [[collections.OrderedDict(client_ids=np.array(ids[i:i + s]),
                                   seeds=np.stack(seeds[i:i + s]),
                                   active=np.array(active[i:i + s]))]
          for i in range(0, len(ids), s)]


def cohort_round(process: tff.learning.templates.LearningProcess, data: FederatedData,
                 batching: ShuffleBatch | PoissonLot,
                 clients_per_slice: Optional[int] = None) -> tuple[RunRound, tff.Computation]:
  """`(run_round, round_computation)` of a process whose clients are a cohort of ids.

  `run_round(state, cohort, round_num, run_seed) -> (state, metrics)` calls
  `cohort_round_computation(...)` with each client's seed from `client_seeds(run_seed,
  round_num, cohort)`; `Method.run_round` of every method built on `LearningProcess`.

  Built inside `tffdp.canaries.inserting(...)` after `compose_fedavg_style` wrapped the
  client work, the cohort may hold canaries (ids `N + j`, see `canaries.Insertion.split`)
  and the computation takes their indices; after a DP-SGD client work took gradient
  canaries, it takes each client's canary table (`canaries.Insertion.tables`).

  Raises:
    ValueError: For canaries with `clients_per_slice`.
  """
  insertion = canaries.active()
  if insertion is not None and insertion.wrapped:  # else the client work takes no canaries
    check_no_canaries_in_slices(clients_per_slice)
    comp = insertion.round_computation(process, data.client_data_computation(batching))

    def run_canary_round(state, cohort: np.ndarray, round_num: int, run_seed: int):
      if insertion.kind == 'gradient':  # the canaries ride in the host's steps
        ids, extra = [str(c) for c in cohort], insertion.tables(round_num, cohort)
      else:
        ids, index = insertion.split(cohort)
        extra = [np.int32(i) for i in index]
      out = comp(state, ids, client_seeds(run_seed, round_num, cohort), extra)
      return out.state, out.metrics
    return run_canary_round, comp
  comp = cohort_round_computation(process, data, batching, clients_per_slice)

  def run_round(state, cohort: np.ndarray, round_num: int, run_seed: int):
    seeds = client_seeds(run_seed, round_num, cohort)
    if clients_per_slice:
      out = comp(state, cohort_slices(cohort, seeds, clients_per_slice))
    else:
      out = comp(state, [str(c) for c in cohort], seeds)
    return out.state, out.metrics
  return run_round, comp


def client_work_metrics(metrics):
  """The client-work measurements of a (possibly wrapped) learning process's metrics (the
  metrics themselves where they hold `train` at the top, as Adap DP-FL's do)."""
  if 'client_work' in metrics:
    return metrics['client_work']
  if 'learning' in metrics:
    return metrics['learning']['client_work']
  return metrics


def client_work_train_loss(metrics) -> float:
  """Mean training loss of a round from the client work's `train` measurements."""
  train = client_work_metrics(metrics)['train']
  return float(train['loss_sum']) / max(1, int(train['num_examples']))


@dataclasses.dataclass
class Accounting:
  """A method's two privacy analyses, per round: what the runner's ledgers compose.

  `epsilon_claimed` composes `claimed`'s releases (the paper's analysis),
  `epsilon_guaranteed` those of `guaranteed` (what the executed mechanism guarantees),
  or, with `executed`, the releases the round's mechanisms stated in its output. Each
  release is `(clients, DpEvent or None, reason)`: the clients (int64 `[m]`) that the
  event charges, and for `None` (no finite guarantee) the reason.

  Attributes:
    claimed: `(cohort, state) -> Releases` of the round about to run from `state`: the
      paper's analysis.
    guaranteed: The same for what the executed mechanism guarantees.
    executed: `(cohort, new state, metrics) -> Releases`: the guaranteed releases of the
      round just run, built from the DP events its mechanisms state in the round's output
      (e.g. `aggregators.PerClientGaussianFactory.executed_events` in `metrics`, TFF's
      `DPAggregatorState.dp_event` in the state). With it the runner checks them against
      `guaranteed`'s declaration for the round (`privacy.releases_differ`: a difference
      stops the run before the round is accounted) and composes these into the guaranteed
      ledger. The declaration stays what a budget check before the round and a dry run
      (`tffdp.calibration`) read. None: the declared releases are accounted.
    check_round: `(cohort, new state, metrics) -> None or a message`: after each round,
      whether what the round executed matches the DP events declared for it (e.g. the
      measured DP-SGD steps); the runner stops the run on a message, before the round is
      accounted.
    releases_from_round: For methods whose DP events are known only once the round has
      run (a budget the client work computes, e.g. cosAFed's `epsilon'`): `(cohort, new
      state, metrics) -> (claimed releases, guaranteed releases)` of that round. The
      runner then calls it instead of `claimed` / `guaranteed`, and such a method cannot
      run with an `--epsilon-budget` (the cost of a round is not known before it).
    fixed_round_metrics: For such a method whose events nevertheless do not depend on
      training (LapFed: every upload at the constant `epsilon'`): `cohort -> metrics`,
      the metrics `releases_from_round` reads, as every round produces them. Lets a dry
      run (`tffdp.calibration.DryRun`) state the events without training; None where
      they depend on the round.
    ledger: `rdp` (`privacy.PrivacyLedger` for both ledgers), `laplace`
      (`privacy.LaplaceLedger`: basic composition for the claimed ledger, the best of
      basic, RDP and PLD for the guaranteed one) or `basic_claimed` (the claimed ledger
      a basic-composition `LaplaceLedger`, the guaranteed one a `PrivacyLedger`).
    rdp_orders: RDP orders of both ledgers; None: `privacy.DEFAULT_ORDERS`.
    claimed_conversion: RDP to epsilon conversion of the claimed ledger
      (`privacy.CONVERSIONS`): dp_accounting's by default, `classic` where the paper's
      theorem uses it. The guaranteed ledger always uses dp_accounting's.
    budget_rule: How `--epsilon-budget` acts: `run` (the run stops before a round that
      would pass it) or `per_client` (a client that would pass it stops uploading; the
      run ends when every client has stopped).
    budget_ledger: Which epsilon the budget applies to: `guaranteed` or `claimed`.
    raise_noise: `(state, factor) -> state`, `state` with the noise multiplier of the
      round it runs multiplied by `factor` (a float >= 1). With it a run can take
      `budget_last_round='raise_noise'` (`tffdp.config.RunConfig`): the round that would
      pass `--epsilon-budget` runs at the raised noise multiplier that lands on the
      budget, and is the last. Only with `budget_rule='run'` (a run-wide budget). None:
      the method cannot.

  Raises:
    ValueError: On a `ledger`, `budget_rule` or `budget_ledger` not listed above.
  """
  claimed: Callable[[np.ndarray, Any], Releases]
  guaranteed: Callable[[np.ndarray, Any], Releases]
  executed: Optional[Callable[[np.ndarray, Any, Any], Releases]] = None
  check_round: Callable[[np.ndarray, Any, Any], Optional[str]] = (
      lambda cohort, state, metrics: None)
  releases_from_round: Optional[Callable[[np.ndarray, Any, Any],
                                         tuple[Releases, Releases]]] = None
  fixed_round_metrics: Optional[Callable[[np.ndarray], Any]] = None
  ledger: str = 'rdp'
  rdp_orders: Optional[Sequence[float]] = None
  claimed_conversion: str = 'dp_accounting'
  budget_rule: str = 'run'
  budget_ledger: str = 'guaranteed'
  raise_noise: Optional[Callable[[Any, float], Any]] = None

  def __post_init__(self):
    for name, allowed in (('ledger', ('rdp', 'laplace', 'basic_claimed')),
                          ('budget_rule', ('run', 'per_client')),
                          ('budget_ledger', ('guaranteed', 'claimed'))):
      if getattr(self, name) not in allowed:
        raise ValueError(f'{name} must be one of {", ".join(allowed)}. '
                         f'Found {getattr(self, name)!r}.')


def no_releases(cohort, state) -> Releases:
  """`Accounting.claimed` / `guaranteed` of a round that releases nothing private (a
  non-private method, or one whose releases are known only after the round)."""
  del cohort, state
  return []


@dataclasses.dataclass
class Method:
  """A runnable method: its TFF process plus what the runner needs around it.

  The runner calls only `initialize`, `run_round`, `model_weights` and `train_loss`
  (and the privacy and metric hooks), whatever the shape of the method's state.

  Attributes:
    name: Method name (`--method`).
    process: The `tff.learning.templates.LearningProcess` (or iterative process).
    batching: How client data is batched (`ShuffleBatch` or `PoissonLot`).
    dp_unit: `sample-level`, `client-level` or `none`.
    cohort_sampling: `uniform` (fixed K of N) or `poisson` (rate K/N).
    accounting: Its two privacy analyses and how a budget acts (`Accounting`).
    adaptive_quantities: `state -> dict` of per-round quantities (sigma, C, ...).
    hyperparameters: Resolved method hyperparameters (for config.json).
    run_round: `(state, cohort, round_num, run_seed) -> (state, metrics)`: one round on
      `cohort` (sorted client indices), its randomness fixed by `(run_seed, round_num)`.
      `cohort_round(...)` gives it for a `LearningProcess` over client ids.
    round_computation: The one TFF computation `run_round` invokes per round (with
      `--workers` the runner checks that it compiles to TFF's mergeable form and runs
      `run_round` with the workers' context installed). None: the method cannot run on
      remote workers.
    notes: Hyperparameter -> comment ("not given in the paper; chosen because ...").
    select_cohort: `round -> cohort` if the method chooses its participants (None: the
      runner's uniform/Poisson draw).
    round_metrics: `process.next` metrics -> extra metrics.csv columns.
    initialize: `() -> state` (the runner's state: for some methods more than the
      process state, e.g. CLIENTS-placed client states); default `process.initialize`.
    model_weights: `state -> ModelWeights`, read in Python; default
      `state_model_weights` (the state's own field where its layout is known, else
      `process.get_model_weights`). The runner checks it against
      `process.get_model_weights` once a run (`check_model_weights`).
    train_loss: `metrics -> mean training loss of the round`; default
      `client_work_train_loss` (the client work's `train` measurements).
    clients_per_slice: If set, `process.next` takes cohort slices (`{<client_ids,
      seeds, active>}@CLIENTS`, see `dp_sgd.slice_input_type`) instead of datasets.
    round_failure: `exception -> None or a message`: whether an exception raised by
      `run_round` is the method's known sign of a diverged model (e.g. a non-finite
      client update tripping a secure aggregator's norm check). On a message the runner
      ends the run there (`stop_reason` 'diverged ...', the round unaccounted, as it
      released nothing) instead of failing; None re-raises.
    audit_insertion: In an audit run (`--audit-canaries`), the `canaries.Insertion` the
      method was built with (set by the runner); None otherwise.
    participation_rate: Where `select_cohort` is a Poisson draw independent of the data
      (each client joins a round with this probability), that probability: an audit's
      canary clients then join at it. None: `select_cohort` cannot take canaries.
    lot_rates: float `[N]`: each client's Poisson lot rate where they differ (Adap DP-FL,
      `L / |D^k|`; `batching.rate` is then only their largest). An audit's gradient
      canaries join the host's lots at its own rate.
  """
  name: str
  process: tff.learning.templates.LearningProcess
  batching: ShuffleBatch | PoissonLot
  dp_unit: str
  cohort_sampling: str
  accounting: Accounting
  adaptive_quantities: Callable[[Any], dict]
  hyperparameters: dict
  run_round: RunRound
  round_computation: Optional[tff.Computation]
  notes: dict = dataclasses.field(default_factory=dict)
  select_cohort: Optional[Callable[[int], np.ndarray]] = None
  round_metrics: Callable[[Any], dict] = lambda metrics: {}
  initialize: Optional[Callable[[], Any]] = None
  model_weights: Optional[Callable[[Any], Any]] = None
  train_loss: Optional[Callable[[Any], float]] = None
  clients_per_slice: Optional[int] = None
  round_failure: Callable[[BaseException], Optional[str]] = lambda exc: None
  audit_insertion: Optional[canaries.Insertion] = None
  participation_rate: Optional[float] = None
  lot_rates: Optional[np.ndarray] = None

  def __post_init__(self):
    if self.initialize is None:
      self.initialize = self.process.initialize
    if self.model_weights is None:
      self.model_weights = functools.partial(state_model_weights,
                                             getattr(self.process, 'get_model_weights', None))
    if self.train_loss is None:
      self.train_loss = client_work_train_loss


def state_model_weights(get_model_weights: Optional[Callable[[Any], Any]], state):
  """The global model's weights in a process state, read in Python where its layout is known.

  A call of `get_model_weights`, a TFF computation, costs 6-8 ms on the 2-core machine
  against 0.001 ms for the read here (`python -m benchmarks.run --only eval`), and the
  runner reads the weights twice a round.

  Args:
    get_model_weights: The process's `get_model_weights` (a TFF computation), for other
      layouts; None if it has none.
    state: The process state as TFF returns it in Python.

  Returns:
    `tff.learning.models.ModelWeights`: `state.global_model_weights` for a
    `LearningAlgorithmState` (`tff.learning.templates.compose_learning_process`, whose
    `get_model_weights` returns that field), `state['learning'].global_model_weights`
    for a `wrapped_learning_process` state, else `get_model_weights(state)`.

  Raises:
    TypeError: If the layout is unknown and `get_model_weights` is None.
  """
  learning_state = tff.learning.templates.LearningAlgorithmState
  if isinstance(state, learning_state):
    return state.global_model_weights
  if isinstance(state, collections.abc.Mapping) and isinstance(state.get('learning'),
                                                                learning_state):
    return state['learning'].global_model_weights
  if get_model_weights is None:
    raise TypeError(f'the model weights of a {type(state).__name__} state are unknown: '
                    'give the method a model_weights accessor')
  return get_model_weights(state)


def check_model_weights(method: 'Method', state) -> None:
  """Checks `method.model_weights(state)` against the process's `get_model_weights`.

  Raises:
    ValueError: If the two differ in structure, dtype or any value (an accessor that
      reads the wrong part of the state would evaluate and checkpoint the wrong model).
  """
  get = getattr(method.process, 'get_model_weights', None)
  if get is None:
    return
  ours, theirs = method.model_weights(state), get(state)
  a, b = tf.nest.flatten(ours), tf.nest.flatten(theirs)
  if (len(a) != len(b) or any(np.asarray(x).dtype != np.asarray(y).dtype
                              or not np.array_equal(x, y) for x, y in zip(a, b))):
    raise ValueError(f'{method.name}: model_weights(state) differs from the process\'s '
                     'get_model_weights(state)')


def check_no_canaries_in_slices(clients_per_slice: Optional[int]) -> None:
  """Raises `ValueError` for cohort slices in an audit build (canaries ride in each
  client's own data, which a slice does not build)."""
  if clients_per_slice and canaries.active() is not None:
    raise ValueError('canaries (--audit-canaries) do not run in cohort slices; drop '
                     '--clients-per-slice')


def check_one_client_per_slice(method: str, clients_per_slice: Optional[int]) -> None:
  """Raises `ValueError` unless `clients_per_slice` is None or 1: for a method whose
  aggregator clips and noises each client's update (AADP-FL, DDGauss, the DP-FedAGS
  family), so each TFF client value must hold one client."""
  if clients_per_slice not in (None, 1):
    raise ValueError(f'clients_per_slice must be unset or 1 for {method} (its aggregator '
                     'clips and noises each client\'s update, so a slice holds one '
                     f'client). Found clients_per_slice={clients_per_slice!r}.')


client_seeds = seeds.client_seeds  # (run seed, round, clients): see `tffdp.seeds`


def dp_sgd_releases(cohort: np.ndarray, data: FederatedData, batching, sigma: float,
                    amplified: bool) -> Releases:
  """Per-client DP-SGD releases of one round (sample-level).

  `amplified=True`: the paper-style analysis, each step a Poisson-subsampled Gaussian
  with `q = B / n_i` (exact for `PoissonLot`; for shuffled fixed-size batches it is the
  usual approximation). `amplified=False` for shuffled batches: each epoch touches every
  example in exactly one batch (disjoint batches compose in parallel), so a client's
  epoch is one Gaussian release with noise multiplier sigma — a guarantee that holds for
  the executed shuffling.
  """
  releases: Releases = []
  if sigma == 0:
    return [(cohort, None, 'noise multiplier is 0: no noise, no finite guarantee')]
  query = queries.GaussianSumQuery(sigma, None)  # the step's query (`dp_sgd.build_local_step`)
  sizes = data.client_sizes[cohort]
  for n in np.unique(sizes):
    clients = cohort[sizes == n]
    if isinstance(batching, PoissonLot):
      event = query.event(batching.rate)
    elif amplified:
      b = batching.batch_size
      event = query.event(min(1.0, b / n), batching.local_epochs * int(np.ceil(n / b)))
    else:
      event = query.event(1.0, batching.local_epochs)
    releases.append((clients, event, ''))
  return releases


def releases_from_rows(cohort: np.ndarray, cohort_keys, row_keys,
                       release_of: Callable[[int, int], tuple]) -> Releases:
  """Per-client releases from the rows a mechanism stated in a round
  (`aggregators.gather_rows`), which do not name their clients.

  The rows sorted by `row_keys` are matched to the cohort's clients sorted by
  `cohort_keys` (e.g. client sizes: clients with equal keys have equal releases);
  `release_of(row index, client id)` gives each client's `(DpEvent or None, reason)`,
  and clients with equal releases form one. Where the keys differ as multisets, the whole
  cohort gets no guarantee with the reason (which the runner's check reports).
  """
  cohort_keys = np.asarray(cohort_keys, np.float64)
  row_keys = np.asarray(row_keys, np.float64)
  order = np.argsort(cohort_keys, kind='stable')
  rows = np.argsort(row_keys, kind='stable')
  if len(row_keys) != len(cohort) or not np.array_equal(row_keys[rows], cohort_keys[order]):
    return [(cohort, None, f'the round stated rows for {np.sort(row_keys).tolist()}, not '
             f'the cohort\'s {np.sort(cohort_keys).tolist()}')]
  groups = {}
  for i, j in zip(order, rows):
    groups.setdefault(release_of(int(j), cohort[i]), []).append(cohort[i])
  return [(np.asarray(members), event, reason) for (event, reason), members in groups.items()]


def dp_sgd_executed(data: FederatedData, batching) -> Callable[..., Releases]:
  """`Accounting.executed` of DP-SGD methods whose client work states each client's
  steps (`dp_sgd.build_dp_sgd_client_work(max_clients=...)`): the guaranteed releases of
  `dp_sgd_releases(amplified=False)`, built from the rows the clients stated
  (`dp_sgd.stated_rows`: examples, steps, the float32 noise multiplier they drew with).

  The clients are not named inside the round (`releases_from_rows`): with shuffled
  batches the rows' `num_examples` are matched to `E n_i`; with Poisson lots (one step
  each, the same event for every client) in any order. A client whose steps differ from
  the `E * ceil(n_i / B)` (one per lot) that its event covers gets no guarantee with the
  reason, which the runner's check against the declared releases reports.
  """
  poisson = isinstance(batching, PoissonLot)

  def executed(cohort, state, metrics) -> Releases:
    del state
    rows = dp_sgd.stated_rows(client_work_metrics(metrics), data.num_clients)

    def release_of(j, client):
      _, steps, sigma = rows[j]
      declared = 1 if poisson else batching.local_epochs * int(
          np.ceil(data.client_sizes[client] / batching.batch_size))
      if int(steps) != declared:
        return None, f'client {client} ran {int(steps)} noised steps; its event covers {declared}'
      if sigma == 0:
        return None, 'noise multiplier is 0: no noise, no finite guarantee'
      query = queries.GaussianSumQuery(float(sigma), None)
      return (query.event(batching.rate) if poisson
              else query.event(1.0, batching.local_epochs)), ''

    if poisson:   # every client's event is the same: any order
      return releases_from_rows(cohort, np.zeros(len(cohort)), np.zeros(len(rows)), release_of)
    return releases_from_rows(cohort, batching.local_epochs * data.client_sizes[cohort],
                              rows[:, 0], release_of)
  return executed


def dp_sgd_declared_steps(cohort: np.ndarray, data: FederatedData, batching) -> int:
  """DP-SGD steps the cohort's events declare: `E * ceil(n_i / B)` per client (1 per lot)."""
  if isinstance(batching, PoissonLot):
    return len(cohort)
  sizes = data.client_sizes[cohort]
  return int(np.sum(batching.local_epochs * np.ceil(sizes / batching.batch_size)))


def dp_sgd_step_check(data: FederatedData, batching):
  """`Accounting.check_round` of DP-SGD methods: what the clients ran is what was declared.

  The releases of `dp_sgd_releases` were computed from the client sizes. The client work
  reports the noised steps it ran (`train.num_steps`: counted batch by batch on the
  per-client `tf.data` path; on cohort slices the loop count the batching gives) and the
  examples it processed (`train.num_examples`, counted on both paths): with shuffled
  batches every example once per epoch, `E * sum(n_i)`. A difference means the
  accounting describes another mechanism than the one executed.
  """
  def check(cohort, state, metrics) -> Optional[str]:
    del state
    train = client_work_metrics(metrics)['train']
    measured = int(train['num_steps'])
    declared = dp_sgd_declared_steps(cohort, data, batching)
    if measured != declared:
      return (f'the clients ran {measured} DP-SGD steps but the DP events declared '
              f'{declared} ({batching}); the accounting would not describe the round')
    if isinstance(batching, ShuffleBatch):
      examples = int(train['num_examples'])
      expected = batching.local_epochs * int(np.sum(data.client_sizes[cohort]))
      if examples != expected:
        return (f'the clients processed {examples} examples but {batching} over their '
                f'{expected // batching.local_epochs} examples declares {expected}')
    return None
  return check


def dp_sgd_accounting(data: FederatedData, batching, sigma: float) -> Accounting:
  """`Accounting` of a method whose clients run DP-SGD at the fixed noise multiplier
  `sigma` (DPFL, DP-SCAFFOLD): claimed, the paper-style amplified analysis; guaranteed,
  the executed batching's (`dp_sgd_releases`); the clients' stated steps checked and
  accounted (`dp_sgd_step_check`, `dp_sgd_executed`)."""
  return Accounting(
      claimed=lambda cohort, state: dp_sgd_releases(cohort, data, batching, sigma, True),
      guaranteed=lambda cohort, state: dp_sgd_releases(cohort, data, batching, sigma, False),
      executed=dp_sgd_executed(data, batching),
      check_round=dp_sgd_step_check(data, batching))
