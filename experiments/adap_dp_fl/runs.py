"""Runs every paper-scale Adap DP-FL run (the curves of Figs. 3-6) on a pool of processes.

    python -m experiments.adap_dp_fl.runs [--jobs 2] [--datasets mnist fashion_mnist]
        [--data-dir DIR] [--runs-dir DIR] [--quick] [--status]

The figure modules run their curves one after the other; these runs take 10^3 to 4 x 10^4
rounds each and share curves between figures (Fig. 5's DP-FL is Fig. 4's sigma_0 run;
Fig. 6 reads the decay runs). This module collects the distinct runs of Figs. 3-5, longest
first (rounds to the budget by the accountant for constant sigma; sigma_0's count for the
decay runs; interrupted runs before all others), and keeps `--jobs` worker processes busy, one fresh process per run (its own
TFF context). Finished runs are reused and interrupted ones resumed, so rerunning the
command continues; two jobs on the 2-core machine give about 1.2x the throughput of one.
Afterwards `make adap_dp_fl_figures` (same `--runs-dir`) draws every figure from the
cached runs. Progress lines are prefixed with the run's name.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import multiprocessing
import os
import sys

from experiments.adap_dp_fl import common
from experiments import common as exp_common


def planned_runs(args) -> list[tuple[str, object, str]]:
  """Distinct `(label, RunConfig, run directory)` of Figs. 3-5 still to run.

  A run whose published copy in `--figures-dir/runs` has the same configuration is left
  out (the figure modules read the copy) unless `--rerun`. Runs with a checkpoint and no
  summary (interrupted) come first, then the longest.
  """
  from experiments.adap_dp_fl import fig3 as adap_dp_fl_fig3
  from experiments.adap_dp_fl import fig4 as adap_dp_fl_fig4
  from experiments.adap_dp_fl import fig5 as adap_dp_fl_fig5  # pylint: disable=g-import-not-at-top
  runs = {}
  for dataset in args.datasets:
    for module in (adap_dp_fl_fig3, adap_dp_fl_fig4, adap_dp_fl_fig5):
      for label, cfg, out, _ in module.curves(dataset, args):
        if (not args.rerun and not os.path.exists(os.path.join(out, 'summary.json'))
            and common.published_rows(cfg, out, args.figures_dir) is not None):
          continue  # the figures read its published copy (`--rerun` reruns it)
        runs.setdefault(out, (f'{dataset}: {label}', cfg, out))
  def in_progress(out):
    return (_has_checkpoint(out) and
            not os.path.exists(os.path.join(out, 'summary.json')))
  return sorted(runs.values(), key=lambda r: (not in_progress(r[2]), -_expected_rounds(r[1])))


def _expected_rounds(cfg) -> int:
  """Rounds until epsilon_guaranteed reaches the budget at a constant sigma_0 (an estimate)."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  import math  # pylint: disable=g-import-not-at-top
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  sigma, hp = cfg.noise_multiplier, cfg.hparams
  if hp.clipping == 'adaptive' and hp.clip_norm_query == 'accounted':
    sigma /= math.sqrt(2.0)
  ledger = privacy.PrivacyLedger(1, cfg.delta, orders=privacy.INTEGER_ORDERS)
  step = dp_accounting.PoissonSampledDpEvent(hp.lot_size / 5480.0,
                                             dp_accounting.GaussianDpEvent(sigma))
  return int(ledger.rounds_within([0], step, cfg.epsilon_budget, limit=cfg.rounds)[0])


def _has_checkpoint(out: str) -> bool:
  """`tffdp.runner.has_checkpoint` without importing TensorFlow."""
  from tffdp import checkpoints  # pylint: disable=g-import-not-at-top
  return any(os.path.exists(os.path.join(out, f))
             for f in (checkpoints.FILE, checkpoints.LEGACY_PICKLE))


