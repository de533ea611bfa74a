"""Three seeds for the orderings the reports call a tie on one seed (fidelity pass 2).

    python -m experiments.seed_checks [--checks NAME ...] [--seeds 0 1 2] [--list]
        [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR] [--jobs N] [--quick]

Each check is the cheapest cell of one claim: the curves the paper orders, at each seed.
Seed 0 is the figure's own run (the same configuration and folder, so it is reused);
the other seeds differ only in `seed` (and, where the check says so, in evaluating every
`eval_every` rounds instead of every round, which does not change training). Each check
writes its rows to `<figures-dir>/<paper>/seed_checks.csv` (check, curve, seed, final
test accuracy in %, rounds, wall seconds, run), keeping the other checks' rows, and the
paper's report restates the claim from them (`verdict`): the paper's ordering holds only
where every seed separates (`common.SeedSpread.beats`), the reverse only where every
seed separates the other way, and anything else is a tie.

`--list` prints each check with the summed wall time of the seed-0 runs it reuses (the
cost of one more seed; runs made two at a time overstate the time alone).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
from typing import Callable, Optional, Sequence

from experiments import common
from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top


@dataclasses.dataclass(frozen=True)
class Check:
  """One claim's cheapest cell.

  Attributes:
    paper: The paper's folder name (`a_dpfl`, `aadp_fl`, `adap_dp_fl`).
    cell: The runs of one seed, as the reports name them.
    curves: `(args, seed) -> [(label, RunConfig, run directory)]`: the cell's runs at
      `seed` (`args` from this module's flags).
    order: `(better, worse)` curve labels: the paper's ordering.
    adap: Run through Adap DP-FL's `run_all_or_reuse` (which reads a run's published
      copy when its folder is gone) instead of `common.run_all`.
  """
  paper: str
  cell: str
  curves: Callable[[argparse.Namespace, int], list]
  order: tuple[tuple[str, str], ...]
  adap: bool = False


def _paper_args(add_flags, args, seed: int, paper: str, *extra: str) -> argparse.Namespace:
  """A paper module's own flags, parsed for `seed` (so its config builders apply)."""
  p = argparse.ArgumentParser()
  add_flags(p)
  argv = ['--seed', str(seed), '--runs-dir', os.path.join(args.runs_dir, paper),
          '--figures-dir', os.path.join(args.figures_dir, paper), *extra]
  if args.data_dir:
    argv += ['--data-dir', args.data_dir]
  if args.quick:
    argv.append('--quick')
  return p.parse_args(argv)


# A-DPFL's checks run at tffdp's chosen local work (the local-epochs sweep's E and lr);
# its report restates a claim only from runs at this setting.
A_DPFL_SETTING = (5, 0.1)


def _a_dpfl_args(args, seed: int) -> argparse.Namespace:
  from experiments.a_dpfl import common as ac  # pylint: disable=g-import-not-at-top
  epochs, lr = A_DPFL_SETTING
  return _paper_args(ac.add_common_flags, args, seed, 'a_dpfl', '--local-epochs',
                     str(epochs), '--learning-rate', str(lr))


def _a_dpfl_table2(args, seed: int) -> list:
  """Table 2 MNIST, top_k at tffdp's default local work (E = 5, lr = 0.1): IID, non-IID."""
  from experiments.a_dpfl import common as ac  # pylint: disable=g-import-not-at-top
  a = _a_dpfl_args(args, seed)
  iid = ac.method_config('a_dpfl', 'mnist', a, **ac.iid_overrides('mnist', a))
  non = ac.method_config('a_dpfl', 'mnist', a)
  return [('IID', iid, ac.run_dir(a, iid, 'a_dpfl_iid')),
          ('non-IID', non, ac.run_dir(a, non, 'a_dpfl_noniid'))]


def _aadp_fl_fig5_cifar10(args, seed: int) -> list:
  """Fig. 5 CIFAR-10: AADP-FL without noise at S = 0.15, 0.2, 0.25, 0.3."""
  from experiments.aadp_fl import common as ac
  from experiments.aadp_fl import fig5 as aadp_fl_fig5  # pylint: disable=g-import-not-at-top,g-multiple-import

  def flags(p):
    ac.add_common_flags(p)
    aadp_fl_fig5.add_flags(p)
  extra = ('--datasets', 'cifar10') + (() if seed == 0 else ('--eval-every', '10'))
  a = _paper_args(flags, args, seed, 'aadp_fl', *extra)
  return [(label, cfg, out) for label, cfg, out, _ in aadp_fl_fig5.curves('cifar10', a)]


def _adap_dp_fl_fig4_mnist(args, seed: int) -> list:
  """Fig. 4 MNIST: noise decay and constant sigma 3, 4, 6."""
  from experiments.adap_dp_fl import common as ac
  from experiments.adap_dp_fl import fig4 as adap_dp_fl_fig4  # pylint: disable=g-import-not-at-top,g-multiple-import
  a = _paper_args(ac.add_common_flags, args, seed, 'adap_dp_fl', '--datasets', 'mnist')
  return [(label, cfg, out) for label, cfg, out, _ in adap_dp_fl_fig4.curves('mnist', a)]


