"""Client-level canaries (`tffdp.canaries`): a canary's update goes through the method's
own aggregator exactly like a real client's (clipped to S, summed, noised, divided by K)."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from tffdp import canaries, models, seeds
from tffdp.algorithms import baselines, common
from tffdp.data import FederatedData
from tffdp.data.federated import ShuffleBatch

SHAPE = (28, 28, 1)


def _dp_fedavg_with_canaries(tmp_path, sigma, clip, norm, cohort=4.0):
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (40, *SHAPE), dtype=np.uint8),
                       rng.integers(0, 10, 40), [np.arange(i * 10, i * 10 + 10)
                                                 for i in range(4)],
                       cache_dir=str(tmp_path))
  builder = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)
  work = baselines.client_work(builder, data, learning_rate=0.5, dp_sgd='none')
  factory = baselines.seeded_gaussian_fixed(sigma, cohort, clip, seeds.server_noise_seed(0))
  process = common.compose_fedavg_style(builder, canaries.with_canaries(work, norm, seed=7),
                                        factory, seed=0)
  batching = ShuffleBatch(10, 1)
  round_fn = canaries.cohort_round_computation(process,
                                               data.client_data_computation(batching))
  return process, round_fn


def _delta(process, round_fn, ids, canary):
  state = process.initialize()
  before = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  out = round_fn(state, [str(i) for i in ids], [np.array([1, i], np.int64) for i in ids],
                 [np.int32(c) for c in canary])
  after = [np.asarray(w) for w in process.get_model_weights(out.state).trainable]
  return np.concatenate([(b - a).ravel() for a, b in zip(after, before)])  # initial - final


def test_a_canary_is_clipped_summed_and_divided_like_a_real_update(tmp_path):
  clip, norm, k = 0.05, 3.0, 4.0
  process, round_fn = _dp_fedavg_with_canaries(tmp_path, 0.0, clip, norm, k)
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 3, shapes)
  assert np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-5)
  real = _delta(process, round_fn, [0, 1], [-1, -1])
  # Client 0's data trains canary 2 too, and is discarded: what reaches the aggregator is
  # norm * u_2, clipped to S like any update, in the sum divided by K.
  both = _delta(process, round_fn, [0, 1, 0], [-1, -1, 2])
  np.testing.assert_allclose(both - real, clip * u[2] / k, atol=1e-6)
  alone = _delta(process, round_fn, [0], [1])
  np.testing.assert_allclose(alone, clip * u[1] / k, atol=1e-6)
  with pytest.raises(ValueError, match='norm'):
    canaries.with_canaries(None, 0.0, 1)


def test_a_canary_round_is_noised_like_any_round(tmp_path):
  sigma, clip, k = 0.05, 0.05, 4.0
  process, round_fn = _dp_fedavg_with_canaries(tmp_path, sigma, clip, 1.0, k)
  delta = _delta(process, round_fn, [0], [0])
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 1, shapes)[0]
  noise = delta - clip * u / k
  assert np.std(noise) == pytest.approx(sigma * clip / k, rel=0.05)  # 7,850 coordinates
  # The auditor's statistic: the canary's cosine with the released delta, about
  # 1 / sqrt(1 + sigma^2 d) = 0.22 here, far above the N(0, 1/d) null (sd 0.011) of a
  # direction that was not inserted.
  other = canaries.canary_directions(8, 1, shapes)[0]
  cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
  assert cos(delta, u) > 5 / np.sqrt(u.size) > abs(cos(delta, other))
