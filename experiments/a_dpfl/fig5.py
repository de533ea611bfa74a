"""A-DPFL Fig. 5: the noise multiplier sigma vs round on MNIST (A-DPFL, non-IID).

    python -m experiments.a_dpfl.fig5 [--data-dir DIR] [--quick]

Reuses the A-DPFL MNIST run of Fig. 4a when it exists (same configuration). Paper:
sigma 1.0 held for 20 rounds, then 0.7 for 4, 0.49 for 4, 0.34 for 7, then shorter holds.
Writes `figures/a_dpfl/fig5_mnist.png` and `fig5_mnist.csv` (round, sigma, validation
accuracy).
"""

from __future__ import annotations

import csv
import os

from experiments import common as exp_common
from experiments.a_dpfl import common
from tffdp import plotting


def main(argv=None) -> int:
  p = exp_common.ArgumentParser(module='experiments.a_dpfl.fig5', description=__doc__)
  common.add_common_flags(p)
  args = p.parse_args(argv)
  command = p.command(argv)
  cfg = common.method_config('a_dpfl', 'mnist', args)
  out = common.run_dir(args, cfg, 'a_dpfl_noniid')
  rows = exp_common.run_all([(cfg, out)], command)[0]
  fig = plotting.plot_curves({'A-DPFL (MNIST)': rows}, 'noise_multiplier',
                             'noise multiplier sigma (used in the round)',
                             'A-DPFL Fig. 5: sigma vs round (k = 0.7)')
  os.makedirs(args.figures_dir, exist_ok=True)
  stem = common.artefact(args, 'fig5_mnist')
  plotting.save(fig, os.path.join(args.figures_dir, stem + '.png'))
  with open(os.path.join(args.figures_dir, stem + '.csv'), 'w') as f:
    w = csv.writer(f)
    w.writerow(['round', 'noise_multiplier', 'server_validation_accuracy', 'run'])
    for r in rows:
      w.writerow([int(r['round']), r['noise_multiplier'], r['server_validation_accuracy'],
                  common.portable(out, args.runs_dir)])
  holds = common.sigma_holds(r['noise_multiplier'] for r in rows)
  print('sigma holds (value x rounds): ' + ', '.join(f'{s:.3g} x {k}' for s, k in holds))
  return 0


if __name__ == '__main__':
  common.entry(main)
