"""Aggregation factories of tffdp's mechanisms, composable like `tff.aggregators`.

`longitudinal_clipping_factory(S, inner)` clips each client's value by AADP-FL's
longitudinal clipping (Sec. 4.3 of `../shared/papers/001_...`; spec `aadp_fl.md` step 4)
before `inner` aggregates it, exactly as `tff.aggregators.clipping_factory` clips by the
global L2 norm: it is built on the same TFF wrapper, so it takes a constant `S` or an
`EstimationProcess`, is weighted or unweighted as `inner` is, and reports
`longitudinal_clipped_count` and `longitudinal_clipping_norm`. Any method can put it in
front of a mean, a noise-adding or a DP factory.
"""

from __future__ import annotations

import collections
from typing import Optional, Sequence, Union

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_probability as tfp
from tensorflow_federated.python.aggregators import robust


def longitudinal_clip(values: Sequence[tf.Tensor], clip_norm: tf.Tensor
                      ) -> tuple[list[tf.Tensor], tf.Tensor, tf.Tensor]:
  """Zeroes the smallest-magnitude coordinates until the global L2 norm is `<= clip_norm`.

  AADP-FL, Sec. 4.3 (spec step 4): coordinates are removed smallest `|.|` first, so the
  kept set is the longest prefix of the coordinates sorted by decreasing magnitude whose
  squares sum to at most `S^2`. Vectorised: sort, cumulative sum, mask. Among equal
  magnitudes the lower flat index (over the concatenated, flattened tensors) is kept
  first. If the largest coordinate alone exceeds `S`, every coordinate is zeroed, as the
  procedure says. A value already within `S` is returned unchanged.

  Args:
    values: float tensors (any shapes), one client's update.
    clip_norm: float32 scalar `S > 0`.

  Returns:
    `(clipped values (same shapes and dtypes), global L2 norm before clipping float32,
    number of zeroed coordinates int32)`.
  """
  flat = tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in values], axis=0)
  squares = tf.square(flat)
  order = tf.argsort(-squares, stable=True)
  kept_sorted = tf.cumsum(tf.gather(squares, order)) <= tf.square(clip_norm)
  mask = tf.scatter_nd(order[:, None], tf.cast(kept_sorted, tf.float32), tf.shape(flat))
  out, start = [], 0
  for v in values:
    size = int(np.prod(v.shape))
    out.append(tf.cast(tf.reshape(flat[start:start + size] * mask[start:start + size],
                                  tf.shape(v)), v.dtype))
    start += size
  norm = tf.norm(flat)
  within = norm <= clip_norm  # exactly unchanged, whatever the rounding of the cumsum
  out = [tf.where(within, v, o) for v, o in zip(values, out)]
  zeroed = tf.where(within, 0, tf.reduce_sum(tf.cast(tf.logical_not(kept_sorted), tf.int32)))
  return out, norm, zeroed


def longitudinal_clipping_factory(
    clipping_norm: Union[float, tff.templates.EstimationProcess],
    inner_agg_factory: tff.aggregators.AggregationFactory,
    clipped_count_sum_factory: Optional[tff.aggregators.UnweightedAggregationFactory] = None,
) -> tff.aggregators.AggregationFactory:
  """`tff.aggregators.clipping_factory` with AADP-FL's longitudinal clipping instead.

  Each client's value is clipped by `longitudinal_clip` to the norm `clipping_norm`
  reports, then aggregated by `inner_agg_factory`. Measurements:
  `longitudinal_clipping` (the inner measurements), `longitudinal_clipping_norm`, and
  `longitudinal_clipped_count` (clients whose value was longer than the norm).

  Args:
    clipping_norm: `S` (a positive float) or an `EstimationProcess` reporting it.
    inner_agg_factory: Weighted or unweighted factory applied after clipping.
    clipped_count_sum_factory: How the clipped count is summed (default `SumFactory`).

  Returns:
    A factory of the same weightedness as `inner_agg_factory`.

  Raises:
    ValueError: If a constant `clipping_norm` is not positive.
  """
  if isinstance(clipping_norm, (int, float)):
    if clipping_norm <= 0:
      raise ValueError(f'clipping_norm must be positive. Found {clipping_norm}.')
    clipping_norm = float(clipping_norm)

  def make_clip_fn(value_type):
    @tff.tensorflow.computation(value_type, robust.NORM_TF_TYPE)
    def clip_fn(value, norm):
      values = tf.nest.flatten(value)
      clipped, global_norm, _ = longitudinal_clip(values, norm)
      was_clipped = tf.cast(global_norm > norm, robust.COUNT_TF_TYPE)
      return tf.nest.pack_sequence_as(value, clipped), global_norm, was_clipped
    return clip_fn

  return robust._make_wrapper(  # pylint: disable=protected-access
      clipping_norm, inner_agg_factory,
      clipped_count_sum_factory or tff.aggregators.SumFactory(), make_clip_fn,
      'longitudinal_clipp')


