"""A-DPFL participant evaluation and selection (pure NumPy).

Source: "Adaptive differentially private federated learning" (Discrete Dynamics in
Nature and Society), Sec. 5.2, Algorithm 2, eqs. 12-13; spec `a_dpfl.md`. The noise rule
(Alg. 4, eq. 15) runs inside TFF: `a_dpfl.noise_adjustment_step`.
"""

from __future__ import annotations

import numpy as np

SELECTION_MODES = ('top_k', 'weighted_sample', 'uniform')


def label_distributions(label_histograms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per-client and global label distributions from counts.

  Args:
    label_histograms: `int [N, num_classes]` label counts per client.

  Returns:
    `(p_clients [N, C], p_global [C])`, rows summing to 1 (the global distribution is
    that of all clients' data pooled).

  Raises:
    ValueError: If a client has no examples.
  """
  h = np.asarray(label_histograms, dtype=np.float64)
  sizes = h.sum(axis=1)
  if np.any(sizes <= 0):
    raise ValueError(f'client {int(np.argmin(sizes))} has no examples.')
  return h / sizes[:, None], h.sum(axis=0) / h.sum()


def wasserstein_distances(label_histograms: np.ndarray) -> np.ndarray:
  """`W_i = W1(p_i, p)` with the 0/1 ground metric: `0.5 * sum_y |p_i(y) - p(y)|`.

  Returns:
    float64 `[N]` in `[0, 1]`.
  """
  p_clients, p_global = label_distributions(label_histograms)
  return 0.5 * np.abs(p_clients - p_global[None, :]).sum(axis=1)


def selection_probabilities(distances: np.ndarray, l_z: float = 1.0) -> np.ndarray:
  """Eqs. 12-13: `c1 = L_Z sqrt(mean W^2)`, `SC_i = exp(-W_i / c1)`, `p_i = SC_i / sum SC`.

  If every distance is 0 (`c1 = 0`), all clients are equally good: uniform probabilities.
  """
  w = np.asarray(distances, dtype=np.float64)
  c1 = l_z * np.sqrt(np.mean(w ** 2))
  if c1 == 0:
    return np.full(len(w), 1.0 / len(w))
  sc = np.exp(-w / c1)
  return sc / sc.sum()


def select_participants(probabilities: np.ndarray, k: int, mode: str = 'top_k',
                        rng: np.random.Generator | None = None) -> np.ndarray:
  """Chooses `k` clients (sorted indices).

  Args:
    probabilities: `[N]` selection probabilities (eq. 13).
    k: Number of participants `K`, `1 <= K <= N`.
    mode: `top_k` (Alg. 2: the K largest probabilities; ties at the threshold go to the
      lower client index — the paper gives no rule), `weighted_sample` (K draws without
      replacement with probabilities `p_i`) or `uniform` (the DPFL baseline).
    rng: Generator for the random modes.

  Raises:
    ValueError: On an unknown mode or `k` outside `[1, N]`.
  """
  p = np.asarray(probabilities, dtype=np.float64)
  n = len(p)
  if not 1 <= k <= n:
    raise ValueError(f'k must be in [1, {n}]. Found {k}.')
  if mode == 'top_k':
    order = np.lexsort((np.arange(n), -p))  # descending p, then ascending index
    return np.sort(order[:k])
  rng = rng if rng is not None else np.random.default_rng()
  if mode == 'weighted_sample':
    return np.sort(rng.choice(n, size=k, replace=False, p=p))
  if mode == 'uniform':
    return np.sort(rng.choice(n, size=k, replace=False))
  raise ValueError(f'mode must be one of {SELECTION_MODES}. Found {mode!r}.')
