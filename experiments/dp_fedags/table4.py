"""DP-FedAGS Table IV and Fig. 3: test accuracy per method and budget.

    python -m experiments.dp_fedags.table4 [--datasets mnist cifar10] [--epsilons 0.1 0.2 0.5]
        [--methods dp_fedavg_ags cpsgd dp_fedsnlc dp_fedags] [--delta-s-scale K]
        [--seeds 0 1 2] [--data-dir DIR] [--quick]

Each method at each per-round budget epsilon (Sec. V-A settings: `dp_fedags.common`).
Table IV's metric is the **mean test accuracy over training**; the table reports it and
the final accuracy, both epsilons, the mean fraction of coordinates perturbed per
client-round (Amendment 2: the sparse-vector test is close to a coin flip), and the wall
time. DP-FedAvg and DP-FedSNLC are reconstructions; cpSGD uses k = 2^16 levels and the
clients' Theorem 1 `m` (the run's config lists both).

`--delta-s-scale` runs at `Delta_S = K 2 eta C / n_k` (default 1, Amendment 1's
reading; `calibrated` is the kappa `experiments.dp_fedags.calibrate` chose,
`dp_fedags.common.DELTA_S_SCALE`; the calibration's run of a cell is reused); `--seeds`
repeats every cell per seed.

Writes `table4.csv` (one row per dataset, kappa, seed, epsilon and method; the rows of
every other (dataset, kappa, seed, epsilon, method) are kept),
`fig3_<dataset>_eps<e>[_kappa<K>].png` (test accuracy per round
of the first seed, the paper's Fig. 3) and each run's results under `runs/`.
"""

from __future__ import annotations

import argparse
import os
import statistics

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.dp_fedags import common as dc
from tffdp import plotting


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.dp_fedags.table4', description=__doc__)
  dc.add_common_flags(p)
  p.add_argument('--epsilons', type=float, nargs='+', default=list(dc.EPSILONS))
  p.add_argument('--methods', nargs='+', choices=dc.METHODS, default=list(dc.METHODS))
  p.add_argument('--delta-s-scale', default='1',
                 help='kappa of Delta_S = kappa 2 eta C / n_k: a number, or calibrated '
                      '(dp_fedags_common.DELTA_S_SCALE)')
  p.add_argument('--seeds', type=int, nargs='+', default=None,
                 help='seeds of every cell (default: --seed)')
  args = p.parse_args(argv)
  kappa = dc.delta_s_scale(args.delta_s_scale, p.error)
  seeds = args.seeds if args.seeds is not None else [args.seed]
  command = p.command(argv)
  path = os.path.join(args.figures_dir, 'table4.csv')
  cells = {(d, kappa, s, float(e), dc.METHOD_LABEL[m]) for d in args.datasets
           for s in seeds for e in args.epsilons for m in args.methods}
  table = [dict(zip(('dataset', 'delta_s_scale', 'seed'), dc.table4_cell(r)),
                **{k: v for k, v in r.items() if k not in ('dataset', 'delta_s_scale', 'seed')})
           for r in dc.read_rows(path) or []
           if (*dc.table4_cell(r), float(r['epsilon']), r['method']) not in cells]
  for dataset in args.datasets:
    plan = [(seed, epsilon, method) for seed in seeds for epsilon in args.epsilons
            for method in args.methods]
    items = [dc.config(argparse.Namespace(**{**vars(args), 'seed': seed}), dataset, method,
                       epsilon, **({'delta_s_scale': kappa} if kappa != 1 else {}))
             for seed, epsilon, method in plan]
    # `run_all`: a second copy of the command runs the next configuration side by side.
    results = dc.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'runs'))
    curves_of = {epsilon: {} for epsilon in args.epsilons}
    for (seed, epsilon, method), (_, out), rows in zip(plan, items, results):
      if seed == seeds[0]:
        curves_of[epsilon][dc.METHOD_LABEL[method]] = rows
      paper = dc.PAPER_TABLE4.get((epsilon, method))
      last = rows[-1]
      frac = [r['significant_fraction'] for r in rows
              if isinstance(r.get('significant_fraction'), float)]
      table.append(dict(
          dataset=dataset, delta_s_scale=kappa, seed=seed, epsilon=epsilon,
          method=dc.METHOD_LABEL[method],
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
          f'DP-FedAGS Fig. 3: {dc.LABEL[dataset]}, epsilon = {epsilon:g}'
          + (f', Delta_S = {kappa:g} x 2 eta C / n_k' if kappa != 1 else '')),
          os.path.join(args.figures_dir, f'fig3_{dataset}_eps{epsilon:g}'
                       + (f'_kappa{kappa:g}' if kappa != 1 else '') + '.png'))
  table.sort(key=lambda r: (*dc.table4_cell(r), float(r['epsilon'])))
  dc.write_table(path, table)
  for r in table:
    print(f"{r['dataset']} kappa {r['delta_s_scale']} seed {r['seed']} eps {r['epsilon']} "
          f"{r['method']}: mean accuracy "
          f"{r['mean_accuracy']}% (paper {r['paper_mean_accuracy'] or '-'}), final "
          f"{r['final_accuracy']}%, perturbed fraction {r['perturbed_fraction']}")
  return 0


if __name__ == '__main__':
  dc.entry(main)
