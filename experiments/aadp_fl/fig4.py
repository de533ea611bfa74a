"""AADP-FL Fig. 4: accuracy under different non-IID percentages (MNIST MLP).

    python -m experiments.aadp_fl.fig4 [--datasets mnist cifar10] [--data-dir DIR] [--quick]

Non-IID percentage p in {0, 0.25, 0.5, 0.75, 1}: a fraction p of the training data is
sorted by label and dealt as 2 shards per client, the rest IID (the `noniid_fraction`
partition; tffdp's reading of Sec. 6). epsilon = 4. The paper plots accuracy per p (no
number in the text). Controls at p = 0 and p = 1 (fidelity pass 2: MNIST falls to 37.68% at
p = 1): non-private FedAvg, and the Nadam control of Table 2 (AADP-FL's process without
noise, `S = 1e9`: nothing clipped), so the report can tell whether the partition itself,
the server Nadam, or AADP-FL's clipping and noise take the accuracy at p = 1. Writes
`fig4.csv`, `fig4_<dataset>.png` and `fig4_<dataset>_sweep.png` (one line per series).
"""

from __future__ import annotations

from experiments.aadp_fl import common
from experiments.aadp_fl.table2 import NO_CLIP

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
CONTROL_FRACTIONS = (0.0, 1.0)


def curves(dataset: str, args):
  out = []
  for p in common.sweep_values(FRACTIONS, args):
    tag = 'aadp_fl' if p == common.NON_IID else f'aadp_fl_noniid{p:g}'
    out.append((f'p = {p:g}', *common.config(dataset, args, tag,
                                             partition_options={'fraction': p}),
                dict(non_iid_percentage=p, series='AADP-FL')))
  for p in common.sweep_values(CONTROL_FRACTIONS, args):
    part = dict(partition_options={'fraction': p})
    out.append((f'FedAvg, p = {p:g}', *common.config(
        dataset, args, f'fedavg_noniid{p:g}', 'fedavg', **part),
                dict(non_iid_percentage=p, series=common.LABELS['fedavg'])))
    out.append((f'Nadam control, p = {p:g}', *common.config(
        dataset, args, f'nadam_control_noniid{p:g}', noise_scale='none', clip_norm=NO_CLIP,
        **part), dict(non_iid_percentage=p, series=common.LABELS['nadam_control'])))
  return out


def main(argv=None) -> int:
  return common.run_figure('fig4', __doc__, curves, argv, title='Fig. 4 (non-IID percentage)',
                           plots=(('test_accuracy', 'test accuracy', ''),),
                           sweep=('non_iid_percentage', 'non-IID percentage p'))


if __name__ == '__main__':
  common.entry(main)
