"""Adap DP-FL: controls of Fig. 4's constant-sigma gap (fidelity pass 2, item 3).

    python -m experiments.adap_dp_fl.controls [--datasets fashion_mnist mnist]
        [--no-stop 3 decay fig5_unclipped] [--data-dir DIR] [--runs-dir DIR]
        [--figures-dir DIR] [--quick]

Fig. 4's constant-sigma curves land 3.7-6.4 points below the paper on Fashion-MNIST while
MNIST matches. Beside Fig. 4's constant sigma = sigma_min run (2 Fashion-MNIST, 3 MNIST;
reused), at the same setup otherwise, this runs:

- `no noise, clipped`: sigma = 0, the same per-example clip C = 1, as many rounds as the
  sigma_min run made (what the clipping and the step budget allow without noise);
- `no noise, no clipping`: sigma = 0 and C = 1e9, the same rounds (the setup's ceiling at
  this many Adam steps);
- `no validation hold-out`: sigma_min until epsilon = 2 with `num_validation = 0` (the
  paper's clients hold 6,000 examples, not 5,480: q = 78 / 6,000, so more rounds to the
  budget; evaluated on the test set alone);
- `lr x 2`: sigma_min until epsilon = 2 at twice the paper's learning rate;
- `the author's CNN code`: sigma_min until epsilon = 2 with the CNN as the Adap DP-FL
  author's public PyTorch code builds it (`models.adap_dp_fl_cnn_torch`: first conv padded
  by 2, not 3, and PyTorch's default initialisation instead of Keras');
- `no budget stop`: sigma_min for `NO_STOP_FACTOR` times the sigma_min run's rounds, the
  budget not applied (epsilon runs past 2): whether the run was still learning where the
  budget stopped it, and at which round (and epsilon) it comes within the tolerance of the
  paper's accuracy (the paper does not give its runs' lengths);
- `fresh Adam moments`: sigma_min until epsilon = 2 with each client's Adam moments reset
  every round (`client_optimizer_state=reset`; the paper does not say whether they carry
  over, and with noisy gradients fresh moments take larger steps).

`--no-stop` adds the `no budget stop` control for other curves: each Fig. 4 constant
sigma given, `decay` (Fig. 4's noise decay curve, its schedule going on past the
budget) and `fig5_unclipped` (Fig. 5's Adap DP-FL with the noisy mean of the unclipped
norms, the budget on the paper's count: the reading of Fig. 5 closest to the paper),
for `NO_STOP_FACTOR` times the rounds of that curve's run (reused), compared with that
curve's paper accuracy.

Writes `controls.csv` (one row per curve: test accuracy at the stop, rounds, both
epsilons, the first evaluated round within the fidelity tolerance of the paper's sigma_min
accuracy (for a `--no-stop` curve: its own paper accuracy) and both epsilons there;
rows of datasets not run now are kept) and
`controls_<dataset>.png`.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.adap_dp_fl import common
from experiments import fidelity
from tffdp import plotting

NO_CLIP = 1e9   # far above any per-example gradient norm: nothing is clipped
AUTHOR_CNN = "the author's CNN code (pad 2, PyTorch init)"
NO_STOP_FACTOR = 4  # the no-budget-stop control's length, in sigma_min runs
NO_STOP = 'no budget stop'
FRESH_ADAM = 'fresh Adam moments each round'
# `--no-stop` curves besides Fig. 4's: (the `fig5` config tag of the Fig. 5 run of that
# reading, the control's own tag, its label, the reading's options).
FIG5_NO_STOP = {'fig5_unclipped': ('adap_dp_fl_unclipped_paper_count',
                                   'adap_dp_fl_unclipped',
                                   "Fig. 5's Adap DP-FL, unclipped norms",
                                   dict(clip_statistic='unclipped', clip_norm_query='free'))}


def sigma_min(dataset: str) -> float:
  return min(common.PAPER[dataset]['constant_sigmas'])


def curves(dataset: str, args, rounds: int) -> list:
  """(label, config, run directory) of each control; `rounds`: the sigma_min run's."""
  sigma = sigma_min(dataset)
  lr = common.PAPER[dataset]['learning_rate']
  constant = dict(clipping='constant', noise_schedule='constant')
  return [
      (f'constant sigma = {sigma:g} (Fig. 4)', *common.config(
          dataset, args, f'constant_sigma{sigma:g}', noise_multiplier=sigma, **constant)),
      ('no noise, clipped (C = 1)', *common.config(
          dataset, args, 'control_sigma0_clipped', noise_multiplier=0.0, rounds=rounds,
          epsilon_budget=None, **constant)),
      ('no noise, no clipping', *common.config(
          dataset, args, 'control_sigma0_unclipped', noise_multiplier=0.0, rounds=rounds,
          epsilon_budget=None, clip_norm=NO_CLIP, **constant)),
      ('no validation hold-out', *common.config(
          dataset, args, f'control_sigma{sigma:g}_noval', noise_multiplier=sigma,
          num_validation=0, eval_validation=False, **constant)),
      (f'lr x 2 ({2 * lr:g})', *common.config(
          dataset, args, f'control_sigma{sigma:g}_lr{2 * lr:g}', noise_multiplier=sigma,
          learning_rate=2 * lr, **constant)),
      (AUTHOR_CNN, *common.config(
          dataset, args, f'control_sigma{sigma:g}_torch_cnn', noise_multiplier=sigma,
          model='adap_dp_fl_cnn_torch', **constant)),
      (f'{NO_STOP} ({NO_STOP_FACTOR}x the rounds)', *common.config(
          dataset, args, f'control_sigma{sigma:g}_no_stop', noise_multiplier=sigma,
          rounds=NO_STOP_FACTOR * rounds, epsilon_budget=None, **constant)),
      (FRESH_ADAM, *common.config(
          dataset, args, f'control_sigma{sigma:g}_fresh_adam', noise_multiplier=sigma,
          client_optimizer_state='reset', **constant)),
  ]


