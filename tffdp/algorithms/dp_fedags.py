"""DP-FedAGS: sparse-vector selection of significant coordinates, loss-weighted aggregation.

Paper: "DP-FedAGS" (`../shared/papers/004_fd8e6656ad8e147a.txt`, eqs. 1-3, 35, 37,
Algorithm 1, Sec. V); spec `dp_fedags.md`, whose Amendments override its body. Round `t`:

1. each of the `k` sampled clients runs `E` local epochs of minibatch SGD (lr `eta`,
   batch `B`) from `W_t`, accumulating `g = sum_i g_i` (so `eta g` is the model delta)
   and its mean training loss `L_k`; it uploads `<g, L_k, n_k>`;
2. `SignificantGradientFactory` perturbs each upload (the paper runs this in
   `clientTrain`; the factory applies it to each client's value before any sum):
   clip `g' = g / max(1, ||g|| / C)`; the threshold `lambda_t` of eq. 35; the sparse-vector
   test per coordinate `|g'_j| + alpha_j >= lambda_t + beta` (`alpha_j ~
   Lap(Delta_S / epsilon_1)` fresh per coordinate, `beta ~ Lap(Delta_S / epsilon_2)` once
   per client and round); significant coordinates get `N(0, sigma^2 C^2)` with eq. 2's
   `sigma = (Delta_S / epsilon) sqrt(2 ln(1.25 / zeta))`, `zeta = e^{-epsilon}` (Alg. 1
   line 26; `perturbation='laplace'`: `Lap(Delta_S / epsilon_3)`, the mechanism Theorems
   1-2 analyse); the others are uploaded unperturbed (`perturb_all=True` noises every
   coordinate);
3. `LossWeightedMeanFactory` averages with eq. 37's `gamma_k = (n_k L + n L_k) / (2 n L)`
   (`L = sum L_k`, `n = sum n_k`; `weighting='size'`: `n_k / n`); eq. 37 gives more weight
   to the clients with the higher loss, contrary to the text (Amendment 4);
4. `W_{t+1} = W_t - eta g` (`tff.learning.optimizers.build_sgdm(eta)`).

`Delta_S` (Amendment 1): `delta_s='scaled'` (default, tffdp's reading) `2 eta C / n_k`,
the sensitivity of a clipped gradient sum scaled by `eta / n_k`; `delta_s='clip'`: `C`
(the paper's "global sensitivity", with which eq. 2's noise buries every gradient).
`delta_s_scale` (`kappa`, default 1) multiplies the `scaled` reading, `Delta_S = kappa 2
eta C / n_k`: the calibration knob between the two readings (`kappa = n_k / (2 eta)` is
`C`), and `kappa = 0` is the clip-only control (no noise, no SVT noise).

Privacy (client-level): `epsilon_claimed` is the paper's `epsilon` (Theorem 2, per round;
the paper does not compose over rounds): every client is charged one epsilon-DP release
before the first round (basic composition, so the report is exactly `epsilon`).
`epsilon_guaranteed` is
`inf` unless `perturb_all` and `weighting='size'` (the loss `L_k` is uploaded in the
clear and sets the weights, and unperturbed coordinates are released exactly; Amendment
3); then each participation is the Gaussian mechanism with noise multiplier `sigma`
relative to sensitivity `C` (add/remove), or the Laplace one on L1 sensitivity
`sqrt(|W|) C` (the clip bounds the L2 norm), composed over the rounds the client took
part in (no amplification by the uniform cohort: a valid upper bound).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, privacy
from tffdp.algorithms import common, cpsgd, dp_sgd, registry
from tffdp.data.federated import FederatedData, ShuffleBatch

PERTURBATIONS = ('gaussian', 'laplace', 'binomial')
SELECTIONS = ('svt', 'top', 'all')
DELTA_S_MODES = ('scaled', 'clip')
WEIGHTINGS = ('loss', 'size')
LOSS_REASON = ('the clients\' training losses L_k are uploaded in the clear and set the '
               'aggregation weights (eq. 37)')
UNPERTURBED_REASON = ('coordinates the sparse-vector test does not select are uploaded '
                      'without noise')
BINOMIAL_REASON = ('cpSGD\'s Theorem 1 (Agarwal et al. 2018) gives each upload an (epsilon, '
                   'delta) pair, which the RDP ledger cannot compose (dp_accounting has no '
                   'Binomial event); the per-upload value at the true sensitivity is in the '
                   'config notes')
NO_NOISE_REASON = 'delta_s_scale = 0: the clip-only control adds no noise'
TOP_REASON = ('the top coordinates of |g\'| are chosen without noise and the others '
              'uploaded without noise (DP-FedSNLC as reconstructed)')


# ----- eqs. 2, 35, 37 -----------------------------------------------------------------

def eq2_noise_multiplier(sensitivity, epsilon: float):
  """Eq. 2: `sigma = (Delta_S / epsilon) sqrt(2 ln(1.25 / zeta))`, `zeta = e^{-epsilon}`.

  `sensitivity` may be a float or a float32 tensor; `epsilon > 0`.
  """
  return sensitivity / epsilon * math.sqrt(2.0 * (math.log(1.25) + epsilon))


def kth_smallest(abs_values: tf.Tensor, rank) -> tf.Tensor:
  """The `rank`-th smallest entry (1-indexed) of a non-negative float32 vector.

  Exact, without a sort: non-negative float32 values order like their int32 bit
  patterns, so a bisection over the patterns (31 passes of a count) finds the smallest
  pattern with at least `rank` entries at or below it. On the 1.6M coordinates of the
  McMahan CNN it takes a fraction of `tf.sort`'s time.

  Args:
    abs_values: float32 `[n]`, every entry `>= 0` (NaN is not allowed).
    rank: int32 in `[1, n]`.

  Returns:
    float32 scalar.
  """
  bits = tf.bitcast(abs_values, tf.int32)
  rank = tf.cast(rank, tf.int32)

  def body(lo, hi):
    mid = lo + (hi - lo) // 2
    enough = tf.reduce_sum(tf.cast(bits <= mid, tf.int32)) >= rank
    return tf.where(enough, lo, mid + 1), tf.where(enough, mid, hi)

  lo, _ = tf.while_loop(lambda lo, hi: lo < hi, body,
                        (tf.reduce_min(bits), tf.reduce_max(bits)))
  return tf.bitcast(lo, tf.float32)


def significance_threshold(abs_values: tf.Tensor, round_num, rounds: int) -> tf.Tensor:
  """Eq. 35: `min(sort(|g'|)[ceil(t |W| / T)], sort(|g'|)[ceil(9 |W| / 10)])`.

  Ascending order, 1-indexed ranks (the index is capped at `|W|`), found by
  `kth_smallest` (exact, no sort). The paper's text says the threshold shrinks over
  training; the formula grows it with `t` up to the 90th percentile. The formula is
  implemented.

  Args:
    abs_values: float32 `[|W|]`, the magnitudes `|g'|`.
    round_num: int32 `t >= 1`.
    rounds: `T`.

  Returns:
    float32 scalar `lambda_t`.
  """
  w = tf.shape(abs_values)[0]
  wf = tf.cast(w, tf.float64)
  rank_t = tf.cast(tf.math.ceil(tf.cast(round_num, tf.float64) * wf / float(rounds)), tf.int32)
  rank_90 = tf.cast(tf.math.ceil(9.0 * wf / 10.0), tf.int32)
  return kth_smallest(abs_values, tf.clip_by_value(tf.minimum(rank_t, rank_90), 1, w))


def loss_weights(num_examples, losses, weighting: str = 'loss'):
  """Eq. 37: `gamma_k = (n_k L + n L_k) / (2 n L)` (`weighting='size'`: `n_k / n`).

  Args:
    num_examples: float `[k]` `n_k`.
    losses: float `[k]` `L_k` (positive).
    weighting: `loss` (eq. 37) or `size`.

  Returns:
    float `[k]` weights summing to 1.
  """
  n = tf.reduce_sum(num_examples)
  if weighting == 'size':
    return num_examples / n
  total = tf.reduce_sum(losses)
  return (num_examples * total + n * losses) / (2.0 * n * total)


# ----- aggregation factories ----------------------------------------------------------

class LossWeightedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Eq. 37's loss-weighted mean of `<update, loss, num_examples>` client values.

  With `gamma_k = n_k / (2 n) + L_k / (2 L)` the mean is `sum_k n_k u_k / (2 n) + sum_k
  L_k u_k / (2 L)`: four sums over the clients, none of which needs another's result, so
  the round compiles to TFF's mergeable form and runs on remote workers (`--workers`).
  The per-client weights of the measurements come from the clients' `(n_k, L_k)` pairs,
  gathered on the server (at most `max_clients` of them a round). Any method's updates
  can be averaged this way (the value needs only a loss and a size). `weighting='size'` is
  FedAvg's `n_k / n` and never reads the losses (`loss_sum` is 0). The sizes `n_k` are
  treated as public. Measurements: `<weight_min, weight_max, loss_sum, num_examples>`.

  Args:
    weighting: `loss` (eq. 37) or `size`.
    max_clients: The most clients a round may have (the cohort's bound; a round with more
      fails with `InvalidArgumentError` rather than report wrong weights).

  Raises:
    ValueError: On an unknown `weighting` or `max_clients < 1`.
  """

  def __init__(self, weighting: str = 'loss', max_clients: int = 1000):
    if weighting not in WEIGHTINGS:
      raise ValueError(f'weighting must be one of {", ".join(WEIGHTINGS)}. '
                       f'Found {weighting!r}.')
    if max_clients < 1:
      raise ValueError(f'max_clients must be at least 1. Found {max_clients!r}.')
    self._weighting = weighting
    self._max_clients = max_clients

  def create(self, value_type) -> tff.templates.AggregationProcess:
    weighting, cap = self._weighting, self._max_clients
    update_type = value_type.update
    pairs = _pairs_aggregation(cap)

    @tff.federated_computation
    def init_fn():
      return tff.federated_value((), tff.SERVER)

    @tff.tensorflow.computation(value_type)
    def scaled(value):
      n_k, l_k = value['num_examples'], value['loss']
      parts = collections.OrderedDict(
          by_size=tf.nest.map_structure(lambda u: u * n_k, value['update']))
      if weighting == 'size':   # the losses stay on the clients
        l_k = tf.zeros_like(l_k)
      else:
        parts['by_loss'] = tf.nest.map_structure(lambda u: u * l_k, value['update'])
      parts.update(loss=l_k, pair=tf.stack([n_k, l_k]))
      return parts

    def weight_range(gathered):
      rows, count = gathered
      with tf.control_dependencies([tf.debugging.assert_less_equal(
          count, cap, message='more clients than max_clients')]):
        count = tf.identity(count)   # the check runs before the weights are read
      gamma = loss_weights(rows[:count, 0], rows[:count, 1], weighting)
      return tf.reduce_min(gamma), tf.reduce_max(gamma)

    gathered_type = pairs.type_signature.result.member

    @tff.tensorflow.computation(update_type, np.float32, gathered_type)
    def size_mean(by_size, n_total, gathered):
      result = tf.nest.map_structure(lambda s: s / n_total, by_size)
      return (result,) + weight_range(gathered)

    @tff.tensorflow.computation(update_type, update_type, np.float32, np.float32,
                                gathered_type)
    def loss_mean(by_size, by_loss, n_total, loss_total, gathered):
      result = tf.nest.map_structure(
          lambda s, l: s / (2.0 * n_total) + l / (2.0 * loss_total), by_size, by_loss)
      return (result,) + weight_range(gathered)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      parts = tff.federated_map(scaled, value)
      loss_total = tff.federated_sum(parts.loss)
      n_total = tff.federated_sum(value.num_examples)
      by_size = tff.federated_sum(parts.by_size)
      if weighting == 'size':
        result, weight_min, weight_max = tff.federated_map(
            size_mean, (by_size, n_total, pairs(parts.pair)))
      else:
        result, weight_min, weight_max = tff.federated_map(loss_mean, (
            by_size, tff.federated_sum(parts.by_loss), n_total, loss_total,
            pairs(parts.pair)))
      measured = tff.federated_zip(collections.OrderedDict(
          weight_min=weight_min, weight_max=weight_max, loss_sum=loss_total,
          num_examples=n_total))
      return tff.templates.MeasuredProcessOutput(state=state, result=result,
                                                 measurements=measured)

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _pairs_aggregation(cap: int) -> tff.Computation:
  """`pairs@CLIENTS -> <rows float32 [cap, 2], count int32>@SERVER`: the clients' float32
  `[2]` values gathered in the first `count` rows (`aggregators.gather_rows`, one row a
  client)."""
  pair_type = tff.TensorType(np.float32, [2])
  gather = aggregators.gather_rows(cap, 2)

  @tff.tensorflow.computation(pair_type)
  def as_block(pair):
    return collections.OrderedDict(rows=tf.reshape(pair, [1, 2]),
                                   active=tf.constant([True]))

  @tff.federated_computation(tff.FederatedType(pair_type, tff.CLIENTS))
  def gather_pairs(values):
    return gather(tff.federated_map(as_block, values))
  return gather_pairs


