"""Runs a method for T rounds: cohort selection, evaluation, privacy ledgers, results.

Results in `config.out`:
- `config.json`: every resolved hyperparameter, seed, versions, command line, notes;
- `metrics.csv`: one row per round (`round, test_accuracy, test_loss,
  validation_accuracy, validation_loss, train_loss, epsilon_claimed,
  epsilon_guaranteed` (max over clients) and their means, `cohort_size`, the method's
  adaptive quantities, `update_rejected` (1 when TFF's finalizer rejected the round's
  aggregated update as non-finite, leaving the model unchanged; see `update_rejected`), and
  the per-round profile `train_seconds` (the TFF round: client work, aggregation, server
  update), `accounting_seconds`, `eval_seconds` (validation and test evaluation),
  `round_seconds, wall_seconds`; all running time: stretches in which the process was
  stopped (`kill -STOP`, Ctrl-Z) are left out and reported as `paused_seconds`, see
  `tffdp.timing`);
- `summary.json`: final and best accuracy, final epsilons with `delta` and the DP unit,
  the reasons for any `inf`, `rounds_update_rejected`, total wall time (running time,
  pauses left out) and the paused time left out of it (`paused_seconds`), and `segments`:
  one entry per process that ran rounds of the run (`start_round`, `code` =
  `code_version()`, `started` UTC), so a run resumed across sessions or code changes
  says so;
- `checkpoint.npz`: written every `checkpoint_every` rounds and on interruption, as data
  only (`tffdp.checkpoints`: arrays plus a JSON structure; a pickled `checkpoint.pkl` of
  older tffdp is loaded only with `trust_pickle`, since unpickling runs code);
  `--resume` continues from it exactly (same seed, same cohorts, same noise; the
  client-side noise of the aggregators `tffdp.seeds` lists as drawn by TF's stateful RNG
  excepted) when the code is the same: a segment
  with other code may draw other noise or batches from the same seeds.
Every file is written atomically (temporary file + rename).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import io
import json
import math
import os
import platform
import signal
import sys
import time
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import canaries, checkpoints, models, privacy, runtime, seeds, timing
from tffdp.algorithms import registry
from tffdp.algorithms import common as common_lib
from tffdp.algorithms.common import Method
from tffdp import config as config_lib
from tffdp.config import RunConfig
from tffdp.data import FederatedData, load_dataset, partition, train_validation_split
from tffdp.evaluation import Evaluator

CHECKPOINT = config_lib.CHECKPOINT
LEGACY_CHECKPOINT = config_lib.LEGACY_CHECKPOINT


class ResumeError(RuntimeError):
  """Raised when a checkpoint does not match the requested run."""


class RunInProgressError(RuntimeError):
  """Another process is running the same run directory (`run_lock`)."""


def has_checkpoint(out: str) -> bool:
  """Whether `out` holds a checkpoint (`checkpoint.npz`, or an older pickled one)."""
  return any(os.path.exists(os.path.join(out, f)) for f in (CHECKPOINT, LEGACY_CHECKPOINT))


# Settings that may differ on resume: more rounds, stopping rules, where files live,
# comments.
RESUME_FREE = ('rounds', 'stop_after_round', 'stop_after_rejected', 'out', 'data_dir',
               'client_cache_dir', 'checkpoint_every', 'log_every', 'notes', 'workers',
               'worker_timeout', 'tls_cert', 'tls_key', 'tls_ca', 'insecure_workers')


def comparable_config(config: RunConfig) -> dict:
  """`config` as a dict without the `RESUME_FREE` settings: what a checkpoint records
  and what resuming it must match."""
  return {k: v for k, v in dataclasses.asdict(config).items() if k not in RESUME_FREE}


def resume_mismatch(checkpoint_config: dict, comparable: dict) -> list[str]:
  """The settings that keep a checkpoint from being resumed by a run.

  Args:
    checkpoint_config: The checkpoint's `config` (a `comparable_config`).
    comparable: The resuming run's `comparable_config`.

  Returns:
    The differing field names (empty: it resumes). Less evaluation than the
    checkpoint's run made is the same run (its rows keep their extra evaluations).
  """
  diff = config_lib.differing_fields(checkpoint_config, comparable,
                                     ignore=config_lib.EVALUATION_FIELDS)
  if not config_lib.evaluation_covers(checkpoint_config, comparable):
    diff += [f for f in config_lib.EVALUATION_FIELDS
             if checkpoint_config.get(f) != comparable[f]]
  return diff


def read_checkpoint(out: str, trust_pickle: bool = False) -> dict:
  """The checkpoint of run directory `out`, loaded as data (`tffdp.checkpoints.load`).

  Args:
    out: A run directory.
    trust_pickle: Also load a pickled `checkpoint.pkl` written by tffdp before
      2026-11-26. Unpickling runs whatever code the file holds: only for files you trust.

  Raises:
    FileNotFoundError: If `out` holds no checkpoint.
    ResumeError: If it holds only a pickled one and `trust_pickle` is False, or the
      checkpoint cannot be read.
  """
  path = os.path.join(out, CHECKPOINT)
  if os.path.exists(path):
    try:
      return checkpoints.load(path)
    except checkpoints.CheckpointError as e:
      raise ResumeError(str(e)) from e
  legacy = os.path.join(out, LEGACY_CHECKPOINT)
  if not os.path.exists(legacy):
    raise FileNotFoundError(f'{out} holds no {CHECKPOINT}.')
  if not trust_pickle:
    raise ResumeError(
        f'{out} holds a pickled checkpoint ({LEGACY_CHECKPOINT}, tffdp before 2026-11-26); '
        'loading a pickle runs any code it holds, so it is not loaded. If the run is yours '
        f'or you trust its source: `python -m tffdp.checkpoints convert {out}` once, or '
        'add --trust-pickle.')
  return checkpoints.load_trusted_pickle(legacy)


@contextlib.contextmanager
def run_lock(out: str):
  """Holds an exclusive lock on the run directory `out` while the block runs.

  Two processes resuming one checkpoint would write the same `metrics.csv` and
  `checkpoint.npz`; the lock keeps a second one out. It is an advisory `flock` on the
  directory itself (no file is left behind) and is released when the block ends or the
  process dies, so a killed run leaves nothing to clean up. Where `fcntl` is missing
  (Windows) no lock is taken.

  Args:
    out: An existing run directory (`RunConfig.out`).

  Raises:
    RunInProgressError: If another process (or another `run_lock` of this one) holds it.
  """
  try:
    import fcntl  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover - not POSIX
    yield
    return
  fd = os.open(out, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise RunInProgressError(
          f'{out} is being run by another process; wait for it to end (or end it) '
          'before running this configuration here.') from None
    yield
  finally:
    os.close(fd)  # releases the lock


def is_running(out: str) -> bool:
  """True where a process holds `run_lock(out)` now (False for a missing folder)."""
  if not os.path.isdir(out):
    return False
  try:
    with run_lock(out):
      return False
  except RunInProgressError:
    return True


class DeclaredEventError(RuntimeError):
  """Raised when a round executed something other than the DP events declared for it."""


def atomic_write(path: str, data: str | bytes) -> None:
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'wb' if isinstance(data, bytes) else 'w') as f:
    f.write(data)
  os.replace(tmp, path)


def versions() -> dict:
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  out = {'python': platform.python_version()}
  for pkg in ('tffdp', 'tensorflow', 'tensorflow-federated', 'tensorflow-privacy',
              'dp-accounting', 'numpy'):
    try:
      out[pkg] = metadata.version(pkg)
    except metadata.PackageNotFoundError:
      out[pkg] = 'unknown'
  return out


@functools.lru_cache(maxsize=1)
def code_version() -> str:
  """The tffdp code a process runs: `<version>+<git describe --always --dirty>` when the
  package is imported from its source checkout (`setup.cfg` beside it), else the
  installed version."""
  import subprocess  # pylint: disable=g-import-not-at-top
  version = versions()['tffdp']
  package_dir = os.path.dirname(os.path.abspath(__file__))
  if not os.path.exists(os.path.join(os.path.dirname(package_dir), 'setup.cfg')):
    return version
  try:
    described = subprocess.run(
        ['git', 'describe', '--always', '--dirty'], cwd=package_dir,
        capture_output=True, text=True, timeout=10, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return version
  return f'{version}+{described}' if described else version


def build_method(config: RunConfig, data: FederatedData, keras_builder,
                 validation=None, num_classes: int = 10) -> Method:
  """The registered method `config.method` built with `config`'s settings and options."""
  spec = registry.get(config.method)
  context = registry.BuildContext(config=config, keras_builder=keras_builder, data=data,
                                  validation=validation, num_classes=num_classes)
  if not config.audit_canaries:
    return spec.build(context, config.hparams)
  return _build_with_canaries(spec, context, config)


