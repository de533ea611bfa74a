"""DP-FedAGS: non-private FedAvg at the paper's settings, the reference for Table IV.

    python -m experiments.dp_fedags.reference [--datasets mnist cifar10] [--data-dir DIR]
        [--runs-dir DIR] [--figures-dir DIR] [--quick]

Sec. V-A's setup (100 clients, 10 per round, Dirichlet(1.0), batch 128, E = 1, lr, T and
model per dataset) with plain FedAvg: no clipping, no noise, example-weighted mean. It
separates what the setup reaches from what the mechanisms cost: where a private method
sits near this reference, its noise barely matters; where all four sit far below the
paper's numbers and this reference does too, the gap is the setup's (model, rounds,
local work), not the mechanisms'. Writes `reference.csv` (mean and final test accuracy,
wall time) into `--figures-dir` and each run's results under `runs/`.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.dp_fedags import common as dc


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.dp_fedags.reference', description=__doc__)
  dc.add_common_flags(p)
  args = p.parse_args(argv)
  command = p.command(argv)
  path = os.path.join(args.figures_dir, 'reference.csv')
  table = [r for r in dc.read_rows(path) or [] if r['dataset'] not in args.datasets]
  items = [dc.config(args, dataset, 'fedavg', None) for dataset in args.datasets]
  # `run_all`: a second copy of the command runs the next dataset side by side.
  results = dc.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'runs'))
  for dataset, (_, out), rows in zip(args.datasets, items, results):
    table.append(dict(dataset=dataset, method='FedAvg (non-private)',
                      mean_accuracy=round(dc.mean_accuracy(rows), 2),
                      final_accuracy=round(dc.final_accuracy(rows), 2),
                      rounds=int(rows[-1]['round']),
                      wall_seconds=round(rows[-1]['wall_seconds'], 1),
                      run=dc.portable(out, os.path.dirname(out))))
    print(f"{dataset} non-private FedAvg: mean accuracy {table[-1]['mean_accuracy']}%, "
          f"final {table[-1]['final_accuracy']}%")
  dc.write_table(path, table)
  return 0


if __name__ == '__main__':
  dc.entry(main)
