"""What regenerating each paper's artefacts costs on this machine, projected from probes.

    python -m benchmarks.run --only papers --data-dir DIR [--papers a_dpfl ...]
        [--probe-rounds 3] [--fresh] [--slices]

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
finish, so an interrupted table resumes where it stopped (`--fresh` measures the
probes of `--papers` again);
the table goes to `benchmarks/costs.md` and `benchmarks/costs.csv`. Measure with the
machine otherwise idle: the projection is the time alone.

With `--slices`, each run is probed a second time as an experiment module runs it afresh
by default (`--clients-per-slice 1`, `in_slices_of_one`: cohort slices of one client,
batches read by index tensors, where the method runs the same round so); the table's
last two columns project that. The published runs were made one TFF client per client
(`--one-tff-client-per-client`), which the columns before them project.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
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
PROBE_COLUMNS = ('key', 'run', 'method', 'dataset', 'model', 'clients_per_slice',
                 'probe_rounds',
                 'setup_seconds', 'train_seconds', 'eval_seconds', 'expected_cohort',
                 'floor_round_seconds', 'floor_eval_seconds', 'floor_server_seconds',
                 'measured', 'machine', 'error')
# Settings that do not change what a round computes (privacy levels, seeds, lengths,
# where things are written); `q_user` scales the cohort (`expected_cohort`) instead.
FREE_FIELDS = frozenset({
    'seed', 'out', 'notes', 'rounds', 'noise_multiplier', 'epsilon_budget', 'delta',
    'data_dir', 'client_cache_dir', 'log_every', 'checkpoint_every', 'workers',
    'worker_timeout', 'clip_norm', 'learning_rate', 'eval_every', 'method_hyperparameters',
    'stop_after_round', 'stop_after_rejected', 'partition', 'clients_per_round'})
# Partition options that change how much data a client holds (the others only how
# labels are spread, which leaves a round's work as it is), and partitions whose client
# sizes differ from the label-spreading ones (shards).
COSTLY_PARTITION_OPTIONS = frozenset({'examples_per_client', 'shards_per_client',
                                      'num_shards'})
SIZED_PARTITIONS = frozenset({'label_shards', 'label_shards_equal'})
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
  if d.get('partition') in SIZED_PARTITIONS:
    kept['partition'] = d['partition']
  kept['method_options'] = {k: v for k, v in (d.get('method_options') or {}).items()
                            if k not in FREE_OPTIONS}
  text = json.dumps(kept, sort_keys=True, default=str)
  return hashlib.sha1(text.encode()).hexdigest()[:12]


def expected_cohort(config) -> float:
  """Expected cohort size of a run (`config.json` dict or any object with its fields):
  `clients_per_round` times AADP-FL's user sampling probability `q_user`, which draws
  its own Poisson cohorts from all `clients` (so `clients` for it)."""
  get = config.get if isinstance(config, dict) else (lambda k: getattr(config, k, None))
  q_user = float((get('method_options') or {}).get('q_user', 1.0))
  base = get('clients') if get('method') == 'aadp_fl' else get('clients_per_round')
  return float(base or 1) * q_user


def evaluated_rounds(rounds: int, eval_every: int) -> int:
  """Rounds of `1..rounds` that evaluate: every `eval_every`-th and the last."""
  return len({r for r in range(1, rounds + 1)
              if r % max(eval_every, 1) == 0 or r == rounds})


def project_run(rows: list[dict], rounds: int, eval_every: int,
                cohort: Optional[float] = None) -> tuple[float, float]:
  """A run's projected wall time from its first rounds.

  Args:
    rows: `metrics.csv` rows (floats) of the first rounds; round 1 (tracing) is left out.
    rounds: The run's T.
    eval_every: Its `eval_every`: T / eval_every rounds (and round T) evaluate.
    cohort: The run's expected cohort size (`expected_cohort`). Given, a round's time
      without evaluation is taken as proportional to its `cohort_size` (clients'
      training dominates), so rounds whose random cohort was larger or smaller than
      expected are scaled to it; None uses the rounds as measured.

  Returns:
    `(seconds, median round seconds without evaluation)`: T x that median plus the
    evaluated rounds x the median `eval_seconds` of the evaluated rounds measured.
  """
  later = rows[1:]
  scale = [1.0 if cohort is None else cohort / max(r['cohort_size'], 1.0) for r in later]
  train = float(np.median([(r['round_seconds'] - (r['eval_seconds'] or 0.0)) * k
                           for r, k in zip(later, scale)]))
  evals = [r['eval_seconds'] for r in later if r['eval_seconds']]
  return (rounds * train + evaluated_rounds(rounds, eval_every) *
          (float(np.median(evals)) if evals else 0.0), train)


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


def rekeyed(probes: dict[str, dict], runs: dict[str, tuple[dict, dict]]) -> dict[str, dict]:
  """`probes` keyed by the current `probe_key` of the run each row probed.

  A probe row records the run whose configuration it measured (`run`). Its key is that
  configuration's digest when it was measured; a later change of what `probe_key` reads
  (a new `RunConfig` field, a regrouped configuration) changes every digest while the
  work of a round stays the same. Re-keying from the run's published `config.json` keeps
  the measurements. A row whose run is not in `runs`, or whose method, dataset or model
  differ from that run's (it was rerun otherwise since), keeps its key; where two rows
  meet on one key, the first is kept.

  Args:
    probes: `{key: probe row}` (`read_probes`).
    runs: `{run_key: (config, summary)}` of the published runs (`published_runs`).
  """
  out = {}
  for key, row in probes.items():
    config = (runs.get(row.get('run')) or (None,))[0]
    if config is not None and all(str(config.get(f) or '') == (row.get(f) or '')
                                  for f in ('method', 'dataset', 'model')):
      key = probe_key(probed_config(config, row))
    out.setdefault(key, dict(row, key=key))
  return out


def probed_config(config: dict, row: dict) -> dict:
  """The configuration probe `row` measured for the published `config`: `config` itself,
  or, for a row that records `clients_per_slice`, `config` in those slices (a probe of
  `--clients-per-slice 1`, `in_slices_of_one`)."""
  per_slice = row.get('clients_per_slice')
  return dict(config, clients_per_slice=int(per_slice)) if per_slice not in (None, '') \
      else config


def in_slices_of_one(config: dict) -> Optional[dict]:
  """A published `config` as an experiment module's `--clients-per-slice 1` runs it
  afresh (`experiments.common.in_slices_of_one`): in cohort slices of one client where
  its method runs the same round so; None where the run would be the same as published
  (another method, an audit, slices it sets itself)."""
  if not common.takes_slices_of_one(config['method'], config.get('clients_per_slice'),
                                    config.get('audit_canaries')):
    return None
  return dict(config, clients_per_slice=1)


def _write_probes(path: str, rows) -> None:
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=PROBE_COLUMNS)
    w.writeheader()
    for row in rows:
      w.writerow({k: row.get(k, '') for k in PROBE_COLUMNS})


def _append_probe(path: str, row: dict) -> None:
  """Appends `row` to `path`, rewriting the file first if it has other columns (a
  `probes.csv` of an older version of this module)."""
  new = not os.path.exists(path)
  if not new:
    with open(path) as f:
      header = f.readline().strip().split(',')
    if header != list(PROBE_COLUMNS):
      _write_probes(path, [*read_probes(path).values(), row])
      return
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
  from tffdp import runner, runtime, timing  # pylint: disable=g-import-not-at-top
  cfg = config_lib.from_dict(config)
  cfg.data_dir, cfg.client_cache_dir, cfg.workers = data_dir, os.path.join(cache, 'clients'), None
  cfg.out = tempfile.mkdtemp(dir=cache)
  cfg.stop_after_round, cfg.log_every = min(rounds, cfg.rounds), rounds
  clock = timing.running_clock()  # pauses (SIGSTOP) left out, as the runner's
  t0 = clock()
  try:
    runner.run(cfg, log=lambda s: None, command=['benchmarks.costs probe'])
  finally:
    wall = clock() - t0
    # A fresh TFF worker per probe: one worker kept across probes holds every probe's
    # computations, and grew by gigabytes over a paper's probes.
    runtime.shutdown_workers()
  rows = plotting.read_metrics(cfg.out)
  cohort = expected_cohort(config)
  train = project_run(rows, 1, 1, cohort)[1]
  unscaled = project_run(rows, 1, 1)[1]
  evals = [r['eval_seconds'] for r in rows if r['eval_seconds']]
  # Round 1's tracing beyond a later round is a one-off cost of the run: set-up.
  tracing = max(0.0, rows[0]['round_seconds'] - (rows[0]['eval_seconds'] or 0.0) - unscaled)
  return dict(setup_seconds=wall - sum(r['round_seconds'] for r in rows) + tracing,
              train_seconds=train, eval_seconds=float(np.median(evals)) if evals else 0.0,
              expected_cohort=cohort)


def _projection(config: dict, summary: dict, row: dict, per_round: str, per_eval: str,
                setup: float = 0.0, per_round_server: float = 0.0) -> float:
  """`setup` + the run's completed rounds x (`row[per_round]` scaled from the probe's
  expected cohort to the run's, + `per_round_server`, which no cohort scales) + its
  evaluated rounds x `row[per_eval]`."""
  rounds = int(summary.get('rounds_completed') or config['rounds'])
  scale = expected_cohort(config) / max(float(row['expected_cohort']), 1e-12)
  return (setup + rounds * (float(row[per_round]) * scale + per_round_server) +
          evaluated_rounds(rounds, int(config.get('eval_every') or 1)) * float(row[per_eval]))


def projected_seconds(config: dict, summary: dict, row: dict) -> float:
  """A run's projected wall time alone from its probe `row` (module docstring)."""
  return _projection(config, summary, row, 'train_seconds', 'eval_seconds',
                     float(row['setup_seconds']))