class SignificantGradientFactory(tff.aggregators.UnweightedAggregationFactory):
  """DP-FedAGS's perturbation of each client's gradient (Alg. 1 lines 21-29, eqs. 1-2, 35).

  Values are `<update=g, loss=L_k, num_examples=n_k>`; the perturbed `<g_k, L_k, n_k>`
  go to `inner` (default `LossWeightedMeanFactory()`). The state is the round counter
  `t` (int32@SERVER, broadcast for eq. 35's threshold).

  Args:
    clip_norm: `C > 0` (the global L2 clip of `g`).
    epsilon: The per-round budget `epsilon` (eq. 2's sigma and `zeta`).
    epsilon_1, epsilon_2, epsilon_3: The split (SVT test noise, SVT threshold noise,
      Laplace perturbation), each `> 0`.
    rounds: `T` of eq. 35.
    delta_s: `scaled` (`Delta_S = 2 eta C / n_k`, Amendment 1) or `clip` (`C`).
    learning_rate: `eta` of `scaled`.
    delta_s_scale: `kappa >= 0` multiplying `scaled`'s `Delta_S` (0: no noise at all).
    perturbation: `gaussian` (Alg. 1 line 26, std `sigma C`), `laplace`
      (`Lap(Delta_S / epsilon_3)`) or `binomial` (cpSGD, Agarwal et al. 2018: `g'`
      quantised stochastically to `quantization_levels` levels on `[-C, C]`, step
      `s = 2 C / (k - 1)`, plus `s (Bin(m, 1/2) - m / 2)` per coordinate, `m` the smallest
      of their Theorem 1 for `(epsilon, delta)` with `Delta_2 = Delta_inf = Delta_S`,
      `Delta_1 = sqrt(|W|) Delta_S`: Amendment 1's reading, as for the Gaussian; the
      rounding's own effect on the sensitivity is left out, as that reading leaves out
      the clip's). Use with `selection='all'`.
    perturb_all: Noise every coordinate (the SVT still runs and is measured).
    selection: `svt` (DP-FedAGS), `top` (the `top_fraction` largest `|g'_j|`, chosen
      without noise: DP-FedSNLC as reconstructed) or `all` (every coordinate, no SVT:
      DP-FedAvg as DP-FedAGS's paper runs it, reconstructed).
    top_fraction: The fraction `omega` of `top` (`baselines.md`: 10%).
    delta: The delta of `binomial`'s Theorem 1.
    quantization_levels: `k >= 2` of `binomial`.
    inner: Unweighted factory of `<update, loss, num_examples>`.
    max_clients: With it, the factory states each client's DP event (`dp_event` below)
      for up to this many clients a round; None: no `dp_event` measurement.

  Measurements: `<significant_fraction (mean over clients), threshold (mean lambda_t),
  threshold_max, max_abs_gradient (largest |g'_j|), noise_std (mean per-coordinate std),
  clipped (clients whose ||g|| > C), mean_abs_gradient (mean |g'_j|), num_trials (mean
  `m` of `binomial`, else 0), round>` and `inner`. With `max_clients`, also
  `dp_event=<rows float32 [max_clients, 2], count int32>`: one row `(n_k, z_k)` per client
  of the round (the first `count` rows), `z_k` computed in the computation that draws the
  client's noise: the Gaussian's std over the clipped vector's L2 sensitivity `C` (a noise
  multiplier), or the Laplace scale over its L1 sensitivity `sqrt(|W|) C`.
  `executed_events` reads them as `dp_accounting` events.

  Raises:
    ValueError: On an invalid argument.
  """

  def __init__(self, clip_norm: float, epsilon: float, epsilon_1: float, epsilon_2: float,
               epsilon_3: float, rounds: int, *, delta_s: str = 'scaled',
               delta_s_scale: float = 1.0, learning_rate: float = 0.1,
               perturbation: str = 'gaussian',
               perturb_all: bool = False, selection: str = 'svt', top_fraction: float = 0.1,
               delta: float = 1e-3, quantization_levels: int = 2 ** 16,
               inner: Optional[tff.aggregators.UnweightedAggregationFactory] = None,
               max_clients: Optional[int] = None):
    for name, v in (('clip_norm', clip_norm), ('epsilon', epsilon), ('epsilon_1', epsilon_1),
                    ('epsilon_2', epsilon_2), ('epsilon_3', epsilon_3),
                    ('learning_rate', learning_rate), ('rounds', rounds)):
      if not v > 0:
        raise ValueError(f'{name} must be positive. Found {name}={v!r}.')
    if delta_s not in DELTA_S_MODES:
      raise ValueError(f'delta_s must be one of {", ".join(DELTA_S_MODES)}. Found {delta_s!r}.')
    _check_delta_s_scale(delta_s, delta_s_scale)
    if selection not in SELECTIONS:
      raise ValueError(f'selection must be one of {", ".join(SELECTIONS)}. '
                       f'Found {selection!r}.')
    if not 0 < top_fraction <= 1:
      raise ValueError(f'top_fraction must be in (0, 1]. Found {top_fraction!r}.')
    if perturbation not in PERTURBATIONS:
      raise ValueError(f'perturbation must be one of {", ".join(PERTURBATIONS)}. '
                       f'Found {perturbation!r}.')
    if perturbation == 'binomial' and int(quantization_levels) < 2:
      raise ValueError('quantization_levels must be at least 2. Found '
                       f'{quantization_levels!r}.')
    if perturbation == 'binomial' and selection != 'all':
      raise ValueError('perturbation=binomial (cpSGD) quantises and noises every '
                       f'coordinate: selection must be all. Found selection={selection!r}.')
    privacy.check_delta(delta)
    if max_clients is not None and int(max_clients) < 1:
      raise ValueError(f'max_clients must be at least 1. Found {max_clients!r}.')
    self._max_clients = None if max_clients is None else int(max_clients)
    self._kw = dict(clip_norm=float(clip_norm), epsilon=float(epsilon),
                    epsilon_1=float(epsilon_1), epsilon_2=float(epsilon_2),
                    epsilon_3=float(epsilon_3), rounds=int(rounds), delta_s=delta_s,
                    delta_s_scale=float(delta_s_scale),
                    learning_rate=float(learning_rate), perturbation=perturbation,
                    perturb_all=bool(perturb_all), selection=selection,
                    top_fraction=float(top_fraction), delta=float(delta),
                    quantization_levels=int(quantization_levels))
    self._inner = inner or LossWeightedMeanFactory()

  def no_guarantee(self) -> Optional[str]:
    """Why the factory's release has no finite DP guarantee whatever its noise (None: it
    has one where the noise is positive)."""
    kw = self._kw
    if kw['perturbation'] == 'binomial':
      return BINOMIAL_REASON
    if kw['selection'] == 'top' and not kw['perturb_all']:
      return TOP_REASON
    if kw['selection'] == 'svt' and not kw['perturb_all']:
      return UNPERTURBED_REASON
    return None

  def executed_events(self, measurements
                      ) -> list[tuple[float, Optional[dp_accounting.DpEvent], str]]:
    """One `(n_k, event, reason)` per client of a round, from its `significant_gradient`
    measurements: `GaussianDpEvent(z_k)` or `LaplaceDpEvent(z_k)` with `''`, or `None` and
    the reason no finite guarantee holds (the binomial's, coordinates released without
    noise, no noise, a non-finite parameter).

    Raises:
      ValueError: If the factory has no `max_clients` (no events stated), or the round
        had more clients than it.
    """
    if self._max_clients is None:
      raise ValueError('SignificantGradientFactory states DP events only with max_clients.')
    if int(measurements['dp_event'][1]) > self._max_clients:
      raise ValueError(f'the round had {int(measurements["dp_event"][1])} clients, more '
                       f'than the max_clients={self._max_clients} whose events the factory '
                       'states.')
    structural = self.no_guarantee()
    out = []
    for n_k, z in aggregators.gathered_rows(measurements['dp_event']):
      if structural is not None:
        out.append((n_k, None, structural))
      elif not np.isfinite(z):
        out.append((n_k, None, f'the noise parameter is {z}: not finite, no guarantee'))
      elif z == 0:
        out.append((n_k, None, NO_NOISE_REASON))
      elif self._kw['perturbation'] == 'gaussian':
        out.append((n_k, dp_accounting.GaussianDpEvent(float(z)), ''))
      else:
        out.append((n_k, dp_accounting.LaplaceDpEvent(float(z)), ''))
    return out

  def create(self, value_type) -> tff.templates.AggregationProcess:
    kw = self._kw
    inner = self._inner.create(value_type)
    c, eps = kw['clip_norm'], kw['epsilon']
    cap = self._max_clients
    gather = None if cap is None else _pairs_aggregation(cap)

    @tff.federated_computation
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          round=tff.federated_value(np.int32(0), tff.SERVER), inner=inner.initialize()))

    @tff.tensorflow.computation(value_type, np.int32)
    def perturb(value, round_num):
      leaves = tf.nest.flatten(value['update'])
      flat = tf.concat([tf.reshape(v, [-1]) for v in leaves], 0)
      norm = tf.norm(flat)
      clipped = flat / tf.maximum(1.0, norm / c)
      def delta_s(dtype):   # Amendment 1's `kappa 2 eta C / n_k`, or `C`
        if kw['delta_s'] == 'scaled':
          return (kw['delta_s_scale'] * 2.0 * kw['learning_rate'] * c
                  / tf.cast(value['num_examples'], dtype))
        return tf.constant(c, dtype)
      ds = delta_s(tf.float32)
      magnitude = tf.abs(clipped)
      size = tf.shape(flat)
      if kw['selection'] == 'svt':
        lam = significance_threshold(magnitude, round_num, kw['rounds'])
        alpha = aggregators.laplace_noise(size, ds / kw['epsilon_1'])
        beta = aggregators.laplace_noise([1], ds / kw['epsilon_2'])[0]
        significant = magnitude + alpha >= lam + beta
      elif kw['selection'] == 'top':
        count = int(math.ceil(kw['top_fraction'] * int(flat.shape[0])))
        lam = kth_smallest(magnitude, int(flat.shape[0]) - count + 1)  # count-th largest
        significant = magnitude >= lam
      else:
        lam = tf.constant(0.0)
        significant = tf.ones_like(flat, tf.bool)
      num_trials = tf.constant(0.0, tf.float64)   # binomial only
      dim = int(flat.shape[0])
      if kw['perturbation'] == 'gaussian':
        std = eq2_noise_multiplier(ds, eps) * c
        noise = tf.random.normal(size) * std
        per_sensitivity = std / c   # L2 sensitivity C of the clipped g'
      elif kw['perturbation'] == 'binomial':
        step = 2.0 * c / (kw['quantization_levels'] - 1)
        clipped = cpsgd.stochastic_quantize(clipped, c, kw['quantization_levels'])
        ds64 = delta_s(tf.float64)
        num_trials = cpsgd.num_trials_tf(eps, 0.5, kw['delta'], step, dim,
                                         math.sqrt(dim) * ds64, ds64, ds64)
        std = step * tf.sqrt(num_trials / 4.0)
        noise = cpsgd.binomial_noise(size, num_trials, 0.5, step)
        per_sensitivity = tf.constant(0.0)   # no guarantee stated (`no_guarantee`)
      else:
        std = math.sqrt(2.0) * ds / kw['epsilon_3']
        noise = aggregators.laplace_noise(size, ds / kw['epsilon_3'])
        per_sensitivity = ds / kw['epsilon_3'] / (math.sqrt(dim) * c)   # L1: sqrt(|W|) C
      mask = tf.ones_like(flat) if kw['perturb_all'] else tf.cast(significant, tf.float32)
      out_flat = clipped + noise * mask
      out, start = [], 0
      for v in leaves:
        n = int(np.prod(v.shape))
        out.append(tf.reshape(out_flat[start:start + n], tf.shape(v)))
        start += n
      new_value = collections.OrderedDict(
          update=tf.nest.pack_sequence_as(value['update'], out), loss=value['loss'],
          num_examples=value['num_examples'])
      stats = collections.OrderedDict(
          significant_fraction=tf.reduce_mean(tf.cast(significant, tf.float32)),
          threshold=lam, noise_std=tf.cast(std, tf.float32),
          clipped=tf.cast(norm > c, tf.int32), mean_abs_gradient=tf.reduce_mean(magnitude),
          max_abs_gradient=tf.reduce_max(magnitude),
          num_trials=num_trials,
          event_row=tf.stack([tf.cast(value['num_examples'], tf.float32),
                              tf.cast(per_sensitivity, tf.float32)]))
      return new_value, stats

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      round_num = tff.federated_map(_increment, state.round)
      perturbed, stats = tff.federated_map(
          perturb, (value, tff.federated_broadcast(round_num)))
      out = inner.next(state.inner, perturbed)
      measured = collections.OrderedDict(
          significant_fraction=tff.federated_mean(stats.significant_fraction),
          threshold=tff.federated_mean(stats.threshold),
          threshold_max=tff.federated_max(stats.threshold),
          max_abs_gradient=tff.federated_max(stats.max_abs_gradient),
          noise_std=tff.federated_mean(stats.noise_std),
          clipped=tff.federated_sum(stats.clipped),
          mean_abs_gradient=tff.federated_mean(stats.mean_abs_gradient),
          num_trials=tff.federated_mean(stats.num_trials),
          round=round_num)
      if gather is not None:
        measured['dp_event'] = gather(stats.event_row)
      measured = tff.federated_zip(measured)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(collections.OrderedDict(round=round_num, inner=out.state)),
          result=out.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              significant_gradient=measured, inner=out.measurements)))

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _check_delta_s_scale(delta_s: str, scale: float, perturbation: str = 'gaussian') -> None:
  if not (scale >= 0 and math.isfinite(scale)):
    raise ValueError(f'delta_s_scale must be finite and >= 0. Found {scale!r}.')
  if delta_s != 'scaled' and scale != 1:
    raise ValueError(f'delta_s_scale scales delta_s=scaled only. Found delta_s={delta_s!r} '
                     f'with delta_s_scale={scale!r}.')
  if perturbation == 'binomial' and scale == 0:
    raise ValueError('delta_s_scale = 0 (no noise) has no cpSGD: Theorem 1\'s m needs a '
                     'positive sensitivity. Run the clip-only control as dp_fedavg_ags.')


