"""DP-FedAGS Table IV and Fig. 3: test accuracy per method and budget.

    python -m experiments.dp_fedags_table4 [--datasets mnist cifar10] [--epsilons 0.1 0.2 0.5]
        [--methods dp_fedavg_ags cpsgd dp_fedsnlc dp_fedags] [--data-dir DIR] [--quick]

Each method at each per-round budget epsilon (Sec. V-A settings: `dp_fedags_common`).
Table IV's metric is the **mean test accuracy over training**; the table reports it and
the final accuracy, both epsilons, the mean fraction of coordinates perturbed per
client-round (Amendment 2: the sparse-vector test is close to a coin flip), and the wall
time. DP-FedAvg and DP-FedSNLC are reconstructions; cpSGD uses k = 2^16 levels and the
clients' Theorem 1 `m` (the run's config lists both).

Writes `table4.csv` (rows of datasets not run now are kept), `fig3_<dataset>_eps<e>.png`
(test accuracy per round, the paper's Fig. 3) and each run's results under `runs/`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from experiments import dp_fedags_common as dc
from tffdp import plotting


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.dp_fedags_table4', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  dc.add_common_flags(p)
  p.add_argument('--epsilons', type=float, nargs='+', default=list(dc.EPSILONS))
  p.add_argument('--methods', nargs='+', choices=dc.METHODS, default=list(dc.METHODS))
  args = p.parse_args(argv)
  command = ['python', '-m', 'experiments.dp_fedags_table4'] + list(
      argv if argv is not None else sys.argv[1:])
  path = os.path.join(args.figures_dir, 'table4.csv')
  table = [r for r in dc.read_rows(path) or [] if r['dataset'] not in args.datasets]
  for dataset in args.datasets:
    plan = [(epsilon, method) for epsilon in args.epsilons for method in args.methods]
    items = [dc.config(args, dataset, method, epsilon) for epsilon, method in plan]
    # `run_all`: a second copy of the command runs the next configuration side by side.
    results = dc.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'runs'))
    curves_of = {epsilon: {} for epsilon in args.epsilons}
    for (epsilon, method), (_, out), rows in zip(plan, items, results):
      curves_of[epsilon][dc.METHOD_LABEL[method]] = rows
      paper = dc.PAPER_TABLE4.get((epsilon, method))
      last = rows[-1]
      frac = [r['significant_fraction'] for r in rows
              if isinstance(r.get('significant_fraction'), float)]
      table.append(dict(
          dataset=dataset, epsilon=epsilon, method=dc.METHOD_LABEL[method],
          paper_mean_accuracy=(paper[dc.DATASETS.index(dataset)] if paper else ''),
          mean_accuracy=round(dc.mean_accuracy(rows), 2),
          final_accuracy=round(dc.final_accuracy(rows), 2), rounds=int(last['round']),
          epsilon_claimed=last['epsilon_claimed'],
          epsilon_guaranteed=last['epsilon_guaranteed'],
          perturbed_fraction=round(statistics.mean(frac), 4) if frac else '',
          wall_seconds=round(last['wall_seconds'], 1),
          run=dc.portable(out, os.path.dirname(out))))
    for epsilon, curves in curves_of.items():
      plotting.save(plotting.plot_curves(
          curves, 'test_accuracy', 'test accuracy',
          f'DP-FedAGS Fig. 3: {dc.LABEL[dataset]}, epsilon = {epsilon:g}'),
          os.path.join(args.figures_dir, f'fig3_{dataset}_eps{epsilon:g}.png'))
  dc.write_table(path, table)
  for r in table:
    print(f"{r['dataset']} eps {r['epsilon']} {r['method']}: mean accuracy "
          f"{r['mean_accuracy']}% (paper {r['paper_mean_accuracy'] or '-'}), final "
          f"{r['final_accuracy']}%, perturbed fraction {r['perturbed_fraction']}")
  return 0


if __name__ == '__main__':
  dc.entry(main)
