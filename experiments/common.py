"""Helpers shared by every experiment module: cached and resumable runs, tables, entry.

A run whose `summary.json` exists for the same configuration is reused, as is a run paused
at its `stop_after_round` (`paused_run`); an interrupted run resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import dataclasses
import functools
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
import time
from typing import Optional, Sequence, Union

from tffdp import config as config_lib
from tffdp import plotting, runner, runtime


# Fields that do not change a run's results. `data_dir` and `client_cache_dir` among them:
# the official dataset files are checked against their checksums (an extracted CIFAR
# folder by its structure; `tffdp.data.loaders`) and the client cache is keyed by the data,
# so committed runs are reused whatever directory the data is read from (as on resume).
REUSE_IGNORES = ('out', 'notes', 'log_every', 'checkpoint_every', 'workers',
                 'worker_timeout', 'data_dir', 'client_cache_dir')


def paused_run(config: dict, rows: list[dict]) -> bool:
  """Whether a run folder holds a run paused at its `stop_after_round`.

  Such a run (a pilot: the first rounds of a longer run) writes no `summary.json`
  (`tffdp.runner.run`); its `metrics.csv` is complete up to the pause.

  Args:
    config: The run's parsed `config.json`.
    rows: Its `metrics.csv` rows (dicts with a `round` field, str or float).

  Returns:
    True when `config` sets a `stop_after_round` before its `rounds` and `rows` reach it.
  """
  stop = config.get('stop_after_round')
  if not stop or not rows or int(stop) >= int(config.get('rounds') or 0):
    return False
  return int(float(rows[-1]['round'])) >= int(stop)


def run_cached(cfg: config_lib.RunConfig, out: str, command: list[str],
               log=print) -> list[dict]:
  """Runs (or reuses / resumes) one configuration; returns its metrics rows.

  Reused: a run in `out` with a `summary.json`, or paused at `cfg.stop_after_round`
  (`paused_run`; such a folder restored from `figures/` has no checkpoint), whose
  `config.json` matches `cfg`, or differs only in evaluating more than `cfg` asks
  (`config.evaluation_covers`; its rows are then read as `cfg` writes them,
  `as_evaluated`). A finished run of another configuration is deleted and
  run again; an interrupted one resumes from its checkpoint, or, where its checkpoint
  was made with settings a resume may not change (`runner.resume_mismatch`), is
  deleted and run again too.

  `log` receives the progress lines (default `print`).

  The checks and the run happen under `runner.run_lock(out)`, so a run another process
  is running is neither reused half-written, deleted, nor run twice.

  Raises:
    runner.RunInProgressError: If another process holds `out` (before anything is done).
  """
  cfg = dataclasses.replace(cfg, out=out)
  os.makedirs(out, exist_ok=True)
  with runner.run_lock(out):
    summary = os.path.join(out, 'summary.json')
    config_json = os.path.join(out, 'config.json')
    if os.path.exists(config_json):
      with open(config_json) as f:
        old = json.load(f)
      asked = dataclasses.asdict(cfg.resolved())
      same = not config_lib.differing_fields(
          old, asked, ignore=REUSE_IGNORES + config_lib.EVALUATION_FIELDS) and \
          config_lib.evaluation_covers(old, asked)
      extra = same and not config_lib.evaluation_covers(asked, old)
      finished = os.path.exists(summary)
      stale = None
      if same and finished:
        stale = stale_reason(old, read_json(summary))
      elif same and runner.has_checkpoint(out):   # an interrupted run: its segments so far
        stale = stale_reason(old, {'segments': runner.read_checkpoint(out).get('segments')})
      if stale:
        log(f'== running {out} again: {stale}')
        _empty(out)
        finished = False
      if same and not stale and not finished and os.path.exists(
          os.path.join(out, 'metrics.csv')):
        rows = plotting.read_metrics(out)
        if paused_run(old, rows):
          log(f'== reusing {out} (paused after round {old["stop_after_round"]})')
          return as_evaluated(rows, cfg)
      if finished and same:
        log(f'== reusing {out}' + (' (it evaluated more than asked: its rows are read as '
                                   'this configuration evaluates)' if extra else ''))
        return as_evaluated(plotting.read_metrics(out), cfg)
      if finished:  # another configuration's: emptied, the locked folder kept
        changed = config_lib.differing_fields(old, asked, ignore=REUSE_IGNORES)
        log(f'== running {out} again: its finished run was made with other settings '
            f'({", ".join(changed)}); its files are replaced')
        _empty(out)
      elif not stale and runner.has_checkpoint(out):   # (a stale one is emptied already)
        mismatch = runner.resume_mismatch(runner.read_checkpoint(out)['config'],
                                          runner.comparable_config(cfg.resolved()))
        if mismatch:  # an interrupted run of another configuration
          log(f'== running {out} again: its checkpoint was made with other settings '
              f'({", ".join(mismatch)})')
          _empty(out)
    log(f'== {cfg.method} on {cfg.dataset} -> {out}')
    resume = runner.has_checkpoint(out)
    runner.run(cfg, resume=resume, command=command, log=log, lock=False)
    # A run resumed under lighter evaluation keeps its earlier rounds' extra evaluations.
    return as_evaluated(plotting.read_metrics(out), cfg)


EVALUATION_COLUMNS = ('test_accuracy', 'test_loss', 'validation_accuracy',
                      'validation_loss')


def as_evaluated(rows: list[dict], cfg: config_lib.RunConfig) -> list[dict]:
  """`rows` of a run that evaluated more than `cfg` asks (`config.evaluation_covers`), as
  `cfg` would have written them (`plotting.read_metrics` rows): evaluation columns None
  at the rounds `cfg` does not evaluate (not a multiple of `eval_every`, not the last
  row), validation columns None without `eval_validation`. Rows `cfg` itself wrote come
  back unchanged. `eval_seconds` and the wall times stay as measured."""
  if not rows:
    return rows
  last = rows[-1]['round']
  out = []
  for r in rows:
    r = dict(r)
    if not (int(float(r['round'])) % cfg.eval_every == 0 or r['round'] == last):
      r.update({c: None for c in EVALUATION_COLUMNS if c in r})
    elif not cfg.eval_validation:
      r.update({c: None for c in EVALUATION_COLUMNS[2:] if c in r})
    out.append(r)
  return out


def read_json(path: str) -> Optional[dict]:
  """The JSON object in `path`, or None when there is no such file."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def drew_float32_laplace(segments) -> bool:
  """Whether a run with these `segments` (its `summary.json`'s or checkpoint's; none for
  runs made before segments were recorded) ran any part before `FLOAT64_LAPLACE_SINCE`."""
  segments = segments or []
  return not (segments and all((g.get('started') or '') >= FLOAT64_LAPLACE_SINCE
                               for g in segments))


