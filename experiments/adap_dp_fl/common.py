"""Settings and helpers of the Adap DP-FL experiment modules (Sec. V-A of the paper).

Every run: 10 clients, label-sorted data cut into 400 shards, 40 random shards per client,
lot size L = 78, delta = 1e-5, per-client budget epsilon = 2 (a client stops uploading
when its next round would pass it; a run ends when every client has stopped), the
26,010-parameter CNN, Adam (lr 0.002 MNIST, 0.001 Fashion-MNIST). Test accuracy is
evaluated every 50 rounds and at the stop. Runs are cached and resume from checkpoints
(`experiments.common.run_cached`), so the long runs survive interruptions: rerun the same
command to continue. A run whose full folder is gone but whose published copy
(`--figures-dir/runs/<name>/`: config, summary and evaluated rows) has the same
configuration is read from that copy instead of being rerun (`--rerun` reruns it).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import os
import shutil
import statistics
import sys

import numpy as np

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments import common
from experiments.common import copy_config, entry, portable, read_rows, run_all, run_cached, write_dataset_table, write_table  # pylint: disable=unused-import
from tffdp import config as config_lib
from tffdp import plotting

DATASETS = ('mnist', 'fashion_mnist')
LABEL = {'mnist': 'MNIST', 'fashion_mnist': 'Fashion-MNIST'}
# Sec. V-A / V-B: per dataset.
PAPER = {
    'mnist': dict(learning_rate=0.002, clipping_factor=1.0, sigma_0=6.0, beta=0.9999,
                  constant_sigmas=(3.0, 4.0, 6.0)),
    'fashion_mnist': dict(learning_rate=0.001, clipping_factor=0.01, sigma_0=4.0,
                          beta=0.9998, constant_sigmas=(2.0, 3.0, 4.0)),
}
# Reported numbers (Sec. V-B): test accuracy (%) at epsilon = 2 and sigma at epsilon = 2.
PAPER_RESULTS = {
    'mnist': dict(decay=93.56, constant={3.0: 92.87, 4.0: 92.86, 6.0: 92.34},
                  adap_dp_fl=94.15, final_sigma=3.03),
    'fashion_mnist': dict(decay=78.48, constant={2.0: 77.28, 3.0: 77.03, 4.0: 75.14},
                          adap_dp_fl=79.56, final_sigma=2.11),
}
FIG3_SIGMA = 1.1
CONSTANT_CLIP = 1.0
BUDGET = 2.0
NOT_GIVEN = {
    'rounds': 'cap only: runs end when every client has spent epsilon = 2',
    'eval_every': 'not given in the paper; chosen because test accuracy every 50 of '
                  'tens of thousands of rounds draws the curves at a small cost',
    'num_validation': 'not given in the paper; the server-side validation split that '
                      'J(w) reads (spec README: 5,000 held out of the training set)',
    'seed': 'one seed per configuration (runs of 10^4 rounds)',
}


def config(dataset: str, args, tag: str, **overrides) -> tuple[config_lib.RunConfig, str]:
  """The run configuration of one curve, and its run directory."""
  paper = PAPER[dataset]
  kw = dict(method='adap_dp_fl', dataset=dataset, data_dir=args.data_dir, seed=args.seed,
            rounds=300_000, clients=10, clients_per_round=10, partition='shards',
            partition_options={'num_shards': 400, 'shards_per_client': 40},
            model='adap_dp_fl_cnn', learning_rate=paper['learning_rate'], lot_size=78,
            delta=1e-5, epsilon_budget=BUDGET, clipping_factor=paper['clipping_factor'],
            beta=paper['beta'], clip_norm=CONSTANT_CLIP, eval_every=50,
            checkpoint_every=500, log_every=500)
  if args.quick:
    kw.update(rounds=4, clients=2, clients_per_round=2, eval_every=2, log_every=1,
              num_validation=500, partition_options={'num_shards': 20, 'shards_per_client': 2})
  kw.update(overrides)
  cfg = config_lib.RunConfig.create(**kw)
  cfg.notes.update(NOT_GIVEN)
  out = os.path.join(args.runs_dir, f'{dataset}_{tag}_seed{args.seed}' +
                     ('_quick' if args.quick else ''))
  return cfg, out


# Issue 11: readings of the adaptive threshold's statistic run beside eq. 6 as written.
STATISTIC_LABELS = {
    'unclipped': 'noisy mean of the unclipped norms (no DP guarantee for C)',
    'bounded': 'norms clipped at C_max = 1 (sensitivity C_max)',
}


def statistic_curves(dataset: str, args, tag: str, paper=None, **overrides) -> list:
  """The curves of the `unclipped` and `bounded` threshold statistics (budget on the
  paper's count, so their runs are as long as the literal one's)."""
  return [(f'adaptive clipping, {label}, budget on the paper\'s count',
           *config(dataset, args, f'{tag}_{statistic}_paper_count', clip_statistic=statistic,
                   clip_norm_query='free', **overrides), paper)
          for statistic, label in STATISTIC_LABELS.items()]


def add_common_flags(p) -> None:
  p.add_argument('--datasets', nargs='+', default=list(DATASETS), choices=DATASETS)
  common.add_paper_flags(p, 'adap_dp_fl')
  p.add_argument('--rerun', action='store_true',
                 help='rerun runs whose folder is gone even where their published copy in '
                 '--figures-dir/runs has the same configuration (default: read the copy)')


def final(rows: list[dict], key: str):
  """The last evaluated value of `key` (e.g. test accuracy at the stop)."""
  vals = [r[key] for r in rows if isinstance(r.get(key), float)]
  return vals[-1] if vals else None


def summary_row(dataset: str, curve: str, rows: list[dict], out: str, paper) -> dict:
  return dict(dataset=dataset, curve=curve,
              paper_test_accuracy=paper if paper is not None else '',
              tffdp_test_accuracy=round(100 * final(rows, 'test_accuracy'), 2),
              rounds=int(rows[-1]['round']),
              epsilon_claimed=round(rows[-1]['epsilon_claimed'], 4),
              epsilon_guaranteed=round(rows[-1]['epsilon_guaranteed'], 4),
              final_noise_multiplier=round(rows[-1]['noise_multiplier'], 4),
              wall_seconds=round(rows[-1]['wall_seconds'], 1),
              run=portable(out, os.path.dirname(out)))


def publish(out: str, figures_dir: str) -> str:
  """Copies a run's config, summary and evaluated rows next to the figures.

  The full `metrics.csv` of a 10^4-round run is ~10 MB; `metrics_evaluated.csv` keeps
  the rows with a test evaluation (every 50 rounds and the stop). Returns the copy's
  folder.
  """
  dest = os.path.join(figures_dir, 'runs', os.path.basename(out))
  os.makedirs(dest, exist_ok=True)
  copy_config(out, dest)
  shutil.copy(os.path.join(out, 'summary.json'), os.path.join(dest, 'summary.json'))
  with open(os.path.join(out, 'metrics.csv')) as f:
    all_rows = list(csv.DictReader(f))
  rows = [r for r in all_rows if r['test_accuracy'] != '']
  if rows:
    write_table(os.path.join(dest, 'metrics_evaluated.csv'), rows)
  with open(os.path.join(dest, 'profile.json'), 'w') as f:
    json.dump(round_profile(all_rows), f, indent=2)
  return dest


def round_profile(rows: list[dict]) -> dict:
  """The per-round time profile of a run from its `metrics.csv` rows (seconds).

  Medians over every round of the TFF round (`train_seconds`: client work, aggregation,
  the server's validation loss when sigma decays, server update), the accountant and the
  whole round; totals of the test evaluations (every `eval_every` rounds) and of all rounds.
  """
  cols = {key: [float(r[key]) for r in rows if r.get(key) not in (None, '')]
          for key in ('train_seconds', 'accounting_seconds', 'eval_seconds', 'round_seconds')}
  out = dict(rounds=len(rows))
  for key in ('train_seconds', 'accounting_seconds', 'round_seconds'):
    out[f'median_{key}'] = round(statistics.median(cols[key]), 4) if cols[key] else None
  for key in ('eval_seconds', 'round_seconds'):
    out[f'total_{key}'] = round(sum(cols[key]), 1)
  return out


def published_rows(cfg: config_lib.RunConfig, out: str, figures_dir: str):
  """The evaluated rows of run `out`'s published copy, if its configuration is `cfg`'s.

  `publish` keeps a run's config, summary and `metrics_evaluated.csv` (the rows with a
  test evaluation, every `eval_every` rounds and the stop) under `figures_dir/runs/`. The
  figures read only those rows, so a copy stands in for a run whose folder is gone.

  Returns:
    The rows as `plotting.read_metrics` gives them, or None when there is no complete
    copy or its configuration differs from `cfg` (`common.REUSE_IGNORES` aside: where the
    data is read from, logging, checkpoints).
  """
  dest = os.path.join(figures_dir, 'runs', os.path.basename(out))
  if not all(os.path.exists(os.path.join(dest, f))
             for f in ('config.json', 'summary.json', 'metrics_evaluated.csv')):
    return None
  with open(os.path.join(dest, 'config.json')) as f:
    old = json.load(f)
  new = dataclasses.asdict(dataclasses.replace(cfg, out=out).resolved())
  if config_lib.differing_fields(old, new, ignore=common.REUSE_IGNORES):
    return None
  return plotting.read_metrics(dest, 'metrics_evaluated.csv')


def decays_from_sigma(sigma_0: float, beta: float, final_sigma: float, limit: int = 10**6):
  """How many noise decays (`sigma <- beta sigma`, float32 as the server computes it) turn
  `sigma_0` into `final_sigma` exactly; for a published copy, whose evaluated rows do not
  hold every round's `noise_decayed` flag.

  Raises:
    ValueError: if no count up to `limit` gives `final_sigma` in float32.
  """
  sigma, b, target = np.float32(sigma_0), np.float32(beta), np.float32(final_sigma)
  for n in range(limit + 1):
    if sigma == target:
      return n
    if sigma < target:
      break
    sigma = np.float32(sigma * b)
  raise ValueError(f'sigma {final_sigma} is not {sigma_0} times a power of {beta} in float32.')


def run_or_reuse(cfg: config_lib.RunConfig, out: str, command: list[str], args,
                 log=print) -> tuple[list[dict], bool]:
  """A run's metrics rows: its folder's (running or resuming it), else its published copy.

  Returns:
    `(rows, from_copy)`: every round's rows and False after `run_cached` (the run is then
    published to `args.figures_dir`), or the published copy's evaluated rows and True when
    `out` has no finished run, the copy matches `cfg` and `args.rerun` is not set.
  """
  if not getattr(args, 'rerun', False) and not os.path.exists(
      os.path.join(out, 'summary.json')):
    rows = published_rows(cfg, out, args.figures_dir)
    if rows is not None:
      log(f'== reusing the published copy of {os.path.basename(out)} (evaluated rows; '
          '--rerun reruns it)')
      return rows, True
  rows = run_cached(cfg, out, command, log=log)
  publish(out, args.figures_dir)
  return rows, False


def run_all_or_reuse(items: list[tuple[config_lib.RunConfig, str]], command: list[str],
                     args) -> list[tuple[list[dict], bool]]:
  """`run_or_reuse` on each `(config, out)` through `experiments.common.run_all`.

  A run another process holds (a second copy of the command) is put off and waited for,
  so two copies of a figure command run its curves side by side.

  Returns:
    `(rows, from_copy)` of each item (`run_or_reuse`), in the order of `items`.
  """
  return run_all(items, command, run_fn=functools.partial(run_or_reuse, args=args))


def run_figure(fig: int, doc: str, curves, argv=None) -> int:
  """Runs (or reuses) every curve of Fig. `fig` on each dataset; writes the plots and table.

  Args:
    fig: Figure number (3, 4 or 5).
    doc: The module docstring (the `--help` text).
    curves: `(dataset, args) -> [(label, RunConfig, run directory, paper accuracy)]`.
    argv: Command-line arguments (default `sys.argv[1:]`).

  Writes `fig<fig>_<dataset>.png` (test accuracy), `fig<fig>_<dataset>_loss.png` and
  `fig<fig>.csv` (one row per curve, see `summary_row`; rows of datasets not in
  `--datasets` are kept) into `--figures-dir`, and each
  run's config, summary and evaluated rows into `--figures-dir/runs/` (`publish`).
  """
  name = f'experiments.adap_dp_fl.fig{fig}'
  p = ArgumentParser(prog=f'python -m {name}', description=doc,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
  add_common_flags(p)
  args = p.parse_args(argv)
  command = ['python', '-m', name] + list(argv if argv is not None else sys.argv[1:])
  table = []
  for dataset in args.datasets:
    runs = {}
    plan = curves(dataset, args)
    results = run_all_or_reuse([(cfg, out) for _, cfg, out, _ in plan], command, args)
    for (label, _, out, paper_acc), (rows, _) in zip(plan, results):
      runs[label] = rows
      table.append(summary_row(dataset, label, rows, out, paper_acc))
    plots = [('test_accuracy', 'test accuracy', ''), ('test_loss', 'test loss', '_loss')]
    if fig in (3, 5):
      plots.append(('clip_norm', 'mean clipping threshold C', '_threshold'))
    for y, ylabel, suffix in plots:
      figure = plotting.plot_curves(runs, y, ylabel, f'Adap DP-FL Fig. {fig}: '
                                    f'{LABEL[dataset]}, until epsilon = {BUDGET:g}')
      plotting.save(figure, os.path.join(args.figures_dir, f'fig{fig}_{dataset}{suffix}.png'))
  write_dataset_table(os.path.join(args.figures_dir, f'fig{fig}.csv'), table, args.datasets,
                      DATASETS)
  for r in table:
    print(f"{r['dataset']} {r['curve']}: test accuracy {r['tffdp_test_accuracy']}% "
          f"(paper {r['paper_test_accuracy'] or '-'}), {r['rounds']} rounds, eps claimed "
          f"{r['epsilon_claimed']} / guaranteed {r['epsilon_guaranteed']}")
  return 0