def norm_recording_constant(clipping_norm: float) -> tff.templates.EstimationProcess:
  """A constant clipping norm that also keeps the clients' mean pre-clipping L2 norm.

  An `EstimationProcess` for `clipping_factory`-style wrappers (e.g.
  `longitudinal_clipping_factory`): `report` is always `clipping_norm`, and the state is
  the mean of the global norms the wrapper passes to `next` (float32@SERVER, 0 before
  the first round): the update norm adaptive methods log per round.

  Raises:
    ValueError: If `clipping_norm` is not positive.
  """
  if clipping_norm <= 0:
    raise ValueError(f'clipping_norm must be positive. Found {clipping_norm}.')
  norm = float(clipping_norm)

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(np.float32(0.0), tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(np.float32, tff.CLIENTS))
  def next_fn(state, norms):
    del state
    return tff.federated_mean(norms)

  @tff.tensorflow.computation(np.float32)
  def constant(state):
    del state
    return tf.constant(norm, tf.float32)

  @tff.federated_computation(init_fn.type_signature.result)
  def report_fn(state):
    return tff.federated_map(constant, state)

  return tff.templates.EstimationProcess(init_fn, next_fn, report_fn)


NOISE_ON = ('all', 'kept')
KEPT_REASON = ('noise_on=kept adds noise only to the coordinates longitudinal clipping '
               'kept: the support of each update is released without noise')