def floor_projected_seconds(config: dict, summary: dict, row: dict) -> float:
  """A run's projected time at the plain-TF floor (`floor_seconds`) from its probe `row`:
  its completed rounds at the floor round, scaled to its expected cohort, plus the
  method's own server-side forward passes of each round (`floor_server_seconds`), plus
  its evaluations at the floor evaluation; NaN where the row has no floor."""
  if row.get('floor_round_seconds') in (None, '') or row.get('floor_server_seconds') in (
      None, ''):
    return float('nan')
  return _projection(config, summary, row, 'floor_round_seconds', 'floor_eval_seconds',
                     per_round_server=float(row['floor_server_seconds']))


def _probed(runs: dict, key: str, where: str, probes: dict, probes_path: str,
            data_dir: str, cache: str, probe_rounds: int, log,
            sliced: bool = False, floor_of: Optional[dict] = None) -> Optional[dict]:
  """The probe row of the run `key` of `runs` (`published_runs`): from `probes`, else
  measured and appended to `probes_path`; with its plain-TF floor (of the probed run's
  configuration, whose cohort the row records), computed if missing.

  With `sliced`, the row of the run as `--clients-per-slice 1` runs it
  (`in_slices_of_one`); its floor (the same local steps) is taken from the row
  `floor_of` where given. A missing probe is measured only where `probe_rounds` is not
  None. None where the probe is missing and not measured, or (`sliced`) where that run
  would be the one published."""
  config, summary = runs[key]
  if sliced:
    config = in_slices_of_one(config)
    if config is None:
      return None
  pkey = probe_key(config)
  if pkey not in probes and probe_rounds is None:
    return None
  if pkey not in probes:
    log(f'[papers] {where}: probing {key}' + (' in slices of one client' if sliced else '') +
        f' ({len(probes)} probes so far)')
    row = dict(key=pkey, run=key, method=config['method'], dataset=config['dataset'],
               model=config.get('model'),
               clients_per_slice=config.get('clients_per_slice') if sliced else '',
               probe_rounds=probe_rounds, measured=time.strftime('%Y-%m-%d'),
               machine=f'{platform.machine()}, {os.cpu_count()} CPUs')
    if floor_of and floor_of.get('floor_server_seconds') not in (None, ''):
      row.update({k: floor_of[k] for k in ('floor_round_seconds', 'floor_eval_seconds',
                                           'floor_server_seconds')})
    try:
      row.update(probe(config, data_dir, cache, probe_rounds))
    except Exception as e:  # pylint: disable=broad-except
      row['error'] = f'{type(e).__name__}: {e}'.replace('\n', ' ')[:300]
    _append_probe(probes_path, row)
    probes[pkey] = {k: str(v) for k, v in row.items()}
  row = probes[pkey]
  # The configuration the probe measured.
  probed = probed_config(runs.get(row['run'], (config,))[0], row)
  if not row.get('error') and row.get('floor_round_seconds') in (None, ''):
    log(f'[papers] {where}: plain-TF floor of {row["run"]}')
    try:
      floor_round, floor_eval, floor_server = floor_seconds(
          probed, summary.get('dp_unit', ''), data_dir)
      row.update(floor_round_seconds=str(floor_round), floor_eval_seconds=str(floor_eval),
                 floor_server_seconds=str(floor_server))
    except Exception as e:  # pylint: disable=broad-except
      row.update(floor_round_seconds='nan', floor_eval_seconds='nan',
                 floor_server_seconds='nan')
      log(f'[papers] no floor for {row["run"]}: {type(e).__name__}: {e}')
    _write_probes(probes_path, probes.values())
  elif not row.get('error') and row.get('floor_server_seconds') in (None, ''):
    # A floor measured before the server term existed (probes.csv of 2026-11-27).
    if server_forward_examples(probed):
      log(f'[papers] {where}: plain-TF server forward passes of {row["run"]}')
    try:
      row['floor_server_seconds'] = str(server_floor_seconds(probed, data_dir))
    except Exception as e:  # pylint: disable=broad-except
      row['floor_server_seconds'] = 'nan'
      log(f'[papers] no server floor for {row["run"]}: {type(e).__name__}: {e}')
    _write_probes(probes_path, probes.values())
  return row


