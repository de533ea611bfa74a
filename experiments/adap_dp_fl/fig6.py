"""Adap DP-FL Fig. 6: the noise multiplier sigma vs the epsilon spent (noise decay runs).

    python -m experiments.adap_dp_fl.fig6 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Reuses Fig. 4's noise-decay runs (constant C = 1.0, so both epsilons agree) and adds
Fig. 5's Adap DP-FL runs (adaptive clipping: the guaranteed epsilon also counts the
clipping-norm query, and the budget stops the run on it). Paper: sigma falls from 6 to
3.03 (MNIST) and from 4 to 2.11 (Fashion-MNIST) by epsilon = 2. Writes
`figures/adap_dp_fl/fig6_<dataset>.png` and `fig6.csv` (final sigma per run).
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.adap_dp_fl import common
from tffdp import plotting


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.adap_dp_fl.fig6', description=__doc__)
  common.add_common_flags(p)
  args = p.parse_args(argv)
  command = p.command(argv)
  table = []
  for dataset in args.datasets:
    paper, reported = common.PAPER[dataset], common.PAPER_RESULTS[dataset]
    runs = {}
    plan = (('noise decay (C = 1.0)', 'decay', 'constant', 'accounted'),
            ('Adap DP-FL, paper\'s count', 'adap_dp_fl_paper_count', 'adaptive', 'free'),
            ('Adap DP-FL, epsilon_guaranteed', 'adap_dp_fl', 'adaptive', 'accounted'))
    items = [common.config(dataset, args, tag, clipping=clipping, noise_schedule='decay',
                           noise_multiplier=paper['sigma_0'], clip_norm_query=query)
             for _, tag, clipping, query in plan]
    results = common.run_all_or_reuse(items, command, args)
    for (label, *_), (_, out), (rows, from_copy) in zip(plan, items, results):
      runs[label] = rows
      decays = (common.decays_from_sigma(paper['sigma_0'], paper['beta'],
                                         rows[-1]['noise_multiplier'])
                if from_copy else int(sum(r.get('noise_decayed') or 0 for r in rows)))
      table.append(dict(dataset=dataset, run=label, paper_final_sigma=reported['final_sigma'],
                        tffdp_final_sigma=round(rows[-1]['noise_multiplier'], 4),
                        rounds=int(rows[-1]['round']),
                        epsilon_claimed=round(rows[-1]['epsilon_claimed'], 4),
                        epsilon_guaranteed=round(rows[-1]['epsilon_guaranteed'], 4),
                        decays=decays,
                        run_dir=common.portable(out, args.runs_dir)))
    for x, suffix in (('epsilon_claimed', ''), ('epsilon_guaranteed', '_guaranteed')):
      fig = plotting.plot_curves(
          runs, 'noise_multiplier', 'noise multiplier sigma', x=x,
          xlabel=x.replace('_', ' ') + ' (delta 1e-5, per client)',
          title=f'Adap DP-FL Fig. 6: {common.LABEL[dataset]}, sigma vs epsilon spent')
      plotting.save(fig, os.path.join(args.figures_dir, f'fig6_{dataset}{suffix}.png'))
  common.write_table(os.path.join(args.figures_dir, 'fig6.csv'), table)
  for r in table:
    print(f"{r['dataset']} {r['run']}: sigma {r['tffdp_final_sigma']} at the stop (paper "
          f"{r['paper_final_sigma']}), {r['rounds']} rounds, {r['decays']} decays")
  return 0


if __name__ == '__main__':
  common.entry(main)
