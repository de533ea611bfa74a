"""Adap DP-FL: adaptive gradient clipping and adaptive noise-scale reduction.

Paper: "Adap DP-FL: Differentially Private Federated Learning with Adaptive Noise"
(`../shared/papers/003_b9b5d3856a6d2446.txt`), Sec. IV, Algorithm 1, eqs. 6-10; spec
`adap_dp_fl.md`. Cross-silo, sample-level DP, every client every round. Round `t`:

1. The server broadcasts `w_t` and the noise multiplier `sigma_t`.
2. Client `k` Poisson-samples one lot with rate `q_k = L / |D^k|`, clips each per-example
   gradient to its own threshold `C_t^k`, and forms
   `g = (sum_i clip(g_i) + N(0, sigma_t^2 (C_t^k)^2 I)) / L` (Alg. 1 lines 8-12).
3. One Adam step with the client's **own** moments, kept across rounds (Sec. V-A);
   `client_optimizer_state='reset'` starts each round from zero moments.
4. Adaptive clipping (eqs. 6-8, the spec's reading): the client's next threshold is
   `C_{t+1}^k = alpha * |(sum_i min(||g_i||, C_t^k) + N(0, (C_t^k sigma_t)^2)) / L|`,
   the noisy mean of this lot's clipped per-example norms; `C_0^k` is the mean
   per-example gradient norm of one lot of random-noise inputs at `w_0` (`clipping=
   'constant'` keeps `C_t^k = clip_norm`).
5. Clients still within their budget upload; the server takes the `|D^k|`-weighted mean
   of the uploaded models (Alg. 1 line 23).
6. Noise decay (Sec. IV-B): `J` is the loss of `w_{t+1}` on the server's validation
   split, with `J(w_0) = J(w_1) = J(w_2) = inf`; if
   `J(w_{t-2}) > J(w_{t-1}) > J(w_t) > J(w_{t+1})` then `sigma_{t+1} = beta * sigma_t` (a
   sliding window: a fourth straight drop decays again). `noise_schedule='constant'`
   keeps sigma (and skips computing `J`).

Privacy (per client, sample-level, `dp_accounting` RDP):
- `epsilon_claimed` (eq. 10): one `PoissonSampledDpEvent(q_k, GaussianDpEvent(sigma_t))`
  per round the client uploads — the gradient release only.
- `epsilon_guaranteed`: with adaptive clipping the noisy norm sum of step 4 is a second
  Gaussian query on the **same lot** (sensitivity `C_t^k`, noise `C_t^k sigma_t`). The
  two together are one Gaussian query of the concatenated vector with sensitivity
  `sqrt(2) C_t^k` and noise `C_t^k sigma_t` per coordinate, so each round is
  `PoissonSampledDpEvent(q_k, GaussianDpEvent(sigma_t / sqrt(2)))`. Adam moments and
  thresholds are post-processing of these releases. With constant clipping the two
  epsilons agree.
- Budget (Alg. 1 lines 15-18): a client whose epsilon would pass the budget after the
  round stops and uploads nothing more; the run ends when every client has stopped.
  `clip_norm_query='accounted'` (default) applies the budget to `epsilon_guaranteed`;
  `'free'` applies it to the paper's count (`epsilon_claimed`), so runs are as long as
  the paper's, while `epsilon_guaranteed` still reports the executed mechanism.

TFF structure (an `AdapDpFlProcess`, a `tff.templates.IterativeProcess`):

    initialize:          ( -> S@SERVER)
    initialize_clients:  (<S@SERVER, {<client_ids, seeds>}@CLIENTS> -> {C}@CLIENTS)
    next:                (<S@SERVER, {C}@CLIENTS, {D}@CLIENTS>
                          -> <state=S@SERVER, client_states={C}@CLIENTS, metrics=M@SERVER>)

Per-client state `C` (Adam moments, step count, clipping threshold) travels into and out
of every round as a CLIENTS-placed value; nothing is kept in Python globals. Each
member of the CLIENTS placement is a **cohort slice** of `clients_per_slice` clients
whose work runs in one client computation (all clients start a round from the same
`w_t`): `clients_per_slice=1` is one TFF client per client; the default puts every
client in one slice, which removes TFF's per-client executor overhead (see
`benchmarks/`). Results do not depend on the slicing (each client's randomness is seeded
by its own seed; tested).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import typing
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, privacy, queries
from tffdp import seeds as seeds_lib
from tffdp.algorithms import common, per_example, registry
from tffdp.data.federated import FederatedData, PoissonLot

CLIPPING_MODES = ('adaptive', 'constant')
NOISE_SCHEDULES = ('decay', 'constant')
CLIENT_OPTIMIZER_STATES = ('keep', 'reset')
CLIP_NORM_QUERY_MODES = ('accounted', 'free')
CLIP_STATISTICS = ('clipped', 'unclipped', 'bounded')
# What each client's round states it executed (the `dp_event` metric): its dataset size,
# the float32 noise multiplier of its queries, and which queries read its lot (1: the
# gradient query; 2: it and the clipping-norm query; -1: the latter on unclipped norms).
STATED_ROW = ('dataset_size', 'noise_multiplier', 'queries')

UNCLIPPED_REASON = ('clip_statistic=unclipped: the next threshold is a noisy sum of '
                    'unclipped per-example gradient norms, a query of unbounded sensitivity')

# Seeds derived from a client's round seed (stateless_fold_in), one per random draw.
_LOT_SALT, _GRADIENT_NOISE_SALT, _NORM_NOISE_SALT, _INIT_SALT = 7, 11, 13, 17


class AdapDpFlProcess(tff.templates.IterativeProcess):
  """A `tff.templates.IterativeProcess` with stateful clients (signature in the module doc).

  Attributes:
    initialize_clients: `(<S@SERVER, {<client_ids=string[s], seeds=int64[s,2]>}@CLIENTS>
      -> {C}@CLIENTS)`: the initial client states (`C_0^k` from a random-noise lot at the
      server's `w_0`, zero Adam moments).
    client_data: `({<client_ids=string[s], seeds=int64[s,2], active=bool[s]>}@CLIENTS
      -> {D}@CLIENTS)`: each slice's Poisson lots, built inside TFF from client ids.
    clients_per_slice: `s`, clients per CLIENTS member.
  """

  def __init__(self, initialize_fn, next_fn, initialize_clients, client_data,
               clients_per_slice: int):
    super().__init__(initialize_fn, next_fn, next_is_multi_arg=True)
    self.initialize_clients = initialize_clients
    self.client_data = client_data
    self.clients_per_slice = clients_per_slice


def adam_update(gradient: Sequence[tf.Tensor], m: Sequence[tf.Tensor], v: Sequence[tf.Tensor],
                step: tf.Tensor, learning_rate: float, beta_1: float = 0.9,
                beta_2: float = 0.999, epsilon: float = 1e-8):
  """One Adam step (Kingma & Ba 2015, Alg. 1; PyTorch's `torch.optim.Adam` form).

  Args:
    gradient: Tensors shaped like the trainable weights (float32), optionally with a
      leading client axis `[s, ...]`.
    m, v: First and second moments, same shapes.
    step: float32 steps taken so far: a scalar, or `[s]` (one count per client).
    learning_rate, beta_1, beta_2, epsilon: Adam's hyperparameters.

  Returns:
    `(delta, m, v, step)`: `delta = lr * m_hat / (sqrt(v_hat) + epsilon)` (to subtract
    from the weights) and the new moments and step count.
  """
  step = step + 1.0

  def per_leading(t, like):  # [s] -> [s, 1, ..., 1] to broadcast against `like`
    return tf.reshape(t, tf.concat([tf.shape(t), tf.ones([like.shape.rank - t.shape.rank],
                                                          tf.int32)], 0))
  m = [beta_1 * a + (1.0 - beta_1) * g for a, g in zip(m, gradient)]
  v = [beta_2 * b + (1.0 - beta_2) * tf.square(g) for b, g in zip(v, gradient)]
  c1 = 1.0 - tf.pow(beta_1, step)
  c2 = 1.0 - tf.pow(beta_2, step)
  delta = [learning_rate * (a / per_leading(c1, a)) / (tf.sqrt(b / per_leading(c2, b)) + epsilon)
           for a, b in zip(m, v)]
  return delta, m, v, step


def next_clip_norm(norms: tf.Tensor, row_splits: tf.Tensor, clip_norms: tf.Tensor,
                   noise_multiplier: tf.Tensor, lot_size: float, alpha: float,
                   seeds: tf.Tensor, statistic: str = 'clipped',
                   max_norm: float = 1.0) -> tf.Tensor:
  """Eqs. 6-8, per client: `alpha * |(sum_i n_i + N(0, (b sigma)^2)) / L|`.

  The statistic `n_i` and the noise bound `b` (`statistic`):
  - `clipped` (eq. 6 as written, the default): `n_i = min(||g_i||, C)`, `b = C`. Each
    term is at most `C`, so `C_{t+1} <= C_t |B/L + sigma z / L|` (alpha 1), whose
    expected log is negative: the threshold shrinks geometrically (issue 11).
  - `unclipped`: `n_i = ||g_i||`, `b = C`: the noisy mean of the unclipped norms, with a
    fixed point at alpha times the mean norm (the paper's "mean l2-norm" of `C_0` and its
    Fig. 1). Unbounded sensitivity: no DP guarantee for the threshold.
  - `bounded`: `n_i = min(||g_i||, C_max)`, `b = C_max` (`max_norm`): the DP-safe variant,
    sensitivity `C_max`, noise multiplier `sigma`.

  Args:
    norms: float32 `[B]` unclipped per-example gradient norms of the clients' lots,
      client `k`'s rows `row_splits[k]:row_splits[k + 1]`.
    row_splits: int64 `[s + 1]`.
    clip_norms: float32 `[s]`, the thresholds `C` the lots were clipped at.
    noise_multiplier: float32 scalar `sigma`.
    lot_size: Expected lot size `L`.
    alpha: Clipping factor.
    seeds: int64 `[s, 2]` stateless seeds of each client's noise.
    statistic: `clipped`, `unclipped` or `bounded` (above).
    max_norm: `C_max` of `bounded`.

  Returns:
    float32 `[s]`, each client's next threshold.

  Raises:
    ValueError: On an unknown `statistic`.
  """
  if statistic not in CLIP_STATISTICS:
    raise ValueError(f'statistic must be one of {", ".join(CLIP_STATISTICS)}. '
                     f'Found {statistic!r}.')
  num = clip_norms.shape[0]
  segment_ids = tf.ragged.row_splits_to_segment_ids(row_splits, out_type=tf.int32)
  if statistic == 'clipped':
    terms, bound = tf.minimum(norms, tf.gather(clip_norms, segment_ids)), clip_norms
  elif statistic == 'unclipped':
    terms, bound = norms, clip_norms
  else:
    terms, bound = tf.minimum(norms, max_norm), tf.fill([num], float(max_norm))
  sums = tf.math.unsorted_segment_sum(terms, segment_ids, num)
  noise = tf.stack([tf.random.stateless_normal([], seed=seeds[k]) for k in range(num)])
  return alpha * tf.abs((sums + noise * bound * noise_multiplier) / lot_size)


def executed_round_event(noise_multiplier: float, sampling_rate: float,
                         clipping: str, statistic: str = 'clipped'):
  """The DP event of one client's round as `_build_slice_update` executes it.

  A client's lot (Poisson, rate `q`) is read by the gradient query, its clipped gradient
  sum plus `N(0, (sigma C)^2)` per coordinate (`queries.GaussianSumQuery`, sensitivity `C`),
  and, with adaptive clipping, by the clipping-norm query of `next_clip_norm`, its sum of
  `min(||g_i||, C)` plus `N(0, (sigma C)^2)` (sensitivity `C`). Both read the same lot
  with the same noise scale, so together they are one Gaussian query of sensitivity
  `sqrt(2) C` with noise `sigma C`: noise multiplier `sigma / sqrt(2)`. With constant
  clipping only the gradient query runs (multiplier `sigma`). The `bounded` statistic
  (norms clipped at `C_max`, noise `sigma C_max`) has the same multiplier `sigma`, so
  the same joint event; the `unclipped` one has unbounded sensitivity (None).

  Returns:
    `PoissonSampledDpEvent(q, GaussianDpEvent(sigma / sqrt(2) or sigma))`, or None for
    adaptive clipping with the `unclipped` statistic.
  """
  gradient_query = queries.GaussianSumQuery(noise_multiplier, None)
  if clipping != 'adaptive':
    return gradient_query.event(sampling_rate)
  if statistic == 'unclipped':
    return None
  norm_query = queries.GaussianSumQuery(noise_multiplier, None)  # `next_clip_norm`
  return queries.joint_event([gradient_query, norm_query], sampling_rate)


def noise_decay(losses: tf.Tensor, new_loss: tf.Tensor, noise_multiplier: tf.Tensor,
                beta: float):
  """Sec. IV-B: `sigma <- beta * sigma` after three straight validation-loss drops.

  Args:
    losses: float32 `[3]`, `(J(w_{t-2}), J(w_{t-1}), J(w_t))`.
    new_loss: float32 scalar `J(w_{t+1})`.
    noise_multiplier: float32 scalar `sigma_t`.
    beta: Decay factor in `(0, 1]`.

  Returns:
    `(sigma_{t+1}, (J(w_{t-1}), J(w_t), J(w_{t+1})), decayed bool)`.
  """
  decayed = tf.logical_and(tf.logical_and(losses[0] > losses[1], losses[1] > losses[2]),
                           losses[2] > new_loss)
  sigma = tf.where(decayed, beta * noise_multiplier, noise_multiplier)
  return sigma, tf.concat([losses[1:], tf.reshape(new_loss, [1])], 0), decayed


def initial_clip_norm(model: tf.keras.Model, lot_size: int, num_classes: int,
                      seed: tf.Tensor) -> tf.Tensor:
  """`C_0`: mean per-example gradient norm of a lot of random-noise inputs at `model`'s weights.

  Inputs are uniform pixels in `[0, 1]` shaped like the model's input, labels uniform in
  `[0, num_classes)` (Sec. IV-A: "training on random noise for one round and extracting
  the mean l2-norm"). No private data is touched.
  """
  shape = [lot_size] + list(model.input_shape[1:])
  x = tf.random.stateless_uniform(shape, seed=seed)
  y = tf.random.stateless_uniform([lot_size], seed=tf.random.experimental.stateless_fold_in(
      seed, 1), maxval=num_classes, dtype=tf.int32)
  _, norms, _ = per_example.clipped_gradient_sum(model, x, y, tf.constant(1.0))
  return tf.reduce_mean(norms)


def _fold(seed, salt):
  return tf.random.experimental.stateless_fold_in(seed, salt)


def _build_slice_update(keras_builder, slice_size: int, lot_size: float,
                        learning_rate: float, alpha: float, clipping: str,
                        client_optimizer_state: str, adam: dict,
                        clip_statistic: str = 'clipped', max_norm: float = 1.0,
                        insertion: Optional[canaries.Insertion] = None):
  """Returns the tf.function running one round for a slice of clients (see module doc).

  Every client of the slice starts from the broadcast `w_t`, so one forward/backward
  pass over the concatenated lots gives each client's clipped gradient sum
  (`per_example.clipped_gradient_segment_sums`); noise, Adam and the next threshold
  are per client, each from the client's own seed.

  With `insertion` (an audit's gradient canaries), `data['canaries']` (int32 `[s, P]`)
  names the canaries in each client's lot (`canaries.NOT_HOST` rows for all but the
  host): each canary gradient is clipped to the client's `C^k` and summed into its
  gradient query before the noise (`canaries.gradient_sum`; the clipping-norm query does
  not see it, so the audit covers the gradient release), and the host's upload is scored
  against every canary (`canaries.upload_projections`). The function then also returns
  `(projections [m], upload norm)`.
  """
  model = keras_builder()
  variables = model.trainable_variables
  shapes = [v.shape for v in variables]

  def canary_sum(indices, clip_k):
    def clip(g):
      scale = per_example.clip_scale(tf.linalg.global_norm(g), clip_k)
      return [t * scale for t in g]
    return canaries.gradient_sum(insertion, indices, shapes, clip)

  @tf.function
  def slice_update(trainable, noise_multiplier, state, data):
    for var, w in zip(variables, trainable):
      var.assign(w)
    active = data['active']
    clip = state['clip_norm']
    row_splits = data['row_splits']
    sums, norms, losses = per_example.clipped_gradient_segment_sums(
        model, data['x'], data['y'], row_splits, clip)
    client_sums = [[s[k] for s in sums] for k in range(slice_size)]
    if insertion is not None:  # an audit: the lots' canary gradients join the sums
      client_sums = [[a + b for a, b in zip(client_sums[k],
                                            canary_sum(data['canaries'][k], clip[k]))]
                     for k in range(slice_size)]
    # Client k's gradient query (`executed_round_event` states its event).
    noised = [queries.GaussianSumQuery(noise_multiplier, clip[k]).add_noise(
        client_sums[k], _fold(data['seeds'][k], _GRADIENT_NOISE_SALT))
              for k in range(slice_size)]
    gradient = [tf.stack([z[i] for z in noised]) / lot_size for i in range(len(sums))]
    # Adam over the slice: tensors [s, *shape], one step count per client.
    if client_optimizer_state == 'reset':
      m0 = v0 = [tf.zeros_like(g) for g in gradient]
      step0 = tf.zeros([slice_size])
    else:
      m0, v0, step0 = state['adam_m'], state['adam_v'], state['adam_step']
    delta, m, v, step = adam_update(gradient, m0, v0, step0, learning_rate, **adam)
    if clipping == 'adaptive':
      norm_seeds = tf.stack([_fold(data['seeds'][k], _NORM_NOISE_SALT)
                             for k in range(slice_size)])
      new_clip = next_clip_norm(norms, row_splits, clip, noise_multiplier, lot_size, alpha,
                                norm_seeds, clip_statistic, max_norm)
    else:
      new_clip = clip
    # A client that does not upload (budget spent) keeps its state; its lot is empty.
    per_client = lambda t, like: tf.reshape(t, [slice_size] + [1] * (like.shape.rank - 1))
    keep = lambda new, old: tf.where(per_client(active, new), new, old)
    weight = tf.where(active, data['dataset_size'], 0.0)
    update_sum = [tf.tensordot(weight, d, axes=1) for d in delta]
    new_state = collections.OrderedDict(
        clip_norm=keep(new_clip, clip),
        adam_m=[keep(a, b) for a, b in zip(m, state['adam_m'])],
        adam_v=[keep(a, b) for a, b in zip(v, state['adam_v'])],
        adam_step=keep(step, state['adam_step']))
    # What each client's round executed (`STATED_ROW`): read by `executed_round_event`.
    queries_run = (-1.0 if clipping == 'adaptive' and clip_statistic == 'unclipped'
                   else 2.0 if clipping == 'adaptive' else 1.0)
    stated = tf.stack([tf.cast(data['dataset_size'], tf.float32),
                       tf.fill([slice_size], tf.cast(noise_multiplier, tf.float32)),
                       tf.fill([slice_size], queries_run)], 1)
    out = (update_sum, tf.reduce_sum(weight), new_state, tf.reduce_sum(losses),
           tf.shape(losses, out_type=tf.int64)[0], stated)
    if insertion is not None:  # the host's upload on each canary direction
      scores = [canaries.upload_projections(insertion, data['canaries'][k][tf.newaxis],
                                            [d[k] for d in delta])
                for k in range(slice_size)]
      out += (tf.add_n([p for p, _ in scores]), tf.add_n([n for _, n in scores]))
    return out

  return slice_update


class _AdapDpFlBuilder:
  """The sections of `build_adap_dp_fl`, run in order by it; each stores what later ones use.

  The TFF computations close over the validated hyperparameters held here, exactly as
  when they were one function.
  """

  def __init__(self, keras_builder, data: FederatedData, validation, *, num_classes,
               lot_size, learning_rate, noise_multiplier, beta, alpha, clipping, clip_norm,
               noise_schedule, client_optimizer_state, clip_norm_query, clients_per_slice,
               adam_beta_1, adam_beta_2, adam_epsilon, seed, clip_statistic, max_norm):
    def bad(name, value, why):
      raise ValueError(f'{name} {why}. Found {name}={value!r}.')
    # The method's own options were checked by `AdapDPFLHparams` (`alpha` is its
    # `clipping_factor`); the shared settings are checked here.
    if learning_rate <= 0:
      bad('learning_rate', learning_rate, 'must be positive')
    if noise_multiplier < 0:
      bad('noise_multiplier', noise_multiplier, 'must be >= 0')
    if clip_norm <= 0:
      bad('clip_norm', clip_norm, 'must be positive')
    num_clients = data.num_clients
    largest = int(np.max(data.client_sizes))
    if lot_size > largest:
      # q_k = min(1, L / |D^k|) is 1 for every client beyond this, and C_0 would draw a
      # random-input lot of L examples per client (`initial_clip_norm`).
      bad('lot_size', lot_size, f'must be at most the largest client\'s example count '
          f'|D^k| = {largest} (q_k = L / |D^k| <= 1)')
    slice_size = clients_per_slice or num_clients
    if slice_size <= 0 or num_clients % slice_size:
      bad('clients_per_slice', clients_per_slice,
          f'must be a positive divisor of the number of clients ({num_clients})')
    num_slices = num_clients // slice_size
    decay_on = noise_schedule == 'decay'
    lot = float(lot_size)
    adam = dict(beta_1=adam_beta_1, beta_2=adam_beta_2, epsilon=adam_epsilon)
    data.add_server_split('validation', *validation)
    # An audit build (`canaries.inserting`): gradient canaries in the host's lots.
    insertion = canaries.active()
    if insertion is not None:
      insertion = insertion.take_gradients()
      insertion.took_round()
    self.__dict__.update(
        insertion=insertion,
        keras_builder=keras_builder, data=data, num_classes=num_classes, lot_size=lot_size,
        learning_rate=learning_rate, noise_multiplier=noise_multiplier, beta=beta,
        alpha=alpha, clipping=clipping, clip_norm=clip_norm, noise_schedule=noise_schedule,
        client_optimizer_state=client_optimizer_state, clip_norm_query=clip_norm_query,
        clients_per_slice=clients_per_slice, adam_beta_1=adam_beta_1,
        adam_beta_2=adam_beta_2, adam_epsilon=adam_epsilon, seed=seed,
        clip_statistic=clip_statistic, max_norm=max_norm, num_clients=num_clients,
        slice_size=slice_size, num_slices=num_slices, decay_on=decay_on, lot=lot, adam=adam)

  def model_weights(self) -> None:
    """The seeded initial weights and their types."""
    keras_builder, seed = (self.keras_builder, self.seed)
    init_weights = common.initial_weights_computation(keras_builder, seed)
    weights_type = init_weights.type_signature.result
    trainable_type = weights_type.trainable
    shapes = [t.shape for t in trainable_type]
    (self.init_weights, self.weights_type, self.trainable_type, self.shapes) = (
        init_weights, weights_type, trainable_type, shapes)

  def types(self) -> None:
    """TFF types of the client state, the slice inputs and the client data."""
    slice_size, shapes, data = (self.slice_size, self.shapes, self.data)

    def vec(dtype, *shape):
      return tf.TensorSpec([slice_size, *shape], dtype)
    client_state_spec = collections.OrderedDict(
        clip_norm=vec(tf.float32),
        adam_m=[vec(tf.float32, *s) for s in shapes],
        adam_v=[vec(tf.float32, *s) for s in shapes],
        adam_step=vec(tf.float32))
    client_state_type = tff.types.tensorflow_to_type(client_state_spec)
    # An audit's canary rows (`_build_slice_update`) ride with the slice's inputs.
    audit = {} if self.insertion is None else dict(canaries=vec(tf.int32, None))
    slice_input_type = tff.types.tensorflow_to_type(collections.OrderedDict(
        client_ids=vec(tf.string), seeds=vec(tf.int64, 2), active=vec(tf.bool), **audit))
    x_shape = [None, *data.input_shape]
    client_data_type = tff.types.tensorflow_to_type(collections.OrderedDict(
        x=tf.TensorSpec(x_shape, tf.float32), y=tf.TensorSpec([None], tf.int32),
        row_splits=tf.TensorSpec([slice_size + 1], tf.int64), seeds=vec(tf.int64, 2),
        active=vec(tf.bool), dataset_size=vec(tf.float32), **audit))
    (self.client_state_type, self.slice_input_type, self.client_data_type) = (
        client_state_type, slice_input_type, client_data_type)

  def server(self) -> None:
    """The server state and `init_fn`."""
    init_weights, noise_multiplier = (self.init_weights, self.noise_multiplier)

    @tff.tensorflow.computation
    def initial_server_state():
      return collections.OrderedDict(
          model=init_weights(),
          noise_multiplier=tf.constant(noise_multiplier, tf.float32),
          validation_losses=tf.fill([3], tf.constant(math.inf, tf.float32)),
          round_num=tf.constant(0, tf.int32))

    server_state_type = initial_server_state.type_signature.result

    @tff.federated_computation
    def init_fn():
      return tff.federated_eval(initial_server_state, tff.SERVER)
    self.server_state_type, self.init_fn = server_state_type, init_fn

  def client_data(self) -> None:
    """Lots built inside TFF from client ids."""
    slice_input_type, data, lot, insertion = (self.slice_input_type, self.data, self.lot,
                                              self.insertion)

    @tff.tensorflow.computation(slice_input_type)
    def build_client_data(inputs):
      x, y, row_splits, sizes = data.poisson_lots(inputs['client_ids'], inputs['seeds'], lot,
                                                  inputs['active'])
      audit = {} if insertion is None else dict(canaries=inputs['canaries'])
      return collections.OrderedDict(x=x, y=y, row_splits=row_splits, seeds=inputs['seeds'],
                                     active=inputs['active'], dataset_size=sizes, **audit)

    @tff.federated_computation(tff.FederatedType(slice_input_type, tff.CLIENTS))
    def client_data_fn(inputs):
      return tff.federated_map(build_client_data, inputs)
    self.client_data_fn = client_data_fn

  def client_initialisation(self) -> None:
    """Initial client states (`C_0^k`, zero Adam moments)."""
    (trainable_type, slice_input_type, keras_builder, lot_size, num_classes, slice_size,
     clipping, clip_norm, shapes, server_state_type) = (
        self.trainable_type, self.slice_input_type, self.keras_builder, self.lot_size,
        self.num_classes, self.slice_size, self.clipping, self.clip_norm, self.shapes,
        self.server_state_type)

    @tff.tensorflow.computation(trainable_type, slice_input_type)
    def initial_client_state(trainable, inputs):
      model = keras_builder()

      @tf.function
      def c0(trainable, seeds):
        for var, w in zip(model.trainable_variables, trainable):
          var.assign(w)
        return tf.stack([initial_clip_norm(model, lot_size, num_classes,
                                           _fold(seeds[k], _INIT_SALT))
                         for k in range(slice_size)])
      if clipping == 'adaptive':
        clip = c0(list(trainable), inputs['seeds'])
      else:
        clip = tf.fill([slice_size], tf.constant(clip_norm, tf.float32))
      return collections.OrderedDict(
          clip_norm=clip,
          adam_m=[tf.zeros([slice_size, *s]) for s in shapes],
          adam_v=[tf.zeros([slice_size, *s]) for s in shapes],
          adam_step=tf.zeros([slice_size]))

    @tff.tensorflow.computation(server_state_type)
    def model_trainable(state):
      return state['model'].trainable

    @tff.federated_computation(tff.FederatedType(server_state_type, tff.SERVER),
                               tff.FederatedType(slice_input_type, tff.CLIENTS))
    def initialize_clients(server_state, inputs):
      trainable = tff.federated_broadcast(tff.federated_map(model_trainable, server_state))
      return tff.federated_map(initial_client_state, (trainable, inputs))
    self.initialize_clients = initialize_clients

  def one_round(self) -> None:
    """Broadcast, client work, sum, server update: `next`, the process and `round_fn`."""
    (trainable_type, server_state_type, client_state_type, client_data_type,
     slice_input_type, keras_builder, slice_size, lot, learning_rate, alpha, clipping,
     client_optimizer_state, adam, data, decay_on, beta, init_fn, initialize_clients,
     client_data_fn) = (
        self.trainable_type, self.server_state_type, self.client_state_type,
        self.client_data_type, self.slice_input_type, self.keras_builder, self.slice_size,
        self.lot, self.learning_rate, self.alpha, self.clipping,
        self.client_optimizer_state, self.adam, self.data, self.decay_on, self.beta,
        self.init_fn, self.initialize_clients, self.client_data_fn)
    clip_statistic, max_norm, insertion = self.clip_statistic, self.max_norm, self.insertion
    broadcast_type = tff.StructType([('trainable', trainable_type),
                                     ('noise_multiplier', tff.TensorType(np.float32))])

    @tff.tensorflow.computation(server_state_type)
    def to_broadcast(state):
      return collections.OrderedDict(trainable=state['model'].trainable,
                                     noise_multiplier=state['noise_multiplier'])

    @tff.tensorflow.computation(broadcast_type, client_state_type, client_data_type)
    def client_work(broadcast, state, client_data):
      slice_update = _build_slice_update(
          keras_builder, slice_size, lot, learning_rate, alpha, clipping,
          client_optimizer_state, adam, clip_statistic, max_norm, insertion)
      update_sum, weight_sum, new_state, loss_sum, num_examples, stated, *scores = (
          slice_update(list(broadcast['trainable']), broadcast['noise_multiplier'], state,
                       client_data))
      train = collections.OrderedDict(loss_sum=loss_sum, num_examples=num_examples,
                                      num_uploading=tf.reduce_sum(tf.cast(
                                          client_data['active'], tf.int32)))
      if scores:  # an audit: the host's upload on each canary
        train['canary_projections'], train['upload_norm'] = scores
      uploads = collections.OrderedDict(update_sum=update_sum, weight_sum=weight_sum,
                                        train=train)
      return uploads, new_state, collections.OrderedDict(rows=stated,
                                                         active=client_data['active'])

    uploads_type = client_work.type_signature.result[0]
    gather = aggregators.gather_rows(self.num_clients, len(STATED_ROW), slice_size)
    stated_type = gather.type_signature.result.member

    @tff.tensorflow.computation(server_state_type, uploads_type, stated_type)
    def server_update(state, uploads, stated):
      validation_loss = common.server_split_metric(
          keras_builder, data, 'validation',
          lambda model, xs, ys: tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
              ys, model(xs, training=False), from_logits=True)))

      weight_sum = uploads['weight_sum']
      trainable = [w - tf.math.divide_no_nan(u, weight_sum)
                   for w, u in zip(state['model'].trainable, uploads['update_sum'])]
      round_num = state['round_num'] + 1  # the index t + 1 of the new model w_{t+1}
      sigma = state['noise_multiplier']
      if decay_on:
        loss = validation_loss(trainable)
        # J(w_0) = J(w_1) = J(w_2) = inf (Sec. IV-B).
        j = tf.where(round_num <= 2, tf.constant(math.inf), loss)
        sigma, losses, decayed = noise_decay(state['validation_losses'], j, sigma, beta)
      else:
        loss = tf.constant(math.nan)
        losses, decayed = state['validation_losses'], tf.constant(False)
      new_state = collections.OrderedDict(
          model=tff.learning.models.ModelWeights(
              trainable=trainable, non_trainable=list(state['model'].non_trainable)),
          noise_multiplier=sigma, validation_losses=losses, round_num=round_num)
      metrics = collections.OrderedDict(
          train=uploads['train'], server_validation_loss=loss, noise_decayed=decayed,
          noise_multiplier=sigma, dp_event=stated)
      return new_state, metrics

    @tff.federated_computation(tff.FederatedType(server_state_type, tff.SERVER),
                               tff.FederatedType(client_state_type, tff.CLIENTS),
                               tff.FederatedType(client_data_type, tff.CLIENTS))
    def next_fn(server_state, client_states, client_data):
      broadcast = tff.federated_broadcast(tff.federated_map(to_broadcast, server_state))
      uploads, new_client_states, stated = tff.federated_map(
          client_work, (broadcast, client_states, client_data))
      total = tff.federated_sum(uploads)
      new_state, metrics = tff.federated_map(server_update,
                                             (server_state, total, gather(stated)))
      return collections.OrderedDict(state=new_state, client_states=new_client_states,
                                     metrics=metrics)

    process = AdapDpFlProcess(init_fn, next_fn, initialize_clients, client_data_fn,
                              slice_size)

    @tff.federated_computation(tff.FederatedType(server_state_type, tff.SERVER),
                               tff.FederatedType(client_state_type, tff.CLIENTS),
                               tff.FederatedType(slice_input_type, tff.CLIENTS))
    def round_fn(server_state, client_states, inputs):
      """One TFF call per round: lots built from client ids inside, then `next`."""
      return process.next(server_state, client_states, process.client_data(inputs))
    self.process, self.round_fn = process, round_fn

  def runner_hooks(self) -> common.Method:
    """The Python side: the runner's hooks around the process, as a `common.Method`."""
    (data, num_slices, slice_size, lot, num_clients, seed, process, round_fn, clipping,
     clip_norm_query, lot_size, learning_rate, noise_multiplier, beta, alpha, clip_norm,
     noise_schedule, client_optimizer_state, adam_beta_1, adam_beta_2, adam_epsilon) = (
         self.data, self.num_slices, self.slice_size, self.lot, self.num_clients, self.seed,
         self.process, self.round_fn, self.clipping, self.clip_norm_query, self.lot_size,
         self.learning_rate, self.noise_multiplier, self.beta, self.alpha, self.clip_norm,
         self.noise_schedule, self.client_optimizer_state, self.adam_beta_1,
         self.adam_beta_2, self.adam_epsilon)
    clip_statistic, max_norm, insertion = self.clip_statistic, self.max_norm, self.insertion
    client_ids = np.array(data.client_ids).reshape(num_slices, slice_size)
    sizes = data.client_sizes
    rates = np.minimum(1.0, lot / sizes)

    def slice_inputs(seeds: np.ndarray, active: Optional[np.ndarray] = None,
                     canary_rows: Optional[np.ndarray] = None) -> list:
      active = np.ones(num_clients, bool) if active is None else active
      if insertion is not None and canary_rows is None:
        canary_rows = np.full((num_clients, 1), canaries.NOT_HOST, np.int32)
      audit = lambda i: {} if insertion is None else dict(
          canaries=canary_rows[i * slice_size:(i + 1) * slice_size])
      return [collections.OrderedDict(client_ids=client_ids[i],
                                      seeds=seeds[i * slice_size:(i + 1) * slice_size],
                                      active=active[i * slice_size:(i + 1) * slice_size],
                                      **audit(i))
              for i in range(num_slices)]

    def canary_rows(round_num: int, cohort: np.ndarray) -> np.ndarray:
      """int32 `[N, P]`: each client's canaries this round (one lot: the tables' one row)."""
      tables = insertion.tables(round_num, cohort)
      width = max(t.shape[1] for t in tables)
      rows = np.full((num_clients, width), canaries.NOT_HOST, np.int32)
      for c, t in zip(cohort, tables):
        if t[0, 0] != canaries.NOT_HOST:
          rows[c] = canaries.NOT_A_CANARY
          rows[c, :t.shape[1]] = t[0]
      return rows

    def initialize() -> dict:
      server = process.initialize()
      seeds = np.stack(seeds_lib.client_seeds(seed, seeds_lib.INITIAL_ROUND,
                                              np.arange(num_clients)))
      return {'server': server, 'clients': process.initialize_clients(server,
                                                                       slice_inputs(seeds))}

    def run_round(state: dict, cohort: np.ndarray, round_num: int, run_seed: int):
      active = np.zeros(num_clients, bool)
      active[cohort] = True
      seeds = np.stack(common.client_seeds(run_seed, round_num, np.arange(num_clients)))
      rows = None if insertion is None else canary_rows(round_num, cohort)
      out = round_fn(state['server'], state['clients'], slice_inputs(seeds, active, rows))
      return {'server': out['state'], 'clients': out['client_states']}, out['metrics']

    def releases(cohort: np.ndarray, sigma: float, event_of) -> common.Releases:
      if sigma == 0:
        return [(cohort, None, 'noise multiplier is 0: no noise, no finite guarantee')]
      return [(cohort[rates[cohort] == q], event_of(float(q)), '')
              for q in np.unique(rates[cohort])]

    sigma_of = lambda state: float(state['server']['noise_multiplier'])

    def claimed(cohort, state):
      """Eq. 10: the gradient query alone (the clipping-norm query is not counted)."""
      sigma = sigma_of(state)
      return releases(cohort, sigma, lambda q: privacy.subsampled_gaussian_event(sigma, q))

    def guaranteed(cohort, state):
      sigma = sigma_of(state)
      if clipping == 'adaptive' and clip_statistic == 'unclipped' and sigma != 0:
        return [(cohort, None, UNCLIPPED_REASON)]
      return releases(cohort, sigma,
                      lambda q: executed_round_event(sigma, q, clipping, clip_statistic))

    def executed(cohort, state, metrics):
      """`guaranteed` from what each client's round states it ran (`STATED_ROW`: its
      dataset size, the float32 sigma of its queries, which queries read its lot); the
      clients are matched to the rows by size."""
      del state
      rows = aggregators.gathered_rows(metrics['dp_event'])

      def release_of(j, client):
        _, sigma, queries_run = rows[j]
        if sigma == 0:
          return None, 'noise multiplier is 0: no noise, no finite guarantee'
        if queries_run < 0:
          return None, UNCLIPPED_REASON
        return executed_round_event(float(sigma), float(rates[client]),
                                    'adaptive' if queries_run == 2 else 'constant'), ''
      return common.releases_from_rows(cohort, sizes[cohort], rows[:, 0], release_of)

    def quantities(state) -> dict:
      clip = np.concatenate([np.asarray(c['clip_norm']) for c in state['clients']])
      return {'noise_multiplier': sigma_of(state), 'clip_norm': float(np.mean(clip)),
              'clip_norm_min': float(np.min(clip)), 'clip_norm_max': float(np.max(clip))}

    def round_metrics(metrics) -> dict:
      return {'server_validation_loss': float(metrics['server_validation_loss']),
              'noise_decayed': int(bool(metrics['noise_decayed'])),
              'uploading_clients': int(metrics['train']['num_uploading'])}

    def train_loss(metrics) -> float:
      train = metrics['train']
      return float(train['loss_sum']) / max(1, int(train['num_examples']))

    def model_weights(state):
      return state['server']['model']

    not_given = 'not given in the paper; chosen because '
    return common.Method(
        # Informational: lots are drawn per client with q_k = L / |D^k| inside TFF.
        name='adap_dp_fl', process=process, batching=PoissonLot(float(np.max(rates))),
        lot_rates=rates,
        dp_unit=privacy.SAMPLE_LEVEL, cohort_sampling='all',
        accounting=common.Accounting(
            claimed, guaranteed, executed, budget_rule='per_client',
            budget_ledger='guaranteed' if clip_norm_query == 'accounted' else 'claimed',
            rdp_orders=privacy.INTEGER_ORDERS),
        adaptive_quantities=quantities, round_metrics=round_metrics,
        initialize=initialize, run_round=run_round, round_computation=round_fn,
        clients_per_slice=slice_size, model_weights=model_weights,
        train_loss=train_loss, select_cohort=lambda r: np.arange(num_clients),
        hyperparameters=dict(
            lot_size=lot_size, learning_rate=learning_rate, noise_multiplier=noise_multiplier,
            beta=beta, alpha=alpha, clipping=clipping, clip_norm=clip_norm,
            noise_schedule=noise_schedule, client_optimizer_state=client_optimizer_state,
            clip_norm_query=clip_norm_query, clients_per_slice=slice_size,
            clip_statistic=clip_statistic, max_norm=max_norm, adam_beta_1=adam_beta_1,
            adam_beta_2=adam_beta_2, adam_epsilon=adam_epsilon,
            sampling_rates=sorted(set(float(r) for r in rates))),
        notes=dict(
            adam_beta_1=not_given + 'the PyTorch Adam defaults the authors\' code uses',
            adam_beta_2=not_given + 'the PyTorch Adam defaults',
            adam_epsilon=not_given + 'the PyTorch Adam defaults',
            client_optimizer_state='spec: each cross-silo client keeps its own Adam moments '
            '(the first author\'s public FL code keeps one optimizer per client)',
            clients_per_slice='simulation detail, not a hyperparameter: clients whose work '
            'runs in one TFF client computation; results do not depend on it',
            rdp_orders='eq. 10: integer RDP orders 2-64, for both epsilons (a valid, '
            'slightly looser bound than adding fractional orders)',
            lot_size='paper: L = 78; q_k = L / |D^k| with |D^k| after the validation '
            'split is held out'))


def build_adap_dp_fl(keras_builder, data: FederatedData,
                     validation: tuple[np.ndarray, np.ndarray], *,
                     num_classes: int = 10,
                     hp: Optional['AdapDPFLHparams'] = None,
                     dataset: str = 'mnist',
                     learning_rate: float = 0.002,
                     noise_multiplier: float = 6.0,
                     clip_norm: float = 1.0,
                     clients_per_slice: Optional[int] = None,
                     adam_beta_1: float = 0.9, adam_beta_2: float = 0.999,
                     adam_epsilon: float = 1e-8,
                     seed: int = 0) -> common.Method:
  """Builds Adap DP-FL (Alg. 1) as a `common.Method` with stateful clients.

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' data (every client takes part in every round).
    validation: Server-side validation split `(x uint8 [n, h, w, c], y [n])` for `J`.
    num_classes: Labels of the random-noise lot that sets `C_0^k`.
    hp: Adap DP-FL's own options (`AdapDPFLHparams`, validated on creation; None takes
      their defaults): the expected lot size `lot_size` `L` (paper: 78; client `k`
      samples with `q = L / |D^k|`), eq. 6's `clipping_factor` `alpha > 0` and the noise
      decay factor `beta` in `(0, 1]` (unset: the paper's values for `dataset`),
      `clipping` (`adaptive`, eqs. 6-8, or `constant`: `C = clip_norm`),
      `noise_schedule` (`decay`, Sec. IV-B, or `constant`), `client_optimizer_state`
      (`keep` each client's Adam moments or `reset` them), `clip_norm_query`
      (`accounted`: the budget applies to `epsilon_guaranteed`; `free`: to the paper's
      eq.-10 count), `clip_statistic` of the adaptive threshold (`clipped`, eq. 6 as
      written; `unclipped`, no DP guarantee; `bounded`) and its `max_norm` `C_max`.
    dataset: Whose Sec. V-A values fill an unset `clipping_factor` or `beta`
      (`AdapDPFLHparams.resolved`).
    learning_rate: Adam learning rate (paper: 0.002 MNIST, 0.001 Fashion-MNIST).
    noise_multiplier: `sigma_0` (paper: 6 MNIST, 4 Fashion-MNIST for decay runs).
    clip_norm: The constant threshold `C > 0` (paper: 1.0); unused when adaptive.
    clients_per_slice: Clients per CLIENTS member; must divide the number of clients
      (default: all clients in one slice).
    adam_beta_1, adam_beta_2, adam_epsilon: Adam's constants (PyTorch defaults).
    seed: Model-initialisation seed.

  Returns:
    A `common.Method` whose `process` is an `AdapDpFlProcess`; its runner state is
    `{'server': S, 'clients': [C per slice]}`.

  Raises:
    ValueError: On an invalid hyperparameter (named, with its value).
  """
  hp, _ = (AdapDPFLHparams() if hp is None else hp).resolved(dataset)
  builder = _AdapDpFlBuilder(
      keras_builder, data, validation, num_classes=num_classes, lot_size=hp.lot_size,
      learning_rate=learning_rate, noise_multiplier=noise_multiplier, beta=hp.beta,
      alpha=hp.clipping_factor, clipping=hp.clipping, clip_norm=clip_norm,
      noise_schedule=hp.noise_schedule, client_optimizer_state=hp.client_optimizer_state,
      clip_norm_query=hp.clip_norm_query, clients_per_slice=clients_per_slice,
      adam_beta_1=adam_beta_1, adam_beta_2=adam_beta_2, adam_epsilon=adam_epsilon,
      seed=seed, clip_statistic=hp.clip_statistic, max_norm=hp.max_norm)
  for section in (builder.model_weights, builder.types, builder.server, builder.client_data,
                  builder.client_initialisation, builder.one_round):
    section()
  return builder.runner_hooks()


# ----- registry ---------------------------------------------------------------------

# Sec. V-A: clipping factor alpha and noise decay beta per dataset.
PAPER_DEFAULTS = {'mnist': dict(clipping_factor=1.0, beta=0.9999),
                  'fashion_mnist': dict(clipping_factor=0.01, beta=0.9998)}


@dataclasses.dataclass(frozen=True)
class AdapDPFLHparams(registry.MethodHparams):
  """Adap DP-FL's own options (spec adap_dp_fl.md; Sec. V-A where the paper gives them)."""
  default_cohort_sampling: typing.ClassVar[str] = 'all'
  cohort_sampling_note: typing.ClassVar[str] = 'cross-silo: every client every round'

  lot_size: int = registry.option(78, 'expected lot size L (q_k = L / |D^k|; paper: 78)')
  clipping_factor: Optional[float] = registry.option(
      None, 'clipping factor alpha of eq. 6 (default: the paper\'s 1.0 MNIST, 0.01 '
      'Fashion-MNIST)')
  beta: Optional[float] = registry.option(
      None, 'noise decay factor beta (default: the paper\'s 0.9999 MNIST, 0.9998 '
      'Fashion-MNIST)')
  clipping: str = registry.option('adaptive', 'adaptive (eqs. 6-8) or constant (C = '
                                  '--clip-norm)', choices=CLIPPING_MODES)
  noise_schedule: str = registry.option('decay', 'decay (Sec. IV-B) or constant',
                                        choices=NOISE_SCHEDULES)
  client_optimizer_state: str = registry.option(
      'keep', 'keep (each client\'s Adam moments persist) or reset',
      choices=CLIENT_OPTIMIZER_STATES)
  clip_norm_query: str = registry.option(
      'accounted', 'accounted (the budget applies to epsilon_guaranteed) or free (to the '
      'paper\'s eq.-10 count)', choices=CLIP_NORM_QUERY_MODES)
  clip_statistic: str = registry.option(
      'clipped', 'statistic of the adaptive threshold: clipped (eq. 6 as written: '
      'min(||g_i||, C), shrinks geometrically), unclipped (the noisy mean of the '
      'unclipped norms: fixed point alpha x mean norm, epsilon_guaranteed = inf) or '
      'bounded (norms clipped at --max-norm, sensitivity C_max)', choices=CLIP_STATISTICS)
  max_norm: float = registry.option(1.0, 'C_max of clip_statistic=bounded')

  def __post_init__(self):
    super().__post_init__()
    if self.lot_size <= 0:
      raise ValueError(f'lot_size must be positive. Found lot_size={self.lot_size!r}.')
    if self.clipping_factor is not None and self.clipping_factor <= 0:
      raise ValueError(f'clipping_factor must be positive. Found '
                       f'clipping_factor={self.clipping_factor!r}.')
    if self.beta is not None and not 0 < self.beta <= 1:
      raise ValueError(f'beta must be in (0, 1]. Found beta={self.beta!r}.')
    if self.max_norm <= 0:
      raise ValueError(f'max_norm must be positive. Found max_norm={self.max_norm!r}.')

  def resolved(self, dataset: str):
    paper = PAPER_DEFAULTS.get(dataset, PAPER_DEFAULTS['mnist'])
    changes, notes = {}, {}
    for name, value in paper.items():
      if getattr(self, name) is None:
        changes[name] = value
        notes[name] = (f'Adap DP-FL Sec. V-A value for {dataset}' if dataset in PAPER_DEFAULTS
                       else 'not given in the paper for this dataset; chosen because it '
                       'is the MNIST value')
    return dataclasses.replace(self, **changes), notes

  def check_run(self, config) -> None:
    if (self.clipping == 'adaptive' and self.clip_statistic == 'unclipped'
        and self.clip_norm_query == 'accounted' and config.epsilon_budget is not None):
      raise ValueError('clip_statistic=unclipped has no finite epsilon_guaranteed, so a '
                       'budget on it stops every client at once: use clip_norm_query=free '
                       '(the budget on the paper\'s count). Found clip_norm_query='
                       f'{self.clip_norm_query!r}.')
    if config.clients_per_slice is not None and config.clients % config.clients_per_slice:
      raise ValueError(f'clients_per_slice must divide clients={config.clients} for '
                       f'adap_dp_fl. Found clients_per_slice={config.clients_per_slice!r}.')


def _build(ctx: registry.BuildContext, hp: AdapDPFLHparams) -> common.Method:
  c = ctx.config
  return build_adap_dp_fl(
      ctx.keras_builder, ctx.data, ctx.validation, num_classes=ctx.num_classes, hp=hp,
      dataset=c.dataset, learning_rate=c.learning_rate, noise_multiplier=c.noise_multiplier,
      clip_norm=c.clip_norm, clients_per_slice=c.clients_per_slice, seed=c.seed)


# Not `slices_of_one`: the default (`clients_per_slice` unset) already runs the whole
# cohort in one slice, faster than slices of one client (benchmarks/README.md).
METHODS = (registry.MethodSpec(
    'adap_dp_fl', _build, AdapDPFLHparams,
    'Adap DP-FL (spec adap_dp_fl.md): adaptive clipping, noise decay, stateful clients',
    shared_meanings=dict(clip_norm='the constant threshold C (clipping=constant)',
                         noise_multiplier='initial sigma_0')),)