@tff.tensorflow.computation(np.int32)
def _increment(t):
  return t + 1


# ----- the learning process -----------------------------------------------------------

def gradient_client_work(keras_builder, data: FederatedData, *, learning_rate: float,
                         local_epochs: int, batching: Optional[ShuffleBatch] = None,
                         clients_per_slice: Optional[int] = None
                         ) -> tff.learning.templates.ClientWorkProcess:
  """Alg. 1 `clientTrain` before the perturbation: `E` epochs of minibatch SGD.

  Each client's result is `<update=g = (W_t - W_k) / eta, loss=L_k (mean training loss),
  num_examples=n_k>` with weight `E n_k`; measurements `train=<loss_sum, num_examples,
  num_steps>` summed over clients.

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' data.
    learning_rate: `eta`.
    local_epochs: `E`.
    batching: The clients' `ShuffleBatch`; needed with `clients_per_slice`.
    clients_per_slice: None: each client's data is a `tf.data` pipeline
      (`data.client_data_type`); 1: each TFF client value is a cohort slice of one client
      (`dp_sgd.slice_input_type(1)`), its batches read by index tensors
      (`FederatedData.client_batch_indices`): the same batches and results, without a
      `tf.data` pipeline per client (`benchmarks.run --only per_client`).

  Raises:
    ValueError: If `clients_per_slice` is other than None or 1, or set without `batching`.
  """
  common.check_one_client_per_slice('dp_fedags', clients_per_slice)
  if clients_per_slice and batching is None:
    raise ValueError('clients_per_slice needs the clients\' batching.')
  weights_type = common.weights_type_of(keras_builder)
  # dp_sgd's own state and client-work plumbing, without DP-SGD (dp_sgd='none').
  init_fn = dp_sgd._initial_state(  # pylint: disable=protected-access
      'none', learning_rate, 0.0, 1.0)
  state_type = init_fn.type_signature.result.member
  data_type = (dp_sgd.slice_input_type(1) if clients_per_slice else
               data.client_data_type)

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def client_fn(state, weights, client_data):
    del state
    client_update = dp_sgd.build_client_update(keras_builder, learning_rate, 'none')
    if clients_per_slice:  # one client, never padding: its id and seed
      inputs = client_data.get_single_element()
      seed = inputs['seeds'][0]
      examples = data.client_batch_indices(inputs['client_ids'][0], seed, batching)
      update, weight, metrics = client_update.indexed(list(weights.trainable), *examples,
                                                      seed, 0.0, 1.0)
    else:
      seed = client_data['seed'].get_single_element()
      update, weight, metrics = client_update(list(weights.trainable),
                                              client_data['batches'], seed, 0.0, 1.0)
    value = collections.OrderedDict(
        update=[u / learning_rate for u in update],
        loss=metrics['loss_sum'] / tf.maximum(tf.cast(metrics['num_examples'], tf.float32), 1.0),
        num_examples=weight / float(local_epochs))
    return tff.learning.templates.ClientResult(update=value, update_weight=weight), metrics

  return dp_sgd._client_work_process(  # pylint: disable=protected-access
      init_fn, weights_type, data_type, client_fn)


