"""Gaussian queries: the noise they add and the DP events they state."""

import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tffdp import privacy, queries


def test_add_noise_scale_and_determinism():
  q = queries.GaussianSumQuery(tf.constant(1.5), tf.constant(0.4))
  zeros = [tf.zeros([200, 100]), tf.zeros([5000])]
  seed = tf.constant([1, 2], tf.int64)
  a, b = q.add_noise(zeros, seed), q.add_noise(zeros, seed)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x.numpy(), y.numpy())  # stateless: same seed, same noise
  noise = np.concatenate([x.numpy().ravel() for x in a])
  assert np.std(noise) == pytest.approx(0.6, rel=0.02)  # sigma C = 1.5 x 0.4
  # The noise is added to the sum: records + noise, the noise independent of the records.
  on_ones = q.add_noise([tf.ones([3])], seed)[0].numpy()
  on_zeros = q.add_noise([tf.zeros([3])], seed)[0].numpy()
  np.testing.assert_allclose(on_ones - 1.0, on_zeros, atol=1e-6)
  assert np.all(on_zeros != 0)


def test_event_matches_dp_accounting():
  q = queries.GaussianSumQuery(1.1, None)
  assert q.event(0.02, 30) == dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.1)), 30)
  assert q.event() == privacy.subsampled_gaussian_event(1.1, 1.0, 1)


@pytest.mark.parametrize('sigmas,expected', [((2.0, 2.0), 2.0 / math.sqrt(2)),
                                             ((1.0, 2.0), 1.0 / math.sqrt(1.25)),
                                             ((3.0,), 3.0), ((1.0, 0.0), 0.0)])
def test_joint_noise_multiplier(sigmas, expected):
  qs = [queries.GaussianSumQuery(s, None) for s in sigmas]
  assert queries.joint_noise_multiplier(qs) == pytest.approx(expected, rel=1e-12)


def test_joint_event_is_the_composition_of_both_queries():
  # Two Gaussian queries on the same sample compose (RDP adds) to one Gaussian query.
  orders = list(range(2, 65))
  a, b = queries.GaussianSumQuery(1.2, None), queries.GaussianSumQuery(2.5, None)
  both = dp_accounting.rdp.RdpAccountant(orders)
  both.compose(dp_accounting.GaussianDpEvent(1.2))
  both.compose(dp_accounting.GaussianDpEvent(2.5))
  joint = dp_accounting.rdp.RdpAccountant(orders)
  joint.compose(queries.joint_event([a, b]))
  assert joint.get_epsilon(1e-5) == pytest.approx(both.get_epsilon(1e-5), rel=1e-9)


@pytest.mark.parametrize('num', [1, 7, 200_001])
def test_standard_normal_is_standard_normal(num):
  from scipy import stats
  seed = tf.constant([3, 4], tf.int64)
  z = queries.standard_normal(tf.constant(num), seed).numpy()
  assert z.shape == (num,) and z.dtype == np.float32 and np.all(np.isfinite(z))
  np.testing.assert_array_equal(z, queries.standard_normal(tf.constant(num), seed).numpy())
  if num < 1000:
    return
  assert stats.kstest(z, 'norm').pvalue > 1e-3
  assert np.mean(z) == pytest.approx(0.0, abs=5 / math.sqrt(num))
  assert np.std(z) == pytest.approx(1.0, abs=0.01)
  assert np.mean(np.abs(z) > 3) == pytest.approx(2 * stats.norm.sf(3), rel=0.25)
  assert np.max(np.abs(z)) <= math.sqrt(2 * 23 * math.log(2)) + 1e-5
  # The cos and sin halves of the Box-Muller pairs are independent, not merely
  # uncorrelated: their squares are uncorrelated too.
  half = (num + 1) // 2
  c, s = z[:half][:num - half], z[half:]
  assert abs(np.corrcoef(c, s)[0, 1]) < 5 / math.sqrt(half)
  assert abs(np.corrcoef(c ** 2, s ** 2)[0, 1]) < 5 / math.sqrt(half)
  other = queries.standard_normal(tf.constant(num), tf.constant([3, 5], tf.int64)).numpy()
  assert abs(np.corrcoef(z, other)[0, 1]) < 5 / math.sqrt(num)


def test_gaussian_noise_like_gives_each_tensor_its_own_noise():
  seed = tf.constant([1, 2], tf.int64)
  tensors = [tf.zeros([300, 40]), tf.zeros([12000]), tf.zeros([], tf.float32)]
  noise = queries.gaussian_noise_like(tensors, 2.0, seed)
  assert [n.shape for n in noise] == [t.shape for t in tensors]
  a, b = noise[0].numpy().ravel(), noise[1].numpy().ravel()
  assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(a.size)
  assert np.std(np.concatenate([a, b])) == pytest.approx(2.0, rel=0.02)
