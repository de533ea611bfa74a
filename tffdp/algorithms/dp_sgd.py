"""Reusable DP-SGD client work (Abadi et al. 2016) as a TFF `ClientWorkProcess`.

Used by DPFL, and meant for A-DPFL, Adap DP-FL and DP-SCAFFOLD. Type signature:

    init:  ( -> S@SERVER)
    next:  (<S@SERVER, ModelWeights@CLIENTS, <batches=D*, seed=int64[2]*>@CLIENTS>
            -> <state=S@SERVER, result=ClientResult(update, update_weight)@CLIENTS,
                measurements=<train=<loss_sum, num_examples, num_steps>>@SERVER>)

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
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp.algorithms import per_example

DP_SGD_MODES = ('none', 'clip_then_noise', 'paper_order')

KerasBuilder = Callable[[], tf.keras.Model]


def gaussian_noise_like(tensors, stddev, seed):
  """Stateless `N(0, stddev^2)` noise shaped like each tensor; `seed` int64[2]."""
  return [tf.random.stateless_normal(tf.shape(t), seed=tf.random.experimental.stateless_fold_in(seed, i),
                                     stddev=stddev, dtype=t.dtype)
          for i, t in enumerate(tensors)]


def build_local_step(model: tf.keras.Model, learning_rate: float, dp_sgd: str):
  """Returns `step(x, y, seed, step_index, noise_multiplier, clip_norm) -> losses [B]`.

  One local update of `model`'s variables on a batch (see the module docstring); the
  noise seed of the step is `stateless_fold_in(seed, step_index)`.
  """
  lr = tf.constant(learning_rate, tf.float32)

  def step(x, y, seed, step_index, noise_multiplier, clip_norm):
    bf = tf.maximum(tf.cast(tf.shape(y)[0], tf.float32), 1.0)
    step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step_index, tf.int64))
    stddev = noise_multiplier * clip_norm
    if dp_sgd == 'clip_then_noise':
      summed, _, losses = per_example.clipped_gradient_sum(model, x, y, clip_norm)
      noise = gaussian_noise_like(summed, stddev, step_seed)
      direction = [(s + z) / bf for s, z in zip(summed, noise)]
    else:
      with tf.GradientTape() as tape:
        logits = model(x, training=True)
        losses = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        total = tf.reduce_sum(losses)
      summed = tape.gradient(total, model.trainable_variables)
      if dp_sgd == 'none':
        direction = [g / bf for g in summed]
      else:  # paper_order
        noise = gaussian_noise_like(summed, stddev, step_seed)
        g = [(s + z) / bf for s, z in zip(summed, noise)]
        scale = tf.minimum(1.0, clip_norm / tf.maximum(tf.linalg.global_norm(g), 1e-12))
        direction = [t * scale for t in g]
    for v, d in zip(model.trainable_variables, direction):
      v.assign_sub(lr * d)
    return losses

  return step


def build_client_update(keras_builder: KerasBuilder, learning_rate: float, dp_sgd: str):
  """Returns the per-client `tf.function`.

  `client_update(initial_trainable, batches, seed, noise_multiplier, clip_norm)` returns
  `(update, update_weight, metrics)`: the model delta `initial - trained` (list of
  float32 tensors), the number of examples (float32) and
  `OrderedDict(loss_sum, num_examples, num_steps)`.
  """
  model = keras_builder()
  step = build_local_step(model, learning_rate, dp_sgd)

  @tf.function
  def client_update(initial_trainable, batches, seed, noise_multiplier, clip_norm):
    for v, w in zip(model.trainable_variables, initial_trainable):
      v.assign(w)

    def reduce_fn(acc, batch):
      n_steps, n_examples, loss_sum = acc
      losses = step(batch['x'], batch['y'], seed, n_steps, noise_multiplier, clip_norm)
      return (n_steps + 1, n_examples + tf.cast(tf.shape(batch['y'])[0], tf.int64),
              loss_sum + tf.reduce_sum(losses))

    n_steps, n_examples, loss_sum = batches.reduce(
        (tf.constant(0, tf.int32), tf.constant(0, tf.int64), tf.constant(0.0)), reduce_fn)
    update = [w - v for w, v in zip(initial_trainable, model.trainable_variables)]
    metrics = collections.OrderedDict(loss_sum=loss_sum, num_examples=n_examples,
                                      num_steps=n_steps)
    return update, tf.cast(n_examples, tf.float32), metrics

  return client_update


def build_dp_sgd_client_work(keras_builder: KerasBuilder,
                             weights_type: tff.Type,
                             client_data_type: tff.Type,
                             *,
                             learning_rate: float,
                             dp_sgd: str = 'clip_then_noise',
                             noise_multiplier: float = 1.0,
                             clip_norm: float = 1.0) -> tff.learning.templates.ClientWorkProcess:
  """Builds the DP-SGD client work.

  Args:
    keras_builder: No-arg callable returning a fresh `tf.keras.Model` (logits out).
    weights_type: TFF type of `tff.learning.models.ModelWeights` of that model.
    client_data_type: `<batches=D*, seed=int64[2]*>` (see `FederatedData.client_data_type`).
    learning_rate: Local SGD learning rate (`> 0`).
    dp_sgd: One of `DP_SGD_MODES`.
    noise_multiplier: Initial sigma (`>= 0`) in the server state.
    clip_norm: Initial per-example clip norm C (`> 0`) in the server state.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` (signature in the module docstring).

  Raises:
    ValueError: On an unknown `dp_sgd`, `learning_rate <= 0`, `noise_multiplier < 0`
      or `clip_norm <= 0`.
  """
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

  state_type = initial_state.type_signature.result

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.tensorflow.computation(state_type, weights_type, client_data_type)
  def client_fn(state, weights, data):
    client_update = build_client_update(keras_builder, learning_rate, dp_sgd)
    seed = data['seed'].get_single_element()
    update, weight, metrics = client_update(
        list(weights.trainable), data['batches'], seed,
        state['noise_multiplier'], state['clip_norm'])
    return tff.learning.templates.ClientResult(update=update, update_weight=weight), metrics

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(client_data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    client_state = tff.federated_broadcast(state)
    result, metrics = tff.federated_map(client_fn, (client_state, weights, data))
    train = tff.federated_sum(metrics)
    return tff.templates.MeasuredProcessOutput(
        state=state, result=result,
        measurements=tff.federated_zip(collections.OrderedDict(train=train)))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)
