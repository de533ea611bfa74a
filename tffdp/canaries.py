"""Client-level canaries inside a TFF learning process (issue 40's audit, first component).

Andrew et al. 2024 ("One-shot Empirical Privacy Estimation for Federated Learning",
Sec. 3): a canary client's model update is a fixed random direction `u_j` (a unit vector
in `R^d`, drawn independently of everything else) times a norm at least the clip norm.
`with_canaries` wraps a method's client work so that each client's value carries a
canary index: `-1` for a real client (its update passes unchanged), `j >= 0` for canary
`j` (its update is replaced by `norm * u_j`). Everything after the client work, the
method's own aggregator (clipping, noise, weighting) and server update, treats the
canary's update like any other: nothing bypasses the mechanism being audited.

`canary_directions` gives the same `u_j` outside TFF, for the auditor's scores (the
cosine between `u_j` and the released model delta, `tffdp.audit`).
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

NOT_A_CANARY = -1


def direction(seed: int, index: tf.Tensor, shapes: Sequence[Sequence[int]]) -> list[tf.Tensor]:
  """Canary `index`'s unit direction `u_j`, split into tensors of `shapes` (float32).

  Drawn from the stateless seed `(seed, index)`: `N(0, I_d)` normalised to norm 1 over
  all tensors together.
  """
  sizes = [int(np.prod(s)) for s in shapes]
  z = tf.random.stateless_normal([sum(sizes)], seed=tf.stack(
      [tf.constant(seed, tf.int64), tf.cast(index, tf.int64)]))
  z = z / tf.norm(z)
  return [tf.reshape(part, s) for part, s in zip(tf.split(z, sizes), shapes)]


def canary_directions(seed: int, count: int, shapes: Sequence[Sequence[int]]) -> np.ndarray:
  """`[count, d]` float32: each canary's unit direction, flattened in `shapes`' order."""
  return np.stack([np.concatenate([t.numpy().ravel() for t in direction(seed, j, shapes)])
                   for j in range(count)])


def with_canaries(client_work: tff.learning.templates.ClientWorkProcess, norm: float,
                  seed: int) -> tff.learning.templates.ClientWorkProcess:
  """`client_work` whose client data is `<data=D, canary=int32*>` (one element).

  Args:
    client_work: A client work process whose `next` takes `(state, weights, D@CLIENTS)`
      and whose result is a `ClientResult(update, update_weight)`.
    norm: The L2 norm of a canary's update (at least the clip norm, so that the
      aggregator's clip binds).
    seed: The audit seed of the directions (`direction`).

  Returns:
    A `ClientWorkProcess` with the same state, weights and result types: a client with
    `canary = -1` runs `client_work` as before; one with `canary = j >= 0` runs it too
    (same cost) and its update is then replaced by `norm * u_j` (its weight kept).

  Raises:
    ValueError: If `norm` is not positive.
  """
  if not norm > 0:
    raise ValueError(f'norm must be positive. Found {norm!r}.')
  state_type, weights_type, data_type = client_work.next.type_signature.parameter
  member = data_type.member
  result_type = client_work.next.type_signature.result.result.member
  update_shapes = [t.shape for t in result_type.update]
  # TFF's client work takes sequences only: the index is a one-element sequence.
  wrapped = tff.StructType([('data', member),
                            ('canary', tff.SequenceType(tff.TensorType(np.int32)))])

  @tff.tensorflow.computation(wrapped)
  def data_of(value):
    return value['data']

  @tff.tensorflow.computation(wrapped)
  def canary_of(value):
    return value['canary'].reduce(tf.constant(NOT_A_CANARY), lambda _, x: x)

  @tff.tensorflow.computation(result_type, tff.TensorType(np.int32))
  def substitute(result, canary):
    update = list(result.update)
    canary_update = [norm * u for u in direction(seed, tf.maximum(canary, 0), update_shapes)]
    chosen = tf.nest.map_structure(lambda c, u: tf.where(canary >= 0, c, u),
                                   canary_update, update)
    return tff.learning.templates.ClientResult(update=chosen,
                                               update_weight=result.update_weight)

  @tff.federated_computation(state_type, weights_type, tff.FederatedType(wrapped,
                                                                        tff.CLIENTS))
  def next_fn(state, weights, values):
    out = client_work.next(state, weights, tff.federated_map(data_of, values))
    result = tff.federated_map(substitute, (out.result, tff.federated_map(canary_of, values)))
    return tff.templates.MeasuredProcessOutput(out.state, result, out.measurements)

  return tff.learning.templates.ClientWorkProcess(client_work.initialize, next_fn)


def cohort_round_computation(process: tff.learning.templates.LearningProcess,
                             client_data_comp: tff.Computation) -> tff.Computation:
  """One round of a canary-wrapped `process` on a cohort given by ids, seeds and canary
  indices: `(state, ids@CLIENTS, seeds@CLIENTS, canaries@CLIENTS) -> process.next output`.

  A canary client still needs data for the client work it replaces: give it any real
  client's id (its training is discarded).
  """
  state_type = process.next.type_signature.parameter[0]
  id_type, seed_type = client_data_comp.type_signature.parameter

  @tff.tensorflow.computation(id_type, seed_type, tff.TensorType(np.int32))
  def value(client_id, seed, canary):
    return collections.OrderedDict(data=client_data_comp(client_id, seed),
                                   canary=tf.data.Dataset.from_tensors(canary))

  @tff.federated_computation(state_type, tff.FederatedType(id_type, tff.CLIENTS),
                             tff.FederatedType(seed_type, tff.CLIENTS),
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def round_fn(state, client_ids, client_seeds, canaries):
    return process.next(state, tff.federated_map(value, (client_ids, client_seeds,
                                                          canaries)))
  return round_fn
