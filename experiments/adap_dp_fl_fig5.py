"""Adap DP-FL Fig. 5: Adap DP-FL vs DP-FL at epsilon = 2.

    python -m experiments.adap_dp_fl_fig5 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Adap DP-FL (adaptive clipping + noise decay from sigma_0) vs DP-FL (constant C = 1.0,
constant sigma = sigma_0: not given in the paper; chosen because it is the decay runs'
starting sigma, so the comparison isolates the two adaptive parts, and the run is Fig. 4's).
Paper: Adap DP-FL 94.15% MNIST, 79.56% Fashion-MNIST. Adap DP-FL runs with the budget on
the paper's count (`clip_norm_query=free`) and on `epsilon_guaranteed`.

Writes `figures/adap_dp_fl/fig5_<dataset>.png` and `fig5.csv` (one row per curve:
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
       reported['constant'][sigma_0])]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.adap_dp_fl_fig5',
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  common.add_common_flags(p)
  args = p.parse_args(argv)
  command = ['python', '-m', 'experiments.adap_dp_fl_fig5'] + list(
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
      fig = plotting.plot_curves(runs, y, ylabel, f'Adap DP-FL Fig. 5: {name}, '
                                 f'until epsilon = {common.BUDGET:g}')
      plotting.save(fig, os.path.join(args.figures_dir, f'fig5_{dataset}{suffix}.png'))
  common.write_table(os.path.join(args.figures_dir, 'fig5.csv'), table)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: test accuracy {r['tffdp_test_accuracy']}% "
          f"(paper {r['paper_test_accuracy']}), {r['rounds']} rounds, eps claimed "
          f"{r['epsilon_claimed']} / guaranteed {r['epsilon_guaranteed']}")
  return 0


if __name__ == '__main__':
  common.entry(main)