def stale_reason(config: dict, record: Optional[dict]) -> Optional[str]:
  """Why a run must not be reused or resumed although its configuration matches.

  One rule today: a run of a Laplace-drawing method (`LAPLACE_METHODS`) with a segment
  started before `FLOAT64_LAPLACE_SINCE` drew with the float32 sampler (see
  `float32_laplace_section`), so its figure's command runs it again.

  Args:
    config: The run's `config.json`.
    record: Its `summary.json`, or for an interrupted run `{'segments': <its
      checkpoint's>}`; None (a paused run restored without either) is never stale.

  Returns:
    A sentence giving the reason, or None when the run may be reused.
  """
  if (record is None or config.get('method') not in LAPLACE_METHODS
      or not drew_float32_laplace(record.get('segments'))):
    return None
  return (f'it drew Laplace noise before {FLOAT64_LAPLACE_SINCE} with the float32 sampler '
          '(+-87.3 b with probability 2^-22 a coordinate)')


def _empty(folder: str) -> None:
  """Removes everything inside `folder`, keeping the folder itself (and its lock)."""
  for name in os.listdir(folder):
    path = os.path.join(folder, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)


# How many runs `run_all` runs at once unless told: the command's `--jobs`
# (`ArgumentParser` sets it when it parses the command line).
JOBS = 1
# The command's `--clients-per-slice`: 1 (its default: `run_all` runs the runs that can
# in cohort slices of one client, `in_slices_of_one`), or None with
# `--one-tff-client-per-client`. None until `ArgumentParser` parses a command line, so
# a library caller's `run_all` runs its configurations as given.
CLIENTS_PER_SLICE: Optional[int] = None


def _positive_int(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f'must be at least 1. Found {text!r}.')
  return value


class ArgumentParser(argparse.ArgumentParser):
  """`argparse.ArgumentParser` with `--jobs N` and `--clients-per-slice 1` (the default)
  or `--one-tff-client-per-client`, for every module that runs experiments.

  `parse_args` sets `JOBS` (what `run_all` runs at once) from `--jobs` and
  `CLIENTS_PER_SLICE` (`in_slices_of_one`: 1, or None with `--one-tff-client-per-client`).
  Given `module`
  (e.g. `experiments.cosafed.table3`), the parser's `prog` is `python -m <module>`, its
  description keeps its line breaks, and `command(argv)` gives the command line a run's
  `config.json` records.
  """

  def __init__(self, *args, module: Optional[str] = None, **kwargs):
    if module is not None:
      kwargs.setdefault('prog', f'python -m {module}')
      kwargs.setdefault('formatter_class', argparse.RawDescriptionHelpFormatter)
    self.module = module
    super().__init__(*args, **kwargs)
    self.add_argument(
        '--jobs', type=_positive_int, default=1,
        help='runs at once, each in its own process (default 1: on 2 cores one run '
             'already uses both, and two at once slowed each run 1.6-2.3x, for 0.9-1.2x '
             'the throughput: python -m benchmarks.run --only jobs, benchmarks/README.md; '
             'finished runs are reused and interrupted ones resume either way)')
    from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
    whole = [name for name in registry.names() if not registry.get(name).slices_of_one]
    packing = self.add_mutually_exclusive_group()
    packing.add_argument(
        '--clients-per-slice', type=int, choices=(1,), default=argparse.SUPPRESS,
        help='1 (the default since 2026-12-07): run each new run whose method allows it '
             f'(registry.MethodSpec.slices_of_one: every method but {", ".join(whole)}) '
             'in cohort slices of one client, each client\'s batches '
             'read by index tensors instead of a tf.data pipeline: the same DP events and, '
             'without noise, the same model to float32 rounding, in less time '
             '(benchmarks/costs.md). Runs that set their own slices keep them; runs '
             'already in the runs folder are reused or resume as they were made')
    packing.add_argument(
        '--one-tff-client-per-client', dest='clients_per_slice', action='store_const',
        const=None, default=argparse.SUPPRESS,
        help='run each new run one TFF client per client, each reading a tf.data '
             'pipeline, as the runs published before 2026-12-07 were made (7-10 ms more '
             'a client a round)')

  def command(self, argv: Optional[Sequence[str]] = None) -> list[str]:
    """`['python', '-m', module, *argv]`, `argv` being `sys.argv[1:]` when None.

    Raises:
      ValueError: If the parser was made without `module`.
    """
    if self.module is None:
      raise ValueError('command() needs the parser\'s module: ArgumentParser(module=...)')
    return ['python', '-m', self.module] + list(argv if argv is not None else sys.argv[1:])

  def parse_args(self, args=None, namespace=None):  # pylint: disable=signature-differs
    global JOBS, CLIENTS_PER_SLICE
    parsed = super().parse_args(args, namespace)
    if not hasattr(parsed, 'clients_per_slice'):
      # The default of `--clients-per-slice`, set here: argparse does not count a flag
      # whose value `is` its default as given, so with `default=1` it would take
      # `--clients-per-slice 1 --one-tff-client-per-client` instead of refusing it.
      parsed.clients_per_slice = 1
    JOBS, CLIENTS_PER_SLICE = parsed.jobs, parsed.clients_per_slice
    return parsed


