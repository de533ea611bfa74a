"""Client datasets that TFF builds from client ids, inside the computation.

`FederatedData` writes each client's examples once to two small files
(`<dir>/<id>.x`: raw uint8 pixels, `<dir>/<id>.y`: uint8 labels). Client datasets are
then built *inside* TFF from a client id: `client_data_computation(batching)` is a
`tff.tensorflow.computation` `(<client_id=string, seed=int64[2]>) -> <batches=D*, seed=int64[2]*>`
that reads the client's files, scales pixels to `[0, 1]` float32, and batches them as the
method prescribes, seeded. Nothing but the client ids and seeds crosses into TFF per
round. `tff_client_data` exposes the same data as a `tff.simulation.datasets.ClientData`
(whose `dataset_computation` builds a client's unbatched examples from its id).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import threading
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

SEED_SPEC = tf.TensorSpec([2], tf.int64)


@dataclasses.dataclass(frozen=True)
class ShuffleBatch:
  """Shuffle the client's examples, `local_epochs` passes, minibatches of `batch_size`.

  Each epoch is its own seeded permutation cut into `ceil(n / batch_size)` batches; the
  last, incomplete batch of an epoch is kept (`drop_remainder=False`, as in TFF's
  examples) and no batch spans two epochs. So a client runs exactly
  `local_epochs * ceil(n / batch_size)` steps and every example is in exactly one batch
  per epoch, as the DP-SGD accounting of `common.dp_sgd_releases` assumes.
  """
  batch_size: int
  local_epochs: int = 1

  def __post_init__(self):
    if self.batch_size <= 0:
      raise ValueError(f'batch_size must be positive. Found {self.batch_size}.')
    if self.local_epochs <= 0:
      raise ValueError(f'local_epochs must be positive. Found {self.local_epochs}.')


@dataclasses.dataclass(frozen=True)
class PoissonLot:
  """One lot per round: each example included independently with probability `rate`."""
  rate: float

  def __post_init__(self):
    if not 0.0 < self.rate <= 1.0:
      raise ValueError(f'rate must be in (0, 1]. Found {self.rate}.')


def _shuffled_order(n: tf.Tensor, seed: tf.Tensor, batching: ShuffleBatch) -> tf.Tensor:
  """int32 `[n * local_epochs]`: one seeded permutation of `range(n)` per epoch, concatenated."""
  return tf.concat([
      tf.random.experimental.stateless_shuffle(
          tf.range(n), seed=tf.random.experimental.stateless_fold_in(seed, e))
      for e in range(batching.local_epochs)], axis=0)


def _poisson_keep(n: tf.Tensor, seed: tf.Tensor, rate) -> tf.Tensor:
  """int32 indices of a Poisson sample of `range(n)` at `rate` (seed `fold_in(seed, 7)`)."""
  u = tf.random.stateless_uniform([n], seed=tf.random.experimental.stateless_fold_in(seed, 7))
  return tf.cast(tf.where(u < rate)[:, 0], tf.int32)


def _fingerprint(x: np.ndarray, y: np.ndarray, partition: Sequence[np.ndarray]) -> str:
  h = hashlib.sha1()
  h.update(str(x.shape).encode())
  h.update(np.ascontiguousarray(x[:: max(1, len(x) // 997)]).tobytes())
  h.update(np.ascontiguousarray(y).tobytes())
  for p in partition:
    h.update(np.asarray(p, np.int64).tobytes())
  return h.hexdigest()[:16]


def default_cache_dir() -> str:
  """`TFFDP_CACHE_DIR` if set, else `$XDG_CACHE_HOME/tffdp/clients` (`~/.cache/...`)."""
  if os.environ.get('TFFDP_CACHE_DIR'):
    return os.environ['TFFDP_CACHE_DIR']
  cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(cache, 'tffdp', 'clients')


def _writer_tag() -> str:
  """This process and thread, for temporary file names no other writer uses."""
  return f'{os.getpid()}-{threading.get_ident()}'


class FederatedData:
  """A partitioned training set whose client datasets TFF builds from client ids.

  Args:
    x: `uint8` images `[n, h, w, c]`.
    y: `int` labels `[n]` (values `< 256`).
    partition: One index array into `x`/`y` per client (see `tffdp.data.partition`).
    cache_dir: Where the per-client files go (a sub-folder keyed by a fingerprint of
      the data and partition, so repeated runs reuse them).

  Raises:
    ValueError: If a client has no examples, or shapes/dtypes are wrong.
  """

  def __init__(self, x: np.ndarray, y: np.ndarray, partition: Sequence[np.ndarray],
               cache_dir: str | None = None):
    if x.dtype != np.uint8:
      raise ValueError(f'x must be uint8. Found {x.dtype}.')
    if len(x) != len(y):
      raise ValueError(f'x and y differ in length: {len(x)} vs {len(y)}.')
    if int(np.max(y)) > 255 or int(np.min(y)) < 0:
      raise ValueError('labels must lie in [0, 255].')
    self.input_shape = tuple(x.shape[1:])
    self.num_clients = len(partition)
    self.client_sizes = np.array([len(p) for p in partition], dtype=np.int64)
    if np.any(self.client_sizes == 0):
      raise ValueError(f'client {int(np.argmin(self.client_sizes))} has no examples.')
    self.client_ids = [str(i) for i in range(self.num_clients)]
    self.label_histograms = np.stack([
        np.bincount(np.asarray(y)[p], minlength=int(np.max(y)) + 1) for p in partition])
    root = cache_dir or default_cache_dir()
    self.directory = os.path.join(root, _fingerprint(x, y, partition))
    done = os.path.join(self.directory, 'COMPLETE')
    if not os.path.exists(done):
      os.makedirs(self.directory, exist_ok=True)
      for cid, idx in zip(self.client_ids, partition):
        for suffix, arr in (('x', x[idx]), ('y', np.asarray(y)[idx].astype(np.uint8))):
          # A name of this writer's own: two runs of one partition started together
          # write the same files side by side, and each rename is atomic.
          tmp = os.path.join(self.directory, f'{cid}.{suffix}.{_writer_tag()}.tmp')
          with open(tmp, 'wb') as f:
            f.write(np.ascontiguousarray(arr).tobytes())
          os.replace(tmp, os.path.join(self.directory, f'{cid}.{suffix}'))
      tmp = f'{done}.{_writer_tag()}.tmp'
      with open(tmp, 'w') as f:
        f.write(f'{self.num_clients}\n')
      os.replace(tmp, done)

  def _examples_fn(self):
    directory, shape = self.directory, self.input_shape

    def examples(client_id: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      prefix = tf.strings.join([directory, '/', client_id])
      xs = tf.io.decode_raw(tf.io.read_file(prefix + '.x'), tf.uint8)
      xs = tf.cast(tf.reshape(xs, [-1, *shape]), tf.float32) / 255.0
      ys = tf.cast(tf.io.decode_raw(tf.io.read_file(prefix + '.y'), tf.uint8), tf.int32)
      return xs, ys
    return examples

  def poisson_lots(self, client_ids: tf.Tensor, seeds: tf.Tensor,
                   expected_lot_size: float, active: Optional[tf.Tensor] = None
                   ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Inside a TF computation: one Poisson-sampled lot per client, concatenated.

    Client `k` includes each of its `n_k` examples independently with probability
    `q_k = min(1, expected_lot_size / n_k)` (the lot of DP-SGD with sampling rate
    `L / |D^k|`), drawn from a stateless RNG seeded by `stateless_fold_in(seeds[k], 7)`.
    Only the sampled rows are converted to float.

    Args:
      client_ids: string `[S]` client ids (static `S`).
      seeds: int64 `[S, 2]` per-client seeds.
      expected_lot_size: `L` (examples).
      active: Optional bool `[S]`; an inactive client's lot is empty.

    Returns:
      `(x float32 [sum_k |lot_k|, h, w, c] in [0, 1], y int32 [sum_k |lot_k|],
      row_splits int64 [S + 1], num_examples float32 [S])`: client `k`'s lot is rows
      `row_splits[k]:row_splits[k + 1]`; `num_examples[k]` is `n_k = |D^k|`.
    """
    directory, shape = self.directory, self.input_shape
    xs, ys, sizes, totals = [], [], [], []
    for k in range(client_ids.shape[0]):
      prefix = tf.strings.join([directory, '/', client_ids[k]])
      labels = tf.io.decode_raw(tf.io.read_file(prefix + '.y'), tf.uint8)
      n = tf.shape(labels)[0]
      totals.append(tf.cast(n, tf.float32))
      rate = tf.minimum(1.0, expected_lot_size / tf.cast(n, tf.float32))
      if active is not None:
        rate = tf.where(active[k], rate, 0.0)
      keep = _poisson_keep(n, seeds[k], rate)
      pixels = tf.reshape(tf.io.decode_raw(tf.io.read_file(prefix + '.x'), tf.uint8),
                          [-1, *shape])
      xs.append(tf.cast(tf.gather(pixels, keep), tf.float32) / 255.0)
      ys.append(tf.cast(tf.gather(labels, keep), tf.int32))
      sizes.append(tf.shape(keep, out_type=tf.int64)[0])
    row_splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.stack(sizes))], 0)
    return tf.concat(xs, 0), tf.concat(ys, 0), row_splits, tf.stack(totals)

  def add_server_split(self, name: str, x: np.ndarray, y: np.ndarray) -> None:
    """Stores a server-side set (e.g. the validation split) beside the client files.

    TFF computations placed at SERVER read it with `server_examples(name)`; it is never
    part of any client's data.
    """
    if not name.isidentifier():
      raise ValueError(f'name must be an identifier. Found {name!r}.')
    for suffix, arr in (('x', x.astype(np.uint8)), ('y', np.asarray(y).astype(np.uint8))):
      path = os.path.join(self.directory, f'server_{name}.{suffix}')
      with open(path + '.tmp', 'wb') as f:
        f.write(np.ascontiguousarray(arr).tobytes())
      os.replace(path + '.tmp', path)

  def server_examples(self, name: str) -> tuple[tf.Tensor, tf.Tensor]:
    """Inside a TF computation: `(x float32 [n, h, w, c] in [0, 1], y int32 [n])`."""
    return self._examples_fn()(tf.constant(f'server_{name}'))

  @property
  def element_spec(self) -> collections.OrderedDict:
    """Spec of one batch: `x` float32 `[None, h, w, c]`, `y` int32 `[None]`."""
    return collections.OrderedDict(
        x=tf.TensorSpec([None, *self.input_shape], tf.float32),
        y=tf.TensorSpec([None], tf.int32))

  @property
  def client_data_type(self) -> tff.Type:
    """TFF type of one client's input to a tffdp client work: `<batches=D*, seed=int64[2]*>`."""
    return tff.StructType([
        ('batches', tff.SequenceType(tff.types.tensorflow_to_type(self.element_spec))),
        ('seed', tff.SequenceType(tff.TensorType(np.int64, [2]))),
    ])

  def tff_client_data(self) -> tff.simulation.datasets.ClientData:
    """The data as a `tff.simulation.datasets.ClientData` of unbatched examples."""
    examples = self._examples_fn()

    def dataset_fn(client_id):
      xs, ys = examples(client_id)
      return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=xs, y=ys))
    return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
        self.client_ids, dataset_fn)

  def client_batches(self, client_id: tf.Tensor, seed: tf.Tensor,
                     batching: ShuffleBatch | PoissonLot) -> tf.data.Dataset:
    """Inside a TF computation: client `client_id`'s batches as `batching` prescribes.

    Args:
      client_id: string scalar.
      seed: int64 `[2]`; shuffling uses `stateless_fold_in(seed, epoch)`, Poisson
        sampling `stateless_fold_in(seed, 7)`.
      batching: `ShuffleBatch` or `PoissonLot`.

    Returns:
      A dataset of `OrderedDict(x=float32 [b, h, w, c], y=int32 [b])` batches.
    """
    xs, ys = self._examples_fn()(client_id)
    n = tf.shape(ys)[0]
    if isinstance(batching, ShuffleBatch):
      order = tf.reshape(_shuffled_order(n, seed, batching), [batching.local_epochs, -1])
      # One epoch after the other, each cut into its own batches (none spans two epochs).
      ds = tf.data.Dataset.from_tensor_slices(order).flat_map(
          lambda epoch: tf.data.Dataset.from_tensor_slices(epoch).batch(batching.batch_size))
      return ds.map(
          lambda i: collections.OrderedDict(x=tf.gather(xs, i), y=tf.gather(ys, i)))
    keep = _poisson_keep(n, seed, batching.rate)
    return tf.data.Dataset.from_tensors(collections.OrderedDict(
        x=tf.gather(xs, keep), y=tf.gather(ys, keep)))

  def client_batch_indices(self, client_id: tf.Tensor, seed: tf.Tensor,
                           batching: ShuffleBatch | PoissonLot):
    """Inside a TF computation: the same batches as `client_batches`, as index tensors.

    Returns:
      `(x float32 [n, h, w, c], y int32 [n], order int [E * m], batch_size int32,
      num_batches int32, epoch_size int32)`: `order` holds `E` epochs of `m` indices; with
      `k = ceil(m / b)` batches per epoch, batch `s` is rows
      `order[e*m + j*b : e*m + min((j+1)*b, m)]` for `e, j = divmod(s, k)` (see
      `batch_rows`); a Poisson lot is one batch, possibly empty. No `tf.data` pipeline is
      built, which saves its per-client set-up cost inside a cohort slice.
    """
    xs, ys = self._examples_fn()(client_id)
    n = tf.shape(ys)[0]
    if isinstance(batching, ShuffleBatch):
      order = _shuffled_order(n, seed, batching)
      b = tf.constant(batching.batch_size, tf.int32)
      return xs, ys, order, b, batching.local_epochs * ((n + b - 1) // b), n
    keep = _poisson_keep(n, seed, batching.rate)
    size = tf.shape(keep)[0]
    return xs, ys, keep, tf.maximum(size, 1), tf.constant(1, tf.int32), size

  @staticmethod
  def batch_rows(order: tf.Tensor, step: tf.Tensor, batch_size: tf.Tensor,
                 epoch_size: tf.Tensor) -> tf.Tensor:
    """Inside a TF computation: the indices of batch `step` of `client_batch_indices`."""
    per_epoch = tf.maximum((epoch_size + batch_size - 1) // batch_size, 1)
    epoch, j = step // per_epoch, step % per_epoch
    start = epoch * epoch_size
    return order[start + j * batch_size:start + tf.minimum((j + 1) * batch_size, epoch_size)]

  def client_data_computation(self, batching: ShuffleBatch | PoissonLot) -> tff.Computation:
    """`(<client_id=string, seed=int64[2]>) -> <batches=D*, seed=int64[2]*>` (TFF computation).

    The returned `seed` sequence holds one element: the seed passed in, for the
    client work's stateless noise.
    """

    @tff.tensorflow.computation(tf.TensorSpec([], tf.string), SEED_SPEC)
    def build(client_id, seed):
      return collections.OrderedDict(batches=self.client_batches(client_id, seed, batching),
                                     seed=tf.data.Dataset.from_tensors(seed))
    return build