def cost_rows(papers, data_dir: str, figures_dir: str, probe_rounds: int = 3,
              fresh: bool = False, probes_path: str = PROBES, log=print,
              slices: bool = False, measure=None) -> list[dict]:
  """One row per paper artefact (and a total per paper): runs, recorded and projected
  hours; probes of the papers in `measure` (default: all of `papers`) missing from
  `probes_path` are measured (and appended) first, and with `fresh` all of theirs (the
  probe rows whose `run` is one of their runs) too. The other papers are projected from
  the probes recorded, NaN ("not measured") where one is missing.

  `sliced_hours` projects the runs as an experiment module's `--clients-per-slice 1`
  runs them afresh (`in_slices_of_one`; a run it leaves as published at its own
  projection): from the probes of that configuration in `probes_path`, measured first
  where missing if `slices` (for the papers in `measure`); NaN where one is missing."""
  measure = set(papers if measure is None else measure)
  probes = read_probes(probes_path)
  if fresh:  # these papers' probes measured again; the other papers' kept
    probes = {k: r for k, r in probes.items() if r['run'].split('/')[0] not in measure}
    _write_probes(probes_path, probes.values())
  published = {paper: published_runs(os.path.join(figures_dir, paper)) for paper in papers}
  if probes:
    measured = set(probes)
    probes = rekeyed(probes, {k: v for runs in published.values() for k, v in runs.items()})
    if set(probes) != measured:
      _write_probes(probes_path, probes.values())
  out, used = [], set()
  with tempfile.TemporaryDirectory() as cache:
    for paper in papers:
      figs = os.path.join(figures_dir, paper)
      runs = published[paper]
      costs = {}  # run key -> (recorded, projected alone, at the floor) seconds
      for artefact, names in artefact_runs(figs).items():
        keys = [common.run_key(n) for n in names]
        for key in keys:
          if key in runs and key not in costs:
            config, summary = runs[key]
            rounds = probe_rounds if paper in measure else None
            row = _probed(runs, key, f'{paper}/{artefact}', probes, probes_path, data_dir,
                          cache, rounds, log)
            if row is None:  # a paper not measured now, without this probe
              costs[key] = (float(summary.get('wall_seconds') or 0.0),) + (math.nan,) * 3
              continue
            used.add(row['key'])
            failed = bool(row.get('error'))
            alone = math.nan if failed else projected_seconds(config, summary, row)
            sliced = alone
            if in_slices_of_one(config) is not None:
              srow = _probed(runs, key, f'{paper}/{artefact}', probes, probes_path,
                             data_dir, cache, rounds if slices else None, log,
                             sliced=True, floor_of=row)
              sliced = (math.nan if srow is None or srow.get('error') else
                        projected_seconds(config, summary, srow))
              if srow is not None:
                used.add(srow['key'])
            costs[key] = (float(summary.get('wall_seconds') or 0.0), alone,
                          math.nan if failed else floor_projected_seconds(config, summary,
                                                                          row),
                          sliced)
        found = [costs[k] for k in keys if k in runs]
        out.append(_hours_row(paper, artefact, found, len(keys) - len(found)))
      out.append(_hours_row(paper, '(all, each run once)', list(costs.values()), ''))
  if set(papers) >= set(PAPERS) and os.path.exists(probes_path):
    # Every paper costed: probes no published run needs any more (a configuration since
    # rerun differently, an older key) are dropped.
    _write_probes(probes_path, [r for k, r in read_probes(probes_path).items() if k in used])
  return out


