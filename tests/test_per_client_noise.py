"""Per-client Gaussian noise (AADP-FL step 5) as a TFF aggregation factory, alone and
behind longitudinal clipping; the norm-recording constant clipping norm."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators

VALUE = tff.types.tensorflow_to_type([tf.TensorSpec([4000], tf.float32),
                                      tf.TensorSpec([2], tf.float32)])
WEIGHT = tff.TensorType(np.float32)


def noise_process(sigmas=(0.0, 0.0), keys=(6.0, 9.0), scale=1.0, noise_on='all',
                  inner=None):
  return aggregators.PerClientGaussianFactory(
      keys, sigmas, scale, inner or tff.aggregators.SumFactory(),
      noise_on=noise_on).create(VALUE, WEIGHT)


def values(*fills):
  return [[np.full(4000, f, np.float32), np.full(2, f, np.float32)] for f in fills]


def test_zero_noise_is_exact_and_measured():
  p = noise_process()
  out = p.next(p.initialize(), values(1.0, 2.0), [6.0, 9.0])
  np.testing.assert_array_equal(out.result[0], np.full(4000, 3.0, np.float32))
  m = out.measurements['per_client_noise']
  assert (float(m['noise_multiplier_sum']), float(m['nonzero_fraction']), int(m['clients'])) \
      == (0.0, 1.0, 2)


def test_each_client_draws_its_own_sigma_by_weight():
  # Client with weight 6 has sigma 0.5, weight 9 has sigma 2; std per unit sigma 0.1.
  p = noise_process(sigmas=(0.5, 2.0), scale=0.1)
  state = p.initialize()
  for weight, std in ((6.0, 0.05), (9.0, 0.2)):
    out = p.next(state, values(0.0), [weight])
    noise = np.concatenate(out.result)
    assert abs(np.std(noise) / std - 1) < 0.06   # 4002 draws: sd of the ratio ~1.1%
    assert abs(np.mean(noise)) < 4 * std / np.sqrt(noise.size)
  out = p.next(state, values(0.0, 0.0), [6.0, 9.0])
  # The sum of two clients: variance 0.05^2 + 0.2^2; independent draws, not one shared.
  assert abs(np.std(np.concatenate(out.result)) / np.hypot(0.05, 0.2) - 1) < 0.06
  assert float(out.measurements['per_client_noise']['noise_multiplier_sum']) == 2.5


def test_measurements_state_the_table_used_and_clients_per_entry():
  p = noise_process(sigmas=(0.5, 2.0), scale=0.0)
  out = p.next(p.initialize(), values(0.0, 0.0, 0.0), [9.0, 6.0, 9.0])
  m = out.measurements['per_client_noise']
  np.testing.assert_array_equal(m['noise_multipliers'], np.float32([0.5, 2.0]))
  np.testing.assert_array_equal(m['clients_per_key'], [1, 2])
  state = aggregators.with_noise_multipliers(out.state, [4.0, 1.0])
  m = p.next(state, values(0.0, 0.0), [7.0, 6.0]).measurements['per_client_noise']
  # The round's table, not the initial one; a weight outside the table counts nowhere.
  np.testing.assert_array_equal(m['noise_multipliers'], np.float32([4.0, 1.0]))
  np.testing.assert_array_equal(m['clients_per_key'], [1, 0])


def test_the_factory_states_the_dp_event_of_the_table_it_drew_with():
  p = aggregators.PerClientGaussianFactory(
      (6.0, 9.0), (0.5, 2.0), 0.1, tff.aggregators.SumFactory(),
      l2_sensitivity=0.05).create(VALUE, WEIGHT)
  state = aggregators.with_noise_multipliers(p.initialize(), [4.0, 0.0])
  m = p.next(state, values(0.0), [6.0]).measurements['per_client_noise']
  # std sigma x 0.1 over the sensitivity 0.05: noise multipliers 8 and 0.
  np.testing.assert_allclose(m['dp_event']['noise_multiplier'], [8.0, 0.0], rtol=1e-6)
  factory = lambda noise_on, s=0.05: aggregators.PerClientGaussianFactory(
      (6.0, 9.0), (0.5, 2.0), 0.1, tff.aggregators.SumFactory(), noise_on=noise_on,
      l2_sensitivity=s)
  (event, reason), (none, why) = factory('all').executed_events(m)
  assert event.noise_multiplier == pytest.approx(8.0, rel=1e-6) and reason == ''
  assert none is None and why == 'noise multiplier is 0: no noise'
  nan = {'dp_event': {'noise_multiplier': np.float32([np.nan, 1.0])}}
  assert 'not finite' in ''.join(r for _, r in factory('all').executed_events(nan)[:1])
  assert [e for e, _ in factory('kept').executed_events(m)] == [None, None]
  assert factory('kept').executed_events(m)[0][1] == aggregators.KEPT_REASON
  # Without a sensitivity no event is stated.
  assert 'dp_event' not in noise_process().next(
      noise_process().initialize(), values(0.0), [6.0]).measurements['per_client_noise']
  with pytest.raises(ValueError, match='l2_sensitivity'):
    factory('all', None).executed_events(m)
  with pytest.raises(ValueError, match='l2_sensitivity must be positive'):
    factory('all', 0.0)


def test_two_clients_with_one_sigma_draw_independent_noise():
  p = noise_process(sigmas=(1.0, 1.0), scale=1.0, inner=tff.aggregators.SumFactory())
  a = p.next(p.initialize(), values(0.0), [6.0]).result[0]
  b = p.next(p.initialize(), values(0.0), [6.0]).result[0]
  assert abs(np.corrcoef(a, b)[0, 1]) < 0.1   # fresh noise every round


def test_noise_on_kept_leaves_zeros_zero():
  p = noise_process(sigmas=(1.0, 1.0), noise_on='kept')
  v = [np.zeros(4000, np.float32), np.array([1.0, 0.0], np.float32)]
  v[0][:1000] = 1.0
  out = p.next(p.initialize(), [v], [6.0])
  assert np.all(out.result[0][1000:] == 0) and out.result[1][1] == 0
  assert np.std(out.result[0][:1000]) > 0.5
  assert float(out.measurements['per_client_noise']['nonzero_fraction']) == \
      pytest.approx(1001 / 4002)


def test_unknown_weight_poisons_the_aggregate():
  p = noise_process(sigmas=(1.0, 1.0))
  out = p.next(p.initialize(), values(1.0), [7.0])
  assert np.all(np.isnan(out.result[0]))


def test_table_replaced_between_rounds():
  p = noise_process()
  state = aggregators.with_noise_multipliers(p.initialize(), [0.0, 3.0])
  out = p.next(state, values(0.0, 0.0), [6.0, 9.0])
  assert float(out.measurements['per_client_noise']['noise_multiplier_sum']) == 3.0
  assert abs(np.std(out.result[0]) / 3.0 - 1) < 0.06
  with pytest.raises(ValueError, match='shape'):
    aggregators.with_noise_multipliers(p.initialize(), [1.0])


def test_behind_longitudinal_clipping_noise_follows_the_clip():
  factory = aggregators.longitudinal_clipping_factory(
      aggregators.norm_recording_constant(2.0),
      aggregators.PerClientGaussianFactory([1.0, 2.0], [0.0, 0.0], 1.0,
                                           tff.aggregators.UnweightedMeanFactory()))
  value_type = tff.types.tensorflow_to_type([tf.TensorSpec([3], tf.float32)])
  p = factory.create(value_type, WEIGHT)
  out = p.next(p.initialize(), [[np.array([3.0, 0.5, 0.1], np.float32)],   # zeroed
                                [np.array([1.0, 1.0, 1.0], np.float32)]],  # kept
               [1.0, 2.0])
  np.testing.assert_allclose(out.result[0], [0.5, 0.5, 0.5], atol=1e-6)
  # The constant norm's state is the clients' mean pre-clipping norm.
  norms = [np.linalg.norm([3.0, 0.5, 0.1]), np.sqrt(3.0)]
  assert float(out.state['longitudinal_clipping_norm']) == pytest.approx(np.mean(norms))
  assert float(out.measurements['longitudinal_clipping_norm']) == 2.0
  noise = out.measurements['longitudinal_clipping']['per_client_noise']
  assert float(noise['nonzero_fraction']) == pytest.approx(0.5)


def test_longitudinal_clip_in_front_of_tffs_dp_factory():
  """Reusable by other methods: clip, then TFF's DifferentiallyPrivateFactory (no noise)."""
  dp = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=0.0, clients_per_round=2.0, clip=100.0)
  value_type = tff.types.tensorflow_to_type([tf.TensorSpec([3], tf.float32)])
  p = aggregators.longitudinal_clipping_factory(1.2, dp).create(value_type)
  out = p.next(p.initialize(), [[np.array([1.0, 1.0, 0.2], np.float32)],
                                [np.array([0.3, 0.4, 0.0], np.float32)]])
  # First: 0.2 then one 1.0 zeroed (ties keep the lower index) -> [1, 0, 0].
  np.testing.assert_allclose(out.result[0], [(1.0 + 0.3) / 2, 0.4 / 2, 0.0], atol=1e-6)


@pytest.mark.parametrize('kw,match', [
    (dict(weight_keys=[1.0], noise_multipliers=[1.0, 2.0]), 'one length'),
    (dict(weight_keys=[1.0, 1.0], noise_multipliers=[1.0, 2.0]), 'distinct'),
    (dict(weight_keys=[1.0], noise_multipliers=[-1.0]), '>= 0'),
    (dict(weight_keys=[1.0], noise_multipliers=[1.0], noise_on='some'), 'noise_on'),
])
def test_bad_arguments_are_named(kw, match):
  kw = dict(dict(stddev_per_multiplier=1.0, inner=tff.aggregators.SumFactory()), **kw)
  with pytest.raises(ValueError, match=match):
    aggregators.PerClientGaussianFactory(**kw)
  with pytest.raises(ValueError, match='positive'):
    aggregators.norm_recording_constant(0.0)
