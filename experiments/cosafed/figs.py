"""cosAFed Figs. 2-7: curves, best accuracy and budget traces over N x epsilon.

    python -m experiments.cosafed.figs [--data-dir DIR] [--groups equal random] [--quick]

cosAFed on both partitions (Table 2 of the paper: groups 1-1 .. 2-15), N in {3, 5, 7},
epsilon in {100, 120, 150, 170, 200}, 350 rounds, seed 0. Writes
- `fig2_equal.png` / `fig3_random.png`: test accuracy and loss per round, one panel per
  epsilon, one line per N (the paper's Figs. 2-3);
- `fig4_equal.png` / `fig5_random.png`: best_acc against epsilon per N (Figs. 4-5);
- `fig6_equal.png` / `fig7_random.png`: the mean epsilon' of the round's clients per
  round, one panel per N, one line per epsilon (Figs. 6-7);
- `figs.csv`: one row per run (best and final accuracy, total budget, the share of
  uploads whose budget was lowered, the mean epsilon' / epsilon, wall time).
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.cosafed import common as cc
from tffdp import plotting

FIG_NUMBERS = {'equal': (2, 4, 6), 'random': (3, 5, 7)}


def _panels(runs, values, key_of, y, ylabel, title, path, label_of, smooth: int = 1):
  fig, axes = plt.subplots(1, len(values), figsize=(3.2 * len(values), 3.0), dpi=110,
                           sharey=True, squeeze=False)
  for ax, v in zip(axes[0], values):
    for (group_v, line), rows in runs.items():
      if group_v != v:
        continue
      pts = [(r['round'], r[y]) for r in rows if isinstance(r.get(y), float)]
      if smooth > 1 and pts:
        xs, ys = zip(*pts)
        k = min(smooth, len(ys))
        ys = [sum(ys[max(0, i - k + 1):i + 1]) / len(ys[max(0, i - k + 1):i + 1])
              for i in range(len(ys))]
        pts = list(zip(xs, ys))
      if pts:
        ax.plot(*zip(*pts), label=label_of(line), lw=0.9)
    ax.set_title(key_of(v), fontsize=8)
    ax.set_xlabel('round', fontsize=8)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=7)
  axes[0][0].set_ylabel(ylabel, fontsize=8)
  axes[0][-1].legend(fontsize=7)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  plotting.save(fig, path)


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.cosafed.figs', description=__doc__)
  cc.add_common_flags(p)
  p.add_argument('--groups', nargs='+', choices=tuple(cc.GROUPS), default=list(cc.GROUPS))
  args = p.parse_args(argv)
  command = p.command(argv)
  cohorts = (cc.COHORTS[0], cc.COHORTS[-1]) if args.quick else cc.COHORTS
  epsilons = (cc.EPSILONS[0], cc.EPSILONS[-1]) if args.quick else cc.EPSILONS
  path = os.path.join(args.figures_dir, 'figs.csv')
  table = [r for r in cc.read_rows(path) or [] if r['group'] not in args.groups]
  for group in args.groups:
    by_eps, by_n = {}, {}
    plan = [(eps, n, *cc.config(args, group, 'cosafed', cohort=n, epsilon=eps))
            for eps in epsilons for n in cohorts]
    # `run_all`: a second copy of the command runs the next configuration side by side.
    results = cc.run_all([(cfg, out) for *_, cfg, out in plan], command,
                         publish_to=os.path.join(args.figures_dir, 'runs'))
    for (eps, n, _, out), rows in zip(plan, results):
      for r in rows:
        r['epsilon_prime_mean'] = r['epsilon_prime_sum'] / n
      by_eps[(eps, n)] = rows
      by_n[(n, eps)] = rows
      uploads = n * len(rows)
      table.append(dict(
          group=group, cohort_size=n, epsilon=eps,
          best_test_accuracy=round(cc.best_accuracy(rows), 2),
          final_test_accuracy=round(cc.final_accuracy(rows), 2),
          total_budget=round(cc.total_budget(rows), 2),
          lowered_uploads_pct=round(100 * sum(r['adjusted_clients'] for r in rows) / uploads, 2),
          mean_budget_ratio=round(cc.total_budget(rows) / (uploads * eps), 4),
          floor_binding=int(sum(r['floor_binding'] for r in rows)),
          zero_budget_clients=int(sum(r['zero_budget_clients'] for r in rows)),
          wall_seconds=round(rows[-1]['wall_seconds'], 1),
          run=cc.portable(out, os.path.dirname(out))))
    f_curves, f_best, f_budget = FIG_NUMBERS[group]
    name = cc.GROUP_LABEL[group]
    for y, ylabel, suffix in (('test_accuracy', 'test accuracy', ''),
                              ('test_loss', 'test loss', '_loss')):
      _panels(by_eps, epsilons, lambda e: f'epsilon = {e:g}', y, ylabel,
              f'Fig. {f_curves}: cosAFed, {name} group, N in {cohorts}',
              os.path.join(args.figures_dir, f'fig{f_curves}_{group}{suffix}.png'),
              lambda n: f'N = {n}')
    _panels(by_n, cohorts, lambda n: f'N = {n}', 'epsilon_prime_mean',
            "mean epsilon' of the round's clients",
            f'Fig. {f_budget}: cosAFed budget per round, {name} group (10-round mean)',
            os.path.join(args.figures_dir, f'fig{f_budget}_{group}.png'),
            lambda e: f'epsilon = {e:g}', smooth=10)
    fig, ax = plt.subplots(figsize=(5.0, 3.6), dpi=120)
    rows_g = [r for r in table if r['group'] == group]
    for n in cohorts:
      pts = sorted((float(r['epsilon']), float(r['best_test_accuracy']))
                   for r in rows_g if int(r['cohort_size']) == n)
      ax.plot(*zip(*pts), marker='o', label=f'N = {n}')
    ax.set_xlabel('initial budget epsilon')
    ax.set_ylabel('best_acc (%)')
    ax.set_title(f'Fig. {f_best}: cosAFed best_acc, {name} group', fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    plotting.save(fig, os.path.join(args.figures_dir, f'fig{f_best}_{group}.png'))
  cc.write_table(path, sorted(table, key=lambda r: (r['group'], int(r['cohort_size']),
                                                    float(r['epsilon']))))
  for r in table:
    print(f"{r['group']} N={r['cohort_size']} eps={r['epsilon']}: best {r['best_test_accuracy']}%, "
          f"total budget {r['total_budget']}, lowered {r['lowered_uploads_pct']}% of uploads")
  return 0


if __name__ == '__main__':
  cc.entry(main)
