"""Adap DP-FL Fig. 4: noise decay vs constant sigma (constant C = 1.0).

    python -m experiments.adap_dp_fl_fig4 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Noise decay (sigma_0 = 6, beta = 0.9999 MNIST; 4 and 0.9998 Fashion-MNIST) vs constant
sigma in {3, 4, 6} / {2, 3, 4}, constant C = 1.0, until epsilon = 2. Paper: MNIST 93.56% vs
92.87 / 92.86 / 92.34%; Fashion-MNIST 78.48% vs 77.28 / 77.03 / 75.14%. The decay runs
also give Fig. 6.

Writes `figures/adap_dp_fl/fig4_<dataset>.png` and `fig4.csv` (one row per curve:
paper and tffdp test accuracy at the stop, rounds, both epsilons, final sigma, wall time).
"""

from __future__ import annotations

import argparse
import os
import sys

from experiments import adap_dp_fl_common as common
from tffdp import plotting


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
  p = argparse.ArgumentParser(prog='python -m experiments.adap_dp_fl_fig4',
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  common.add_common_flags(p)
  args = p.parse_args(argv)
  command = ['python', '-m', 'experiments.adap_dp_fl_fig4'] + list(
      argv if argv is not None else sys.argv[1:])
  table = []
  for dataset in args.datasets:
    runs = {}
    for label, cfg, out, paper_acc in curves(dataset, args):
      runs[label] = common.run_cached(cfg, out, command)
      common.publish(out, args.figures_dir)
      table.append(common.summary_row(dataset, label, runs[label], out, paper_acc))
    name = common.LABEL[dataset]
    for y, ylabel, suffix in (('test_accuracy', 'test accuracy', ''),
                              ('test_loss', 'test loss', '_loss')):
      fig = plotting.plot_curves(runs, y, ylabel, f'Adap DP-FL Fig. 4: {name}, '
                                 f'until epsilon = {common.BUDGET:g}')
      plotting.save(fig, os.path.join(args.figures_dir, f'fig4_{dataset}{suffix}.png'))
  common.write_table(os.path.join(args.figures_dir, 'fig4.csv'), table)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: test accuracy {r['tffdp_test_accuracy']}% "
          f"(paper {r['paper_test_accuracy']}), {r['rounds']} rounds, eps claimed "
          f"{r['epsilon_claimed']} / guaranteed {r['epsilon_guaranteed']}")
  return 0


if __name__ == '__main__':
  common.entry(main)