def _hours_row(paper: str, artefact: str, costs: list, missing) -> dict:
  """A table row: the runs' recorded, projected and floor seconds summed, in hours."""
  total = lambda i: sum(c[i] for c in costs) / 3600
  return dict(paper=paper, artefact=artefact, runs=len(costs), missing_runs=missing,
              recorded_hours=total(0), projected_hours=total(1), floor_hours=total(2),
              sliced_hours=total(3))


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
      'overstate the time alone. The plain-TF floor is the same runs\' local steps '
      '(expected cohort x mean steps of a client) at the time of one plain-TensorFlow '
      'step of the model at their batch (a DP-SGD step for sample-level runs), plus the '
      'forward passes over the validation split the method itself makes every round '
      '(A-DPFL Alg. 4, Adap DP-FL\'s noise decay, cosAFed Alg. 1 line 12), plus forward '
      'passes over what they evaluate, with nothing else (`costs.floor_seconds`); '
      'the ratio is projected over floor. An artefact table counts every run it names; '
      'a paper\'s total counts each run once. The projected hours before them are the '
      'runs as published, one TFF client per client (`--one-tff-client-per-client`); '
      'the last two columns project the same runs as an experiment module runs them '
      'afresh by default since 2026-12-07 (`--clients-per-slice 1`: cohort '
      'slices of one client where the method runs the same round so, its batches read by '
      'index tensors: `experiments.common.in_slices_of_one`; the other runs as '
      'published), from probes of that configuration (`--only papers --slices` measures '
      'the missing ones; "not measured" where one is missing).', '',
  ]
  if len(dates) > 1:
    by_paper = {}
    for p in probes.values():
      if p.get('measured'):
        by_paper.setdefault(p['run'].split('/')[0], set()).add(p['measured'])
    lines += [
        'Probes measured: ' + '; '.join(f'{paper} {", ".join(sorted(days))}'
                                        for paper, days in sorted(by_paper.items())) +
        '. Compare hours measured on the same day: a machine\'s speed drifts between '
        'days (`benchmarks/README.md` dates each of its sections), and the ratios to '
        'the floor are the comparable numbers (each probe\'s floor is measured with '
        'it).', '']

  def hours(key):
    return lambda r: (f'**{_hours(r[key])}**' if r['artefact'].startswith('(')
                      else _hours(r[key]))

  def ratio(r, key='projected_hours'):
    value = r[key] / r['floor_hours'] if r['floor_hours'] else float('nan')
    return '-' if value != value else f'{value:.2f}x'

  lines += common.md_table(rows, [
      ('paper', lambda r: r['paper']), ('artefact', lambda r: r['artefact']),
      ('runs', lambda r: f'{r["runs"]}' + (f' ({r["missing_runs"]} not published)'
                                           if r['missing_runs'] else '')),
      ('recorded h', hours('recorded_hours')), ('projected h alone', hours('projected_hours')),
      ('at the plain-TF floor h', hours('floor_hours')), ('ratio', ratio),
      ('in slices of one (default) h', hours('sliced_hours')),
      ('its ratio', lambda r: ratio(r, 'sliced_hours'))])
  if errors:
    lines += ['', 'Probes that failed (their runs are "not measured"):', '']
    lines += [f'- `{p["run"]}`: {p["error"]}' for p in errors]
  text = '\n'.join(lines) + '\n'
  with open(md_path, 'w') as f:
    f.write(text)
  return text