def takes_slices_of_one(method: str, clients_per_slice: Optional[int],
                        audit_canaries: int) -> bool:
  """Whether a run of `method` with these settings runs in slices of one client under
  `--clients-per-slice 1` (the experiment modules' default): its method runs the same round so
  (`registry.MethodSpec.slices_of_one`), it sets no slices of its own, and it inserts no
  audit canaries (which ride in each client's own `tf.data` pipeline)."""
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  return clients_per_slice is None and not audit_canaries and \
      registry.get(method).slices_of_one


def in_slices_of_one(cfg: config_lib.RunConfig, out: str) -> config_lib.RunConfig:
  """`cfg` with `clients_per_slice=1` where the run can take it, else `cfg` itself.

  It can where its method runs the same round in slices of one client
  (`registry.MethodSpec.slices_of_one`), `cfg` leaves `clients_per_slice` unset and
  inserts no audit canaries (which ride in each client's own `tf.data` pipeline), and
  `out` holds no run of the same configuration made one TFF client per client: such a
  run, finished, is reused as it was made, and, interrupted, resumes so (its checkpoint
  could not resume in slices).

  Args:
    cfg: A run's configuration.
    out: Its run directory.

  Returns:
    A `RunConfig`.
  """
  if not takes_slices_of_one(cfg.method, cfg.clients_per_slice, cfg.audit_canaries):
    return cfg
  config_json = os.path.join(out, 'config.json')
  if os.path.exists(config_json):
    old = read_json(config_json)
    asked = dataclasses.asdict(dataclasses.replace(cfg, out=out).resolved())
    if old.get('clients_per_slice') is None and not config_lib.differing_fields(
        old, asked, ignore=REUSE_IGNORES + config_lib.EVALUATION_FIELDS):
      return cfg
  return dataclasses.replace(cfg, clients_per_slice=1)


def _print_as(name: str, line: str) -> None:
  print(f'[{name}] {line}', flush=True)


def _job_run(run_fn, cfg, out: str, command: list[str],
             name: Optional[str] = None) -> list[dict]:
  """One item of `run_all` in a fresh pool process (its own local TFF context and
  worker, ended with it), its progress lines prefixed with `name` (default: the run
  folder's name)."""
  runtime.use_local_context()
  try:
    return run_fn(cfg, out, command,
                  log=functools.partial(_print_as, name or os.path.basename(out)))
  finally:
    runtime.shutdown_workers()


def run_all(items: list[tuple[config_lib.RunConfig, str]], command: list[str], log=print,
            run_fn=None, poll_seconds: float = 60.0, on_done=None,
            publish_to: Optional[str] = None,
            publish_as: Optional[Sequence[str]] = None,
            jobs: Optional[int] = None) -> list[list[dict]]:
  """`run_cached` on each `(config, out)`, `jobs` at once, sharing the work with other
  processes.

  A run that another process is running (`runner.RunInProgressError`: it holds
  `runner.run_lock` on `out`) is put off: the next runs go first, then this process waits
  for each run put off (checking every `poll_seconds`) and reuses it, or resumes it from
  its checkpoint if that process ended before the run did. So launching one figure's
  command two or three times, each in its own process, runs its configurations side by
  side, and every copy of the command ends with all the rows.

  Unless the command says `--one-tff-client-per-client` (`CLIENTS_PER_SLICE` None), each
  configuration goes through `in_slices_of_one` first.

  With `jobs` > 1 the runs go to a pool of `jobs` processes (spawned, a fresh one per
  run with its own TFF context), which print their progress lines prefixed with
  `[<run directory name>]`; publishing and `on_done` happen here, as each run ends.

  Args:
    items: `(RunConfig, run directory)` pairs, in the figure's order.
    command: The command line recorded in each run's `config.json`.
    log: Progress sink.
    run_fn: `(config, out, command, log) -> rows` (default `run_cached`; tests replace it).
    poll_seconds: Seconds between two checks of a run put off.
    on_done: Called as `on_done(index, rows)` as each item's run ends, before the next
      one starts (after its publishing, if any).
    publish_to: A folder (say `<figures>/runs`): as each run ends, `copy_results` copies
      it to `publish_to/<name>`, so the figures folder has it even if the command stops
      before the last run.
    publish_as: The copies' names, one per item (default: each run directory's name).
    jobs: Runs at once (default `JOBS`, the command's `--jobs`). With more than one,
      `run_fn` must be picklable (a module-level function) and runs in the pool, where
      it logs to stdout instead of `log`.

  Returns:
    The metrics rows of each item, in the order of `items`.

  Raises:
    ValueError: `publish_as` without `publish_to`, or not one name per item, or `jobs`
      below 1.
  """
  run_fn = run_fn or run_cached
  jobs = JOBS if jobs is None else jobs
  if CLIENTS_PER_SLICE == 1:  # unless the command says --one-tff-client-per-client
    items = [(in_slices_of_one(cfg, out), out) for cfg, out in items]
  if publish_as is not None and (publish_to is None or len(publish_as) != len(items)):
    raise ValueError(f'publish_as needs publish_to and one name per item ({len(items)}); '
                     f'got publish_to={publish_to!r} and {len(publish_as)} name(s)')
  if jobs < 1:
    raise ValueError(f'jobs must be at least 1. Found {jobs!r}.')
  results: dict[int, list[dict]] = {}

  def finish(i, rows):
    results[i] = rows
    if publish_to is not None:
      name = publish_as[i] if publish_as is not None else os.path.basename(items[i][1])
      copy_results(items[i][1], os.path.join(publish_to, name))
    if on_done:
      on_done(i, rows)

  if jobs > 1 and len(items) > 1:
    _run_pooled(items, command, log, run_fn, poll_seconds, finish, jobs)
    return [results[i] for i in range(len(items))]

  def attempt(i):
    cfg, out = items[i]
    finish(i, run_fn(cfg, out, command, log=log))

  put_off = []
  for i, (_, out) in enumerate(items):
    try:
      attempt(i)
    except runner.RunInProgressError:
      log(f'== {out} is being run by another process; running the next configurations first')
      put_off.append(i)
  for i in put_off:
    out = items[i][1]
    waited = False
    while i not in results:
      try:
        attempt(i)
      except runner.RunInProgressError:
        if not waited:
          log(f'== waiting for {out} (run by another process)')
          waited = True
        time.sleep(poll_seconds)
  return [results[i] for i in range(len(items))]


