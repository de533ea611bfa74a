"""Partitioners: pure NumPy functions from labels to per-client index arrays.

Every partitioner takes the training labels (`int` array `[n]`), the number of
clients and a seed, and returns a list of `num_clients` sorted `int64` index arrays
into the training set. No index is assigned to more than one client. Definitions follow
the method specs (`../shared/specs/`):

| name | used by | definition |
|---|---|---|
| `iid` | all | uniform shuffle, equal sizes |
| `label_skew` | A-DPFL (Sec. 6.1, Fig. 3) | client with skew `s` draws `s` of its samples from one dominant label, `1 - s` uniformly from the others; dominant labels round-robin |
| `shards` | Adap DP-FL (Sec. V-A) | sort by label, cut into `S` shards, `m` random shards per client |
| `dirichlet` | DP-FedAGS (Sec. V-A) | per-label client proportions from Dirichlet(`alpha`) |
| `noniid_fraction` | AADP-FL (Sec. 6) | a fraction `p` of samples sorted by label and dealt as 2 shards per client, the rest IID |
| `label_shards_equal` | cosAFed (Sec. 5 "Equal", ref. [18]; Amendment 1) | every label cut to the same count, `k` shards per label, 2 shards of different labels per client |
| `label_shards` | cosAFed (Sec. 5 "Random", ref. [18]; Amendment 1) | the same without the cut: shard sizes follow the label counts |
| `equal` | cosAFed (spec body, superseded by Amendment 1) | IID labels, equal sizes |
| `random_size` | cosAFed (spec body, superseded by Amendment 1) | IID labels, sizes from Dirichlet(1.0) proportions, at least `min_size` each |
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

Partition = list[np.ndarray]


def _check_common(labels: np.ndarray, num_clients: int) -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f'labels must be 1-D. Found shape {labels.shape}.')
  if num_clients <= 0:
    raise ValueError(f'num_clients must be positive. Found {num_clients}.')
  if num_clients > len(labels):
    raise ValueError(
        f'num_clients ({num_clients}) exceeds the number of examples ({len(labels)}).')
  return labels


def _finish(parts: Sequence[np.ndarray]) -> Partition:
  return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def iid(labels: np.ndarray, num_clients: int, seed: int = 0,
        examples_per_client: Optional[int] = None) -> Partition:
  """Uniformly random, equal-size partition.

  Args:
    labels: `[n]` training labels.
    num_clients: Number of clients `N`.
    seed: Seed of the shuffle.
    examples_per_client: Examples per client; default `n // N`.
  """
  labels = _check_common(labels, num_clients)
  per = examples_per_client or len(labels) // num_clients
  if per * num_clients > len(labels):
    raise ValueError(f'examples_per_client * num_clients = {per * num_clients} '
                     f'exceeds the {len(labels)} examples.')
  perm = np.random.default_rng(seed).permutation(len(labels))
  return _finish(perm[i * per:(i + 1) * per] for i in range(num_clients))


def equal(labels: np.ndarray, num_clients: int, seed: int = 0) -> Partition:
  """cosAFed's "Equal" group: IID labels, every client the same size (Sec. 5)."""
  return iid(labels, num_clients, seed)


def random_size(labels: np.ndarray, num_clients: int, seed: int = 0,
                min_size: int = 10, concentration: float = 1.0) -> Partition:
  """cosAFed's "Random" group: IID labels, random client sizes.

  tffdp reading (spec `cosafed.md`): size proportions from a symmetric
  Dirichlet(`concentration`) over clients, at least `min_size` examples each; all
  examples are dealt.
  """
  labels = _check_common(labels, num_clients)
  n = len(labels)
  if min_size * num_clients > n:
    raise ValueError(f'min_size * num_clients = {min_size * num_clients} exceeds {n}.')
  rng = np.random.default_rng(seed)
  props = rng.dirichlet(np.full(num_clients, concentration))
  extra = n - min_size * num_clients
  sizes = min_size + np.floor(props * extra).astype(np.int64)
  sizes[np.argsort(-props)[: n - sizes.sum()]] += 1  # deal the rounding remainder
  perm = rng.permutation(n)
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  return _finish(perm[bounds[i]:bounds[i + 1]] for i in range(num_clients))