def _build_with_canaries(spec, context, config: RunConfig) -> Method:
  """The method built with `config.audit_canaries` canaries in its process: client-level
  canaries (canary clients) for client-level and non-private methods, gradient canaries
  (examples of one host client) for sample-level ones whose client work is DP-SGD.
  `Method.audit_insertion` keeps the `canaries.Insertion`.

  Raises:
    ValueError: If the method cannot take them yet: its client work not wrapped by
      `canaries.wrap_client_work` (client-level; `common.compose_fedavg_style` does it)
      or not the DP-SGD client work (sample-level), exactly one client work and one
      cohort round taking canaries, its participants its own choice by a rule other than
      a Poisson draw at `Method.participation_rate` (client-level), or `--workers`.
  """
  norm = config.audit_canary_norm or config.clip_norm
  with canaries.inserting(norm, canaries.direction_seed(config.seed), config.clients,
                          config.audit_canaries) as insertion:
    method = spec.build(context, config.hparams)
  why = None
  sample_level = method.dp_unit == privacy.SAMPLE_LEVEL
  if sample_level and insertion.kind != 'gradient':
    why = (f'its DP unit is {method.dp_unit} and its client work is not the DP-SGD '
           'client work of tffdp.algorithms.dp_sgd, where gradient canaries go in '
           '(issue 43 moves the others)')
  elif insertion.wrapped != 1 or insertion.rounds != 1:
    why = (f'{insertion.wrapped} client works and {insertion.rounds} cohort rounds took '
           'canaries (an auditable method has one of each: canaries.wrap_client_work or '
           'the DP-SGD client work, and common.cohort_round or its own canary round)')
  elif not sample_level and insertion.kind != 'client':
    why = 'its client work took gradient canaries but its DP unit is not sample-level'
  elif (not sample_level and method.select_cohort is not None
        and method.participation_rate is None):
    why = ('it chooses its own participants by a rule a canary client cannot follow '
           '(Method.participation_rate is not set)')
  elif config.workers:
    why = 'canary rounds run in the local context only (drop --workers)'
  if why:
    raise ValueError(f'--audit-canaries cannot audit {config.method}: {why}.')
  method.audit_insertion = insertion
  return method


@dataclasses.dataclass
class Experiment:
  config: RunConfig
  data: FederatedData
  method: Method
  evaluator: Evaluator


def partitioned(config: RunConfig):
  """`(dataset, train indices, validation indices, client parts)` of a run: its dataset,
  the server's validation split held out, the rest split over its clients (each part
  indexes the training indices' order)."""
  ds = load_dataset(config.dataset, config.data_dir)
  train_idx, val_idx = train_validation_split(ds.x_train, ds.y_train, config.num_validation,
                                              seed=config.seed)
  parts = partition(config.partition, ds.y_train[train_idx], config.clients,
                    seed=config.seed, **config.partition_options)
  return ds, train_idx, val_idx, parts


def build_experiment(config: RunConfig, log: Callable[[str], None] = print) -> Experiment:
  """Loads data, partitions it and builds the method's process and round computation."""
  ds, train_idx, val_idx, parts = partitioned(config)
  y_train = ds.y_train[train_idx]
  data = FederatedData(ds.x_train[train_idx], y_train, parts,
                       cache_dir=config.client_cache_dir)
  log(f'tffdp: {ds.name} ({ds.source}): {len(train_idx)} training examples over '
      f'{config.clients} clients ({config.partition}), {len(val_idx)} validation, '
      f'{len(ds.y_test)} test')
  keras_builder = functools.partial(models.build_keras_model, config.model, ds.input_shape,
                                    ds.num_classes)
  method = build_method(config, data, keras_builder,
                        validation=(ds.x_train[val_idx], ds.y_train[val_idx]),
                        num_classes=ds.num_classes)
  evaluator = Evaluator(keras_builder, {
      'validation': (ds.x_train[val_idx], ds.y_train[val_idx]),
      'test': (ds.x_test, ds.y_test)})
  return Experiment(config, data, method, evaluator)


def build_round_computation(method: Method, data: FederatedData) -> tff.Computation:
  """One round of `method.process` on client ids (`common.cohort_round_computation`)."""
  return common_lib.cohort_round_computation(method.process, data, method.batching,
                                             method.clients_per_slice)


