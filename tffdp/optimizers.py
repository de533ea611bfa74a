"""Server optimizers TFF does not ship, as `tff.learning.optimizers.Optimizer`s.

`build_nadam`: Nadam (Dozat 2016), the server optimizer of AADP-FL (Sec. 4.1 step 6 of
`../shared/papers/001_...`; spec `aadp_fl.md`), with the update of
`tf.keras.optimizers.Nadam` (TF 2.14: the momentum schedule
`u_t = beta_1 (1 - 0.5 * 0.96^t)`) so that a model trained with either moves the same
way (tested on the same pseudo-gradients). Its moments are in the optimizer state
(`accumulator` m_t, `preconditioner` n_t), where AADP-FL's convergence test (eq. 3)
reads them.
"""

from __future__ import annotations

import collections
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

LEARNING_RATE = 'learning_rate'
BETA_1, BETA_2, EPSILON = 'beta_1', 'beta_2', 'epsilon'
STEP, U_PRODUCT = 'step', 'u_product'
ACCUMULATOR, PRECONDITIONER = 'accumulator', 'preconditioner'
_HPARAMS = (LEARNING_RATE, BETA_1, BETA_2, EPSILON)
_MOMENTUM_DECAY = 0.96  # Keras' (and Dozat's) momentum-schedule constant


class _Nadam(tff.learning.optimizers.Optimizer):
  """Nadam; see `build_nadam`."""

  def __init__(self, learning_rate, beta_1, beta_2, epsilon):
    for name, value, low, high in ((LEARNING_RATE, learning_rate, 0.0, None),
                                   (BETA_1, beta_1, 0.0, 1.0), (BETA_2, beta_2, 0.0, 1.0),
                                   (EPSILON, epsilon, 0.0, None)):
      if value < low or (high is not None and value > high):
        bound = f'[{low}, {high}]' if high is not None else f'>= {low}'
        raise ValueError(f'Nadam {name} must be {bound}. Found {name}={value!r}.')
    self._hparams = collections.OrderedDict(
        [(LEARNING_RATE, learning_rate), (BETA_1, beta_1), (BETA_2, beta_2),
         (EPSILON, epsilon)])

  def initialize(self, specs: Any) -> collections.OrderedDict:
    zeros = lambda: tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)
    return collections.OrderedDict(
        **self._hparams, **{STEP: 0, U_PRODUCT: 1.0, ACCUMULATOR: zeros(),
                            PRECONDITIONER: zeros()})

  def next(self, state, weights, gradients):
    lr, beta_1, beta_2, epsilon = (state[k] for k in _HPARAMS)
    step = state[STEP] + 1
    t = tf.cast(step, tf.float32)
    u_t = beta_1 * (1.0 - 0.5 * tf.pow(_MOMENTUM_DECAY, t))
    u_next = beta_1 * (1.0 - 0.5 * tf.pow(_MOMENTUM_DECAY, t + 1.0))
    u_product = state[U_PRODUCT] * u_t
    u_product_next = u_product * u_next
    beta_2_power = tf.pow(tf.cast(beta_2, tf.float32), t)

    def update(w, m, v, g):
      dtype = w.dtype
      cast = lambda x: tf.cast(x, dtype)
      m = m + (g - m) * (1.0 - cast(beta_1))
      v = v + (tf.square(g) - v) * (1.0 - cast(beta_2))
      m_hat = (cast(u_next) * m / (1.0 - cast(u_product_next))
               + (1.0 - cast(u_t)) * g / (1.0 - cast(u_product)))
      v_hat = v / (1.0 - cast(beta_2_power))
      return w - m_hat * cast(lr) / (tf.sqrt(v_hat) + cast(epsilon)), m, v

    flat = [update(w, m, v, g) for w, m, v, g in zip(
        tf.nest.flatten(weights), tf.nest.flatten(state[ACCUMULATOR]),
        tf.nest.flatten(state[PRECONDITIONER]), tf.nest.flatten(gradients))]
    pack = lambda i: tf.nest.pack_sequence_as(weights, [f[i] for f in flat])
    new_state = collections.OrderedDict(
        **{k: state[k] for k in _HPARAMS},
        **{STEP: step, U_PRODUCT: u_product, ACCUMULATOR: pack(1), PRECONDITIONER: pack(2)})
    return new_state, pack(0)

  def get_hparams(self, state):
    return collections.OrderedDict((k, state[k]) for k in _HPARAMS)

  def set_hparams(self, state, hparams):
    return collections.OrderedDict(state, **hparams)


def build_nadam(learning_rate: float, beta_1: float = 0.9, beta_2: float = 0.999,
                epsilon: float = 1e-7) -> tff.learning.optimizers.Optimizer:
  """Nadam as a `tff.learning.optimizers.Optimizer` (e.g. for
  `tff.learning.templates.build_apply_optimizer_finalizer`).

  Per step `t` (from 1), with gradient `g`: `m <- beta_1 m + (1 - beta_1) g`,
  `v <- beta_2 v + (1 - beta_2) g^2`, `u_t = beta_1 (1 - 0.5 * 0.96^t)`,
  `m_hat = u_{t+1} m / (1 - prod_{i<=t+1} u_i) + (1 - u_t) g / (1 - prod_{i<=t} u_i)`,
  `v_hat = v / (1 - beta_2^t)`, `w <- w - lr m_hat / (sqrt(v_hat) + epsilon)`: the update
  of `tf.keras.optimizers.Nadam` in TF 2.14.

  Args:
    learning_rate: `>= 0` (AADP-FL: 0.01).
    beta_1: In `[0, 1]` (AADP-FL: 0.9).
    beta_2: In `[0, 1]` (AADP-FL: 0.999).
    epsilon: `>= 0` (not given in the AADP-FL paper; Keras' default 1e-7).

  Raises:
    ValueError: Naming a hyperparameter out of its range.
  """
  return _Nadam(learning_rate, beta_1, beta_2, epsilon)