# Published runs whose rounds `--only jobs` times alone and packed: a heavy round (the
# A-DPFL CNN, 3.3M parameters, DP-SGD on 10 clients), a tiny one (Adap DP-FL, 10 lots of
# 78), and one in between (AADP-FL's MLP on 20 clients).
JOBS_CASES = ('a_dpfl/mnist_dpfl_noniid_seed0', 'adap_dp_fl/mnist_decay_seed0',
              'aadp_fl/mnist_aadp_fl_noniid1_seed0')


def _probe_in_process(config, data_dir, rounds, queue) -> None:
  with tempfile.TemporaryDirectory() as cache:
    queue.put(probe(config, data_dir, cache, rounds)['train_seconds'])


def packed_round_seconds(config: dict, data_dir: str, jobs: int, rounds: int) -> list[float]:
  """Median round without evaluation of `jobs` copies of `config` run at once, each in
  its own spawned process (as `--jobs` runs them); one number per copy.

  Raises:
    RuntimeError: If a copy ends without a result.
  """
  import multiprocessing  # pylint: disable=g-import-not-at-top
  import queue as queue_lib  # pylint: disable=g-import-not-at-top
  context = multiprocessing.get_context('spawn')
  queue = context.Queue()
  procs = [context.Process(target=_probe_in_process, args=(config, data_dir, rounds, queue))
           for _ in range(jobs)]
  for p in procs:
    p.start()
  out = []
  while len(out) < jobs:
    try:
      out.append(queue.get(timeout=10))
    except queue_lib.Empty:
      if not any(p.is_alive() for p in procs):
        raise RuntimeError(f'{jobs - len(out)} of {jobs} copies ended without a result '
                           '(see their output above)') from None
  for p in procs:
    p.join()
  return out


