"""Settings and helpers of the AADP-FL experiment modules (Sec. 6 of the paper).

Every run: 20 clients, the non-IID percentage partition (`noniid_fraction`, 0.5 unless
the figure sweeps it), local SGD lr 0.01 with one pass over the client data, delta 1e-5,
and per dataset (Sec. 6): MNIST T = 50, B = 32, S = 0.25; Fashion-MNIST T = 200, B = 32,
S = 0.25; CIFAR-10 T = 300, B = 50, S = 0.2. AADP-FL: Nadam (0.9, 0.999, lr 0.01),
rho = 0.1, epsilon_max = 20, epsilon = 4 unless swept. Runs are cached and resume from
their checkpoints (`experiments.common.run_cached`): rerun a command to continue it.

Baselines (spec Amendment 6): DP-FedAvg at the sigma of AADP-FL's Theorem 1 for the
same (epsilon, delta, q = B / d_i, T) (`dp_fedavg_theorem1`, labelled: what the paper
appears to do), and at the sigma its own client-level accountant needs for epsilon
(`dp_fedavg_own`); the same pair for DDGauss (`ddgauss_*`: TFF's distributed discrete
Gaussian, client-level) and DP-SCAFFOLD (`dp_scaffold_*`: DP-SGD clients, sample-level,
per-example clip 1.0).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
from typing import Callable, Optional

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments import common as exp_common
from experiments.common import entry, portable, read_rows, run_all, run_cached, write_dataset_table, write_table  # pylint: disable=unused-import
from tffdp import config as config_lib
from tffdp import models, plotting, privacy
from tffdp.algorithms import aadp_fl, ddgauss

DATASETS = ('mnist', 'fashion_mnist', 'cifar10')
LABEL = {'mnist': 'MNIST', 'fashion_mnist': 'Fashion-MNIST', 'cifar10': 'CIFAR-10'}
SETTINGS = {
    'mnist': dict(rounds=50, batch_size=32, clip_norm=0.25, model='mlp'),
    'fashion_mnist': dict(rounds=200, batch_size=32, clip_norm=0.25, model='mlp'),
    'cifar10': dict(rounds=300, batch_size=50, clip_norm=0.2, model='lenet_cnn'),
}
EPSILON = 4.0
NON_IID = 0.5
NOT_GIVEN = {
    'local_epochs': 'not given in the paper; chosen because one pass over the client data '
                    'is the FedAvg default',
    'model': 'MLP width (200) and CNN widths are not given in the paper (Amendment 5): '
             'MLP dense 200 ReLU -> 10; CIFAR-10 LeNet-5 style (6, 16 conv; 120, 84 dense); '
             'MNIST CNN (--model): fl_mnist_cnn, the paper code\'s CNNMnist (10, 20 conv; '
             '50 dense), or mcmahan_cnn',
    'num_validation': 'the server-side validation split (spec README): 5,000 held out of '
                      'the training set; AADP-FL reads none of it',
    'seed': 'one seed per configuration (the paper reports the median of 5 runs)',
    'baseline_sigma': 'Amendment 6: the paper appears to give DP-FedAvg, DDGauss and '
                      'DP-SCAFFOLD the sigma of its own Theorem 1 (*_theorem1); *_own use '
                      'the sigma each baseline\'s own accountant needs for epsilon 4 '
                      '(DP-FedAvg: client-level Gaussian, q = 1; DDGauss: Kairouz et al. '
                      '2021 RDP of the query TFF states; DP-SCAFFOLD: sample-level DP-SGD, '
                      'q = B / d_i, E ceil(d_i / B) steps per round)',
    'dp_scaffold_clip': 'DP-SCAFFOLD\'s per-example clip C is not given in the paper: '
                        '1.0, the usual DP-SGD choice (the update clip S of AADP-FL bounds '
                        'a whole update, not one example\'s gradient)',
}
DP_SCAFFOLD_CLIP = 1.0


@functools.lru_cache(maxsize=None)
def model_dim(dataset: str, model: str) -> int:
  """Number of trainable parameters of `model` on `dataset` (DDGauss's vector length);
  cached, as each call builds the Keras model."""
  shape, classes = {'mnist': ((28, 28, 1), 10), 'fashion_mnist': ((28, 28, 1), 10),
                    'cifar10': ((32, 32, 3), 10)}[dataset]
  return models.count_params(model, shape, classes)


LABELS = {'fedavg': 'FedAvg (non-private)', 'aadp_fl': 'AADP-FL',
          'aadp_fl_l2e-4': 'AADP-FL, l = 2e-4',
          'nadam_control': 'FedAvg with AADP-FL\'s Nadam (no clipping, no noise)',
          'dp_fedavg_theorem1': 'DP-FedAvg (sigma of AADP-FL Theorem 1)',
          'dp_fedavg_own': 'DP-FedAvg (own accountant, epsilon 4)',
          'ddgauss_theorem1': 'DDGauss (sigma of AADP-FL Theorem 1)',
          'ddgauss_own': 'DDGauss (own accountant, epsilon 4)',
          'dp_scaffold_theorem1': 'DP-SCAFFOLD (sigma of AADP-FL Theorem 1)',
          'dp_scaffold_own': 'DP-SCAFFOLD (own accountant, epsilon 4)'}


def add_common_flags(p: argparse.ArgumentParser, datasets=('mnist',)) -> None:
  p.add_argument('--datasets', nargs='+', default=list(datasets), choices=DATASETS)
  exp_common.add_paper_flags(p, 'aadp_fl')
  p.add_argument('--eval-every', type=int, default=1, metavar='N',
                 help='evaluate on the test and validation sets every N rounds and at the '
                 'last (default 1, every round, as the committed runs); evaluation does not '
                 'change training, so a figure that reads final accuracies can save its cost')
  p.add_argument('--model', default=None, choices=sorted(models.MODELS),
                 help='model of every run (default: the paper\'s per dataset, MLP for MNIST '
                 'and Fashion-MNIST, LeNet-style CNN for CIFAR-10); the runs of another '
                 'model, and the figure\'s CSV and plots, carry its name')


def client_size(dataset: str, args) -> int:
  """`d_i` of the partition (equal sizes: the non-IID percentage deals equal parts)."""
  clients = 4 if args.quick else 20
  train = {'mnist': 60000, 'fashion_mnist': 60000, 'cifar10': 50000}[dataset]
  return (train - (500 if args.quick else 5000)) // clients


def theorem1_sigma(dataset: str, args, epsilon: float = EPSILON) -> float:
  s = settings(dataset, args)
  return aadp_fl.theorem1_noise_multiplier(
      epsilon, 1e-5, min(1.0, s['batch_size'] / client_size(dataset, args)), s['rounds'])


def sweep_values(values: tuple, args) -> tuple:
  """A figure's swept values; with `--quick` only the first and the last (smoke test)."""
  return (values[0], values[-1]) if args.quick else values


def settings(dataset: str, args) -> dict:
  s = dict(SETTINGS[dataset])
  if getattr(args, 'model', None):
    s['model'] = args.model
  if args.quick:
    s.update(rounds=2)
  return s


def config(dataset: str, args, tag: str, method: str = 'aadp_fl',
           **overrides) -> tuple[config_lib.RunConfig, str]:
  """The run configuration of one curve (`method`: fedavg, aadp_fl, or a key of `LABELS`
  for a baseline) and its run directory."""
  kw = dict(dataset=dataset, data_dir=args.data_dir, seed=args.seed, clients=20,
            clients_per_round=20, partition='noniid_fraction',
            partition_options={'fraction': NON_IID}, learning_rate=0.01, delta=1e-5,
            local_epochs=1, eval_every=getattr(args, 'eval_every', 1),
            checkpoint_every=10, log_every=10,
            **settings(dataset, args))
  if args.quick:
    kw.update(clients=4, clients_per_round=4, num_validation=500, log_every=1)
  rounds = kw['rounds']
  if method == 'aadp_fl':
    kw.update(method='aadp_fl', epsilon=EPSILON)
  elif method == 'fedavg':
    kw.update(method='fedavg', cohort_sampling='all')
  elif method in ('dp_fedavg_theorem1', 'dp_fedavg_own'):
    eps = overrides.pop('epsilon', EPSILON)
    sigma = (theorem1_sigma(dataset, args, eps) if method == 'dp_fedavg_theorem1' else
             privacy.calibrate_noise_multiplier(eps, 1e-5, 1.0, rounds))
    kw.update(method='dp_fedavg', noise_multiplier=round(sigma, 6))
  elif method in ('ddgauss_theorem1', 'ddgauss_own'):
    sigma = (theorem1_sigma(dataset, args) if method == 'ddgauss_theorem1' else
             ddgauss.calibrate_noise_multiplier(EPSILON, 1e-5, rounds, kw['clip_norm'],
                                                kw['clients_per_round'],
                                                model_dim(dataset, kw['model'])))
    kw.update(method='ddgauss', noise_multiplier=round(sigma, 6))
  elif method in ('dp_scaffold_theorem1', 'dp_scaffold_own'):
    d_i = client_size(dataset, args)
    q, steps = min(1.0, kw['batch_size'] / d_i), math.ceil(d_i / kw['batch_size']) * rounds
    sigma = (theorem1_sigma(dataset, args) if method == 'dp_scaffold_theorem1' else
             privacy.calibrate_noise_multiplier(EPSILON, 1e-5, q, steps))
    kw.update(method='dp_scaffold', noise_multiplier=round(sigma, 6),
              clip_norm=DP_SCAFFOLD_CLIP)
  else:
    raise ValueError(f'unknown curve method {method!r}')
  kw.update(overrides)
  cfg = config_lib.RunConfig.create(**kw)
  baseline = method.endswith(('_theorem1', '_own'))
  cfg.notes.update({k: v for k, v in NOT_GIVEN.items()
                    if k not in ('baseline_sigma', 'dp_scaffold_clip') or baseline})
  if not method.startswith('dp_scaffold'):
    cfg.notes.pop('dp_scaffold_clip', None)
  if cfg.model != SETTINGS[dataset]['model']:
    tag = f'{tag}_{cfg.model}'
  out = os.path.join(args.runs_dir, f'{dataset}_{tag}_seed{args.seed}' +
                     ('_quick' if args.quick else ''))
  return cfg, out


def final(rows: list[dict], key: str):
  vals = [r[key] for r in rows if isinstance(r.get(key), float)]
  return vals[-1] if vals else None


def summary_row(dataset: str, curve: str, rows: list[dict], out: str, **extra) -> dict:
  last = rows[-1]
  accs = [r['test_accuracy'] for r in rows if isinstance(r.get('test_accuracy'), float)]
  return dict(dataset=dataset, curve=curve, **extra,
              final_test_accuracy=round(100 * accs[-1], 2),
              best_test_accuracy=round(100 * max(accs), 2),
              final_test_loss=round(final(rows, 'test_loss'), 4),
              rounds=int(last['round']),
              epsilon_claimed=round(last['epsilon_claimed'], 4),
              epsilon_guaranteed=round(last['epsilon_guaranteed'], 4),
              final_budget_max=_get(last, 'epsilon_budget_max'),
              final_noise_multiplier_max=_get(last, 'noise_multiplier_max',
                                              'noise_multiplier'),
              budget_increases=_get(last, 'budget_increases'),
              wall_seconds=round(last['wall_seconds'], 1),
              stop_reason=_stop_reason(out),
              run=portable(out, os.path.dirname(out)))


def _stop_reason(out: str) -> str:
  """The run's `stop_reason` (a budget stop, a divergence), '' when it ran every round."""
  try:
    with open(os.path.join(out, 'summary.json')) as f:
      return json.load(f).get('stop_reason') or ''
  except FileNotFoundError:
    return ''


def _get(row: dict, *keys):
  for k in keys:
    if isinstance(row.get(k), (int, float)):
      return round(float(row[k]), 6)
  return ''


Curve = tuple[str, config_lib.RunConfig, str, dict]


def run_figure(name: str, doc: str, curves: Callable[[str, argparse.Namespace], list[Curve]],
               argv=None, plots=(('test_accuracy', 'test accuracy', ''),
                                 ('test_loss', 'test loss', '_loss')),
               title: str = '', default_datasets=('mnist',),
               sweep: Optional[tuple[str, str]] = None,
               extra_flags: Optional[Callable[[argparse.ArgumentParser], None]] = None,
               default_model: Optional[str] = None) -> int:
  """Runs (or reuses) every curve of one figure per dataset; writes plots and a table.

  Args:
    name: File stem (`fig3`, `table2`, ...).
    doc: The module docstring (`--help`).
    curves: `(dataset, args) -> [(label, RunConfig, run directory, extra columns)]`.
    argv: Command-line arguments (default `sys.argv[1:]`).
    plots: `(column, axis label, file suffix)` of the per-round plots.
    title: Plot title prefix.
    default_datasets: Datasets run when `--datasets` is not given.
    sweep: `(extra column, axis label)`: also plot the final and best test accuracy
      against that column (`<name>_<dataset>_sweep.png`).
    extra_flags: Adds the module's own flags to the parser.
    default_model: The module's `--model` default (None: the paper's per dataset). With
      another `--model`, the outputs are `<name>_<model>...`.

  Writes `<name>_<dataset><suffix>.png`, `<name>.csv` (one row per curve, see
  `summary_row`; rows of datasets not in `--datasets` are kept) and each run's results
  under `--figures-dir/runs/`.
  """
  module = f'experiments.aadp_fl.{name}'
  p = ArgumentParser(prog=f'python -m {module}', description=doc,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
  add_common_flags(p, default_datasets)
  if extra_flags:
    extra_flags(p)
  p.set_defaults(model=default_model)
  args = p.parse_args(argv)
  if args.model and args.model != default_model:
    name = f'{name}_{args.model}'
  if getattr(args, 'clip_norm', None) is not None:  # a figure's `--clip-norm` override
    name = f'{name}_S{args.clip_norm:g}'
  command = ['python', '-m', module] + list(argv if argv is not None else sys.argv[1:])
  table = []
  for dataset in args.datasets:
    items = curves(dataset, args)
    rows = run_all([(cfg, out) for _, cfg, out, _ in items], command,
                   publish_to=os.path.join(args.figures_dir, 'runs'))
    runs = {}
    for (label, _, out, extra), run_rows in zip(items, rows):
      runs[label] = run_rows
      table.append(summary_row(dataset, label, run_rows, out, **extra))
    styles = _sweep_styles(items, sweep[0]) if sweep else None
    for y, ylabel, suffix in plots:
      figure = plotting.plot_curves(runs, y, ylabel, f'AADP-FL {title}: {LABEL[dataset]}',
                                    styles=styles)
      plotting.save(figure, os.path.join(args.figures_dir, f'{name}_{dataset}{suffix}.png'))
    if sweep:
      _plot_sweep([r for r in table if r['dataset'] == dataset], sweep,
                  f'AADP-FL {title}: {LABEL[dataset]}',
                  os.path.join(args.figures_dir, f'{name}_{dataset}_sweep.png'))
  write_dataset_table(os.path.join(args.figures_dir, f'{name}.csv'), table, args.datasets,
                      DATASETS)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: final test accuracy {r['final_test_accuracy']}% "
          f"(best {r['best_test_accuracy']}%), eps claimed {r['epsilon_claimed']} / "
          f"guaranteed {r['epsilon_guaranteed']}, {r['wall_seconds']} s")
  return 0


def _sweep_styles(items: list[Curve], key: str) -> dict[str, dict]:
  """Line styles of a swept figure's per-round plot: one colour per value of the swept
  column `key` (its `extra` column), one line style per `series` (solid for the first,
  dashed for the second, ...), so each method's curves and each setting's pair read apart.
  A reference without the swept setting (`key` empty, e.g. FedAvg) is drawn solid black.

  Returns:
    Curve label -> `Axes.plot` keyword arguments (`plotting.plot_curves`' `styles`).
  """
  colors = plotting.plt.rcParams['axes.prop_cycle'].by_key()['color']
  lines = ('-', '--', ':', '-.')
  swept = [extra for *_, extra in items if extra.get(key) not in (None, '')]
  values = list(dict.fromkeys(extra[key] for extra in swept))
  series = list(dict.fromkeys(extra.get('series') for extra in swept))
  styles = {}
  for label, _, _, extra in items:
    if extra.get(key) in (None, ''):
      styles[label] = dict(color='black', linestyle='-')
    else:
      styles[label] = dict(color=colors[values.index(extra[key]) % len(colors)],
                           linestyle=lines[series.index(extra.get('series')) % len(lines)])
  return styles


def _plot_sweep(rows: list[dict], sweep: tuple[str, str], title: str, path: str) -> None:
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  key, xlabel = sweep
  groups: dict[str, list] = {}
  for r in rows:
    groups.setdefault(r.get('series', 'AADP-FL'), []).append(r)
  fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
  for series, rs in groups.items():
    swept = sorted((r for r in rs if r.get(key) != ''), key=lambda r: float(r[key]))
    for r in rs:
      if r.get(key) == '':  # a reference without the swept setting (e.g. FedAvg)
        ax.axhline(r['final_test_accuracy'], ls='--', color='gray', label=f'{series} (final)')
    if swept:
      ax.plot([float(r[key]) for r in swept], [r['final_test_accuracy'] for r in swept],
              marker='o', label=f'{series} (final)')
  ax.set_xlabel(xlabel)
  ax.set_ylabel('test accuracy (%)')
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  plotting.save(fig, path)
