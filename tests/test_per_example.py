import numpy as np
import pytest
import tensorflow as tf

from tffdp import models
from tffdp.algorithms import per_example as pe

SHAPES = {'deep_mnist_cnn': (28, 28, 1), 'adap_dp_fl_cnn': (28, 28, 1), 'mlp': (28, 28, 1),
          'mcmahan_cnn': (28, 28, 1), 'lenet_cnn': (32, 32, 3), 'fl_mnist_cnn': (28, 28, 1),
          'alexnet_cnn': (32, 32, 3),
          'logistic_regression': (28, 28, 1), 'dp_fedags_cifar_cnn': (32, 32, 3)}


@pytest.mark.parametrize('name', sorted(SHAPES))
def test_fast_clipping_equals_materialised_per_example_gradients(name):
  shape = SHAPES[name]
  model = models.build_keras_model(name, shape, 10, seed=1)
  assert pe.supports_fast_clipping(model)
  x = tf.random.stateless_uniform([5, *shape], seed=[1, 2])
  y = tf.constant([0, 3, 9, 3, 1], tf.int32)
  # C between the smallest and the largest norm: some examples clipped, some not.
  _, ref_norms, _ = pe.clipped_gradient_sum_vmap(model, x, y, tf.constant(1e9))
  c = tf.reduce_mean(ref_norms)
  fast_sum, fast_norms, fast_losses = pe.clipped_gradient_sum(model, x, y, c)
  ref_sum, ref_norms, ref_losses = pe.clipped_gradient_sum_vmap(model, x, y, c)
  np.testing.assert_allclose(fast_norms, ref_norms, rtol=1e-4)
  np.testing.assert_allclose(fast_losses, ref_losses, rtol=1e-5)
  for a, b in zip(fast_sum, ref_sum):
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-6)


def test_clipped_sum_norm_bound_and_unclipped_identity():
  model = models.build_keras_model('adap_dp_fl_cnn', (28, 28, 1), 10, seed=0)
  x = tf.random.stateless_uniform([8, 28, 28, 1], seed=[3, 4])
  y = tf.range(8) % 10
  s, norms, _ = pe.clipped_gradient_sum(model, x, y, tf.constant(1e-3))
  assert float(tf.linalg.global_norm(s)) <= 8 * 1e-3 * (1 + 1e-5)
  # With C above every norm, the clipped sum is the plain gradient of the summed loss.
  s, _, _ = pe.clipped_gradient_sum(model, x, y, tf.constant(1e9))
  with tf.GradientTape() as tape:
    total = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
        y, model(x), from_logits=True))
  for a, b in zip(s, tape.gradient(total, model.trainable_variables)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_unsupported_model_falls_back_to_vmap():
  inp = tf.keras.Input((4,))
  out = tf.keras.layers.Dense(3)(tf.keras.layers.BatchNormalization()(inp))
  model = tf.keras.Model(inp, out)
  assert not pe.supports_fast_clipping(model)
  x = tf.random.stateless_uniform([3, 4], seed=[0, 1])
  y = tf.constant([0, 1, 2])
  a = pe.clipped_gradient_sum(model, x, y, tf.constant(0.1))
  b = pe.clipped_gradient_sum_vmap(model, x, y, tf.constant(0.1))
  for u, v in zip(a[0], b[0]):
    np.testing.assert_allclose(u, v, rtol=1e-6)
