"""Run configuration: every hyperparameter of one experiment, validated before training."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Optional

from tffdp import checkpoints
from tffdp import runtime
from tffdp.algorithms import registry
from tffdp.data.loaders import DATASETS
from tffdp.data.partitioners import PARTITIONERS

COHORT_SAMPLING = ('uniform', 'poisson', 'all')
# `RunConfig.budget_last_round`: what the round that would pass the epsilon budget does.
BUDGET_LAST_ROUND = ('skip', 'raise_noise')

# The checkpoint file in a run directory (`tffdp.runner.CHECKPOINT`, data only:
# `tffdp.checkpoints`) and the pickle older tffdp wrote; named here so the CLI can check
# `--resume` before TensorFlow is imported.
CHECKPOINT = checkpoints.FILE
LEGACY_CHECKPOINT = checkpoints.LEGACY_PICKLE

# Method options that were top-level RunConfig fields before `method_options` (configs
# and checkpoints written then carry them flat; `from_dict` moves them).
LEGACY_OPTION_FIELDS = ('k', 'alpha', 'adjust_every', 'selection', 'dp_sgd', 'lot_size',
                        'clipping_factor', 'beta', 'clipping', 'noise_schedule',
                        'client_optimizer_state', 'clip_norm_query')


def methods() -> tuple[str, ...]:
  """Every registered method name (`tffdp.algorithms.registry`)."""
  return registry.names()

# Model per (method family, dataset) when --model is not given.
DEFAULT_MODEL = {'mnist': 'deep_mnist_cnn', 'fashion_mnist': 'deep_mnist_cnn',
                 'cifar10': 'deep_mnist_cnn', 'cifar100': 'dp_fedags_cifar_cnn'}

def method_defaults(method: str, dataset: str) -> dict:
  """The options of `method` as it resolves them with none given, on `dataset`.

  Returns:
    Option name -> default value (dataset-dependent defaults filled).

  Raises:
    KeyError: If `method` is not registered.
  """
  hp, _ = registry.get(method).hparams.from_options({}, method).resolved(dataset)
  return dataclasses.asdict(hp)


def notes_on_defaults(notes: dict, settings: dict, defaults: dict) -> dict:
  """The notes of `notes` that still hold for a run with these `settings`.

  A note on a setting that has a default (a name in `defaults`) says why that default was
  chosen ("not given in the paper; chosen because ..."), so it is kept only where the run
  leaves the setting at it (absent from `settings`, or equal to the default). A note on
  any other name is kept. The one rule behind `RunConfig.resolved`'s notes and
  `tffdp.runner.method_notes`.

  Args:
    notes: Name -> note.
    settings: Name -> the run's value (names it does not set may be absent).
    defaults: Name -> default value.

  Returns:
    A new dict, name -> note.
  """
  return {k: v for k, v in notes.items()
          if k not in defaults or settings.get(k, defaults[k]) == defaults[k]}


# The settings of what a run evaluates (not how it trains): a run made with more
# evaluation may stand in for one asking less (`evaluation_covers`).
EVALUATION_FIELDS = ('eval_every', 'eval_validation')


def evaluation_covers(old: dict, new: dict) -> bool:
  """Whether a run configured as `old` evaluated everything `new` asks for.

  A run evaluates the rounds that are multiples of `eval_every`, and its last; the
  validation split too with `eval_validation`. Evaluation does not change training, so
  such a run (or its checkpoint) is the run `new` describes, with extra evaluations.

  Args:
    old: A run's `config.json` (a field it lacks counts as its default).
    new: The `RunConfig` asked for, as a dict.
  """
  old_every = int(old.get('eval_every') or 1)
  old_validation = old.get('eval_validation', True)
  return (int(new.get('eval_every') or 1) % old_every == 0
          and (bool(old_validation) or not new.get('eval_validation', True)))


def differing_fields(old: dict, new: dict, ignore=()) -> list[str]:
  """Fields of `new` (a `RunConfig` as a dict) whose value differs from `old`'s.

  `old` is read as `from_dict` reads it (a run made before a field existed counts as
  having its default; flat method options of older configs count as `method_options`).
  A method option missing from `old` counts as its default too. A difference in
  `method_options` is named `method_options.<option>`.
  """
  old = normalized_dict(old)
  defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)
              if f.default is not dataclasses.MISSING}
  out = sorted(k for k, v in new.items()
               if k not in ignore and k != 'method_options' and old.get(k, defaults.get(k)) != v)
  if 'method_options' not in ignore and 'method_options' in new:
    old_opts, new_opts = old.get('method_options', {}), new['method_options']
    option_defaults = {}
    try:
      option_defaults = {f.name: f.default for f in dataclasses.fields(
          registry.get(new.get('method', old.get('method'))).hparams)}
    except ValueError:
      pass
    for name in sorted(set(old_opts) | set(new_opts)):
      if old_opts.get(name, option_defaults.get(name)) != new_opts.get(
          name, option_defaults.get(name)):
        out.append(f'method_options.{name}')
  return out


def normalized_dict(d: dict) -> dict:
  """A `RunConfig` dict (e.g. a `config.json`) with flat legacy method options moved.

  Options in `LEGACY_OPTION_FIELDS` that the dict's method has go into
  `method_options` (unless it already names them); the others are dropped (older
  configs stored every method's options whatever the method).
  """
  d = dict(d)
  legacy = {k: d.pop(k) for k in LEGACY_OPTION_FIELDS if k in d}
  if legacy:
    try:
      names = {f.name for f in dataclasses.fields(registry.get(d.get('method')).hparams)}
    except ValueError:
      names = set()
    opts = dict(d.get('method_options') or {})
    for k, v in legacy.items():
      if k in names:
        opts.setdefault(k, v)
    d['method_options'] = opts
  return d


def from_dict(d: dict) -> 'RunConfig':
  """The `RunConfig` a `config.json` (or checkpoint) records; other keys are ignored."""
  d = normalized_dict(d)
  names = {f.name for f in dataclasses.fields(RunConfig)}
  return RunConfig(**{k: v for k, v in d.items() if k in names})


def _bad(name, value, why):
  """Raises the `ValueError` every check below gives: the field, why, and its value."""
  raise ValueError(f'{name} {why}. Found {name}={value!r}.')


def _positive(part, *names) -> None:
  """Raises `ValueError` for the first of `part`'s fields `names` that is not > 0."""
  for name in names:
    if getattr(part, name) <= 0:
      _bad(name, getattr(part, name), 'must be positive')


def _positive_or_none(part, name: str, none: str = '') -> None:
  """Raises `ValueError` if `part`'s field `name` is neither None nor > 0; `none` says
  what None means, in the message."""
  value = getattr(part, name)
  if value is not None and value <= 0:
    _bad(name, value, 'must be positive' + (f' (or None: {none})' if none else ''))


@dataclasses.dataclass
class TrainingConfig:
  """The method and its training: what is learned, how, and by whom each round.

  Attributes:
    method: A registered method (`tffdp.algorithms.registry`).
    model: A `tffdp.models` name; None: the dataset's default (`resolved`).
    rounds: Rounds T.
    clients_per_round: Cohort size (the expected size under Poisson sampling).
    cohort_sampling: `uniform`, `poisson` or `all`; None: the method's default.
    seed: The run's seed (partition, cohorts, client batches, noise where seeded).
    learning_rate: Client learning rate eta.
    batch_size: Client batch size B.
    local_epochs: Local epochs E per round.
    method_options: The chosen method's own options (its `MethodHparams` fields), e.g.
      {'k': 0.7} for a_dpfl; `resolved()` fills every option with its default.
  """
  method: str = 'fedavg'
  model: Optional[str] = None
  rounds: int = 20
  clients_per_round: int = 10
  cohort_sampling: Optional[str] = None
  seed: int = 0
  learning_rate: float = 0.05
  batch_size: int = 20
  local_epochs: int = 1
  method_options: dict = dataclasses.field(default_factory=dict)

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid field of this part and its value."""
    if self.method not in methods():
      _bad('method', self.method, f'must be one of {", ".join(methods())}')
    _positive(self, 'rounds', 'learning_rate', 'batch_size', 'local_epochs')
    if self.cohort_sampling is not None and self.cohort_sampling not in COHORT_SAMPLING:
      _bad('cohort_sampling', self.cohort_sampling,
           f'must be one of {", ".join(COHORT_SAMPLING)}')


@dataclasses.dataclass
class DataConfig:
  """The dataset and its split into clients.

  Attributes:
    dataset: One of `tffdp.data.loaders.DATASETS`.
    data_dir: Folder with one folder per dataset; None: $TFFDP_DATA_DIR, else the user
      cache (the official files are downloaded there and checked).
    clients: Clients N the training set is partitioned into.
    partition: One of `tffdp.data.partitioners.PARTITIONERS` (label-skew, Dirichlet, ...).
    partition_options: Keyword arguments of the partitioner.
    num_validation: Training examples held out as the validation split.
    client_cache_dir: Where client datasets are cached between runs; None: no cache.
  """
  dataset: str = 'mnist'
  data_dir: Optional[str] = None
  clients: int = 100
  partition: str = 'label_skew'
  partition_options: dict = dataclasses.field(default_factory=dict)
  num_validation: int = 5000
  client_cache_dir: Optional[str] = None

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid field of this part and its value."""
    if self.dataset not in DATASETS:
      _bad('dataset', self.dataset, f'must be one of {", ".join(DATASETS)}')
    if self.partition not in PARTITIONERS:
      _bad('partition', self.partition, f'must be one of {", ".join(PARTITIONERS)}')
    _positive(self, 'clients')
    if self.num_validation < 0:
      _bad('num_validation', self.num_validation, 'must be >= 0')


@dataclasses.dataclass
class PrivacyConfig:
  """The shared privacy settings, the epsilon budget and the privacy audit.

  Attributes:
    noise_multiplier: sigma, for the methods that take one (others ignore it; their own
      noise is a method option).
    clip_norm: Clipping norm C, likewise.
    delta: The delta of every epsilon reported.
    epsilon_budget: Stop before epsilon_guaranteed passes it; None: run every round.
    budget_last_round: What the round that would take epsilon_guaranteed past
      `epsilon_budget` does: `skip` (it does not run; the run ends below the budget by
      up to one round's cost) or `raise_noise` (it runs at its noise multiplier raised
      by the smallest factor that keeps epsilon_guaranteed within the budget, then the
      run ends: the budget is spent to within the search's 1e-4 relative tolerance on
      the factor). `raise_noise` needs a method whose `Accounting.raise_noise` is set
      (a_dpfl).
    audit_canaries: A privacy audit (`tffdp.canaries`, `tffdp.audit`): this many
      canaries (client-level canary clients, or sample-level gradient canaries in one
      host client's DP-SGD steps), each included with probability 1/2. 0: no audit. A
      run with canaries is an audit, not a measurement of the method's accuracy.
    audit_canary_norm: The canaries' update (gradient) L2 norm; None: `clip_norm`.
  """
  noise_multiplier: float = 1.0
  clip_norm: float = 4.0
  delta: float = 1e-5
  epsilon_budget: Optional[float] = None
  budget_last_round: str = 'skip'
  audit_canaries: int = 0
  audit_canary_norm: Optional[float] = None

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid field of this part and its value."""
    if self.noise_multiplier < 0:
      _bad('noise_multiplier', self.noise_multiplier, 'must be >= 0')
    _positive(self, 'clip_norm')
    if not 0 < self.delta < 1:
      _bad('delta', self.delta, 'must be in (0, 1)')
    _positive_or_none(self, 'epsilon_budget')
    if self.budget_last_round not in BUDGET_LAST_ROUND:
      _bad('budget_last_round', self.budget_last_round,
           f'must be one of {", ".join(BUDGET_LAST_ROUND)}')
    if self.budget_last_round != 'skip' and self.epsilon_budget is None:
      _bad('budget_last_round', self.budget_last_round, 'needs an epsilon_budget')
    if self.audit_canaries and self.audit_canaries < 4 or self.audit_canaries < 0:
      _bad('audit_canaries', self.audit_canaries, 'must be 0 (no audit) or at least 4')
    _positive_or_none(self, 'audit_canary_norm', 'clip_norm')


@dataclasses.dataclass
class ExecutionConfig:
  """Where and how rounds run; none of it changes a result.

  Attributes:
    stop_after_round: Pause after this many rounds (1-based): checkpoint, no
      `summary.json`; `--resume` without it continues to `rounds`. A pilot of the first
      rounds at the full run's calibration (methods that calibrate sigma for T rounds see
      `rounds`). None: no pause.
    stop_after_rejected: Stop the run as diverged once this many consecutive rounds had
      their aggregated update rejected by TFF's server step (non-finite: the model has
      not changed since the streak began, and a model whose every client diverges stays
      that way). The final model is evaluated where it stops; `summary.json` says why.
      None: run every round. (This one does change a result: where the run ends.)
    checkpoint_every: Rounds between checkpoints.
    clients_per_slice: Clients run in one client computation (cohort slices); None: one.
    workers: Where rounds run: None (this process's local TFF context) or
      'host:port,...' of TFF workers (`python -m tffdp.worker`).
    worker_timeout: Seconds a worker may stay unreachable mid-round.
    tls_cert: Mutual TLS to the workers (`tffdp.tls`): this coordinator's certificate,
    tls_key: its key,
    tls_ca: and the CA the workers' certificates chain to.
    insecure_workers: Plain text to the workers instead of TLS.
  """
  stop_after_round: Optional[int] = None
  stop_after_rejected: Optional[int] = None
  checkpoint_every: int = 5
  clients_per_slice: Optional[int] = None
  workers: Optional[str] = None
  worker_timeout: float = 20.0
  tls_cert: Optional[str] = None
  tls_key: Optional[str] = None
  tls_ca: Optional[str] = None
  insecure_workers: bool = False

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid field of this part and its value."""
    _positive_or_none(self, 'stop_after_round', 'no pause')
    _positive_or_none(self, 'stop_after_rejected', 'run every round')
    _positive_or_none(self, 'clients_per_slice')
    _positive(self, 'checkpoint_every', 'worker_timeout')
    tls = [self.tls_cert, self.tls_key, self.tls_ca]
    if self.workers is not None:
      runtime.parse_workers(self.workers)
      if self.insecure_workers and any(tls):
        _bad('insecure_workers', True, 'excludes tls_cert, tls_key and tls_ca')
      if not self.insecure_workers and not all(tls):
        _bad('workers', self.workers, 'needs tls_cert, tls_key and tls_ca (mutual TLS: '
             '`python -m tffdp.worker make-certs DIR` makes them), or insecure_workers for '
             'plain text on a network you trust')
      if all(tls):
        from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
        tls_lib.TlsFiles(*tls).check()
    elif any(tls) or self.insecure_workers:
      _bad('tls_cert' if any(tls) else 'insecure_workers', self.tls_cert or True,
           'is for --workers only')


@dataclasses.dataclass
class OutputConfig:
  """What a run writes, and how often.

  Attributes:
    out: The run directory (`config.json`, `metrics.csv`, `summary.json`, checkpoint).
    eval_every: Rounds between evaluations (the last round always evaluates).
    eval_validation: Evaluate on the validation split too (False: the test set only, for
      methods that never read the validation metrics; its columns are then empty).
      Training does not change.
    log_every: Rounds between progress lines.
    notes: Maps a field or option to the comment written beside it in `config.json`
      (e.g. "not given in the paper; chosen because ...").
  """
  out: str = 'runs/latest'
  eval_every: int = 1
  eval_validation: bool = True
  log_every: int = 1
  notes: dict = dataclasses.field(default_factory=dict)

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid field of this part and its value."""
    if os.path.exists(self.out) and not os.path.isdir(self.out):
      _bad('out', self.out, 'names an existing file: the run directory must be a directory '
           '(new or a run\'s own)')
    _positive(self, 'eval_every', 'log_every')


# RunConfig's parts, in the order of its fields and of `validate`'s checks.
PARTS = {'training': TrainingConfig, 'data': DataConfig, 'privacy': PrivacyConfig,
         'execution': ExecutionConfig, 'output': OutputConfig}


@dataclasses.dataclass
class RunConfig(OutputConfig, ExecutionConfig, PrivacyConfig, DataConfig, TrainingConfig):
  """One experiment: its training, data, privacy, execution and output parts.

  A `RunConfig` is each of its parts (`TrainingConfig`, `DataConfig`, `PrivacyConfig`,
  `ExecutionConfig`, `OutputConfig`): their fields are its fields, flat
  (`config.rounds`, `config.dataset`), as `config.json` and `python -m tffdp.run --help`
  give them, and a function that needs one part takes that part's type. `config.data`
  (`.training`, `.privacy`, `.execution`, `.output`) is a copy of one part alone.
  Defaults follow A-DPFL's Table 1 (MNIST) where it applies. The chosen method's own
  options live in `method_options` (see `tffdp.algorithms.registry`; `create(...)` sorts
  keyword arguments into shared settings and options).
  """

  @classmethod
  def create(cls, **kw) -> 'RunConfig':
    """A `RunConfig` from shared settings and the method's options, by name.

    Raises:
      ValueError: If a name is neither a shared setting nor an option of `method`.
    """
    fields = {f.name for f in dataclasses.fields(cls)}
    shared = {k: v for k, v in kw.items() if k in fields}
    options = dict(shared.pop('method_options', {}))
    options.update({k: v for k, v in kw.items() if k not in fields})
    method = shared.get('method', cls.method)
    if options:
      registry.get(method).hparams.from_options(options, method)  # names unknown options
    return cls(**shared, method_options=options)

  def with_options(self, **options) -> 'RunConfig':
    """A copy with these method options set."""
    return dataclasses.replace(self, method_options=dict(self.method_options, **options))

  def part(self, name: str):
    """A copy of one part alone: `name` is a key of `PARTS` (e.g. `'data'`).

    Raises:
      KeyError: If `name` is not a part.
    """
    cls = PARTS[name]
    return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

  training = property(lambda self: self.part('training'), doc='The `TrainingConfig` part.')
  data = property(lambda self: self.part('data'), doc='The `DataConfig` part.')
  privacy = property(lambda self: self.part('privacy'), doc='The `PrivacyConfig` part.')
  execution = property(lambda self: self.part('execution'), doc='The `ExecutionConfig` part.')
  output = property(lambda self: self.part('output'), doc='The `OutputConfig` part.')

  @property
  def worker_tls(self):
    """The coordinator's `tffdp.tls.TlsFiles` (None without TLS files)."""
    if not all([self.tls_cert, self.tls_key, self.tls_ca]):
      return None
    from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
    return tls_lib.TlsFiles(self.tls_cert, self.tls_key, self.tls_ca)

  @property
  def hparams(self) -> registry.MethodHparams:
    """The method's options as its `MethodHparams` (validated)."""
    return registry.get(self.method).hparams.from_options(self.method_options, self.method)

  def resolved(self) -> 'RunConfig':
    """Fills method/dataset-dependent defaults (model, cohort sampling, method options)."""
    c = dataclasses.replace(self, notes=dict(self.notes))
    if c.model is None:
      c.model = DEFAULT_MODEL.get(c.dataset, 'deep_mnist_cnn')
      c.notes.setdefault('model', 'default for the dataset (A-DPFL Sec. 6.1 network)')
    hp = c.hparams
    hp, notes = hp.resolved(c.dataset)
    defaulted = notes_on_defaults(hp.notes(), c.method_options,
                                  method_defaults(c.method, c.dataset))
    for name, note in {**defaulted, **notes}.items():
      c.notes.setdefault(name, note)
    c.method_options = dataclasses.asdict(hp)
    if c.cohort_sampling is None:
      c.cohort_sampling = type(hp).default_cohort_sampling
      c.notes.setdefault('cohort_sampling', type(hp).cohort_sampling_note)
    if c.cohort_sampling == 'all':
      c.clients_per_round = c.clients  # every client every round
    return c

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid parameter and its value.

    Checks that no float setting is NaN or infinite, then each part's fields
    (`PARTS` order), then what spans parts: the cohort within the clients, and the
    method's options with the rest (`MethodHparams.check_run`).
    """
    # NaN passes every comparison below, and inf makes a run that never ends (a noise
    # multiplier of inf) or never learns: no shared float setting takes either.
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      if isinstance(value, float) and not math.isfinite(value):
        _bad(f.name, value, 'must be a finite number')
    for part in PARTS.values():
      part.validate(self)
    if not 0 < self.clients_per_round <= self.clients:
      _bad('clients_per_round', self.clients_per_round,
           f'must be in [1, clients={self.clients}]')
    self.hparams.check_run(self)  # the method's options, and their fit with the rest