def method_options(method: str, hp: Optional['BaselineHparams']) -> tuple['BaselineHparams', dict]:
  """`(hp, options)`: a method's hyperparameters (None: its class's defaults) and what its
  mechanism runs with: `MECHANISMS[method]` (the coordinate selection, weights, cpSGD's
  perturbation), overridden by its options of the same name; an option it does not have
  keeps its class default (recorded, never read) and `epsilon_split` is
  `(epsilon_1, epsilon_2, epsilon_3) / epsilon`.

  Raises:
    ValueError: On an unknown method.
    TypeError: If `hp` is not an instance of `HPARAMS[method]`.
  """
  hp = registry.hparams_of(method, hp, HPARAMS)
  options = dict(perturbation=DPFedAGSHparams.perturbation,
                 perturb_all=DPFedAGSHparams.perturb_all,
                 top_fraction=SNLCHparams.top_fraction,
                 quantization_levels=CPSGDHparams.quantization_levels)
  options.update(MECHANISMS[method])
  options.update({k: getattr(hp, k) for k in options if hasattr(hp, k)})
  f1 = getattr(hp, 'epsilon_1_fraction', DPFedAGSHparams.epsilon_1_fraction)
  f2 = getattr(hp, 'epsilon_2_fraction', DPFedAGSHparams.epsilon_2_fraction)
  options['epsilon_split'] = (f1, f2, 1.0 - f1 - f2)
  return hp, options


