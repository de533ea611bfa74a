"""Adap DP-FL Fig. 3: adaptive vs constant clipping (constant sigma 1.1).

    python -m experiments.adap_dp_fl_fig3 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Adaptive clipping (alpha 1.0 MNIST, 0.01 Fashion-MNIST) vs constant C = 1.0, both with
constant sigma = 1.1, until epsilon = 2. Paper: adaptive clipping wins on both datasets
(no number given). Adaptive clipping runs twice: with the budget applied to the paper's
count (gradient releases only, `clip_norm_query=free`: the paper's run length) and to
`epsilon_guaranteed` (which also counts the clipping-norm query; at sigma = 1.1 the joint
query costs epsilon 1.85 in one round, so that run stops after two rounds).

Writes `figures/adap_dp_fl/fig3_<dataset>.png` and `fig3.csv` (one row per curve:
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
  common_kw = dict(noise_multiplier=common.FIG3_SIGMA, noise_schedule='constant')
  return [
      ('adaptive clipping, budget on the paper\'s count',
       *common.config(dataset, args, 'fig3_adaptive_paper_count', clipping='adaptive',
                      clip_norm_query='free', **common_kw), None),
      ('adaptive clipping, budget on epsilon_guaranteed',
       *common.config(dataset, args, 'fig3_adaptive', clipping='adaptive', **common_kw), None),
      ('constant C = 1.0', *common.config(dataset, args, 'fig3_constant', clipping='constant',
                                          **common_kw), None)]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.adap_dp_fl_fig3',
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  common.add_common_flags(p)
  args = p.parse_args(argv)
  command = ['python', '-m', 'experiments.adap_dp_fl_fig3'] + list(
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
      fig = plotting.plot_curves(runs, y, ylabel, f'Adap DP-FL Fig. 3: {name}, '
                                 f'until epsilon = {common.BUDGET:g}')
      plotting.save(fig, os.path.join(args.figures_dir, f'fig3_{dataset}{suffix}.png'))
  common.write_table(os.path.join(args.figures_dir, 'fig3.csv'), table)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: test accuracy {r['tffdp_test_accuracy']}% "
          f"(paper {r['paper_test_accuracy']}), {r['rounds']} rounds, eps claimed "
          f"{r['epsilon_claimed']} / guaranteed {r['epsilon_guaranteed']}")
  return 0


if __name__ == '__main__':
  common.entry(main)
