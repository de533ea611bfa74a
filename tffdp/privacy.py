"""Per-client privacy ledger over `dp_accounting`'s RDP accountant.

Each noisy release that touches a client's data is recorded as a `dp_accounting.DpEvent`
for that client (sample-level DP: a client's local DP-SGD steps; client-level DP: the
cohort's aggregate). A client composes only the events it took part in. The ledger
caches the RDP curve of each distinct event once (computed by
`dp_accounting.rdp.RdpAccountant` itself) and keeps per-client sums of RDP curves, so
thousands of clients and rounds cost one NumPy add per client per round. Releases with
unbounded sensitivity are recorded with `record_no_guarantee(reason)` and make that
client's epsilon `inf`.

Epsilon at `delta` is `dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon` on the
summed curve, i.e. exactly what an `RdpAccountant` composing the same events returns.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Optional, Sequence

import attr
import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np

# Integer orders 2..64 (the Adap DP-FL / tensorflow-privacy habit) plus the library's
# default orders (fractional orders near 1 and large orders).
DEFAULT_ORDERS: tuple[float, ...] = tuple(sorted(
    set(float(o) for o in range(2, 65)) |
    set(float(o) for o in rdp_privacy_accountant.DEFAULT_RDP_ORDERS)))

# The integer orders alone: what Adap DP-FL's eq. 10 (and tensorflow-privacy's habit) uses.
INTEGER_ORDERS: tuple[float, ...] = tuple(float(o) for o in range(2, 65))

SAMPLE_LEVEL = 'sample-level'
CLIENT_LEVEL = 'client-level'


def check_delta(delta: float) -> float:
  if not 0.0 < delta < 1.0:
    raise ValueError(f'delta must be in (0, 1). Found {delta}.')
  return float(delta)


def subsampled_gaussian_event(noise_multiplier: float, sampling_rate: float,
                              steps: int = 1) -> dp_accounting.DpEvent:
  """`steps` Poisson-subsampled Gaussian releases (DP-SGD steps or DP-FedAvg rounds).

  Args:
    noise_multiplier: sigma (noise std / sensitivity), `>= 0`.
    sampling_rate: q in `[0, 1]`; `1` means no subsampling.
    steps: Number of compositions.

  Returns:
    A `dp_accounting.DpEvent`.
  """
  if noise_multiplier < 0:
    raise ValueError(f'noise_multiplier must be >= 0. Found {noise_multiplier}.')
  if not 0.0 <= sampling_rate <= 1.0:
    raise ValueError(f'sampling_rate must be in [0, 1]. Found {sampling_rate}.')
  if noise_multiplier == 0:
    event: dp_accounting.DpEvent = dp_accounting.NonPrivateDpEvent()
  elif sampling_rate == 1.0:
    event = dp_accounting.GaussianDpEvent(noise_multiplier)
  else:
    event = dp_accounting.PoissonSampledDpEvent(
        sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier))
  return event if steps == 1 else dp_accounting.SelfComposedDpEvent(event, steps)


@dataclasses.dataclass(frozen=True)
class DistributedDiscreteGaussianDpEvent(dp_accounting.DpEvent):
  """One sum of `n` clients' discretised, rotated vectors, each with its own discrete
  Gaussian noise share (DDGauss: Kairouz, Liu & Steinke 2021, Algorithms 1-2).

  dp_accounting has no event for it: the RDP curve is the paper's. The sum of `n`
  independent discrete Gaussians of variance `s^2` each is `tau`-close to one of
  variance `n s^2` (their Theorem 1, `tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k+1))`),
  and the discrete Gaussian mechanism with that slack satisfies at order `alpha`
  (their Proposition 14, eq. 17), with `sigma = sqrt(n) s`:

      min(alpha D2^2 / (2 sigma^2) + tau d,
          alpha / 2 (D2^2 / sigma^2 + 2 D1 tau / sigma + tau^2 d),
          alpha / 2 (D2 / sigma + tau sqrt(d))^2).

  All quantities are in the scaled, integer domain of the mechanism (what TFF's
  `DistributedDpSumFactory` states in its DP query: `scaled_inflated_l2`,
  `scaled_local_stddev`, `padded_dim`). With `tau -> 0` the curve is the continuous
  Gaussian's, `alpha D2^2 / (2 sigma^2)`.

  Attributes:
    l2_sensitivity: `D2`, the L2 norm bound of one client's scaled, rounded vector.
    local_stddev: `s`, each client's noise share's standard deviation (scaled).
    num_clients: `n`, the number of noise shares in the sum (`>= 1`).
    dim: `d`, the padded dimension of the vector.
    l1_sensitivity: `D1`; default `D2 min(sqrt(d), D2)` (integer vectors: `L1 <= L2^2`).
  """
  l2_sensitivity: float
  local_stddev: float
  num_clients: int
  dim: int
  l1_sensitivity: Optional[float] = None

  def __post_init__(self):
    if self.l2_sensitivity <= 0 or self.local_stddev <= 0:
      raise ValueError('l2_sensitivity and local_stddev must be positive. Found '
                       f'{self.l2_sensitivity}, {self.local_stddev}.')
    if self.num_clients < 1 or self.dim < 1:
      raise ValueError(f'num_clients and dim must be >= 1. Found {self.num_clients}, '
                       f'{self.dim}.')

  @property
  def tau(self) -> float:
    """The slack of Kairouz et al. 2021, Theorem 1."""
    s2 = self.local_stddev ** 2
    return 10.0 * sum(math.exp(-2.0 * math.pi ** 2 * s2 * k / (k + 1))
                      for k in range(1, self.num_clients))

  def rdp(self, orders: Sequence[float]) -> np.ndarray:
    """RDP at each of `orders` (`> 1`), float64 `[len(orders)]`."""
    a = np.asarray(orders, dtype=np.float64)
    sigma = math.sqrt(self.num_clients) * self.local_stddev
    d2, d, tau = self.l2_sensitivity, float(self.dim), self.tau
    d1 = (self.l1_sensitivity if self.l1_sensitivity is not None
          else d2 * min(math.sqrt(d), d2))
    return np.minimum.reduce([
        a * d2 ** 2 / (2 * sigma ** 2) + tau * d,
        a / 2 * (d2 ** 2 / sigma ** 2 + 2 * d1 * tau / sigma + tau ** 2 * d),
        a / 2 * (d2 / sigma + tau * math.sqrt(d)) ** 2])


# RDP -> (epsilon, delta) conversions: dp_accounting's (the tighter one its
# `compute_epsilon` implements) and the classic one of Mironov 2017, Prop. 3,
# `epsilon = min_alpha RDP(alpha) + log(1/delta) / (alpha - 1)`, which some papers'
# theorems use (e.g. AADP-FL's Def. 4).
DP_ACCOUNTING_CONVERSION = 'dp_accounting'
CLASSIC_CONVERSION = 'classic'
CONVERSIONS = (DP_ACCOUNTING_CONVERSION, CLASSIC_CONVERSION)


def _check_conversion(conversion: str) -> str:
  if conversion not in CONVERSIONS:
    raise ValueError(f'conversion must be one of {", ".join(CONVERSIONS)}. '
                     f'Found {conversion!r}.')
  return conversion


def epsilon_from_rdp(orders: Sequence[float], rdp: np.ndarray, delta: float,
                     conversion: str = DP_ACCOUNTING_CONVERSION) -> float:
  """Epsilon at `delta` of an RDP curve.

  Args:
    orders: RDP orders `[k]` (> 1).
    rdp: RDP at each order `[k]`.
    delta: Target delta in `(0, 1)`.
    conversion: `dp_accounting` (its `compute_epsilon`) or `classic`
      (`min RDP + log(1/delta) / (alpha - 1)`, Mironov 2017 Prop. 3).

  Raises:
    ValueError: On an unknown `conversion`.
  """
  _check_conversion(conversion)
  rdp = np.asarray(rdp, dtype=np.float64)
  if np.all(rdp == 0):
    return 0.0
  if np.all(np.isinf(rdp)):
    return math.inf
  if conversion == CLASSIC_CONVERSION:
    orders = np.asarray(orders, dtype=np.float64)
    return float(np.min(rdp + math.log(1.0 / delta) / (orders - 1.0)))
  return float(rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)[0])


class ClassicRdpAccountant(dp_accounting.rdp.RdpAccountant):
  """`dp_accounting`'s `RdpAccountant` with the classic conversion (`epsilon_from_rdp`).

  For calibrating noise the way a paper whose theorem uses Mironov's conversion does
  (`dp_accounting.calibrate_dp_mechanism(lambda: ClassicRdpAccountant(orders), ...)`).
  """

  def get_epsilon(self, target_delta: float) -> float:
    return epsilon_from_rdp(self._orders, self._rdp, target_delta, CLASSIC_CONVERSION)


def _event_values(event) -> tuple:
  """`event` as nested `(class name, field values...)` (None for no guarantee)."""
  if event is None:
    return (None,)
  if dataclasses.is_dataclass(event):   # tffdp's own events (attrs' `has` is inherited)
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
  elif attr.has(type(event)):
    fields = attr.asdict(event, recurse=False)
  else:
    fields = dict(vars(event))
  return (type(event).__name__, *(
      (k, _event_values(v) if isinstance(v, dp_accounting.DpEvent) else v)
      for k, v in sorted(fields.items())))


def _close_values(a, b, rtol: float) -> bool:
  if isinstance(a, tuple) and isinstance(b, tuple):
    return len(a) == len(b) and all(_close_values(x, y, rtol) for x, y in zip(a, b))
  if isinstance(a, (float, np.floating)) and isinstance(b, (int, float, np.number)):
    return math.isclose(float(a), float(b), rel_tol=rtol) or (math.isnan(a) and math.isnan(b))
  return a == b


def releases_differ(declared: Iterable, executed: Iterable, rtol: float = 1e-6
                    ) -> Optional[str]:
  """Where two lists of releases (`(clients, DpEvent or None, reason)`) give some client
  other events, or None when every client has the same events in both.

  Used to check the releases a method declared for a round (before it ran) against those
  its mechanisms state they executed (after it ran). Floats compare to `rtol` (the
  executed values come out of float32 graphs); a release without guarantee matches one
  without guarantee whatever the reasons.

  Args:
    declared, executed: Releases; `clients` int arrays of client ids.
    rtol: Relative tolerance of the events' float parameters.

  Returns:
    A message naming the first client that differs and both of its event lists, or None.
  """
  def by_client(releases):
    out = {}
    for clients, event, _ in releases:
      value = (_event_values(event), event)   # once per release, shared by its clients
      for c in np.asarray(clients).ravel().tolist():
        out.setdefault(c, []).append(value)
    return {c: v if len(v) == 1 else sorted(v, key=lambda pair: repr(pair[0]))
            for c, v in out.items()}

  a, b = by_client(declared), by_client(executed)
  same = {}   # clients with the same release objects compare once
  for c in sorted(set(a) | set(b)):
    x, y = a.get(c, []), b.get(c, [])
    key = (tuple(map(id, x)), tuple(map(id, y)))
    if key not in same:
      same[key] = _close_values(tuple(v for v, _ in x), tuple(v for v, _ in y), rtol)
    if not same[key]:
      return (f'client {c}: declared {[e for _, e in x]}, executed {[e for _, e in y]} '
              '(None: no guarantee)')
  return None


@dataclasses.dataclass
class PrivacyReport:
  """Epsilon of a ledger at `delta`: per client, max and mean, and the reasons for `inf`."""
  per_client: np.ndarray
  delta: float
  unit: str
  reasons: list[str]

  @property
  def max(self) -> float:
    return float(np.max(self.per_client)) if self.per_client.size else 0.0

  @property
  def mean(self) -> float:
    return float(np.mean(self.per_client)) if self.per_client.size else 0.0


class PrivacyLedger:
  """Composes heterogeneous DP events per client.

  Args:
    num_clients: Number of clients (ids `0 … num_clients - 1`).
    delta: Target delta in `(0, 1)`.
    unit: `sample-level` or `client-level`.
    orders: RDP orders; default `DEFAULT_ORDERS`.
    conversion: RDP to epsilon conversion (`epsilon_from_rdp`); default dp_accounting's.

  Raises:
    ValueError: On a non-positive `num_clients`, `delta` outside `(0, 1)` or an unknown
      `conversion`.
  """

  def __init__(self, num_clients: int, delta: float, unit: str = SAMPLE_LEVEL,
               orders: Optional[Sequence[float]] = None,
               conversion: str = DP_ACCOUNTING_CONVERSION):
    if num_clients <= 0:
      raise ValueError(f'num_clients must be positive. Found {num_clients}.')
    self.num_clients = int(num_clients)
    self.delta = check_delta(delta)
    self.unit = unit
    self.conversion = _check_conversion(conversion)
    self.orders = np.asarray(orders if orders is not None else DEFAULT_ORDERS,
                             dtype=np.float64)
    self._rdp = np.zeros((self.num_clients, len(self.orders)))
    self._reasons: dict[int, str] = {}
    self._cache: dict[str, np.ndarray] = {}
    self.num_events = 0

  def event_rdp(self, event: dp_accounting.DpEvent) -> np.ndarray:
    """RDP curve of one event at `self.orders`, computed by `RdpAccountant` (a
    `DistributedDiscreteGaussianDpEvent`: its own `rdp`)."""
    key = repr(event)
    if key not in self._cache and isinstance(event, DistributedDiscreteGaussianDpEvent):
      self._cache[key] = event.rdp(self.orders)  # the paper's curve (no dp_accounting event)
    if key not in self._cache:
      acc = dp_accounting.rdp.RdpAccountant(list(self.orders))
      acc.compose(event)
      self._cache[key] = acc.rdp
    return self._cache[key]

  def record(self, clients: Iterable[int], event: dp_accounting.DpEvent) -> None:
    """Composes `event` into the ledger of every client in `clients`.

    Raises:
      dp_accounting.UnsupportedEventError: If the RDP accountant cannot handle it.
      IndexError: If a client id is out of range.
    """
    idx = np.fromiter(clients, dtype=np.int64)
    if idx.size == 0:
      return
    self._rdp[idx] += self.event_rdp(event)
    self.num_events += 1

  def record_no_guarantee(self, clients: Iterable[int], reason: str) -> None:
    """Marks clients whose data went into a release of unbounded sensitivity."""
    for c in clients:
      self._rdp[int(c)] = np.inf
      self._reasons.setdefault(int(c), reason)

  def rdp(self, client: int) -> np.ndarray:
    return self._rdp[client].copy()

  def epsilon(self, client: int, delta: Optional[float] = None) -> float:
    return epsilon_from_rdp(self.orders, self._rdp[client], delta or self.delta,
                            self.conversion)

  def report(self, delta: Optional[float] = None) -> PrivacyReport:
    """Epsilon of every client at `delta` (default: the ledger's)."""
    d = delta or self.delta
    # Clients with identical curves (e.g. never sampled) share one conversion.
    uniq, inverse = np.unique(self._rdp, axis=0, return_inverse=True)
    eps = np.array([epsilon_from_rdp(self.orders, r, d, self.conversion)
                    for r in uniq])[inverse.ravel()]
    return PrivacyReport(eps, d, self.unit, sorted(set(self._reasons.values())))

  def epsilon_if(self, clients: Iterable[int], event: dp_accounting.DpEvent) -> np.ndarray:
    """Epsilon each of `clients` would have after also composing `event` (no change)."""
    add = self.event_rdp(event)
    return np.array([epsilon_from_rdp(self.orders, self._rdp[c] + add, self.delta,
                                     self.conversion)
                     for c in clients])

  def rounds_within(self, clients: Iterable[int], event: dp_accounting.DpEvent,
                    budget: float, limit: int = 10**7) -> np.ndarray:
    """How many more times each of `clients` can compose `event` within `budget`.

    The largest `T <= limit` with epsilon(RDP + T * RDP(event)) <= `budget` at the
    ledger's delta, found by doubling and bisection (epsilon grows with `T`). The runner
    uses it for the ETA of budget-stopped runs: rounds left at the current per-round cost.

    Args:
      clients: Client ids.
      event: The DP event of one further release.
      budget: Epsilon budget (> 0).
      limit: Cap on `T` (a release of zero cost, e.g. `NoOpDpEvent`, returns it; a
        non-private one, 0).

    Returns:
      An int64 array of `T` per client (0 where the budget is already spent).
    """
    add = self.event_rdp(event)
    def within(c, t):
      curve = self._rdp[c] + t * add if t else self._rdp[c]  # 0 * inf (non-private) is NaN
      return epsilon_from_rdp(self.orders, curve, self.delta, self.conversion) <= budget
    out = []
    for c in clients:
      if not within(c, 0):
        out.append(0)
        continue
      hi = 1
      while hi < limit and within(c, hi):
        hi = min(2 * hi, limit)
      if within(c, hi):
        out.append(hi)
        continue
      lo = hi // 2  # within(lo), not within(hi)
      while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if within(c, mid) else (lo, mid)
      out.append(lo)
    return np.asarray(out, dtype=np.int64)

  def state_dict(self) -> dict:
    return {'rdp': self._rdp.copy(), 'reasons': dict(self._reasons),
            'num_events': self.num_events, 'orders': self.orders.copy()}

  def load_state_dict(self, state: dict) -> None:
    if not np.array_equal(state['orders'], self.orders):
      raise ValueError('Checkpointed ledger uses different RDP orders.')
    self._rdp = np.array(state['rdp'], dtype=np.float64)
    self._reasons = {int(k): v for k, v in state['reasons'].items()}
    self.num_events = int(state['num_events'])


def calibrate_noise_multiplier(target_epsilon: float, delta: float, sampling_rate: float,
                               steps: int,
                               orders: Optional[Sequence[float]] = None,
                               conversion: str = DP_ACCOUNTING_CONVERSION) -> float:
  """Smallest noise multiplier whose `steps` subsampled Gaussian releases meet epsilon.

  Uses `dp_accounting.calibrate_dp_mechanism` with the RDP accountant.

  Args:
    target_epsilon: Target epsilon, `> 0`.
    delta: Target delta in `(0, 1)`.
    sampling_rate: q in `(0, 1]`.
    steps: Number of releases, `>= 1`.
    orders: RDP orders; default `DEFAULT_ORDERS`.
    conversion: RDP to epsilon conversion (`epsilon_from_rdp`): `dp_accounting`
      (`RdpAccountant`) or `classic` (`ClassicRdpAccountant`).

  Returns:
    sigma (float) such that epsilon(sigma) <= target_epsilon (tolerance 1e-4 in sigma).

  Raises:
    ValueError: On invalid arguments.
  """
  if target_epsilon <= 0:
    raise ValueError(f'target_epsilon must be positive. Found {target_epsilon}.')
  check_delta(delta)
  if steps < 1:
    raise ValueError(f'steps must be >= 1. Found {steps}.')
  if not 0.0 < sampling_rate <= 1.0:
    raise ValueError(f'sampling_rate must be in (0, 1]. Found {sampling_rate}.')
  orders = list(orders if orders is not None else DEFAULT_ORDERS)
  accountant = (ClassicRdpAccountant if _check_conversion(conversion) == CLASSIC_CONVERSION
                else dp_accounting.rdp.RdpAccountant)
  return float(dp_accounting.calibrate_dp_mechanism(
      lambda: accountant(orders),
      lambda s: subsampled_gaussian_event(s, sampling_rate, steps),
      target_epsilon, delta,
      dp_accounting.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-4))


# ----- pure-DP (Laplace) releases -----------------------------------------------------

BASIC_COMPOSITION = 'basic'
BEST_COMPOSITION = 'best'
COMPOSITIONS = (BASIC_COMPOSITION, BEST_COMPOSITION)


_PLD_FAILED = object()  # a client whose PLD bound dp_accounting could not compute


class LaplaceLedger:
  """Composes per-client Laplace releases (`dp_accounting.LaplaceDpEvent`s).

  For methods whose uploads are Laplace mechanisms with a per-client, per-round budget
  `epsilon'` (cosAFed and its baselines, `../shared/papers/002_...`, formula 7). An
  event `LaplaceDpEvent(b)` (noise scale over L1 sensitivity) is `1/b`-DP.

  `composition='basic'` reports the pure-DP sum of a client's `epsilon'` (basic
  composition: the paper's own count, `delta`-free). `composition='best'` reports, per
  client, the smallest of three valid bounds on the same events: the basic sum,
  `dp_accounting`'s RDP accountant (`RdpAccountant`, at `orders`) and its PLD accountant
  (`pld.PLDAccountant`, pessimistic discretisation; interval `1e-4 * max(1, epsilon'
  of the client's first event)`, so large budgets stay cheap). One `Laplace(1)` event:
  basic 1, RDP 1.0035, PLD 0.99 (delta 1e-5); 100 events of `Laplace(10)`: 10, 4.73, 4.22.

  Same interface as `PrivacyLedger` (`record`, `record_no_guarantee`, `report`,
  `epsilon_if`, `rounds_within`, `state_dict`, `load_state_dict`).

  Args:
    num_clients: Number of clients.
    delta: Target delta in `(0, 1)` (RDP and PLD bounds; basic composition has none).
    unit: DP unit (`sample-level` or `client-level`).
    composition: `basic` or `best`.
    orders: RDP orders of the RDP bound; default `DEFAULT_ORDERS`.

  Raises:
    ValueError: On invalid arguments.
  """

  def __init__(self, num_clients: int, delta: float, unit: str = CLIENT_LEVEL,
               composition: str = BEST_COMPOSITION,
               orders: Optional[Sequence[float]] = None):
    if composition not in COMPOSITIONS:
      raise ValueError(f'composition must be one of {", ".join(COMPOSITIONS)}. '
                       f'Found {composition!r}.')
    self.composition = composition
    self._rdp = PrivacyLedger(num_clients, delta, unit, orders)
    self.num_clients, self.delta, self.unit = self._rdp.num_clients, self._rdp.delta, unit
    self.orders = self._rdp.orders
    self._events: list[list[float]] = [[] for _ in range(self.num_clients)]
    self._pure = np.zeros(self.num_clients)
    self._pld: dict[int, tuple[int, Any]] = {}  # client -> (events composed, accountant)
    self._best: dict[int, tuple[int, float]] = {}  # client -> (events, epsilon)
    self.num_events = 0

  @staticmethod
  def _epsilon_of(event: dp_accounting.DpEvent) -> float:
    if not isinstance(event, dp_accounting.LaplaceDpEvent):
      raise dp_accounting.UnsupportedEventError(
          f'LaplaceLedger composes LaplaceDpEvents only. Found {event!r}.')
    if event.noise_multiplier <= 0:
      raise ValueError(f'Laplace noise multiplier must be positive. Found {event!r}.')
    return 1.0 / float(event.noise_multiplier)

  def record(self, clients: Iterable[int], event: dp_accounting.DpEvent) -> None:
    """Composes `event` (a `LaplaceDpEvent`) into each of `clients`' ledgers."""
    idx = np.fromiter(clients, dtype=np.int64)
    if idx.size == 0:
      return
    eps = self._epsilon_of(event)
    self._rdp.record(idx, event)
    self._pure[idx] += eps
    for c in idx:
      self._events[int(c)].append(eps)
    self.num_events += 1

  def record_no_guarantee(self, clients: Iterable[int], reason: str) -> None:
    """Marks clients whose data went into a release of unbounded sensitivity."""
    idx = np.fromiter(clients, dtype=np.int64)
    self._rdp.record_no_guarantee(idx, reason)
    self._pure[idx] = np.inf

  def _pld_epsilon(self, client: int, delta: float) -> float:
    events = self._events[client]
    done, acc = self._pld.get(client, (0, None))
    if acc is _PLD_FAILED:
      return math.inf
    if acc is None:
      acc = dp_accounting.pld.PLDAccountant(
          value_discretization_interval=1e-4 * max(1.0, events[0]))
    try:
      for eps in events[done:]:
        acc.compose(dp_accounting.LaplaceDpEvent(1.0 / eps))
      # At large epsilons the PLD's smallest masses underflow and dp_accounting's
      # conversion overflows to inf (no bound from PLD: the other two remain).
      with np.errstate(over='ignore', divide='ignore', invalid='ignore'):
        eps = float(acc.get_epsilon(delta))
    except ValueError:
      # dp_accounting's PLD construction rejects some Laplace parameters at this
      # discretisation ("deltas are not in non-increasing order"): no bound from PLD
      # for this client; the other two remain.
      self._pld[client] = (len(events), _PLD_FAILED)
      return math.inf
    self._pld[client] = (len(events), acc)
    return eps if not math.isnan(eps) else math.inf

  def epsilon(self, client: int, delta: Optional[float] = None) -> float:
    """Client `client`'s epsilon under this ledger's composition."""
    c = int(client)
    pure = float(self._pure[c])
    if self.composition == BASIC_COMPOSITION or math.isinf(pure) or pure == 0:
      return pure
    d = delta or self.delta
    if d == self.delta and self._best.get(c, (-1,))[0] == len(self._events[c]):
      return self._best[c][1]
    best = min(pure, self._rdp.epsilon(c, d), self._pld_epsilon(c, d))
    if d == self.delta:
      self._best[c] = (len(self._events[c]), best)
    return best

  def report(self, delta: Optional[float] = None) -> PrivacyReport:
    """Epsilon of every client at `delta` (default: the ledger's; unused by `basic`)."""
    d = delta or self.delta
    eps = np.array([self.epsilon(c, d) for c in range(self.num_clients)])
    return PrivacyReport(eps, d, self.unit, self._rdp.report(d).reasons)

  def epsilon_if(self, clients: Iterable[int], event: dp_accounting.DpEvent) -> np.ndarray:
    """Epsilon each of `clients` would have after also composing `event` (an upper
    bound for `best`: the basic sum and the RDP bound, without PLD)."""
    eps = self._epsilon_of(event)
    clients = list(clients)
    pure = self._pure[clients] + eps
    if self.composition == BASIC_COMPOSITION:
      return pure
    return np.minimum(pure, self._rdp.epsilon_if(clients, event))

  def rounds_within(self, clients: Iterable[int], event: dp_accounting.DpEvent,
                    budget: float, limit: int = 10**7) -> np.ndarray:
    """How many more `event`s each client can take within `budget` (basic composition:
    exact; `best`: at least this many)."""
    eps = self._epsilon_of(event)
    left = np.floor((budget - self._pure[list(clients)]) / eps)
    return np.clip(np.nan_to_num(left, neginf=0), 0, limit).astype(np.int64)

  def state_dict(self) -> dict:
    return {'rdp': self._rdp.state_dict(), 'events': [list(e) for e in self._events],
            'pure': self._pure.copy(), 'num_events': self.num_events,
            'composition': self.composition}

  def load_state_dict(self, state: dict) -> None:
    if state.get('composition') != self.composition:
      raise ValueError(f'Checkpointed ledger uses {state.get("composition")!r} '
                       f'composition, not {self.composition!r}.')
    self._rdp.load_state_dict(state['rdp'])
    self._events = [list(map(float, e)) for e in state['events']]
    self._pure = np.array(state['pure'], dtype=np.float64)
    self.num_events = int(state['num_events'])
    self._pld, self._best = {}, {}
