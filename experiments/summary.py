"""Writes `figures/README.md`: every paper's fidelity verdicts on one page (generated).

    python -m experiments.summary [--figures-root figures]

Reads each paper's fidelity items (`experiments.<paper>.report.fidelity_items`: the paper
numbers under tffdp's default reading and the best other reading run, and the paper's
claims with their verdicts; `experiments.fidelity`) from `<figures root>/<paper>/`, the
same run copies and tables the paper's own README is generated from. Writes the counts
per paper, the misses without a controlled cause and the claims not reproduced. No number
is typed: regenerate it after any report (`python -m experiments.<paper>.report`).
"""

from __future__ import annotations

import importlib
import os

from experiments import fidelity
from experiments.common import ArgumentParser, md_table

# The papers, in the order of `figures/`.
PAPERS = ('a_dpfl', 'aadp_fl', 'adap_dp_fl', 'cosafed', 'dp_fedags')
TITLE = {'a_dpfl': 'A-DPFL', 'aadp_fl': 'AADP-FL', 'adap_dp_fl': 'Adap DP-FL',
         'cosafed': 'cosAFed', 'dp_fedags': 'DP-FedAGS'}


def items(paper: str, figs: str) -> tuple[list[fidelity.PaperNumber], list[fidelity.Claim]]:
  """`paper`'s fidelity numbers and claims from the figures folder `figs`."""
  module = importlib.import_module(f'experiments.{paper}.report')
  return module.fidelity_items(figs)


def build(root: str, papers=PAPERS) -> str:
  """The page's markdown for the papers' folders under `root`."""
  rows, uncaused, not_reproduced = [], [], []
  total = dict.fromkeys(('numbers', 'default_within', 'best_within', 'claims', 'reproduced',
                         'uncaused', *fidelity.VERDICTS), 0)
  for paper in papers:
    numbers, claims = items(paper, os.path.join(root, paper))
    row = dict(fidelity.counts(numbers, claims), paper=TITLE[paper],
               **{v: sum(c.verdict == v for c in claims) for v in fidelity.VERDICTS})
    rows.append(row)
    for k in total:
      total[k] += row[k]
    uncaused += [(paper, n) for n in numbers
                 if n.best_within is False and n.cause == fidelity.NO_CAUSE]
    not_reproduced += [(paper, c) for c in claims if c.verdict == 'not reproduced']
  rows.append(dict(total, paper='**all**'))
  count = lambda key: lambda r: str(r[key])
  out = [
      '# Fidelity at a glance (generated; do not edit)', '',
      'Command: `python -m experiments.summary`. Each paper\'s own README '
      '(`figures/<paper>/README.md`) opens with its fidelity table, which this page counts: '
      'every paper number under tffdp\'s default reading (the spec with its Amendments) and '
      'under the best other reading run, within tolerance when within 1.5 points for '
      'accuracies and 5% relative for budgets, noise multipliers and round counts; every '
      'claim with its verdict (`reproduced` or `not reproduced` only when the seeds '
      'separate, else `tie`). A miss is counted without a cause until a committed run '
      '(control, sweep, seed spread) explains it.', '',
      *md_table(rows, [
          ('paper', lambda r: r['paper']),
          ('numbers attempted', count('numbers')),
          ('within, default reading', count('default_within')),
          ('within, best reading run', count('best_within')),
          ('claims', count('claims')),
          ('reproduced', count('reproduced')),
          ('not reproduced', count('not reproduced')),
          ('tie', count('tie')),
          ('not run', count('not run')),
          ('misses without a controlled cause', count('uncaused'))]), '',
      '## Misses without a controlled cause', '']
  value = fidelity.format_value
  out += [f'- {TITLE[p]}: {n.what}: paper {value(n.paper)}, default reading '
          f'{value(n.default, n.kind)}, best reading run {value(n.best, n.kind)}'
          + (f' ({n.best_reading})' if n.best_reading else '') for p, n in uncaused] or ['None.']
  out += ['', '## Claims not reproduced', '',
          'Each with its evidence in the paper\'s README.', '']
  out += [f'- {TITLE[p]}: {c.text}' for p, c in not_reproduced] or ['None.']
  return '\n'.join(out) + '\n'


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.summary', description=__doc__)
  p.add_argument('--figures-root', default='figures',
                 help='the folder holding one folder per paper (default: figures)')
  args = p.parse_args(argv)
  text = build(args.figures_root)
  with open(os.path.join(args.figures_root, 'README.md'), 'w', encoding='utf-8') as f:
    f.write(text)
  print(text)
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
