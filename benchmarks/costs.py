"""What regenerating each paper's artefacts costs on this machine, projected from probes.

    python -m benchmarks.run --only papers --data-dir DIR [--papers a_dpfl ...]
        [--probe-rounds 3] [--fresh]

Every artefact table under `figures/<paper>/` (a CSV with a `run` or `run_dir` column)
names the runs behind it; each run's published `config.json` and `summary.json` give its
real configuration, the rounds it completed and the wall time it recorded (often with
other jobs beside it, so an overstatement of its time alone). Runs whose per-round work
is the same (`probe_key`: the configuration without seed, rounds, privacy levels and
other settings that do not change what a round computes) share one probe: the first
such run's configuration, run through `tffdp.runner` for `--probe-rounds` rounds on the
real data. A run's projection is then

    set-up + rounds_completed x (median round without evaluation, rounds 2 on, scaled to
    the run's expected cohort size) + evaluated rounds x (median evaluation),

and an artefact's the sum over its runs (a run shared by two artefacts counts in both;
a paper's total counts it once). Probes are written to `benchmarks/probes.csv` as they
finish, so an interrupted table resumes where it stopped (`--fresh` measures again);
the table goes to `benchmarks/costs.md` and `benchmarks/costs.csv`. Measure with the
machine otherwise idle: the projection is the time alone.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import platform
import tempfile
import time
from typing import Optional

import numpy as np

from experiments import common
from tffdp import config as config_lib

PAPERS = ('a_dpfl', 'aadp_fl', 'adap_dp_fl', 'cosafed', 'dp_fedags')
HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(HERE, 'probes.csv')
PROBE_COLUMNS = ('key', 'run', 'method', 'dataset', 'model', 'probe_rounds',
                 'setup_seconds', 'train_seconds', 'eval_seconds', 'expected_cohort',
                 'measured', 'machine', 'error')
# Settings that do not change what a round computes (privacy levels, seeds, lengths,
# where things are written); `q_user` scales the cohort (`expected_cohort`) instead.
FREE_FIELDS = frozenset({
    'seed', 'out', 'notes', 'rounds', 'noise_multiplier', 'epsilon_budget', 'delta',
    'data_dir', 'client_cache_dir', 'log_every', 'checkpoint_every', 'workers',
    'worker_timeout', 'clip_norm', 'learning_rate', 'eval_every', 'method_hyperparameters',
    'stop_after_round', 'stop_after_rejected', 'partition', 'clients_per_round'})
# Partition options that change how much data a client holds (the others only how
# labels are spread, which leaves a round's work as it is).
COSTLY_PARTITION_OPTIONS = frozenset({'examples_per_client'})
FREE_OPTIONS = frozenset({
    'epsilon', 'epsilon_max', 'epsilon_floor', 'delta_s', 'delta_s_scale', 'sensitivity',
    'l1_clip', 'rho', 'l', 'alpha', 'beta', 'max_norm', 'clipping_factor', 'p_fixed',
    'cosfed_cosine', 'nadam_epsilon', 'epsilon_1_fraction', 'epsilon_2_fraction',
    'server_learning_rate', 'cap_at_max', 'modclip_prob', 'q_user', 'k'})


def probe_key(config: dict) -> str:
  """A 12-hex-digit digest of the settings of `config` (a `config.json`) that change a
  round's work: two runs with the same key share one probe.

  The cohort size is left out (`FREE_FIELDS`): a round's time is taken as proportional
  to its expected cohort (`expected_cohort`), as `projected_seconds` scales it.
  """
  d = dataclasses.asdict(config_lib.from_dict(config))
  kept = {k: v for k, v in d.items() if k not in FREE_FIELDS and k != 'method_options'}
  kept['partition_options'] = {k: v for k, v in (d.get('partition_options') or {}).items()
                               if k in COSTLY_PARTITION_OPTIONS}
  kept['method_options'] = {k: v for k, v in (d.get('method_options') or {}).items()
                            if k not in FREE_OPTIONS}
  text = json.dumps(kept, sort_keys=True, default=str)
  return hashlib.sha1(text.encode()).hexdigest()[:12]


def expected_cohort(config: dict) -> float:
  """Expected cohort size: `clients_per_round` times AADP-FL's `q_user` (1 elsewhere)."""
  options = config.get('method_options') or {}
  return float(config.get('clients_per_round') or 1) * float(options.get('q_user', 1.0))


def evaluated_rounds(rounds: int, eval_every: int) -> int:
  """Rounds of `1..rounds` that evaluate: every `eval_every`-th and the last."""
  return len({r for r in range(1, rounds + 1)
              if r % max(eval_every, 1) == 0 or r == rounds})


