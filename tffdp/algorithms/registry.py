"""Method registry: `name -> (builder, hyperparameter dataclass)`.

Each method module defines a frozen hyperparameter dataclass (a `MethodHparams`: the
method's own options with their defaults, help, "not given in the paper" notes and mode
tuples, validated in `__post_init__`) and a builder, and lists them in a module-level
`METHODS` tuple of `MethodSpec`s. This module imports the built-in method modules on
first use (`BUILTIN_MODULES`); adding a method is one new module plus one line there, or
a `register(...)` call (e.g. a researcher's own method, or a test's toy method).

The CLI (`tffdp.run`) builds one argument group per method from its dataclass; the run
configuration keeps the options of the chosen method in `RunConfig.method_options`, so
two methods may give the same option name their own meanings (the CLI then reads the
flag with the chosen method's type and choices).

Shared settings (rounds, cohort, learning rate, batch size, `noise_multiplier`,
`clip_norm`, ...) stay in `RunConfig`; a method says what the shared ones mean for it in
`MethodSpec.shared_meanings` (e.g. `clip_norm` is the per-example `C` of DP-SGD methods
and the per-update `S` of DP-FedAvg).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import threading
import typing
from typing import Any, Callable, Optional

BUILTIN_MODULES = (
    'tffdp.algorithms.baselines',   # fedavg, dpfl, dp_fedavg
    'tffdp.algorithms.a_dpfl',      # a_dpfl
    'tffdp.algorithms.adap_dp_fl',  # adap_dp_fl
    'tffdp.algorithms.aadp_fl',     # aadp_fl
    'tffdp.algorithms.ddgauss',     # ddgauss (AADP-FL's baseline)
    'tffdp.algorithms.dp_scaffold',  # dp_scaffold (AADP-FL's baseline)
    'tffdp.algorithms.cosafed',     # cosafed, lapfed, adpfl, cosfed
    'tffdp.algorithms.dp_fedags',   # dp_fedags, dp_fedsnlc, dp_fedavg_ags, cpsgd
)


def option(default, help: str, *, choices: Optional[tuple] = None,  # pylint: disable=redefined-builtin
           note: Optional[str] = None, allow_infinite: bool = False):
  """A hyperparameter field: `default`, CLI `help`, optional `choices` and config note.

  `note` is written beside the value in `config.json` (e.g. "not given in the paper;
  chosen because ..."). A float option rejects NaN always and +-inf unless
  `allow_infinite` (say in `help` what inf means for it).
  """
  return dataclasses.field(default=default,
                           metadata=dict(help=help, choices=choices, note=note,
                                         allow_infinite=allow_infinite))


@dataclasses.dataclass(frozen=True)
class MethodHparams:
  """Base of every method's hyperparameter dataclass (frozen; validated on creation).

  Subclasses declare fields with `option(...)`; `__post_init__` checks `choices` and
  rejects non-finite floats (NaN always, inf unless the option allows it); a
  subclass adds its own checks by overriding `__post_init__` (calling `super()`).
  Class attributes:
    default_cohort_sampling: The method's cohort sampling when `--cohort-sampling` is
      not given (`uniform`, `poisson` or `all`), and `cohort_sampling_note` beside it.
  """
  default_cohort_sampling: typing.ClassVar[str] = 'uniform'
  cohort_sampling_note: typing.ClassVar[str] = 'uniform (fixed K) for this method'

  def __post_init__(self):
    for f in dataclasses.fields(self):
      choices = f.metadata.get('choices')
      value = getattr(self, f.name)
      if isinstance(value, float) and not math.isfinite(value) and (
          math.isnan(value) or not f.metadata.get('allow_infinite')):
        raise ValueError(f'{f.name} must be a finite number. Found {f.name}={value!r}.')
      if choices and value not in choices:
        raise ValueError(f'{f.name} must be one of {", ".join(map(str, choices))}. '
                         f'Found {f.name}={value!r}.')

  def resolved(self, dataset: str) -> tuple['MethodHparams', dict]:
    """Fills dataset-dependent defaults: `(hparams, notes)`. Default: unchanged."""
    del dataset
    return self, {}

  def check_run(self, config) -> None:
    """Raises `ValueError` if these options conflict with the run's shared settings."""

  @classmethod
  def from_options(cls, options: dict, method: str) -> 'MethodHparams':
    """`cls(**options)`, naming unknown options and the valid ones."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(names))
    if unknown:
      raise ValueError(f'method {method} has no option {", ".join(unknown)}. '
                       f'Its options: {", ".join(names) or "none"}.')
    return cls(**options)

  def notes(self) -> dict:
    return {f.name: f.metadata['note'] for f in dataclasses.fields(self)
            if f.metadata.get('note')}


def hparams_of(method: str, hp: Optional[MethodHparams], classes: dict) -> MethodHparams:
  """`hp`, or `classes[method]()` if it is None: the options of one of the methods a
  builder shares (e.g. `cosafed.HPARAMS`, `dp_fedags.HPARAMS`: name -> class).

  Raises:
    ValueError: If `method` is not in `classes`.
    TypeError: If `hp` is not exactly a `classes[method]` (a subclass could carry another
      method's options).
  """
  if method not in classes:
    raise ValueError(f'method must be one of {", ".join(classes)}. Found {method!r}.')
  hp = classes[method]() if hp is None else hp
  if type(hp) is not classes[method]:  # pylint: disable=unidiomatic-typecheck
    raise TypeError(f'hp of {method} must be a {classes[method].__name__}. Found '
                    f'{type(hp).__name__}.')
  return hp


@dataclasses.dataclass(frozen=True)
class NoOptions(MethodHparams):
  """A method without options of its own."""


@dataclasses.dataclass(frozen=True)
class BuildContext:
  """What a builder gets besides its hyperparameters.

  Attributes:
    config: The resolved `tffdp.config.RunConfig` (shared settings).
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' `FederatedData`.
    validation: Server-side validation split `(x uint8 [n, h, w, c], y [n])`.
    num_classes: Number of labels.
  """
  config: Any
  keras_builder: Callable[[], Any]
  data: Any
  validation: tuple
  num_classes: int


@dataclasses.dataclass(frozen=True)
class MethodSpec:
  """A registered method.

  Attributes:
    name: `--method` name.
    build: `(BuildContext, hparams) -> tffdp.algorithms.common.Method`.
    hparams: The method's `MethodHparams` subclass.
    title: One line for `--help` (the paper or definition).
    shared_meanings: Shared setting -> what it means for this method (for `--help`); a
      meaning that starts with `unused` marks a setting the method does not read
      (`unused_reason`); `python -m tffdp.run` refuses such a `--noise-multiplier` or
      `--clip-norm` (`tffdp.run.UNUSED_CHECKED`; `--clip-norm` is taken in an audit, as
      the canaries' default norm).
    slices_of_one: Whether the method runs its round in cohort slices of one client
      (`RunConfig.clients_per_slice = 1`: each TFF client value still one client's,
      its batches read by index tensors instead of a `tf.data` pipeline) with the same
      values as one TFF client per client: the same DP events, and without noise the
      same model to float32 rounding (each family's tests check it). The experiment
      modules' `--clients-per-slice 1` runs these methods so
      (`experiments.common.in_slices_of_one`).
  """
  name: str
  build: Callable[[BuildContext, MethodHparams], Any]
  hparams: type = NoOptions
  title: str = ''
  shared_meanings: dict = dataclasses.field(default_factory=dict)
  slices_of_one: bool = False

  def unused_reason(self, setting: str) -> Optional[str]:
    """Why this method does not read the shared `setting` (its `shared_meanings` entry,
    which starts with `unused`), or None where it reads it."""
    meaning = self.shared_meanings.get(setting, '')
    return meaning if meaning.startswith('unused') else None


_lock = threading.Lock()
_methods: dict[str, MethodSpec] = {}
_loaded = False


def register(spec: MethodSpec, replace: bool = False) -> MethodSpec:
  """Adds `spec`; raises `ValueError` if its name is taken (unless `replace`)."""
  if not issubclass(spec.hparams, MethodHparams):
    raise TypeError(f'{spec.name}: hparams must subclass MethodHparams.')
  _load_builtins()
  with _lock:
    if spec.name in _methods and not replace:
      raise ValueError(f'method {spec.name!r} is already registered.')
    _methods[spec.name] = spec
  return spec


def unregister(name: str) -> None:
  _load_builtins()
  with _lock:
    _methods.pop(name, None)


def _load_builtins() -> None:
  global _loaded
  if _loaded:
    return
  with _lock:
    if _loaded:
      return
    for module in BUILTIN_MODULES:
      for spec in importlib.import_module(module).METHODS:
        _methods[spec.name] = spec
    _loaded = True


def names() -> tuple[str, ...]:
  """Registered method names, in registration order."""
  _load_builtins()
  return tuple(_methods)


def get(name: str) -> MethodSpec:
  """The spec of `name`; `ValueError` listing the valid names if unknown."""
  _load_builtins()
  if name not in _methods:
    raise ValueError(f'method must be one of {", ".join(_methods)}. Found method={name!r}.')
  return _methods[name]
