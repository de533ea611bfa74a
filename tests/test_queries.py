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