def _run_pooled(items, command, log, run_fn, poll_seconds: float, finish, jobs: int) -> None:
  """`run_all`'s pool: `jobs` spawned processes; a run another process holds is put off
  and tried again once nothing else is left (every `poll_seconds`)."""
  context = multiprocessing.get_context('spawn')
  with concurrent.futures.ProcessPoolExecutor(min(jobs, len(items)), mp_context=context,
                                              max_tasks_per_child=1) as pool:
    try:
      _pool_loop(pool, items, command, log, run_fn, poll_seconds, finish, jobs)
    except BaseException:
      # A run failed, or this process is being stopped: the other runs are stopped too
      # (SIGTERM: each saves its checkpoint) instead of being waited for to their end.
      for pid in list(getattr(pool, '_processes', None) or {}):
        try:
          os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
          pass
      pool.shutdown(wait=True, cancel_futures=True)
      raise


def _pool_loop(pool, items, command, log, run_fn, poll_seconds: float, finish,
               jobs: int) -> None:
  """`_run_pooled`'s scheduling: submits up to `jobs` runs, finishes each as it ends."""
  pending, put_off, waited, running = list(range(len(items))), [], set(), {}
  while pending or running or put_off:
    if not pending and not running:
      time.sleep(poll_seconds)
      pending, put_off = put_off, []
    while pending and len(running) < jobs:
      i = pending.pop(0)
      cfg, out = items[i]
      if i not in waited:
        log(f'== {out}: started in the pool')
      running[pool.submit(_job_run, run_fn, cfg, out, command)] = i
    done, _ = concurrent.futures.wait(running,
                                      return_when=concurrent.futures.FIRST_COMPLETED)
    for future in done:
      i = running.pop(future)
      try:
        rows = future.result()
      except runner.RunInProgressError:
        if i not in waited:
          log(f'== waiting for {items[i][1]} (run by another process)')
          waited.add(i)
        put_off.append(i)
        continue
      log(f'== {items[i][1]}: done')
      finish(i, rows)


def runs_root(runs_dir: str) -> str:
  """Absolute `X` of `--runs-dir X/<method>` (the Makefile's layout: `make ...
  RUNS_DIR=X` runs each method's experiments in `X/<method name>`), else of `runs_dir`."""
  d = os.path.abspath(runs_dir)
  return os.path.dirname(d) if os.path.basename(d) in config_lib.methods() else d


def map_strings(value, fn):
  """`value` with `fn` applied to every string in it (recursively through dicts, lists
  and tuples, which come back as lists); other values pass through."""
  if isinstance(value, dict):
    return {k: map_strings(v, fn) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [map_strings(v, fn) for v in value]
  return fn(value) if isinstance(value, str) else value


def portable(value, runs_dir: str):
  """`value` without this machine's paths, for files committed under `figures/`.

  The runs root (`runs_root(runs_dir)`) becomes `$RUNS_DIR` and the working directory
  (the checkout) a relative path. Applies to a string, or recursively to the strings in
  lists and dicts (a `config.json`); other values pass through.
  """
  boundary = r'(?=/|$|[\s"\'`,|)])'
  root = re.escape(runs_root(runs_dir)) + boundary
  cwd = re.escape(os.getcwd() + os.sep)
  return map_strings(value, lambda v: re.sub(cwd, '', re.sub(root, '$RUNS_DIR', v)))


# Absolute data folders outside the checkout, as committed copies name them.
_DATA_PATH_VARS = (('data_dir', '$DATA_DIR'), ('client_cache_dir', '$TFFDP_CACHE_DIR'))


def copy_config(out: str, dest: str) -> None:
  """Copies `out/config.json` to `dest/` with paths made portable (`portable`); a
  `data_dir` or `client_cache_dir` still absolute (outside the checkout) becomes
  `$DATA_DIR` / `$TFFDP_CACHE_DIR` wherever it appears (the command too). Both are left
  out of the reuse test (`REUSE_IGNORES`) and may differ on resume."""
  with open(os.path.join(out, 'config.json')) as f:
    cfg = portable(json.load(f), os.path.dirname(out))
  for key, var in _DATA_PATH_VARS:
    if isinstance(cfg.get(key), str) and os.path.isabs(cfg[key]):
      path = cfg[key].rstrip(os.sep)
      cfg = map_strings(cfg, lambda v, path=path, var=var: v.replace(path, var))
  with open(os.path.join(dest, 'config.json'), 'w') as f:
    json.dump(cfg, f, indent=2)
    f.write('\n')


def copy_results(out: str, dest: str) -> None:
  """Copies a run's config (paths made portable), metrics and summary to `dest/`.

  A run paused by `stop_after_round` has no summary: the copy has none either (a stale
  one at `dest` is removed), so `restore_runs` does not take it for a finished run.
  """
  os.makedirs(dest, exist_ok=True)
  copy_config(out, dest)
  shutil.copy(os.path.join(out, 'metrics.csv'), os.path.join(dest, 'metrics.csv'))
  summary = os.path.join(out, 'summary.json')
  if os.path.exists(summary):
    shutil.copy(summary, os.path.join(dest, 'summary.json'))
  elif os.path.exists(os.path.join(dest, 'summary.json')):
    os.remove(os.path.join(dest, 'summary.json'))


def write_table(path: str, rows: list[dict]) -> None:
  """Writes `rows` (dicts) as CSV, creating the folder: the columns are every key in
  order of first appearance, a key a row lacks left blank; no rows: an empty file (a
  report whose runs have not finished yet)."""
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'w') as f:
    if not rows:
      return
    w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)),
                       restval='')
    w.writeheader()
    w.writerows(rows)


