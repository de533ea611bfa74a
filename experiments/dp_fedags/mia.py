"""DP-FedAGS Tables II-III: membership-inference attacks on the Table IV runs' final models.

    python -m experiments.dp_fedags.mia [--datasets mnist cifar10] [--epsilons 0.1 0.2 0.5]
        [--methods dp_fedavg_ags cpsgd dp_fedsnlc dp_fedags] [--examples 1000]
        [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR] [--quick]

For every finished Table IV run (`experiments.dp_fedags.table4`; runs not made are
listed as "not run"), the three attacks of `tffdp.mia` on its final model:

* members: `--examples` examples drawn from the clients' training data (a client is
  left out of all 200 rounds of 10 of 100 with probability 0.9^200, about 7e-10, so
  every client's data is in the model; in `--quick` runs some clients never train);
  non-members: as many examples of the validation split (a random slice of the same
  training files, never trained on: members and non-members are exchangeable draws);
* ML-Leaks' shadow model: the run's architecture trained centrally (10 epochs, SGD lr
  0.1, batch 128) on `--examples` test examples; its "out" set is as many other test
  examples.

Beside them, the same attacks on the non-private FedAvg reference of each dataset
(`experiments.dp_fedags.reference`; method `FedAvg (non-private)`, no epsilon): what the
attacks reach on this setup's models without clipping or noise.

Writes `mia.csv` (one row per run and attack: held-out accuracy, in-sample best
accuracy, AUC, TPR / FPR at the decision, the 95% lower bound on epsilon at the run's
delta (`tffdp.mia.kairouz_lower_bound`), both of the run's epsilons, the paper's
accuracy where Tables II-III give one) and caches each run's attack results as
`mia.json` in its run directory (keyed on the examples, the seed and the rounds done).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from typing import Optional

import numpy as np

from experiments.dp_fedags import common as dc
from tffdp import mia, models, runner
from tffdp.data import load_dataset, train_validation_split

# Table II of the paper: attack accuracy (%) per (dataset, epsilon, method), in the order
# Basic MIA, ML-Leaks, White-box (the order of `mia.evaluate`'s results).
PAPER_MIA = {
    ('mnist', 0.1, 'dp_fedavg_ags'): (50.01, 50.02, 50.02),
    ('cifar10', 0.1, 'dp_fedavg_ags'): (50.86, 51.42, 53.61),
    ('cifar100', 0.1, 'dp_fedavg_ags'): (51.45, 53.42, 55.01),
    ('mnist', 0.1, 'cpsgd'): (50.01, 50.01, 50.02),
    ('cifar10', 0.1, 'cpsgd'): (50.73, 51.31, 53.57),
    ('cifar100', 0.1, 'cpsgd'): (51.24, 53.31, 54.96),
    ('mnist', 0.1, 'dp_fedsnlc'): (50.09, 50.21, 50.24),
    ('cifar10', 0.1, 'dp_fedsnlc'): (51.38, 58.84, 62.59),
    ('cifar100', 0.1, 'dp_fedsnlc'): (54.77, 60.26, 65.86),
    ('mnist', 0.1, 'dp_fedags'): (50.04, 50.09, 50.11),
    ('cifar10', 0.1, 'dp_fedags'): (50.89, 51.80, 54.38),
    ('cifar100', 0.1, 'dp_fedags'): (51.92, 54.18, 55.84),
    ('mnist', 0.2, 'dp_fedavg_ags'): (50.04, 50.18, 50.35),
    ('cifar10', 0.2, 'dp_fedavg_ags'): (53.07, 55.12, 60.47),
    ('cifar100', 0.2, 'dp_fedavg_ags'): (55.63, 58.03, 61.76),
    ('mnist', 0.2, 'cpsgd'): (50.03, 50.16, 50.23),
    ('cifar10', 0.2, 'cpsgd'): (52.99, 55.06, 60.42),
    ('cifar100', 0.2, 'cpsgd'): (55.49, 57.65, 61.64),
    ('mnist', 0.2, 'dp_fedsnlc'): (50.15, 50.27, 50.55),
    ('cifar10', 0.2, 'dp_fedsnlc'): (55.56, 60.69, 67.19),
    ('cifar100', 0.2, 'dp_fedsnlc'): (58.46, 65.88, 69.49),
    ('mnist', 0.2, 'dp_fedags'): (50.09, 50.21, 50.36),
    ('cifar10', 0.2, 'dp_fedags'): (53.58, 55.33, 60.70),
    ('cifar100', 0.2, 'dp_fedags'): (55.84, 58.91, 62.07),
    ('mnist', 0.5, 'dp_fedavg_ags'): (50.13, 50.39, 50.83),
    ('cifar10', 0.5, 'dp_fedavg_ags'): (55.24, 59.32, 65.23),
    ('cifar100', 0.5, 'dp_fedavg_ags'): (60.29, 63.22, 68.10),
    ('mnist', 0.5, 'cpsgd'): (50.10, 50.36, 50.81),
    ('cifar10', 0.5, 'cpsgd'): (55.08, 59.25, 65.17),
    ('cifar100', 0.5, 'cpsgd'): (60.02, 63.07, 67.70),
    ('mnist', 0.5, 'dp_fedsnlc'): (50.26, 50.52, 50.91),
    ('cifar10', 0.5, 'dp_fedsnlc'): (58.91, 62.84, 70.36),
    ('cifar100', 0.5, 'dp_fedsnlc'): (64.41, 70.15, 73.63),
    ('mnist', 0.5, 'dp_fedags'): (50.17, 50.44, 50.86),
    ('cifar10', 0.5, 'dp_fedags'): (55.45, 59.47, 65.60),
    ('cifar100', 0.5, 'dp_fedags'): (60.74, 64.06, 68.34),
}
# Table III of the paper: the mean of Table II's three attacks (%), per (dataset, epsilon, method).
PAPER_MIA_AVERAGE = {
    ('mnist', 0.1, 'dp_fedavg_ags'): 50.02,
    ('cifar10', 0.1, 'dp_fedavg_ags'): 51.96,
    ('cifar100', 0.1, 'dp_fedavg_ags'): 53.29,
    ('mnist', 0.1, 'cpsgd'): 50.01,
    ('cifar10', 0.1, 'cpsgd'): 51.87,
    ('cifar100', 0.1, 'cpsgd'): 53.17,
    ('mnist', 0.1, 'dp_fedsnlc'): 50.18,
    ('cifar10', 0.1, 'dp_fedsnlc'): 57.60,
    ('cifar100', 0.1, 'dp_fedsnlc'): 60.30,
    ('mnist', 0.1, 'dp_fedags'): 50.08,
    ('cifar10', 0.1, 'dp_fedags'): 52.36,
    ('cifar100', 0.1, 'dp_fedags'): 53.98,
    ('mnist', 0.2, 'dp_fedavg_ags'): 50.19,
    ('cifar10', 0.2, 'dp_fedavg_ags'): 56.22,
    ('cifar100', 0.2, 'dp_fedavg_ags'): 58.47,
    ('mnist', 0.2, 'cpsgd'): 50.14,
    ('cifar10', 0.2, 'cpsgd'): 56.16,
    ('cifar100', 0.2, 'cpsgd'): 58.26,
    ('mnist', 0.2, 'dp_fedsnlc'): 50.32,
    ('cifar10', 0.2, 'dp_fedsnlc'): 61.15,
    ('cifar100', 0.2, 'dp_fedsnlc'): 64.61,
    ('mnist', 0.2, 'dp_fedags'): 50.22,
    ('cifar10', 0.2, 'dp_fedags'): 56.54,
    ('cifar100', 0.2, 'dp_fedags'): 58.94,
    ('mnist', 0.5, 'dp_fedavg_ags'): 50.45,
    ('cifar10', 0.5, 'dp_fedavg_ags'): 59.93,
    ('cifar100', 0.5, 'dp_fedavg_ags'): 63.87,
    ('mnist', 0.5, 'cpsgd'): 50.42,
    ('cifar10', 0.5, 'cpsgd'): 59.83,
    ('cifar100', 0.5, 'cpsgd'): 63.60,
    ('mnist', 0.5, 'dp_fedsnlc'): 50.56,
    ('cifar10', 0.5, 'dp_fedsnlc'): 64.04,
    ('cifar100', 0.5, 'dp_fedsnlc'): 69.40,
    ('mnist', 0.5, 'dp_fedags'): 50.49,
    ('cifar10', 0.5, 'dp_fedags'): 60.17,
    ('cifar100', 0.5, 'dp_fedags'): 64.38,
}


REFERENCE = 'FedAvg (non-private)'  # the reference run's method label in `mia.csv`


def attack_sets(out: str, examples: int, seed: int, data_dir=None):
  """The run's final model, its architecture and the member / non-member / shadow sets."""
  exp, weights, rounds_done = runner.load_trained(out, data_dir=data_dir, log=lambda s: None)
  config = exp.config
  ds = load_dataset(config.dataset, config.data_dir)
  train_idx, val_idx = train_validation_split(ds.x_train, ds.y_train, config.num_validation,
                                              seed=config.seed)
  rng = np.random.default_rng(seed)
  n = min(examples, len(val_idx), len(ds.y_test) // 2)
  members = rng.choice(train_idx, n, replace=False)
  nonmembers = rng.choice(val_idx, n, replace=False)
  shadow = rng.permutation(len(ds.y_test))
  pick = lambda x, y, idx: (x[idx], y[idx])
  sets = dict(members=pick(ds.x_train, ds.y_train, members),
              nonmembers=pick(ds.x_train, ds.y_train, nonmembers),
              shadow_in=pick(ds.x_test, ds.y_test, shadow[:n]),
              shadow_out=pick(ds.x_test, ds.y_test, shadow[n:2 * n]))
  builder = functools.partial(models.build_keras_model, config.model, ds.input_shape,
                              ds.num_classes)
  return exp, weights, rounds_done, sets, builder


def cached_attacks(out: str, examples: int, seed: int) -> Optional[dict]:
  """`out/mia.json` if it holds the attacks at these settings and the run's rounds,
  else None."""
  try:
    with open(os.path.join(out, 'summary.json')) as f:
      rounds = json.load(f).get('rounds_completed')
    with open(os.path.join(out, 'mia.json')) as f:
      cached = json.load(f)
  except (OSError, ValueError):
    return None
  same = (cached.get('examples'), cached.get('seed'), cached.get('rounds')) == (
      examples, seed, rounds)
  return cached if same else None


def run_attacks(out: str, examples: int, seed: int, data_dir=None, quick: bool = False):
  """The three attacks on run `out` (cached in `out/mia.json`)."""
  cached = cached_attacks(out, examples, seed)
  if cached is not None:
    return cached
  exp, weights, rounds_done, sets, builder = attack_sets(out, examples, seed, data_dir)
  started = time.perf_counter()
  results = mia.evaluate(builder, weights, sets['members'], sets['nonmembers'],
                         sets['shadow_in'], sets['shadow_out'], delta=exp.config.delta,
                         shadow_epochs=1 if quick else 10, seed=seed)
  record = dict(examples=examples, seed=seed, rounds=rounds_done,
                seconds=round(time.perf_counter() - started, 1),
                results=[r.row() for r in results])
  with open(os.path.join(out, 'mia.json'), 'w') as f:
    json.dump(record, f, indent=1)
  return record


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.dp_fedags.mia', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  dc.add_common_flags(p)
  p.add_argument('--epsilons', type=float, nargs='+', default=list(dc.EPSILONS))
  p.add_argument('--methods', nargs='+', choices=dc.METHODS, default=list(dc.METHODS))
  p.add_argument('--examples', type=int, default=1000,
                 help='members (= non-members = shadow in = shadow out) per run')
  args = p.parse_args(argv)
  if args.quick:
    args.examples = min(args.examples, 100)
  path = os.path.join(args.figures_dir, 'mia.csv')
  published = dc.read_rows(path) or []
  table = [r for r in published if r['dataset'] not in args.datasets]
  for dataset in args.datasets:
    cells = [(epsilon, method) for epsilon in args.epsilons for method in args.methods]
    for epsilon, method in cells + [(None, 'fedavg')]:
      _, out = dc.config(args, dataset, method, epsilon)
      base = dict(dataset=dataset, epsilon='' if epsilon is None else epsilon,
                  method=REFERENCE if method == 'fedavg' else dc.METHOD_LABEL[method])
      name = f'{dataset} eps {epsilon:g} {method}' if epsilon is not None else (
          f'{dataset} {REFERENCE}')
      summary_path = os.path.join(out, 'summary.json')
      not_run = dict(base, attack='all', accuracy='not run',
                     run=dc.portable(out, os.path.dirname(out)))
      if not os.path.exists(summary_path):
        table.append(not_run)
        print(f'{name}: not run ({out} has no summary.json)')
        continue
      with open(summary_path) as f:
        summary = json.load(f)
      if (cached_attacks(out, args.examples, args.seed) is None
          and not runner.has_checkpoint(out)):
        # A run restored from its published copy keeps no model: its published rows stand.
        kept = [r for r in published if (r['dataset'], r['epsilon'], r['method']) == (
            dataset, str(base['epsilon']), base['method']) and r['accuracy'] != 'not run']
        table += kept or [not_run]
        print(f'{name}: {out} keeps no model (no checkpoint): '
              + ('its published rows are kept' if kept else 'not attacked') + '; rerun the '
              'run to attack it again')
        continue
      record = run_attacks(out, args.examples, args.seed, args.data_dir, args.quick)
      paper = PAPER_MIA.get((dataset, epsilon, method)) if epsilon is not None else None
      for i, r in enumerate(record['results']):
        table.append(dict(
            base, attack=mia.ATTACK_LABEL[r['attack']],
            paper_accuracy=paper[i] if paper else '',
            accuracy=round(100 * r['accuracy'], 2),
            best_accuracy=round(100 * r['best_accuracy'], 2), auc=r['auc'],
            tpr=r['tpr'], fpr=r['fpr'], epsilon_lower_bound=r['epsilon_lower_bound'],
            epsilon_claimed=summary['epsilon_claimed'],
            epsilon_guaranteed=summary['epsilon_guaranteed'],
            members=r['num_members'], rounds=record['rounds'],
            run=dc.portable(out, os.path.dirname(out))))
        print(f"{name} {r['attack']}: accuracy "
              f"{100 * r['accuracy']:.2f}% (AUC {r['auc']:.3f}), epsilon >= "
              f"{r['epsilon_lower_bound']:.3f} (95%)")
  os.makedirs(args.figures_dir, exist_ok=True)
  dc.write_table(path, table)
  return 0


if __name__ == '__main__':
  dc.entry(main)
