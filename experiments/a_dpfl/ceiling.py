"""A-DPFL: non-private FedAvg on the IID split, the ceiling of Table 2's IID cell.

    python -m experiments.a_dpfl.ceiling [--datasets mnist] [--local-epochs 5]
        [--learning-rates 0.1 0.2] [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR]
        [--quick]

Table 2's private IID MNIST cell reads 98.9%, while non-private FedAvg tops out at
96.7-96.9% in the local-epochs sweep (`experiments.a_dpfl.local_epochs`), which runs the
non-IID label-skew split only. This runs FedAvg at Table 1's scale (1,000 clients, 100 a
round, B = 20, 50 rounds, MNIST) on Table 2's IID split (`a_dpfl.common.iid_overrides`)
and on the label-skew split, at the chosen local epochs and at each learning rate, so the
report can say whether the split, the learning rate or the setup itself bounds the IID
cell. The label-skew run at the sweep's setting is the sweep's own run (reused).

Beside them, the controls that split A-DPFL's own gap on the IID split: A-DPFL at the
chosen local epochs and `--control-learning-rate` (tffdp's chosen 0.1) with noise
multiplier 0, its clipping and top-K selection kept (`A-DPFL, no noise`; no privacy), and
the same with uniform cohorts instead of the top-K selection (`A-DPFL, no noise, uniform
selection`: the clipping alone, each round's K clients drawn afresh as FedAvg's are).

With `--datasets cifar10`, FedAvg on CIFAR-10's IID split alone at each learning rate
(Table 2's IID CIFAR-10 cell, 70.4%; the label-skew FedAvg runs are Fig. 4b's).

Writes `figures/a_dpfl/ceiling.csv` (method, final and best test accuracy, the gain over
the last 10% of rounds, wall time per run; the rows of datasets not run now are kept) and
each run's copy under `ceiling/`.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.a_dpfl import common
from experiments.a_dpfl.table2 import PAPER

PAPER_IID = 100 * PAPER[('mnist', 'IID')]   # Table 2, A-DPFL, MNIST, IID (private)
FEDAVG, CONTROL = 'FedAvg', 'A-DPFL, no noise'
UNIFORM_CONTROL = 'A-DPFL, no noise, uniform selection'


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.a_dpfl.ceiling', description=__doc__)
  common.add_common_flags(p, settings=False)
  p.add_argument('--datasets', nargs='+', choices=('mnist', 'cifar10'), default=['mnist'],
                 help='mnist: FedAvg on both splits and the A-DPFL controls; cifar10: '
                 'FedAvg on the IID split (default: mnist)')
  p.add_argument('--local-epochs', type=int, default=5)
  p.add_argument('--learning-rates', type=float, nargs='+', default=[0.1, 0.2])
  p.add_argument('--control-learning-rate', type=float, default=0.1,
                 help='client lr of the A-DPFL no-noise control (default: tffdp\'s chosen '
                 '0.1)')
  args = p.parse_args(argv)
  command = p.command(argv)
  plan, items = [], []
  for dataset in args.datasets:
    for lr in args.learning_rates:
      for split in ('iid', 'label_skew') if dataset == 'mnist' else ('iid',):
        overrides = common.iid_overrides(dataset, args) if split == 'iid' else {}
        cfg = common.method_config('fedavg', dataset, args, local_epochs=args.local_epochs,
                                   learning_rate=lr, **overrides)
        plan.append((dataset, FEDAVG, split, lr))
        items.append((cfg, common.run_dir(args, cfg, 'fedavg_iid' if split == 'iid'
                                          else 'fedavg_noniid')))
  if 'mnist' in args.datasets:
    plan, items = _controls(args, plan, items)
  # `run_all`: a second copy of the command runs the next configuration side by side.
  results = common.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'ceiling'))
  path = os.path.join(args.figures_dir, 'ceiling.csv')
  table = [r for r in common.read_rows(path) or [] if r['dataset'] not in args.datasets]
  for (dataset, method, split, lr), (cfg, out), rows in zip(plan, items, results):
    accs = [r['test_accuracy'] for r in rows if isinstance(r.get('test_accuracy'), float)]
    tail = max(1, len(accs) // 10)
    table.append(dict(
        dataset=dataset, method=method, partition=split, local_epochs=cfg.local_epochs,
        learning_rate=lr,
        final_test_accuracy=round(100 * accs[-1], 2), best_test_accuracy=round(100 * max(accs), 2),
        gain_last_10pct=round(100 * (accs[-1] - accs[-1 - tail]), 2) if len(accs) > tail else '',
        paper_private_iid=round(100 * PAPER[(dataset, 'IID')], 2) if split == 'iid' else '',
        rounds=int(rows[-1]['round']), wall_seconds=round(rows[-1]['wall_seconds'], 1),
        run=common.portable(out, args.runs_dir)))
  common.write_table(path, table)
  for r in table:
    print(f"{r['dataset']} {r['method']} {r['partition']} E={r['local_epochs']} "
          f"lr={float(r['learning_rate']):g}: final {r['final_test_accuracy']}% (best "
          f"{r['best_test_accuracy']}%, +{r['gain_last_10pct']} over the last 10% of rounds)")
  return 0


def _controls(args, plan: list, items: list) -> tuple[list, list]:
  """`plan` and `items` with the two A-DPFL no-noise controls on MNIST's IID split."""
  lr = args.control_learning_rate
  cfg = common.method_config('a_dpfl', 'mnist', args, local_epochs=args.local_epochs,
                             learning_rate=lr, noise_multiplier=0.0,
                             **common.iid_overrides('mnist', args))
  plan = plan + [('mnist', CONTROL, 'iid', lr)]
  items = items + [(cfg, common.run_dir(args, cfg, 'a_dpfl_iid_sigma0'))]
  cfg = common.method_config('a_dpfl', 'mnist', args, local_epochs=args.local_epochs,
                             learning_rate=lr, noise_multiplier=0.0, selection='uniform',
                             **common.iid_overrides('mnist', args))
  return (plan + [('mnist', UNIFORM_CONTROL, 'iid', lr)],
          items + [(cfg, common.run_dir(args, cfg, 'a_dpfl_iid_sigma0_uniform'))])


if __name__ == '__main__':
  common.entry(main)