def write_dataset_table(path: str, rows: list[dict], datasets, order) -> None:
  """Writes a figure's table `rows` (the datasets run now) to `path`, keeping the rows of
  the datasets not in `datasets` that `path` already holds (a figure rerun with
  `--datasets cifar10` keeps the MNIST rows); rows sorted by dataset in `order`."""
  kept = [{k: r.get(k, '') for k in rows[0]} for r in read_rows(path) or []
          if r['dataset'] not in datasets]
  write_table(path, sorted(kept + rows, key=lambda r: list(order).index(r['dataset'])))


def add_paper_flags(p: argparse.ArgumentParser, paper: str, seed: bool = True) -> None:
  """Adds the flags every experiment module of a paper takes.

  `--data-dir`, `--seed` (unless `seed=False`), `--runs-dir` (default `runs/<paper>`),
  `--figures-dir` (default `figures/<paper>`) and `--quick`.

  Args:
    p: The module's parser.
    paper: The paper package, e.g. `a_dpfl`.
    seed: Whether the module takes `--seed`.
  """
  p.add_argument('--data-dir', default=None,
                 help='folder with one folder per dataset (default: $TFFDP_DATA_DIR, else '
                 'the user cache, where the official files are downloaded and checked)')
  if seed:
    p.add_argument('--seed', type=int, default=0, help='seed of every run (default 0)')
  p.add_argument('--runs-dir', default=os.path.join('runs', paper),
                 help='where the runs and their checkpoints go (an interrupted command '
                 'resumes them; default %(default)s)')
  p.add_argument('--figures-dir', default=os.path.join('figures', paper),
                 help='where the figures, their CSVs and the run copies go (default '
                 '%(default)s)')
  p.add_argument('--quick', action='store_true', help='toy size (smoke test)')


def entry(main) -> None:
  """Runs an experiment module's `main` and exits with its code. Output is line-buffered,
  so progress shows as it happens when piped (`... | cat > log`)."""
  sys.stdout.reconfigure(line_buffering=True)
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


def dash(v, digits: int = 4) -> str:
  """`fmt` with `-` for a missing value: the reports' number cells."""
  return fmt(v, digits, empty='-')


def copied_run_file(figs: str, run: str, name: str) -> Optional[str]:
  """Path of file `name` of the run copy `<figs>/runs/<basename of run>`, or None.

  `run` is a run directory as a figure's table names it (`runs/<paper>/<name>` or
  `$RUNS_DIR/...`); the reports read the copy published beside the figures.
  """
  path = os.path.join(figs, 'runs', os.path.basename(run), name)
  return path if os.path.exists(path) else None


def copied_metrics(figs: str, run: str) -> list[dict]:
  """`metrics.csv` rows (strings) of a run's published copy (`copied_run_file`), or []."""
  path = copied_run_file(figs, run, 'metrics.csv')
  return (read_rows(path) or []) if path else []


def md_table(rows, cols) -> list[str]:
  """Markdown table lines: `cols` is `[(header, row -> cell)]`."""
  out = ['| ' + ' | '.join(h for h, _ in cols) + ' |', '|' + '---|' * len(cols)]
  for r in rows:
    out.append('| ' + ' | '.join(str(get(r)) for _, get in cols) + ' |')
  return out


MIN_SEEDS = 3  # an ordering on fewer seeds a cell is a tie (the brief's rule)


@dataclasses.dataclass(frozen=True)
class SeedSpread:
  """Seeds' values of one cell: `values` in seed order, their mean, sample std (0 for
  one seed), min and max."""
  values: tuple[float, ...]

  @property
  def mean(self) -> float:
    return sum(self.values) / len(self.values)

  @property
  def std(self) -> float:
    if len(self.values) < 2:
      return 0.0
    m = self.mean
    return (sum((v - m) ** 2 for v in self.values) / (len(self.values) - 1)) ** 0.5

  @property
  def low(self) -> float:
    return min(self.values)

  @property
  def high(self) -> float:
    return max(self.values)

  def beats(self, other: 'SeedSpread') -> bool:
    """A win: at least `MIN_SEEDS` (3) seeds each and every seed of `self` above every
    seed of `other` (the seeds' ranges separate); otherwise a tie or a loss."""
    return (min(len(self.values), len(other.values)) >= MIN_SEEDS
            and self.low > other.high)

  def text(self, digits: int = 2) -> str:
    """`mean +- std (n seeds)`, or the one value."""
    if len(self.values) == 1:
      return f'{self.values[0]:.{digits}f} (1 seed)'
    return f'{self.mean:.{digits}f} +- {self.std:.{digits}f} ({len(self.values)} seeds)'


def finished_summaries(folder: str, keep=lambda name: True) -> list[tuple[str, str, dict]]:
  """`(name, run_dir, summary)` of each finished run copied under `folder` (one with a
  `<name>/summary.json`), in name order; runs for which `keep(name)` is false left out."""
  names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
  out = []
  for name in names:
    path = os.path.join(folder, name, 'summary.json')
    if keep(name) and os.path.exists(path):
      with open(path) as f:
        out.append((name, os.path.join(folder, name), json.load(f)))
  return out


