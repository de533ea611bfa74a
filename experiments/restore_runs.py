"""Puts the finished runs committed under `figures/` back into a runs folder.

    python -m experiments.restore_runs [--figures-dir figures] [--runs-dir runs] [--dry-run]

Every experiment module copies each finished run's `config.json`, `metrics.csv` and
`summary.json` to `figures/` (`experiments.common.copy_results`), and reuses a run whose
folder holds a `summary.json` for the same configuration (`experiments.common.run_cached`).
On a fresh checkout the runs folder is empty, so a figure command would run every curve
again, the finished ones included. This module writes the committed copies back to the
folders their `config.json` names (`"out"`: `$RUNS_DIR/<method>/<run>` or
`runs/<method>/<run>`, both taken relative to `--runs-dir`), so the figure commands reuse
them and run only what is missing.

A run paused at its `stop_after_round` (a pilot: `experiments.common.paused_run`) has no
`summary.json`; its copy (`config.json`, `metrics.csv`) is restored too, and the pilot's
command reuses it. An interrupted run parked with its checkpoint
(`python -m experiments.park_runs`: `<paper>/interrupted/<run>/` holds `checkpoint.npz`)
is restored with it, and the figure command resumes it; a finished copy of the same run,
where one is committed too, wins over it.

A folder that already holds a `summary.json` or a checkpoint is left as it is (a finished
or interrupted run of this machine wins over a copy). Restored finished runs have no
checkpoint and no final weights: modules that reload a trained model
(`experiments.dp_fedags.mia`) run those again. The reuse test of `run_cached` still
compares the whole configuration, so a copy made under another configuration is not
reused; where the data is read from (`data_dir`, `client_cache_dir`) is left out of it,
since the official dataset files are checked against their checksums (an extracted CIFAR
folder by its structure).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from experiments import common
from tffdp import runner

FILES = ('config.json', 'metrics.csv', 'summary.json', runner.CHECKPOINT)
PAUSED_FILES = ('config.json', 'metrics.csv')


def committed_runs(figures_dir: str) -> dict[str, str]:
  """Finished run copies under `figures_dir`, by the run folder they came from.

  Args:
    figures_dir: Folder searched recursively for run copies (a folder holding all of
      `FILES`, or `PAUSED_FILES` of a paused run: `common.paused_run`).

  Returns:
    `{relative run folder (e.g. 'a_dpfl/mnist_fedavg_noniid_seed0'): copy folder}`; where
    several copies name one run (a run shared by two figures) the first in sorted path
    order is kept, and a finished or paused copy before an interrupted one of the same
    configuration (a copy holding `checkpoint.npz`, `experiments.park_runs`). Copies
    whose `"out"` is neither under `$RUNS_DIR/` nor `runs/` are skipped.
  """
  found, parked = {}, {}
  for root, out, config in common.run_copies(figures_dir, PAUSED_FILES):
    key = common.run_key(out)
    if key is None:
      continue
    if os.path.exists(os.path.join(root, 'summary.json')) or common.paused_run(
        config, common.read_rows(os.path.join(root, 'metrics.csv')) or []):
      found.setdefault(key, (root, config))
    elif os.path.exists(os.path.join(root, runner.CHECKPOINT)):
      parked.setdefault(key, (root, config))
  chosen = {key: root for key, (root, _) in parked.items()}
  for key, (root, config) in found.items():
    # A parked run of another configuration (the figure's current one) wins over an
    # older finished copy: the figure command would run it again anyway.
    if key not in parked or common.same_run_config(config, parked[key][1]):
      chosen[key] = root
  return chosen


def restore(figures_dir: str, runs_dir: str, dry_run: bool = False,
            log=print) -> list[str]:
  """Copies each committed run (`committed_runs`) into `runs_dir` where none is there.

  Args:
    figures_dir: Folder holding the committed run copies.
    runs_dir: The runs root (the Makefile's `RUNS_DIR`, default `runs`).
    dry_run: Only list what would be restored.
    log: Receives one line per restored run.

  Returns:
    The run folders written (or that would be, with `dry_run`).
  """
  written = []
  for rel, src in sorted(committed_runs(figures_dir).items()):
    dest = os.path.join(runs_dir, rel)
    if os.path.exists(os.path.join(dest, runner.CHECKPOINT)) and os.path.exists(
        os.path.join(src, runner.CHECKPOINT)) and not os.path.exists(
            os.path.join(dest, 'summary.json')):
      here, there = common.checkpoint_round(dest), common.checkpoint_round(src)
      if there > here:
        log(f'note: {dest} holds a checkpoint at round {here}, its parked copy {src} one '
            f'at round {there}; kept this one (remove the folder to take the copy)')
    if _holds_a_run(dest):
      continue
    if dry_run:
      if runner.is_running(dest):
        log(f'skipped {dest}: a process is running it')
      else:
        log(f'would restore {dest} <- {src}')
        written.append(dest)
      continue
    os.makedirs(dest, exist_ok=True)
    try:
      with runner.run_lock(dest):  # checked and copied under the lock a run takes
        if _holds_a_run(dest):
          continue
        for f in FILES:
          if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), os.path.join(dest, f))
    except runner.RunInProgressError:  # started here, before its first checkpoint
      log(f'skipped {dest}: a process is running it')
      continue
    log(f'restored {dest} <- {src}')
    written.append(dest)
  return written


def _holds_a_run(folder: str) -> bool:
  """True where `folder` holds a finished run (`summary.json`) or a checkpoint."""
  return any(os.path.exists(os.path.join(folder, f)) for f in ('summary.json',
                                                                runner.CHECKPOINT))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.restore_runs', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--figures-dir', default='figures')
  p.add_argument('--runs-dir', default='runs')
  p.add_argument('--dry-run', action='store_true')
  args = p.parse_args(argv)
  n = len(restore(args.figures_dir, args.runs_dir, args.dry_run))
  print(f'{n} run(s) {"to restore" if args.dry_run else "restored"} into {args.runs_dir}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
