"""Adap DP-FL Fig. 4: noise decay vs constant sigma (constant C = 1.0).

    python -m experiments.adap_dp_fl.fig4 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Noise decay (sigma_0 = 6, beta = 0.9999 MNIST; 4 and 0.9998 Fashion-MNIST) vs constant
sigma in {3, 4, 6} / {2, 3, 4}, constant C = 1.0, until epsilon = 2. Paper: MNIST 93.56% vs
92.87 / 92.86 / 92.34%; Fashion-MNIST 78.48% vs 77.28 / 77.03 / 75.14%. The decay runs
also give Fig. 6.

Writes `figures/adap_dp_fl/fig4_<dataset>.png` and `fig4.csv` (one row per curve:
paper and tffdp test accuracy at the stop, rounds, both epsilons, final sigma, wall time).
"""

from __future__ import annotations

from experiments.adap_dp_fl import common


def curves(dataset: str, args) -> list[tuple[str, object, str, object]]:
  """(label, config, run directory, paper accuracy) of each curve of the figure."""
  paper, reported = common.PAPER[dataset], common.PAPER_RESULTS[dataset]
  out = [('noise decay', *common.config(dataset, args, 'decay', clipping='constant',
                                       noise_schedule='decay',
                                       noise_multiplier=paper['sigma_0']),
          reported['decay'])]
  for sigma in paper['constant_sigmas']:
    out.append((f'constant sigma = {sigma:g}',
                *common.config(dataset, args, f'constant_sigma{sigma:g}', clipping='constant',
                               noise_schedule='constant', noise_multiplier=sigma),
                reported['constant'][sigma]))
  return out


def main(argv=None) -> int:
  return common.run_figure(4, __doc__, curves, argv)


if __name__ == '__main__':
  common.entry(main)