def finished_runs_table(folder: str, *, keep=lambda name: True, percent: bool = False,
                        empty: str = '', extra=()) -> list[str]:
  """Markdown lines listing the finished runs copied under `folder`, one row per run.

  Used by the report modules for runs whose figure is not written yet (its other runs
  still going). A run is finished when `<folder>/<name>/summary.json` exists.

  Args:
    folder: Directory of run copies (`<name>/summary.json`, `config.json`, ...).
    keep: `name -> bool`; runs for which it is false are left out.
    percent: Accuracies as percentages (header says `(%)`) rather than fractions.
    empty: Text for a missing number.
    extra: Extra columns `[(header, run_dir -> cell)]` after the shared ones (run, final
      and best test accuracy, rounds, both epsilons, wall seconds).

  Returns:
    The table lines, then one line per run that stopped early (its `stop_reason`);
    `[]` when no run has finished.
  """
  runs = finished_summaries(folder, keep)
  if not runs:
    return []
  scale, unit = (100, ' (%)') if percent else (1, '')

  def acc(key):
    return lambda r: fmt(scale * float(r[2][key]), 4, empty)

  cols = [('run', lambda r: r[0]), (f'final test acc{unit}', acc('final_test_accuracy')),
          (f'best test acc{unit}', acc('best_test_accuracy')),
          ('rounds', lambda r: r[2]['rounds_completed']),
          ('epsilon_claimed', lambda r: fmt(r[2]['epsilon_claimed'], 4, empty)),
          ('epsilon_guaranteed', lambda r: fmt(r[2]['epsilon_guaranteed'], 4, empty)),
          ('wall s', lambda r: fmt(r[2]['wall_seconds'], 5, empty)),
          *[(h, lambda r, get=get: get(r[1])) for h, get in extra]]
  stops = [f"- `{name}` stopped after round {s['rounds_completed']}: {s['stop_reason']}."
           for name, _, s in runs if s.get('stop_reason')]
  return md_table(runs, cols) + ([''] + stops if stops else [])


def untrained_rounds(rows: list[dict]) -> tuple[list[int], bool]:
  """Rounds of a run (its `metrics.csv` rows) whose model update did not happen.

  Rows with the runner's `update_rejected` column: the rounds marked 1 (TFF's finalizer
  rejected a non-finite aggregate). Older rows without it: inferred, the rounds whose
  evaluated test and validation losses repeat the previous round's to the last digit (the
  model came out of the round unchanged).

  Returns:
    `(rounds, inferred)`: the round numbers, and whether they were inferred.
  """
  marked = runner.rejected_round_numbers(rows)
  if marked is not None:
    return marked, False
  same = []
  for prev, cur in zip(rows, rows[1:]):
    keys = ('test_loss', 'validation_loss')
    if (int(cur['round']) == int(prev['round']) + 1 and
        all(cur.get(k) not in (None, '') and cur.get(k) == prev.get(k) for k in keys)):
      same.append(int(cur['round']))
  return same, True


def run_copies(figs: str, required: tuple[str, ...] = ('metrics.csv',)):
  """Yields `(copy folder, run folder)` for each run copy under `figs`, in sorted walk order.

  Args:
    figs: Folder searched recursively.
    required: File names a folder must hold all of to count as a run copy.

  Yields:
    `(root, out, config)`: the copy's folder, the run folder it came from (its
    `config.json`'s `"out"`; the copy's own folder without one) and the parsed
    `config.json` (`{}` without one). A run copied under two figures is yielded once per
    copy: callers that want each run once dedupe on `out`.
  """
  for root, dirs, files in os.walk(figs):
    dirs.sort()
    if not all(f in files for f in required):
      continue
    config = {}
    if 'config.json' in files:
      with open(os.path.join(root, 'config.json')) as f:
        config = json.load(f)
    yield root, config.get('out') or root, config


# Where `experiments.park_runs` puts an interrupted run under a paper's figures folder.
PARKED_FOLDER = 'interrupted'
_RUN_PREFIXES = ('$RUNS_DIR/', 'runs/')


def run_key(out: str):
  """The run folder relative to the runs root (`'<method>/<run>'`) of a copy's `"out"`
  (`$RUNS_DIR/<method>/<run>` or `runs/<method>/<run>`); None for any other path."""
  for prefix in _RUN_PREFIXES:
    if out.startswith(prefix):
      return os.path.normpath(out[len(prefix):])
  return None


def same_run_config(a: dict, b: dict) -> bool:
  """Whether two `config.json`s describe the same run for reuse (`REUSE_IGNORES`)."""
  return not config_lib.differing_fields(a, dataclasses.asdict(config_lib.from_dict(b)),
                                         ignore=REUSE_IGNORES)


def is_parked(root: str) -> bool:
  """Whether the copy folder `root` is a parked interrupted run (`<paper>/interrupted/`)."""
  return os.path.basename(os.path.dirname(os.path.normpath(root))) == PARKED_FOLDER


def checkpoint_round(folder: str):
  """Rounds completed in `folder`'s checkpoint; None without one.

  Raises:
    tffdp.runner.ResumeError: If it is a pickled `checkpoint.pkl` of older tffdp (convert
      it: `python -m tffdp.checkpoints convert FOLDER`).
  """
  if not runner.has_checkpoint(folder):
    return None
  return int(runner.read_checkpoint(folder)['round'])


def finished_copies(figs: str) -> dict:
  """`{run_key: [config of each finished copy]}` of the run copies under `figs` that
  hold a `summary.json`."""
  out = {}
  for root, run_out, config in run_copies(figs, ('config.json', 'summary.json')):
    key = run_key(run_out)
    if key and not is_parked(root):
      out.setdefault(key, []).append(config)
  return out


def superseded(root: str, config: dict, finished: dict) -> bool:
  """Whether the parked copy `root` (with `config`) has a finished copy of the same
  configuration in `finished` (`finished_copies`)."""
  return any(same_run_config(c, config)
             for c in finished.get(run_key(config.get('out') or root) or '', []))


def parked_section(figs: str) -> list[str]:
  """`## Interrupted runs` and `parked_runs_section`'s lines, or `[]` when none is parked."""
  parked = parked_runs_section(figs)
  return ['## Interrupted runs', '', *parked] if parked else []


