"""Adap DP-FL: the seed spread of the cheapest Fig. 4 curve (issue 11, point 7).

    python -m experiments.adap_dp_fl.seeds [--datasets mnist fashion_mnist]
        [--seeds 0 1 2] [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR] [--quick]

Fig. 4's constant sigma = 3 curve (constant C = 1.0, until epsilon = 2; about 9,000
rounds, 25 min on 2 cores) once per seed (the seed sets the partition, the model's
initialisation, the lots and the noise). Seed 0 is Fig. 4's own run (reused). Writes
`seeds.csv` (one row per dataset and seed: final test accuracy, rounds, both epsilons,
wall time); `adap_dp_fl.report` puts the spread (max - min over the seeds) beside every
ordering verdict of Figs. 4 and 5.
"""

from __future__ import annotations

import copy
import os
import statistics

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.adap_dp_fl import common

SIGMA = 3.0


def spread(rows: list[dict], dataset: str):
  """`(max - min, population std, n)` of the seeds' final test accuracy (points)."""
  accs = [float(r['tffdp_test_accuracy']) for r in rows if r['dataset'] == dataset]
  if len(accs) < 2:
    return None
  return max(accs) - min(accs), statistics.pstdev(accs), len(accs)


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.adap_dp_fl.seeds', description=__doc__)
  common.add_common_flags(p)
  p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
  args = p.parse_args(argv)
  command = p.command(argv)
  path = os.path.join(args.figures_dir, 'seeds.csv')
  old = common.read_rows(path) or []
  table = [r for r in old if r['dataset'] not in args.datasets]
  for dataset in args.datasets:
    items = []
    for seed in args.seeds:
      seeded = copy.copy(args)
      seeded.seed = seed
      items.append(common.config(dataset, seeded, f'constant_sigma{SIGMA:g}',
                                 clipping='constant', noise_schedule='constant',
                                 noise_multiplier=SIGMA))
    results = common.run_all_or_reuse(items, command, args)
    for seed, (_, out), (rows, _) in zip(args.seeds, items, results):
      table.append(dict(seed=seed, **common.summary_row(
          dataset, f'constant sigma = {SIGMA:g}', rows, out, None)))
    s = spread(table, dataset)
    if s:
      print(f'{dataset}: constant sigma {SIGMA:g} over {s[2]} seeds: spread {s[0]:.2f} '
            f'points (std {s[1]:.2f})')
  common.write_table(path, table)
  return 0


if __name__ == '__main__':
  common.entry(main)
