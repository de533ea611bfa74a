"""Calibrating a run's privacy knob to a target `epsilon_guaranteed`, from its DP events.

A dry run (`DryRun`) builds a run's method as `tffdp.runner` does and composes, round by
round, the DP events its `Accounting.guaranteed` states for the seeded cohort of each round
(`runner.select_cohort`, or the method's own cohort), without training anything. Where a
method's events do not depend on training (fixed noise multipliers: DP-FedAvg, DPFL,
DP-SCAFFOLD, DDGauss, Adap DP-FL with constant noise and clipping norm, LapFed, the
DP-FedAGS family with every coordinate noised), the epsilon it reports after `T` rounds
is the run's final `epsilon_guaranteed`; `calibrate` then bisects the noise knob until it
lands within a relative tolerance below a target (issue 41's matched-epsilon benchmark).

Two knobs: `noise_multiplier` (a `RunConfig` field; epsilon falls as it grows) and a
method option named `epsilon` (the per-round budget of the Laplace and DP-FedAGS
families; epsilon grows with it). Where every event is a Gaussian or Laplace mechanism
whose noise multiplier is proportional to the knob (or to its inverse), one dry run
suffices: the events are rescaled (`scale_noise`) and recomposed for each trial value
(checked against a second dry run at twice the knob). Otherwise (DDGauss's discrete
Gaussian, whose scaled domain depends on the noise; the DP-FedAGS family, whose eq. 2
noise multiplier is `sqrt(2 (ln 1.25 + epsilon)) / epsilon` times the sensitivity) the
dry run is rebuilt at each trial value.

Methods whose events are known only after each round from what it did
(`Accounting.releases_from_round` without `fixed_round_metrics`: cosAFed, ADPFL, cosFed)
cannot be calibrated this way; nor can those whose events change with training (A-DPFL,
AADP-FL, Adap DP-FL with decaying noise), whose dry run would compose the initial
state's events: run those with `--epsilon-budget`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional

import dp_accounting
import numpy as np

from tffdp import config as config_lib
from tffdp import runner, runtime

KNOBS = ('noise_multiplier', 'epsilon')


def scale_noise(event: dp_accounting.DpEvent, factor: float) -> dp_accounting.DpEvent:
  """`event` with the noise multiplier of every Gaussian and Laplace mechanism in it
  multiplied by `factor` (> 0); sampling rates and counts unchanged.

  Raises:
    ValueError: If `event` holds a mechanism whose noise does not scale this way.
  """
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return dp_accounting.GaussianDpEvent(event.noise_multiplier * factor)
  if isinstance(event, dp_accounting.LaplaceDpEvent):
    return dp_accounting.LaplaceDpEvent(event.noise_multiplier * factor)
  if isinstance(event, dp_accounting.PoissonSampledDpEvent):
    return dp_accounting.PoissonSampledDpEvent(event.sampling_probability,
                                               scale_noise(event.event, factor))
  if isinstance(event, dp_accounting.SampledWithoutReplacementDpEvent):
    return dp_accounting.SampledWithoutReplacementDpEvent(
        event.source_dataset_size, event.sample_size, scale_noise(event.event, factor))
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    return dp_accounting.SelfComposedDpEvent(scale_noise(event.event, factor), event.count)
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return dp_accounting.ComposedDpEvent([scale_noise(e, factor) for e in event.events])
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return event
  raise ValueError(f'cannot rescale the noise of {type(event).__name__}')


def knob_value(config: config_lib.RunConfig, knob: str) -> float:
  """The current value of `knob` in `config`.

  Raises:
    ValueError: If `knob` is not one of `KNOBS` or the method has no such option.
  """
  if knob == 'noise_multiplier':
    return float(config.noise_multiplier)
  if knob == 'epsilon':
    if 'epsilon' not in config_lib.method_defaults(config.method, config.dataset):
      raise ValueError(f'{config.method} has no epsilon option to calibrate')
    return float(config.resolved().method_options['epsilon'])
  raise ValueError(f'knob must be one of {", ".join(KNOBS)}. Found {knob!r}.')


def with_knob(config: config_lib.RunConfig, knob: str, value: float) -> config_lib.RunConfig:
  """A copy of `config` with `knob` set to `value`."""
  if knob == 'noise_multiplier':
    return dataclasses.replace(config, noise_multiplier=float(value))
  knob_value(config, knob)  # validates
  options = dict(config.method_options, epsilon=float(value))
  defaults = config_lib.method_defaults(config.method, config.dataset)
  if 'epsilon_max' in defaults:  # AADP-FL: a budget may not start above its cap
    cap = options.get('epsilon_max', defaults['epsilon_max'])
    options['epsilon_max'] = max(float(cap), float(value))
  return dataclasses.replace(config, method_options=options)


class DryRun:
  """The DP events a run's guaranteed ledger would compose, without training.

  Args:
    config: The run (`RunConfig`; its `rounds`, cohort, seed and method settings).
    log: Progress sink of the build.

  Raises:
    ValueError: If the method's events are known only after each round, or it holds
      canary clients.
  """

  def __init__(self, config: config_lib.RunConfig, log: Callable[[str], None] = lambda s: None):
    if config.audit_canaries:
      raise ValueError('a dry run has no canaries; set audit_canaries=0')
    # Building the method runs TFF computations: on tffdp's local context, as a run does,
    # never TFF's default one (its worker is unconfined and outlives this process).
    runtime.ensure_local_context()
    self.config = config.resolved()
    exp = runner.build_experiment(self.config, log=log)
    self.method = method = exp.method
    acc = method.accounting
    after = acc.releases_from_round is not None
    if after and acc.fixed_round_metrics is None:
      raise ValueError(f'{method.name} states its DP events only after each round, from '
                       'what the round did (Accounting.releases_from_round): it cannot be '
                       'calibrated dry')
    state = method.initialize()
    self.releases = []
    for r in range(self.config.rounds):
      cohort = (method.select_cohort(r) if method.select_cohort is not None
                else runner.select_cohort(self.config, r))
      self.releases.append(
          acc.releases_from_round(cohort, state, acc.fixed_round_metrics(cohort))[1]
          if after else acc.guaranteed(cohort, state))

  def epsilon(self, factor: float = 1.0) -> float:
    """The largest `epsilon_guaranteed` over clients after every round, with each event's
    noise multiplier times `factor` (`scale_noise`); inf where a release has none."""
    _, ledger = runner.new_ledgers(self.config, self.method, self.config.clients)
    for releases in self.releases:
      runner.apply_releases(ledger, releases if factor == 1.0 else [
          (c, e if e is None else scale_noise(e, factor), r) for c, e, r in releases])
    return ledger.report().max

  def scalable(self) -> bool:
    """Whether every event rescales with `scale_noise`."""
    try:
      for releases in self.releases:
        for _, event, _ in releases:
          if event is not None:
            scale_noise(event, 2.0)
    except ValueError:
      return False
    return True


@dataclasses.dataclass
class Calibration:
  """The result of `calibrate`.

  Attributes:
    knob: `noise_multiplier` or `epsilon`.
    value: The calibrated knob value.
    epsilon: The dry run's `epsilon_guaranteed` at `value` (within the tolerance below
      the target).
    target: The target epsilon.
    trials: Dry-run evaluations made.
    rescaled: Whether one dry run was rescaled (True) or rebuilt per trial.
  """
  knob: str
  value: float
  epsilon: float
  target: float
  trials: int
  rescaled: bool


def calibrate(config: config_lib.RunConfig, target: float, knob: str = 'noise_multiplier',
              rtol: float = 0.02, max_trials: int = 40,
              log: Callable[[str], None] = lambda s: None) -> Calibration:
  """The knob value whose dry-run `epsilon_guaranteed` is in `[target (1 - rtol), target]`.

  Secant search on the logarithms of knob and epsilon, safeguarded by bisection once the
  target is bracketed, starting from the knob's value in `config` (typically 3-6 dry
  runs).

  Args:
    config: The run. Its knob value is the starting point and must be positive.
    target: Target epsilon (> 0) at the run's delta, after its `rounds`.
    knob: `noise_multiplier` or `epsilon` (a method option).
    rtol: Relative tolerance below the target (issue 41: 0.02).
    max_trials: Dry-run evaluations allowed.
    log: Progress sink.

  Returns:
    A `Calibration`.

  Raises:
    ValueError: On a non-positive target or knob, a method that cannot be run dry
      (`DryRun`), epsilon infinite at the start, or no run that builds at the start.
      A trial value at which no run builds (out of the method's range) is logged and
      the search steps back toward the last value that built.
    RuntimeError: If no value lands within the tolerance in `max_trials`.
  """
  if not target > 0 or not 0 < rtol < 1:
    raise ValueError(f'target must be > 0 and rtol in (0, 1). Found {target}, {rtol}.')
  ref = knob_value(config, knob)
  if not ref > 0:
    raise ValueError(f'{knob} must be positive to start from. Found {ref}.')
  dry = DryRun(with_knob(config, knob, ref))
  # A start already inside the band (a value found for a like run) needs no search.
  start = dry.epsilon()
  if target * (1 - rtol) <= start <= target * (1 - 1e-6):
    return Calibration(knob, ref, start, target, 1, False)
  # Rescaling is exact only where every noise multiplier is proportional to the knob (or
  # its inverse): checked against a second dry run at twice the knob.
  increasing = knob == 'epsilon'  # epsilon grows with the budget, falls with the noise
  rescaled = False
  if dry.scalable():
    double = DryRun(with_knob(config, knob, 2 * ref)).epsilon()
    rescaled = math.isclose(dry.epsilon(0.5 if increasing else 2.0), double, rel_tol=1e-6)
  trials = 0

  def epsilon_at(value: float) -> Optional[float]:
    nonlocal trials
    trials += 1
    if value == ref:  # the start, evaluated already
      eps = start
    elif rescaled:  # noise multipliers scale with the knob (or its inverse)
      eps = dry.epsilon(ref / value if increasing else value / ref)
    else:
      try:
        eps = DryRun(with_knob(config, knob, value)).epsilon()
      except Exception as e:  # pylint: disable=broad-except
        # Out of the method's range (e.g. AADP-FL's Theorem 1 cannot calibrate a budget
        # below about 0.05): the search steps back toward the last value that built.
        log(f'calibrate {config.method}: {knob} {value:.6g} -> no run ({type(e).__name__}: '
            f'{e})')
        return None
    log(f'calibrate {config.method}: {knob} {value:.6g} -> epsilon_guaranteed {eps:.6g}')
    return eps

  # Secant steps on log epsilon against log knob (epsilon is close to a power of the
  # noise), kept inside the bracket once there is one, with bisection where a secant
  # step would not shrink it; aimed at the middle of the accepted band.
  aim = math.log(target * (1 - rtol / 2))
  lo = hi = None  # (log knob, log epsilon) with epsilon below / above the target
  x, prev, good, failure = math.log(ref), None, None, None
  while trials < max_trials:
    eps = epsilon_at(math.exp(x))
    if eps is None:  # no run at this value: halfway back to the last one that built
      if good is None:
        raise ValueError(f'{config.method}: no run can be built at {knob}={math.exp(x):.6g}')
      failure, x = x, (x + good) / 2
      continue
    good = x
    if math.isinf(eps) and trials == 1:
      raise ValueError(f'{config.method}: epsilon_guaranteed is inf at {knob}={ref}; '
                       'nothing to calibrate')
    # Just inside the target: the run's own ledger may differ from the rescaled dry run
    # by float64 round-off (1e-8 relative).
    if target * (1 - rtol) <= eps <= target * (1 - 1e-6):
      return Calibration(knob, math.exp(x), eps, target, trials, rescaled)
    y = math.log(eps) if 0 < eps < math.inf else (-50.0 if eps <= 0 else 50.0)
    if eps < target:
      lo = (x, y)
    else:
      hi = (x, y)
    # The slope of log epsilon in log knob: from the last two points, else about -1
    # (Gaussian noise) or +1 (a per-round budget).
    slope = (y - prev[1]) / (x - prev[0]) if prev and x != prev[0] else (
        1.0 if increasing else -1.0)
    if not slope or (slope > 0) != increasing:
      slope = 1.0 if increasing else -1.0
    prev = (x, y)
    step = x + (aim - y) / slope
    if lo and hi:
      left, right = sorted((lo[0], hi[0]))
      width = right - left
      if not left + 0.05 * width < step < right - 0.05 * width:
        step = (left + right) / 2
    elif abs(step - x) > 5:  # no bracket yet: at most e^5 per step
      step = x + math.copysign(5.0, step - x)
    if failure is not None and (step - x) * (failure - x) > 0 and \
        abs(step - x) >= abs(failure - x):
      step = (x + failure) / 2  # not past a value that did not build
    x = step
  raise RuntimeError(f'{config.method}: no {knob} within {rtol:.0%} below epsilon {target} '
                     f'in {max_trials} trials')
