"""DP-FedAGS pilot: the sensitivity reading that decides whether anything trains.

    python -m experiments.dp_fedags.pilot [--datasets mnist] [--rounds 20]
        [--epsilons 0.1 0.5] [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR] [--quick]

Amendment 1: with the paper's `Delta_S = C` eq. 2's noise is about 1e4 times the
gradient's entries. This runs DP-FedAGS with `--delta-s clip` for `--rounds` rounds at
each epsilon (Sec. V-A settings otherwise) and writes `pilot.csv`: per round the test
accuracy, eq. 35's threshold, the fraction of coordinates the sparse-vector test selects,
the noise std against the mean `|g'_j|`, and eq. 37's weight range. The `scaled` reading
(tffdp's default) is the Table IV run of the same epsilon; `dp_fedags.report` puts the
two side by side.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.dp_fedags import common as dc

COLUMNS = ('test_accuracy', 'threshold', 'significant_fraction', 'noise_std',
           'mean_abs_gradient', 'weight_min', 'weight_max')


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.dp_fedags.pilot', description=__doc__)
  dc.add_common_flags(p)
  p.add_argument('--rounds', type=int, default=20)
  p.add_argument('--epsilons', type=float, nargs='+', default=[0.1, 0.5])
  args = p.parse_args(argv)
  command = p.command(argv)
  path = os.path.join(args.figures_dir, 'pilot.csv')
  table = [r for r in dc.read_rows(path) or [] if r['dataset'] not in args.datasets]
  for dataset in args.datasets:
    items = []
    for epsilon in args.epsilons:
      cfg, out = dc.config(args, dataset, 'dp_fedags', epsilon, delta_s='clip',
                           rounds=2 if args.quick else args.rounds)
      items.append((cfg, out + '_deltaS_clip'))
    # `run_all`: a second copy of the command runs the next configuration side by side.
    results = dc.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'runs'))
    for epsilon, (_, out), rows in zip(args.epsilons, items, results):
      for r in rows:
        table.append(dict(dataset=dataset, epsilon=epsilon, delta_s='clip',
                          round=int(r['round']), **{k: r.get(k, '') for k in COLUMNS},
                          run=dc.portable(out, os.path.dirname(out))))
      last = rows[-1]
      print(f'{dataset} eps {epsilon:g} Delta_S = C: test accuracy '
            f'{last["test_accuracy"]:.4f} after {int(last["round"])} rounds, noise std '
            f'{last["noise_std"]:.3g} vs mean |g\'| {last["mean_abs_gradient"]:.3g}')
  dc.write_table(path, table)
  return 0


if __name__ == '__main__':
  dc.entry(main)
