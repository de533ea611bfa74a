"""Adap DP-FL Fig. 5: Adap DP-FL vs DP-FL at epsilon = 2.

    python -m experiments.adap_dp_fl.fig5 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Adap DP-FL (adaptive clipping + noise decay from sigma_0) vs DP-FL (constant C = 1.0,
constant sigma = sigma_0: not given in the paper; chosen because it is the decay runs'
starting sigma, so the comparison isolates the two adaptive parts, and the run is Fig. 4's).
Paper: Adap DP-FL 94.15% MNIST, 79.56% Fashion-MNIST. Adap DP-FL runs with the budget on
the paper's count (`clip_norm_query=free`) and on `epsilon_guaranteed`, and with issue
11's readings of the threshold statistic (`unclipped`, `bounded`; budget on the paper's
count); `fig5_<dataset>_threshold.png` traces each curve's mean threshold.

Writes `figures/adap_dp_fl/fig5_<dataset>.png` and `fig5.csv` (one row per curve:
paper and tffdp test accuracy at the stop, rounds, both epsilons, final sigma, wall time).
"""

from __future__ import annotations

from experiments.adap_dp_fl import common


def curves(dataset: str, args) -> list[tuple[str, object, str, object]]:
  """(label, config, run directory, paper accuracy) of each curve of the figure."""
  paper, reported = common.PAPER[dataset], common.PAPER_RESULTS[dataset]
  sigma_0 = paper['sigma_0']
  return [
      ('Adap DP-FL, budget on the paper\'s count',
       *common.config(dataset, args, 'adap_dp_fl_paper_count', clipping='adaptive',
                      noise_schedule='decay', noise_multiplier=sigma_0,
                      clip_norm_query='free'),
       reported['adap_dp_fl']),
      ('Adap DP-FL, budget on epsilon_guaranteed',
       *common.config(dataset, args, 'adap_dp_fl', clipping='adaptive',
                      noise_schedule='decay', noise_multiplier=sigma_0),
       reported['adap_dp_fl']),
      (f'DP-FL (C = 1.0, sigma = {sigma_0:g})',
       *common.config(dataset, args, f'constant_sigma{sigma_0:g}', clipping='constant',
                      noise_schedule='constant', noise_multiplier=sigma_0),
       reported['constant'][sigma_0]),
      *common.statistic_curves(dataset, args, 'adap_dp_fl', clipping='adaptive',
                               noise_schedule='decay', noise_multiplier=sigma_0,
                               paper=reported['adap_dp_fl'])]


def main(argv=None) -> int:
  return common.run_figure(5, __doc__, curves, argv)


if __name__ == '__main__':
  common.entry(main)
