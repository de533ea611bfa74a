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

from typing import Optional, Sequence, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
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
