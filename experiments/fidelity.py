"""The fidelity table of a paper's report: each paper number against the runs, and counts.

A report lists the numbers it attempted (`PaperNumber`: the paper's value, the value under
tffdp's default reading of the spec, and the value under the best other reading that was
run) and the paper's claims (`Claim`), and `section` renders them with the counts a reader
checks first: how many numbers are within tolerance under the default reading and under
the best reading run, and how many claims reproduce. Every miss names its cause and the
committed run behind it, or says that no controlled cause is known yet.

Tolerances (`TOLERANCE`): 1.5 points for accuracies (in %), 5% relative for budgets,
noise multipliers and round counts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

# kind -> (rule, tolerance): `abs` in the value's own unit, `rel` as a fraction of the
# paper's value.
TOLERANCE = {'accuracy': ('abs', 1.5), 'budget': ('rel', 0.05), 'sigma': ('rel', 0.05),
             'rounds': ('rel', 0.05)}
NO_CAUSE = 'no controlled cause yet'
VERDICTS = ('reproduced', 'not reproduced', 'tie', 'not run')


def within(kind: str, paper: float, value: Optional[float]) -> Optional[bool]:
  """Whether `value` is within `kind`'s tolerance of `paper` (None: `value` not run).

  Raises:
    ValueError: On an unknown `kind`.
  """
  if kind not in TOLERANCE:
    raise ValueError(f'kind must be one of {", ".join(TOLERANCE)}. Found {kind!r}.')
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return None
  rule, tol = TOLERANCE[kind]
  gap = abs(value - paper)
  return gap <= tol + 1e-9 if rule == 'abs' else gap <= tol * abs(paper) + 1e-12


@dataclasses.dataclass(frozen=True)
class PaperNumber:
  """One number the paper prints and what the runs give for it.

  Attributes:
    what: The artefact and cell, e.g. `Table IV, MNIST, epsilon 0.1, DP-FedAvg`.
    kind: A key of `TOLERANCE`.
    paper: The paper's value (accuracies in %).
    default: The value under tffdp's default reading (the spec with its Amendments), or
      None where that run does not exist.
    best: The value under the best other reading run (None: none run).
    best_reading: That reading's name.
    cause: For a miss under both readings, its cause and the committed run or section
      behind it (default `NO_CAUSE`).
  """
  what: str
  kind: str
  paper: float
  default: Optional[float]
  best: Optional[float] = None
  best_reading: str = ''
  cause: str = NO_CAUSE

  @property
  def default_within(self) -> Optional[bool]:
    return within(self.kind, self.paper, self.default)

  @property
  def best_within(self) -> Optional[bool]:
    """Within tolerance under the default or the best other reading."""
    marks = [m for m in (self.default_within, within(self.kind, self.paper, self.best))
             if m is not None]
    return any(marks) if marks else None


@dataclasses.dataclass(frozen=True)
class Claim:
  """One claim of the paper (an ordering, a trend, a bound) and the runs' verdict.

  Attributes:
    text: The claim, as the paper states it.
    verdict: One of `VERDICTS` (`tie`: the runs' difference is within the seed spread).
    evidence: The numbers and the committed runs behind the verdict.
  """
  text: str
  verdict: str
  evidence: str

  def __post_init__(self):
    if self.verdict not in VERDICTS:
      raise ValueError(f'verdict must be one of {", ".join(VERDICTS)}. Found {self.verdict!r}.')


def above(a, b) -> str:
  """The verdict on a claim "`a` above `b`" from two `experiments.common.SeedSpread`s:
  reproduced or not only when every seed of one is above every seed of the other (at
  least `common.MIN_SEEDS` seeds each), else a tie."""
  return 'reproduced' if a.beats(b) else 'not reproduced' if b.beats(a) else 'tie'


def margin_verdict(margins, spread: Optional[float]) -> str:
  """A claim's verdict from its margins, one run each: the points by which the side the
  paper puts ahead is ahead, one per comparison the claim makes.

  Args:
    margins: Floats, in points (positive: the paper's way round).
    spread: The gap one run per configuration cannot resolve (a measured seed or
      run-to-run spread, or an assumed resolution), in points; None where none is known.

  Returns:
    `reproduced` when every margin exceeds `spread`, `not reproduced` when one falls
    below `-spread`, `tie` otherwise and whenever `spread` is None.
  """
  if spread is None:
    return 'tie'
  if any(m < -spread for m in margins):
    return 'not reproduced'
  return 'reproduced' if all(m > spread for m in margins) else 'tie'


def _mark(m: Optional[bool]) -> str:
  return 'not run' if m is None else 'yes' if m else 'no'


def format_value(v: Optional[float], kind: str = '') -> str:
  """`v` to 6 significant digits; a measured accuracy (percent) to 2 decimals."""
  return '-' if v is None else f'{v:.2f}' if kind == 'accuracy' else f'{v:.6g}'


def counts(numbers: list[PaperNumber], claims: list[Claim]) -> dict:
  """`numbers`, `default_within`, `best_within`, `claims`, `reproduced`, `uncaused`
  (misses under both readings with no controlled cause)."""
  return dict(
      numbers=len(numbers),
      default_within=sum(bool(n.default_within) for n in numbers),
      best_within=sum(bool(n.best_within) for n in numbers),
      claims=len(claims), reproduced=sum(c.verdict == 'reproduced' for c in claims),
      uncaused=sum(n.best_within is False and n.cause == NO_CAUSE for n in numbers))


def section(numbers: list[PaperNumber], claims: list[Claim]) -> list[str]:
  """Markdown lines: the counts, the numbers' table and the claims' table."""
  c = counts(numbers, claims)
  out = [f'**{c["default_within"]} of {c["numbers"]} paper numbers within tolerance under '
         f'tffdp\'s default reading, {c["best_within"]} under the best reading run; '
         f'{c["reproduced"]} of {c["claims"]} claims reproduced.** Tolerance: 1.5 points '
         'for accuracies, 5% relative for budgets, noise multipliers and round counts. '
         f'Misses without a controlled cause: {c["uncaused"]}.', '']
  if numbers:
    out += ['| number | paper | default reading | within | best reading run | value | '
            'within | cause of a miss |', '|---|---|---|---|---|---|---|---|']
    for n in numbers:
      miss = n.best_within is False
      out.append(f'| {n.what} | {format_value(n.paper)} | {format_value(n.default, n.kind)} | '
                 f'{_mark(n.default_within)} | {n.best_reading or "-"} | '
                 f'{format_value(n.best, n.kind)} | '
                 f'{_mark(n.best_within)} | {n.cause if miss else ""} |')
  if claims:
    out += ['', '| claim | verdict | evidence |', '|---|---|---|']
    out += [f'| {cl.text} | {cl.verdict} | {cl.evidence} |' for cl in claims]
  return out
