"""A-DPFL Fig. 4a (MNIST) / 4b (CIFAR-10): test accuracy vs round, 50 rounds, non-IID.

    python -m experiments.a_dpfl.fig4 --dataset mnist [--data-dir DIR] [--quick]

Non-private FL, DPFL, CL-FL and A-DPFL with Table 1 settings (see
`experiments/a_dpfl/common.py`), and issue 11's readings beside them (`--variants`, all by
default): A-DPFL with `--selection weighted_sample` and `uniform` (Alg. 2 as printed is a
static top-K), A-DPFL with Alg. 4 every 5 rounds, CL-FL at sigma 2 and 4. `--methods` runs
a subset of the four (e.g. `--methods fedavg a_dpfl --variants`, the CIFAR-10 rows issue 11
asks for first); the table keeps the rows an earlier invocation wrote. Writes
`figures/a_dpfl/fig4_<dataset>.png`, `fig4_<dataset>.csv` (final/best accuracy and both
epsilons per method) and each run's results under `figures/a_dpfl/fig4_<dataset>/<method>/`;
with `--local-epochs E` (E > 1) the names end in `_E<E>` (`fig4_<dataset>_E<E>.csv`),
beside the one-epoch ones.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.a_dpfl import common
from tffdp import plotting

METHODS = ('fedavg', 'dpfl', 'cl_fl', 'a_dpfl')


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.a_dpfl.fig4', description=__doc__)
  p.add_argument('--dataset', choices=('mnist', 'cifar10'), default='mnist')
  common.add_common_flags(p)
  p.add_argument('--variants', nargs='*', choices=tuple(common.VARIANTS),
                 default=list(common.VARIANTS))
  p.add_argument('--methods', nargs='+', choices=METHODS, default=list(METHODS),
                 help='the paper\'s curves to run (default: all four); the table and plot '
                 'keep the curves of an earlier invocation that this one does not run')
  args = p.parse_args(argv)
  command = p.command(argv)
  stem = common.artefact(args, f'fig4_{args.dataset}')
  runs, table = {}, []
  curves = [(m, common.LABELS[m], m, {}) for m in METHODS if m in args.methods]
  curves += [(slug, *common.VARIANTS[slug]) for slug in args.variants]
  items = []
  for slug, label, m, overrides in curves:
    cfg = common.method_config(m, args.dataset, args, **overrides)
    items.append((cfg, common.run_dir(args, cfg, f'{slug}_noniid')))
  # Runs another process holds (the same command launched twice) go last.
  rows = common.run_all(items, command, publish_to=os.path.join(args.figures_dir, stem),
                        publish_as=[c[0] for c in curves])
  for (_, label, _, _), (_, out), run_rows in zip(curves, items, rows):
    runs[label] = run_rows
    s = plotting.read_metrics(out)[-1]
    best = max(r['test_accuracy'] for r in runs[label])
    table.append(dict(method=label, final_test_accuracy=s['test_accuracy'],
                      best_test_accuracy=best, epsilon_claimed=s['epsilon_claimed'],
                      epsilon_guaranteed=s['epsilon_guaranteed'],
                      wall_seconds=s['wall_seconds'],
                      run=common.portable(out, args.runs_dir)))
  # Curves of an earlier invocation (say `--methods fedavg a_dpfl` first, the others
  # later): kept in the table and the plot, from their copies, in the figure's order.
  path = os.path.join(args.figures_dir, stem + '.csv')
  for row in common.read_rows(path) or []:
    if row['method'] not in runs:
      runs[row['method']] = plotting.read_metrics(
          os.path.join(args.figures_dir, stem, common.slug_of(row['method'])))
      table.append(row)
  order = list(common.LABELS.values()) + [v[0] for v in common.VARIANTS.values()]
  table.sort(key=lambda r: order.index(r['method']))
  runs = {r['method']: runs[r['method']] for r in table}
  name = {'mnist': 'MNIST', 'cifar10': 'CIFAR-10'}[args.dataset]
  fig = plotting.plot_curves(runs, 'test_accuracy', 'test accuracy',
                             f'A-DPFL Fig. 4 ({name}, non-IID label skew)')
  plotting.save(fig, os.path.join(args.figures_dir, stem + '.png'))
  common.write_table(path, table)
  for row in table:
    print(' | '.join(f'{v:.4g}' if isinstance(v, float) else str(v) for v in row.values()))
  return 0


if __name__ == '__main__':
  common.entry(main)
