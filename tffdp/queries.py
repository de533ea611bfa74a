"""Gaussian queries: each noise draw and the DP event it releases, in one object.

The pattern of tensorflow-privacy's `DPQuery.get_noised_result`, which returns the
noised result with its `DpEvent`: the noise and the event it states come from one
definition. tffdp's mechanisms run inside TFF computations (noise from stateless seeds,
the noise multiplier a float32 tensor of the server state) and are accounted in Python,
so `GaussianSumQuery` serves both sides: `add_noise` inside TF, `event` for the ledger,
built there from the same (float32) noise multiplier. What the round executed is checked
against the declared events after each round (`Accounting.check_round`).

Sources: Abadi et al. 2016 (DP-SGD: per-example clipping, Gaussian noise
`N(0, (sigma C)^2)` on the clipped sum, Poisson-subsampled Gaussian events); Mironov
2017 (RDP of the Gaussian mechanism, composition of Gaussian queries on the same data).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Sequence

import dp_accounting
import tensorflow as tf
import tensorflow_privacy as tfp

from tffdp import privacy


def standard_normal(num: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  """`num` i.i.d. `N(0, 1)` float32 draws from stateless Philox uniforms (Box-Muller).

  The transform TF's own `tf.random.stateless_normal` applies per element (Box and
  Muller 1958: `r = sqrt(-2 ln u1)`, `z = (r cos 2 pi u2, r sin 2 pi u2)`), written as
  whole-tensor ops: 1.7-1.9x faster on CPU (3.27M draws, the Deep-MNIST CNN's size:
  9.0-9.4 ms against 16.3-17.5 ms on 2 cores; TF's sampler took about half of that
  CNN's DP-SGD step, `benchmarks/README.md`).
  `u1 = 1 - u` with `u` TF's float32 uniform on `[0, 1)` (23-bit grid), so
  `|z| <= sqrt(2 * 23 ln 2) = 5.64`, as TF's own sampler (floor `1e-7`, 5.68).

  Args:
    num: Scalar int32 number of draws.
    seed: int64 `[2]` stateless seed.

  Returns:
    float32 `[num]`.
  """
  half = (num + 1) // 2
  u = tf.random.stateless_uniform(tf.stack([2, half]), seed=seed, dtype=tf.float32)
  radius = tf.sqrt(-2.0 * tf.math.log(1.0 - u[0]))
  angle = (2.0 * math.pi) * u[1]
  return tf.concat([radius * tf.cos(angle), radius * tf.sin(angle)], 0)[:num]


def gaussian_noise_like(tensors, stddev, seed):
  """Stateless `N(0, stddev^2)` noise shaped like each tensor; `seed` int64[2].

  One `standard_normal` draw of all the tensors' sizes together, split in their order.
  """
  sizes = [tf.size(t) for t in tensors]
  z = standard_normal(tf.add_n(sizes), seed)
  return [tf.cast(tf.reshape(part, tf.shape(t)) * stddev, t.dtype)
          for part, t in zip(tf.split(z, tf.stack(sizes)), tensors)]


@dataclasses.dataclass(frozen=True)
class GaussianSumQuery:
  """A sum of records with L2 sensitivity `l2_norm_clip`, plus Gaussian noise.

  Attributes:
    noise_multiplier: `sigma` (float, or float32 scalar tensor inside TF): the noise
      std is `sigma * l2_norm_clip` per coordinate.
    l2_norm_clip: `C`, the L2 sensitivity of the sum (one record's clipped norm bound);
      None where only the event is needed (it depends on `sigma` alone).
  """
  noise_multiplier: Any
  l2_norm_clip: Any

  @property
  def stddev(self):
    return self.noise_multiplier * self.l2_norm_clip

  def add_noise(self, summed: Sequence[tf.Tensor], seed: tf.Tensor) -> list[tf.Tensor]:
    """Inside TF: `summed + N(0, stddev^2)` per coordinate, noise from stateless `seed`."""
    return [s + z for s, z in zip(summed, gaussian_noise_like(summed, self.stddev, seed))]

  def event(self, sampling_rate: float = 1.0, steps: int = 1) -> dp_accounting.DpEvent:
    """The DP event of `steps` releases on Poisson samples at `sampling_rate` (float side)."""
    return privacy.subsampled_gaussian_event(float(self.noise_multiplier), sampling_rate,
                                             steps)


def joint_noise_multiplier(queries: Sequence[GaussianSumQuery]) -> float:
  """Noise multiplier of Gaussian queries that read the same records, as one query.

  Queries `i` with sensitivity `C_i` and noise std `sigma_i C_i` on the same sample are
  one Gaussian query whose RDP is the sum of theirs, `alpha / 2 * sum_i sigma_i^-2`, i.e.
  a Gaussian mechanism with multiplier `(sum_i sigma_i^-2)^(-1/2)` (two queries with the
  same sigma: `sigma / sqrt(2)`).
  """
  sigmas = [float(q.noise_multiplier) for q in queries]
  if min(sigmas) == 0:
    return 0.0
  if len(set(sigmas)) == 1:
    return sigmas[0] / math.sqrt(len(sigmas))
  return 1.0 / math.sqrt(sum(1.0 / s ** 2 for s in sigmas))


def joint_event(queries: Sequence[GaussianSumQuery], sampling_rate: float = 1.0,
                steps: int = 1) -> dp_accounting.DpEvent:
  """The DP event of `queries` reading the same Poisson sample, `steps` times."""
  return privacy.subsampled_gaussian_event(joint_noise_multiplier(queries), sampling_rate,
                                           steps)


def clip_contribution(contribution, l2_norm_clip):
  """`contribution` (a structure of float tensors) scaled to L2 norm at most
  `l2_norm_clip`: `tf.clip_by_global_norm`, the clip of tensorflow-privacy's
  `GaussianSumQuery.preprocess_record`, so a contribution clipped here equals the record
  that query would have summed."""
  clipped, _ = tf.clip_by_global_norm(tf.nest.flatten(contribution), l2_norm_clip)
  return tf.nest.pack_sequence_as(contribution, clipped)


class StatelessGaussianSumQuery(tfp.GaussianSumQuery):
  """tensorflow-privacy's `GaussianSumQuery` with its noise drawn from a seed in its state.

  tensorflow-privacy's query draws `N(0, stddev^2)` with TF's stateful RNG, so a TFF
  `DifferentiallyPrivateFactory` built on it releases other noise on every run and on
  resume. This query keeps an int64 `[2]` base seed and a release counter in its global
  state (which TFF's factory carries in the aggregator state, hence in every checkpoint):
  release `t` (0-based) adds `gaussian_noise_like(record, stddev, fold_in(seed, t))` and
  returns the state with the counter at `t + 1`. Clipping, the sum, the float32
  `stddev / l2_norm_clip` noise multiplier and the `GaussianDpEvent` it states are the
  parent's (Abadi et al. 2016; McMahan et al. 2018, Alg. 1 with the Gaussian mechanism).

  Args:
    l2_norm_clip: L2 norm each record is clipped to (the sum's sensitivity), `> 0`.
    stddev: Noise standard deviation per coordinate of the sum (`sigma * l2_norm_clip`).
    seed: int64 `[2]` base seed (`tffdp.seeds.server_noise_seed`).
  """

  # pylint: disable=invalid-name
  _GlobalState = collections.namedtuple('_GlobalState',
                                        ['l2_norm_clip', 'stddev', 'seed', 'releases'])

  def __init__(self, l2_norm_clip, stddev, seed):
    super().__init__(l2_norm_clip, stddev)
    self._seed = [int(s) for s in seed]
    if len(self._seed) != 2:
      raise ValueError(f'seed must be two integers. Found seed={seed!r}.')

  def make_global_state(self, l2_norm_clip, stddev, seed=None, releases=0):
    seed = self._seed if seed is None else seed
    return self._GlobalState(tf.cast(l2_norm_clip, tf.float32), tf.cast(stddev, tf.float32),
                             tf.cast(seed, tf.int64), tf.cast(releases, tf.int64))

  def initial_global_state(self):
    return self.make_global_state(self._l2_norm_clip, self._stddev)

  def get_noised_result(self, sample_state, global_state):
    leaves = tf.nest.flatten(sample_state)
    seed = tf.random.experimental.stateless_fold_in(global_state.seed, global_state.releases)
    noise = gaussian_noise_like(leaves, global_state.stddev, seed)
    result = tf.nest.pack_sequence_as(sample_state, [v + z for v, z in zip(leaves, noise)])
    event = dp_accounting.GaussianDpEvent(global_state.stddev / global_state.l2_norm_clip)
    return result, global_state._replace(releases=global_state.releases + 1), event


class PreclippedGaussianSumQuery(StatelessGaussianSumQuery):
  """`StatelessGaussianSumQuery` whose records are sums of contributions clipped before
  they reach it: one record per cohort slice (`dp_sgd.build_sliced_dp_sgd_client_work`
  with `update_clip`), the sum of its clients' updates, each clipped to `l2_norm_clip`
  by `clip_contribution`. `preprocess_record` is the identity; the sum, the noise (the
  same draw from the same seed and release counter) and the `GaussianDpEvent` are the
  parent's. Over the same contributions the result equals the parent's over one record
  per contribution, up to float32 summation order.

  The event holds only if every contribution inside a record was clipped to the
  query's `l2_norm_clip`: `baselines.build_dp_fedavg` passes one clip to both.

  Args:
    l2_norm_clip, stddev, seed: As `StatelessGaussianSumQuery`.
  """

  def preprocess_record(self, params, record):
    del params  # the contributions were clipped by the client work
    return record