def find_published(run: str, figures_dir: str) -> dict:
  """The published `config.json` of `run` (`'<paper>/<name>'`).

  Raises:
    FileNotFoundError: If no finished copy of it is under `figures_dir/<paper>`.
  """
  paper = run.split('/')[0]
  runs = published_runs(os.path.join(figures_dir, paper))
  if run not in runs:
    raise FileNotFoundError(f'no published copy of {run} under {figures_dir}/{paper}')
  return runs[run][0]


# ----- the plain-TF floor -----------------------------------------------------------

_STEP_SECONDS: dict = {}


def step_seconds(model: str, shape, batch: int, kind: str, num_classes: int = 10,
                 repeats: int = 5) -> float:
  """Median seconds of one plain-TF step (`benchmarks.steps.train_steps[kind]`, 10 calls
  per repeat); cached per (model, shape, batch, kind, classes) for the process."""
  key = (model, tuple(shape), int(batch), kind, num_classes)
  if key not in _STEP_SECONDS:
    from benchmarks import steps  # pylint: disable=g-import-not-at-top
    fn = steps.train_steps(model, shape, batch, num_classes)[kind]
    _STEP_SECONDS[key] = steps.measure(lambda: [fn() for _ in range(10)], repeats).median / 10
  return _STEP_SECONDS[key]


