"""AADP-FL Fig. 3, AlexNet-style panel: test loss per round on MNIST for every method.

    python -m experiments.aadp_fl.fig3 [--model alexnet_cnn] [--data-dir DIR] [--quick]

The MLP panel is Table 2's runs (`table2_mnist_loss.png`). This module runs the same
curves with another model, by default tffdp's narrowed AlexNet-style CNN (5 conv + 2
dense; the paper gives no widths, Amendment 5: labelled as narrowed): FedAvg, AADP-FL,
and DP-FedAvg, DDGauss, DP-SCAFFOLD at the sigma of AADP-FL's Theorem 1 (the paper's
reading, Amendment 6). Same settings as Table 2 (T = 50, B = 32, S = 0.25).

Writes `fig3.csv`, `fig3_mnist.png` (accuracy) and `fig3_mnist_loss.png` (the figure);
with another `--model M`, `fig3_M.csv`, `fig3_M_mnist.png`, `fig3_M_mnist_loss.png`.
"""

from __future__ import annotations

from experiments.aadp_fl import common

CURVES = ('fedavg', 'aadp_fl', 'dp_fedavg_theorem1', 'ddgauss_theorem1',
          'dp_scaffold_theorem1')


def curves(dataset: str, args):
  return [(f'{common.LABELS[c]}, {args.model}',
           *common.config(dataset, args, c, 'aadp_fl' if c == 'aadp_fl' else c),
           dict(model=args.model)) for c in args.curves]


def add_flags(p) -> None:
  p.add_argument('--curves', nargs='+', default=list(CURVES), choices=CURVES)


def main(argv=None) -> int:
  return common.run_figure('fig3', __doc__, curves, argv, title='Fig. 3 (AlexNet-style)',
                           extra_flags=add_flags, default_model='alexnet_cnn')


if __name__ == '__main__':
  common.entry(main)
