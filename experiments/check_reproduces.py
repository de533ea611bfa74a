"""Reruns the first rounds of committed runs and compares them with their committed rows.

    python -m experiments.check_reproduces RUN_DIR [RUN_DIR ...] [--rounds N]
        [--data-dir DIR]

A `RUN_DIR` is a committed run copy (e.g. `figures/a_dpfl/fig4_mnist/a_dpfl`,
`figures/adap_dp_fl/runs/mnist_decay_seed0`) holding `config.json` and `metrics.csv` or
`metrics_evaluated.csv`. Each is rerun from its recorded configuration for its first
`--rounds` rounds (in a temporary folder) and every round both have is compared column by
column (accuracies, losses, both epsilons, the adaptive quantities): the check that a
change to the package leaves the published results as they were. Exit code 0 when every
value agrees to `--rtol`, 1 otherwise (the differing values are printed), 2 on bad input.

A run that differs is printed with the code that made it (its `summary.json` segments, from
commit f6676e0 on) against this checkout's, and with the commits in `RESULT_CHANGES` it
predates: those change the values a seed draws, so an older run differs without a
regression (rerun it at its own commit to compare). A run made on another machine can
differ at rounding level too (another TensorFlow build or CPU picks other float32 kernels):
rerun it at its own commit on this machine (`git worktree add DIR <commit>`, then this
command from DIR with `PYTHONPATH=DIR`); the same values there mean the code has not
changed them. (A-DPFL's benchmark run `fashion_mnist_a_dpfl_eps4_lr0.05_c1_seed0` as
committed at d8cf6d9, made at 1fd6bed on another machine, gives round 2's training loss
2.786407 on the machine of 2026-12-06 at 1fd6bed and at cc3e2ef, against its committed
2.785980.)

A run of noise no seed fixes (its method notes say `not bit-reproducible`, or it predates
the commit that seeded its method's noise, `SEEDED_SINCE`: DP-FedAvg before 19f5d4a) is
compared on what a rerun can reproduce: both epsilons, the cohort sizes and round 1's
training loss. (A-DPFL's `fig4_mnist_E5_lr0.1/cl_fl_sigma4`, DP-FedAvg made at 6094747,
reran at 6094747 on 2026-12-07 to a round-1 test accuracy of 0.2595 against its committed
0.2556, and at 24d36bd and later to 0.2460.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import tempfile
from typing import Callable, Optional

from experiments import common

COLUMNS = ('test_accuracy', 'test_loss', 'validation_accuracy', 'validation_loss',
           'train_loss', 'epsilon_claimed', 'epsilon_guaranteed', 'epsilon_claimed_mean',
           'epsilon_guaranteed_mean', 'cohort_size', 'noise_multiplier', 'clip_norm',
           'clip_norm_min', 'clip_norm_max', 'server_validation_accuracy',
           'server_validation_loss', 'uploading_clients')

# The DP-FedAGS family's eq. 37 mean as four sums (`RESULT_CHANGES`; the DP-FedAGS report
# says which calibrated runs predate it).
DP_FEDAGS_MEAN_CHANGE = '0b38246'
# Commits after which a run's seed draws other values (same distributions): runs made
# before them do not reproduce their rows with later code.
RESULT_CHANGES = (
    ('ddbf078', 'DP-SGD noise drawn by queries.standard_normal (Box-Muller on Philox '
                'uniforms) instead of tf.random.stateless_normal'),
    ('0b262f3', 'per-example kernel gradients of conv layers with c_in * c_out <= 64 by '
                'one depthwise filter gradient: float32 sums in another order (values move '
                'at rounding level, e.g. one test example after 2 rounds)'),
    (DP_FEDAGS_MEAN_CHANGE,
     "DP-FedAGS family: eq. 37's mean as four independent sums (was one weighted sum after "
     'summing L and n): float32 sums in another order (values move at rounding level)'),
)
# The commit from which `summary.json` records the code of each segment of a run.
SEGMENTS_COMMIT = 'f6676e0'
# Commits before which a method drew its noise from an RNG no seed fixes: a run of it made
# before one is compared as a run of unseeded noise (`UNSEEDED_COLUMNS`), even by the code
# that made it. `(commit, methods, what)`.
SEEDED_SINCE = (
    ('19f5d4a', ('dp_fedavg',),
     "DP-FedAvg's noise drawn by TFF's Gaussian sum query from TF's unseeded RNG (seeded "
     'from the run seed since: baselines.seeded_gaussian_fixed)'),
)


def _git_is_ancestor(commit: str, of: str) -> Optional[bool]:
  """Whether `commit` is an ancestor of (or is) `of` in this checkout; None if unknown."""
  try:
    rc = subprocess.run(['git', 'merge-base', '--is-ancestor', commit, of],
                        cwd=os.path.dirname(os.path.abspath(__file__)),
                        capture_output=True, timeout=10, check=False).returncode
  except (OSError, subprocess.SubprocessError):
    return None
  return {0: True, 1: False}.get(rc)


def _commit_of(code: str) -> Optional[str]:
  """The commit in a `runner.code_version()` string (`0.1.0+<git describe>`), if any."""
  m = re.search(r'\+(?:.*-g)?([0-9a-f]{7,40})(?:-dirty)?$', code or '')
  return m.group(1) if m else None


def includes(summary: Optional[dict], commit: str,
             is_ancestor: Callable[[str, str], Optional[bool]] = _git_is_ancestor
             ) -> Optional[bool]:
  """Whether every segment of a run was made by code that includes `commit`.

  Args:
    summary: The run's parsed `summary.json` (None for a run without one).
    commit: A commit of this checkout (e.g. one of `RESULT_CHANGES`).
    is_ancestor: `(commit, of) -> bool or None`: whether `commit` is in `of`'s history.

  Returns:
    True when every segment's code includes it, False when a segment's code predates it
    (or the run records no code and `commit` came after `SEGMENTS_COMMIT`), None when it
    cannot be told.
  """
  codes = [_commit_of(s.get('code') or '') for s in (summary or {}).get('segments') or []]
  if not codes:
    return False if is_ancestor(commit, SEGMENTS_COMMIT) is False else None
  found = [is_ancestor(commit, c) if c else None for c in codes]
  if any(f is False for f in found):
    return False
  return True if all(f is True for f in found) else None


def provenance(summary: Optional[dict], current: str,
               is_ancestor: Callable[[str, str], Optional[bool]] = _git_is_ancestor
               ) -> list[str]:
  """Lines saying which code made a run and which `RESULT_CHANGES` it predates.

  Args:
    summary: The run's parsed `summary.json` (None for a run without one).
    current: This checkout's `tffdp.runner.code_version()`.
    is_ancestor: `(commit, of) -> bool or None`: whether `commit` is in `of`'s history.

  Returns:
    One line on the recorded code (each segment's, or that none is recorded), then one per
    result change the run's code does not include (or may not, when unknown).
  """
  segments = (summary or {}).get('segments') or []
  codes = [s.get('code') or 'unknown' for s in segments]
  if not codes:
    lines = [f'code: not recorded (runs made before {SEGMENTS_COMMIT} record none); '
             f'this checkout {current}']
  else:
    lines = [f'code: {", ".join(dict.fromkeys(codes))} (by segment); this checkout {current}']
  for commit, what in RESULT_CHANGES:
    found = [is_ancestor(commit, c) if c else None for c in map(_commit_of, codes)]
    if codes and all(f is True for f in found):
      continue
    if not codes:  # made before SEGMENTS_COMMIT: before `commit` too if that came later
      before = is_ancestor(commit, SEGMENTS_COMMIT)
      lines.append(f'the run {"predates" if before is False else "may predate"} {commit}: '
                   f'{what}')
    elif any(f is False for f in found):
      lines.append(f'the run predates {commit}: {what}')
    else:
      lines.append(f'whether the run includes {commit} is unknown: {what}')
  return lines


def unseeded_before(recorded: dict, summary: Optional[dict],
                    is_ancestor: Callable[[str, str], Optional[bool]] = _git_is_ancestor
                    ) -> list[str]:
  """Why a run drew unseeded noise by the code that made it (`SEEDED_SINCE`): one line per
  commit its method's noise was seeded by that the run predates (or may: its code
  unknown); empty for a run of seeded noise.

  Args:
    recorded: The run's `config.json`.
    summary: Its `summary.json` (None for a run without one).
    is_ancestor: `(commit, of) -> bool or None`, as for `includes`.
  """
  out = []
  for commit, methods, what in SEEDED_SINCE:
    if recorded.get('method') in methods:
      found = includes(summary, commit, is_ancestor)
      if found is not True:
        out.append(f'the run {"predates" if found is False else "may predate"} {commit}: '
                   f'{what}')
  return out


def _rows(run_dir: str) -> list[dict]:
  for name in ('metrics.csv', 'metrics_evaluated.csv'):
    rows = common.read_rows(os.path.join(run_dir, name))
    if rows is not None:
      return rows
  raise ValueError(f'{run_dir} holds neither metrics.csv nor metrics_evaluated.csv.')


def _close(a: str, b: str, rtol: float, atol: float) -> bool:
  x, y = float(a), float(b)
  if math.isinf(x) or math.isinf(y) or math.isnan(x) or math.isnan(y):
    return str(x) == str(y)
  return abs(x - y) <= atol + rtol * abs(y)


# What a rerun of a run whose noise comes from TF's stateful RNG (its method notes say
# `noise_rng ... not bit-reproducible`) can reproduce: the DP events (both epsilons, every
# round, as long as no adaptive quantity has reacted to the noise) and the first round's
# training loss (the clients train from the seeded initial model before any noise).
UNSEEDED_COLUMNS = ('epsilon_claimed', 'epsilon_guaranteed', 'epsilon_claimed_mean',
                    'epsilon_guaranteed_mean', 'cohort_size')


def unseeded_noise(recorded: dict) -> bool:
  """Whether the run of `recorded` (a `config.json`) drew noise no seed fixes."""
  return 'not bit-reproducible' in str(recorded.get('method_notes', {}).get('noise_rng', ''))


def epsilons_follow_noise(recorded: dict) -> bool:
  """Whether the DP events of the run of `recorded` react to its (unseeded) noise from
  round 2 on (an adaptive budget: its method notes say the epsilons are `comparable in
  round 1 only`)."""
  return 'comparable in round 1 only' in str(
      recorded.get('method_notes', {}).get('noise_rng', ''))


def compare(committed: list[dict], rerun: list[dict], rtol: float, atol: float,
            unseeded: bool = False, first_round_epsilons: bool = False) -> list[str]:
  """Differences between rows of the same rounds: `'round R column: committed vs rerun'`.

  `unseeded`: compare only `UNSEEDED_COLUMNS`, plus `train_loss` in round 1.
  `first_round_epsilons` (with `unseeded`): the epsilons in round 1 only, the cohort
  sizes in every round (`epsilons_follow_noise`).
  """
  by_round = {r['round']: r for r in rerun}
  out = []
  for row in committed:
    new = by_round.get(row['round'])
    if new is None:
      out.append(f'round {row["round"]}: committed, missing from the rerun')
      continue
    first = int(row['round']) == 1
    if not unseeded:
      columns = COLUMNS
    elif first:
      columns = UNSEEDED_COLUMNS + ('train_loss',)
    else:
      columns = ('cohort_size',) if first_round_epsilons else UNSEEDED_COLUMNS
    for col in columns:
      a, b = row.get(col, ''), new.get(col, '')
      if a in ('', None):
        continue
      if b in ('', None):
        out.append(f'round {row["round"]} {col}: committed {a}, missing from the rerun')
      elif not _close(b, a, rtol, atol):
        out.append(f'round {row["round"]} {col}: committed {a} vs rerun {b}')
  return out


def check(run_dir: str, rounds: int, data_dir, rtol: float, atol: float, log=print) -> bool:
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  with open(os.path.join(run_dir, 'config.json')) as f:
    recorded = json.load(f)
  committed = _rows(run_dir)
  rounds = min(rounds, int(committed[-1]['round']))
  with tempfile.TemporaryDirectory() as tmp:
    # The recorded T stays (AADP-FL calibrates sigma for it, A-DPFL's schedule reads it):
    # the rerun pauses after `rounds` rounds instead.
    cfg = dataclasses.replace(config_lib.from_dict(recorded), stop_after_round=rounds,
                              out=os.path.join(tmp, 'run'), data_dir=data_dir,
                              client_cache_dir=None, log_every=max(1, rounds // 5),
                              workers=None)
    runner.run(cfg, command=['experiments.check_reproduces'],
               log=lambda s: log(f'  {s}'))
    rerun = _rows(cfg.out)
    rerun_config = common.read_json(os.path.join(cfg.out, 'config.json'))
  compared = [r for r in committed if int(r['round']) <= rounds]
  summary_path = os.path.join(run_dir, 'summary.json')
  summary = common.read_json(summary_path) if os.path.exists(summary_path) else None
  before_seeding = unseeded_before(recorded, summary)
  # This checkout's notes count too: a run recorded before its method said so.
  unseeded = unseeded_noise(recorded) or unseeded_noise(rerun_config) or bool(before_seeding)
  follow = epsilons_follow_noise(recorded) or epsilons_follow_noise(rerun_config)
  diffs = compare(compared, rerun, rtol, atol, unseeded, first_round_epsilons=follow)
  status = 'differs' if diffs else 'reproduces'
  what = ('' if not unseeded else
          '; unseeded noise, adaptive budget: round 1\'s epsilons and training loss, the '
          'cohort sizes' if follow else
          '; unseeded noise: the epsilons, cohort sizes and round-1 training loss')
  log(f'{run_dir}: {status} over rounds 1-{rounds} ({len(compared)} committed rows '
      f'compared{what})')
  for line in before_seeding:
    log(f'  {line}')
  for d in diffs[:20]:
    log(f'  {d}')
  if diffs:
    for line in provenance(summary, runner.code_version()):
      log(f'  {line}')
  return not diffs


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.check_reproduces', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('runs', nargs='+', metavar='RUN_DIR')
  p.add_argument('--rounds', type=int, default=3, help='rounds to rerun (default 3)')
  p.add_argument('--data-dir', default=None)
  p.add_argument('--rtol', type=float, default=1e-4)
  p.add_argument('--atol', type=float, default=1e-6)
  args = p.parse_args(argv)
  for run_dir in args.runs:
    if not os.path.exists(os.path.join(run_dir, 'config.json')):
      p.exit(2, f'error: no config.json in {run_dir}\n')
  ok = [check(r, args.rounds, args.data_dir, args.rtol, args.atol) for r in args.runs]
  print(f'{sum(ok)} of {len(ok)} runs reproduce their committed rows')
  return 0 if all(ok) else 1


if __name__ == '__main__':
  common.entry(main)
