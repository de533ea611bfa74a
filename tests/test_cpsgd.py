"""cpSGD's Theorem 1 (Agarwal et al. 2018, eq. 7) against independently computed values."""

import math

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
