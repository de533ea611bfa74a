"""Reusable DP-SGD client work (Abadi et al. 2016) as a TFF `ClientWorkProcess`.

Used by DPFL, A-DPFL and DP-SCAFFOLD (whose step adds a control-variate correction). Type signature:

    init:  ( -> S@SERVER)
    next:  (<S@SERVER, ModelWeights@CLIENTS, <batches=D*, seed=int64[2]*>@CLIENTS>
            -> <state=S@SERVER, result=ClientResult(update, update_weight)@CLIENTS,
                measurements=<train=<loss_sum, num_examples, num_steps>>@SERVER>)

Built with `max_clients`, the measurements also hold `dp_event=<rows float32
[max_clients, 3], count int32>`: one row `(num_examples, num_steps, noise_multiplier)` per
client trained (`STATED_ROW`), from the computation that ran its noised steps
(`aggregators.gather_rows`); `stated_rows` reads them.

where the state `S = <noise_multiplier=float32, clip_norm=float32>` is broadcast to the
clients every round (a method may change it between rounds; it travels with the server
state, so a resumed run continues exactly). `update` is the model delta
`initial - trained` (a list of float32 tensors shaped like the trainable weights),
`update_weight` the number of examples processed (float32).

Per batch of size `B` (per-example gradients `g_i`, clip norm `C`, noise multiplier
`sigma`, noise `z ~ N(0, sigma^2 C^2 I)` drawn from a stateless RNG seeded by the
client's seed and the step):

| `dp_sgd` | gradient step direction |
|---|---|
| `none` | `mean_i g_i` (non-private local SGD, FedAvg) |
| `clip_then_noise` | `(sum_i g_i * min(1, C/||g_i||) + z) / B` (Abadi et al. 2016, Alg. 1) |
| `paper_order` | `g = (sum_i g_i + z) / B; g * min(1, C/||g||)` (A-DPFL Alg. 3 as printed: no per-example clipping, unbounded sensitivity) |

followed by `w <- w - learning_rate * direction`.
"""

from __future__ import annotations

import collections
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, queries
from tffdp.algorithms import per_example
from tffdp.data.federated import FederatedData

DP_SGD_MODES = ('none', 'clip_then_noise', 'paper_order')

KerasBuilder = Callable[[], tf.keras.Model]

# What each client states of its local DP-SGD (`dp_event` measurement).
STATED_ROW = ('num_examples', 'num_steps', 'noise_multiplier')


gaussian_noise_like = queries.gaussian_noise_like


def build_local_step(model: tf.keras.Model, learning_rate: float, dp_sgd: str,
                     insertion: Optional[canaries.Insertion] = None):
  """Returns `step(x, y, seed, step_index, noise_multiplier, clip_norm, correction=None,
  step_canaries=None) -> losses [B]`.

  One local update of `model`'s variables on a batch (see the module docstring); the
  noise seed of the step is `stateless_fold_in(seed, step_index)`. `correction` (a list
  shaped like the trainable variables, e.g. SCAFFOLD's `c - c_i`) is added to the step
  direction after the DP-SGD release: `w <- w - learning_rate * (direction + correction)`.
  With `insertion` (an audit's gradient canaries), `step_canaries` (int32 `[P]`) names
  the canaries whose gradients join this step's examples: each is clipped like them
  (`clip_then_noise`) and summed with them before the noise (`canaries.gradient_sum`);
  the divisor stays the batch's own size `B`.
  """
  lr = tf.constant(learning_rate, tf.float32)
  shapes = [v.shape for v in model.trainable_variables]

  def with_canaries(summed, indices, clip_norm=None):
    if indices is None:
      return summed
    clip = lambda g: g
    if clip_norm is not None:
      def clip(g):
        scale = per_example.clip_scale(tf.linalg.global_norm(g), clip_norm)
        return [t * scale for t in g]
    extra = canaries.gradient_sum(insertion, indices, shapes, clip)
    return [s + e for s, e in zip(summed, extra)]

  def step(x, y, seed, step_index, noise_multiplier, clip_norm, correction=None,
           step_canaries=None):
    bf = tf.maximum(tf.cast(tf.shape(y)[0], tf.float32), 1.0)
    step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step_index, tf.int64))
    # The step's release; `common.dp_sgd_releases` states its event from the same query.
    query = queries.GaussianSumQuery(noise_multiplier, clip_norm)
    if dp_sgd == 'clip_then_noise':
      summed, _, losses = per_example.clipped_gradient_sum(model, x, y, clip_norm)
      summed = with_canaries(summed, step_canaries, clip_norm)
      direction = [g / bf for g in query.add_noise(summed, step_seed)]
    else:
      with tf.GradientTape() as tape:
        logits = model(x, training=True)
        losses = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        total = tf.reduce_sum(losses)
      summed = with_canaries(tape.gradient(total, model.trainable_variables), step_canaries)
      if dp_sgd == 'none':
        direction = [g / bf for g in summed]
      else:  # paper_order: noise on the unclipped sum (unbounded sensitivity)
        g = [t / bf for t in query.add_noise(summed, step_seed)]
        scale = tf.minimum(1.0, clip_norm / tf.maximum(tf.linalg.global_norm(g), 1e-12))
        direction = [t * scale for t in g]
    if correction is not None:
      direction = [d + c for d, c in zip(direction, correction)]
    for v, d in zip(model.trainable_variables, direction):
      v.assign_sub(lr * d)
    return losses

  return step


