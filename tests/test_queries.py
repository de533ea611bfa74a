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


def test_stateless_gaussian_sum_query_draws_its_noise_from_its_state():
  q = queries.StatelessGaussianSumQuery(l2_norm_clip=2.0, stddev=0.6, seed=[7, -1])
  state = q.initial_global_state()
  assert int(state.releases) == 0 and state.seed.numpy().tolist() == [7, -1]
  # Clipping and the sum are tensorflow-privacy's: [3, 4] (norm 5) clips to [1.2, 1.6].
  params = q.derive_sample_params(state)
  sample = q.initial_sample_state([tf.zeros([2])])
  sample = q.accumulate_record(params, sample, [tf.constant([3.0, 4.0])])
  sample = q.accumulate_record(params, sample, [tf.constant([0.5, 0.0])])
  np.testing.assert_allclose(sample[0].numpy(), [1.7, 1.6], rtol=1e-6)
  zeros = [tf.zeros([300, 100]), tf.zeros([7])]
  a, state1, event = q.get_noised_result(zeros, state)
  b, _, _ = q.get_noised_result(zeros, state)
  c, state2, _ = q.get_noised_result(zeros, state1)
  assert int(state1.releases) == 1 and int(state2.releases) == 2
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x.numpy(), y.numpy())  # same state, same noise
  # The noise is gaussian_noise_like's at fold_in(seed, release).
  expected = queries.gaussian_noise_like(
      zeros, 0.6, tf.random.experimental.stateless_fold_in(tf.constant([7, -1], tf.int64),
                                                           tf.constant(0, tf.int64)))
  for x, y in zip(a, expected):
    np.testing.assert_array_equal(x.numpy(), y.numpy())
  first = np.concatenate([x.numpy().ravel() for x in a])
  second = np.concatenate([x.numpy().ravel() for x in c])
  assert np.std(first) == pytest.approx(0.6, rel=0.03)
  assert abs(np.corrcoef(first, second)[0, 1]) < 5 / math.sqrt(first.size)
  assert float(event.noise_multiplier) == pytest.approx(0.3, rel=1e-6)
  # With zero noise the result is the clipped sum exactly.
  exact = queries.StatelessGaussianSumQuery(2.0, 0.0, [7, -1])
  out, _, _ = exact.get_noised_result(sample, exact.initial_global_state())
  np.testing.assert_array_equal(out[0].numpy(), sample[0].numpy())
  with pytest.raises(ValueError, match='two integers'):
    queries.StatelessGaussianSumQuery(1.0, 1.0, [1, 2, 3])


def test_preclipped_query_sums_clipped_slices_with_the_same_noise_and_event():
  """Records that are sums of `clip_contribution`-clipped contributions: the same result,
  noise and event as the parent query over one record per contribution."""
  contributions = [[tf.constant([3.0, 4.0]), tf.constant([0.0])],   # norm 5: clipped
                   [tf.constant([0.5, 0.0]), tf.constant([0.0])],
                   [tf.constant([0.0, 0.0]), tf.constant([12.0])]]  # norm 12: clipped
  clipped = [queries.clip_contribution(c, 2.0) for c in contributions]
  np.testing.assert_allclose(clipped[0][0].numpy(), [1.2, 1.6], rtol=1e-6)
  assert float(clipped[2][1].numpy()[0]) == pytest.approx(2.0)
  slices = [[a + b for a, b in zip(clipped[0], clipped[1])], clipped[2]]  # two slices

  def release(query, records):
    state = query.initial_global_state()
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(records[0])
    for r in records:
      sample = query.accumulate_record(params, sample, r)
    return query.get_noised_result(sample, state)
  plain = queries.StatelessGaussianSumQuery(2.0, 0.6, [7, -1])
  pre = queries.PreclippedGaussianSumQuery(2.0, 0.6, [7, -1])
  out_plain, _, event_plain = release(plain, contributions)
  out_pre, state, event_pre = release(pre, slices)
  for a, b in zip(out_plain, out_pre):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)
  assert event_pre == event_plain and float(event_pre.noise_multiplier) == pytest.approx(0.3)
  assert int(state.releases) == 1
  # It does not clip: a record above the clip passes unchanged (the client work clips).
  exact = queries.PreclippedGaussianSumQuery(2.0, 0.0, [7, -1])
  out, _, _ = release(exact, [[tf.constant([3.0, 4.0]), tf.constant([0.0])]])
  np.testing.assert_array_equal(out[0].numpy(), [3.0, 4.0])


def test_seeded_gaussian_fixed_repeats_its_noise_and_has_tff_s_scale():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import baselines  # pylint: disable=g-import-not-at-top
  sigma, clip, cohort, d = 1.5, 0.5, 4.0, 20_000
  value_type = tff.TensorType(np.float32, [d])

  def aggregate(seed, records, rounds=1):
    process = baselines.seeded_gaussian_fixed(sigma, cohort, clip, seed).create(value_type)
    state, outs = process.initialize(), []
    for _ in range(rounds):
      out = process.next(state, records)
      state = out.state
      outs.append(np.asarray(out.result))
    return outs, state

  records = [np.full([d], 0.01, np.float32), np.zeros([d], np.float32)]
  (a1, a2), state = aggregate([3, -1], records, rounds=2)
  (b1, b2), _ = aggregate([3, -1], records, rounds=2)
  np.testing.assert_array_equal(a1, b1)  # a rerun releases the same noise, round by round
  np.testing.assert_array_equal(a2, b2)
  assert not np.array_equal(a1, a2)
  (other,), _ = aggregate([4, -1], records)
  assert not np.array_equal(a1, other)
  # The record [0.01] * d has norm 1.41 > clip: clipped to norm 0.5, then the noise of
  # TFF's gaussian_fixed: N(0, (sigma clip)^2) on the sum, divided by the cohort.
  clipped = 0.5 / np.sqrt(d)
  assert np.mean(a1) == pytest.approx(clipped / cohort, abs=5 * sigma * clip / cohort / np.sqrt(d))
  assert np.std(a1) == pytest.approx(sigma * clip / cohort, rel=0.03)
  event = tff.aggregators.differential_privacy.extract_dp_event_from_state(state)
  assert float(event.noise_multiplier) == pytest.approx(sigma, rel=1e-6)
