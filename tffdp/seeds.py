"""The package's one seed scheme: every random draw of a run derives from its `seed`.

| draw | derivation |
|---|---|
| validation split, partition | `np.random.default_rng(seed)` (`tffdp.data`) |
| initial model weights | `tf.keras.utils.set_random_seed(seed)` before building the model |
| round `r`'s cohort (uniform / Poisson) | `round_rng(seed, r, COHORT)` |
| round `r`'s participant selection of a method (A-DPFL Alg. 2) | `round_rng(seed, r, SELECTION)` |
| client `c`'s batching and noise in round `r` | `client_seeds(seed, r, [c])`, an int64[2] stateless TF seed; each draw folds in its own salt (`tf.random.experimental.stateless_fold_in`: shuffle epoch `e`, Poisson lot 7, Adap DP-FL's gradient / norm noise salts) |
| client state initialisation (Adap DP-FL's `C_0`) | `client_seeds(seed, INITIAL_ROUND, clients)` |
| DP-FedAvg's server noise, release `t` | `fold_in(server_noise_seed(seed), t)` (`queries.StatelessGaussianSumQuery`; `t` is kept in the aggregator state) |

Because every draw is a pure function of `(seed, round, client)`, a resumed run, a run
with other cohort slices, and a run on remote workers draw the same values (tested).
Outside the scheme, drawn with TF's stateful RNG (fresh on every run and on resume), are
the noise of the aggregators that add noise on the clients' side of a TFF aggregator,
which sees no client id: AADP-FL's `PerClientGaussianFactory`, the cosAFed family's
`LaplaceUploadFactory`, DP-FedAGS's and its baselines' perturbation and cpSGD's, and
DDGauss's aggregator (TFF's `DistributedDpSumFactory` draws its own seeds: two reruns
of a committed DDGauss run differ from round 2 or 3, `experiments.check_reproduces`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

COHORT = 0
SELECTION = 1
INITIAL_ROUND = -1


def round_rng(seed: int, round_num: int, stream: int) -> np.random.Generator:
  """NumPy generator of one round's server-side draw (`stream`: `COHORT`, `SELECTION`)."""
  return np.random.default_rng([seed, round_num, stream])


def server_noise_seed(seed: int) -> np.ndarray:
  """The int64 `[2]` base seed of a server-side DP aggregator's noise.

  Its second word is -1, which no `client_seeds` entry has (client ids are `>= 0`).
  """
  return np.array([seed, -1], dtype=np.int64)


def client_seeds(seed: int, round_num: int, clients: Sequence[int]) -> list[np.ndarray]:
  """Per-client int64 `[2]` stateless TF seeds of one round (batching and noise)."""
  return [np.array([seed * 1_000_003 + round_num, int(c)], dtype=np.int64) for c in clients]