def parked_runs_section(figs: str) -> list[str]:
  """Markdown lines: the interrupted runs parked with their checkpoints under
  `figs/interrupted/` (`experiments.park_runs`), with the rounds each has done and its
  last evaluated test accuracy; `[]` when there is none."""
  rows_out = []
  finished = finished_copies(figs)
  for root, _, config in run_copies(os.path.join(figs, PARKED_FOLDER),
                                    ('config.json', 'metrics.csv', runner.CHECKPOINT)):
    if superseded(root, config, finished):
      continue  # finished since; `park_runs` removes it
    rows = read_rows(os.path.join(root, 'metrics.csv')) or []
    evaluated = [r for r in rows if r.get('test_accuracy')]
    last = (f"{fmt(100 * float(evaluated[-1]['test_accuracy']), 4)} (round "
            f"{int(float(evaluated[-1]['round']))})" if evaluated else '-')
    done = int(float(rows[-1]['round'])) if rows else 0
    rows_out.append([f'`{os.path.basename(root)}`', f"{done} of {config.get('rounds')}",
                     last, f"`{' '.join(config.get('command') or ['?'])}`"])
  if not rows_out:
    return []
  return ['Interrupted runs carried with their checkpoints (`python -m experiments.park_runs`'
          f'; each in `{PARKED_FOLDER}/<run>/`): `python -m experiments.restore_runs` puts '
          'them back and the command resumes each where it stopped.', '',
          *md_table(rows_out, [(h, lambda r, i=i: r[i]) for i, h in enumerate(
              ['run', 'rounds done', 'last evaluated test acc (%)', 'command'])]), '']


def untrained_rounds_section(figs: str) -> list[str]:
  """Markdown lines: the runs copied under `figs` (any depth) with rounds that trained
  nothing (`untrained_rounds`), each run once (copies of one run, by its config's `out`,
  listed at the first path)."""
  lines, seen = [], set()
  for root, out, _ in run_copies(figs):
    if out in seen or is_parked(root):  # a parked run's rows end at its checkpoint
      continue
    rows = read_rows(os.path.join(root, 'metrics.csv'))
    if not rows or 'round' not in rows[0]:
      continue
    seen.add(out)
    rounds, inferred = untrained_rounds(rows)
    if rounds:
      shown = ', '.join(map(str, rounds[:12])) + (', ...' if len(rounds) > 12 else '')
      lines.append(f'- `{os.path.relpath(root, figs)}`: {len(rounds)} of {len(rows)} rounds '
                   f'(rounds {shown})' + (' (inferred)' if inferred else '') + '.')
  intro = ('A round trains nothing when its aggregated update holds a NaN or inf: TFF\'s '
           'server step (`build_apply_optimizer_finalizer`) then rejects it and the model '
           'stays as it was, while the round still releases its noisy aggregate and is '
           'accounted. A single client whose local training diverged (for instance on a '
           'model that noise has already pushed far from any trained one) is enough. Runs '
           'record it per round in `metrics.csv` (`update_rejected`); for runs made before '
           'that column it is inferred (marked) from evaluated test and validation losses '
           'that repeat the previous round\'s to the last digit.')
  return [intro, ''] + (lines or ['No run here has such a round.'])


# The cost table `python -m benchmarks.run --only papers` writes (`benchmarks.costs`).
COSTS_CSV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         'benchmarks', 'costs.csv')


def cost_section(paper: str, path: str = COSTS_CSV) -> list[str]:
  """Markdown lines: `paper`'s rows of the cost table (`benchmarks/costs.csv`): per
  artefact, the hours its runs would take alone on the measuring machine, at the
  plain-TF floor, and as recorded; a line saying it is not costed where the table has
  no row for `paper`."""
  rows = [r for r in (read_rows(path) or []) if r.get('paper') == paper]
  command = '`python -m benchmarks.run --only papers --data-dir DIR`'
  if not rows:
    return [f'Not costed yet: {command} writes `benchmarks/costs.md`.', '']
  hours = lambda key: lambda r: ('not measured' if r[key] == 'nan' else
                                 f'{float(r[key]):.2f}')
  bold = lambda f: lambda r: f'**{f(r)}**' if r['artefact'].startswith('(') else f(r)

  def ratio(r, key='projected_hours'):
    projected, floor = float(r.get(key) or 'nan'), float(r['floor_hours'])
    return f'{projected / floor:.2f}x' if floor and projected == projected else '-'

  sliced = [('in slices of one (default) h', bold(hours('sliced_hours'))),
            ('its ratio', lambda r: ratio(r, 'sliced_hours'))] \
      if all(r.get('sliced_hours') not in (None, '') for r in rows) else []
  return [f'What regenerating each artefact costs, from {command} (`benchmarks/costs.md`, '
          'where the method and its measurements are described): the hours its runs would '
          'take alone on the 2-core machine (projected from short probes), at the plain-TF '
          'floor of the same client work, and as the runs recorded (most ran two or three '
          'at a time). `benchmarks/costs.md` says when the probes were measured: a speed '
          'change since then is not in these hours until they are measured again.' +
          (' The projected hours are the runs as published, one TFF client per client '
           '(`--one-tff-client-per-client`); the last two columns, the same runs as the '
           'figure commands run them afresh by default since 2026-12-07 '
           '(`--clients-per-slice 1`: cohort slices of one client where the method runs '
           'the same round so).' if sliced else ''), '',
          *md_table(rows, [
              ('artefact', lambda r: r['artefact']),
              ('runs', lambda r: r['runs'] + (f" ({r['missing_runs']} not published)"
                                              if r.get('missing_runs') not in ('', '0', None)
                                              else '')),
              ('projected h alone', bold(hours('projected_hours'))),
              ('plain-TF floor h', bold(hours('floor_hours'))),
              ('ratio', ratio),
              ('recorded h', hours('recorded_hours')), *sliced]), '']


@dataclasses.dataclass(frozen=True)
class Missing:
  """An artefact (or part of one) a report lists while its runs are not made.

  Attributes:
    what: What it is, e.g. `Fig. 4b (CIFAR-10), DPFL`.
    command: The command that makes it (finished runs reused, interrupted ones resumed).
    runs: How many runs it still needs.
    like: The artefact of `benchmarks/costs.csv` (same paper) whose runs have the same
      per-run work: one missing run is costed as the mean of its runs, projected alone.
      A tuple names candidates in order of preference: the first one costed is used.
  """
  what: str
  command: str
  runs: int
  like: Union[str, tuple[str, ...]]


