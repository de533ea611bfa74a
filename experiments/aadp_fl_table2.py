"""AADP-FL Table 2: accuracy at epsilon = 4 against FedAvg and DP-FedAvg (and Fig. 3's runs).

    python -m experiments.aadp_fl_table2 [--datasets mnist fashion_mnist cifar10] [--data-dir DIR] [--quick]

The paper's Table 2 is an image; its text claims AADP-FL is within 1 point of FedAvg on
MNIST and within 2 on Fashion-MNIST and CIFAR-10, ahead of DP-FedAvg, DDGauss and
DP-SCAFFOLD at epsilon = 4. Rows per dataset: FedAvg; AADP-FL (paper-literal, l = 1e-4);
AADP-FL with l = 2e-4 (the convergence test then fires: Amendment 4); DP-FedAvg at the
sigma of AADP-FL's Theorem 1 and at its own accountant's sigma (Amendment 6). DDGauss
and DP-SCAFFOLD are not built yet.

Writes `figures/aadp_fl/table2.csv`, `table2_<dataset>.png` (test accuracy per round)
and `table2_<dataset>_loss.png` (test loss per round: Fig. 3 for the MLP).
"""

from __future__ import annotations

from experiments import aadp_fl_common as common

PAPER_CLAIM = {'mnist': 'within 1 point of FedAvg', 'fashion_mnist': 'within 2 points',
               'cifar10': 'within 2 points'}


def curves(dataset: str, args):
  claim = dict(paper=PAPER_CLAIM[dataset])
  none = dict(paper='')
  return [
      (common.LABELS['fedavg'], *common.config(dataset, args, 'fedavg', 'fedavg'), none),
      (common.LABELS['aadp_fl'], *common.config(dataset, args, 'aadp_fl'), claim),
      ('AADP-FL, l = 2e-4', *common.config(dataset, args, 'aadp_fl_l2e-4', l=2e-4), none),
      (common.LABELS['dp_fedavg_theorem1'],
       *common.config(dataset, args, 'dp_fedavg_theorem1', 'dp_fedavg_theorem1'),
       dict(paper='behind AADP-FL')),
      (common.LABELS['dp_fedavg_own'],
       *common.config(dataset, args, 'dp_fedavg_own', 'dp_fedavg_own'), none),
  ]


def main(argv=None) -> int:
  return common.run_figure('table2', __doc__, curves, argv, title='Table 2 / Fig. 3',
                           default_datasets=('mnist', 'fashion_mnist'))


if __name__ == '__main__':
  common.entry(main)
