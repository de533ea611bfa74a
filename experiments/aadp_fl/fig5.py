"""AADP-FL Fig. 5: longitudinal clipping threshold S without noise (MNIST MLP).

    python -m experiments.aadp_fl.fig5 [--datasets mnist cifar10] [--clips S ...]
        [--model M] [--data-dir DIR] [--quick]

AADP-FL with `noise_scale=none` (clipping only; no privacy) for S in {0.15, 0.2, 0.25,
0.3}. Paper: best S = 0.25 for the MNIST MLP, 0.2 for the CIFAR-10 CNN (range 0.15-0.3).
On MNIST, the control of the runs that fall back after their peak (fidelity pass 2): the
same S with Nadam's epsilon at 1e-3 instead of 1e-7 (`nadam_epsilon`), which floors each
coordinate's step divisor about where Table 2's noise floors the second moment. Writes
`fig5.csv`, `fig5_<dataset>.png` and `fig5_<dataset>_sweep.png` (one line per series).
"""

from __future__ import annotations

from experiments.aadp_fl import common

CLIPS = (0.15, 0.2, 0.25, 0.3)
PAPER_BEST = {'mnist': 0.25, 'fashion_mnist': None, 'cifar10': 0.2}
SERIES = 'AADP-FL without noise'
# The control: Nadam's epsilon near the root of the second moment that Table 2's noise
# leaves (std sigma S / B = 0.71 * 0.25 / 32 per client, over 20 clients: about 1e-3).
CONTROL_EPSILON = 1e-3
CONTROL_SERIES = f'the same, Nadam epsilon {CONTROL_EPSILON:g}'


def curves(dataset: str, args):
  clips = common.sweep_values(tuple(args.clips), args)
  out = [(f'S = {s:g}', *common.config(dataset, args, f'aadp_fl_noiseless_S{s:g}',
                                       clip_norm=s, noise_scale='none'),
          dict(clip_norm=s, paper_best_clip=PAPER_BEST[dataset] or '', series=SERIES))
         for s in clips]
  if dataset == 'mnist' and not args.model:
    out += [(f'S = {s:g}, Nadam epsilon {CONTROL_EPSILON:g}', *common.config(
        dataset, args, f'aadp_fl_noiseless_S{s:g}_nadam_eps{CONTROL_EPSILON:g}', clip_norm=s,
        noise_scale='none', nadam_epsilon=CONTROL_EPSILON),
             dict(clip_norm=s, paper_best_clip=PAPER_BEST[dataset] or '',
                  series=CONTROL_SERIES)) for s in clips]
  return out


def add_flags(p) -> None:
  p.add_argument('--clips', nargs='+', type=float, default=list(CLIPS),
                 help='thresholds S swept (default: the paper\'s 0.15-0.3; a model the paper '
                 'gives no S for, e.g. the MNIST CNN, may need a wider range)')


def main(argv=None) -> int:
  return common.run_figure('fig5', __doc__, curves, argv, title='Fig. 5 (S, no noise)',
                           plots=(('test_accuracy', 'test accuracy', ''),),
                           sweep=('clip_norm', 'clipping threshold S'), extra_flags=add_flags)


if __name__ == '__main__':
  common.entry(main)
