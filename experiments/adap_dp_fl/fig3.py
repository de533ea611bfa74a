"""Adap DP-FL Fig. 3: adaptive vs constant clipping (constant sigma 1.1).

    python -m experiments.adap_dp_fl.fig3 [--datasets mnist fashion_mnist] [--data-dir DIR] [--quick]

Adaptive clipping (alpha 1.0 MNIST, 0.01 Fashion-MNIST) vs constant C = 1.0, both with
constant sigma = 1.1, until epsilon = 2. Paper: adaptive clipping wins on both datasets
(no number given). Adaptive clipping runs twice: with the budget applied to the paper's
count (gradient releases only, `clip_norm_query=free`: the paper's run length) and to
`epsilon_guaranteed` (which also counts the clipping-norm query; at sigma = 1.1 the joint
query costs epsilon 1.85 in one round, so that run stops after two rounds). Issue 11's
readings of the threshold statistic run beside eq. 6 as written (`clip_statistic`:
`unclipped`, the noisy mean of the unclipped norms; `bounded`, norms clipped at C_max =
1), both with the budget on the paper's count; `fig3_<dataset>_threshold.png` traces
each curve's mean threshold.

Writes `figures/adap_dp_fl/fig3_<dataset>.png` and `fig3.csv` (one row per curve:
paper and tffdp test accuracy at the stop, rounds, both epsilons, final sigma, wall time).
"""

from __future__ import annotations

from experiments.adap_dp_fl import common


def curves(dataset: str, args) -> list[tuple[str, object, str, object]]:
  """(label, config, run directory, paper accuracy) of each curve of the figure."""
  common_kw = dict(noise_multiplier=common.FIG3_SIGMA, noise_schedule='constant')
  return [
      ('adaptive clipping, budget on the paper\'s count',
       *common.config(dataset, args, 'fig3_adaptive_paper_count', clipping='adaptive',
                      clip_norm_query='free', **common_kw), None),
      ('adaptive clipping, budget on epsilon_guaranteed',
       *common.config(dataset, args, 'fig3_adaptive', clipping='adaptive', **common_kw), None),
      ('constant C = 1.0', *common.config(dataset, args, 'fig3_constant', clipping='constant',
                                          **common_kw), None),
      *common.statistic_curves(dataset, args, 'fig3', clipping='adaptive', **common_kw)]


def main(argv=None) -> int:
  return common.run_figure(3, __doc__, curves, argv)


if __name__ == '__main__':
  common.entry(main)