def build_client_update(keras_builder: KerasBuilder, learning_rate: float, dp_sgd: str,
                        insertion: Optional[canaries.Insertion] = None):
  """Returns the per-client `tf.function`.

  `client_update(initial_trainable, batches, seed, noise_multiplier, clip_norm,
  correction=None, canary_steps=None)` returns `(update, update_weight, metrics)`: the
  model delta `initial - trained` (list of float32 tensors), the number of examples
  (float32) and `OrderedDict(loss_sum, num_examples, num_steps)`. `correction` is added
  to every step's direction (`build_local_step`; DP-SCAFFOLD's `c - c_i`). With
  `insertion`, `canary_steps` is the client's canary table (int32 `[S, P]`,
  `canaries.CANARY_TABLE`): row `s` joins step `s`.
  """
  model = keras_builder()
  step = build_local_step(model, learning_rate, dp_sgd, insertion)

  def start(initial_trainable):
    for v, w in zip(model.trainable_variables, initial_trainable):
      v.assign(w)

  def finish(initial_trainable, n_examples, loss_sum, n_steps):
    """`(update, update_weight, metrics)` once the local steps have run."""
    update = [w - v for w, v in zip(initial_trainable, model.trainable_variables)]
    metrics = collections.OrderedDict(loss_sum=loss_sum, num_examples=n_examples,
                                      num_steps=n_steps)
    return update, tf.cast(n_examples, tf.float32), metrics

  @tf.function
  def client_update(initial_trainable, batches, seed, noise_multiplier, clip_norm,
                    correction=None, canary_steps=None):
    start(initial_trainable)

    def reduce_fn(acc, batch):
      n_steps, n_examples, loss_sum = acc
      joining = (None if canary_steps is None
                 else canaries.step_canaries(canary_steps, n_steps))
      losses = step(batch['x'], batch['y'], seed, n_steps, noise_multiplier, clip_norm,
                    correction, joining)
      return (n_steps + 1, n_examples + tf.cast(tf.shape(batch['y'])[0], tf.int64),
              loss_sum + tf.reduce_sum(losses))

    n_steps, n_examples, loss_sum = batches.reduce(
        (tf.constant(0, tf.int32), tf.constant(0, tf.int64), tf.constant(0.0)), reduce_fn)
    return finish(initial_trainable, n_examples, loss_sum, n_steps)

  @tf.function
  def client_update_indexed(initial_trainable, xs, ys, order, batch_size, num_batches,
                            epoch_size, seed, noise_multiplier, clip_norm):
    """As `client_update`, on the batches of `FederatedData.client_batch_indices`."""
    start(initial_trainable)
    n_examples, loss_sum = tf.constant(0, tf.int64), tf.constant(0.0)
    for s in tf.range(num_batches):
      idx = FederatedData.batch_rows(order, s, batch_size, epoch_size)
      losses = step(tf.gather(xs, idx), tf.gather(ys, idx), seed, s, noise_multiplier,
                    clip_norm)
      n_examples += tf.cast(tf.shape(idx)[0], tf.int64)
      loss_sum += tf.reduce_sum(losses)
    return finish(initial_trainable, n_examples, loss_sum, num_batches)

  client_update.indexed = client_update_indexed
  return client_update


