import numpy as np
import pytest

from tffdp.algorithms import a_dpfl_selection as sel


def test_wasserstein_against_hand_computation():
  # Global: (6, 3, 3)/12 = (.5, .25, .25).
  hist = np.array([[2, 1, 1],    # (.5, .25, .25)  -> W = 0
                   [4, 0, 0],    # (1, 0, 0)       -> 0.5 * (.5 + .25 + .25) = .5
                   [0, 2, 2]])   # (0, .5, .5)     -> 0.5 * (.5 + .25 + .25) = .5
  np.testing.assert_allclose(sel.wasserstein_distances(hist), [0.0, 0.5, 0.5])


def test_probabilities_eq12_eq13():
  w = np.array([0.0, 0.5, 0.5])
  c1 = np.sqrt((0 + 0.25 + 0.25) / 3)
  sc = np.exp(-w / c1)
  np.testing.assert_allclose(sel.selection_probabilities(w), sc / sc.sum())
  np.testing.assert_allclose(sel.selection_probabilities(np.zeros(4)), [0.25] * 4)


def test_top_k_ties_and_k_equals_n():
  p = np.array([0.1, 0.3, 0.2, 0.2, 0.2])
  # Threshold at the 2nd value (0.2) shared by clients 2, 3, 4: lowest index wins.
  np.testing.assert_array_equal(sel.select_participants(p, 2), [1, 2])
  np.testing.assert_array_equal(sel.select_participants(p, 5), [0, 1, 2, 3, 4])
  with pytest.raises(ValueError, match='k must be'):
    sel.select_participants(p, 6)
  with pytest.raises(ValueError, match='mode'):
    sel.select_participants(p, 2, mode='greedy')


def test_weighted_sample_follows_probabilities():
  p = np.array([0.7, 0.1, 0.1, 0.1])
  rng = np.random.default_rng(0)
  counts = np.zeros(4)
  for _ in range(2000):
    counts[sel.select_participants(p, 1, 'weighted_sample', rng)] += 1
  np.testing.assert_allclose(counts / 2000, p, atol=0.03)
  picks = sel.select_participants(p, 3, 'uniform', np.random.default_rng(1))
  assert len(set(picks)) == 3


@pytest.mark.parametrize('alpha,adjust_every,expected', [
    # gains: .5, .3, .005 (<= .01: decay), .095, -.005 (decay), .055
    (0.01, 1, [1.0, 1.0, 0.7, 0.7, 0.49, 0.49]),
    # checks at rounds 2, 4, 6 only: gains .8 - 0 = .8, .9 - .8 = .1, .95 - .9 = .05
    (0.01, 2, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    (0.2, 2, [1.0, 1.0, 1.0, 0.7, 0.7, 0.49]),
])
def test_noise_rule_scripted_accuracy_sequence(alpha, adjust_every, expected):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import a_dpfl  # pylint: disable=g-import-not-at-top
  sigma, prev, step = tf.constant(1.0), tf.constant(0.0), tf.constant(0)
  sigmas = []
  for acc in [0.5, 0.8, 0.805, 0.9, 0.895, 0.95]:
    sigma, prev, step = a_dpfl.noise_adjustment_step(
        sigma, prev, step, tf.constant(acc), alpha=alpha, k=0.7, adjust_every=adjust_every)
    sigmas.append(float(sigma))
  np.testing.assert_allclose(sigmas, expected, rtol=1e-6)