def run_status(out: str) -> dict:
  """The state of one run directory, from its files (no TFF).

  Returns:
    A dict with `state` ('done', 'in progress' or 'not started') and, once rounds exist,
    `round`, the last evaluated `test_accuracy`, `epsilon_claimed` and
    `epsilon_guaranteed` (max over clients), `noise_multiplier` and `wall_seconds`
    (the run's active time over all its sessions).
  """
  metrics = os.path.join(out, 'metrics.csv')
  if os.path.exists(os.path.join(out, 'summary.json')):
    state = 'done'
  elif _has_checkpoint(out):
    state = 'in progress'
  else:
    return dict(state='not started')
  with open(metrics) as f:
    rows = list(csv.DictReader(f))
  evaluated = [r for r in rows if r['test_accuracy'] != '']
  last = rows[-1] if rows else {}
  return dict(state=state, round=int(last.get('round', 0)),
              test_accuracy=float(evaluated[-1]['test_accuracy']) if evaluated else None,
              **{k: float(last[k]) for k in ('epsilon_claimed', 'epsilon_guaranteed',
                                             'noise_multiplier', 'wall_seconds') if k in last})


def print_status(runs) -> None:
  """One line per planned run: its state, round, accuracy, epsilons, sigma and wall time."""
  for label, cfg, out in runs:
    s = run_status(out)
    line = f'{os.path.basename(out)}: {s["state"]}'
    if 'round' in s:
      acc = 'n/a' if s['test_accuracy'] is None else f'{s["test_accuracy"]:.4f}'
      line += (f', round {s["round"]}, test acc {acc}, eps claimed '
               f'{s.get("epsilon_claimed", 0):.3f} / guaranteed '
               f'{s.get("epsilon_guaranteed", 0):.3f}, sigma {s.get("noise_multiplier", 0):.4g}, '
               f'wall {s.get("wall_seconds", 0):.0f} s')
    if s['state'] != 'done':
      line += (f' (budget after about {_expected_rounds(cfg)} rounds at sigma = '
               f'{cfg.noise_multiplier:g}' +
               ('; sooner as the noise decays)' if cfg.hparams.noise_schedule == 'decay' else ')'))
    print(f'[{label}] {line}', flush=True)


def _run_one(label: str, cfg, out: str, command: list[str]) -> tuple[str, int]:
  """One run in this (fresh) process (`experiments.common`'s pool step: its own TFF
  context, progress lines prefixed with the run); returns its label and rounds."""
  rows = exp_common._job_run(common.run_cached, cfg, out, command, name=label)  # pylint: disable=protected-access
  return label, len(rows)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.adap_dp_fl.runs', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  common.add_common_flags(p)
  p.add_argument('--jobs', type=int, default=2, help='worker processes')
  p.add_argument('--status', action='store_true',
                 help='print the state of every planned run (done / in progress / not '
                      'started, round, accuracy, epsilons, wall time) and exit')
  args = p.parse_args(argv)
  if args.jobs < 1:
    p.error(f'--jobs must be >= 1. Found {args.jobs}.')
  command = ['python', '-m', 'experiments.adap_dp_fl.runs'] + list(
      argv if argv is not None else sys.argv[1:])
  runs = planned_runs(args)
  if args.status:
    print_status(runs)
    return 0
  print(f'{len(runs)} runs, {args.jobs} at a time: ' + ', '.join(label for label, _, _ in runs),
        flush=True)
  os.makedirs(args.runs_dir, exist_ok=True)
  failed = []
  with concurrent.futures.ProcessPoolExecutor(
      max_workers=args.jobs, mp_context=multiprocessing.get_context('spawn'),
      max_tasks_per_child=1) as pool:
    futures = {pool.submit(_run_one, label, cfg, out, command): label
               for label, cfg, out in runs}
    for future in concurrent.futures.as_completed(futures):
      try:
        label, rounds = future.result()
        print(f'done: {label} ({rounds} rounds)', flush=True)
      except Exception as e:  # pylint: disable=broad-except
        failed.append(futures[future])
        print(f'failed: {futures[future]}: {type(e).__name__}: {e}', flush=True)
  if failed:
    print(f'{len(failed)} runs failed: {", ".join(failed)}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
