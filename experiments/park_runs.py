"""Commits interrupted runs with their checkpoints, so that another machine resumes them.

    python -m experiments.park_runs [--runs-dir runs] [--figures-dir figures] [--dry-run]

A long figure (AADP-FL's Fig. 7a, A-DPFL's E = 5 reruns) takes more hours than one
working session, and a fresh checkout has an empty runs folder: a run interrupted there
(TERM or Ctrl-C: `tffdp.runner` saves `checkpoint.pkl`) would start again from round 1.
This module copies each interrupted run of `--runs-dir` (a `checkpoint.pkl`, no
`summary.json`, not a pilot paused at its `stop_after_round`) to
`<figures-dir>/<method folder>/interrupted/<run>/`: its `config.json` (paths made
portable: `common.copy_config`), `metrics.csv` and `checkpoint.pkl`. Commit that folder;
`python -m experiments.restore_runs` on the next machine writes the three files back, and
the figure command resumes the run from its checkpoint (`common.run_cached`).

It also removes the parked copies that are done with: a run whose finished copy
(`summary.json`) is committed elsewhere under `--figures-dir`, or whose run folder here
has finished. Run it again after a parked run has finished to drop its checkpoint from
the tree.

A checkpoint holds the server state (model weights and optimizer moments), both privacy
ledgers and the rows so far (`tffdp.runner.Runner.snapshot`); its settings exclude where
files live (`out`, `data_dir`), so it resumes from any folder. It is a pickle: restore
only checkpoints from a tree you trust.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

from experiments import common
from tffdp import runner

PARKED = common.PARKED_FOLDER
FILES = ('config.json', 'metrics.csv', runner.CHECKPOINT)


def interrupted_runs(runs_dir: str) -> list[str]:
  """Run folders under `runs_dir` (two levels: `<method>/<run>`) that hold a checkpoint,
  no `summary.json`, and are not paused at their `stop_after_round` (`common.paused_run`).
  """
  found = []
  for method in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
    d = os.path.join(runs_dir, method)
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
      out = os.path.join(d, name)
      if (not os.path.exists(os.path.join(out, runner.CHECKPOINT)) or
          os.path.exists(os.path.join(out, 'summary.json')) or
          not os.path.exists(os.path.join(out, 'config.json'))):
        continue
      with open(os.path.join(out, 'config.json')) as f:
        config = json.load(f)
      if common.paused_run(config, common.read_rows(os.path.join(out, 'metrics.csv')) or []):
        continue
      found.append(out)
  return found


def parked_copy(figures_dir: str, runs_dir: str, out: str) -> str:
  """Where `park` puts the run folder `out` (`runs_dir/<method>/<run>`)."""
  method, name = os.path.relpath(out, runs_dir).split(os.sep)[-2:]
  return os.path.join(figures_dir, method, PARKED, name)


def park(runs_dir: str, figures_dir: str, dry_run: bool = False, log=print) -> dict:
  """Copies interrupted runs to `figures_dir` and removes parked copies done with.

  Args:
    runs_dir: The runs root (the Makefile's `RUNS_DIR`, default `runs`).
    figures_dir: The committed figures folder.
    dry_run: Only say what would be copied and removed.
    log: Receives one line per copy or removal.

  Returns:
    `{'parked': [copy folders written], 'removed': [copy folders removed]}`.
  """
  parked, removed = [], []
  for out in interrupted_runs(runs_dir):
    dest = parked_copy(figures_dir, runs_dir, out)
    rows = common.read_rows(os.path.join(out, 'metrics.csv')) or []
    log(f'{"would park" if dry_run else "parked"} {out} (round '
        f'{rows[-1]["round"] if rows else 0}) -> {dest}')
    parked.append(dest)
    if not dry_run:
      os.makedirs(dest, exist_ok=True)
      common.copy_config(out, dest)
      for f in FILES[1:]:
        if os.path.exists(os.path.join(out, f)):
          shutil.copy(os.path.join(out, f), os.path.join(dest, f))
  finished = {out for root, out, _ in common.run_copies(figures_dir, ('config.json',))
              if os.path.exists(os.path.join(root, 'summary.json'))}
  for root, out, _ in list(common.run_copies(figures_dir, FILES)):
    if os.path.basename(os.path.dirname(root)) != PARKED or root in parked:
      continue
    here = os.path.join(runs_dir, *out.split('/')[1:]) if out.startswith(
        ('$RUNS_DIR/', 'runs/')) else None
    if out in finished or (here and os.path.exists(os.path.join(here, 'summary.json'))):
      log(f'{"would remove" if dry_run else "removed"} {root} (the run has finished)')
      removed.append(root)
      if not dry_run:
        shutil.rmtree(root)
  return dict(parked=parked, removed=removed)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.park_runs', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--runs-dir', default='runs')
  p.add_argument('--figures-dir', default='figures')
  p.add_argument('--dry-run', action='store_true')
  args = p.parse_args(argv)
  done = park(args.runs_dir, args.figures_dir, args.dry_run)
  print(f'{len(done["parked"])} interrupted run(s) {"to park" if args.dry_run else "parked"}, '
        f'{len(done["removed"])} finished copy(ies) {"to remove" if args.dry_run else "removed"}'
        f' under {args.figures_dir}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
