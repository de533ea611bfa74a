"""A-DPFL Fig. 6: final test accuracy vs the decay factor k on MNIST (A-DPFL, non-IID).

    python -m experiments.a_dpfl.fig6 [--data-dir DIR] [--k 0.3 0.4 ...] [--quick]

k in {0.3, 0.4, ..., 0.9}; k = 0.7 reuses the Fig. 4a run. Paper: a slow decline up
to k = 0.7, faster beyond. Writes `figures/a_dpfl/fig6_mnist.png`, `fig6_mnist.csv`
(final accuracy, final sigma, both epsilons and wall time per k) and each run's results
under `figures/a_dpfl/fig6_mnist/k<k>/` (`_E<E>` appended with `--local-epochs E`, E > 1).
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.a_dpfl import common
from tffdp import plotting


K_VALUES = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # Fig. 6's x axis
REUSED_K = 0.7  # Table 1's k: the Fig. 4a run


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.a_dpfl.fig6', description=__doc__)
  common.add_common_flags(p)
  p.add_argument('--k', type=float, nargs='+', default=list(K_VALUES))
  args = p.parse_args(argv)
  command = p.command(argv)
  stem = common.artefact(args, 'fig6_mnist')
  table = []
  ks = args.k[:2] if args.quick else args.k
  items = []
  for k in ks:
    cfg = common.method_config('a_dpfl', 'mnist', args, k=k)
    tag = 'a_dpfl_noniid' if k == REUSED_K else f'a_dpfl_noniid_k{k:g}'
    items.append((cfg, common.run_dir(args, cfg, tag)))
  # `run_all`: a second copy of the command runs the next configuration side by side.
  results = common.run_all(items, command, publish_to=os.path.join(args.figures_dir, stem),
                           publish_as=[f'k{k:g}' for k in ks])
  for k, (_, out), rows in zip(ks, items, results):
    table.append(dict(k=k, final_test_accuracy=rows[-1]['test_accuracy'],
                      final_noise_multiplier=rows[-1]['noise_multiplier'],
                      epsilon_claimed=rows[-1]['epsilon_claimed'],
                      epsilon_guaranteed=rows[-1]['epsilon_guaranteed'],
                      wall_seconds=rows[-1]['wall_seconds'],
                      run=common.portable(out, args.runs_dir)))
  common.write_table(os.path.join(args.figures_dir, stem + '.csv'), table)
  fig = plotting.plot_curves({'A-DPFL (MNIST)': [dict(r, round=r['k']) for r in table]},
                             'final_test_accuracy', 'final test accuracy',
                             'A-DPFL Fig. 6: accuracy vs decay factor k', xlabel='k')
  plotting.save(fig, os.path.join(args.figures_dir, stem + '.png'))
  for r in table:
    print(f"k={r['k']:g}: final test accuracy {r['final_test_accuracy']:.4f}, "
          f"epsilon_guaranteed {r['epsilon_guaranteed']:.3g}")
  return 0


if __name__ == '__main__':
  common.entry(main)