def label_skew(labels: np.ndarray, num_clients: int, seed: int = 0,
               examples_per_client: Optional[int] = None,
               skew: Optional[Sequence[float] | float] = None,
               num_classes: Optional[int] = None) -> Partition:
  """A-DPFL's label-skew partition (Sec. 6.1, Fig. 3).

  Client `i` has dominant label `i mod num_classes` (round-robin) and skew `s_i`: it
  draws `round(s_i * n_i)` examples of its dominant label and the rest uniformly from
  the examples of the other labels. Examples are drawn without replacement from one
  shared pool, so no example goes to two clients.

  Args:
    labels: `[n]` training labels.
    num_clients: Number of clients `N`.
    seed: Seed.
    examples_per_client: `n_i` (equal sizes); default `floor(0.95 * n / N)`. A skewed
      deal cannot use every example (the last clients would find only their dominant
      label left), so 5% is left undealt (MNIST without the 5,000 validation examples,
      N = 1000: 52 per client; A-DPFL states 60 with the full 60,000).
    skew: One float for every client (`0` = IID), a sequence of `N` floats, or `None`
      for the paper's non-IID setting `s_i ~ Uniform[0, 1)`.
    num_classes: Number of labels; default `max(labels) + 1`.

  Raises:
    ValueError: If a skew is outside `[0, 1]`, or the pool runs out of a label.
  """
  labels = _check_common(labels, num_clients)
  rng = np.random.default_rng(seed)
  per = examples_per_client or int(0.95 * len(labels) / num_clients)
  if per * num_clients > len(labels) or per <= 0:
    raise ValueError(f'examples_per_client must be in [1, n / N]. Found {per}.')
  num_classes = num_classes or int(labels.max()) + 1
  if skew is None:
    s = rng.uniform(0.0, 1.0, size=num_clients)
  else:
    s = np.broadcast_to(np.asarray(skew, dtype=np.float64), (num_clients,)).copy()
  if np.any((s < 0) | (s > 1)):
    raise ValueError(f'skew values must be in [0, 1]. Found min {s.min()}, max {s.max()}.')
  pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in range(num_classes)]
  dominant = np.arange(num_clients) % num_classes
  n_dom = np.round(s * per).astype(np.int64)
  parts: list[list[int]] = []
  # Pass 1: every client's dominant-label examples.
  for i in range(num_clients):
    if len(pools[dominant[i]]) < n_dom[i]:
      raise ValueError(f'label {dominant[i]} ran out of examples at client {i}: lower the '
                       'skew or examples_per_client.')
    parts.append([pools[dominant[i]].pop() for _ in range(n_dom[i])])
  # Pass 2: the rest uniformly from the remaining examples of the other labels.
  for i in range(num_clients):
    others = np.array([c for c in range(num_classes) if c != dominant[i]])
    counts = np.array([len(pools[c]) for c in others], dtype=np.float64)
    need = per - n_dom[i]
    if counts.sum() < need:
      raise ValueError(f'the other labels ran out of examples at client {i}: lower the '
                       'skew or examples_per_client.')
    draws = np.zeros(len(others), dtype=np.int64)
    for _ in range(need):
      k = rng.choice(len(others), p=counts / counts.sum())
      draws[k] += 1
      counts[k] -= 1
    for k, c in enumerate(others):
      parts[i].extend(pools[c].pop() for _ in range(draws[k]))
  return _finish(parts)


def shards(labels: np.ndarray, num_clients: int, seed: int = 0,
           num_shards: int = 400, shards_per_client: Optional[int] = None) -> Partition:
  """Adap DP-FL's shard partition (Sec. V-A; McMahan et al. 2017).

  Sort the examples by label (stable), cut them into `num_shards` equal contiguous
  shards (the remainder `n mod S` is dropped), give each client `m` random shards.

  Args:
    labels: `[n]` training labels.
    num_clients: Number of clients `N`.
    seed: Seed.
    num_shards: `S` (paper: 400).
    shards_per_client: `m` (paper: 40); default `S // N`.

  Raises:
    ValueError: If `N * m > S`.
  """
  labels = _check_common(labels, num_clients)
  m = shards_per_client or num_shards // num_clients
  if num_clients * m > num_shards:
    raise ValueError(f'num_clients * shards_per_client = {num_clients * m} exceeds '
                     f'num_shards = {num_shards}.')
  size = len(labels) // num_shards
  order = np.argsort(labels, kind='stable')
  shard_ids = np.random.default_rng(seed).permutation(num_shards)
  return _finish(
      np.concatenate([order[s * size:(s + 1) * size]
                      for s in shard_ids[i * m:(i + 1) * m]])
      for i in range(num_clients))


def dirichlet(labels: np.ndarray, num_clients: int, seed: int = 0,
              alpha: float = 1.0) -> Partition:
  """Dirichlet label partition (DP-FedAGS, Sec. V-A; Hsu et al. 2019).

  For each label, its examples are split among clients in proportions drawn from a
  symmetric Dirichlet(`alpha`). All examples are dealt.

  Raises:
    ValueError: If `alpha <= 0`.
  """
  labels = _check_common(labels, num_clients)
  if alpha <= 0:
    raise ValueError(f'alpha must be positive. Found {alpha}.')
  rng = np.random.default_rng(seed)
  parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  for c in np.unique(labels):
    idx = rng.permutation(np.flatnonzero(labels == c))
    props = rng.dirichlet(np.full(num_clients, alpha))
    cuts = (np.cumsum(props)[:-1] * len(idx)).astype(np.int64)
    for i, chunk in enumerate(np.split(idx, cuts)):
      parts[i].append(chunk)
  return _finish(np.concatenate(p) for p in parts)


