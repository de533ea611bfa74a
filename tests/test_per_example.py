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


_CONV_CASES = [
    ((3, 32, 32, 3), (5, 5), (1, 1), 'valid'),   # 784 positions: per-offset branch
    ((3, 28, 28, 2), (3, 3), (1, 1), 'same'),
    ((3, 7, 7, 4), (3, 3), (1, 1), 'same'),      # 49 positions: patches branch
    ((3, 10, 10, 4), (4, 4), (1, 1), 'same'),    # even kernel: uneven SAME padding
    ((3, 17, 15, 2), (4, 2), (1, 1), 'same'),    # per-offset branch, uneven padding
    ((3, 11, 10, 2), (2, 3), (1, 1), 'valid'),
    ((3, 9, 9, 4), (3, 3), (2, 2), 'same'),      # strided: extract_patches
    ((3, 11, 10, 2), (2, 3), (3, 2), 'valid'),
]


# Every case by every path that takes its stride (`offsets` and `patches`: stride 1;
# `depthwise`: equal row and column strides).
@pytest.mark.parametrize('shape,kernel,strides,padding,path', [
    (*case, path) for case in _CONV_CASES for path in (None, *pe.CONV_GRADIENT_PATHS)
    if (case[2] == (1, 1) or path not in ('offsets', 'patches'))
    and (case[2][0] == case[2][1] or path != 'depthwise')])
def test_conv_kernel_gradients_equal_extract_patches(shape, kernel, strides, padding, path):
  rng = np.random.default_rng(0)
  a = tf.constant(rng.normal(size=shape), tf.float32)
  out = tf.nn.conv2d(a, tf.zeros([*kernel, shape[-1], 3]), [1, *strides, 1],
                     padding.upper())
  d = tf.constant(rng.normal(size=out.shape), tf.float32)
  patches = tf.image.extract_patches(a, [1, *kernel, 1], [1, *strides, 1], [1, 1, 1, 1],
                                     padding.upper())
  b = shape[0]
  ref = tf.matmul(tf.reshape(patches, [b, -1, patches.shape[-1]]),
                  tf.reshape(d, [b, -1, 3]), transpose_a=True)
  got = pe.conv_kernel_gradients(a, d, kernel, strides, padding, path)
  assert got.shape == ref.shape
  # float32 sums over up to 784 positions in another order: tolerance of the largest.
  atol = 1e-5 * float(np.abs(ref).max())
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=atol)
  # Reshaped, each example's gradient is the conv kernel gradient of its own output.
  with tf.GradientTape() as tape:
    k = tf.Variable(tf.zeros([*kernel, shape[-1], 3]))
    z = tf.nn.conv2d(a[:1], k, [1, *strides, 1], padding.upper())
    total = tf.reduce_sum(z * d[:1])
  np.testing.assert_allclose(tf.reshape(got[0], k.shape), tape.gradient(total, k),
                             rtol=1e-5, atol=atol)


@pytest.mark.parametrize('c_in,c_out,positions,strides,expected', [
    (1, 32, 784, (1, 1), 'depthwise'), (3, 6, 784, (1, 1), 'depthwise'),
    (1, 16, 169, (2, 2), 'depthwise'), (3, 32, 1024, (1, 1), 'offsets'),
    (10, 20, 64, (1, 1), 'patches'), (16, 32, 25, (2, 2), 'extract_patches'),
    (2, 3, 20, (3, 2), 'extract_patches')])   # unequal strides: not depthwise
def test_conv_gradient_path_by_shape(c_in, c_out, positions, strides, expected):
  assert pe._conv_gradient_path(c_in, c_out, positions, strides) == expected


def test_conv_kernel_gradients_dynamic_batch_and_bad_path():
  a = tf.random.stateless_normal([4, 9, 9, 1], seed=[0, 1])
  d = tf.random.stateless_normal([4, 7, 7, 5], seed=[0, 2])
  ref = pe.conv_kernel_gradients(a, d, (3, 3), (1, 1), 'valid', 'patches')
  f = tf.function(lambda a, d: pe.conv_kernel_gradients(a, d, (3, 3), (1, 1), 'valid'),
                  input_signature=[tf.TensorSpec([None, 9, 9, 1]),
                                   tf.TensorSpec([None, 7, 7, 5])])
  np.testing.assert_allclose(f(a, d), ref, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match='path must be one of'):
    pe.conv_kernel_gradients(a, d, (3, 3), (1, 1), 'valid', 'ghost')
  with pytest.raises(ValueError, match='needs stride 1'):
    pe.conv_kernel_gradients(a, d[:, ::2, ::2], (3, 3), (2, 2), 'valid', 'offsets')
  with pytest.raises(ValueError, match='needs equal row and column strides'):
    pe.conv_kernel_gradients(a, d[:, ::2, ::3], (3, 3), (2, 3), 'valid', 'depthwise')


def test_conv_kernel_gradients_need_static_spatial_shape():
  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 1])])
  def f(a):
    return pe.conv_kernel_gradients(a, a, (1, 1), (1, 1), 'valid')
  with pytest.raises(ValueError, match='static spatial shapes'):
    f.get_concrete_function()