def build_dp_fedags(keras_builder, data: FederatedData, *, rounds: int,
                    method: str = 'dp_fedags', hp: Optional['BaselineHparams'] = None,
                    clip_norm: float = 1.0, learning_rate: float = 0.1, batch_size: int = 128,
                    local_epochs: int = 1, clients_per_round: int = 10,
                    delta: float = 1e-3, seed: int = 0,
                    clients_per_slice: Optional[int] = None) -> common.Method:
  """Builds DP-FedAGS or one of its reconstructed baselines (see the module docstring).

  The method fixes the mechanism (`MECHANISMS`: the coordinate selection, perturbation
  and aggregation weights); its options come from `hp`.

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' data.
    rounds: `T` (Sec. V-A: 200 MNIST / CIFAR-10).
    method: `dp_fedags`, `dp_fedsnlc`, `dp_fedavg_ags` or `cpsgd` (`HPARAMS`).
    hp: The method's own options, an instance of `HPARAMS[method]` (validated on
      creation; None takes their defaults): the per-round budget `epsilon` (Sec. V-A:
      0.1, 0.2, 0.5), the sensitivity reading `delta_s` (`scaled`: `2 eta C / n_k`,
      Amendment 1; `clip`: `C`) and its scale `delta_s_scale` `kappa` (0: the clip-only
      control, no noise); DP-FedAGS's `epsilon_1_fraction`, `epsilon_2_fraction` (Sec.
      IV-A gives only `epsilon_3 >> epsilon_1 + epsilon_2`: 5/5/90%), `perturbation`,
      `perturb_all` and `weighting`; DP-FedSNLC's `top_fraction`; cpSGD's
      `quantization_levels`.
    clip_norm: `C` (Sec. V-A: 1).
    learning_rate: `eta` of the local SGD and of the server step (Sec. V-A: 0.1).
    batch_size: `B` (Sec. V-A: 128).
    local_epochs: `E` (not given: 1).
    clients_per_round: `k` (Sec. V-A: 10).
    delta: The delta of the guaranteed ledger (Sec. V-A: 0.001).
    seed: Model-initialisation seed.
    clients_per_slice: None or 1 (`gradient_client_work`: each client's batches read by
      index tensors; the same results).

  Returns:
    A `common.Method`.

  Raises:
    ValueError: On an unknown method or invalid hyperparameters, or
      `clients_per_slice` other than None or 1.
    TypeError: If `hp` is not an instance of `HPARAMS[method]`.
  """
  hp, options = method_options(method, hp)
  common.check_one_client_per_slice(method, clients_per_slice)
  selection, weighting, perturbation, perturb_all, top_fraction, quantization_levels = (
      options[k] for k in ('selection', 'weighting', 'perturbation', 'perturb_all',
                           'top_fraction', 'quantization_levels'))
  epsilon, epsilon_split = hp.epsilon, options['epsilon_split']
  delta_s, delta_s_scale, name = hp.delta_s, hp.delta_s_scale, method
  privacy.check_delta(delta)
  _check_delta_s_scale(delta_s, delta_s_scale, perturbation)
  e1, e2, e3 = (epsilon * s for s in epsilon_split)
  batching = ShuffleBatch(batch_size, local_epochs)
  factory = SignificantGradientFactory(
      clip_norm, epsilon, e1, e2, e3, rounds, delta_s=delta_s, delta_s_scale=delta_s_scale,
      learning_rate=learning_rate,
      perturbation=perturbation, perturb_all=perturb_all, selection=selection,
      top_fraction=top_fraction, delta=delta, quantization_levels=quantization_levels,
      inner=LossWeightedMeanFactory(weighting, max_clients=data.num_clients),
      max_clients=data.num_clients)
  process, num_params = gradient_process(keras_builder, data, factory,
                                         learning_rate=learning_rate,
                                         local_epochs=local_epochs, seed=seed,
                                         batching=batching,
                                         clients_per_slice=clients_per_slice)
  run_round, round_computation = common.cohort_round(process, data, batching,
                                                     clients_per_slice)
  ledgers = DPFedAGSLedgers(
      np.asarray(data.client_sizes, np.float64), epsilon, e3, clip_norm, learning_rate,
      local_epochs, delta_s, delta_s_scale, perturbation, perturb_all, selection,
      weighting, num_params, factory)
  binomial_hparams, binomial_notes = {}, {}
  if perturbation == 'binomial':
    binomial_hparams, binomial_notes = _binomial_summary(
        ledgers.sensitivity(np.arange(data.num_clients)), epsilon, delta, clip_norm,
        quantization_levels, num_params)
  return common.Method(
      name=name, process=process, batching=batching, dp_unit=privacy.CLIENT_LEVEL,
      cohort_sampling='uniform', run_round=run_round, round_computation=round_computation,
      clients_per_slice=clients_per_slice,
      accounting=common.Accounting(
          ledgers.claimed, ledgers.guaranteed, ledgers.executed, ledgers.check_round,
          ledger='basic_claimed', claimed_conversion=privacy.DP_ACCOUNTING_CONVERSION),
      adaptive_quantities=lambda state: {}, round_metrics=round_metrics,
      hyperparameters=dict(
          rounds=rounds, epsilon=epsilon, epsilon_1=e1, epsilon_2=e2, epsilon_3=e3,
          clip_norm=clip_norm, learning_rate=learning_rate, batch_size=batch_size,
          local_epochs=local_epochs, delta_s=delta_s, delta_s_scale=delta_s_scale,
          perturbation=perturbation,
          perturb_all=perturb_all, weighting=weighting, clients_per_round=clients_per_round,
          selection=selection, top_fraction=top_fraction,
          eq2_noise_multiplier_clip=eq2_noise_multiplier(clip_norm, epsilon),
          **binomial_hparams),
      notes=dict(ledgers.notes(), **binomial_notes))


