"""cosAFed and its baselines: Laplace uploads with a per-client, per-round budget.

Paper: "An Adaptive Differential Privacy Method Based on Federated Learning" (cosAFed;
`../shared/papers/002_62db0ee4188ee1f3.txt`, Alg. 1-2, formulas 1-7); spec `cosafed.md`,
whose Amendments override its body; baselines in `baselines.md`. Round `t`:

1. the server broadcasts `A^{t-1}` and the signals its history gives (the score of
   formulas 2-5 from the validation accuracy/loss it recorded after each round, and the
   cosine of its last two models for cosFed);
2. each of the `N` sampled clients runs local SGD (`B_i^t`), uploads `dB = A^{t-1} -
   B_i^t`, the cosine `d = S_c = cos(A^{t-1}, B_i^t)` and its budget `epsilon'` from its
   method's budget rule (`BUDGET_RULES`);
3. `aggregators.LaplaceUploadFactory` perturbs each upload: `d * dB` (cosAFed only) `+
   Lap(Delta_f / epsilon')` per coordinate (formula 7), optionally L1-clipped first
   (`l1_clip`), and averages;
4. `A^t = A^{t-1} - mean`; the server evaluates `A^t` on its validation split and
   appends accuracy and loss to its history (Alg. 1 line 12).

The four methods differ only in the budget rule and whether the update is scaled:

| method | rule | scaled by `d` |
|---|---|---|
| `cosafed` | formula 6: `p epsilon` if score > 50 and `p <= 1`, else `epsilon` | yes |
| `lapfed` | `epsilon` every round (reconstructed) | no |
| `adpfl` | `p_fixed epsilon` if score > 50, else `epsilon` (Tang 2023, reconstructed) | no |
| `cosfed` | `epsilon (2 - cos(A^{t-1}, A^{t-2}))` (Zhang 2022, reconstructed) | no |

LAPFed, ADPFL (not A-DPFL) and cosFed are reconstructions from cosAFed's prose
(`baselines.md`): every output names them so.

Privacy. `epsilon_claimed` is the paper's count: per client the sum of its `epsilon'`
(Theorem 1 per upload, basic composition); the paper's "total privacy budget" of
Table 3 is the sum over rounds and clients (`epsilon_prime_sum` per round in
`metrics.csv`). `epsilon_guaranteed` is `inf` without `l1_clip` (the upload's L1
sensitivity is unbounded), and for cosAFed whatever the clip: its `epsilon'` depends on
the client's own data and sets the noise scale (`DATA_DEPENDENT_REASON`). For the
baselines with `l1_clip` (their budgets depend only on server-side data and earlier
releases) each upload is an `(epsilon' l1_clip / Delta_f)`-DP Laplace release
(client-level, add/remove adjacency) and the guaranteed ledger reports per client the
best of basic composition, RDP and PLD (`privacy.LaplaceLedger`).

State: `<model=ModelWeights, history=<recent_accuracy float32[N+1],
recent_loss float32[2], count int32, previous_model, previous_update>,
client_work, aggregator>@SERVER` (the history is server state inside the TFF process).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Callable, Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, privacy
from tffdp.algorithms import common, registry
from tffdp.algorithms.baselines import client_work as dp_sgd_client_work
from tffdp.data.federated import FederatedData, ShuffleBatch

SCORE_ACC_READINGS = ('formula4', 'alg2')
COSFED_COSINES = ('models', 'updates')
UNBOUNDED_REASON = ('the upload is not clipped (paper-literal): its L1 sensitivity is '
                    'unbounded, so Lap(Delta_f / epsilon\') gives no DP guarantee; '
                    'l1_clip bounds it')
DATA_DEPENDENT_REASON = ("cosAFed's epsilon' = p epsilon depends on the client's own data "
                         '(the cosine of its trained model with the global one, and its '
                         'size) and sets the Laplace scale, which is itself released: a '
                         'data-dependent noise scale has no finite pure-DP bound, whatever '
                         'the L1 clip')
RECONSTRUCTED = {'lapfed': 'LAPFed (reconstructed)', 'adpfl': 'ADPFL (reconstructed)',
                 'cosfed': 'cosFed (reconstructed)', 'cosafed': 'cosAFed'}


# ----- formulas 1-6 -----------------------------------------------------------------

def adjustment_coefficient(cosine, num_clients: int, cohort_size: int, data_fraction):
  """Formula 1: `p = |1 - S_c (M / N) (|D_i| / |D|)|` if `S_c >= 0`, else 1.

  Args:
    cosine: float32 `S_c = cos(A^{t-1}, B_i^t)` (any shape).
    num_clients: `M`, all clients.
    cohort_size: `N`, clients per round.
    data_fraction: float32 `|D_i| / |D|`, broadcastable to `cosine`.

  Returns:
    float32 `p >= 0`, the shape of `cosine`.
  """
  cosine = tf.cast(cosine, tf.float32)
  p = tf.abs(1.0 - cosine * (num_clients / cohort_size) * tf.cast(data_fraction, tf.float32))
  return tf.where(cosine >= 0.0, p, tf.ones_like(p))


def score(recent_accuracy, recent_loss, count, *, rounds: int, cohort_size: int,
          score_acc: str = 'formula4'):
  """Formulas 2-5: `score = 30 score_loss + 40 score_acc + 30 score_t` for round `t = count + 1`.

  Args:
    recent_accuracy: float32 `[W]`, `W >= N + 1`: the last recorded validation
      accuracies `acc_{t-W} .. acc_{t-1}`, most recent last (only the last `count` are
      real).
    recent_loss: float32 `[2]`: `loss_{t-2}, loss_{t-1}`.
    count: int32 rounds recorded so far (`t - 1`).
    rounds: `T`.
    cohort_size: `N`, the accuracy window.
    score_acc: `formula4` (1 if the mean of the last `N` recorded accuracies, fewer at the
      start, is `>= acc_{t-1}`) or `alg2` (Alg. 2 as printed: their sum over the last
      `N + 1`, undivided; Amendment 4).

  Returns:
    `(score, score_loss, score_acc, score_t)`, float32 scalars. With nothing recorded
    (`t = 1`) `score_acc = 0`; `score_loss = 0` for `t <= 2` (Amendment 4).

  Raises:
    ValueError: On an unknown `score_acc`.
  """
  if score_acc not in SCORE_ACC_READINGS:
    raise ValueError(f'score_acc must be one of {", ".join(SCORE_ACC_READINGS)}. '
                     f'Found {score_acc!r}.')
  count = tf.cast(count, tf.int32)
  width = int(recent_accuracy.shape[0])
  window = cohort_size if score_acc == 'formula4' else cohort_size + 1
  n = tf.minimum(count, window)
  valid = tf.cast(tf.range(width) >= width - n, tf.float32)
  total = tf.reduce_sum(recent_accuracy * valid)
  stat = total / tf.maximum(tf.cast(n, tf.float32), 1.0) if score_acc == 'formula4' else total
  s_acc = tf.where(tf.logical_and(count >= 1, stat >= recent_accuracy[-1]), 1.0, 0.0)
  s_loss = tf.where(tf.logical_and(count >= 2, recent_loss[1] >= recent_loss[0]), 1.0, 0.0)
  t = tf.cast(count + 1, tf.float32)
  s_t = 2.0 * tf.minimum(t / float(rounds), 0.5)
  return 30.0 * s_loss + 40.0 * s_acc + 30.0 * s_t, s_loss, s_acc, s_t


@dataclasses.dataclass(frozen=True)
class BudgetInputs:
  """What a budget rule reads (float32 scalars, TF tensors inside the client work).

  Attributes:
    epsilon: The initial per-client-per-round budget `epsilon`.
    cosine: `S_c = cos(A^{t-1}, B_i^t)` of this client.
    data_fraction: `|D_i| / |D|`.
    num_clients: `M`.
    cohort_size: `N`.
    score: Formula 2's score of this round.
    global_cosine: cosFed's cosine (`cos(A^{t-1}, A^{t-2})`, or of the last two global
      updates; 1 before there are two).
  """
  epsilon: float
  cosine: tf.Tensor
  data_fraction: tf.Tensor
  num_clients: int
  cohort_size: int
  score: tf.Tensor
  global_cosine: tf.Tensor


def cosafed_rule(x: BudgetInputs) -> tf.Tensor:
  """Formula 6: `p epsilon` if `score > 50` and `p <= 1` (p from formula 1), else `epsilon`."""
  p = adjustment_coefficient(x.cosine, x.num_clients, x.cohort_size, x.data_fraction)
  return tf.where(tf.logical_and(x.score > 50.0, p <= 1.0), p * x.epsilon, x.epsilon)


def lapfed_rule(x: BudgetInputs) -> tf.Tensor:
  """LAPFed (reconstructed): `epsilon` every round."""
  return tf.ones_like(x.score) * x.epsilon


def adpfl_rule(p_fixed: float) -> Callable[[BudgetInputs], tf.Tensor]:
  """ADPFL (Tang 2023, reconstructed): `p_fixed epsilon` if `score > 50`, else `epsilon`."""
  def rule(x: BudgetInputs) -> tf.Tensor:
    return tf.where(x.score > 50.0, p_fixed * x.epsilon, x.epsilon)
  return rule


def cosfed_rule(x: BudgetInputs) -> tf.Tensor:
  """cosFed (Zhang 2022, reconstructed): `epsilon (2 - global cosine)`."""
  return x.epsilon * (2.0 - x.global_cosine)


def _flat(values) -> tf.Tensor:
  return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in tf.nest.flatten(values)], 0)


def cosine_similarity(a, b) -> tf.Tensor:
  """`<a, b> / (|a| |b|)` over the flattened structures (0 if either is zero)."""
  a, b = _flat(a), _flat(b)
  return tf.math.divide_no_nan(tf.reduce_sum(a * b), tf.norm(a) * tf.norm(b))


# ----- the process --------------------------------------------------------------------

def _loss_and_accuracy(model, xs, ys):
  ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(1000)

  def step(acc, batch):
    x, y = batch
    logits = model(x, training=False)
    loss = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
        y, logits, from_logits=True))
    correct = tf.reduce_sum(tf.cast(tf.equal(
        tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32))
    return acc + tf.stack([loss, correct, tf.cast(tf.shape(y)[0], tf.float32)])
  s = ds.reduce(tf.zeros([3]), step)
  return s[1] / tf.maximum(s[2], 1.0), s[0] / tf.maximum(s[2], 1.0)


def _check_arguments(epsilon, sensitivity, epsilon_floor, cosfed_cosine) -> None:
  """Raises ValueError on arguments `build_laplace_upload_process` cannot run with."""
  if epsilon <= 0 or sensitivity <= 0:
    raise ValueError(f'epsilon and sensitivity must be positive. Found {epsilon}, '
                     f'{sensitivity}.')
  if epsilon_floor is not None and not 0 < epsilon_floor <= epsilon:
    raise ValueError(f'epsilon_floor must be in (0, epsilon]. Found {epsilon_floor!r}.')
  if cosfed_cosine not in COSFED_COSINES:
    raise ValueError(f'cosfed_cosine must be one of {", ".join(COSFED_COSINES)}. '
                     f'Found {cosfed_cosine!r}.')


def _laplace_aggregator(trainable_type, sensitivity: float, l1_clip: Optional[float],
                        scale_by_cosine: bool):
  """`(aggregation process, update type)`: `aggregators.LaplaceUploadFactory` on uploads
  `<update (as trainable_type), cosine float32, epsilon float32>`."""
  update_specs = [tf.TensorSpec(t.shape, t.dtype) for t in trainable_type]
  value_type = tff.types.tensorflow_to_type(collections.OrderedDict(
      update=update_specs, cosine=tf.TensorSpec([], tf.float32),
      epsilon=tf.TensorSpec([], tf.float32)))
  process = aggregators.LaplaceUploadFactory(
      sensitivity, l1_clip, scale_by_cosine).create(value_type)
  return process, tff.types.tensorflow_to_type(update_specs)


def _initial_history_computation(trainable_type, cohort_size: int):
  """The server's history at round 1: `<recent_accuracy float32[N+1], recent_loss
  float32[2], count int32, previous_model, previous_update>` (zeros; the models as
  `trainable_type`)."""
  zeros = [np.zeros(t.shape, np.float32) for t in trainable_type]

  @tff.tensorflow.computation
  def initial_history():
    return collections.OrderedDict(
        recent_accuracy=tf.zeros([cohort_size + 1]), recent_loss=tf.zeros([2]),
        count=tf.constant(0, tf.int32), previous_model=[tf.constant(z) for z in zeros],
        previous_update=[tf.constant(z) for z in zeros])
  return initial_history


def _signals_computation(history_type, weights_type, *, rounds: int, cohort_size: int,
                         score_acc: str, cosfed_cosine: str):
  """`(history, A^{t-1}) -> <score, score_loss, score_acc, score_t, global_cosine>`:
  formulas 2-5 from the history, and cosFed's cosine of the last two models
  (`cosfed_cosine='models'`) or updates (1 until there are two)."""
  @tff.tensorflow.computation(history_type, weights_type)
  def signals_fn(history, weights):
    total_score, s_loss, s_acc, s_t = score(
        history['recent_accuracy'], history['recent_loss'], history['count'],
        rounds=rounds, cohort_size=cohort_size, score_acc=score_acc)
    current = list(weights.trainable)
    if cosfed_cosine == 'models':
      g = tf.where(history['count'] >= 1,
                   cosine_similarity(current, history['previous_model']), 1.0)
    else:
      last = [a - b for a, b in zip(current, history['previous_model'])]
      g = tf.where(history['count'] >= 2,
                   cosine_similarity(last, history['previous_update']), 1.0)
    return collections.OrderedDict(score=total_score, score_loss=s_loss, score_acc=s_acc,
                                   score_t=s_t, global_cosine=g)
  return signals_fn


def _budget_computation(weights_type, result_type, signals_type, *, rule, epsilon: float,
                        epsilon_floor: Optional[float], num_clients: int, cohort_size: int,
                        total_examples: float, epochs: float):
  """`(A^{t-1}, client result, signals) -> (upload, extra, epsilon')` at a client: its
  cosine `S_c = cos(A^{t-1}, B_i^t)`, its budget `epsilon'` from `rule` (floored at
  `epsilon_floor`), the upload `<update, cosine, epsilon>` the Laplace factory perturbs,
  and `extra = <floor_binding int32, p float32>` (formula 1's `p`) for the metrics."""
  @tff.tensorflow.computation(weights_type, result_type, signals_type)
  def adjust_fn(weights, result, signals):
    a = list(weights.trainable)
    b = [w - u for w, u in zip(a, result.update)]
    cos = cosine_similarity(a, b)
    fraction = result.update_weight / epochs / total_examples
    raw = rule(BudgetInputs(epsilon=epsilon, cosine=cos, data_fraction=fraction,
                            num_clients=num_clients, cohort_size=cohort_size,
                            score=signals['score'], global_cosine=signals['global_cosine']))
    raw = tf.cast(raw, tf.float32)
    eps = raw if epsilon_floor is None else tf.maximum(raw, epsilon_floor)
    value = collections.OrderedDict(update=result.update, cosine=cos, epsilon=eps)
    extra = collections.OrderedDict(
        floor_binding=tf.cast(eps > raw, tf.int32),
        p=adjustment_coefficient(cos, num_clients, cohort_size, fraction))
    return value, extra, eps
  return adjust_fn


def _server_update_computation(keras_builder, data: FederatedData, weights_type,
                               update_type, history_type):
  """`(A^{t-1}, mean upload, history) -> (A^t, history, <validation_accuracy,
  validation_loss>)`: `A^t = A^{t-1} - mean Q`, and the validation accuracy and loss of
  `A^t` appended to the history (Alg. 1 line 12)."""
  @tff.tensorflow.computation(weights_type, update_type, history_type)
  def server_fn(weights, mean_update, history):
    old = list(weights.trainable)
    new = [w - u for w, u in zip(old, mean_update)]
    evaluate = common.server_split_metric(keras_builder, data, 'validation',
                                          _loss_and_accuracy)
    accuracy, loss = evaluate(new)
    new_history = collections.OrderedDict(
        recent_accuracy=tf.concat([history['recent_accuracy'][1:], [accuracy]], 0),
        recent_loss=tf.stack([history['recent_loss'][1], loss]),
        count=history['count'] + 1, previous_model=old,
        previous_update=[a - b for a, b in zip(old, history['previous_model'])])
    model = tff.learning.models.ModelWeights(trainable=new,
                                             non_trainable=list(weights.non_trainable))
    return model, new_history, collections.OrderedDict(validation_accuracy=accuracy,
                                                       validation_loss=loss)
  return server_fn


def _model_of(state):
  """The global model's weights in the process's server state (in Python too:
  `Method.model_weights`)."""
  return state['model']


def _model_weights_accessors(state_type, weights_type):
  """`get_model_weights` and `set_model_weights` of the process's server state."""
  @tff.tensorflow.computation(state_type.member)
  def get_model_weights(state):
    return _model_of(state)

  @tff.tensorflow.computation(state_type.member, weights_type)
  def set_model_weights(state, weights):
    return collections.OrderedDict(model=weights, history=state['history'],
                                   client_work=state['client_work'],
                                   aggregator=state['aggregator'])
  return get_model_weights, set_model_weights


def _round_on_client_ids(body, data: FederatedData, batching, insertion, state_type,
                         slice_type=None):
  """`round_fn(state, client_ids@CLIENTS, client_seeds@CLIENTS[, canary@CLIENTS])`:
  `body` on the clients' data built from their ids and seeds (in an audit, each client's
  canary index too: `canaries.Insertion.split`); with `slice_type` (cohort slices of one
  client), `round_fn(state, slices@CLIENTS)` (`common.cohort_slices`): `body` itself."""
  if slice_type is not None:
    @tff.federated_computation(state_type, tff.FederatedType(slice_type, tff.CLIENTS))
    def slice_round_fn(state, slices):
      return body(state, slices)
    return slice_round_fn
  client_data_comp = data.client_data_computation(batching)
  ids_type = tff.FederatedType(np.str_, tff.CLIENTS)
  seeds_type = tff.FederatedType(tff.TensorType(np.int64, [2]), tff.CLIENTS)
  if insertion is None:
    @tff.federated_computation(state_type, ids_type, seeds_type)
    def round_fn(state, client_ids, client_seeds):
      return body(state, tff.federated_map(client_data_comp, (client_ids, client_seeds)))
    return round_fn
  insertion.took_round()
  value = canaries.client_value(client_data_comp)

  @tff.federated_computation(state_type, ids_type, seeds_type,
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def canary_round_fn(state, client_ids, client_seeds, canary):
    return body(state, tff.federated_map(value, (client_ids, client_seeds, canary)))
  return canary_round_fn


def build_laplace_upload_process(
    keras_builder, data: FederatedData, validation, *, rule: Callable[[BudgetInputs], tf.Tensor],
    rounds: int, cohort_size: int, epsilon: float, sensitivity: float,
    l1_clip: Optional[float], scale_by_cosine: bool, learning_rate: float, batching,
    epsilon_floor: Optional[float], score_acc: str, cosfed_cosine: str, seed: int,
    clients_per_slice: Optional[int] = None):
  """The round of Alg. 1 with a budget `rule`: `(process, round_fn)`.

  `process` is a `tff.learning.templates.LearningProcess` (`next(state, client
  datasets)`); `round_fn(state, client_ids@CLIENTS, client_seeds@CLIENTS) -> <state,
  metrics, epsilon'@CLIENTS>` is the same round on client ids, also returning each
  client's `epsilon'` (the ledger's events) in cohort order. With `clients_per_slice=1`
  each TFF client value is a cohort slice of one client whose batches are read by index
  tensors (`baselines.client_work`; no `tf.data` pipeline per client), and both take
  `(state, slices@CLIENTS)` (`common.cohort_slices`): each upload is still one client's.

  Raises:
    ValueError: On invalid arguments, `clients_per_slice` other than None or 1, or
      cohort slices in an audit build.
  """
  _check_arguments(epsilon, sensitivity, epsilon_floor, cosfed_cosine)
  common.check_one_client_per_slice('the Laplace-upload methods', clients_per_slice)
  common.check_no_canaries_in_slices(clients_per_slice)
  data.add_server_split('validation', *validation)
  init_weights = common.initial_weights_computation(keras_builder, seed)
  weights_type = init_weights.type_signature.result
  # In an audit build, canary clients' update is `norm * u_j` (`canaries.with_canaries`).
  client_work = canaries.wrap_client_work(dp_sgd_client_work(
      keras_builder, data, learning_rate=learning_rate, dp_sgd='none', batching=batching,
      clients_per_slice=clients_per_slice))
  insertion = canaries.active()
  aggregator, update_type = _laplace_aggregator(weights_type.trainable, sensitivity,
                                                l1_clip, scale_by_cosine)
  initial_history = _initial_history_computation(weights_type.trainable, cohort_size)
  history_type = initial_history.type_signature.result

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict(
        model=tff.federated_eval(init_weights, tff.SERVER),
        history=tff.federated_eval(initial_history, tff.SERVER),
        client_work=client_work.initialize(), aggregator=aggregator.initialize()))

  state_type = init_fn.type_signature.result
  signals_fn = _signals_computation(history_type, weights_type, rounds=rounds,
                                    cohort_size=cohort_size, score_acc=score_acc,
                                    cosfed_cosine=cosfed_cosine)
  adjust_fn = _budget_computation(
      weights_type, client_work.next.type_signature.result.result.member,
      signals_fn.type_signature.result, rule=rule, epsilon=epsilon,
      epsilon_floor=epsilon_floor, num_clients=data.num_clients, cohort_size=cohort_size,
      total_examples=float(np.sum(data.client_sizes)), epochs=float(batching.local_epochs))
  server_fn = _server_update_computation(keras_builder, data, weights_type, update_type,
                                         history_type)

  def body(state, client_data):
    signals = tff.federated_map(signals_fn, (state.history, state.model))
    weights_at_clients = tff.federated_broadcast(state.model)
    cw = client_work.next(state.client_work, weights_at_clients, client_data)
    value, extra, eps = tff.federated_map(
        adjust_fn, (weights_at_clients, cw.result, tff.federated_broadcast(signals)))
    agg = aggregator.next(state.aggregator, value)
    model, history, server_metrics = tff.federated_map(
        server_fn, (state.model, agg.result, state.history))
    new_state = tff.federated_zip(collections.OrderedDict(
        model=model, history=history, client_work=cw.state, aggregator=agg.state))
    metrics = tff.federated_zip(collections.OrderedDict(
        client_work=cw.measurements, aggregator=agg.measurements, signals=signals,
        floor_binding=tff.federated_sum(extra.floor_binding),
        mean_p=tff.federated_mean(extra.p), server=server_metrics))
    return new_state, metrics, eps

  client_data_type = client_work.next.type_signature.parameter[2].member

  @tff.federated_computation(state_type, tff.FederatedType(client_data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    new_state, metrics, _ = body(state, client_data)
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  round_fn = _round_on_client_ids(body, data, batching, insertion, state_type,
                                  client_data_type if clients_per_slice else None)
  process = tff.learning.templates.LearningProcess(
      init_fn, next_fn, *_model_weights_accessors(state_type, weights_type))
  return process, round_fn


BUDGET_RULES = ('cosafed', 'lapfed', 'adpfl', 'cosfed')


def laplace_upload_round(round_fn, insertion, state, cohort, round_num, run_seed,
                         clients_per_slice=None):
  """`Method.run_round` of a Laplace-upload method: `round_fn` on the cohort's ids and
  seeds (in an audit, canary ids `N + j` run on client 0's data; with
  `clients_per_slice=1`, as cohort slices of one client), the clients' `epsilon'` added
  to the metrics as `client_epsilons` (float64 `[len(cohort)]`, cohort order)."""
  seeds = common.client_seeds(run_seed, round_num, cohort)
  if clients_per_slice:
    state, metrics, eps = round_fn(state, common.cohort_slices(cohort, seeds,
                                                               clients_per_slice))
  elif insertion is None:
    state, metrics, eps = round_fn(state, [str(c) for c in cohort], seeds)
  else:  # an audit: canary ids `N + j` run on client 0's data
    ids, index = insertion.split(cohort)
    state, metrics, eps = round_fn(state, ids, seeds, [np.int32(i) for i in index])
  metrics = collections.OrderedDict(metrics)
  metrics['client_epsilons'] = np.asarray(eps, np.float64).ravel()
  return state, metrics


@dataclasses.dataclass(frozen=True)
class LaplaceUploadLedgers:
  """The releases of a Laplace-upload round in both ledgers, from the `epsilon'` each
  client's upload was noised with (`client_epsilons`, returned by the round), and the
  check of each round against what `aggregators.LaplaceUploadFactory` states.

  Attributes:
    method: `cosafed`, `lapfed`, `adpfl` or `cosfed`.
    sensitivity: `Delta_f`.
    l1_clip: The L1 bound of each upload, or None (paper-literal: no guarantee).
  """
  method: str
  sensitivity: float
  l1_clip: Optional[float]

  def releases(self, cohort, state, metrics) -> tuple[common.Releases, common.Releases]:
    """Claimed: each upload `epsilon'`-DP (Theorem 1). Guaranteed: `inf` without a clip
    or for cosAFed (data-dependent scale); otherwise `Lap(Delta_f / epsilon')` on an
    update of L1 norm `<= l1_clip` (add/remove adjacency): `epsilon' l1_clip / Delta_f`.
    An `epsilon'` of 0 (infinite noise) releases nothing and is not charged."""
    del state
    claimed, guaranteed = [], []
    for c, e in zip(cohort, metrics['client_epsilons']):
      who = np.array([c])
      if not e > 0:
        continue
      if np.isinf(e):
        claimed.append((who, None, "epsilon' = inf: no noise"))
        guaranteed.append((who, None, "epsilon' = inf: no noise"))
        continue
      claimed.append((who, privacy_event(e), ''))
      if self.l1_clip is None:
        guaranteed.append((who, None, UNBOUNDED_REASON))
      elif self.method == 'cosafed':
        guaranteed.append((who, None, DATA_DEPENDENT_REASON))
      else:
        guaranteed.append((who, privacy_event(e * self.l1_clip / self.sensitivity), ''))
    return claimed, guaranteed

  def check_round(self, cohort, state, metrics) -> Optional[str]:
    """The clients the aggregator counted and the `epsilon'` it noised with (its sum)
    against the cohort and the budgets the ledgers account."""
    del state
    upload = metrics['aggregator']['laplace_upload']
    eps = metrics['client_epsilons']
    if int(upload['clients']) != len(cohort) or len(eps) != len(cohort):
      return (f'{int(upload["clients"])} clients uploaded and {len(eps)} budgets came '
              f'back; the cohort has {len(cohort)}')
    if not np.isclose(float(upload['epsilon_sum']), float(np.sum(eps)), rtol=1e-5):
      return (f"the aggregator noised with epsilon' summing to {float(upload['epsilon_sum'])}; "
              f'the ledger would account {float(np.sum(eps))}')
    return None


def laplace_upload_round_metrics(epsilon: float, metrics) -> dict:
  """The budgets, scores and upload measurements of a round (`Method.round_metrics`)."""
  upload, signals = metrics['aggregator']['laplace_upload'], metrics['signals']
  eps = metrics['client_epsilons']
  return {'epsilon_prime_sum': float(np.sum(eps)),
          'adjusted_clients': int(np.sum(~np.isclose(eps, epsilon, rtol=1e-6))),
          'epsilon_prime_min': float(np.min(eps)), 'epsilon_prime_max': float(np.max(eps)),
          'score': float(signals['score']), 'score_loss': float(signals['score_loss']),
          'score_acc': float(signals['score_acc']), 'score_t': float(signals['score_t']),
          'global_cosine': float(signals['global_cosine']),
          'mean_cosine': float(upload['mean_cosine']), 'mean_p': float(metrics['mean_p']),
          'floor_binding': int(metrics['floor_binding']),
          'zero_budget_clients': int(upload['zero_budget_clients']),
          'l1_clipped': int(upload['l1_clipped']),
          'mean_l1_norm': float(upload['mean_l1_norm'])}


def laplace_upload_notes(method: str, sensitivity: float, l1_clip: Optional[float]) -> dict:
  """The config notes of a Laplace-upload method (`Method.notes`)."""
  not_given = 'not given in the paper; chosen because '
  notes = dict(
      learning_rate=not_given + 'see the experiment config (Amendment 7)',
      sensitivity='Delta_f is not given: calibrated against LAPFed 81.95 (Equal, N = 3, '
      'epsilon 100; Amendment 3), see the experiment config',
      epsilon_claimed="the paper's count: per client the sum of its epsilon' (Theorem 1 "
      'per upload, basic composition); Table 3 sums it over clients (epsilon_prime_sum)',
      epsilon_guaranteed=('inf: ' + UNBOUNDED_REASON) if l1_clip is None else
      ('inf: ' + DATA_DEPENDENT_REASON) if method == 'cosafed' else
      "client-level, add/remove adjacency (a client's absence counts as a zero upload; "
      "replacing a client doubles the cost): each upload Lap(Delta_f / epsilon') on an "
      f"update of L1 norm <= {l1_clip}, i.e. (epsilon' {l1_clip} / Delta_f)-DP; per "
      "client the best of basic composition, dp_accounting's RDP and PLD",
      diagnostics="the per-round measurements (mean cosine, mean L1 norm, clipped count, "
      "the epsilon' values, the score inputs) are simulation diagnostics, not part of "
      'the released mechanism, and are not accounted',
      noise_rng="Laplace noise from TF's stateful RNG: runs are not bit-reproducible" + (
          '' if method == 'lapfed' else "; the budgets epsilon' follow the noisy model "
          "from round 2 on, so a rerun's epsilons are comparable in round 1 only"))
  if method != 'cosafed':
    notes['method'] = (f'{RECONSTRUCTED[method]} from cosAFed\'s description '
                       '(baselines.md), not from its own paper')
  if method == 'adpfl':
    notes['p_fixed'] = ('Amendment 2: 0.95 makes the paper\'s totals 103,155 / 103,170 '
                        'whole numbers of adjustments')
  if l1_clip is not None and l1_clip != sensitivity:
    notes['l1_clip'] = (f'l1_clip {l1_clip} != Delta_f {sensitivity}: each upload is '
                        f"(epsilon' l1_clip / Delta_f)-DP (the guaranteed ledger's event); "
                        "the claimed ledger counts epsilon' as the paper does")
  return notes


def build_cosafed(keras_builder, data: FederatedData, validation, *, method: str = 'cosafed',
                  rounds: int, cohort_size: int,
                  hp: Optional['LaplaceUploadHparams'] = None, learning_rate: float = 0.01,
                  batch_size: int = 10, local_epochs: int = 1,
                  delta: float = 1e-5, seed: int = 0,
                  clients_per_slice: Optional[int] = None) -> common.Method:
  """Builds cosAFed or one of its reconstructed baselines (see the module docstring).

  Args:
    keras_builder: No-arg callable returning the model (logits out; Sec. 5: logistic
      regression).
    data: The clients' data (`|D_i|` = `data.client_sizes`).
    validation: Server split `(x, y)` whose accuracy/loss the scores read.
    method: `cosafed`, `lapfed`, `adpfl` or `cosfed` (`BUDGET_RULES`).
    rounds: `T` (formula 5).
    cohort_size: `N` clients per round (formula 1, the accuracy window of formula 4).
    hp: The method's own options, an instance of `HPARAMS[method]` (validated on
      creation; None takes their defaults): the initial per-client-per-round budget
      `epsilon` (Sec. 5: 100-200), `sensitivity` `Delta_f` (not given; calibrated,
      Amendment 3), `l1_clip` (None, paper-literal: no clip, no guarantee; or the L1
      bound of each upload) and, where the method has them, cosAFed's `epsilon_floor`
      (Amendment 5), `score_acc` (Amendment 4), ADPFL's `p_fixed` (Amendment 2) and
      cosFed's `cosfed_cosine`.
    learning_rate, batch_size, local_epochs: Local SGD (not given in the paper).
    delta: delta of the guaranteed ledger's RDP and PLD bounds.
    seed: Model-initialisation seed.
    clients_per_slice: None (each client's batches a `tf.data` pipeline, as the committed
      runs) or 1 (cohort slices of one client, batches read by index tensors: the same
      batches and, without noise, the same model to float32 rounding; faster,
      `benchmarks.run --only slices`).

  Returns:
    A `common.Method` with `ledger='laplace'` and `releases_from_round`.

  Raises:
    ValueError: On invalid arguments, or `clients_per_slice` other than None or 1.
    TypeError: If `hp` is not an instance of `HPARAMS[method]`.
  """
  hp = registry.hparams_of(method, hp, HPARAMS)
  # Options a method does not have keep their class defaults in its recorded
  # hyperparameters (its rule never reads them).
  epsilon, sensitivity, l1_clip = hp.epsilon, hp.sensitivity, hp.l1_clip
  epsilon_floor = getattr(hp, 'epsilon_floor', CosAFedHparams.epsilon_floor)
  score_acc = getattr(hp, 'score_acc', ScoredHparams.score_acc)
  p_fixed = getattr(hp, 'p_fixed', ADPFLUploadHparams.p_fixed)
  cosfed_cosine = getattr(hp, 'cosfed_cosine', CosFedHparams.cosfed_cosine)
  rule = {'cosafed': cosafed_rule, 'lapfed': lapfed_rule, 'adpfl': adpfl_rule(p_fixed),
          'cosfed': cosfed_rule}[method]
  batching = ShuffleBatch(batch_size, local_epochs)
  process, round_fn = build_laplace_upload_process(
      keras_builder, data, validation, rule=rule, rounds=rounds, cohort_size=cohort_size,
      epsilon=epsilon, sensitivity=sensitivity, l1_clip=l1_clip,
      scale_by_cosine=(method == 'cosafed'), learning_rate=learning_rate,
      batching=batching, epsilon_floor=epsilon_floor, score_acc=score_acc,
      cosfed_cosine=cosfed_cosine, seed=seed, clients_per_slice=clients_per_slice)
  privacy.check_delta(delta)

  insertion = canaries.active()
  ledgers = LaplaceUploadLedgers(method, sensitivity, l1_clip)
  return common.Method(
      name=method, process=process, batching=batching, dp_unit=privacy.CLIENT_LEVEL,
      cohort_sampling='uniform', round_computation=round_fn,
      run_round=functools.partial(laplace_upload_round, round_fn, insertion,
                                  clients_per_slice=clients_per_slice),
      clients_per_slice=clients_per_slice,
      model_weights=_model_of,
      accounting=common.Accounting(
          common.no_releases, common.no_releases, releases_from_round=ledgers.releases,
          ledger='laplace', check_round=ledgers.check_round,
          # LapFed's budget is constant: every upload at epsilon', whatever the round did.
          fixed_round_metrics=(
              (lambda cohort: {'client_epsilons': np.full(len(cohort), epsilon)})
              if method == 'lapfed' else None)),
      adaptive_quantities=lambda state: {},
      round_metrics=functools.partial(laplace_upload_round_metrics, epsilon),
      hyperparameters=dict(
          method=method, rounds=rounds, cohort_size=cohort_size, epsilon=epsilon,
          sensitivity=sensitivity, l1_clip=l1_clip, epsilon_floor=epsilon_floor,
          score_acc=score_acc, p_fixed=p_fixed, cosfed_cosine=cosfed_cosine,
          learning_rate=learning_rate, batch_size=batch_size, local_epochs=local_epochs,
          scale_by_cosine=method == 'cosafed', reconstructed=method != 'cosafed'),
      notes=laplace_upload_notes(method, sensitivity, l1_clip))


def privacy_event(epsilon_prime: float):
  """The `dp_accounting.LaplaceDpEvent` of one upload with budget `epsilon'`."""
  return dp_accounting.LaplaceDpEvent(1.0 / float(epsilon_prime))


# ----- registry ---------------------------------------------------------------------

_NOT_GIVEN = 'not given in the paper; chosen because '


@dataclasses.dataclass(frozen=True)
class LaplaceUploadHparams(registry.MethodHparams):
  """Options every Laplace-upload method shares (cosAFed Sec. 3, formula 7)."""
  epsilon: float = registry.option(
      100.0, "initial per-client-per-round budget epsilon (Sec. 5: 100-200; inf: no "
      "noise, the noise-free reference of the Delta_f calibration)", allow_infinite=True)
  sensitivity: float = registry.option(
      1.0, 'Delta_f of the Laplace scale Delta_f / epsilon\'',
      note=_NOT_GIVEN + 'calibrated on the Equal split (Amendment 3)')
  l1_clip: Optional[float] = registry.option(
      None, 'clip each upload to this L1 norm before the noise (unset: paper-literal, '
      'epsilon_guaranteed = inf)')

  def __post_init__(self):
    super().__post_init__()
    if self.epsilon <= 0 or self.sensitivity <= 0:
      raise ValueError(f'epsilon and sensitivity must be positive. Found '
                       f'epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r}.')
    if self.l1_clip is not None and self.l1_clip <= 0:
      raise ValueError(f'l1_clip must be positive. Found l1_clip={self.l1_clip!r}.')

  def check_run(self, config) -> None:
    if config.cohort_sampling != 'uniform':
      raise ValueError('cohort_sampling must be uniform (N of M clients, Alg. 1). Found '
                       f'cohort_sampling={config.cohort_sampling!r}.')
    # Each client's upload is perturbed: a slice holds one client.
    common.check_one_client_per_slice('the Laplace-upload methods', config.clients_per_slice)


@dataclasses.dataclass(frozen=True)
class ScoredHparams(LaplaceUploadHparams):
  score_acc: str = registry.option(
      'formula4', 'accuracy score: formula4 (mean of the last N accuracies) or alg2 '
      '(Alg. 2: their undivided sum, always 1; Amendment 4)', choices=SCORE_ACC_READINGS)


@dataclasses.dataclass(frozen=True)
class CosAFedHparams(ScoredHparams):
  epsilon_floor: Optional[float] = registry.option(
      None, "lower bound on epsilon' (Amendment 5; unset: none, as the paper)")


@dataclasses.dataclass(frozen=True)
class ADPFLUploadHparams(ScoredHparams):
  """Options of `adpfl`, the cosAFed paper's reconstructed ADPFL (Laplace uploads; A-DPFL
  itself, `a_dpfl`, takes `a_dpfl.ADPFLHparams`)."""
  p_fixed: float = registry.option(
      0.95, 'ADPFL\'s fixed coefficient p (Amendment 2: 0.95)')

  def __post_init__(self):
    super().__post_init__()
    if not 0 < self.p_fixed <= 1:
      raise ValueError(f'p_fixed must be in (0, 1]. Found p_fixed={self.p_fixed!r}.')


@dataclasses.dataclass(frozen=True)
class CosFedHparams(LaplaceUploadHparams):
  cosfed_cosine: str = registry.option(
      'models', 'cosine of consecutive global models or of consecutive global updates '
      '(Amendment 6: neither reproduces the paper\'s totals)', choices=COSFED_COSINES)


def _builder(name: str):
  def build(ctx: registry.BuildContext, hp: LaplaceUploadHparams) -> common.Method:
    c = ctx.config
    return build_cosafed(
        ctx.keras_builder, ctx.data, ctx.validation, method=name, rounds=c.rounds,
        cohort_size=c.clients_per_round, hp=hp, learning_rate=c.learning_rate,
        batch_size=c.batch_size, local_epochs=c.local_epochs, delta=c.delta, seed=c.seed,
        clients_per_slice=c.clients_per_slice)
  return build


_SHARED = dict(learning_rate='local SGD learning rate (not given in the paper)',
               batch_size='local batch size (not given)',
               clients_per_round='N, clients sampled per round (formula 1)',
               clients='M, all clients (formula 1)',
               noise_multiplier='unused: the Laplace scale is Delta_f / epsilon\'',
               clip_norm='unused: see l1_clip')

HPARAMS = dict(cosafed=CosAFedHparams, lapfed=LaplaceUploadHparams,
               adpfl=ADPFLUploadHparams, cosfed=CosFedHparams)
METHODS = (
    registry.MethodSpec('cosafed', _builder('cosafed'), CosAFedHparams,
                        'cosAFed (spec cosafed.md): cosine-scaled Laplace uploads, budget '
                        'adjusted by formulas 1-6', shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec('lapfed', _builder('lapfed'), LaplaceUploadHparams,
                        'LAPFed (reconstructed, baselines.md): Laplace uploads with a '
                        'constant budget', shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec('adpfl', _builder('adpfl'), ADPFLUploadHparams,
                        'ADPFL (Tang 2023, reconstructed, baselines.md; not A-DPFL): '
                        'score-gated fixed coefficient', shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec('cosfed', _builder('cosfed'), CosFedHparams,
                        'cosFed (Zhang 2022, reconstructed, baselines.md): budget '
                        'epsilon (2 - cosine of the global models)', shared_meanings=_SHARED, slices_of_one=True),
)