def artefact_runs(figs: str) -> dict[str, list[str]]:
  """`{artefact: [run folder as its table names it]}` for the tables in `figs`.

  An artefact is a CSV directly in `figs` with a `run` or `run_dir` column whose values
  are run folders (`runs/...` or `$RUNS_DIR/...`); other tables are skipped.
  """
  out = {}
  for name in sorted(os.listdir(figs)):
    if not name.endswith('.csv'):
      continue
    rows = common.read_rows(os.path.join(figs, name)) or []
    runs = []
    for row in rows:
      for column in ('run_dir', 'run'):
        value = row.get(column) or ''
        if common.run_key(value) and value not in runs:
          runs.append(value)
          break
    if runs:
      out[name[:-len('.csv')]] = runs
  return out


def published_runs(figs: str) -> dict[str, tuple[dict, dict]]:
  """`{run_key: (config, summary)}` of the finished run copies under `figs`."""
  out = {}
  for root, run_out, config in common.run_copies(figs, ('config.json', 'summary.json')):
    key = common.run_key(run_out)
    if key and key not in out and not common.is_parked(root):
      with open(os.path.join(root, 'summary.json')) as f:
        out[key] = (config, json.load(f))
  return out


def read_probes(path: str = PROBES) -> dict[str, dict]:
  """`{key: probe row}` of `path` (the last row per key wins); {} without the file."""
  rows = (common.read_rows(path) or []) if os.path.exists(path) else []
  return {r['key']: r for r in rows}


def _append_probe(path: str, row: dict) -> None:
  new = not os.path.exists(path)
  with open(path, 'a', newline='') as f:
    w = csv.DictWriter(f, fieldnames=PROBE_COLUMNS)
    if new:
      w.writeheader()
    w.writerow({k: row.get(k, '') for k in PROBE_COLUMNS})


def probe(config: dict, data_dir: str, cache: str, rounds: int) -> dict:
  """Runs `config` for `rounds` rounds in a scratch folder; its per-round costs.

  Args:
    config: A published `config.json`.
    data_dir: Folder with the dataset files (replaces the recorded one).
    cache: Scratch folder for the run and the client cache.
    rounds: Rounds to run (>= 2: round 1 traces and is left out).

  Returns:
    Probe row fields: `setup_seconds` (wall time outside the rounds), `train_seconds`
    (median round without evaluation, rounds 2 on, scaled to the expected cohort),
    `eval_seconds` (median evaluation; the last probe round always evaluates),
    `expected_cohort`.
  """
  from tffdp import plotting  # pylint: disable=g-import-not-at-top
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  cfg = config_lib.from_dict(config)
  cfg.data_dir, cfg.client_cache_dir, cfg.workers = data_dir, os.path.join(cache, 'clients'), None
  cfg.out = tempfile.mkdtemp(dir=cache)
  cfg.stop_after_round, cfg.log_every = min(rounds, cfg.rounds), rounds
  t0 = time.perf_counter()
  runner.run(cfg, log=lambda s: None, command=['benchmarks.costs probe'])
  wall = time.perf_counter() - t0
  rows = plotting.read_metrics(cfg.out)
  cohort = expected_cohort(config)
  later = rows[1:] or rows
  train = float(np.median([(r['round_seconds'] - (r['eval_seconds'] or 0.0)) * cohort /
                           max(r['cohort_size'], 1.0) for r in later]))
  evals = [r['eval_seconds'] for r in rows if r['eval_seconds']]
  return dict(setup_seconds=wall - sum(r['round_seconds'] for r in rows),
              train_seconds=train, eval_seconds=float(np.median(evals)) if evals else 0.0,
              expected_cohort=cohort)


def projected_seconds(config: dict, summary: dict, row: dict) -> float:
  """A run's projected wall time alone from its probe `row` (module docstring)."""
  rounds = int(summary.get('rounds_completed') or config['rounds'])
  scale = expected_cohort(config) / max(float(row['expected_cohort']), 1e-12)
  return (float(row['setup_seconds']) + rounds * float(row['train_seconds']) * scale +
          evaluated_rounds(rounds, int(config.get('eval_every') or 1)) *
          float(row['eval_seconds']))


