"""cpSGD's Binomial mechanism accounting (Agarwal et al. 2018, Theorem 1).

Paper: N. Agarwal, A. T. Suresh, F. Yu, S. Kumar, H. B. McMahan, "cpSGD:
Communication-efficient and differentially-private distributed SGD", NeurIPS 2018
(arXiv 1805.10559), Theorem 1 and eqs. 7, 12, 16, 17. DP-FedAGS compares against cpSGD
(spec `dp_fedags.md`, `baselines.md`): stochastic k-level quantisation of the clipped
gradient, then Binomial noise `Bin(m, p) - m p` per coordinate (scaled by the
quantisation step `s`).

`dp_accounting` has no Binomial event: this module is the paper's own theorem. The
mechanism that uses it is not built yet (issue 14).
"""

from __future__ import annotations

import math


def _b(p: float) -> float:   # eq. 17
  return 2.0 / 3.0 * (p ** 2 + (1 - p) ** 2) + 1 - 2 * p


def _c(p: float) -> float:   # eq. 12
  return math.sqrt(2.0) * (3 * p ** 3 + 3 * (1 - p) ** 3 + 2 * p ** 2 + 2 * (1 - p) ** 2)


def _d(p: float) -> float:   # eq. 16
  return 4.0 / 3.0 * (p ** 2 + (1 - p) ** 2)


def binomial_epsilon(num_trials: int, p: float, delta: float, scale: float, dim: int,
                     l1_sensitivity: float, l2_sensitivity: float,
                     linf_sensitivity: float) -> float:
  """Theorem 1 (eq. 7): the epsilon of adding `scale * (Bin(m, p) - m p)` per coordinate.

  Valid when `m p (1 - p) >= max(23 log(10 d / delta), 2 Delta_inf / s)`
  (`binomial_condition_holds`); `inf` otherwise.

  Args:
    num_trials: `m` (the paper's `N`), Bernoulli trials per coordinate (summed over the
      clients whose noise adds up).
    p: Success probability in `(0, 1)`.
    delta: Target delta in `(0, 1)`.
    scale: `s`, the quantisation step (the noise is `s (Bin(m, p) - m p)`).
    dim: `d`, coordinates.
    l1_sensitivity, l2_sensitivity, linf_sensitivity: `Delta_1, Delta_2, Delta_inf` of the
      released sum (in the units of the data, before dividing by `s`).

  Returns:
    epsilon (float).
  """
  if not binomial_condition_holds(num_trials, p, delta, scale, dim, linf_sensitivity):
    return math.inf
  v = num_trials * p * (1 - p)
  first = l2_sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / (scale * math.sqrt(v))
  second = ((l2_sensitivity * _c(p) * math.sqrt(math.log(10 / delta)) + l1_sensitivity * _b(p))
            / (scale * v * (1 - delta / 10)))
  third = ((2.0 / 3.0 * linf_sensitivity * math.log(1.25 / delta)
            + linf_sensitivity * _d(p) * math.log(20 * dim / delta) * math.log(10 / delta))
           / (scale * v))
  return first + second + third


def binomial_condition_holds(num_trials: int, p: float, delta: float, scale: float, dim: int,
                             linf_sensitivity: float) -> bool:
  """Theorem 1's condition `m p (1 - p) >= max(23 log(10 d / delta), 2 Delta_inf / s)`."""
  return num_trials * p * (1 - p) >= max(23 * math.log(10 * dim / delta),
                                         2 * linf_sensitivity / scale)


def smallest_num_trials(epsilon: float, p: float, delta: float, scale: float, dim: int,
                        l1_sensitivity: float, l2_sensitivity: float,
                        linf_sensitivity: float, limit: int = 10 ** 12) -> int:
  """The smallest `m` whose Theorem 1 epsilon is at most `epsilon` (bisection).

  Raises:
    ValueError: If no `m <= limit` reaches `epsilon`.
  """
  ok = lambda m: binomial_epsilon(m, p, delta, scale, dim, l1_sensitivity, l2_sensitivity,
                                  linf_sensitivity) <= epsilon
  if not ok(limit):
    raise ValueError(f'no number of trials up to {limit} reaches epsilon {epsilon}.')
  lo, hi = 0, limit   # not ok(lo) (epsilon inf at m = 0), ok(hi)
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (lo, mid) if ok(mid) else (mid, hi)
  return hi