def gradient_process(keras_builder, data: FederatedData,
                     factory: tff.aggregators.UnweightedAggregationFactory, *,
                     learning_rate: float, local_epochs: int, seed: int,
                     batching: Optional[ShuffleBatch] = None,
                     clients_per_slice: Optional[int] = None
                     ) -> tuple[tff.learning.templates.LearningProcess, int]:
  """Alg. 1 as a TFF learning process: the clients' `<g, L_k, n_k>`
  (`gradient_client_work`, with its `batching` and `clients_per_slice`; an audit's
  canary clients upload `norm * u_j`, `canaries.wrap_client_work`), aggregated by
  `factory` (weighted by its own eq.-37 weights, not TFF's `E n_k`), applied by the
  server's SGD step at `learning_rate`.

  Returns:
    `(process, |W|)`: the process and the number of trainable parameters.
  """
  client_work = canaries.wrap_client_work(gradient_client_work(
      keras_builder, data, learning_rate=learning_rate, local_epochs=local_epochs,
      batching=batching, clients_per_slice=clients_per_slice))
  init = common.initial_weights_computation(keras_builder, seed)
  weights_type = init.type_signature.result
  value_type = client_work.next.type_signature.result.result.member.update
  aggregator = tff.aggregators.factory_utils.as_weighted_aggregator(factory).create(
      value_type, tff.TensorType(np.float32))  # the weights are eq. 37's, not E n_k
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(learning_rate=learning_rate), weights_type)
  process = tff.learning.templates.compose_learning_process(
      init, tff.learning.templates.build_broadcast_process(weights_type), client_work,
      aggregator, finalizer)
  return process, int(sum(np.prod(t.shape) for t in weights_type.trainable))


