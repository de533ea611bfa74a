"""Run configuration: every hyperparameter of one experiment, validated before training."""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

from tffdp.data.loaders import DATASETS
from tffdp.data.partitioners import PARTITIONERS

METHODS = ('fedavg', 'dpfl', 'dp_fedavg', 'a_dpfl', 'adap_dp_fl')
COHORT_SAMPLING = ('uniform', 'poisson', 'all')

# Adap DP-FL (Sec. V-A): clipping factor alpha and noise decay beta per dataset.
ADAP_DP_FL_DEFAULTS = {'mnist': dict(clipping_factor=1.0, beta=0.9999),
                       'fashion_mnist': dict(clipping_factor=0.01, beta=0.9998)}

# Model per (method family, dataset) when --model is not given.
DEFAULT_MODEL = {'mnist': 'deep_mnist_cnn', 'fashion_mnist': 'deep_mnist_cnn',
                 'cifar10': 'deep_mnist_cnn', 'cifar100': 'dp_fedags_cifar_cnn'}

_ADDRESS = re.compile(r'^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$')


def parse_workers(spec: str | Sequence[str]) -> list[str]:
  """`'host:port,host:port'` (or a sequence of them) -> list of addresses.

  Raises:
    ValueError: If an entry is not `HOST:PORT` with a port in 1-65535, or an address is
      repeated.
  """
  items = spec.split(',') if isinstance(spec, str) else list(spec)
  out = []
  for item in (i.strip() for i in items):
    m = _ADDRESS.match(item)
    if not m or not 0 < int(m['port']) < 65536:
      raise ValueError(f'workers must be HOST:PORT[,HOST:PORT...] with ports in 1-65535. '
                       f'Found {item!r}.')
    if item in out:
      raise ValueError(f'workers lists {item!r} twice.')
    out.append(item)
  if not out:
    raise ValueError('workers is empty.')
  return out


def differing_fields(old: dict, new: dict, ignore=()) -> list[str]:
  """Fields of `new` (a `RunConfig` as a dict) whose value differs from `old`'s.

  A field missing from `old` (a run made before the field existed) counts as its default
  value, since that is what the run used.
  """
  defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)
              if f.default is not dataclasses.MISSING}
  return sorted(k for k, v in new.items()
                if k not in ignore and old.get(k, defaults.get(k)) != v)