class PerClientGaussianFactory(tff.aggregators.WeightedAggregationFactory):
  """Each client adds its own Gaussian noise to its value, then `inner` aggregates.

  The noise multiplier of a client is looked up by its weight: the state holds a table
  `noise_multipliers: float32[u]` aligned with the constant `weight_keys: float32[u]`,
  and a client whose weight is `weight_keys[j]` adds `N(0, (noise_multipliers[j] *
  stddev_per_multiplier)^2)` to each coordinate. With AADP-FL's budget by data volume
  (eq. 2 of `../shared/papers/001_...`) a client's budget, hence its sigma, is a
  function of its sample count `d_i`, which is the weight the client work reports. A
  method changes the table between rounds by replacing `noise_multipliers` in the state
  (`with_noise_multipliers`). A weight missing from the table gets sigma NaN, so the
  aggregate turns NaN instead of silently unnoised.

  `noise_on='all'` noises every coordinate (a Gaussian mechanism of L2 sensitivity
  `S` when an upstream clip bounds the value to `S`); `noise_on='kept'` only the non-zero
  ones (AADP-FL's "kept" reading: the support of the clipped value is released in the
  clear, so no finite DP guarantee holds).

  The noise is drawn with TF's stateful RNG (fresh every round, different per client),
  as TFF's own DP factories do on the server: runs are not bit-reproducible.

  Measurements: `per_client_noise=<noise_multiplier_sum (sum of the sigmas the clients
  used), nonzero_fraction (mean fraction of non-zero coordinates before noise: kept by
  the upstream clip and not already zero), clients, noise_multipliers (float32 `[u]`: the
  table this round's noise was drawn with), clients_per_key (int32 `[u]`: how many
  clients drew with each entry)>` and `inner` (the inner measurements). The last two
  state what the round executed: `clients_per_key[j]` Gaussian releases with std
  `noise_multipliers[j] * stddev_per_multiplier` each. Given the value's `l2_sensitivity`
  the factory also states their DP events, `dp_event=<noise_multiplier (float32 [u]: the
  std of entry `j` over the sensitivity, from the table the noise was drawn with)>`, which
  `executed_events` reads as `dp_accounting` events.

  Args:
    weight_keys: `[u]` distinct client weights (e.g. `E * d_i`).
    noise_multipliers: `[u]` initial sigma per key, `>= 0`.
    stddev_per_multiplier: Noise standard deviation per unit of sigma (AADP-FL: `S / B`
      by default, `S` with `noise_scale='update'`), `>= 0`.
    inner: Weighted or unweighted factory aggregating the noised values (AADP-FL: the
      unweighted mean, `tff.aggregators.UnweightedMeanFactory()`).
    noise_on: `all` or `kept`.
    l2_sensitivity: The L2 norm an upstream clip bounds each value to (AADP-FL: `S`), in
      the value's units; None: no `dp_event` measurement.

  Raises:
    ValueError: On mismatched tables, duplicate keys, negative sigmas or scale, an
      unknown `noise_on`, or `l2_sensitivity <= 0`.
  """

  def __init__(self, weight_keys, noise_multipliers, stddev_per_multiplier: float,
               inner: tff.aggregators.AggregationFactory, noise_on: str = 'all',
               l2_sensitivity: Optional[float] = None):
    keys = np.asarray(weight_keys, np.float32).ravel()
    sigmas = np.asarray(noise_multipliers, np.float32).ravel()
    if keys.shape != sigmas.shape or keys.size == 0:
      raise ValueError(f'weight_keys and noise_multipliers must be non-empty and of one '
                       f'length. Found {keys.size} and {sigmas.size}.')
    if len(np.unique(keys)) != keys.size:
      raise ValueError(f'weight_keys must be distinct. Found {keys.tolist()}.')
    if np.any(sigmas < 0) or stddev_per_multiplier < 0:
      raise ValueError('noise multipliers and stddev_per_multiplier must be >= 0. Found '
                       f'{sigmas.tolist()} and {stddev_per_multiplier}.')
    if noise_on not in NOISE_ON:
      raise ValueError(f'noise_on must be one of {", ".join(NOISE_ON)}. Found {noise_on!r}.')
    if l2_sensitivity is not None and not l2_sensitivity > 0:
      raise ValueError(f'l2_sensitivity must be positive. Found {l2_sensitivity!r}.')
    self._keys, self._sigmas = keys, sigmas
    self._scale = float(stddev_per_multiplier)
    self._inner, self._noise_on = inner, noise_on
    self._sensitivity = l2_sensitivity

  def executed_events(self, measurements) -> list[tuple[Optional[dp_accounting.DpEvent], str]]:
    """The DP event of one client's release per table entry, from a round's
    `per_client_noise` measurements: `(GaussianDpEvent(noise_multiplier[j]), '')`, or
    `(None, reason)` where no finite guarantee holds (noise only on the kept
    coordinates, no noise, or a non-finite multiplier).

    Raises:
      ValueError: If the factory has no `l2_sensitivity` (no events stated).
    """
    if self._sensitivity is None:
      raise ValueError('PerClientGaussianFactory states DP events only with an '
                       'l2_sensitivity.')
    out = []
    for z in np.asarray(measurements['dp_event']['noise_multiplier'], np.float64):
      if self._noise_on == 'kept':
        out.append((None, KEPT_REASON))
      elif not np.isfinite(z):
        out.append((None, f'the noise multiplier is {z}: not finite, no guarantee'))
      elif z == 0:
        out.append((None, 'noise multiplier is 0: no noise'))
      else:
        out.append((dp_accounting.GaussianDpEvent(float(z)), ''))
    return out

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    weighted_inner = isinstance(self._inner, tff.aggregators.WeightedAggregationFactory)
    inner = (self._inner.create(value_type, weight_type) if weighted_inner
             else self._inner.create(value_type))
    keys, initial, scale, kept_only = self._keys, self._sigmas, self._scale, (
        self._noise_on == 'kept')
    sensitivity = self._sensitivity

    @tff.tensorflow.computation
    def initial_table():
      return collections.OrderedDict(noise_multipliers=tf.constant(initial))

    table_type = initial_table.type_signature.result

    @tff.federated_computation
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          per_client_noise=tff.federated_eval(initial_table, tff.SERVER),
          inner=inner.initialize()))

    @tff.tensorflow.computation(value_type, weight_type, table_type.noise_multipliers)
    def add_noise(value, weight, table):
      distance = tf.abs(tf.constant(keys) - tf.cast(weight, tf.float32))
      j = tf.argmin(distance)
      found = tf.equal(distance[j], 0.0)
      sigma = tf.where(found, table[j], float('nan'))
      key = tf.one_hot(j, len(keys), dtype=tf.int32) * tf.cast(found, tf.int32)
      leaves = tf.nest.flatten(value)
      noised, nonzero, total = [], 0.0, 0
      for v in leaves:
        noise = tf.random.normal(tf.shape(v), dtype=v.dtype) * tf.cast(sigma * scale, v.dtype)
        is_kept = tf.cast(tf.not_equal(v, 0), v.dtype)
        noised.append(v + noise * is_kept if kept_only else v + noise)
        nonzero += tf.reduce_sum(tf.cast(is_kept, tf.float32))
        total += int(np.prod(v.shape))
      return (tf.nest.pack_sequence_as(value, noised), sigma,
              nonzero / float(max(total, 1)), key)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      table = tff.federated_map(_table_of(table_type), state.per_client_noise)
      noised, sigma, kept, key = tff.federated_map(
          add_noise, (value, weight, tff.federated_broadcast(table)))
      out = (inner.next(state.inner, noised, weight) if weighted_inner
             else inner.next(state.inner, noised))
      measured = collections.OrderedDict(
          noise_multiplier_sum=tff.federated_sum(sigma),
          nonzero_fraction=tff.federated_mean(kept),
          clients=tff.federated_sum(tff.federated_value(1, tff.CLIENTS)),
          noise_multipliers=table,
          clients_per_key=tff.federated_sum(key))
      if sensitivity is not None:
        measured['dp_event'] = tff.federated_map(_event_of(scale, sensitivity), table)
      measured = tff.federated_zip(measured)
      return tff.templates.MeasuredProcessOutput(
          state=tff.federated_zip(collections.OrderedDict(
              per_client_noise=state.per_client_noise, inner=out.state)),
          result=out.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              per_client_noise=measured, inner=out.measurements)))

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _event_of(scale: float, sensitivity: float) -> tff.Computation:
  """`noise_multipliers float32[u] -> <noise_multiplier float32[u]>`: the std the clients
  draw with (`add_noise`'s `sigma * scale`) over the L2 sensitivity."""
  @tff.tensorflow.computation
  def event(table):
    return collections.OrderedDict(noise_multiplier=table * scale / sensitivity)
  return event