def connect_workers(config: RunConfig, exp: Experiment,
                    log: Callable[[str], None] = print) -> Optional[runtime.RemoteContext]:
  """The remote workers' context for `config.workers`, checked before any training.

  Returns:
    None without `config.workers`; otherwise a `runtime.RemoteContext` over the workers.

  Raises:
    ValueError: If the method's round cannot be compiled to TFF's mergeable form (the
      message names the method and the compiler's reason).
    runtime.WorkerError: If a worker does not answer.
  """
  if not config.workers:
    return None
  method = exp.method
  comp = method.round_computation
  if comp is None:
    reason = ('its round is driven from Python and exposes no single round computation '
              '(Method.round_computation)')
  else:
    reason = runtime.mergeable_reason(comp)
  if reason:
    raise ValueError(f'--workers: method {method.name} cannot run on remote TFF workers: '
                     f'its round does not compile to TFF\'s mergeable form ({reason}).')
  addresses = runtime.parse_workers(config.workers)
  if config.insecure_workers:
    log('tffdp: warning: --insecure: the workers are reached in plain text, without '
        'authentication; anyone on the network path can read the model and the updates, '
        'and anyone who can reach a worker can run code on it.')
  remote = runtime.RemoteContext(addresses, unreachable_after_s=config.worker_timeout,
                                 tls=config.worker_tls)
  per_round = (config.clients_per_round if method.clients_per_slice is None
               else -(-config.clients_per_round // method.clients_per_slice))
  log(f'tffdp: rounds run on {len(addresses)} TFF worker(s): {", ".join(addresses)} '
      f'(the cohort, about {per_round} TFF client value(s) a round, split into one '
      'sub-round per worker)')
  if per_round < len(addresses):
    log(f'tffdp: note: a round has about {per_round} TFF client value(s), fewer than the '
        f'{len(addresses)} workers; lower --clients-per-slice to use them all')
  return remote


def select_cohort(config: RunConfig, round_num: int) -> np.ndarray:
  """Seeded cohort of round `round_num` (sorted client indices)."""
  rng = seeds.round_rng(config.seed, round_num, seeds.COHORT)
  if config.cohort_sampling == 'all':
    return np.arange(config.clients)
  if config.cohort_sampling == 'poisson':
    return np.flatnonzero(rng.random(config.clients) < config.clients_per_round / config.clients)
  return np.sort(rng.choice(config.clients, config.clients_per_round, replace=False))


def client_seeds(config: RunConfig, round_num: int, cohort: np.ndarray) -> list[np.ndarray]:
  """Per-client int64[2] seeds of one round (noise and batching), fixed by the run seed."""
  return common_lib.client_seeds(config.seed, round_num, cohort)


slice_inputs = common_lib.cohort_slices
client_work_metrics = common_lib.client_work_metrics


def new_ledgers(config: RunConfig, method: Method, num_clients: int):
  """A fresh `(claimed, guaranteed)` pair of `method`'s ledgers over `num_clients`: pure-DP
  basic composition for a `laplace` or `basic_claimed` claim, the best of basic, RDP and
  PLD for a `laplace` guarantee, RDP (`privacy.PrivacyLedger`) otherwise."""
  acc = method.accounting
  if acc.ledger in ('laplace', 'basic_claimed'):
    claimed = privacy.LaplaceLedger(num_clients, config.delta, method.dp_unit,
                                    privacy.BASIC_COMPOSITION, acc.rdp_orders)
  else:
    claimed = privacy.PrivacyLedger(num_clients, config.delta, method.dp_unit,
                                    acc.rdp_orders, acc.claimed_conversion)
  if acc.ledger == 'laplace':
    guaranteed = privacy.LaplaceLedger(num_clients, config.delta, method.dp_unit,
                                       privacy.BEST_COMPOSITION, acc.rdp_orders)
  else:
    guaranteed = privacy.PrivacyLedger(num_clients, config.delta, method.dp_unit,
                                       acc.rdp_orders)
  return claimed, guaranteed


def apply_releases(ledger: privacy.PrivacyLedger, releases) -> None:
  """Composes `releases` (`(clients, event or None, reason)`) into `ledger`."""
  for clients, event, reason in releases:
    if event is None:
      ledger.record_no_guarantee(clients, reason)
    else:
      ledger.record(clients, event)


def _would_exceed(ledger: privacy.PrivacyLedger, releases, budget: float) -> bool:
  for clients, event, _ in releases:
    if len(clients) == 0:
      continue
    if event is None or np.max(ledger.epsilon_if(np.unique(clients), event)) > budget:
      return True
  return False


def _within_budget(ledger: privacy.PrivacyLedger, releases, budget: float) -> np.ndarray:
  """Clients of `releases` whose epsilon stays within `budget` after them (sorted ids)."""
  keep = []
  for clients, event, _ in releases:
    clients = np.unique(clients)
    if len(clients) and event is not None:
      keep.append(clients[ledger.epsilon_if(clients, event) <= budget])
  return np.unique(np.concatenate(keep)) if keep else np.zeros([0], np.int64)


def _eta(seconds_per_round: float, rounds_to_cap: int, ledger: privacy.PrivacyLedger,
         releases, config, per_client: bool) -> str:
  """The log line's ETA: to the round cap, or to the epsilon budget if that comes first.

  The budget's rounds are those left at this round's per-round cost (the clients of
  `releases` repeating its events; with noise decay the budget comes sooner): until the
  last client stops with a per-client budget (`per_client`), else until the first client
  would pass it.
  """
  rounds, what = rounds_to_cap, 'to the round cap'
  if config.epsilon_budget is not None:
    pick = np.max if per_client else np.min
    left = [pick(ledger.rounds_within(np.unique(clients), event, config.epsilon_budget,
                                      limit=rounds_to_cap))
            for clients, event, _ in releases if len(clients) and event is not None]
    if left and pick(left) < rounds:
      rounds, what = int(pick(left)), 'to the budget at the current per-round cost'
  return f'{_duration(seconds_per_round * rounds)} ({what}, {rounds} rounds)'


def _duration(seconds: float) -> str:
  """`H:MM:SS` with hours past 24 kept (e.g. `25:02:03`)."""
  s = int(round(seconds))
  return f'{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}'


def _fmt(x: float) -> str:
  return 'inf' if math.isinf(x) else f'{x:.3f}'


def _csv(rows: list[dict], keys: Optional[list[str]] = None, header: bool = True) -> str:
  if keys is None:
    keys = []
    for r in rows:
      keys += [k for k in r if k not in keys]
  buf = io.StringIO()
  w = csv.DictWriter(buf, fieldnames=keys, lineterminator='\n')
  if header:
    w.writeheader()
  for r in rows:
    w.writerow(r)
  return buf.getvalue()


class MetricsCsv:
  """`metrics.csv`, appended one row per round (long runs must not rewrite it each round).

  The file is rewritten whole (atomically) when it is started, on resume (from the
  checkpoint's rows, dropping any row past the checkpoint) and when a row brings a new
  column; otherwise a round appends one line.
  """

  def __init__(self, path: str, rows: list[dict]):
    self.path = path
    self.keys: list[str] = []
    self.rewrite(rows)

  def rewrite(self, rows: list[dict]) -> None:
    self.keys = []
    for r in rows:
      self.keys += [k for k in r if k not in self.keys]
    atomic_write(self.path, _csv(rows, self.keys) if rows else '')

  def append(self, row: dict, rows: list[dict]) -> None:
    if not self.keys or any(k not in self.keys for k in row):
      self.rewrite(rows)
      return
    with open(self.path, 'a') as f:
      f.write(_csv([row], self.keys, header=False))



def method_notes(notes: dict, config: RunConfig) -> dict:
  """A method's `notes` (why it chose each default) as they hold for `config`.

  A note on a default is dropped where the run sets the value otherwise (a `RunConfig`
  field off its dataclass default, such as `local_epochs=5`; a method option off the
  method's resolved default), and the run's own `config.notes` (an experiment's stated
  reason) replace the method's.

  Args:
    notes: `Method.notes`, name -> reason.
    config: The run's resolved configuration.

  Returns:
    A new dict, name -> reason.
  """
  defaults = {f.name: f.default for f in dataclasses.fields(config)
              if f.default is not dataclasses.MISSING}
  defaults.update(config_lib.method_defaults(config.method, config.dataset))
  settings = {**dataclasses.asdict(config), **config.method_options}
  kept = config_lib.notes_on_defaults(notes, settings, defaults)
  kept.update({k: config.notes[k] for k in notes if k in config.notes})
  return kept


def run(config: RunConfig, resume: bool = False, log: Callable[[str], None] = print,
        command: Optional[list[str]] = None, lock: bool = True,
        trust_pickle: bool = False) -> dict:
  """Runs one experiment and writes its results into `config.out`.

  Args:
    config: The run configuration (validated here, before any training).
    resume: Continue from `config.out/checkpoint.npz` if present.
    log: Progress sink (one line per round).
    command: The command line to record (default `sys.argv`).
    lock: Hold `run_lock(config.out)` while running; False where the caller already
      holds it (a second lock of the same folder would be refused).
    trust_pickle: With `resume`, also load a pickled `checkpoint.pkl` of tffdp before
      2026-11-26 (`read_checkpoint`; unpickling runs the file's code).

  Returns:
    The summary dict (also written to `summary.json`). A run paused by
    `config.stop_after_round` before `config.rounds` writes no `summary.json` (it is not
    finished; its checkpoint is saved) and returns the summary so far, with
    `stop_kind='paused'`.

  Raises:
    ValueError: On invalid hyperparameters.
    ResumeError: If `config.out` holds another run's checkpoint, or only a pickled one
      without `trust_pickle`.
    RunInProgressError: If another process is running in `config.out` (`run_lock`).
    tffdp.data.DataError: If the data cannot be found or verified.
  """
  config = config.resolved()
  config.validate()
  created = not os.path.exists(config.out)
  os.makedirs(config.out, exist_ok=True)
  try:
    with run_lock(config.out) if lock else contextlib.nullcontext():
      return _run_locked(config, resume, log, command, trust_pickle)
  except BaseException:
    # A run that failed before writing anything (bad data, an option the data rule out)
    # leaves no empty directory behind.
    if created and os.path.isdir(config.out) and not os.listdir(config.out):
      os.rmdir(config.out)
    raise


def _run_locked(config: RunConfig, resume: bool, log: Callable[[str], None],
                command: Optional[list[str]], trust_pickle: bool = False) -> dict:
  comparable = comparable_config(config)
  checkpointed = has_checkpoint(config.out)
  if checkpointed and not resume:
    raise ResumeError(f'{config.out} already holds a checkpoint; pass --resume to continue '
                      'it or choose another --out.')
  # Read before any work: a pickled checkpoint without trust_pickle is refused here.
  ckpt = read_checkpoint(config.out, trust_pickle) if checkpointed else None
  runtime.ensure_local_context()  # never TFF's default context (module doc of runtime)
  exp = build_experiment(config, log)
  remote = connect_workers(config, exp, log)
  try:
    loop = Runner(config, exp, remote, log, comparable)
    if ckpt is not None:
      loop.restore(ckpt)
    method = exp.method
    config_doc = dict(dataclasses.asdict(config), method_hyperparameters=method.hyperparameters,
                      method_notes=method_notes(method.notes, config),
                      dp_unit=method.dp_unit,
                      command=command if command is not None else sys.argv,
                      versions=versions(),
                      machine=dict(platform=platform.platform(), cpus=os.cpu_count()))
    atomic_write(os.path.join(config.out, 'config.json'),
                 json.dumps(config_doc, indent=2, default=str))
    return loop.loop()
  finally:
    if remote is not None:
      remote.close()


class Runner:
  """The round loop of one run: restore, choose the cohort, train, account, write a row.

  `run()` (below) builds one and calls `loop()`. Each step is a method, so a variant
  (another budget rule, another log line) replaces one method, not the loop.

  Attributes:
    state: The method's runner state after the last completed round.
    claimed, guaranteed: The two `privacy.PrivacyLedger`s.
    rows: The `metrics.csv` rows written so far.
    stopped: With a per-client budget, client -> first round it did not upload.
  """

  def __init__(self, config: RunConfig, exp: Experiment,
               remote: Optional[runtime.RemoteContext], log: Callable[[str], None],
               comparable: dict):
    self.config, self.exp, self.method = config, exp, exp.method
    self.remote, self.log, self.comparable = remote, log, comparable
    method = self.method
    self.claimed, self.guaranteed = self.ledgers(config.clients)
    if config.budget_last_round == 'raise_noise' and (
        method.accounting.raise_noise is None or method.accounting.budget_rule != 'run'):
      raise ValueError(f'budget_last_round=raise_noise: {method.name} does not state how to '
                       'raise its noise multiplier for one round (Accounting.raise_noise, '
                       'with a run-wide budget); use budget_last_round=skip.')
    if method.accounting.releases_from_round is not None and config.epsilon_budget is not None:
      raise ValueError(f'--epsilon-budget cannot stop {method.name}: its DP events are '
                       'known only after each round (Accounting.releases_from_round). '
                       f'Found epsilon_budget={config.epsilon_budget!r}.')
    self.last_metrics = None
    self.state = method.initialize()
    common_lib.check_model_weights(method, self.state)
    self.per_client_budget = (method.accounting.budget_rule == 'per_client'
                              and config.epsilon_budget is not None)
    # The ledger the budget stops on: the method's choice per client, else guaranteed.
    self.budget_on_claimed = (self.per_client_budget
                              and method.accounting.budget_ledger != 'guaranteed')
    self.stopped: dict[int, int] = {}
    self.rows: list[dict] = []
    self.rejected = 0  # rounds whose update TFF rejected (`REJECTED`), this run so far
    self.start_round, self.wall_before = 0, 0.0
    self.stop_reason, self.stop_kind = None, None
    # One entry per process that ran rounds of this run: where it started, with which code.
    self.segments: list[dict] = []
    self.ckpt_path = os.path.join(config.out, CHECKPOINT)
    # Every time below is running time: pauses (SIGSTOP) are left out (`tffdp.timing`).
    self.clock = timing.running_clock()
    self._t_start = self.clock()
    # The loop's end: `rounds`, or the pause `stop_after_round` asks for.
    self.last_round = min(config.rounds, config.stop_after_round or config.rounds)
    self.auditor = self.canary_ledgers = None
    self.executed = None   # the last round's releases from its mechanisms' events
    if config.audit_canaries and method.audit_insertion.kind == 'gradient':
      self.auditor = canaries.GradientAuditor(config.audit_canaries, config.seed,
                                              exp.data.client_sizes, method.batching,
                                              self.trainable(), method.lot_rates)
      method.audit_insertion.plan = self.auditor.tables
    elif config.audit_canaries:
      # `resolved()` sets K = N for `cohort_sampling='all'`; a method drawing its own
      # Poisson cohorts states its rate.
      rate = method.participation_rate or config.clients_per_round / config.clients
      self.auditor = canaries.Auditor(config.audit_canaries, config.seed, config.clients,
                                      rate, self.trainable())
      # Canary clients' own releases (canary j as client j): a canary may take part in
      # more rounds than any real client, so the audit compares with both.
      self.canary_ledgers = self.ledgers(config.audit_canaries)

  def ledgers(self, num_clients: int):
    """A fresh `(claimed, guaranteed)` pair of the method's ledgers over `num_clients`."""
    return new_ledgers(self.config, self.method, num_clients)

  # ----- checkpoints ------------------------------------------------------------------

  def restore(self, ckpt: Optional[dict] = None) -> None:
    """Continues from `ckpt` (default: `read_checkpoint(config.out)`).

    Raises:
      ResumeError: If it is another run's checkpoint.
    """
    if ckpt is None:
      ckpt = read_checkpoint(self.config.out)
    diff = resume_mismatch(ckpt['config'], self.comparable)
    if diff:
      raise ResumeError(f'checkpoint in {self.config.out} was made with different '
                        f'settings: {", ".join(diff)}.')
    self.state = tf.nest.pack_sequence_as(self.state, ckpt['state'])
    self.claimed.load_state_dict(ckpt['claimed'])
    self.guaranteed.load_state_dict(ckpt['guaranteed'])
    self.rows, self.start_round = ckpt['rows'], ckpt['round']
    self.rejected = rejected_rounds(self.rows) or 0
    self.wall_before = ckpt['wall_seconds']
    self.stopped = {int(k): int(v) for k, v in ckpt.get('stopped', {}).items()}
    # Checkpoints written before segments were recorded: the first segment's code unknown.
    self.segments = list(ckpt.get('segments') or [dict(start_round=0, code=None)])
    if self.auditor is not None:
      self.auditor.load_state_dict(ckpt['audit'], self.trainable())
    if self.canary_ledgers is not None:
      for ledger, state in zip(self.canary_ledgers, ckpt['canary_ledgers']):
        ledger.load_state_dict(state)
    self.log(f'tffdp: resuming {self.config.out} at round {self.start_round}')

  def snapshot(self) -> dict:
    snap = dict(config=self.comparable, state=tf.nest.flatten(self.state),
                claimed=self.claimed.state_dict(), guaranteed=self.guaranteed.state_dict(),
                rows=list(self.rows), round=len(self.rows), stopped=dict(self.stopped),
                segments=list(self.segments))
    if self.auditor is not None:
      snap['audit'] = self.auditor.state_dict()
    if self.canary_ledgers is not None:
      snap['canary_ledgers'] = [ledger.state_dict() for ledger in self.canary_ledgers]
    return snap

  def trainable(self) -> list[np.ndarray]:
    """The model's trainable weights now (the auditor's view of the released model)."""
    return [np.asarray(w) for w in self.method.model_weights(self.state).trainable]

  def save_checkpoint(self, snap: dict) -> None:
    atomic_write(self.ckpt_path, checkpoints.dumps(dict(snap, wall_seconds=self.wall())))
    legacy = os.path.join(self.config.out, LEGACY_CHECKPOINT)
    if os.path.exists(legacy):  # a resumed pickled checkpoint, now saved as data
      os.remove(legacy)

  def paused_since_last_row(self) -> float:
    """Seconds of pause since the last row (or the loop's start): a pause that falls
    between rounds is counted in the next row, so the rows add up to every pause up to the
    last row (`summary.json` adds any after it)."""
    paused = self.clock.paused()
    since, self._paused_mark = paused - self._paused_mark, paused
    return round(since, 3)

  def wall(self) -> float:
    return self.wall_before + self.clock() - self._t_start

  def add_audit(self, summary: dict) -> None:
    """Writes the audit into `summary`: `epsilon_lower_bound` and `epsilon_estimate` of
    the every-round threat model beside the two epsilons, both threat models under
    `audit` (`canaries.Auditor.report`), and logs them."""
    report = self.auditor.report(self.trainable(), self.config.delta)
    report['note'] = ('an audit run: canaries took part, so its accuracy is not the '
                      "method's")
    against = 'epsilon_guaranteed'
    if self.canary_ledgers is not None:  # canary clients: their own, and the real ones'
      claimed, guaranteed = (ledger.report().max for ledger in self.canary_ledgers)
      report['epsilon_claimed_canaries'] = float(claimed)
      report['epsilon_guaranteed_canaries'] = float(guaranteed)
      report['epsilon_claimed_compared'] = max(float(claimed),
                                               float(summary['epsilon_claimed']))
      report['epsilon_guaranteed_compared'] = max(float(guaranteed),
                                                  float(summary['epsilon_guaranteed']))
      against = 'the larger epsilon_guaranteed of real and canary clients'
    if report.get('host') is not None:  # gradient canaries: the host's own epsilons
      host = report['host']
      report['epsilon_claimed_host'] = float(self.claimed.epsilon(host))
      report['epsilon_guaranteed_host'] = float(self.guaranteed.epsilon(host))
      against = f'epsilon_guaranteed of host client {host}'
    guaranteed = report.get('epsilon_guaranteed_host', report.get(
        'epsilon_guaranteed_compared', float(summary['epsilon_guaranteed'])))
    summary['epsilon_lower_bound'] = report['every_round']['epsilon_lower_bound']
    summary['epsilon_estimate'] = report['every_round']['epsilon_estimate']
    summary['audit'] = report
    for name in ('every_round', 'final_model'):
      r = report[name]
      self.log(f'tffdp: audit ({name.replace("_", " ")}; {report["canaries"]} canaries, '
               f'{report["included"]} included, {report["joins"]} joins): epsilon lower '
               f'bound {_fmt(r["epsilon_lower_bound"])}, estimate '
               f'{_fmt(r["epsilon_estimate"])} (delta {self.config.delta:g}; '
               f'{against} {_fmt(guaranteed)})')

  # ----- one round ------------------------------------------------------------------

  def choose_cohort(self, r: int) -> Optional[np.ndarray]:
    """Round `r`'s cohort, without clients past a per-client budget; None: stop the run."""
    method, config = self.method, self.config
    cohort = (method.select_cohort(r) if method.select_cohort is not None
              else select_cohort(config, r))
    if not self.per_client_budget:
      return cohort
    cohort = np.setdiff1d(cohort, list(self.stopped))
    on_guaranteed = method.accounting.budget_ledger == 'guaranteed'
    ledger = self.guaranteed if on_guaranteed else self.claimed
    releases_of = method.accounting.guaranteed if on_guaranteed else method.accounting.claimed
    within = _within_budget(ledger, releases_of(cohort, self.state), config.epsilon_budget)
    for c in np.setdiff1d(cohort, within):
      self.stopped[int(c)] = r
    if len(within) == 0:
      self.stop_kind = STOP_BUDGET
      self.stop_reason = (f'every client has spent its budget: a further round would take '
                          f'its epsilon_{method.accounting.budget_ledger} past '
                          f'{config.epsilon_budget}')
      self.log(f'tffdp: stopping at round {r}: {self.stop_reason}')
      return None
    return within

  def train(self, cohort: np.ndarray, r: int, declared=None) -> tuple[dict, float]:
    """Runs the method's round on `cohort` (on the workers if any); `(quantities, loss)`.

    Raises `DeclaredEventError` (the state unchanged) where the round's metrics disagree
    with what was declared for it: `Accounting.check_round`, and the method's
    `Accounting.executed` against `declared` (the round's declared guaranteed releases),
    which are then kept in `self.executed`.

    `quantities` are the adaptive quantities the round used plus the round's own
    metrics; `loss` is the mean training loss (NaN for an empty cohort).
    """
    method = self.method
    quantities = method.adaptive_quantities(self.state)
    if not len(cohort):
      return quantities, float('nan')
    with self.remote.installed() if self.remote is not None else contextlib.nullcontext():
      try:
        state, metrics = method.run_round(self.state, cohort, r, self.config.seed)
      except Exception as exc:  # pylint: disable=broad-except
        reason = method.round_failure(exc)
        if reason is None:
          raise
        raise Diverged(reason) from exc
    acc = method.accounting
    problem = acc.check_round(cohort, state, metrics)
    if not problem and declared is not None and acc.executed is not None:
      self.executed = acc.executed(cohort, state, metrics)
      problem = privacy.releases_differ(declared, self.executed)
      if problem:
        problem = f'the DP events the mechanism states differ from those declared: {problem}'
    if problem:
      raise DeclaredEventError(f'{method.name}, round {r + 1}: {problem}. The run stops '
                               'before accounting this round.')
    self.state = state
    self.last_metrics = metrics
    if self.auditor is not None:
      train = common_lib.client_work_metrics(metrics)['train']
      upload = ((np.asarray(train['canary_projections']), float(train['upload_norm']))
                if 'canary_projections' in train else None)
      self.auditor.observe(cohort, self.trainable(), r, upload)
      quantities['audit_canaries_joined'] = self.auditor.joined(r, cohort)
    quantities.update(method.round_metrics(metrics))
    rejected = update_rejected(metrics)
    if rejected is not None:
      quantities[REJECTED] = int(rejected)
    return quantities, method.train_loss(metrics)

  def population(self, releases):
    """`(real, canaries)`: `releases` split into those of real clients (ids `< N`, the
    run's ledgers) and those of canary clients (id `N + j` as `j`, `canary_ledgers`). A
    canary still counts where a method's event depends on the cohort it ran with."""
    if self.auditor is None:
      return releases, []
    n = self.config.clients
    real, canary = [], []
    for clients, event, reason in releases:
      clients = np.asarray(clients)
      real.append((clients[clients < n], event, reason))
      canary.append((clients[clients >= n] - n, event, reason))
    return real, canary

  def account(self, rel_claimed, rel_guaranteed, canary_releases=([], [])):
    """Composes the round's releases into both ledgers (and the canaries' into theirs);
    returns both reports."""
    apply_releases(self.claimed, rel_claimed)
    apply_releases(self.guaranteed, rel_guaranteed)
    if self.canary_ledgers is not None:
      for ledger, releases in zip(self.canary_ledgers, canary_releases):
        apply_releases(ledger, releases)
    return self.claimed.report(), self.guaranteed.report()

  def evaluate(self) -> dict:
    if self.config.eval_validation:
      return self.exp.evaluator(self.method.model_weights(self.state))
    return dict(self.exp.evaluator(self.method.model_weights(self.state), names=['test']),
                validation_accuracy='', validation_loss='')

  def write_row(self, row: dict) -> None:
    self.rows.append(row)
    self.metrics_csv.append(row, self.rows)

  def log_round(self, row: dict, rep_c, rep_g, releases) -> None:
    config, done = self.config, row['round']
    if not (done % config.log_every == 0 or done == config.rounds
            or done == self.start_round + 1):
      return
    rate = (self.wall() - self.wall_before) / (done - self.start_round)
    acc = row['test_accuracy']
    ledger = self.claimed if self.budget_on_claimed else self.guaranteed
    rejected = self.rejected
    self.log(f'round {done}/{config.rounds} | test_acc {acc if acc == "" else f"{acc:.4f}"} | '
             f'eps_claimed {_fmt(rep_c.max)} eps_guaranteed {_fmt(rep_g.max)} '
             f'(delta {config.delta:g}, {self.method.dp_unit}) | {rate:.2f} s/round | '
             + (f'{rejected} update(s) rejected | ' if rejected else '') + 'ETA '
             + _eta(rate, config.rounds - done, ledger, releases, config,
                    self.per_client_budget))

  def run_round(self, r: int) -> bool:
    """Round `r` end to end; False if the run stops before it (budget)."""
    config, method = self.config, self.method
    t0 = self.clock()
    if config.budget_last_round == 'raise_noise' and self.raised_row() is not None:
      return self.spent()  # (resumed after its raised round: no cohort may fit again)
    cohort = self.choose_cohort(r)
    if cohort is None:
      return False
    if self.auditor is not None:  # canaries are clients of this run, in no ledger
      cohort = self.auditor.cohort(r, cohort)
    acc = method.accounting
    after = acc.releases_from_round is not None
    declared = None

    def declare():  # the round's releases from `self.state`, as stated before it runs
      guaranteed = acc.guaranteed(cohort, self.state)
      return (*self.population(acc.claimed(cohort, self.state)), guaranteed,
              *self.population(guaranteed))
    if not after:
      rel_claimed, can_claimed, declared, rel_guaranteed, can_guaranteed = declare()
    raised = None
    if (not after and not self.per_client_budget and config.epsilon_budget is not None
        and _would_exceed(self.guaranteed, rel_guaranteed, config.epsilon_budget)):
      if config.budget_last_round == 'raise_noise':  # (none raised yet: checked above)
        raised = self.raise_to_budget(cohort)
      if raised is None:
        self.stop_kind = STOP_BUDGET
        self.stop_reason = (f'round {r + 1} would take epsilon_guaranteed past the budget '
                            f'{config.epsilon_budget}')
        self.log(f'tffdp: stopping: {self.stop_reason}')
        return False
      unraised = self.state
      factor, self.state = raised
      rel_claimed, can_claimed, declared, rel_guaranteed, can_guaranteed = declare()
      self.log(f'tffdp: round {r + 1} would take epsilon_guaranteed past the budget '
               f'{config.epsilon_budget}: it runs at its noise multiplier x {factor:.4f} '
               '(budget_last_round=raise_noise) and is the last')
    t_train = self.clock()
    try:
      self.executed = None
      quantities, train_loss = self.train(cohort, r, declared)
    except Diverged as exc:
      if raised is not None:  # the checkpoint keeps the state the round started from
        self.state = unraised
      self.stop_kind = STOP_DIVERGED
      self.stop_reason = f'diverged in round {r + 1}: {exc}'
      self.log(f'tffdp: stopping after round {r}: {self.stop_reason}. The round released '
               'nothing and is not accounted.')
      return False
    t_train = self.clock() - t_train
    t_account = self.clock()
    if self.executed is not None:   # the mechanism's own events (checked in `train`)
      rel_guaranteed, can_guaranteed = self.population(self.executed)
    if after:
      rel_claimed, rel_guaranteed = (
          acc.releases_from_round(cohort, self.state, self.last_metrics)
          if len(cohort) else ([], []))
      (rel_claimed, can_claimed), (rel_guaranteed, can_guaranteed) = map(
          self.population, (rel_claimed, rel_guaranteed))
    rep_c, rep_g = self.account(rel_claimed, rel_guaranteed, (can_claimed, can_guaranteed))
    t_account = self.clock() - t_account
    row = dict(round=r + 1)
    t_eval = self.clock()
    if (r + 1) % config.eval_every == 0 or r + 1 in (config.rounds, self.last_round):
      row.update(self.evaluate())
    else:
      row.update(test_accuracy='', test_loss='', validation_accuracy='', validation_loss='')
    if config.budget_last_round == 'raise_noise':
      row[BUDGET_NOISE_FACTOR] = '' if raised is None else raised[0]
    row.update(train_loss=train_loss, epsilon_claimed=rep_c.max,
               epsilon_claimed_mean=rep_c.mean, epsilon_guaranteed=rep_g.max,
               epsilon_guaranteed_mean=rep_g.mean, cohort_size=int(np.sum(cohort < config.clients)),
               **quantities, train_seconds=t_train, accounting_seconds=t_account,
               eval_seconds=self.clock() - t_eval,
               round_seconds=self.clock() - t0, wall_seconds=self.wall(),
               paused_seconds=self.paused_since_last_row())
    self.write_row(row)
    self.rejected += row.get(REJECTED, 0)
    if row.get(REJECTED) and self.rejected == 1:
      self.log(f'tffdp: round {r + 1}: the aggregated update was non-finite (NaN or inf) '
               'and TFF\'s finalizer rejected it: the model is unchanged, the round is '
               'still accounted. metrics.csv marks each such round (update_rejected).')
    self.log_round(row, rep_c, rep_g,
                   rel_claimed if self.budget_on_claimed else rel_guaranteed)
    if self.stalled():
      return False
    if not _all_finite(method.model_weights(self.state)):
      self.stop_kind = STOP_DIVERGED
      self.stop_reason = (f'diverged in round {r + 1}: the model weights are non-finite '
                          '(NaN or inf); every later round would be too')
      self.log(f'tffdp: stopping: {self.stop_reason}')
      return False
    return raised is None or self.spent()

  def spent(self) -> bool:
    """Records and logs the stop after a `budget_last_round='raise_noise'` round; False."""
    row = self.raised_row()
    self.stop_kind = STOP_BUDGET
    self.stop_reason = (f'the epsilon budget {self.config.epsilon_budget} is spent: round '
                        f'{int(float(row["round"]))} ran at its noise multiplier x '
                        f'{float(row[BUDGET_NOISE_FACTOR]):.4f} to land on it '
                        '(budget_last_round=raise_noise)')
    self.log(f'tffdp: stopping: {self.stop_reason}')
    return False

  def raised_row(self) -> Optional[dict]:
    """The row of the round this run ran at a raised noise multiplier, or None."""
    return next((row for row in reversed(self.rows)
                 if str(row.get(BUDGET_NOISE_FACTOR) or '') not in ('', '0', '0.0')), None)

  def raise_to_budget(self, cohort: np.ndarray) -> Optional[tuple[float, Any]]:
    """The smallest factor >= 1 on the round's noise multiplier (relative tolerance 1e-4)
    that keeps `cohort`'s round within `config.epsilon_budget` on the guaranteed ledger,
    and the state with it (`Accounting.raise_noise`); None if no factor up to 2**30 does."""
    acc, budget = self.method.accounting, self.config.epsilon_budget

    def fits(factor):
      state = acc.raise_noise(self.state, factor)
      rel, _ = self.population(acc.guaranteed(cohort, state))
      return not _would_exceed(self.guaranteed, rel, budget)

    lo, hi = 1.0, 2.0
    while not fits(hi):
      lo, hi = hi, 2 * hi
      if hi > 2.0 ** 30:
        return None
    while hi / lo - 1 > 1e-4:
      mid = math.sqrt(lo * hi)
      lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi, acc.raise_noise(self.state, hi)

  # ----- the loop -------------------------------------------------------------------

  def stalled(self) -> bool:
    """Whether the last `config.stop_after_rejected` rounds (with a cohort) all had their
    update rejected; if so, records the stop (`STOP_DIVERGED`) and logs it."""
    n = self.config.stop_after_rejected
    streak = rejected_streak(self.rows)
    if not n or streak < n:
      return False
    rounds = [int(row['round']) for row in self.rows if float(row.get(REJECTED) or 0)]
    first, last = rounds[-streak], int(self.rows[-1]['round'])
    self.stop_kind = STOP_DIVERGED
    self.stop_reason = (f'diverged in round {first}: the aggregated updates of rounds '
                        f'{first}-{last} were all rejected as non-finite, the model is '
                        f'unchanged since round {first - 1} (stop_after_rejected={n})')
    self.log(f'tffdp: stopping: {self.stop_reason}')
    return True

  def loop(self) -> dict:
    """Rounds `start_round .. config.rounds - 1`; writes the summary; returns it.

    On any exception (KeyboardInterrupt, a worker lost, ...) the state after the last
    completed round is checkpointed before it propagates.
    """
    config = self.config
    self.metrics_csv = MetricsCsv(os.path.join(config.out, 'metrics.csv'), self.rows)
    self._t_start, self._paused_mark = self.clock.read()
    self.segments.append(dict(start_round=self.start_round, code=code_version(),
                              started=time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())))
    last_good = self.snapshot()  # the state after the last completed round
    try:
      # A run resumed with `stop_after_rejected` newly set may already have stalled.
      for r in range(self.start_round, 0 if self.stalled() else self.last_round):
        if not self.run_round(r):
          break
        last_good = self.snapshot()
        if (r + 1) % config.checkpoint_every == 0:
          self.save_checkpoint(last_good)
        if runtime.terminate_requested():  # a SIGTERM whose exception Python dropped
          raise runtime.Terminated(128 + signal.SIGTERM)
    except DeclaredEventError:
      self.save_checkpoint(last_good)
      self.log(f'tffdp: stopped after round {last_good["round"]}: a round did not match its '
               'declared DP events (a defect of the method, not an interruption: '
               '--resume would repeat it); checkpoint saved.')
      raise
    except BaseException as exc:
      self.save_checkpoint(last_good)
      # After SIGTERM, a call whose worker the handler ended fails: that is the stop.
      stop = (runtime.Terminated(128 + signal.SIGTERM) if runtime.terminate_requested()
              and not isinstance(exc, runtime.Terminated) else None)
      what = ('terminated (SIGTERM)' if stop or isinstance(exc, runtime.Terminated) else
              'interrupted' if isinstance(exc, KeyboardInterrupt) else
              f'failed in round {last_good["round"] + 1} ({type(exc).__name__})')
      self.log(f'tffdp: {what}; the state after round {last_good["round"]} is '
               f'checkpointed. Continue with --resume (--out {config.out}).')
      if stop:
        raise stop from None
      raise
    if self.stop_reason and self.rows and self.rows[-1]['test_accuracy'] == '':
      # A budget stop ends the run early: evaluate the final model there.
      self.rows[-1].update(self.evaluate())
      self.metrics_csv.rewrite(self.rows)
    self.save_checkpoint(self.snapshot())
    paused = not self.stop_reason and len(self.rows) < config.rounds
    if paused:
      self.stop_kind = STOP_PAUSED
      self.stop_reason = (f'paused after round {len(self.rows)} of {config.rounds} '
                          '(stop_after_round)')
    summary = summarize(self.rows, self.claimed.report(), self.guaranteed.report(),
                        self.method, config, self.wall(), self.stop_reason, self.stop_kind)
    # Pauses after the last row (final evaluation, checkpoint) are out of the wall time too.
    summary['paused_seconds'] = round(summary['paused_seconds']
                                      + self.paused_since_last_row(), 3)
    summary['segments'] = self.segments
    if self.auditor is not None:
      self.add_audit(summary)
    if paused:
      self.log(f'tffdp: {self.stop_reason}; checkpoint saved, no summary.json. Continue '
               f'with --resume (--out {config.out}) without --stop-after-round.')
      return summary
    if self.per_client_budget:
      summary['client_stop_round'] = {str(c): r for c, r in sorted(self.stopped.items())}
    atomic_write(os.path.join(config.out, 'summary.json'), json.dumps(summary, indent=2))
    return summary


# `summary.json`'s `stop_kind`: why a run ended before its round cap (None: it did not).
STOP_BUDGET = 'budget'
STOP_DIVERGED = 'diverged'
# Not in any `summary.json`: what `run()` returns for a run `stop_after_round` paused.
STOP_PAUSED = 'paused'


def stop_kind(summary: dict) -> Optional[str]:
  """Why the run of `summary` (a `summary.json`) ended before its round cap.

  Summaries written before `stop_kind` existed are read from their `stop_reason`
  (a divergence's reason starts with 'diverged'; any other stop was a budget's).

  Args:
    summary: The parsed `summary.json` of a run.

  Returns:
    `STOP_BUDGET`, `STOP_DIVERGED`, or None when the run reached its round cap.
  """
  if summary.get('stop_kind'):
    return summary['stop_kind']
  reason = summary.get('stop_reason') or ''
  if not reason:
    return None
  return STOP_DIVERGED if reason.startswith('diverged') else STOP_BUDGET


class Diverged(Exception):
  """A round failed in the way its method declares a diverged model fails
  (`Method.round_failure`); the message says how."""


# The metrics.csv column of `update_rejected`.
REJECTED = 'update_rejected'
# metrics.csv column of a `budget_last_round='raise_noise'` run: the factor its last round's
# noise multiplier was raised by (empty in the other rounds).
BUDGET_NOISE_FACTOR = 'budget_noise_factor'


def update_rejected(metrics) -> Optional[bool]:
  """Whether TFF's finalizer rejected the round's aggregated update.

  `tff.learning.templates.build_apply_optimizer_finalizer` (the server step of every
  method composed with `tffdp.algorithms.common.compose_fedavg_style`) leaves the model
  weights unchanged when the aggregated update holds a NaN or inf, and says so in its
  `update_non_finite` measurement (TFF's `reject_non_finite_update`). A client whose local
  training diverged makes the whole aggregate non-finite, so such rounds train nothing
  though they still release (and are accounted).

  Args:
    metrics: The `process.next` metrics of one round (nested mappings and sequences; a
      wrapped process nests the inner one's).

  Returns:
    True or False from the first `update_non_finite` found (depth first), None when the
    metrics hold none (a method without that finalizer).
  """
  if hasattr(metrics, 'items'):
    for key, value in metrics.items():
      found = (bool(np.asarray(value)) if key == 'update_non_finite'
               else update_rejected(value))
      if found is not None:
        return found
  elif isinstance(metrics, (list, tuple)):
    for value in metrics:
      found = update_rejected(value)
      if found is not None:
        return found
  return None


def rejected_round_numbers(rows) -> Optional[list[int]]:
  """The `round`s of `rows` (metrics.csv rows) whose update was rejected (`REJECTED`);
  None when no row records it (runs made before the column, or methods without it)."""
  marked = [r for r in rows if r.get(REJECTED) not in (None, '')]
  if not marked:
    return None
  return [int(r['round']) for r in marked if float(r[REJECTED])]


def rejected_rounds(rows) -> Optional[int]:
  """How many of `rows` had their update rejected (`rejected_round_numbers`); None when
  no row records it."""
  rounds = rejected_round_numbers(rows)
  return None if rounds is None else len(rounds)


def rejected_streak(rows) -> int:
  """How many of the last `rows` in a row had their update rejected (`REJECTED`); rounds
  with an empty cohort (Poisson sampling: the model unchanged, nothing released) neither
  count nor end the streak."""
  n = 0
  for row in reversed(rows):
    if row.get('cohort_size') not in (None, '') and not float(row['cohort_size']):
      continue
    if not float(row.get(REJECTED) or 0):
      break
    n += 1
  return n


def _all_finite(weights) -> bool:
  return all(bool(np.all(np.isfinite(np.asarray(t)))) for t in tf.nest.flatten(weights))


def load_trained(out: str, data_dir: Optional[str] = None,
                 log: Callable[[str], None] = print) -> tuple[Experiment, object, int]:
  """The run in `out` rebuilt from its `config.json`, with the model of its checkpoint.

  For evaluations after training (e.g. `tffdp.mia`): the experiment (data, method,
  evaluator) is built again and the checkpointed server state restored.

  Args:
    out: A run directory holding `config.json` and `checkpoint.npz`.
    data_dir: Overrides the recorded data directory (None: the recorded one).
    log: Progress lines.

  Returns:
    `(experiment, model_weights, rounds_done)` (`tff.learning.models.ModelWeights`).

  Raises:
    FileNotFoundError: If `out` lacks either file.
    ResumeError: If its checkpoint is a pickle (`read_checkpoint`).
  """
  with open(os.path.join(out, 'config.json')) as f:
    config = config_lib.from_dict(json.load(f))
  config = dataclasses.replace(config, out=out,
                               data_dir=data_dir if data_dir else config.data_dir).resolved()
  ckpt = read_checkpoint(out)
  exp = build_experiment(config, log)
  state = tf.nest.pack_sequence_as(exp.method.initialize(), ckpt['state'])
  return exp, exp.method.model_weights(state), int(ckpt['round'])


def summarize(rows, rep_c, rep_g, method, config, wall_seconds, stop_reason,
              kind=None) -> dict:
  evaluated = [r for r in rows if r.get('test_accuracy') != '']
  best = max(evaluated, key=lambda r: r['test_accuracy']) if evaluated else None
  final = evaluated[-1] if evaluated else None
  jsonable = lambda x: x if not (isinstance(x, float) and math.isinf(x)) else 'inf'
  return dict(
      method=method.name, dataset=config.dataset, seed=config.seed,
      rounds_completed=len(rows), stop_reason=stop_reason, stop_kind=kind,
      final_test_accuracy=final['test_accuracy'] if final else None,
      final_test_loss=final['test_loss'] if final else None,
      best_test_accuracy=best['test_accuracy'] if best else None,
      best_round=best['round'] if best else None,
      epsilon_claimed=jsonable(rep_c.max), epsilon_claimed_mean=jsonable(rep_c.mean),
      epsilon_guaranteed=jsonable(rep_g.max),
      epsilon_guaranteed_mean=jsonable(rep_g.mean),
      epsilon_reasons=sorted(set(rep_c.reasons) | set(rep_g.reasons)),
      rounds_update_rejected=rejected_rounds(rows),
      delta=config.delta, dp_unit=method.dp_unit, wall_seconds=wall_seconds,
      seconds_per_round=wall_seconds / max(1, len(rows)),
      # Rows from before the column (a run resumed across this change) count 0.
      paused_seconds=round(sum(float(r.get('paused_seconds') or 0) for r in rows), 3))