def _initial_state(dp_sgd, learning_rate, noise_multiplier, clip_norm) -> tff.Computation:
  """Validates the hyperparameters; `( -> <noise_multiplier, clip_norm>@SERVER)`."""
  if dp_sgd not in DP_SGD_MODES:
    raise ValueError(f'dp_sgd must be one of {DP_SGD_MODES}. Found {dp_sgd!r}.')
  if learning_rate <= 0:
    raise ValueError(f'learning_rate must be positive. Found {learning_rate}.')
  if noise_multiplier < 0:
    raise ValueError(f'noise_multiplier must be >= 0. Found {noise_multiplier}.')
  if clip_norm <= 0:
    raise ValueError(f'clip_norm must be positive. Found {clip_norm}.')

  @tff.tensorflow.computation
  def initial_state():
    return collections.OrderedDict(
        noise_multiplier=tf.constant(noise_multiplier, tf.float32),
        clip_norm=tf.constant(clip_norm, tf.float32))

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)
  return init_fn


def _client_work_process(init_fn, weights_type, data_type, client_fn, gather=None
                         ) -> tff.learning.templates.ClientWorkProcess:
  """Broadcasts the state, maps `client_fn` over the clients, sums the measurements.

  With `gather` (`aggregators.gather_rows`), `client_fn` also returns its stated rows,
  gathered as the `dp_event` measurement."""

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    out = tff.federated_map(client_fn, (tff.federated_broadcast(state), weights, data))
    measured = collections.OrderedDict(train=tff.federated_sum(out[1]))
    if gather is not None:
      measured['dp_event'] = gather(out[2])
    return tff.templates.MeasuredProcessOutput(
        state=state, result=out[0], measurements=tff.federated_zip(measured))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)


def stated_row(metrics, noise_multiplier) -> tf.Tensor:
  """float32 `[3]`: one client's `STATED_ROW`."""
  return tf.stack([tf.cast(metrics['num_examples'], tf.float32),
                   tf.cast(metrics['num_steps'], tf.float32),
                   tf.cast(noise_multiplier, tf.float32)])


def stated_rows(measurements, max_clients: Optional[int] = None) -> np.ndarray:
  """float64 `[clients, 3]`: the `STATED_ROW` of each client of a round, from the client
  work's measurements (built with `max_clients`).

  Raises:
    ValueError: If the measurements hold no `dp_event`, or more clients than
      `max_clients` stated rows (the others were dropped).
  """
  if 'dp_event' not in measurements:
    raise ValueError('the DP-SGD client work states its steps only when built with '
                     'max_clients.')
  rows = aggregators.gathered_rows(measurements['dp_event'])
  if max_clients is not None and len(rows) > max_clients:
    raise ValueError(f'{len(rows)} clients stated DP-SGD rows, more than {max_clients}.')
  return rows


def slice_input_type(clients_per_slice: int) -> tff.Type:
  """`<client_ids=string[s], seeds=int64[s,2], active=bool[s]>*`: one cohort slice's input.

  A one-element sequence (TFF client work takes sequences as client data); its element
  names the slice's clients, their int64[2] seeds and which entries are real.
  """
  return tff.SequenceType(tff.types.tensorflow_to_type(collections.OrderedDict(
      client_ids=tf.TensorSpec([clients_per_slice], tf.string),
      seeds=tf.TensorSpec([clients_per_slice, 2], tf.int64),
      active=tf.TensorSpec([clients_per_slice], tf.bool))))