def _a_dpfl_fig6(args, seed: int) -> list:
  """Fig. 6 MNIST at E = 5, lr = 0.1: A-DPFL at k = 0.7 (Fig. 4a's run) and k = 0.9."""
  from experiments.a_dpfl import common as ac
  from experiments.a_dpfl import fig6 as a_dpfl_fig6  # pylint: disable=g-import-not-at-top,g-multiple-import
  a = _a_dpfl_args(args, seed)
  out = []
  for k in (0.7, 0.9):   # as a_dpfl_fig6 names them
    cfg = ac.method_config('a_dpfl', 'mnist', a, k=k)
    tag = 'a_dpfl_noniid' if k == a_dpfl_fig6.REUSED_K else f'a_dpfl_noniid_k{k:g}'
    out.append((f'k = {k:g}', cfg, ac.run_dir(a, cfg, tag)))
  return out


CHECKS = {
    'a_dpfl_table2_mnist': Check(
        'a_dpfl', 'Table 2 MNIST, top_k at E = 5, lr = 0.1: IID vs non-IID', _a_dpfl_table2,
        (('IID', 'non-IID'),)),
    'aadp_fl_fig5_cifar10': Check(
        'aadp_fl', 'Fig. 5 CIFAR-10, no noise: S = 0.15, 0.2, 0.25, 0.3', _aadp_fl_fig5_cifar10,
        (('S = 0.2', 'S = 0.15'), ('S = 0.2', 'S = 0.25'), ('S = 0.2', 'S = 0.3'))),
    'adap_dp_fl_fig4_mnist': Check(
        'adap_dp_fl', 'Fig. 4 MNIST: noise decay vs constant sigma 3, 4, 6',
        _adap_dp_fl_fig4_mnist,
        tuple(('noise decay', f'constant sigma = {s}') for s in (3, 4, 6)), adap=True),
    'a_dpfl_fig6_mnist': Check(
        'a_dpfl', 'Fig. 6 MNIST at E = 5, lr = 0.1: k = 0.7 vs k = 0.9',
        _a_dpfl_fig6, (('k = 0.7', 'k = 0.9'),)),
}

COLUMNS = ('check', 'curve', 'seed', 'final_test_accuracy', 'rounds', 'wall_seconds', 'run')


def final_accuracy(rows: list[dict]) -> Optional[float]:
  """The last evaluated test accuracy of a run, in %, or None if never evaluated."""
  for r in reversed(rows):
    v = r.get('test_accuracy')
    if v not in (None, ''):
      return 100.0 * float(v)
  return None


def read(figs: str, name: str) -> dict[str, common.SeedSpread]:
  """`curve -> SeedSpread` of check `name`'s final test accuracies (%) in
  `<figs>/seed_checks.csv` (empty if none), seeds in seed order."""
  rows = common.read_rows(os.path.join(figs, 'seed_checks.csv')) or []
  by_curve: dict[str, list[tuple[int, float]]] = {}
  for r in rows:
    if r['check'] == name and r['final_test_accuracy'] not in ('', None):
      by_curve.setdefault(r['curve'], []).append((int(r['seed']),
                                                   float(r['final_test_accuracy'])))
  return {c: common.SeedSpread(tuple(v for _, v in sorted(vals)))
          for c, vals in by_curve.items()}


def verdict(figs: str, name: str) -> Optional[tuple[str, str]]:
  """`(verdict, evidence)` of check `name` from `<figs>/seed_checks.csv`, or None while
  some curve of its ordering has fewer than `common.MIN_SEEDS` seeds there.

  The verdict is `reproduced` when every pair of the paper's ordering separates its way
  (`SeedSpread.beats`), `not reproduced` when some pair separates the other way, else
  `tie`. The evidence names each curve's mean +- std and per-seed values.
  """
  check = CHECKS[name]
  spreads = read(figs, name)
  labels = list(dict.fromkeys(l for pair in check.order for l in pair))
  if any(len(spreads.get(l, common.SeedSpread(())).values) < common.MIN_SEEDS
         for l in labels):
    return None
  if any(spreads[b].beats(spreads[a]) for a, b in check.order):
    out = 'not reproduced'
  elif all(spreads[a].beats(spreads[b]) for a, b in check.order):
    out = 'reproduced'
  else:
    out = 'tie'
  evidence = '; '.join(
      f'{l} {spreads[l].text()} [' + ', '.join(f'{v:.2f}' for v in spreads[l].values) + ']'
      for l in labels)
  return out, (f'seeds of its cheapest cell, {check.cell} (final test accuracy, %, '
               f'`python -m experiments.seed_checks --checks {name}`): {evidence}; a pair '
               'counts only where every seed separates')