def noniid_fraction(labels: np.ndarray, num_clients: int, seed: int = 0,
                    fraction: float = 0.5, shards_per_client: int = 2) -> Partition:
  """AADP-FL's non-IID percentage partition (Sec. 6; spec `aadp_fl.md`).

  A fraction `p` of the training examples is sorted by label and dealt as
  `shards_per_client` contiguous shards per client; the other `1 - p` is dealt IID in
  equal parts. `p = 0` is IID, `p = 1` the pure shard partition.

  Raises:
    ValueError: If `fraction` is outside `[0, 1]`.
  """
  labels = _check_common(labels, num_clients)
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f'fraction must be in [0, 1]. Found {fraction}.')
  rng = np.random.default_rng(seed)
  perm = rng.permutation(len(labels))
  n_sorted = int(round(fraction * len(labels)))
  sorted_part, iid_part = perm[:n_sorted], perm[n_sorted:]
  parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
  if n_sorted:
    order = sorted_part[np.argsort(labels[sorted_part], kind='stable')]
    num_shards = num_clients * shards_per_client
    size = len(order) // num_shards
    ids = rng.permutation(num_shards)
    for i in range(num_clients):
      for s in ids[i * shards_per_client:(i + 1) * shards_per_client]:
        parts[i].append(order[s * size:(s + 1) * size])
  per = len(iid_part) // num_clients
  for i in range(num_clients):
    parts[i].append(iid_part[i * per:(i + 1) * per])
  return _finish(np.concatenate(p) for p in parts)


def label_shards(labels: np.ndarray, num_clients: int, seed: int = 0,
                 shards_per_client: int = 2, equal_sizes: bool = False) -> Partition:
  """cosAFed's partitions after ref. [18] (Li et al. 2019, FedProx's MNIST; Amendment 1).

  Each label's examples (shuffled) are cut into `k = num_clients * shards_per_client /
  num_labels` contiguous shards; each client gets `shards_per_client` shards of
  distinct labels. "Random" (`equal_sizes=False`): shard sizes follow the label counts
  (MNIST, 100 clients: 271-337 with the full training set). "Equal" (`equal_sizes=True`,
  `label_shards_equal`): every label is first cut to the smallest label count rounded
  down to a multiple of `k` (the paper: 5,420 per digit, 542 per client, from all 60,000
  examples; with tffdp's 5,000-example validation split held out, the smallest digit
  leaves fewer).

  Raises:
    ValueError: If the shards cannot be dealt evenly, or `shards_per_client` exceeds
      the number of labels.
  """
  labels = _check_common(labels, num_clients)
  classes = np.unique(labels)
  total_shards = num_clients * shards_per_client
  if total_shards % len(classes) or shards_per_client > len(classes):
    raise ValueError(f'num_clients * shards_per_client = {total_shards} must be a multiple '
                     f'of the {len(classes)} labels, and shards_per_client <= '
                     f'{len(classes)}.')
  k = total_shards // len(classes)
  rng = np.random.default_rng(seed)
  pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
  if equal_sizes:
    keep = min(len(p) for p in pools) // k * k
    pools = [p[:keep] for p in pools]
  shard_list, shard_label = [], []
  for c, pool in enumerate(pools):
    for chunk in np.array_split(pool, k):
      shard_list.append(chunk)
      shard_label.append(c)
  shard_label = np.asarray(shard_label)
  # Deal shards so no client holds two of one label: shuffle, then repair by swaps.
  order = rng.permutation(total_shards).reshape(num_clients, shards_per_client)
  for _ in range(100 * total_shards):
    bad = [i for i in range(num_clients)
           if len(set(shard_label[order[i]])) < shards_per_client]
    if not bad:
      break
    i = bad[0]
    j, a, b = rng.integers(num_clients), rng.integers(shards_per_client), rng.integers(
        shards_per_client)
    order[i, a], order[j, b] = order[j, b], order[i, a]
  else:
    raise ValueError('could not deal shards of distinct labels to every client.')
  return _finish(np.concatenate([shard_list[s] for s in order[i]])
                 for i in range(num_clients))


def label_shards_equal(labels: np.ndarray, num_clients: int, seed: int = 0,
                       shards_per_client: int = 2) -> Partition:
  """cosAFed's "Equal" group: `label_shards` with every label cut to one count."""
  return label_shards(labels, num_clients, seed, shards_per_client, equal_sizes=True)


PARTITIONERS: dict[str, Callable[..., Partition]] = {
    'iid': iid,
    'label_skew': label_skew,
    'shards': shards,
    'dirichlet': dirichlet,
    'noniid_fraction': noniid_fraction,
    'equal': equal,
    'random_size': random_size,
    'label_shards_equal': label_shards_equal,
    'label_shards': label_shards,
}


def partition(name: str, labels: np.ndarray, num_clients: int, seed: int = 0,
              **kwargs) -> Partition:
  """Dispatches to a partitioner by name.

  Raises:
    ValueError: If `name` is unknown (the message lists the valid names).
  """
  if name not in PARTITIONERS:
    raise ValueError(f'Unknown partition {name!r}. Valid partitions: '
                     f'{", ".join(PARTITIONERS)}.')
  return PARTITIONERS[name](labels, num_clients, seed=seed, **kwargs)