def no_stop_curves(dataset: str, args, command) -> list:
  """`(label, config, run directory, paper accuracy)` of the `no budget stop` control of
  each `--no-stop` curve (a constant sigma, `decay` or a `FIG5_NO_STOP` name; `main`
  checks them), `NO_STOP_FACTOR` times the rounds of that curve's Fig. 4 (or Fig. 5) run
  (run or reused here first)."""
  paper = common.PAPER_RESULTS[dataset]
  out = []
  for curve in args.no_stop:
    if curve in FIG5_NO_STOP:  # the same configuration as `fig5.curves`' run
      tag, control_tag, label, options = FIG5_NO_STOP[curve]
      kw = dict(clipping='adaptive', noise_schedule='decay',
                noise_multiplier=common.PAPER[dataset]['sigma_0'], **options)
      value = paper['adap_dp_fl']
    elif curve == 'decay':
      kw = dict(clipping='constant', noise_schedule='decay',
                noise_multiplier=common.PAPER[dataset]['sigma_0'])
      tag, label, value = 'decay', 'noise decay', paper['decay']
      control_tag = tag
    else:
      sigma = float(curve)
      kw = dict(clipping='constant', noise_schedule='constant', noise_multiplier=sigma)
      tag, label, value = f'constant_sigma{sigma:g}', f'sigma = {sigma:g}', paper['constant'][sigma]
      control_tag = tag
    (rows, _), = common.run_all_or_reuse([common.config(dataset, args, tag, **kw)], command,
                                         args)
    out.append((f'{NO_STOP}, {label} ({NO_STOP_FACTOR}x the rounds)', *common.config(
        dataset, args, f'control_{control_tag}_no_stop',
        rounds=NO_STOP_FACTOR * int(rows[-1]['round']),
        epsilon_budget=None, **kw), value))
  return out


def _float_or_none(text: str):
  try:
    return float(text)
  except ValueError:
    return None


def first_round_within(rows: list[dict], paper: float) -> tuple:
  """`(round, epsilon_guaranteed, epsilon_claimed)` of the first evaluated round whose
  test accuracy is within the fidelity tolerance of the paper's `paper` (%) or above it;
  three empty strings if none."""
  for r in rows:
    acc = r.get('test_accuracy')
    if acc not in (None, '') and (100 * float(acc) >= paper or
                                  fidelity.within('accuracy', paper, 100 * float(acc))):
      return (int(r['round']), round(float(r['epsilon_guaranteed']), 4),
              round(float(r['epsilon_claimed']), 4))
  return ('', '', '')


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.adap_dp_fl.controls', description=__doc__)
  common.add_common_flags(p)
  p.add_argument('--no-stop', nargs='+', default=[], metavar='CURVE',
                 help='curves to run the no budget stop control at besides sigma_min: a '
                 'Fig. 4 constant sigma, decay (Fig. 4), or '
                 + ', '.join(FIG5_NO_STOP) + ' (Fig. 5)')
  p.set_defaults(datasets=['fashion_mnist'])
  args = p.parse_args(argv)
  command = p.command(argv)
  for dataset in args.datasets:
    sigmas = common.PAPER_RESULTS[dataset]['constant']
    bad = [c for c in args.no_stop if c not in ('decay', *FIG5_NO_STOP)
           and _float_or_none(c) not in sigmas]
    if bad:
      p.error(f'--no-stop takes decay, {", ".join(FIG5_NO_STOP)} or a Fig. 4 sigma of {dataset} '
              f'({", ".join(f"{s:g}" for s in sigmas)}). Found {" ".join(bad)}.')
  table = []
  for dataset in args.datasets:
    # The sigma_min run first: its length sets the noise-free controls' rounds.
    first = curves(dataset, args, rounds=1)[0]
    (rows, _), = common.run_all_or_reuse([first[1:]], command, args)
    paper = common.PAPER_RESULTS[dataset]['constant'][sigma_min(dataset)]
    extra = no_stop_curves(dataset, args, command)
    plan = [(*c, paper) for c in curves(dataset, args, rounds=int(rows[-1]['round']))] + extra
    results = common.run_all_or_reuse([(cfg, out) for _, cfg, out, _ in plan], command, args)
    runs = {}
    for (label, _, out, paper), (rows, _) in zip(plan, results):
      runs[label] = rows
      at, eps, claimed = first_round_within(rows, paper)
      table.append(dict(common.summary_row(dataset, label, rows, out,
                                           paper if 'Fig. 4' in label else None),
                        first_round_within_tolerance=at, epsilon_guaranteed_there=eps,
                        epsilon_claimed_there=claimed))
    plotting.save(plotting.plot_curves(
        runs, 'test_accuracy', 'test accuracy',
        f'Adap DP-FL Fig. 4 controls: {common.LABEL[dataset]}'),
        os.path.join(args.figures_dir, f'controls_{dataset}.png'))
  common.write_dataset_table(os.path.join(args.figures_dir, 'controls.csv'), table,
                             args.datasets, common.DATASETS)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: test accuracy {r['tffdp_test_accuracy']}% "
          f"(paper {r['paper_test_accuracy'] or '-'}), {r['rounds']} rounds, eps claimed "
          f"{r['epsilon_claimed']} / guaranteed {r['epsilon_guaranteed']}")
  return 0


if __name__ == '__main__':
  common.entry(main)
