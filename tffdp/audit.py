"""Empirical privacy auditing: lower bounds and estimates of epsilon from canary scores.

The statistics of issue 40's audit, independent of how the canaries are inserted (the
notation of `../shared/notes/auditing.md`). A canary is *included* (it took part in the
run) or *left out*; the auditor gives every canary a *score* (e.g. the cosine between a
canary client's update direction and the released model delta), higher meaning "more
likely included", computed only from what the threat model lets the auditor see.

- `hypothesis_test_lower_bound`: the hypothesis-testing bound of Kairouz, Oh and
  Viswanath 2015 (Thm. 2.1: an (eps, delta)-DP mechanism has FPR + e^eps FNR >= 1 - delta
  and FNR + e^eps FPR >= 1 - delta for every test), as used by Jagielski, Ullman and Oprea
  2020 and Nasr et al. 2021: rates from included and left-out canaries (which may come
  from many runs), one-sided Clopper-Pearson upper bounds, maximised over thresholds with
  a Bonferroni split of `alpha` over every threshold and both rates, so the result is a
  lower bound on epsilon that holds with probability at least `1 - alpha`.
- `one_run_lower_bound`: Steinke, Nasr and Jagielski 2023 (NeurIPS, "Privacy Auditing
  with One (1) Training Run", Thm. 5.2 / Alg. 1): `m` canaries each included with
  probability 1/2 in one run; the auditor guesses "included" for the `k_plus` highest
  scores and "left out" for the `k_minus` lowest; with `r` guesses and `v` correct, an
  (eps, delta)-DP mechanism gives `P[V >= v] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v] +
  2 m delta max_{i=1..v} P[v - i <= Binomial(r, .) < v] / i`; the bound is the largest
  eps this rejects at level `alpha`.
- `one_shot_estimate`: Andrew, Kairouz, Oh, Oprea, McMahan and Suriyakumar 2024 (ICLR,
  "One-shot Empirical Privacy Estimation for Federated Learning", Sec. 3): the included
  canaries' cosines fitted by `N(mu, s^2)` against the closed-form null `N(0, 1/d)` of a
  random unit direction in `R^d`; the estimate is the epsilon at `delta` between the two
  Gaussians (`two_gaussian_epsilon`, the exact privacy curve). An estimate, not a bound.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
from scipy import stats


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
  """One-sided `1 - alpha` Clopper-Pearson upper confidence bound of a rate `k / n`."""
  if n <= 0:
    return 1.0
  if k >= n:
    return 1.0
  return float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def jeffreys_upper(k: int, n: int, alpha: float) -> float:
  """One-sided `1 - alpha` Jeffreys upper bound: the `1 - alpha` quantile of
  `Beta(k + 1/2, n - k + 1/2)` (the interval Andrew et al. use for their classical bound)."""
  if n <= 0:
    return 1.0
  return float(stats.beta.ppf(1.0 - alpha, k + 0.5, n - k + 0.5))


def hypothesis_test_lower_bound(scores_in: Sequence[float], scores_out: Sequence[float],
                                delta: float, alpha: float = 0.05,
                                interval: str = 'clopper_pearson',
                                thresholds: Optional[Sequence[float]] = None) -> float:
  """A `1 - alpha` lower bound on epsilon from included and left-out canaries' scores.

  The test "included iff score >= t" at each threshold `t` (default: every distinct score)
  has rates FPR = #{out >= t} / n_out and FNR = #{in < t} / n_in; both are replaced by
  one-sided upper bounds at level `alpha / (2 T)` for `T` thresholds (Bonferroni), and
  `max(log((1 - delta - FNR) / FPR), log((1 - delta - FPR) / FNR))` is maximised over `t`
  (Kairouz et al. 2015, Thm. 2.1).

  Args:
    scores_in: Scores of the included canaries (float, any shape, flattened).
    scores_out: Scores of the left-out canaries.
    delta: The mechanism's delta (`0 <= delta < 1`).
    alpha: `1 -` the confidence.
    interval: `clopper_pearson` (exact, the rigorous default) or `jeffreys`.
    thresholds: Candidate thresholds; must be fixed before the scores are seen for the
      bound to hold (the default, every distinct score, is accounted for by Bonferroni).

  Returns:
    The lower bound (`>= 0`; 0 where no threshold separates the scores).

  Raises:
    ValueError: On empty scores, `delta` outside `[0, 1)`, `alpha` outside `(0, 1)` or an
      unknown `interval`.
  """
  s_in = np.asarray(scores_in, np.float64).ravel()
  s_out = np.asarray(scores_out, np.float64).ravel()
  if not s_in.size or not s_out.size:
    raise ValueError('need included and left-out canaries.')
  if not 0 <= delta < 1 or not 0 < alpha < 1:
    raise ValueError(f'need 0 <= delta < 1 and 0 < alpha < 1. Found {delta}, {alpha}.')
  if interval not in ('clopper_pearson', 'jeffreys'):
    raise ValueError(f'interval must be clopper_pearson or jeffreys. Found {interval!r}.')
  ts = np.unique(np.concatenate([s_in, s_out])) if thresholds is None else np.asarray(
      thresholds, np.float64)
  level = alpha / (2 * len(ts))
  s_in, s_out = np.sort(s_in), np.sort(s_out)
  false_neg = np.searchsorted(s_in, ts, side='left')  # included canaries scored below t
  false_pos = s_out.size - np.searchsorted(s_out, ts, side='left')
  fnr = _upper_bounds(false_neg, s_in.size, level, interval)
  fpr = _upper_bounds(false_pos, s_out.size, level, interval)
  with np.errstate(divide='ignore', invalid='ignore'):
    one = np.where((fpr > 0) & (1 - delta - fnr > 0), np.log((1 - delta - fnr) / fpr), 0.0)
    two = np.where((fnr > 0) & (1 - delta - fpr > 0), np.log((1 - delta - fpr) / fnr), 0.0)
  return float(max(0.0, np.max(one), np.max(two)))


def _upper_bounds(k: np.ndarray, n: int, alpha: float, interval: str) -> np.ndarray:
  """`clopper_pearson_upper` / `jeffreys_upper` of each count in `k`, vectorised."""
  k = np.asarray(k, np.float64)
  if interval == 'jeffreys':
    return stats.beta.ppf(1.0 - alpha, k + 0.5, n - k + 0.5)
  return np.where(k >= n, 1.0, stats.beta.ppf(1.0 - alpha, k + 1, np.maximum(n - k, 1)))


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
  """Steinke et al. 2023, Thm. 5.2: an upper bound on `P[V >= v]` for an (epsilon,
  delta)-DP mechanism, `m` canaries, `r` guesses."""
  if not 0 <= v <= r <= m:
    raise ValueError(f'need 0 <= v <= r <= m. Found v={v}, r={r}, m={m}.')
  q = 1.0 / (1.0 + math.exp(-epsilon))
  tail = float(stats.binom.sf(v - 1, r, q))
  if v == 0 or delta == 0:
    return min(1.0, tail)
  i = np.arange(1, v + 1)
  below = np.cumsum(stats.binom.pmf(v - i, r, q))  # P[v - i <= Binomial < v], i = 1..v
  return min(1.0, tail + 2.0 * m * delta * float(np.max(below / i)))


def one_run_lower_bound(scores: Sequence[float], included: Sequence[bool], delta: float,
                        k_plus: int, k_minus: int, alpha: float = 0.05) -> float:
  """Steinke et al. 2023's one-run lower bound on epsilon at confidence `1 - alpha`.

  Args:
    scores: One score per canary `[m]`.
    included: Whether each canary was included `[m]` (each independently with
      probability 1/2, drawn before the run).
    delta: The mechanism's delta.
    k_plus: Guesses "included" for this many highest scores (fixed before the scores
      are seen).
    k_minus: Guesses "left out" for this many lowest scores.
    alpha: `1 -` the confidence.

  Returns:
    The largest epsilon (to 1e-6) that the observed correct guesses reject (`>= 0`).

  Raises:
    ValueError: On mismatched lengths or `k_plus + k_minus > m`.
  """
  s = np.asarray(scores, np.float64).ravel()
  inc = np.asarray(included, bool).ravel()
  m = s.size
  if inc.size != m or k_plus < 0 or k_minus < 0 or k_plus + k_minus > m:
    raise ValueError(f'need one inclusion per score and k_plus + k_minus <= m = {m}. '
                     f'Found {inc.size}, {k_plus}, {k_minus}.')
  order = np.argsort(s, kind='stable')
  correct = int(np.sum(~inc[order[:k_minus]])) + int(np.sum(inc[order[m - k_plus:]]))
  r = k_plus + k_minus
  if one_run_p_value(m, r, correct, 0.0, delta) >= alpha:
    return 0.0
  lo, hi = 0.0, 1.0
  while one_run_p_value(m, r, correct, hi, delta) < alpha:
    lo, hi = hi, 2 * hi
    if hi > 200:
      return lo
  while hi - lo > 1e-6:
    mid = (lo + hi) / 2
    if one_run_p_value(m, r, correct, mid, delta) < alpha:
      lo = mid
    else:
      hi = mid
  return lo


def _delta_at(epsilon: float, mu_p: float, s_p: float, mu_q: float, s_q: float) -> float:
  """`sup_S P(S) - e^epsilon Q(S)` for `P = N(mu_p, s_p^2)`, `Q = N(mu_q, s_q^2)`: `S` is
  the set where the privacy loss `log p/q` exceeds epsilon (a quadratic in x)."""
  a = 1.0 / (2 * s_q ** 2) - 1.0 / (2 * s_p ** 2)
  b = mu_p / s_p ** 2 - mu_q / s_q ** 2
  c = (mu_q ** 2 / (2 * s_q ** 2) - mu_p ** 2 / (2 * s_p ** 2) + math.log(s_q / s_p)
       - epsilon)
  def mass(lo, hi, mu, s):
    # Upper tails by the survival function: `1 - cdf` loses far tails (large epsilon).
    if hi == math.inf:
      return float(stats.norm.sf(lo, mu, s))
    if lo == -math.inf:
      return float(stats.norm.cdf(hi, mu, s))
    return float(stats.norm.cdf(hi, mu, s) - stats.norm.cdf(lo, mu, s))
  if abs(a) < 1e-12 * max(abs(b), 1e-300):
    if b == 0:
      return 0.0 if c <= 0 else 1.0 - math.exp(epsilon)
    t = -c / b
    lo, hi = (t, math.inf) if b > 0 else (-math.inf, t)
    intervals = [(lo, hi)]
  else:
    disc = b * b - 4 * a * c
    if disc <= 0:
      intervals = [(-math.inf, math.inf)] if a > 0 else []
    else:
      r1, r2 = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
      intervals = [(-math.inf, r1), (r2, math.inf)] if a > 0 else [(r1, r2)]
  p = sum(mass(lo, hi, mu_p, s_p) for lo, hi in intervals)
  q = sum(mass(lo, hi, mu_q, s_q) for lo, hi in intervals)
  return max(0.0, p - math.exp(epsilon) * q)


def two_gaussian_epsilon(mu_p: float, s_p: float, mu_q: float, s_q: float,
                         delta: float) -> float:
  """The smallest epsilon for which `N(mu_p, s_p^2)` and `N(mu_q, s_q^2)` are (epsilon,
  delta)-indistinguishable, both ways (the exact privacy curve; bisection to 1e-6)."""
  if s_p <= 0 or s_q <= 0:
    raise ValueError(f'standard deviations must be positive. Found {s_p}, {s_q}.')
  both = lambda e: max(_delta_at(e, mu_p, s_p, mu_q, s_q), _delta_at(e, mu_q, s_q, mu_p, s_p))
  if both(0.0) <= delta:
    return 0.0
  lo, hi = 0.0, 1.0
  while both(hi) > delta:
    lo, hi = hi, 2 * hi
    if hi > 500:
      return math.inf
  while hi - lo > 1e-6:
    mid = (lo + hi) / 2
    if both(mid) > delta:
      lo = mid
    else:
      hi = mid
  return hi


def one_shot_estimate(cosines_in: Sequence[float], dimension: int, delta: float) -> dict:
  """Andrew et al. 2024's one-shot epsilon estimate from the included canaries' cosines.

  Args:
    cosines_in: Cosine between each included canary's direction and the released delta
      (`[n]`, `n >= 2`).
    dimension: `d`, the number of model parameters (the null is `N(0, 1/d)`).
    delta: The delta of the estimate.

  Returns:
    `{'epsilon': float, 'mean': mu, 'std': s, 'null_std': 1 / sqrt(d)}`.

  Raises:
    ValueError: With fewer than two cosines or `dimension < 1`.
  """
  c = np.asarray(cosines_in, np.float64).ravel()
  if c.size < 2 or dimension < 1:
    raise ValueError(f'need two or more cosines and dimension >= 1. Found {c.size}, '
                     f'{dimension}.')
  mu, s = float(np.mean(c)), float(np.std(c, ddof=1))
  null = 1.0 / math.sqrt(dimension)
  eps = two_gaussian_epsilon(mu, max(s, 1e-12), 0.0, null, delta)
  return dict(epsilon=eps, mean=mu, std=s, null_std=null)