@dataclasses.dataclass
class RunConfig:
  """One experiment. Defaults follow A-DPFL's Table 1 (MNIST) where it applies.

  Attributes mirror `python -m tffdp.run --help`. `notes` maps a field to the comment
  written beside it in `config.json` (e.g. "not given in the paper; chosen because …").
  """
  method: str = 'fedavg'
  dataset: str = 'mnist'
  data_dir: Optional[str] = None
  rounds: int = 20
  clients: int = 100
  clients_per_round: int = 10
  partition: str = 'label_skew'
  partition_options: dict = dataclasses.field(default_factory=dict)
  seed: int = 0
  out: str = 'runs/latest'
  model: Optional[str] = None
  learning_rate: float = 0.05
  batch_size: int = 20
  local_epochs: int = 1
  noise_multiplier: float = 1.0
  clip_norm: float = 4.0
  delta: float = 1e-5
  cohort_sampling: Optional[str] = None
  epsilon_budget: Optional[float] = None
  eval_every: int = 1
  checkpoint_every: int = 5
  log_every: int = 1
  num_validation: int = 5000
  client_cache_dir: Optional[str] = None
  # A-DPFL (Table 1 and spec a_dpfl.md).
  k: float = 0.7
  alpha: float = 0.01
  adjust_every: int = 1
  selection: str = 'top_k'
  dp_sgd: str = 'clip_then_noise'
  # Adap DP-FL (spec adap_dp_fl.md); None: the paper's value for the dataset.
  lot_size: int = 78
  clipping_factor: Optional[float] = None
  beta: Optional[float] = None
  clipping: str = 'adaptive'
  noise_schedule: str = 'decay'
  client_optimizer_state: str = 'keep'
  clip_norm_query: str = 'accounted'
  clients_per_slice: Optional[int] = None
  # Where rounds run: None (this process's local TFF context) or 'host:port,...' of TFF
  # workers (`python -m tffdp.worker`); results do not depend on it.
  workers: Optional[str] = None
  worker_timeout: float = 20.0  # seconds a worker may stay unreachable mid-round
  notes: dict = dataclasses.field(default_factory=dict)

  def resolved(self) -> 'RunConfig':
    """Fills method/dataset-dependent defaults (model, cohort sampling)."""
    c = dataclasses.replace(self, notes=dict(self.notes))
    if c.model is None:
      c.model = DEFAULT_MODEL.get(c.dataset, 'deep_mnist_cnn')
      c.notes.setdefault('model', 'default for the dataset (A-DPFL Sec. 6.1 network)')
    if c.method == 'adap_dp_fl':
      paper = ADAP_DP_FL_DEFAULTS.get(c.dataset, ADAP_DP_FL_DEFAULTS['mnist'])
      for name, value in paper.items():
        if getattr(c, name) is None:
          setattr(c, name, value)
          c.notes.setdefault(name, f'Adap DP-FL Sec. V-A value for {c.dataset}' if
                             c.dataset in ADAP_DP_FL_DEFAULTS else
                             'not given in the paper for this dataset; chosen because it '
                             'is the MNIST value')
      if c.cohort_sampling is None:
        c.cohort_sampling = 'all'
        c.notes.setdefault('cohort_sampling', 'cross-silo: every client every round')
    if c.cohort_sampling is None:
      c.cohort_sampling = 'poisson' if c.method == 'dp_fedavg' else 'uniform'
    if c.cohort_sampling == 'all':
      c.clients_per_round = c.clients  # every client every round
      c.notes.setdefault('cohort_sampling',
                         'poisson for client-level DP-FedAvg so its accountant is exact; '
                         'uniform (fixed K) otherwise')
    return c

  def validate(self) -> None:
    """Raises `ValueError` naming the first invalid parameter and its value."""
    def bad(name, value, why):
      raise ValueError(f'{name} {why}. Found {name}={value!r}.')
    if self.method not in METHODS:
      bad('method', self.method, f'must be one of {", ".join(METHODS)}')
    if self.dataset not in DATASETS:
      bad('dataset', self.dataset, f'must be one of {", ".join(DATASETS)}')
    if self.partition not in PARTITIONERS:
      bad('partition', self.partition, f'must be one of {", ".join(PARTITIONERS)}')
    if self.rounds <= 0:
      bad('rounds', self.rounds, 'must be positive')
    if self.clients <= 0:
      bad('clients', self.clients, 'must be positive')
    if not 0 < self.clients_per_round <= self.clients:
      bad('clients_per_round', self.clients_per_round,
          f'must be in [1, clients={self.clients}]')
    if self.noise_multiplier < 0:
      bad('noise_multiplier', self.noise_multiplier, 'must be >= 0')
    if self.clip_norm <= 0:
      bad('clip_norm', self.clip_norm, 'must be positive')
    if self.learning_rate <= 0:
      bad('learning_rate', self.learning_rate, 'must be positive')
    if self.batch_size <= 0:
      bad('batch_size', self.batch_size, 'must be positive')
    if self.local_epochs <= 0:
      bad('local_epochs', self.local_epochs, 'must be positive')
    if not 0 < self.delta < 1:
      bad('delta', self.delta, 'must be in (0, 1)')
    if self.epsilon_budget is not None and self.epsilon_budget <= 0:
      bad('epsilon_budget', self.epsilon_budget, 'must be positive')
    if self.eval_every <= 0:
      bad('eval_every', self.eval_every, 'must be positive')
    if self.checkpoint_every <= 0:
      bad('checkpoint_every', self.checkpoint_every, 'must be positive')
    if self.num_validation < 0:
      bad('num_validation', self.num_validation, 'must be >= 0')
    if not 0 < self.k <= 1:
      bad('k', self.k, 'must be in (0, 1]')
    if self.adjust_every <= 0:
      bad('adjust_every', self.adjust_every, 'must be positive')
    if self.selection not in ('top_k', 'weighted_sample', 'uniform'):
      bad('selection', self.selection, 'must be one of top_k, weighted_sample, uniform')
    if self.dp_sgd not in ('clip_then_noise', 'paper_order'):
      bad('dp_sgd', self.dp_sgd, 'must be one of clip_then_noise, paper_order')
    if self.log_every <= 0:
      bad('log_every', self.log_every, 'must be positive')
    if self.lot_size <= 0:
      bad('lot_size', self.lot_size, 'must be positive')
    if self.clipping_factor is not None and self.clipping_factor <= 0:
      bad('clipping_factor', self.clipping_factor, 'must be positive')
    if self.beta is not None and not 0 < self.beta <= 1:
      bad('beta', self.beta, 'must be in (0, 1]')
    for name, modes in (('clipping', ('adaptive', 'constant')),
                        ('noise_schedule', ('decay', 'constant')),
                        ('client_optimizer_state', ('keep', 'reset')),
                        ('clip_norm_query', ('accounted', 'free'))):
      if getattr(self, name) not in modes:
        bad(name, getattr(self, name), f'must be one of {", ".join(modes)}')
    if self.clients_per_slice is not None:
      if self.clients_per_slice <= 0:
        bad('clients_per_slice', self.clients_per_slice, 'must be positive')
      if self.method == 'adap_dp_fl' and self.clients % self.clients_per_slice:
        bad('clients_per_slice', self.clients_per_slice,
            f'must divide clients={self.clients} for adap_dp_fl')
      if self.method == 'dp_fedavg':
        bad('clients_per_slice', self.clients_per_slice,
            'must be unset for dp_fedavg (its aggregator clips each client\'s update)')
    if self.workers is not None:
      parse_workers(self.workers)
    if self.worker_timeout <= 0:
      bad('worker_timeout', self.worker_timeout, 'must be positive')
    if self.cohort_sampling is not None and self.cohort_sampling not in COHORT_SAMPLING:
      bad('cohort_sampling', self.cohort_sampling,
          f'must be one of {", ".join(COHORT_SAMPLING)}')