def local_steps(config: dict, sizes: np.ndarray) -> tuple[np.ndarray, int]:
  """Local steps per round of each client, and their batch size.

  Adap DP-FL takes one step a round on one Poisson lot of expected size `lot_size`; every
  other method `local_epochs` passes over its data in batches of `batch_size`, the last
  batch of a pass counted as a full one (so the floor errs high).

  Args:
    config: A `config.json`.
    sizes: Examples per client `[clients]`.
  """
  if config['method'] == 'adap_dp_fl':
    lot = int(round(float((config.get('method_options') or {}).get('lot_size') or 78)))
    return np.ones_like(sizes), lot
  batch = int(config['batch_size'])
  return int(config.get('local_epochs') or 1) * -(-sizes // batch), batch


# Methods whose round itself scores every new global model on the server's validation
# split (a forward pass over it), and where their paper asks for it.
SERVER_VALIDATION_EVERY_ROUND = {
    'a_dpfl': "A-DPFL Alg. 4: the new model's validation accuracy decides the noise decay",
    'adap_dp_fl': "Adap DP-FL Sec. IV-B: the new model's validation loss decides the noise "
                  'decay (noise_schedule=decay only)',
    **{m: 'cosAFed Alg. 1 line 12: the server records the new model\'s validation accuracy '
          'and loss, which the scores (formulas 2-5) read'
       for m in ('cosafed', 'lapfed', 'adpfl', 'cosfed')},
}


def server_forward_examples(config: dict) -> int:
  """Examples the method's own round forward-passes at the server, beyond training and
  the run's evaluations: its validation split for `SERVER_VALIDATION_EVERY_ROUND`
  methods (Adap DP-FL only with noise decay), else 0.

  Args:
    config: A `config.json`.
  """
  method = config['method']
  if method not in SERVER_VALIDATION_EVERY_ROUND:
    return 0
  options = config.get('method_options') or {}
  if method == 'adap_dp_fl' and options.get('noise_schedule', 'decay') != 'decay':
    return 0
  return int(config.get('num_validation') or 0)


def _forward_seconds(model: str, ds, examples: int) -> float:
  """Seconds of plain-TF forward passes of `model` over `examples` examples of the
  dataset `ds`, at batch 1,000."""
  if not examples:
    return 0.0
  return examples / 1000 * step_seconds(model, ds.input_shape, 1000, 'forward',
                                        ds.num_classes)


def server_floor_seconds(config: dict, data_dir: str) -> float:
  """The plain-TF floor of the method's own server-side forward passes in one round
  (`server_forward_examples`), in seconds; 0.0 (nothing loaded or measured) for methods
  without them."""
  examples = server_forward_examples(config)
  if not examples:
    return 0.0
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  cfg = config_lib.from_dict(dict(config, data_dir=data_dir))
  return _forward_seconds(cfg.model, runner.partitioned(cfg)[0], examples)


def floor_seconds(config: dict, dp_unit: str,
                  data_dir: str) -> tuple[float, float, float]:
  """The plain-TF floor of one round of `config`, of one evaluation, and of the method's
  own server-side work of one round.

  A round: its expected cohort times the mean local steps of a client of its partition
  (`local_steps`) times one plain-TF step of the model at that batch
  (`step_seconds`), a DP-SGD step where the run is sample-level DP (`dp_unit`), a
  non-private one otherwise. No aggregation, noise on the update or accounting is
  counted. The server's work: the forward passes the method's round makes over the
  server's validation split (`server_forward_examples`: A-DPFL, Adap DP-FL with noise
  decay, the cosAFed family), at batch 1,000; no cohort scales it. An evaluation: the
  forward pass over the test set, and the validation split where the run evaluates it,
  at batch 1,000.

  Returns:
    `(round seconds, evaluation seconds, server seconds per round)`.
  """
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  cfg = config_lib.from_dict(dict(config, data_dir=data_dir))
  ds, _, _, parts = runner.partitioned(cfg)
  sizes = np.array([len(p) for p in parts])
  steps, batch = local_steps(config, sizes)
  kind = 'dp' if dp_unit == 'sample-level' else 'plain'
  round_seconds = (expected_cohort(config) * float(np.mean(steps)) *
                   step_seconds(cfg.model, ds.input_shape, batch, kind, ds.num_classes))
  evaluated = len(ds.y_test) + (cfg.num_validation if cfg.eval_validation else 0)
  return (round_seconds, _forward_seconds(cfg.model, ds, evaluated),
          _forward_seconds(cfg.model, ds, server_forward_examples(config)))