def missing_items(paper: str, items: Sequence[Missing], path: str = COSTS_CSV) -> list[str]:
  """Markdown bullets `- what: about H h alone (...): `command``, one per item of
  `items`, costed from `paper`'s rows of the cost table (`cost_section`); "not costed"
  where the table has no row for the item's `like` artefact."""
  rows = {r['artefact']: r for r in (read_rows(path) or []) if r.get('paper') == paper}
  costed = lambda r: r and int(r['runs']) and r['projected_hours'] != 'nan'
  out = []
  for m in items:
    likes = tuple(dict.fromkeys((m.like,) if isinstance(m.like, str) else m.like))
    like = next((a for a in likes if costed(rows.get(a))), None)
    per_run = like and float(rows[like]['projected_hours']) / int(rows[like]['runs'])
    cost = (f'not costed (`{"` or `".join(likes)}` is not in `benchmarks/costs.md`)' if like is None
            else f'about {m.runs * per_run:.1f} h alone ({m.runs} x {per_run:.2f} h, the '
                 f'mean run of `{like}` in `benchmarks/costs.md`)')
    out.append(f'- {m.what}: {cost}: `{m.command}`')
  return out


# `tffdp.aggregators.laplace_noise` drew `log(u0) - log(u1)` from float32 uniforms on
# `[tiny, 1)` until this commit time (UTC): a uniform of exactly 0 (probability 2^-23)
# became `tiny`, so each Laplace draw was `+-87.3 b` with probability 2 * 2^-23.
FLOAT64_LAPLACE_SINCE = '2026-11-24T13:29:00Z'
FLOAT32_LAPLACE_ATOM = 2.0 * 2.0 ** -23
# The methods that draw Laplace noise: the cosAFed family's uploads
# (`aggregators.LaplaceUploadFactory`) and DP-FedAGS's sparse-vector test.
LAPLACE_METHODS = frozenset({'cosafed', 'lapfed', 'adpfl', 'cosfed', 'dp_fedags'})


@functools.lru_cache(maxsize=None)
def model_size(model: str, dataset: str, num_classes: int = 10) -> int:
  """Trainable and non-trainable weights of registry model `model` on `dataset`'s images."""
  from tffdp import models  # pylint: disable=g-import-not-at-top
  shape = (32, 32, 3) if dataset.startswith('cifar') else (28, 28, 1)
  return models.count_params(model, shape, num_classes)


def cohort_uploads(rows: list[dict]) -> int:
  """Client uploads over a run: the sum of `metrics.csv`'s `cohort_size` column."""
  return sum(int(float(r['cohort_size'])) for r in rows if r.get('cohort_size'))


def float32_laplace_section(figs: str, laplace_draws, intro: Sequence[str] = ()) -> str:
  """A report's "Laplace sampler" section: the runs copied under `figs` that drew Laplace
  noise with the float32 sampler, and how many `+-87.3 b` draws that sampler is expected
  to have put in each.

  Args:
    figs: Folder searched for run copies (`config.json`, `metrics.csv`, `summary.json`).
    laplace_draws: `(config dict, metrics rows) -> int`, the number of Laplace
      coordinates the run drew (0 for a run that drew none).
    intro: Markdown lines after the heading (where the method draws Laplace noise).

  Returns:
    The section's markdown, ending in a blank line; '' when no run here drew with that
    sampler. A run counts as drawn with it when it has no `segments` record (runs made
    before segments were recorded) or a segment started before `FLOAT64_LAPLACE_SINCE`.
  """
  lines = _float32_laplace_lines(figs, laplace_draws)
  if not lines:
    return ''
  return '\n'.join(['## Laplace sampler', '', *([*intro, ''] if intro else []), *lines, ''])


def _made_by(config: dict) -> str:
  """The module whose command made a run (`config.json`'s `command` after `-m`), under
  its current name (`_renamed.RENAMED`); '' when the command names none."""
  from experiments import _renamed  # pylint: disable=g-import-not-at-top
  command = list(config.get('command') or [])
  if '-m' not in command[:-1]:
    return ''
  module = command[command.index('-m') + 1]
  old = module.rpartition('.')[2]
  return 'experiments.' + _renamed.RENAMED[old] if old in _renamed.RENAMED else module


def _float32_laplace_lines(figs: str, laplace_draws) -> list[str]:
  found, seen, seconds, runs = [], set(), 0.0, []
  for root, out, config in run_copies(figs, ('config.json', 'metrics.csv', 'summary.json')):
    if out in seen:
      continue
    seen.add(out)
    with open(os.path.join(root, 'summary.json')) as f:
      summary = json.load(f)
    if not drew_float32_laplace(summary.get('segments')):
      continue
    draws = laplace_draws(config, read_rows(os.path.join(root, 'metrics.csv')) or [])
    if draws:
      found.append(draws)
      seconds += float(summary.get('wall_seconds') or 0.0)
      made_by = _made_by(config)
      runs.append(f'`{os.path.basename(out)}`' + (f' (`{made_by}`)' if made_by else ''))
  if not found:
    return []
  expected = sorted(d * FLOAT32_LAPLACE_ATOM for d in found)
  return [f'{len(found)} run(s) here drew their Laplace noise before {FLOAT64_LAPLACE_SINCE} '
          'with a float32 sampler (`log(u0) - log(u1)`, `u` uniform on `[tiny, 1)`) that '
          'turned a uniform draw of exactly 0 (probability 2^-23) into `tiny`: each Laplace '
          'coordinate was `+-87.3 b` with probability 2^-22 instead of about e^-87, and the '
          'tail was otherwise cut at about 16 b. Those runs drew '
          f'{min(found):,} to {max(found):,} Laplace coordinates each, so about '
          f'{fmt(expected[0], 3)} to {fmt(expected[-1], 3)} such coordinates per run '
          f'(median {fmt(expected[len(expected) // 2], 3)}; expected counts, not observed). '
          'The sampler now draws with `tfp.distributions.Laplace` in float64; these runs '
          f'were not rerun yet. Their figure\'s command runs them again (`stale_reason`), '
          f'about {seconds / 3600:.1f} h by their recorded wall time.', '',
          'The runs (folder under the runs folder, and the module whose command made it): '
          + ', '.join(sorted(runs)) + '.', '']


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
