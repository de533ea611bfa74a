"""Plain-TensorFlow training steps: the floor the benchmarks measure TFF rounds against.

One local step of each kind on one random batch, each a `tf.function` that updates the
model in place, so calling it repeatedly times what a client's step costs with no
federated machinery around it.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tffdp import models, queries
from tffdp.algorithms import per_example
from tffdp.algorithms.dp_sgd import gaussian_noise_like


class Timing(NamedTuple):
  """Median seconds of the repeats, and their spread: half the range over the median."""
  median: float
  spread: float


def measure(fn, repeats: int) -> Timing:
  """Times `fn` `repeats` times after two warm-up calls (tracing, worker start)."""
  fn()
  fn()
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t)
  return timing_of(times)


def timing_of(times) -> Timing:
  """The `Timing` of measured seconds `times`: their median and spread."""
  median = float(np.median(times))
  return Timing(median, (max(times) - min(times)) / 2 / median if median > 0 else 0.0)


def train_steps(model: str, shape, batch: int, num_classes: int = 10) -> dict:
  """One SGD step of each kind for `model` on a random batch of `batch` examples.

  Args:
    model: A `tffdp.models` name.
    shape: Input shape of one example, e.g. `(28, 28, 1)`.
    batch: Examples per step.
    num_classes: Output classes.

  Returns:
    `{'plain': non-private step, 'clip_only': per-example clipping with no noise,
    'dp': DP-SGD step (per-example clipping, Gaussian noise of std 1 x C, Abadi et al.
    2016 Alg. 1), 'noise': one Gaussian draw of the model's size alone, 'forward': the
    forward pass alone, 'size': number of trainable coordinates, and the 'model', its
    batch 'x', 'y' and the 'clip' and noise 'seed' the steps use}`; the steps are
    zero-argument `tf.function`s.
  """
  m = models.build_keras_model(model, tuple(shape), num_classes, seed=0)
  x = tf.random.stateless_uniform([batch, *shape], seed=[1, 2])
  y = tf.random.stateless_uniform([batch], seed=[3, 4], maxval=num_classes, dtype=tf.int32)
  clip, sigma, lr = tf.constant(4.0), tf.constant(1.0), tf.constant(0.05)
  seed = tf.constant([5, 6], tf.int64)
  bf = float(batch)

  @tf.function
  def plain():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
          y, m(x, training=True), from_logits=True))
    for v, g in zip(m.trainable_variables, tape.gradient(loss, m.trainable_variables)):
      v.assign_sub(lr * g)

  @tf.function
  def clip_only():
    s, _, _ = per_example.clipped_gradient_sum(m, x, y, clip)
    for v, g in zip(m.trainable_variables, s):
      v.assign_sub(lr * g / bf)

  @tf.function
  def dp():
    s, _, _ = per_example.clipped_gradient_sum(m, x, y, clip)
    noise = gaussian_noise_like(s, sigma * clip, seed)
    for v, g, z in zip(m.trainable_variables, s, noise):
      v.assign_sub(lr * (g + z) / bf)

  size = sum(int(np.prod(v.shape)) for v in m.trainable_variables)
  n = tf.constant(size)
  noise = tf.function(lambda: queries.standard_normal(n, seed))
  forward = tf.function(lambda: m(x, training=False))
  return dict(plain=plain, clip_only=clip_only, dp=dp, noise=noise, forward=forward,
              size=size, model=m, x=x, y=y, clip=clip, seed=seed)