def build_dp_sgd_client_work(keras_builder: KerasBuilder,
                             weights_type: tff.Type,
                             client_data_type: tff.Type,
                             *,
                             learning_rate: float,
                             dp_sgd: str = 'clip_then_noise',
                             noise_multiplier: float = 1.0,
                             clip_norm: float = 1.0,
                             max_clients: Optional[int] = None
                             ) -> tff.learning.templates.ClientWorkProcess:
  """Builds the DP-SGD client work.

  Args:
    keras_builder: No-arg callable returning a fresh `tf.keras.Model` (logits out).
    weights_type: TFF type of `tff.learning.models.ModelWeights` of that model.
    client_data_type: `<batches=D*, seed=int64[2]*>` (see `FederatedData.client_data_type`).
    learning_rate: Local SGD learning rate (`> 0`).
    dp_sgd: One of `DP_SGD_MODES`.
    noise_multiplier: Initial sigma (`>= 0`) in the server state.
    clip_norm: Initial per-example clip norm C (`> 0`) in the server state.
    max_clients: With it, each client states its `STATED_ROW` (the `dp_event`
      measurement, up to this many clients a round); None: no `dp_event`.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` (signature in the module docstring).
    Built inside `tffdp.canaries.inserting(...)` (an audit) with `dp_sgd` other than
    `none`, each client's data is `<data=<batches, seed>, canary_steps=int32[S, P]*>`:
    the canary gradients of each step (`build_local_step`); the measurements then add
    the host's upload scored against each canary (`canaries.upload_projections`).

  Raises:
    ValueError: On an unknown `dp_sgd`, `learning_rate <= 0`, `noise_multiplier < 0`
      or `clip_norm <= 0`.
  """
  init_fn = _initial_state(dp_sgd, learning_rate, noise_multiplier, clip_norm)
  state_type = init_fn.type_signature.result.member
  insertion = canaries.active()
  if insertion is not None and dp_sgd != 'none':  # an audit: gradient canaries
    insertion = insertion.take_gradients()
    client_data_type = canaries.with_table_type(client_data_type)
  else:
    insertion = None

  @tff.tensorflow.computation(state_type, weights_type, client_data_type)
  def client_fn(state, weights, data):
    client_update = build_client_update(keras_builder, learning_rate, dp_sgd, insertion)
    table = None
    if insertion is not None:
      data, table = data['data'], data['canary_steps'].get_single_element()
    seed = data['seed'].get_single_element()
    update, weight, metrics = client_update(
        list(weights.trainable), data['batches'], seed,
        state['noise_multiplier'], state['clip_norm'], canary_steps=table)
    if insertion is not None:  # the auditor's view of the host's upload
      metrics['canary_projections'], metrics['upload_norm'] = canaries.upload_projections(
          insertion, table, update)
    result = tff.learning.templates.ClientResult(update=update, update_weight=weight)
    if max_clients is None:
      return result, metrics
    row = stated_row(metrics, state['noise_multiplier'])
    return result, metrics, collections.OrderedDict(rows=row[tf.newaxis],
                                                    active=tf.constant([True]))

  gather = None if max_clients is None else aggregators.gather_rows(
      max_clients, len(STATED_ROW))
  return _client_work_process(init_fn, weights_type, client_data_type, client_fn, gather)