def restate(claim, figs: str, name: str, same_runs: bool = True):
  """`claim` (a `fidelity.Claim`) restated from check `name`'s seeds when at least two
  are in `<figs>/seed_checks.csv`, its one-seed verdict kept in the evidence; else
  `claim` with a note of the command that seeds it.

  `same_runs`: whether the claim's one-seed evidence comes from the check's own seed-0
  runs (False, e.g. a report fallen back to another setting: never restated).
  """
  from experiments import fidelity  # pylint: disable=g-import-not-at-top
  result = verdict(figs, name) if same_runs else None
  if result is None:
    return fidelity.Claim(claim.text, claim.verdict, claim.evidence + (
        f' One seed; `python -m experiments.seed_checks --checks {name}` runs seeds 1 '
        f'and 2 of its cheapest cell ({CHECKS[name].cell}).'))
  return fidelity.Claim(claim.text, result[0], f'{result[1]}. Seed 0 alone '
                        f'({claim.verdict}): {claim.evidence}')


def _write(path: str, name: str, new_rows: list[dict]) -> None:
  """Replaces check `name`'s rows of the seeds in `new_rows`, keeping the others (read
  just before, written to a temporary file and renamed: another process's rows are
  kept, and a reader never sees half a file)."""
  seeds = {str(r['seed']) for r in new_rows}
  old = [r for r in common.read_rows(path) or []
         if not (r['check'] == name and r['seed'] in seeds)]
  rows = sorted(old + [{k: str(v) for k, v in r.items()} for r in new_rows],
                key=lambda r: (r['check'], r['curve'], int(r['seed'])))
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  tmp = f'{path}.{os.getpid()}.tmp'
  with open(tmp, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=COLUMNS)
    w.writeheader()
    w.writerows(rows)
  os.replace(tmp, path)


def _seed0_cost(check: Check, args) -> tuple[float, int]:
  """Summed `wall_seconds` of the seed-0 runs (folder or published copy), and how many."""
  seconds, found = 0.0, 0
  for _, _, out in check.curves(args, 0):
    for folder in (out, os.path.join(args.figures_dir, check.paper, 'runs',
                                     os.path.basename(out))):
      path = os.path.join(folder, 'summary.json')
      if os.path.exists(path):
        with open(path) as f:
          seconds += float(json.load(f).get('wall_seconds') or 0.0)
        found += 1
        break
  return seconds, found


def run_check(name: str, seeds: Sequence[int], args, command: list[str], log=print) -> list:
  """Runs (or reuses) check `name` at `seeds`; writes and returns its CSV rows."""
  check = CHECKS[name]
  items, labels = [], []
  for seed in seeds:
    for label, cfg, out in check.curves(args, seed):
      items.append((cfg, out))
      labels.append((label, seed))
  if check.adap:
    from experiments.adap_dp_fl import common as adap  # pylint: disable=g-import-not-at-top
    paper_args = argparse.Namespace(figures_dir=os.path.join(args.figures_dir, 'adap_dp_fl'),
                                    rerun=False)
    results = [rows for rows, _ in adap.run_all_or_reuse(items, command, paper_args)]
  else:
    results = common.run_all(items, command, log=log, publish_to=os.path.join(
        args.figures_dir, check.paper, 'runs'))
  table = []
  for (label, seed), (_, out), rows in zip(labels, items, results):
    accuracy = final_accuracy(rows)
    table.append(dict(check=name, curve=label, seed=seed,
                      final_test_accuracy='' if accuracy is None else accuracy,
                      rounds=int(float(rows[-1]['round'])) if rows else '',
                      wall_seconds=rows[-1].get('wall_seconds', '') if rows else '',
                      run=common.portable(out, args.runs_dir)))
  _write(os.path.join(args.figures_dir, check.paper, 'seed_checks.csv'), name, table)
  return table


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.seed_checks', description=__doc__)
  p.add_argument('--checks', nargs='+', choices=sorted(CHECKS), default=sorted(CHECKS))
  p.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
  p.add_argument('--list', action='store_true',
                 help='print each check, its claim and the cost of one more seed, and exit')
  p.add_argument('--data-dir', default=None)
  p.add_argument('--runs-dir', default='runs', help='root of the papers\' run folders '
                 '(`<runs-dir>/<paper>/...`, as the figure commands\' defaults)')
  p.add_argument('--figures-dir', default='figures')
  p.add_argument('--quick', action='store_true', help='toy size (smoke test)')
  args = p.parse_args(argv)
  if args.list:
    for name in args.checks:
      seconds, found = _seed0_cost(CHECKS[name], args)
      n = len(CHECKS[name].curves(args, 0))
      print(f'{name}: {CHECKS[name].cell} ({n} runs a seed; seed 0 found for {found}: '
            f'{seconds / 3600:.1f} h)')
    return 0
  command = p.command(argv)
  for name in args.checks:
    run_check(name, args.seeds, args, command)
    figs = os.path.join(args.figures_dir, CHECKS[name].paper)
    result = verdict(figs, name)
    print(f'{name}: ' + (f'{result[0]} ({result[1]})' if result else 'fewer than two seeds'),
          flush=True)
  return 0


if __name__ == '__main__':
  common.entry(main)
