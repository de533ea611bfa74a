"""Helpers shared by every experiment module: cached and resumable runs, tables, entry.

A run whose `summary.json` exists for the same configuration is reused; an interrupted
run resumes from its checkpoint.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil
import sys

from tffdp import config as config_lib
from tffdp import plotting, runner, runtime


def run_cached(cfg: config_lib.RunConfig, out: str, command: list[str],
               log=print) -> list[dict]:
  """Runs (or reuses / resumes) one configuration; returns its metrics rows.

  `log` receives the progress lines (default `print`).
  """
  cfg = dataclasses.replace(cfg, out=out)
  summary = os.path.join(out, 'summary.json')
  config_json = os.path.join(out, 'config.json')
  if os.path.exists(summary) and os.path.exists(config_json):
    with open(config_json) as f:
      old = json.load(f)
    if not config_lib.differing_fields(old, dataclasses.asdict(cfg.resolved()),
                                       ignore=('out', 'notes', 'log_every', 'checkpoint_every')):
      log(f'== reusing {out}')
      return plotting.read_metrics(out)
    shutil.rmtree(out)
  log(f'== {cfg.method} on {cfg.dataset} -> {out}')
  resume = os.path.exists(os.path.join(out, runner.CHECKPOINT))
  runner.run(cfg, resume=resume, command=command, log=log)
  return plotting.read_metrics(out)


def copy_results(out: str, dest: str) -> None:
  os.makedirs(dest, exist_ok=True)
  for f in ('config.json', 'metrics.csv', 'summary.json'):
    shutil.copy(os.path.join(out, f), os.path.join(dest, f))


def write_table(path: str, rows: list[dict]) -> None:
  """Writes `rows` (dicts with the same keys) as CSV, creating the folder."""
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'w') as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)


def entry(main) -> None:
  runtime.use_local_context()
  code = main()
  runtime.shutdown_workers()
  sys.exit(code)


def read_rows(path: str):
  """Rows of a CSV file as dicts of strings, or None if the file does not exist."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return list(csv.DictReader(f))


def fmt(v, digits: int = 4, empty: str = '') -> str:
  """A number with `digits` significant digits (`inf` as is); other values as text."""
  try:
    x = float(v)
  except (TypeError, ValueError):
    return empty if v in (None, '') else str(v)
  return 'inf' if x == float('inf') else f'{x:.{digits}g}'


def report_main(prog: str, doc: str, default_dir: str, build, argv=None) -> int:
  """CLI of a report module: writes `build(figures_dir)` to `<figures_dir>/README.md`."""
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser(prog=prog, description=doc)
  p.add_argument('--figures-dir', default=default_dir)
  args = p.parse_args(argv)
  os.makedirs(args.figures_dir, exist_ok=True)
  text = build(args.figures_dir)
  with open(os.path.join(args.figures_dir, 'README.md'), 'w') as f:
    f.write(text)
  print(text)
  return 0
