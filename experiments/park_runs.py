"""Commits interrupted runs with their checkpoints, so that another machine resumes them.

    python -m experiments.park_runs [--runs-dir runs] [--figures-dir figures] [--dry-run]
        [--only RUN [RUN ...]]

A long figure (AADP-FL's Fig. 7a, A-DPFL's E = 5 reruns) takes more hours than one
working session, and a fresh checkout has an empty runs folder: a run interrupted there
(TERM or Ctrl-C: `tffdp.runner` saves `checkpoint.npz`) would start again from round 1.
This module copies each interrupted run of `--runs-dir` (a `checkpoint.npz`, no
`summary.json`, not a pilot paused at its `stop_after_round`) to
`<figures-dir>/<method folder>/interrupted/<run>/`: its `config.json` (paths made
portable: `common.copy_config`), `metrics.csv` and `checkpoint.npz`. Commit that folder;
`python -m experiments.restore_runs` on the next machine writes the three files back, and
the figure command resumes the run from its checkpoint (`common.run_cached`). `--only`
parks just the runs it names (a run folder's name, or `<method>/<run>`), leaving the other
interrupted runs on this machine.

It also removes the parked copies that are done with: a run whose finished copy
(`summary.json`) is committed elsewhere under `--figures-dir`, or whose run folder here
has finished. Run it again after a parked run has finished to drop its checkpoint from
the tree.

A checkpoint holds the server state (model weights and optimizer moments), both privacy
ledgers and the rows so far (`tffdp.runner.Runner.snapshot`); its settings exclude where
files live (`out`, `data_dir`), so it resumes from any folder. It is data only (arrays
and JSON, `tffdp.checkpoints`): resuming a parked copy runs no code from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Sequence

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
      rows = common.read_rows(os.path.join(out, 'metrics.csv')) or []
      if common.paused_run(_config(out), rows):
        continue
      found.append(out)
  return found


def parked_copy(figures_dir: str, runs_dir: str, out: str) -> str:
  """Where `park` puts the run folder `out` (`runs_dir/<method>/<run>`)."""
  method, name = os.path.relpath(out, runs_dir).split(os.sep)[-2:]
  return os.path.join(figures_dir, method, PARKED, name)


def park(runs_dir: str, figures_dir: str, dry_run: bool = False, log=print,
         only: Sequence[str] | None = None) -> dict:
  """Copies interrupted runs to `figures_dir` and removes parked copies done with.

  A run still running (another process holds its `runner.run_lock`) is skipped, and
  each run is locked while it is copied. A run checkpointed before its first round is
  skipped; a parked copy already committed
  with a checkpoint at a later round than this machine's is kept. The copied
  `metrics.csv` ends at the checkpoint's round (rows past it are run again on resume). A
  parked copy is removed when a finished copy of the same configuration is committed
  (`common.same_run_config`), or its run has finished here.

  Args:
    runs_dir: The runs root (the Makefile's `RUNS_DIR`, default `runs`; a method's
      folder `RUNS_DIR/<method>` is taken as its root, `common.runs_root`).
    figures_dir: The committed figures folder.
    dry_run: Only say what would be copied and removed.
    log: Receives one line per copy or removal.
    only: Park only these interrupted runs, each named by its folder's name or by
      `<method>/<run>`; the others are left where they are. None (the default) parks
      every interrupted run. Removing parked copies done with is not affected.

  Returns:
    `{'parked': [copy folders written], 'removed': [copy folders removed]}`.

  Raises:
    ValueError: A name in `only` matches no interrupted run under `runs_dir` (the
      message lists the interrupted runs).
  """
  runs_dir = common.runs_root(runs_dir)
  parked, removed = [], []
  for out in _selected(interrupted_runs(runs_dir), runs_dir, only):
    try:
      with runner.run_lock(out):  # held while copying: no process resumes it meanwhile
        dest = _park_one(out, figures_dir, runs_dir, dry_run, log)
    except runner.RunInProgressError:
      log(f'skipped {out}: still running (its process holds the run folder; stop every '
          'copy of its command with kill -TERM PID, which saves the checkpoint, then park)')
      continue
    if dest:
      parked.append(dest)
  finished = common.finished_copies(figures_dir)
  for root, out, config in list(common.run_copies(figures_dir, FILES)):
    if not common.is_parked(root) or root in parked:
      continue
    key = common.run_key(out)
    here = os.path.join(runs_dir, key) if key else None
    done_here = here and os.path.exists(os.path.join(here, 'summary.json')) and (
        common.same_run_config(_config(here), config))
    if common.superseded(root, config, finished) or done_here:
      log(f'{"would remove" if dry_run else "removed"} {root} (the run has finished)')
      removed.append(root)
      if not dry_run:
        shutil.rmtree(root)
  return dict(parked=parked, removed=removed)


def _selected(runs: list[str], runs_dir: str, only: Sequence[str] | None) -> list[str]:
  """The run folders of `runs` that `only` names (see `park`); all of them if None."""
  if only is None:
    return runs
  names = {out: {os.path.basename(out), os.path.relpath(out, runs_dir).replace(os.sep, '/')}
           for out in runs}
  wanted = {n.strip('/') for n in only}
  unmatched = sorted(n for n in wanted if not any(n in ns for ns in names.values()))
  if unmatched:
    listed = ', '.join(os.path.relpath(out, runs_dir) for out in runs) or 'none'
    raise ValueError(f'--only names no interrupted run under {runs_dir}: '
                     f'{", ".join(unmatched)}. Interrupted runs there: {listed}.')
  return [out for out in runs if names[out] & wanted]


def _park_one(out: str, figures_dir: str, runs_dir: str, dry_run: bool, log) -> str:
  """Parks the interrupted run `out` (see `park`); returns the copy's folder, or '' where
  it is skipped or kept."""
  dest = parked_copy(figures_dir, runs_dir, out)
  if os.path.exists(os.path.join(out, 'summary.json')):  # finished since it was listed
    return ''
  here, there = common.checkpoint_round(out), common.checkpoint_round(dest)
  if not here:
    log(f'skipped {out}: its checkpoint holds no completed round')
    return ''
  if there is not None and there > here:
    log(f'kept {dest} (round {there}): {out} is behind it (round {here})')
    return ''
  log(f'{"would park" if dry_run else "parked"} {out} (checkpoint after round {here}) '
      f'-> {dest}')
  if not dry_run:
    os.makedirs(dest, exist_ok=True)
    common.copy_config(out, dest)
    shutil.copy(os.path.join(out, runner.CHECKPOINT), os.path.join(dest, runner.CHECKPOINT))
    rows = common.read_rows(os.path.join(out, 'metrics.csv')) or []
    kept = [r for r in rows if int(float(r['round'])) <= here]
    if kept:
      common.write_table(os.path.join(dest, 'metrics.csv'), kept)
    else:
      with open(os.path.join(dest, 'metrics.csv'), 'w') as f:
        f.write('round\n')
  return dest


def _config(folder: str) -> dict:
  with open(os.path.join(folder, 'config.json')) as f:
    return json.load(f)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.park_runs', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--runs-dir', default='runs')
  p.add_argument('--figures-dir', default='figures')
  p.add_argument('--dry-run', action='store_true')
  p.add_argument('--only', nargs='+', metavar='RUN',
                 help='park only these interrupted runs (a run folder name, or '
                 '<method>/<run>); the default parks every interrupted run')
  args = p.parse_args(argv)
  try:
    done = park(args.runs_dir, args.figures_dir, args.dry_run, only=args.only)
  except ValueError as e:
    p.error(str(e))
  print(f'{len(done["parked"])} interrupted run(s) {"to park" if args.dry_run else "parked"}, '
        f'{len(done["removed"])} finished copy(ies) {"to remove" if args.dry_run else "removed"}'
        f' under {args.figures_dir}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