@dataclasses.dataclass(frozen=True)
class DPFedAGSLedgers:
  """DP-FedAGS's releases in both ledgers: declared before a round, and executed as
  `SignificantGradientFactory` states them after it.

  Attributes:
    sizes: float64 `[N]` client sizes `n_k`.
    num_params: `|W|`.
    noise: The factory that draws the noise (built with `max_clients`).
    The others: as `build_dp_fedags` (`epsilon_3` the Laplace share).
  """
  sizes: np.ndarray
  epsilon: float
  epsilon_3: float
  clip_norm: float
  learning_rate: float
  local_epochs: int
  delta_s: str
  delta_s_scale: float
  perturbation: str
  perturb_all: bool
  selection: str
  weighting: str
  num_params: int
  noise: Optional[SignificantGradientFactory] = None

  def sensitivity(self, clients) -> np.ndarray:
    """`Delta_S` per client, float64 `[len(clients)]` (a canary client: that of the data
    it runs on)."""
    clients = canaries.data_clients(clients, len(self.sizes))
    if self.delta_s == 'scaled':
      return self.delta_s_scale * 2.0 * self.learning_rate * self.clip_norm / self.sizes[clients]
    return np.full(len(clients), self.clip_norm)

  def claimed(self, cohort, state) -> common.Releases:
    """Theorem 2: the run is epsilon-DP (per round; the paper does not compose): every
    client is charged one epsilon-DP release before the first round, nothing after."""
    del cohort
    if int(state.aggregator['round']) == 0:
      return [(np.arange(len(self.sizes)), dp_accounting.LaplaceDpEvent(1.0 / self.epsilon),
               '')]
    return []

  def no_guarantee(self) -> Optional[str]:
    """Why no finite guarantee holds for this configuration (None: one holds)."""
    if self.perturbation == 'binomial':
      return BINOMIAL_REASON
    if self.selection == 'top' and not self.perturb_all:
      return TOP_REASON
    if self.selection == 'svt' and not self.perturb_all:
      return UNPERTURBED_REASON
    if self.weighting == 'loss':
      return LOSS_REASON
    if self.delta_s_scale == 0:
      return NO_NOISE_REASON
    return None

  def guaranteed(self, cohort, state) -> common.Releases:
    """Per participation: the Gaussian (std `sigma C` on sensitivity `C`) or the Laplace
    (L1 sensitivity `sqrt(|W|) C` of an L2-clipped vector) release, unamplified."""
    del state
    reason = self.no_guarantee()
    if reason is not None:
      return [(cohort, None, reason)]
    out = []
    ds = self.sensitivity(cohort)
    for value in np.unique(ds):
      members = cohort[ds == value]
      if self.perturbation == 'gaussian':
        z = float(eq2_noise_multiplier(value, self.epsilon))   # std sigma C on sensitivity C
        out.append((members, dp_accounting.GaussianDpEvent(z), ''))
      else:
        out.append((members, dp_accounting.LaplaceDpEvent(
            float(value / self.epsilon_3 / (math.sqrt(self.num_params) * self.clip_norm))),
                    ''))
    return out

  def executed(self, cohort, state, metrics) -> common.Releases:
    """The round's guaranteed releases from the events the factory states
    (`SignificantGradientFactory.executed_events`: one per client, with its `n_k`): the
    cohort's clients sorted by size are matched to the stated events sorted by `n_k`
    (the clients are not named inside the round; clients of one size draw alike). Eq.
    37's loss weights leave no guarantee whatever the noise (`LOSS_REASON`, after the
    factory's own reasons, as in `no_guarantee`)."""
    del state
    stated = self.noise.executed_events(metrics['aggregator']['significant_gradient'])

    def release_of(j, client):
      del client
      _, event, reason = stated[j]
      if self.weighting == 'loss' and (event is not None or reason == NO_NOISE_REASON):
        return None, LOSS_REASON   # the order of `no_guarantee`
      return event, reason
    data_clients = canaries.data_clients(cohort, len(self.sizes))
    return common.releases_from_rows(cohort, self.sizes[data_clients],
                                     [n for n, _, _ in stated], release_of)

  def check_round(self, cohort, state, metrics) -> Optional[str]:
    """The round counted and the clients' examples (the noise is checked by the runner:
    `executed`)."""
    del state
    sig = metrics['aggregator']['significant_gradient']
    train = metrics['client_work']['train']
    data_clients = canaries.data_clients(cohort, len(self.sizes))
    examples = int(np.sum(self.sizes[data_clients]))
    if int(train['num_examples']) != self.local_epochs * examples:
      return (f'the clients processed {int(train["num_examples"])} examples, not '
              f'{self.local_epochs} epochs of their {examples}')
    if int(sig['round']) < 1:
      return 'the aggregator did not count the round'
    return None

  def notes(self) -> dict:
    """The config notes of the method (`Method.notes`)."""
    not_given = 'not given in the paper; chosen because '
    if self.delta_s != 'scaled':
      delta_s = 'Delta_S = C (the paper)'
    elif self.delta_s_scale == 1:
      delta_s = ('Amendment 1, tffdp\'s reading: 2 eta C / n_k (with C eq. 2\'s noise '
                 'buries every gradient)')
    elif self.delta_s_scale:
      delta_s = (f'{self.delta_s_scale:g} x 2 eta C / n_k (the calibrated sensitivity of '
                 'fidelity pass 2)')
    else:
      delta_s = 'kappa = 0: the clip-only control, no noise'
    reason = self.no_guarantee()
    if reason is None or reason == NO_NOISE_REASON:
      guaranteed = ('per participation the Gaussian (noise multiplier eq. 2 sigma on '
                    'sensitivity C, add/remove) or Laplace release, no amplification by '
                    'the uniform cohort')
    else:
      guaranteed = 'inf: ' + reason
    return dict(
        local_epochs=not_given + 'one pass is the FedAvg default (Amendment: E not given)',
        epsilon_split=not_given + 'Sec. IV-A asks epsilon_3 >> epsilon_1 + epsilon_2 and '
        'epsilon_1 : epsilon_2 = q^(2/3) : 1 with q undefined: 5% / 5% / 90%',
        delta_s=delta_s,
        epsilon_claimed='the paper\'s epsilon (Theorem 2, per round; the paper does not '
        'compose over rounds): one epsilon-DP release per client. With delta_s=scaled the '
        'noise std is sigma C with sigma from Delta_S = 2 eta C / n_k, while the noised '
        'vector g\' has sensitivity C: "epsilon" is then only the paper\'s label (the '
        'guaranteed ledger states what the noise gives)',
        guaranteed_scope='with perturb_all (or selection=all) and size weights: the '
        'Gaussian (or Laplace) release of each participation, no amplification by the '
        'uniform cohort (conservative; the spec suggests q = k/K); the sparse-vector test '
        'is then not released (its outcome appears only in the significant_fraction '
        'diagnostic) and is not charged; n_k is treated as public',
        local_loss='L_k is the mean training loss over the local steps (the paper\'s '
        'L_k(W_t) may mean the loss of the global model on the client\'s data)',
        epsilon_guaranteed=guaranteed,
        noise_rng='SVT and perturbation noise from TF\'s stateful RNG: runs are not '
        'bit-reproducible')


def round_metrics(metrics) -> dict:
  """The factory's and eq. 37's measurements of a round (`Method.round_metrics`)."""
  agg = metrics['aggregator']
  sig, inner = agg['significant_gradient'], agg['inner']
  return {'significant_fraction': float(sig['significant_fraction']),
          'threshold': float(sig['threshold']), 'threshold_max': float(sig['threshold_max']),
          'max_abs_gradient': float(sig['max_abs_gradient']),
          'noise_std': float(sig['noise_std']),
          'clipped_clients': int(sig['clipped']),
          'mean_abs_gradient': float(sig['mean_abs_gradient']),
          'num_trials': float(sig['num_trials']),
          'weight_min': float(inner['weight_min']), 'weight_max': float(inner['weight_max'])}


def _binomial_summary(sensitivities: np.ndarray, epsilon: float, delta: float,
                      clip_norm: float, levels: int, dim: int) -> tuple[dict, dict]:
  """cpSGD's `k`, `s` and the clients' `m` (Theorem 1) for the config, and the
  per-upload Theorem 1 epsilon at the true sensitivity (add/remove, worst-case rounding)
  over the clients."""
  step = 2.0 * clip_norm / (levels - 1)
  trials = {float(v): cpsgd.smallest_num_trials(epsilon, 0.5, delta, step, dim,
                                                math.sqrt(dim) * v, v, v, limit=10 ** 18)
            for v in np.unique(sensitivities)}
  per_client = np.array([trials[float(v)] for v in sensitivities], np.float64)
  true_eps = sorted(cpsgd.true_sensitivity_epsilon(m, delta, step, dim, clip_norm)
                    for m in set(per_client))
  finite = [e for e in true_eps if math.isfinite(e)]
  need = int(math.ceil(max(23 * math.log(10 * dim / delta), 2 * clip_norm / step) / 0.25))
  hparams = dict(quantization_levels=levels, quantization_step=step,
                 num_trials_min=float(per_client.min()),
                 num_trials_median=float(np.median(per_client)),
                 num_trials_max=float(per_client.max()))
  span = (f'from {finite[0]:.4g} to {finite[-1]:.4g}' if finite else 'inf for every client')
  notes = dict(
      cpsgd='cpSGD (Agarwal et al. 2018) on DP-FedAGS\'s pipeline: k-level stochastic '
      'quantisation of g\' on [-C, C] and Binomial noise s (Bin(m, 1/2) - m / 2); m per client '
      'from their Theorem 1 at (epsilon, delta) with Delta_2 = Delta_inf = Delta_S, '
      'Delta_1 = sqrt(|W|) Delta_S (Amendment 1\'s reading, as for DP-FedAvg); k is not '
      'given in either paper (2^16 keeps the rounding error below the noise)',
      cpsgd_true_sensitivity=f'per upload, Theorem 1 with the true add/remove sensitivity '
      f'(Delta_2 = C + s sqrt(|W|), Delta_1 = sqrt(|W|) C + s |W|, Delta_inf = C: worst-case '
      f'rounding) at delta {delta:g} gives epsilon {span} over the clients\' m'
      + (f' ({len(true_eps) - len(finite)} of {len(true_eps)} distinct m are inf: Theorem 1 '
         f'needs m >= {need} when Delta_inf = C)' if len(finite) < len(true_eps) else '')
      + '; the RDP ledger cannot compose (epsilon, delta) pairs, so epsilon_guaranteed is '
      'reported inf')
  return hparams, notes


