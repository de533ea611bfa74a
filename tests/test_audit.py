"""Audit statistics (`tffdp.audit`): soundness against the analytic epsilon of a Gaussian
mechanism, power against a planted bug, and the one-shot estimate's exact curve."""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import optimize, stats

from tffdp import audit


def _pld_epsilon(sigma, delta):
  """Exact epsilon of one Gaussian mechanism (sensitivity 1, noise sigma) by PLD."""
  acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
  acc.compose(dp_accounting.GaussianDpEvent(sigma))
  return acc.get_epsilon(delta)


@pytest.mark.parametrize('sigma', [0.7, 1.0, 2.0])
def test_two_gaussian_epsilon_is_the_gaussian_mechanism_s_exact_epsilon(sigma):
  delta = 1e-5
  ours = audit.two_gaussian_epsilon(1.0, sigma, 0.0, sigma, delta)
  assert ours == pytest.approx(_pld_epsilon(sigma, delta), rel=2e-3)
  # Symmetric, and scale-free.
  assert audit.two_gaussian_epsilon(0.0, sigma, 1.0, sigma, delta) == pytest.approx(ours,
                                                                                 rel=1e-6)
  assert audit.two_gaussian_epsilon(3.0, 3 * sigma, 0.0, 3 * sigma, delta) == pytest.approx(
      ours, rel=1e-6)
  assert audit.two_gaussian_epsilon(0.0, 1.0, 0.0, 1.0, delta) == 0.0


@pytest.mark.parametrize('mu', [0.5, 2.0, 6.0, 10.0])
def test_two_gaussian_epsilon_matches_the_closed_form_far_in_the_tails(mu):
  # N(mu, 1) vs N(0, 1): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)
  # (Balle and Wang 2018, Thm. 8), solved independently in log space.
  delta = 1e-5
  def log_gap(eps):
    a = stats.norm.logcdf(mu / 2 - eps / mu)
    b = eps + stats.norm.logcdf(-mu / 2 - eps / mu)
    return a + math.log1p(-math.exp(b - a)) - math.log(delta)
  exact = optimize.brentq(log_gap, 0.0, 200.0)
  assert audit.two_gaussian_epsilon(mu, 1.0, 0.0, 1.0, delta) == pytest.approx(exact,
                                                                             rel=1e-4)


def test_two_gaussians_of_different_spread_are_distinguishable_without_a_shift():
  # N(0, 1) vs N(0, 2^2): the curve is not zero, and it grows as delta shrinks.
  assert 0 < audit.two_gaussian_epsilon(0.0, 2.0, 0.0, 1.0, 1e-3) < \
      audit.two_gaussian_epsilon(0.0, 2.0, 0.0, 1.0, 1e-6)


def test_one_shot_estimate_recovers_the_gaussian_mechanism_from_its_cosines():
  # Andrew et al.'s setting in one dimension of the statistic: included canaries' cosines
  # N(mu, 1/d) against the null N(0, 1/d) is a Gaussian mechanism of multiplier
  # 1 / (mu sqrt(d)).
  d, sigma, delta = 10_000, 1.5, 1e-5
  rng = np.random.default_rng(0)
  mu = 1.0 / (sigma * math.sqrt(d))
  cosines = rng.normal(mu, 1.0 / math.sqrt(d), 5000)
  est = audit.one_shot_estimate(cosines, d, delta)
  assert est['null_std'] == pytest.approx(0.01)
  assert est['epsilon'] == pytest.approx(_pld_epsilon(sigma, delta), rel=0.1)
  with pytest.raises(ValueError):
    audit.one_shot_estimate([0.1], d, delta)


def test_clopper_pearson_and_jeffreys_bounds():
  # Zero of 100: CP upper bound 1 - alpha^(1/n); Jeffreys is smaller (0.019 at 95%).
  assert audit.clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** 0.01,
                                                                    rel=1e-9)
  assert audit.jeffreys_upper(0, 100, 0.05) == pytest.approx(0.0191, abs=5e-4)
  assert audit.clopper_pearson_upper(100, 100, 0.05) == 1.0


