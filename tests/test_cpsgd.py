"""cpSGD's Theorem 1 (Agarwal et al. 2018, eq. 7) against independently computed values."""

import math

import numpy as np
import pytest

from tffdp.algorithms import cpsgd


def test_theorem1_epsilon_and_smallest_trials():
  # m = 2000, p = 1/2, delta 1e-6, d = s = Delta = 1: epsilon 0.6375 (an independent
  # transcription of eq. 7 gives the same); the smallest m for epsilon 1 is 1483 at p = 1/2
  # and 1978 at p = 1/4 or 3/4.
  assert cpsgd.binomial_epsilon(2000, 0.5, 1e-6, 1, 1, 1, 1, 1) == pytest.approx(0.63751,
                                                                               abs=1e-5)
  assert cpsgd.smallest_num_trials(1.0, 0.5, 1e-6, 1, 1, 1, 1, 1) == 1483
  assert cpsgd.smallest_num_trials(1.0, 0.25, 1e-6, 1, 1, 1, 1, 1) == 1978
  assert cpsgd.smallest_num_trials(1.0, 0.75, 1e-6, 1, 1, 1, 1, 1) == 1978


def test_condition_and_monotonicity():
  # below 23 log(10 d / delta) / (p (1 - p)) trials the theorem does not apply
  m_min = math.ceil(23 * math.log(10 / 1e-6) / 0.25)
  assert cpsgd.binomial_epsilon(m_min - 1, 0.5, 1e-6, 1, 1, 1, 1, 1) == math.inf
  assert cpsgd.binomial_epsilon(m_min, 0.5, 1e-6, 1, 1, 1, 1, 1) < math.inf
  eps = [cpsgd.binomial_epsilon(m, 0.5, 1e-5, 0.1, 100, 5, 1, 0.5) for m in (10**4, 10**5, 10**6)]
  assert eps[0] > eps[1] > eps[2]
  with pytest.raises(ValueError, match='no number of trials'):
    cpsgd.smallest_num_trials(1e-9, 0.5, 1e-6, 1, 1, 1, 1, 1, limit=10**6)


@pytest.mark.parametrize('args', [
    (1.0, 0.5, 1e-6, 1.0, 1, 1.0, 1.0, 1.0),
    (0.1, 0.5, 1e-3, 2.0 / 65535, 1_663_370, 1.6, 1.24e-3, 1.24e-3),   # m ~ 1e8
    (0.3, 0.5, 1e-4, 1e-6, 10_000, 0.3, 3e-3, 3e-3),                   # m ~ 1e12
    (0.5, 0.5, 1e-3, 2.0 / 65535, 1_600_000, 0.42, 3.3e-4, 3.3e-4),
    (0.1, 0.5, 1e-3, 2.0 / 1023, 10_000, 1.0, 0.01, 0.01),
    (2.0, 0.5, 1e-5, 0.5, 100, 10.0, 1.0, 1.0)])
def test_closed_form_trials_match_the_bisection(args):
  eps, p, delta, scale, dim, l1, l2, linf = args
  want = cpsgd.smallest_num_trials(eps, p, delta, scale, dim, l1, l2, linf, limit=10**15)
  got = float(cpsgd.num_trials_tf(eps, p, delta, scale, dim, l1, l2, linf))
  assert got == want
  assert cpsgd.binomial_epsilon(int(got), p, delta, scale, dim, l1, l2, linf) <= eps


def test_quantiser_is_unbiased_and_on_the_grid():
  import tensorflow as tf
  levels, x_max = 5, 1.0                      # grid -1, -0.5, 0, 0.5, 1
  x = np.array([-1.0, -0.8, -0.1, 0.0, 0.3, 0.74, 1.0, 2.0], np.float32)
  draws = np.stack([cpsgd.stochastic_quantize(tf.constant(x), x_max, levels).numpy()
                    for _ in range(4000)])
  grid = np.linspace(-1, 1, levels)
  assert np.all(np.isclose(draws[..., None], grid, atol=1e-6).any(-1))
  # unbiased inside [-X, X] (each draw's spread is at most s / 2 = 0.25)
  np.testing.assert_allclose(draws.mean(0), np.clip(x, -1, 1), atol=5 * 0.25 / math.sqrt(4000))
  assert set(np.unique(draws[:, 4]).round(6)) == {0.0, 0.5}   # neighbours of 0.3 only


def test_binomial_noise_scale():
  import tensorflow as tf
  z = cpsgd.binomial_noise([200_000], tf.constant(1e6), 0.5, 0.01).numpy()
  assert z.std() == pytest.approx(0.01 * math.sqrt(1e6 / 4), rel=0.01)
  assert abs(z.mean()) < 5 * 0.01 * 500 / math.sqrt(200_000)