def _table_of(table_type):
  @tff.tensorflow.computation(table_type)
  def table(state):
    return state['noise_multipliers']
  return table


def with_noise_multipliers(aggregator_state, noise_multipliers: np.ndarray):
  """`PerClientGaussianFactory` state (found anywhere in `aggregator_state`) with a new table.

  Python-side (between rounds): returns a copy of the nested state structure in which
  every `per_client_noise.noise_multipliers` is replaced by `noise_multipliers` (float32).
  """
  table = np.asarray(noise_multipliers, np.float32)

  def replace(node):
    if isinstance(node, collections.OrderedDict) or isinstance(node, dict):
      out = type(node)()
      for k, v in node.items():
        if k == 'per_client_noise' and isinstance(v, dict) and 'noise_multipliers' in v:
          if np.shape(v['noise_multipliers']) != table.shape:
            raise ValueError(f'noise multiplier table has shape {table.shape}; the '
                             f'aggregator holds {np.shape(v["noise_multipliers"])}.')
          out[k] = type(v)(v, noise_multipliers=table)
        else:
          out[k] = replace(v)
      return out
    if hasattr(node, '_fields'):  # namedtuple
      return type(node)(*(replace(v) for v in node))
    return node
  return replace(aggregator_state)


def laplace_noise(shape, scale: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
  """`Lap(0, scale)` per coordinate, drawn by `tfp.distributions.Laplace` in float64.

  Variance `2 scale^2`. TF's stateful RNG (fresh per call), like TFF's DP factories. The
  draw is made in float64 and cast to `dtype`: a float32 draw (before 2026-11-24, as
  `log(u0) - log(u1)` with `u ~ U[tiny, 1)` in float32) put an atom of size `87.3 scale`
  at probability `2^-23` per uniform draw (a uniform draw of exactly 0 maps to `tiny`) and
  cut the tail at about `16 scale` otherwise; float64 pushes both out of reach. Like
  every floating-point sampler it is not exactly the continuous Laplace (Mironov 2012,
  "On significance of the least significant bits for differential privacy"); the ledgers
  account the ideal mechanism.

  Args:
    shape: the output shape (1-D int list or tensor).
    scale: the Laplace scale `b` (scalar, same units as the values it perturbs).
    dtype: the output dtype.

  Returns:
    A tensor of `shape` and `dtype`.
  """
  shape = tf.reshape(tf.convert_to_tensor(shape, dtype=tf.int32), [-1])
  unit = tfp.distributions.Laplace(tf.constant(0.0, tf.float64), tf.constant(1.0, tf.float64))
  return tf.cast(scale, dtype) * tf.cast(unit.sample(shape), dtype)


def l1_clip(values: Sequence[tf.Tensor], clip_norm: tf.Tensor
            ) -> tuple[list[tf.Tensor], tf.Tensor]:
  """Scales `values` so that their global L1 norm is at most `clip_norm`.

  Returns:
    `(clipped values (same shapes and dtypes), global L1 norm before clipping float32)`.
  """
  norm = tf.add_n([tf.reduce_sum(tf.abs(tf.cast(v, tf.float32))) for v in values])
  factor = tf.minimum(1.0, clip_norm / tf.maximum(norm, 1e-30))
  return [v * tf.cast(factor, v.dtype) for v in values], norm


def gather_rows(cap: int, width: int, block: int = 1) -> tff.Computation:
  """`<rows=float32 [block, width], active=bool [block]>@CLIENTS -> <rows float32 [cap,
  width], count int32>@SERVER`: the active rows of every client value, gathered in the
  first `count` rows (zeros after; rows past `cap` are dropped and `count` still counts
  them). Merges keep each side's rows, so partial gathers from several workers join as
  one. A mechanism states per-client quantities with it (e.g. the DP-SGD client work's
  steps and noise multiplier, a cohort slice giving one row per client it trained).

  Args:
    cap: The most rows kept (e.g. the number of clients), `>= 1`.
    width: Row length, `>= 1`.
    block: Rows per client value (a cohort slice's clients), `>= 1`.

  Raises:
    ValueError: On a size below 1.
  """
  if min(cap, width, block) < 1:
    raise ValueError(f'cap, width and block must be at least 1. Found {cap}, {width}, '
                     f'{block}.')
  value_type = tff.StructType([('rows', tff.TensorType(np.float32, [block, width])),
                               ('active', tff.TensorType(np.bool_, [block]))])
  acc_type = tff.StructType([tff.TensorType(np.float32, [cap, width]),
                             tff.TensorType(np.int32)])

  @tff.tensorflow.computation(acc_type, value_type)
  def accumulate(acc, value):
    rows, count = acc
    new = tf.boolean_mask(value['rows'], value['active'])
    index = count + tf.range(tf.shape(new)[0], dtype=tf.int32)
    keep = index < cap
    rows = tf.tensor_scatter_nd_update(rows, tf.expand_dims(tf.boolean_mask(index, keep), 1),
                                       tf.boolean_mask(new, keep))
    return rows, count + tf.shape(new)[0]

  @tff.tensorflow.computation(acc_type, acc_type)
  def merge(a, b):
    joined = tf.concat([a[0][:tf.minimum(a[1], cap)], b[0][:tf.minimum(b[1], cap)]], 0)[:cap]
    rows = tf.pad(joined, [[0, cap - tf.shape(joined)[0]], [0, 0]])
    return tf.ensure_shape(rows, [cap, width]), a[1] + b[1]

  @tff.tensorflow.computation(acc_type)
  def report(acc):
    return acc

  @tff.federated_computation(tff.FederatedType(value_type, tff.CLIENTS))
  def gather(values):
    zero = (np.zeros([cap, width], np.float32), np.int32(0))
    return tff.federated_aggregate(values, zero, accumulate, merge, report)
  return gather


def gathered_rows(gathered) -> np.ndarray:
  """float64 `[count, width]`: the rows `gather_rows` kept of a round (its `<rows, count>`).

  Raises:
    ValueError: If more rows were sent than kept (`count` above the cap).
  """
  rows, count = gathered
  rows, count = np.asarray(rows, np.float64), int(count)
  if count > rows.shape[0]:
    raise ValueError(f'{count} clients stated rows, more than the {rows.shape[0]} kept.')
  return rows[:count]


class LaplaceUploadFactory(tff.aggregators.UnweightedAggregationFactory):
  """cosAFed's upload perturbation: per client `d * update (+ L1 clip) + Lap(Delta_f / epsilon')`.

  Formula 7 of `../shared/papers/002_...` (Alg. 1 lines 7-9; spec `cosafed.md`): each
  client's value is a structure `<update=model delta, cosine=float32, epsilon=float32>`
  (the client work computes the cosine `d = cos(A^{t-1}, B_i^t)` and its budget
  `epsilon'`, e.g. `tffdp.algorithms.cosafed`). The factory scales the update by `d`
  (`scale_by_cosine`; LAPFed, ADPFL and cosFed upload the update unscaled), optionally
  scales it down to L1 norm `l1_clip`, adds `Lap(0, sensitivity / epsilon')` to every
  coordinate, and hands the noised updates to `inner` (default the unweighted mean).

  Without `l1_clip` the L1 sensitivity of the upload is unbounded (the paper's reading:
  no DP guarantee holds). With `l1_clip = sensitivity` each upload is an
  `epsilon'`-DP Laplace release (client-level: any two updates differ by at most
  `2 * l1_clip` in L1 under replacement, `l1_clip` under add/remove adjacency).

  A client whose `epsilon'` is 0 gets infinite noise (its upload is not finite); the
  measurement `zero_budget_clients` counts them. The noise uses TF's stateful RNG.

  Measurements: `<epsilon_sum, epsilon_min, epsilon_max, clients, zero_budget_clients,
  l1_clipped, mean_l1_norm (after scaling, before clipping), mean_cosine>` and `inner`.

  Args:
    sensitivity: `Delta_f > 0` (the Laplace scale is `Delta_f / epsilon'`).
    l1_clip: None (paper-literal) or the L1 bound `> 0` of each scaled update.
    scale_by_cosine: Multiply the update by the client's cosine first (cosAFed).
    inner: Unweighted factory of the noised updates (default `UnweightedMeanFactory`).

  Raises:
    ValueError: On a non-positive `sensitivity` or `l1_clip`.
  """

  def __init__(self, sensitivity: float, l1_clip: Optional[float] = None,
               scale_by_cosine: bool = True,
               inner: Optional[tff.aggregators.UnweightedAggregationFactory] = None):
    if sensitivity <= 0:
      raise ValueError(f'sensitivity must be positive. Found {sensitivity!r}.')
    if l1_clip is not None and l1_clip <= 0:
      raise ValueError(f'l1_clip must be positive or None. Found {l1_clip!r}.')
    self._sensitivity, self._l1_clip = float(sensitivity), l1_clip
    self._scale, self._inner = scale_by_cosine, inner or tff.aggregators.UnweightedMeanFactory()

  def create(self, value_type) -> tff.templates.AggregationProcess:
    names = [n for n, _ in tff.structure.iter_elements(value_type)]
    if names != ['update', 'cosine', 'epsilon']:
      raise TypeError('LaplaceUploadFactory expects values <update, cosine, epsilon>. '
                      f'Found {value_type}.')
    update_type = value_type.update
    inner = self._inner.create(update_type)
    sensitivity, clip, scale_by_cosine = self._sensitivity, self._l1_clip, self._scale

    @tff.tensorflow.computation(value_type)
    def perturb(value):
      leaves = tf.nest.flatten(value['update'])
      if scale_by_cosine:
        leaves = [v * tf.cast(value['cosine'], v.dtype) for v in leaves]
      if clip is not None:
        leaves, norm = l1_clip(leaves, tf.constant(clip, tf.float32))
        clipped = tf.cast(norm > clip, tf.int32)
      else:
        norm = tf.add_n([tf.reduce_sum(tf.abs(v)) for v in leaves])
        clipped = tf.constant(0, tf.int32)
      epsilon = tf.cast(value['epsilon'], tf.float32)
      b = tf.math.divide_no_nan(sensitivity, epsilon) + tf.where(epsilon > 0, 0.0, np.inf)
      noised = [v + laplace_noise(v.shape, b, v.dtype) for v in leaves]
      return (tf.nest.pack_sequence_as(value['update'], noised), epsilon, clipped, norm,
              tf.cast(epsilon <= 0, tf.int32))

    @tff.federated_computation
    def init_fn():
      return inner.initialize()

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      noised, epsilon, clipped, norm, zero = tff.federated_map(perturb, value)
      out = inner.next(state, noised)
      measured = tff.federated_zip(collections.OrderedDict(
          epsilon_sum=tff.federated_sum(epsilon),
          epsilon_min=tff.federated_min(epsilon),
          epsilon_max=tff.federated_max(epsilon),
          clients=tff.federated_sum(tff.federated_value(1, tff.CLIENTS)),
          zero_budget_clients=tff.federated_sum(zero),
          l1_clipped=tff.federated_sum(clipped),
          mean_l1_norm=tff.federated_mean(norm),
          mean_cosine=tff.federated_mean(value.cosine)))
      return tff.templates.MeasuredProcessOutput(
          state=out.state, result=out.result,
          measurements=tff.federated_zip(collections.OrderedDict(
              laplace_upload=measured, inner=out.measurements)))

    return tff.templates.AggregationProcess(init_fn, next_fn)