def _gaussian_scores(rng, sigma, n):
  """Scores of a Gaussian mechanism (sensitivity 1, noise sigma): N(1, sigma^2) when the
  canary is in, N(0, sigma^2) when it is out."""
  return rng.normal(1.0, sigma, n), rng.normal(0.0, sigma, n)


def test_hypothesis_test_bound_is_sound_and_catches_a_planted_bug():
  sigma, delta, n = 1.0, 1e-5, 2000
  exact = _pld_epsilon(sigma, delta)
  bounds = []
  for seed in range(20):
    rng = np.random.default_rng(seed)
    s_in, s_out = _gaussian_scores(rng, sigma, n)
    bounds.append(audit.hypothesis_test_lower_bound(s_in, s_out, delta))
  # Sound: at 95% confidence at most about 1 in 20 may exceed; here none comes close.
  assert max(bounds) <= exact and np.mean(bounds) > 0.5  # and not vacuous
  # The planted bug: noise multiplied by 0.1 (sigma 0.1) while the guarantee says 1.0.
  s_in, s_out = _gaussian_scores(np.random.default_rng(0), 0.1 * sigma, n)
  caught = audit.hypothesis_test_lower_bound(s_in, s_out, delta)
  assert caught > exact
  # With n left-out canaries the bound cannot exceed about log(n) (noise off: perfect).
  perfect = audit.hypothesis_test_lower_bound(np.ones(100), np.zeros(100), 0.0)
  assert 3.0 < perfect < math.log(100)
  assert audit.hypothesis_test_lower_bound(np.ones(100), np.zeros(100), 0.0,
                                           interval='jeffreys') > perfect
  with pytest.raises(ValueError, match='interval'):
    audit.hypothesis_test_lower_bound([1.0], [0.0], 0.0, interval='wald')


def test_one_run_p_value_is_the_binomial_tail_at_delta_zero_and_grows_with_delta():
  m, r, v = 1000, 200, 150
  for eps in (0.0, 0.5, 1.0):
    q = math.exp(eps) / (1 + math.exp(eps))
    assert audit.one_run_p_value(m, r, v, eps, 0.0) == pytest.approx(
        stats.binom.sf(v - 1, r, q), rel=1e-12)
  assert audit.one_run_p_value(m, r, v, 1.0, 1e-5) > audit.one_run_p_value(m, r, v, 1.0, 0)


def test_one_run_bound_matches_an_independent_root_at_delta_zero_and_is_sound():
  rng = np.random.default_rng(1)
  m = 1000
  included = rng.random(m) < 0.5
  scores = np.where(included, 1.0, 0.0) + rng.normal(0, 0.5, m)
  bound = audit.one_run_lower_bound(scores, included, 0.0, k_plus=100, k_minus=100)
  order = np.argsort(scores)
  v = int(np.sum(~included[order[:100]]) + np.sum(included[order[-100:]]))
  root = optimize.brentq(lambda e: stats.binom.sf(v - 1, 200, 1 / (1 + math.exp(-e)))
                         - 0.05, 0.0, 20.0)
  assert bound == pytest.approx(root, abs=1e-5)
  # Sound on randomized response with epsilon 1 (each guess right w.p. e / (1 + e)): the
  # bound exceeds 1 in at most about alpha of the runs.
  over = 0
  for seed in range(60):
    rng = np.random.default_rng(100 + seed)
    included = rng.random(m) < 0.5
    flip = rng.random(m) < 1 / (1 + math.e)
    scores = np.where(included ^ flip, 1.0, 0.0) + rng.random(m) * 1e-3
    over += audit.one_run_lower_bound(scores, included, 1e-6, 250, 250) > 1.0
  assert over <= 6
  with pytest.raises(ValueError):
    audit.one_run_lower_bound(scores, included, 0.0, k_plus=600, k_minus=600)
