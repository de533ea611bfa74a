"""cpSGD's Binomial mechanism accounting (Agarwal et al. 2018, Theorem 1).

Paper: N. Agarwal, A. T. Suresh, F. Yu, S. Kumar, H. B. McMahan, "cpSGD:
Communication-efficient and differentially-private distributed SGD", NeurIPS 2018
(arXiv 1805.10559), Theorem 1 and eqs. 7, 12, 16, 17. DP-FedAGS compares against cpSGD
(spec `dp_fedags.md`, `baselines.md`): stochastic k-level quantisation of the clipped
gradient, then Binomial noise `Bin(m, p) - m p` per coordinate (scaled by the
quantisation step `s`).

`dp_accounting` has no Binomial event: this module is the paper's own theorem.
`dp_fedags.SignificantGradientFactory(perturbation='binomial')` is the mechanism
(registered as the method `cpsgd`): `stochastic_quantize`, then `binomial_noise` with
`num_trials_tf`'s `m` per client.
"""

from __future__ import annotations

import math

import tensorflow as tf


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


def true_sensitivity_epsilon(num_trials: int, delta: float, scale: float, dim: int,
                             clip_norm: float) -> float:
  """Theorem 1 for one upload of a quantised L2-clipped vector, at its true sensitivity.

  Client-level add/remove of a vector of L2 norm `<= C` rounded to the grid of step `s`
  (worst-case rounding): `Delta_2 = C + s sqrt(d)`, `Delta_1 = sqrt(d) C + s d`,
  `Delta_inf = C`; `p = 1/2`. `inf` when `m` misses the theorem's condition.
  """
  return binomial_epsilon(int(num_trials), 0.5, delta, scale, dim,
                          math.sqrt(dim) * clip_norm + scale * dim,
                          clip_norm + scale * math.sqrt(dim), clip_norm)


def _coefficients(p: float, delta: float, dim: int, l1, l2, linf):
  """Theorem 1 as `epsilon = a / (s sqrt(v)) + b / (s v)`, `v = m p (1 - p)`."""
  a = l2 * math.sqrt(2 * math.log(1.25 / delta))
  b = ((l2 * _c(p) * math.sqrt(math.log(10 / delta)) + l1 * _b(p)) / (1 - delta / 10)
       + 2.0 / 3.0 * linf * math.log(1.25 / delta)
       + linf * _d(p) * math.log(20 * dim / delta) * math.log(10 / delta))
  return a, b


def num_trials_tf(epsilon: float, p: float, delta: float, scale: float, dim: int,
                  l1_sensitivity, l2_sensitivity, linf_sensitivity) -> tf.Tensor:
  """The smallest `m` of Theorem 1 for `epsilon`, in closed form (TF float64, per client).

  Theorem 1's epsilon is `a / (s sqrt(v)) + b / (s v)` with `v = m p (1 - p)`: a
  quadratic in `1 / sqrt(v)`, solved in float64; `m` is the ceiling, lowered by one
  when the theorem already holds there (float rounding), then raised to the theorem's
  condition `m p (1 - p) >= max(23 log(10 d / delta), 2 Delta_inf / s)`. Equals
  `smallest_num_trials` (tests).

  Args:
    epsilon: Target epsilon `> 0`.
    p, delta, scale, dim: As `binomial_epsilon`.
    l1_sensitivity, l2_sensitivity, linf_sensitivity: float64 tensors or floats (a
      client's `Delta_1, Delta_2, Delta_inf`; float32 inputs lose precision).

  Returns:
    float64 scalar tensor `m` (an integer value).
  """
  f64 = lambda v: tf.cast(v, tf.float64) if tf.is_tensor(v) else tf.constant(v, tf.float64)
  l1, l2, linf = f64(l1_sensitivity), f64(l2_sensitivity), f64(linf_sensitivity)
  a, b = _coefficients(p, delta, dim, l1, l2, linf)
  a, b = a / scale, b / scale
  eps = tf.constant(epsilon, tf.float64)
  x = 2.0 * eps / (a + tf.sqrt(a * a + 4.0 * b * eps))  # x = 1 / sqrt(v)
  q = p * (1 - p)
  m = tf.math.ceil(1.0 / (x * x) / q)
  lower = tf.maximum(m - 1.0, 1.0)
  v = lower * q
  m = tf.where(a / tf.sqrt(v) + b / v <= eps, lower, m)
  floor = tf.math.ceil(tf.maximum(2.0 * linf / scale,
                                  tf.constant(23 * math.log(10 * dim / delta), tf.float64)) / q)
  return tf.maximum(m, floor)


def stochastic_quantize(values: tf.Tensor, x_max: float, levels: int) -> tf.Tensor:
  """cpSGD's stochastic `k`-level quantisation (Agarwal et al. 2018, Sec. 4).

  The grid is `-X + i s`, `i = 0..k-1`, `s = 2 X / (k - 1)`; each value (clamped to
  `[-X, X]`) goes to one of its two neighbouring grid points with the probabilities
  that make it unbiased.

  Args:
    values: float32 tensor (any shape).
    x_max: `X > 0` (the clip bounds every coordinate: `X = C`).
    levels: `k >= 2`.

  Returns:
    float32 tensor of `values`' shape, on the grid.
  """
  step = 2.0 * x_max / (levels - 1)
  # float64: at k = 2^16 a float32 grid index keeps only 8 bits below the point
  pos = (tf.clip_by_value(tf.cast(values, tf.float64), -x_max, x_max) + x_max) / step
  low = tf.floor(pos)
  up = tf.cast(tf.random.uniform(tf.shape(values), dtype=tf.float64) < pos - low, tf.float64)
  return tf.cast(tf.minimum(low + up, levels - 1.0) * step - x_max, tf.float32)


def binomial_noise(shape, num_trials, p: float, scale: float) -> tf.Tensor:
  """`s (Bin(m, p) - m p)` per coordinate (Theorem 1's noise), float32.

  The seed of TF's stateless Binomial sampler comes from the stateful RNG.
  """
  seed = tf.random.uniform([2], maxval=2 ** 31 - 1, dtype=tf.int32)
  m = tf.cast(num_trials, tf.float64)
  draws = tf.random.stateless_binomial(shape, seed, m, tf.constant(p, tf.float64),
                                       output_dtype=tf.float64)
  return tf.cast(scale * (draws - m * p), tf.float32)