def build_sliced_dp_sgd_client_work(keras_builder: KerasBuilder,
                                    weights_type: tff.Type,
                                    data,
                                    batching,
                                    clients_per_slice: int,
                                    *,
                                    learning_rate: float,
                                    dp_sgd: str = 'clip_then_noise',
                                    noise_multiplier: float = 1.0,
                                    clip_norm: float = 1.0,
                                    max_clients: Optional[int] = None,
                                    update_clip: Optional[float] = None
                                    ) -> tff.learning.templates.ClientWorkProcess:
  """The same client work, with each CLIENTS member a **cohort slice** of clients.

  One client computation trains the slice's clients one after the other (each from the
  broadcast weights, on its own batches built inside TFF from its id and seed, with its
  own noise seed: exactly the per-client work of `build_dp_sgd_client_work`) and returns
  their example-weighted mean update with the slice's total weight, so a weighted mean
  over slices (`tff.aggregators.MeanFactory`) equals the weighted mean over clients.
  TFF's per-client executor cost is then paid once per slice. Entries with
  `active = False` pad the last slice and do no work. Not for aggregators that need
  each client's own update, except client-level clipping: with `update_clip`, each
  client's update is clipped to that L2 norm (`queries.clip_contribution`, the clip of
  TFF's DP aggregator) and the slice returns the **sum** of its clients' clipped updates
  with the number of active clients as weight, for a sum of pre-clipped records
  (`queries.PreclippedGaussianSumQuery`: client-level DP-FedAvg in slices).

  Type signature: as `build_dp_sgd_client_work`, with the third argument
  `{<client_ids=string[s], seeds=int64[s,2], active=bool[s]>*}@CLIENTS` (`slice_input_type`).

  Args:
    keras_builder, weights_type, learning_rate, dp_sgd, noise_multiplier, clip_norm,
      max_clients: As for `build_dp_sgd_client_work` (a slice states one row per active
      client).
    data: The `FederatedData` whose clients the ids name.
    batching: `ShuffleBatch` or `PoissonLot`.
    clients_per_slice: `s >= 1`.
    update_clip: If set (`> 0`), each client's update is clipped to this L2 norm and
      the slice returns the sum of the clipped updates, weighted by its client count.

  Raises:
    ValueError: As `build_dp_sgd_client_work`, on `clients_per_slice < 1` or on a
      non-positive `update_clip`.
  """
  if clients_per_slice < 1:
    raise ValueError(f'clients_per_slice must be >= 1. Found {clients_per_slice}.')
  if update_clip is not None and not update_clip > 0:
    raise ValueError(f'update_clip must be positive. Found {update_clip!r}.')
  init_fn = _initial_state(dp_sgd, learning_rate, noise_multiplier, clip_norm)
  state_type = init_fn.type_signature.result.member
  inputs_type = slice_input_type(clients_per_slice)

  @tff.tensorflow.computation(state_type, weights_type, inputs_type)
  def slice_fn(state, weights, inputs):
    client_update = build_client_update(keras_builder, learning_rate, dp_sgd)

    # A tf.function, so that automatic control dependencies run the clients (which share
    # the model's variables) one after the other.
    @tf.function
    def run_slice(initial, inputs, noise_multiplier, clip_norm):
      zeros = [tf.zeros_like(w) for w in initial]
      nothing = (tf.constant(0.0), tf.constant(0.0), tf.constant(0, tf.int64),
                 tf.constant(0, tf.int32))  # weight, loss sum, examples, steps
      total, (weight_sum, loss_sum, num_examples, num_steps) = list(zeros), nothing
      rows = []
      for k in range(clients_per_slice):
        seed = inputs['seeds'][k]

        def train(k=k, seed=seed):
          examples = data.client_batch_indices(inputs['client_ids'][k], seed, batching)
          update, weight, m = client_update.indexed(initial, *examples, seed,
                                                    noise_multiplier, clip_norm)
          if update_clip is not None:  # a clipped contribution to a sum, weight 1
            update, weight = queries.clip_contribution(update, update_clip), 1.0
          return update, weight, m['loss_sum'], m['num_examples'], m['num_steps']

        def skip():
          return (zeros, *nothing)
        update, weight, loss, n, steps = tf.cond(inputs['active'][k], train, skip)
        total = [t + weight * u for t, u in zip(total, update)]
        weight_sum, loss_sum, num_examples, num_steps = (
            weight_sum + weight, loss_sum + loss, num_examples + n, num_steps + steps)
        rows.append(stated_row(dict(num_examples=n, num_steps=steps), noise_multiplier))
      mean = (total if update_clip is not None else  # the sum of clipped updates
              [tf.math.divide_no_nan(t, weight_sum) for t in total])
      return mean, weight_sum, collections.OrderedDict(
          loss_sum=loss_sum, num_examples=num_examples, num_steps=num_steps), tf.stack(rows)

    inputs = inputs.get_single_element()
    mean, weight_sum, metrics, rows = run_slice(list(weights.trainable), inputs,
                                                state['noise_multiplier'], state['clip_norm'])
    result = tff.learning.templates.ClientResult(update=mean, update_weight=weight_sum)
    if max_clients is None:
      return result, metrics
    return result, metrics, collections.OrderedDict(rows=rows, active=inputs['active'])

  gather = None if max_clients is None else aggregators.gather_rows(
      max_clients, len(STATED_ROW), clients_per_slice)
  return _client_work_process(init_fn, weights_type, inputs_type, slice_fn, gather)
