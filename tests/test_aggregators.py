"""AADP-FL's longitudinal clipping (Sec. 4.3): the operation and its TFF factory."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators


def reference(vectors, clip):
  """The procedure as the paper states it: zero the smallest |.| until the norm <= S."""
  flat = np.concatenate([np.ravel(v) for v in vectors]).astype(np.float64)
  out = flat.copy()
  # Smallest magnitude first; among ties the higher flat index goes first.
  for i in sorted(range(len(flat)), key=lambda j: (abs(flat[j]), -j)):
    if np.sqrt(np.sum(out ** 2)) <= clip:
      break
    out[i] = 0.0
  parts, start = [], 0
  for v in vectors:
    parts.append(out[start:start + np.size(v)].reshape(np.shape(v)))
    start += np.size(v)
  return parts


def clip(vectors, s):
  out, norm, zeroed = aggregators.longitudinal_clip(
      [tf.constant(v, tf.float32) for v in vectors], tf.constant(s, tf.float32))
  return [o.numpy() for o in out], float(norm), int(zeroed)


@pytest.mark.parametrize('seed', range(5))
def test_matches_the_procedure_on_random_updates(seed):
  rng = np.random.default_rng(seed)
  vectors = [rng.normal(size=(4, 3)), rng.normal(size=7), rng.normal(size=(2, 2, 2))]
  flat_in = np.concatenate([np.ravel(v) for v in vectors])
  # Between the largest coordinate and the whole norm: some, not all, are zeroed.
  top, total = np.max(np.abs(flat_in)), np.linalg.norm(flat_in)
  s = float(top + rng.uniform(0.2, 0.7) * (total - top))
  got, norm, zeroed = clip(vectors, s)
  for g, r in zip(got, reference(vectors, s)):
    np.testing.assert_allclose(g, r, atol=1e-6)
  flat = np.concatenate([np.ravel(g) for g in got])
  assert np.linalg.norm(flat) <= s + 1e-5
  assert norm == pytest.approx(np.linalg.norm(np.concatenate([np.ravel(v) for v in vectors])),
                               rel=1e-5)
  assert zeroed == np.sum(flat == 0)
  # The kept set is the largest-magnitude prefix.
  source = np.abs(np.concatenate([np.ravel(v) for v in vectors]))
  assert 0 < zeroed < len(flat)
  assert source[flat != 0].min() >= source[flat == 0].max()


def test_ties_keep_the_lower_index_first():
  got, _, zeroed = clip([np.array([3.0, 3.0, 3.0, 3.0])], 5.5)  # 3 of 4 fit: 27 <= 30.25
  np.testing.assert_array_equal(got[0], [3.0, 3.0, 3.0, 0.0])
  assert zeroed == 1


def test_one_coordinate_above_the_norm_zeroes_everything():
  got, _, zeroed = clip([np.array([10.0, 1.0]), np.array([[0.5]])], 5.0)
  assert all(np.all(g == 0) for g in got) and zeroed == 3


def test_value_within_the_norm_is_unchanged():
  v = [np.array([0.3, -0.4]), np.array([0.1])]
  got, _, zeroed = clip(v, 1.0)
  for g, x in zip(got, v):
    np.testing.assert_array_equal(g, x.astype(np.float32))
  assert zeroed == 0


def test_factory_clips_each_client_then_aggregates():
  value_type = tff.types.tensorflow_to_type([tf.TensorSpec([3], tf.float32)])
  process = aggregators.longitudinal_clipping_factory(
      2.0, tff.aggregators.SumFactory()).create(value_type)
  out = process.next(process.initialize(),
                     [[np.array([3.0, 0.5, 0.1], np.float32)],   # zeroed entirely
                      [np.array([1.0, 1.0, 1.0], np.float32)],   # norm 1.73: kept
                      [np.array([1.5, 1.4, 0.2], np.float32)]])  # 0.2 and 1.4 zeroed
  np.testing.assert_allclose(out.result[0], [2.5, 1.0, 1.0], atol=1e-6)
  assert int(out.measurements['longitudinal_clipped_count']) == 2
  assert float(out.measurements['longitudinal_clipping_norm']) == 2.0


def test_factory_is_weighted_when_its_inner_factory_is():
  value_type = tff.types.tensorflow_to_type([tf.TensorSpec([2], tf.float32)])
  factory = aggregators.longitudinal_clipping_factory(1.0, tff.aggregators.MeanFactory())
  assert isinstance(factory, tff.aggregators.WeightedAggregationFactory)
  process = factory.create(value_type, tff.TensorType(np.float32))
  out = process.next(process.initialize(),
                     [[np.array([0.6, 0.8], np.float32)], [np.array([2.0, 0.5], np.float32)]],
                     [1.0, 3.0])
  # The second client's 2.0 alone exceeds S = 1: its update is zeroed entirely.
  np.testing.assert_allclose(out.result[0], [0.6 / 4, 0.8 / 4], atol=1e-6)


def test_bad_norm_is_named():
  with pytest.raises(ValueError, match='clipping_norm must be positive'):
    aggregators.longitudinal_clipping_factory(0.0, tff.aggregators.SumFactory())


def test_gather_rows_keeps_the_active_rows_up_to_its_cap():
  block = lambda rows, active: {'rows': np.asarray(rows, np.float32),
                                'active': np.asarray(active, bool)}
  gather = aggregators.gather_rows(cap=4, width=2, block=2)
  rows, count = gather([block([[1, 2], [3, 4]], [True, False]),
                        block([[5, 6], [7, 8]], [True, True])])
  assert int(count) == 3
  np.testing.assert_array_equal(np.asarray(rows), [[1, 2], [5, 6], [7, 8], [0, 0]])
  small = aggregators.gather_rows(cap=2, width=2, block=2)
  rows, count = small([block([[1, 2], [3, 4]], [True, True]),
                       block([[5, 6], [7, 8]], [True, False])])
  assert int(count) == 3   # the row past the cap is dropped and still counted
  np.testing.assert_array_equal(np.asarray(rows), [[1, 2], [3, 4]])
  with pytest.raises(ValueError, match='at least 1'):
    aggregators.gather_rows(cap=0, width=2)