# ----- registry ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DPFedAGSHparams(registry.MethodHparams):
  """DP-FedAGS's own options (Sec. IV, Alg. 1; spec dp_fedags.md)."""
  epsilon: float = registry.option(0.5, 'per-round privacy budget epsilon (Sec. V: 0.1, '
                                   '0.2, 0.5)')
  epsilon_1_fraction: float = registry.option(
      0.05, 'epsilon_1 / epsilon (SVT test noise)',
      note='not given in the paper; chosen because epsilon_3 >> epsilon_1 + epsilon_2')
  epsilon_2_fraction: float = registry.option(0.05, 'epsilon_2 / epsilon (SVT threshold noise)')
  delta_s: str = registry.option(
      'scaled', 'sensitivity Delta_S: scaled (2 lr C / n_k, Amendment 1) or clip (C)',
      choices=DELTA_S_MODES)
  delta_s_scale: float = registry.option(
      1.0, 'kappa: Delta_S = kappa 2 lr C / n_k under delta_s=scaled (the calibration '
      'between the two readings; 0 is the clip-only control, no noise)')
  perturbation: str = registry.option(
      'gaussian', 'noise on significant coordinates: gaussian (Alg. 1 line 26) or laplace '
      '(Lap(Delta_S / epsilon_3), Theorems 1-2)', choices=('gaussian', 'laplace'))
  perturb_all: bool = registry.option(False, 'noise every coordinate (the SVT still runs)')
  weighting: str = registry.option('loss', 'aggregation weights: loss (eq. 37) or size '
                                   '(n_k / n)', choices=WEIGHTINGS)

  def __post_init__(self):
    super().__post_init__()
    if self.epsilon <= 0:
      raise ValueError(f'epsilon must be positive. Found epsilon={self.epsilon!r}.')
    _check_delta_s_scale(self.delta_s, self.delta_s_scale)
    f1, f2 = self.epsilon_1_fraction, self.epsilon_2_fraction
    if f1 <= 0 or f2 <= 0 or f1 + f2 >= 1:
      raise ValueError('epsilon_1_fraction and epsilon_2_fraction must be positive with '
                       f'a sum below 1. Found {f1!r}, {f2!r}.')

  def check_run(self, config) -> None:
    if config.cohort_sampling != 'uniform':
      raise ValueError('cohort_sampling must be uniform (k of K clients, Sec. V-A). Found '
                       f'cohort_sampling={config.cohort_sampling!r}.')
    common.check_one_client_per_slice(config.method, config.clients_per_slice)


@dataclasses.dataclass(frozen=True)
class BaselineHparams(registry.MethodHparams):
  """Options of DP-FedAGS's reconstructed baselines on its pipeline (baselines.md)."""
  epsilon: float = registry.option(0.5, 'per-round privacy budget epsilon (eq. 2 sigma)')
  delta_s: str = registry.option(
      'scaled', 'sensitivity Delta_S: scaled (2 lr C / n_k, Amendment 1) or clip (C)',
      choices=DELTA_S_MODES)
  delta_s_scale: float = registry.option(
      1.0, 'kappa: Delta_S = kappa 2 lr C / n_k under delta_s=scaled (the calibration '
      'between the two readings; 0 is the clip-only control, no noise)')

  def __post_init__(self):
    super().__post_init__()
    if self.epsilon <= 0:
      raise ValueError(f'epsilon must be positive. Found epsilon={self.epsilon!r}.')
    _check_delta_s_scale(self.delta_s, self.delta_s_scale)

  def check_run(self, config) -> None:
    DPFedAGSHparams.check_run(self, config)


@dataclasses.dataclass(frozen=True)
class CPSGDHparams(BaselineHparams):
  quantization_levels: int = registry.option(
      2 ** 16, 'k, the quantisation levels of cpSGD (not given: 2^16)')

  def __post_init__(self):
    super().__post_init__()
    if self.quantization_levels < 2:
      raise ValueError('quantization_levels must be at least 2. Found '
                       f'{self.quantization_levels!r}.')
    _check_delta_s_scale(self.delta_s, self.delta_s_scale, 'binomial')


@dataclasses.dataclass(frozen=True)
class SNLCHparams(BaselineHparams):
  top_fraction: float = registry.option(
      0.1, 'fraction omega of the largest |g\'| coordinates perturbed (baselines.md: 10%)')


HPARAMS = dict(dp_fedags=DPFedAGSHparams, dp_fedsnlc=SNLCHparams,
               dp_fedavg_ags=BaselineHparams, cpsgd=CPSGDHparams)
# What each method fixes: the coordinate selection (`SignificantGradientFactory`), the
# aggregation weights and, for cpSGD, the perturbation; a method's option of the same name
# (DP-FedAGS's weighting) overrides its entry.
MECHANISMS = dict(dp_fedags=dict(selection='svt', weighting='loss'),
                  dp_fedsnlc=dict(selection='top', weighting='size'),
                  dp_fedavg_ags=dict(selection='all', weighting='size'),
                  cpsgd=dict(selection='all', weighting='size', perturbation='binomial'))


def _builder(name: str):
  def build(ctx: registry.BuildContext, hp) -> common.Method:
    c = ctx.config
    return build_dp_fedags(
        ctx.keras_builder, ctx.data, rounds=c.rounds, method=name, hp=hp,
        clip_norm=c.clip_norm, learning_rate=c.learning_rate, batch_size=c.batch_size,
        local_epochs=c.local_epochs, clients_per_round=c.clients_per_round, delta=c.delta,
        seed=c.seed, clients_per_slice=c.clients_per_slice)
  return build


_SHARED = dict(clip_norm='C, the L2 clip of the accumulated gradient',
               learning_rate='eta, local SGD and server step (Sec. V: 0.1)',
               noise_multiplier='unused: sigma follows eq. 2 from epsilon')
METHODS = (
    registry.MethodSpec(
        'dp_fedags', _builder('dp_fedags'), DPFedAGSHparams,
        'DP-FedAGS (spec dp_fedags.md): sparse-vector selection of significant coordinates, '
        'Gaussian/Laplace noise on them, loss-weighted aggregation (eq. 37)',
        shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec(
        'dp_fedsnlc', _builder('dp_fedsnlc'), SNLCHparams,
        'DP-FedSNLC (reconstructed, baselines.md): eq. 2 Gaussian noise on the top '
        'omega of |g\'| chosen without noise, weights n_k / n', shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec(
        'dp_fedavg_ags', _builder('dp_fedavg_ags'), BaselineHparams,
        'DP-FedAvg as DP-FedAGS\'s paper runs it (reconstructed): clipped gradient sum '
        'plus eq. 2 Gaussian noise on every coordinate, weights n_k / n',
        shared_meanings=_SHARED, slices_of_one=True),
    registry.MethodSpec(
        'cpsgd', _builder('cpsgd'), CPSGDHparams,
        'cpSGD (Agarwal et al. 2018) as DP-FedAGS compares against it: k-level stochastic '
        'quantisation of the clipped gradient sum plus Binomial noise, m from their '
        'Theorem 1, weights n_k / n', shared_meanings=_SHARED, slices_of_one=True),
)