def cost_rows(papers, data_dir: str, figures_dir: str, probe_rounds: int = 3,
              fresh: bool = False, probes_path: str = PROBES, log=print) -> list[dict]:
  """One row per paper artefact (and a total per paper): runs, recorded and projected
  hours; probes missing from `probes_path` are measured (and appended) first."""
  probes = {} if fresh else read_probes(probes_path)
  if fresh and os.path.exists(probes_path):
    os.remove(probes_path)
  out = []
  with tempfile.TemporaryDirectory() as cache:
    for paper in papers:
      figs = os.path.join(figures_dir, paper)
      runs = published_runs(figs)
      artefacts = artefact_runs(figs)
      seen = {}
      for artefact, names in artefacts.items():
        recorded = projected = 0.0
        found, missing = 0, []
        for name in names:
          key = common.run_key(name)
          if key not in runs:
            missing.append(name)
            continue
          config, summary = runs[key]
          pkey = probe_key(config)
          if pkey not in probes:
            log(f'[papers] {paper}/{artefact}: probing {key} ({len(probes)} probes so far)')
            row = dict(key=pkey, run=key, method=config['method'],
                       dataset=config['dataset'], model=config.get('model'),
                       probe_rounds=probe_rounds, measured=time.strftime('%Y-%m-%d'),
                       machine=f'{platform.machine()}, {os.cpu_count()} CPUs')
            try:
              row.update(probe(config, data_dir, cache, probe_rounds))
            except Exception as e:  # pylint: disable=broad-except
              row['error'] = f'{type(e).__name__}: {e}'.replace('\n', ' ')[:300]
            _append_probe(probes_path, row)
            probes[pkey] = {k: str(v) for k, v in row.items()}
          row = probes[pkey]
          found += 1
          recorded += float(summary.get('wall_seconds') or 0.0)
          if row.get('error'):
            projected = float('nan')
          else:
            projected += projected_seconds(config, summary, row)
          seen[key] = (float(summary.get('wall_seconds') or 0.0),
                       float('nan') if row.get('error') else
                       projected_seconds(config, summary, row))
        out.append(dict(paper=paper, artefact=artefact, runs=found,
                        missing_runs=len(missing), recorded_hours=recorded / 3600,
                        projected_hours=projected / 3600))
      out.append(dict(paper=paper, artefact='(all, each run once)', runs=len(seen),
                      missing_runs='', recorded_hours=sum(r for r, _ in seen.values()) / 3600,
                      projected_hours=sum(p for _, p in seen.values()) / 3600))
  return out


def _hours(v) -> str:
  return '' if v == '' else ('not measured' if v != v else f'{v:.2f}')


def write_table(rows: list[dict], probes_path: str = PROBES,
                md_path: str = os.path.join(HERE, 'costs.md'),
                csv_path: str = os.path.join(HERE, 'costs.csv'),
                command: str = 'python -m benchmarks.run --only papers --data-dir DIR') -> str:
  """Writes `rows` (`cost_rows`) as `csv_path` and a generated Markdown page `md_path`;
  returns the Markdown."""
  common.write_table(csv_path, [{k: (f'{v:.4f}' if isinstance(v, float) else v)
                                 for k, v in r.items()} for r in rows])
  probes = read_probes(probes_path)
  errors = [p for p in probes.values() if p.get('error')]
  dates = sorted({p['measured'] for p in probes.values() if p.get('measured')})
  machines = sorted({p['machine'] for p in probes.values() if p.get('machine')})
  lines = [
      '# What each paper costs to regenerate (generated; do not edit)', '',
      f'`{command}` writes this page from `benchmarks/probes.csv` '
      f'({len(probes)} probes, measured {", ".join(dates) or "never"} on '
      f'{"; ".join(machines) or "-"}).',
      'Projected hours are the time alone: each run\'s set-up, its completed rounds times '
      'the median round of a short probe of a run with the same per-round work, scaled to '
      'its expected cohort, plus its evaluations (`benchmarks/costs.py`). Recorded hours '
      'sum the runs\' own `wall_seconds`, most made two or three at a time, so they '
      'overstate the time alone. An artefact table counts every run it names; a '
      'paper\'s total counts each run once.', '',
      '| paper | artefact | runs | recorded h | projected h alone |', '|---|---|---|---|---|']
  for r in rows:
    bold = r['artefact'].startswith('(')
    cell = lambda v: f'**{_hours(v)}**' if bold else _hours(v)
    missing = f' ({r["missing_runs"]} not published)' if r['missing_runs'] else ''
    lines.append(f'| {r["paper"]} | {r["artefact"]} | {r["runs"]}{missing} | '
                 f'{cell(r["recorded_hours"])} | {cell(r["projected_hours"])} |')
  if errors:
    lines += ['', 'Probes that failed (their runs are "not measured"):', '']
    lines += [f'- `{p["run"]}`: {p["error"]}' for p in errors]
  text = '\n'.join(lines) + '\n'
  with open(md_path, 'w') as f:
    f.write(text)
  return text
