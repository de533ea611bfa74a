"""Writes `figures/a_dpfl/README.md` from the committed A-DPFL results (no numbers typed).

    python -m experiments.a_dpfl.report [--figures-dir figures/a_dpfl]

Reads `local_epochs.csv`, `fig4_<dataset>[_E<E>][_lr<lr>].csv`, `fig5_mnist[...].csv`,
`fig6_mnist[...].csv`, `table2[...].csv` and the per-run `config.json` and
`metrics.csv` copies; artefacts not yet produced are listed as such. The fidelity table
compares the default reading with the best other reading run (each setting's figures
follow in full); "Not rerun yet" gives each missing artefact of the rerun setting with its
command and cost (from the cost table, `benchmarks/costs.csv`).
"""

from __future__ import annotations

import json
import os
import re

from experiments.a_dpfl import common
from experiments import fidelity
from experiments import seed_checks
from experiments.common import fmt as _f
from experiments.common import finished_runs_table
from experiments.common import finished_summaries
from experiments.common import report_main
from experiments.common import COSTS_CSV, MIN_SEEDS, Missing, copied_metrics, missing_items
from experiments.common import cost_section, parked_section, untrained_rounds_section
from experiments.common import read_rows as _rows
from experiments.a_dpfl.fig6 import K_VALUES, REUSED_K
from experiments.a_dpfl.local_epochs import EPOCHS
from experiments.a_dpfl.table2 import PAPER as PAPER_T2
from experiments.report_template import Template

T = Template('a_dpfl')
# Sec. 6.4.1 (Fig. 5): (sigma, rounds it held) for the first four holds.
PAPER_FIG5_HOLDS = ((1.0, 20), (0.7, 4), (0.49, 4), (0.34, 7))
PAPER_FIG5 = (f'sigma {PAPER_FIG5_HOLDS[0][0]:.1f} for {PAPER_FIG5_HOLDS[0][1]} rounds, '
              + ', '.join(f'{s:g} for {n}' for s, n in PAPER_FIG5_HOLDS[1:])
              + ', then shorter holds')
PAPER_FIG6 = 'final accuracy declines slowly up to k = 0.7, faster beyond'


def _command(run_dir):
  path = os.path.join(run_dir, 'config.json')
  if not os.path.exists(path):
    return '?'
  with open(path) as f:
    return ' '.join(json.load(f)['command'])


Setting = tuple[int, float]  # (local epochs E, client learning rate)
FIRST: Setting = (1, common.COMMON['learning_rate'])  # the first regeneration's


def _settings_present(figs: str) -> list[Setting]:
  """(E, lr) with artefacts here: the first regeneration's (no suffix) and every
  `_E<E>[_lr<lr>]` / `_lr<lr>` suffix found (`a_dpfl.common.artefact`)."""
  found = {FIRST} if any(os.path.exists(os.path.join(figs, f)) for f in
                         ('fig4_mnist.csv', 'fig4_cifar10.csv', 'table2.csv')) else set()
  for name in os.listdir(figs) if os.path.isdir(figs) else ():
    # a figure's table, or the folder of its finished runs' copies (table not yet written)
    m = re.fullmatch(r'(?:fig[456]_\w+?|table2)(?:_E(\d+))?(?:_lr([\d.e-]+?))?(?:\.csv)?', name)
    if m and (m.group(1) or m.group(2)):
      found.add((int(m.group(1) or 1),
                 float(m.group(2)) if m.group(2) else common.COMMON['learning_rate']))
  return sorted(found)


def _sfx(setting: Setting) -> str:
  return common.setting_suffix(*setting)


def _label(setting: Setting) -> str:
  """`E = 5` or `E = 5, lr = 0.1` (lr named only when not the paper's)."""
  epochs, lr = setting
  return f'E = {epochs}' + ('' if lr == common.COMMON['learning_rate'] else f', lr = {lr:g}')


def _flags(setting: Setting) -> str:
  epochs, lr = setting
  return ((f' --local-epochs {epochs}' if epochs != 1 else '') +
          (f' --learning-rate {lr:g}' if lr != common.COMMON['learning_rate'] else ''))


def _fig4_section(figs: str, setting: Setting, dataset: str, name: str) -> list[str]:
  sfx, tag = _sfx(setting), f' ({_label(setting)})'
  rows = _rows(os.path.join(figs, f'fig4_{dataset}{sfx}.csv'))
  out = [T.text('fig4_title', panel='a' if dataset == 'mnist' else 'b', name=name, tag=tag)]
  if rows is None:
    return out + ['', T.text('fig4_not_regenerated', dataset=dataset, flags=_flags(setting)),
                  '', *_finished_so_far(os.path.join(figs, f'fig4_{dataset}{sfx}'))]
  command = lambda r: _command(os.path.join(figs, f'fig4_{dataset}{sfx}', _slug(r['method'])))
  return out + ['', f'![fig4](fig4_{dataset}{sfx}.png)', '', T.text('fig4_paper'), '',
                *T.table('fig4_table', [dict(r, command=command(r)) for r in rows]), '',
                _ordering(rows), '']


def _fig6_section(figs: str, setting: Setting) -> list[str]:
  sfx = _sfx(setting)
  rows = _rows(os.path.join(figs, f'fig6_mnist{sfx}.csv'))
  out = [T.text('fig6_title', tag=f' ({_label(setting)})')]
  if rows is None:
    return out + ['', 'Not regenerated yet.', '',
                  *_finished_so_far(os.path.join(figs, f'fig6_mnist{sfx}'))]
  command = lambda r: _command(os.path.join(figs, f'fig6_mnist{sfx}',
                                            'k' + format(float(r['k']), 'g')))
  acc = [float(r['final_test_accuracy']) for r in rows]
  return out + ['', f'![fig6](fig6_mnist{sfx}.png)', '', f'Paper: {PAPER_FIG6}.', '',
                *T.table('fig6_table', [dict(r, command=command(r),
                                             wall_seconds=r.get('wall_seconds')) for r in rows]),
                '', T.text('fig6_reading', first=acc[0], first_k=rows[0]['k'], last=acc[-1],
                           last_k=rows[-1]['k'], spread=100 * (max(acc) - min(acc)),
                           low=min(acc), high=max(acc),
                           sigma=max(float(r['final_noise_multiplier']) for r in rows)), '']


def _figure_sections(figs: str, setting: Setting) -> list[str]:
  """Figs. 4-6 and Table 2 as regenerated with `setting` (local epochs, learning rate)."""
  sfx, tag = _sfx(setting), f' ({_label(setting)})'
  out = [*_fig4_section(figs, setting, 'mnist', 'MNIST'),
         *_fig4_section(figs, setting, 'cifar10', 'CIFAR-10')]
  rows = _rows(os.path.join(figs, f'fig5_mnist{sfx}.csv'))
  out.append(T.text('fig5_title', tag=tag))
  if rows is None:
    out += ['', 'Not regenerated yet.', '']
  else:
    sigma = [float(r['noise_multiplier']) for r in rows]
    out += ['', f'![fig5](fig5_mnist{sfx}.png)', '', *T.lines(
        'fig5', paper=PAPER_FIG5, holds=_holds(sigma)),
            *_hold_readings_lines(figs, setting),
            *([_hold_seeds_line(_seed_holds(_seed_traces(figs, rows)))]
              if setting == seed_checks.A_DPFL_SETTING else []), '']
  out += _fig6_section(figs, setting)
  rows = _rows(os.path.join(figs, f'table2{sfx}.csv'))
  out.append(T.text('table2_title', tag=tag))
  if rows is None:
    return out + ['', 'Not regenerated yet.', '',
                  *_finished_so_far(os.path.join(figs, f'table2{sfx}'))]
  runs = [_table2_run(figs, sfx, r) for r in rows]
  out += ['', *T.table('table2_table', [
      dict(r, partition=_partition(run), selection=r.get('selection') or 'top_k',
           command=_command(run)) for r, run in zip(rows, runs)])]
  missing = {'mnist', 'cifar10'} - {r['dataset'] for r in rows}
  if missing:
    out.append(f"\nNot regenerated yet: {', '.join(sorted(missing))}.")
  return out + ['']


PRIVATE = ('DPFL', 'CL-FL', 'A-DPFL')  # the paper's private curves of Fig. 4


def _ordering(rows) -> str:
  """The Fig. 4 verdict: the paper's private methods ranked by final test accuracy against
  the paper's A-DPFL > CL-FL > DPFL (not given while one of them has no row)."""
  paper_curves = [r for r in rows if r['method'] in PRIVATE]
  missing = [m for m in PRIVATE if m not in {r['method'] for r in paper_curves}]
  if missing:
    return T.text('no_ordering', missing=', '.join(missing))
  ranked = sorted(paper_curves, key=lambda r: -float(r['final_test_accuracy']))
  order = ' > '.join(r['method'] for r in ranked)
  return T.text('ordering', order=order, verdict='reproduces' if order == 'A-DPFL > CL-FL > DPFL'
                else 'does NOT reproduce')


def _finished_so_far(folder: str) -> list[str]:
  """The runs of a figure whose table is not written yet but which have finished (their
  copies in `folder`, made as each run ends)."""
  table = finished_runs_table(folder, extra=[('command', lambda d: f'`{_command(d)}`')])
  if not table:
    return []
  return [*T.lines('finished_so_far'), '', *table, '']


def _holds(values) -> str:
  """`1 for 20, 0.7 for 4, ...`: how many consecutive rounds each sigma held."""
  return ', '.join(f'{_f(v, 3)} for {n}' for v, n in common.sigma_holds(values))


# The seed check whose k = 0.7 curve is Fig. 5's default run at seeds 1 and 2.
HOLD_SEEDS_CHECK, HOLD_SEEDS_CURVE = 'a_dpfl_fig6_mnist', 'k = 0.7'


def _seed_traces(figs: str, seed0: list[dict]) -> dict[int, tuple[list[float], list[float]]]:
  """`{seed: (sigma per round, Alg. 4's validation accuracy per round)}` of Fig. 5's default
  run (A-DPFL, k = 0.7, at the seed checks' E and lr): seed 0 from `seed0` (the rows of its
  `fig5_mnist<sfx>.csv`), the others from the run copies `seed_checks.csv` names for
  `HOLD_SEEDS_CHECK`'s k = 0.7 curve."""
  def trace(rows):  # CSVs written without the accuracy column give no accuracies
    return ([float(m['noise_multiplier']) for m in rows],
            [float(m['server_validation_accuracy']) for m in rows
             if m.get('server_validation_accuracy') not in (None, '')])
  out = {0: trace(seed0)} if seed0 else {}
  for r in _rows(os.path.join(figs, 'seed_checks.csv')) or []:
    if (r['check'], r['curve']) != (HOLD_SEEDS_CHECK, HOLD_SEEDS_CURVE) or r['seed'] == '0':
      continue
    rows = copied_metrics(figs, r['run'])
    if rows:
      out[int(r['seed'])] = trace(rows)
  return out


def _seed_holds(traces: dict[int, tuple[list[float], list[float]]]
                ) -> dict[int, list[tuple[float, int]]]:
  """`{seed: [(sigma, rounds held)]}` of `_seed_traces`; the last hold (cut by the round
  cap) is left out."""
  return {seed: common.sigma_holds(sigma)[:-1] for seed, (sigma, _) in traces.items()}


def _first_hold_cause(traces: dict[int, tuple[list[float], list[float]]],
                      held: int) -> str | None:
  """The cause of a miss of sigma_0's hold (Fig. 5's first), or None.

  Alg. 4 (default `adjust_every` = 1) decays sigma after the first round whose validation
  accuracy gains no more than alpha over the round before (`S_0 = 0`). Until then every
  alpha runs the same rounds, so when sigma_0's hold ended at a round whose accuracy fell
  (a negative gain), every alpha >= 0 ends it there or sooner: the hold the runs show is
  the longest that any non-negative threshold gives. The cause holds when that is so on
  at least `MIN_SEEDS` seeds and every seed's hold is shorter than the paper's `held`.
  """
  ends = []
  for seed, (sigma, acc) in sorted(traces.items()):
    n = common.sigma_holds(sigma)[0][1]
    if n >= len(sigma) or len(acc) < n:
      return None
    ends.append((seed, n, acc[n - 1] - (acc[n - 2] if n > 1 else 0.0)))
  if len(ends) < MIN_SEEDS or any(gain >= 0 or n >= held for _, n, gain in ends):
    return None
  return T.text('cause_hold_falls', seeds=', '.join(str(s) for s, _, _ in ends),
                rounds=', '.join(str(n) for _, n, _ in ends),
                falls=', '.join(f'{-100 * g:.1f}' for _, _, g in ends), held=held,
                longest=max(n for _, n, _ in ends), check=HOLD_SEEDS_CHECK)


def _hold_readings_lines(figs: str, setting: Setting) -> list[str]:
  """Fig. 5's line on Fig. 4a's other A-DPFL readings at `setting` (selection, Alg. 4
  every 5 rounds, alpha 0): the rounds each of the paper's first four sigmas held, or no
  line when none has run. A hold cut by the round cap counts as `-`."""
  default = _reading(setting)
  traces = {k: common.sigma_holds(v)[:-1] for k, v in _sigma_traces(figs, [setting]).items()
            if k != default}
  if not traces:
    return []
  counts = '; '.join(
      f'{k[len(default) + 2:]}: ' + ', '.join(str(h[i][1]) if i < len(h) else '-'
                                                for i in range(len(PAPER_FIG5_HOLDS)))
      for k, h in traces.items())
  return T.lines('fig5_readings', counts=counts)


def _hold_seeds_line(seeds: dict[int, list[tuple[float, int]]]) -> str:
  """Fig. 5's line on the seeds of its default run: each hold's rounds per seed, or the
  command that runs seeds 1 and 2."""
  if len(seeds) < MIN_SEEDS:
    return T.text('fig5_seeds_missing', check=HOLD_SEEDS_CHECK)
  counts = '; '.join(
      f'{sigma:g}: ' + ', '.join(str(seeds[s][i][1]) if i < len(seeds[s]) else '-'
                                 for s in sorted(seeds))
      for i, (sigma, _) in enumerate(PAPER_FIG5_HOLDS))
  return T.text('fig5_seeds', seeds=', '.join(map(str, sorted(seeds))), counts=counts,
                check=HOLD_SEEDS_CHECK)


def _table2_run(figs: str, sfx: str, r: dict) -> str:
  selection = r.get('selection') or 'top_k'
  return os.path.join(figs, f'table2{sfx}',
                      f"{r['dataset']}_{'iid' if r['setting'] == 'IID' else 'noniid'}"
                      + ('' if selection == 'top_k' else f'_{selection}'))


def _partition(run_dir: str) -> str:
  path = os.path.join(run_dir, 'config.json')
  if not os.path.exists(path):
    return '?'
  with open(path) as f:
    c = json.load(f)
  opts = c.get('partition_options') or {}
  return c['partition'] + (f" (skew {opts['skew']:g})" if 'skew' in opts else '')


SETTLED_POINTS = 1.0  # the smallest gap one seed per run resolves, in accuracy points
CHANCE = 0.1  # CIFAR-10's 10 classes
AT_CHANCE = CHANCE + SETTLED_POINTS / 100  # never above: the pilot did not train
TRAINS = CHANCE + 0.05  # above it (5 points over chance): the pilot trains


def _pilot_outcome(rows: list[dict]) -> tuple[str, str | None]:
  """One pilot setting's `cifar10_pilot.csv` rows: ('trains', first round above
  `TRAINS`), ('chance', None) when no evaluated round is above `AT_CHANCE`, ('unknown',
  None) when no round is evaluated, else ('between', None)."""
  acc = [(r['round'], float(r['test_accuracy'])) for r in rows if r['test_accuracy']]
  if not acc:
    return 'unknown', None  # no evaluated round
  trains = next((rnd for rnd, a in acc if a > TRAINS), None)
  if trains is not None:
    return 'trains', trains
  return ('chance' if all(a <= AT_CHANCE for _, a in acc) else 'between'), None


def _pilot_warning(figs: str, setting: Setting) -> list[str]:
  """A line for "Not rerun yet" when the CIFAR-10 pilot of `setting` stayed at chance."""
  rows = [r for r in _rows(os.path.join(figs, 'cifar10_pilot.csv')) or []
          if (int(r['local_epochs']), float(r['learning_rate'])) == setting]
  if not rows or _pilot_outcome(rows)[0] != 'chance':
    return []
  return [T.text('pilot_warning', setting=_label(setting),
                 rounds=max(int(r['round']) for r in rows)), '']


def _cifar10_pilot_section(figs: str) -> list[str]:
  """`experiments.a_dpfl.cifar10_pilot`: does the MNIST-chosen local work train CIFAR-10?
  Per setting the DP-SGD steps a round, round 1's noise walk per coordinate
  (`lr sigma_0 C / B sqrt(steps)`), and whether the test accuracy ever leaves chance (by
  more than `SETTLED_POINTS`)."""
  rows = _rows(os.path.join(figs, 'cifar10_pilot.csv'))
  if not rows:
    return []
  t1 = common.TABLE1['cifar10']
  per_step = common.COMMON['noise_multiplier'] * t1['clip_norm'] / common.COMMON['batch_size']
  settings = list(dict.fromkeys(r['setting'] for r in rows))
  lasts = sorted({max(int(r['round']) for r in rows if r['setting'] == x) for x in settings})
  rounds = lasts[-1]
  paused = (f'{lasts[0]}' if len(lasts) == 1 else
            f'{", ".join(map(str, lasts[:-1]))} or {lasts[-1]} (see "last round")')
  if 'client_examples' not in rows[0]:
    raise ValueError(f'{figs}/cifar10_pilot.csv predates its client_examples column: rerun '
                     '`python -m experiments.a_dpfl.cifar10_pilot` (it reuses the pilot runs)')
  out = [*T.lines('pilot', examples=rows[0]['client_examples'], per_step=per_step,
                  sigma=common.COMMON['noise_multiplier'], clip=t1['clip_norm'],
                  batch=common.COMMON['batch_size'], paused=paused), '']
  stuck, learned, between, table = [], [], [], []
  for setting in settings:
    rs = [r for r in rows if r['setting'] == setting]
    acc = [float(r['test_accuracy']) for r in rs if r['test_accuracy']]
    first, last = rs[0], rs[-1]
    steps, lr = int(first['local_steps']), float(first['learning_rate'])
    outcome, trains = _pilot_outcome(rs)
    label = f"E = {first['local_epochs']}, lr {lr:g}"
    if outcome == 'trains':
      verdict = f"trains: above {TRAINS:.0%} from round {trains}"
      learned.append(f"{label} (from round {trains})")
    elif outcome == 'chance':
      verdict = f'at chance in every round (test accuracy <= {AT_CHANCE:.0%})'
      stuck.append((label, float(last['noise_multiplier'])))
    elif outcome == 'between':
      verdict = f'above chance, below {TRAINS:.0%}'
      between.append(label)
    else:
      verdict = 'no round evaluated'
    table.append(dict(last, local_epochs=first['local_epochs'], lr=lr, steps=steps,
                      walk=lr * per_step * steps ** 0.5, train_loss=first['train_loss'],
                      span=f'{min(acc):.2%}-{max(acc):.2%}' if acc else '',
                      last_round=last['round'], verdict=verdict, run=first['run']))
  out += T.table('pilot_table', table)
  said = []
  if learned:
    said.append(f"{' and '.join(learned)} {'train' if len(learned) > 1 else 'trains'}")
  if between:
    said.append(f"{' and '.join(between)} {'leave' if len(between) > 1 else 'leaves'} "
                f'chance without reaching {TRAINS:.0%}')
  if stuck:
    said.append(T.text('pilot_stuck', settings=' and '.join(l for l, _ in stuck),
                       verb='stay' if len(stuck) > 1 else 'stays',
                       sigma=max(s for _, s in stuck)))
  if said:
    out += ['', f'tffdp: within {rounds} rounds, ' + '; '.join(said) + '.']
  return out + ['']


def _sweep_section(figs: str) -> list[str]:
  rows = _rows(os.path.join(figs, 'local_epochs.csv'))
  if rows is None:
    return T.lines('sweep_not_run') + ['']
  out = [*T.lines('sweep'), '', *T.table('sweep_table', [
      dict(r, chosen_mark='**yes**' if r['chosen'] == 'True' else '') for r in rows])]
  rules = sorted({f"{r['dataset']}: {r['choice_rule']}" for r in rows if r.get('choice_rule')})
  if rules:
    out += ['', 'Choice: ' + '; '.join(rules) + '.']
  for dataset in sorted({r['dataset'] for r in rows}):
    mine = [r for r in rows if r['dataset'] == dataset]
    top = max(mine, key=lambda r: float(r['final_test_accuracy']))
    reached = any(r['reaches_target'] == 'True' for r in mine)
    if top['chosen'] != 'True' and not reached:
      out += ['', T.text('sweep_highest', top)]
    left = [e for e in EPOCHS if e > max(int(r['local_epochs']) for r in mine)]
    if left and not reached:
      out += ['', T.text('sweep_left', dataset=dataset, left=', '.join(map(str, left)))]
  return out + ['']


def _final(rows) -> dict:
  """`{method: final test accuracy}` of a Fig. 4 table (empty if not made)."""
  return {r['method']: float(r['final_test_accuracy']) for r in rows or []}


def _copied_rows(folder: str) -> list[dict]:
  """Fig. 4 table rows (`method`, final accuracy, epsilon_guaranteed) read from the run
  copies in `folder` (`<slug>/summary.json`), for a figure whose table is not written."""
  labels = {**common.LABELS, **{k: v[0] for k, v in common.VARIANTS.items()}}
  runs = finished_summaries(folder, keep=lambda name: name in labels)
  runs.sort(key=lambda run: list(labels).index(run[0]))  # the figure's curve order
  return [dict(method=labels[name], final_test_accuracy=s['final_test_accuracy'],
               epsilon_guaranteed=s['epsilon_guaranteed']) for name, _, s in runs]


def _fig4_rows(figs: str, dataset: str, setting: Setting) -> tuple[list[dict], bool]:
  """Fig. 4 rows of `setting`: `(rows of fig4_<dataset><sfx>.csv, False)`, or, while that
  table is not written, `(_copied_rows of the finished run copies, True)`."""
  rows = _rows(os.path.join(figs, f'fig4_{dataset}{_sfx(setting)}.csv'))
  if rows is not None:
    return rows, False
  return _copied_rows(os.path.join(figs, f'fig4_{dataset}{_sfx(setting)}')), True


PAPER_K_KNEE = 0.7  # Fig. 6: accuracy declines slowly up to this k, faster beyond


# --- Fidelity: every paper number attempted (issue 42) ---

COMMANDS = {
    'sweep': 'python -m experiments.a_dpfl.local_epochs',
    'ceiling': 'python -m experiments.a_dpfl.ceiling',
}


def _default_setting(figs: str) -> Setting:
  """tffdp's default reading of the local work (the spec's Amendment): the E and lr the
  local-epochs sweep chose on MNIST (`local_epochs.csv`), else the first regeneration's."""
  for r in _rows(os.path.join(figs, 'local_epochs.csv')) or []:
    if r['dataset'] == 'mnist' and r['chosen'] == 'True':
      return int(r['local_epochs']), float(r['learning_rate'])
  return FIRST


def _reading(setting: Setting, option: str = '') -> str:
  return _label(setting) + (f', {option}' if option else '')


def _variant_option(method: str) -> str:
  """`A-DPFL (uniform)` -> `uniform`; `A-DPFL` -> ''."""
  return method[len('A-DPFL ('):-1] if method.startswith('A-DPFL (') else ''


def _table2_readings(figs: str, settings: list[Setting], dataset: str,
                     split: str) -> dict[str, float]:
  """`{reading: final test accuracy (%)}` of every run of Table 2's cell (`dataset`,
  `split`): the rows of each setting's `table2<sfx>.csv` and, for the non-IID cell, the
  A-DPFL rows of Fig. 4 (the same runs, plus Alg. 4 every 5 rounds)."""
  out = {}
  for s in settings:
    for r in _rows(os.path.join(figs, f'table2{_sfx(s)}.csv')) or []:
      if r['dataset'] != dataset or r['setting'] != split:
        continue
      selection = r.get('selection') or 'top_k'
      options = [] if selection == 'top_k' else [selection]
      if split == 'IID':
        part = _partition(_table2_run(figs, _sfx(s), r))
        if part.startswith('label_skew'):
          options.append(f'IID read as {part}')
      out[_reading(s, ', '.join(options))] = 100 * float(r['tffdp_final_accuracy'])
    if split == 'non-IID':
      for r in _fig4_rows(figs, dataset, s)[0]:
        if r['method'] == 'A-DPFL' or r['method'].startswith('A-DPFL ('):
          out.setdefault(_reading(s, _variant_option(r['method'])),
                         100 * float(r['final_test_accuracy']))
  return out


def _ceiling_rows(figs: str, method: str) -> list[dict]:
  """`ceiling.csv`'s rows of `method` (`a_dpfl.ceiling.FEDAVG` or `.CONTROL`; rows
  written before the method column are FedAvg's)."""
  return [r for r in _rows(os.path.join(figs, 'ceiling.csv')) or []
          if (r.get('method') or 'FedAvg') == method]


def _nonprivate(figs: str, settings: list[Setting], dataset: str, split: str) -> dict:
  """`{reading: (final test accuracy (%), command)}` of the non-private FedAvg runs on
  Table 2's split: Fig. 4's and the local-epochs sweep's (label skew), the ceiling's
  (`ceiling.csv`, both splits)."""
  out = {}
  if split == 'non-IID':
    for s in settings:
      for r in _fig4_rows(figs, dataset, s)[0]:
        if r['method'] == common.LABELS['fedavg']:
          out[f'Fig. 4, {_label(s)}'] = (
              100 * float(r['final_test_accuracy']),
              f'python -m experiments.a_dpfl.fig4 --dataset {dataset}{_flags(s)}')
    for r in _rows(os.path.join(figs, 'local_epochs.csv')) or []:
      if r['dataset'] == dataset:
        out[f'sweep, E = {r["local_epochs"]}, lr = {r["learning_rate"]}'] = (
            100 * float(r['final_test_accuracy']), COMMANDS['sweep'])
  for r in _ceiling_rows(figs, 'FedAvg'):
    if r['dataset'] == dataset and (r['partition'] == 'iid') == (split == 'IID'):
      out[f'ceiling, {r["partition"]}, E = {r["local_epochs"]}, lr = {r["learning_rate"]}'] = (
          float(r['final_test_accuracy']),
          COMMANDS['ceiling'] + ('' if dataset == 'mnist' else f' --datasets {dataset}'))
  return out


def _control_cause(figs: str, paper: float, private: float) -> str | None:
  """The cause of the IID MNIST miss that `a_dpfl.ceiling`'s A-DPFL no-noise control
  gives (None without it): within tolerance of `paper` (%) without noise, the noise costs
  the gap; below it, A-DPFL's clipping and selection already do."""
  control = _ceiling_rows(figs, 'A-DPFL, no noise')
  if not control:
    return None
  r = control[0]
  acc = float(r['final_test_accuracy'])
  where = T.text('control_where', r, accuracy=acc, command=COMMANDS['ceiling'])
  if fidelity.within('accuracy', paper, acc) or acc > paper:
    return T.text('control_noise', where=where, paper=paper, gap=acc - private)
  uniform = _ceiling_rows(figs, 'A-DPFL, no noise, uniform selection')
  split = ''
  if uniform:
    u = float(uniform[0]['final_test_accuracy'])
    fedavg = _fedavg_iid(figs, r['learning_rate'])
    split = T.text(
        'control_split', uniform=u,
        fedavg=f' against FedAvg\'s {fedavg:.2f}% on the same configuration'
        if fedavg is not None else '',
        selection=T.text('control_selection_none' if fidelity.within('accuracy', u, acc)
                         else 'control_selection', gap=u - acc),
        clipping=f'{fedavg - u:.2f} points' if fedavg is not None else 'the rest')
  return T.text('control_clipping', where=where, paper=paper, split=split)


def _fedavg_iid(figs: str, learning_rate: str):
  """FedAvg's final IID accuracy (%) at `learning_rate` in `ceiling.csv`, or None."""
  return next((float(r['final_test_accuracy']) for r in _ceiling_rows(figs, 'FedAvg')
               if r['partition'] == 'iid' and float(r['learning_rate']) ==
               float(learning_rate)), None)


def _sigma_traces(figs: str, settings: list[Setting]) -> dict[str, list[float]]:
  """`{reading: sigma per round}` of the MNIST non-IID A-DPFL runs (Fig. 5's): each
  setting's `fig5_mnist<sfx>.csv` (else its Fig. 4 run copy) and Fig. 4's A-DPFL variants."""
  out = {}
  for s in settings:
    rows = _rows(os.path.join(figs, f'fig5_mnist{_sfx(s)}.csv'))
    if rows:
      out[_reading(s)] = [float(r['noise_multiplier']) for r in rows]
    for slug in ['a_dpfl', *(k for k, v in common.VARIANTS.items() if v[1] == 'a_dpfl')]:
      rows = _rows(os.path.join(figs, f'fig4_mnist{_sfx(s)}', slug, 'metrics.csv'))
      if rows and 'noise_multiplier' in rows[0]:
        out.setdefault(_reading(s, _variant_option(common.label_of(slug))),
                       [float(r['noise_multiplier']) for r in rows])
  return out


def _closest(paper: float, values: dict) -> tuple:
  """`(value, reading)` of `values` (`{reading: value}`, None values left out) closest to
  `paper`; `(None, '')` if none."""
  found = [(abs(v - paper), k, v) for k, v in values.items() if v is not None]
  return (min(found)[2], min(found)[1]) if found else (None, '')


def _fidelity_numbers(figs: str, settings: list[Setting], default: Setting) -> list:
  numbers = []
  rounds = common.COMMON['rounds']
  for (dataset, split), paper in PAPER_T2.items():
    runs = _table2_readings(figs, settings, dataset, split)
    value = runs.pop(_reading(default), None)
    best, reading = _closest(100 * paper, runs)
    cause = fidelity.NO_CAUSE
    ceiling = _nonprivate(figs, settings, dataset, split)
    if ceiling:
      top = max(ceiling, key=lambda k: ceiling[k][0])
      if not fidelity.within('accuracy', 100 * paper, ceiling[top][0]):
        cause = T.text('cause_ceiling', accuracy=ceiling[top][0], rounds=rounds, reading=top,
                       command=ceiling[top][1],
                       runs=f'{len(ceiling)} run' + ('s' if len(ceiling) > 1 else ''))
      elif split == 'IID' and dataset == 'mnist' and value is not None:
        cause = _control_cause(figs, 100 * paper, value) or cause
    numbers.append(fidelity.PaperNumber(
        f'Table 2, {"MNIST" if dataset == "mnist" else "CIFAR-10"}, {split}, A-DPFL final '
        'accuracy', 'accuracy', 100 * paper, value, best, reading, cause))
  traces = {k: common.sigma_holds(v)[:-1] for k, v in _sigma_traces(figs, settings).items()}
  seed_traces = (_seed_traces(figs, _rows(os.path.join(figs, f'fig5_mnist{_sfx(default)}.csv'))
                              or [])
                 if default == seed_checks.A_DPFL_SETTING else {})
  seeds = _seed_holds(seed_traces)
  for i, (sigma, held) in enumerate(PAPER_FIG5_HOLDS):
    holds = {k: (h[i][1] if i < len(h) else None) for k, h in traces.items()}
    value = holds.pop(_reading(default), None)
    best, reading = _closest(held, holds)
    counts = [h[i][1] for _, h in sorted(seeds.items()) if i < len(h)]
    cause = fidelity.NO_CAUSE
    if len(counts) >= MIN_SEEDS and min(counts) <= held <= max(counts):
      cause = T.text('cause_hold_seeds', counts=', '.join(map(str, counts)), low=min(counts),
                     high=max(counts), check=HOLD_SEEDS_CHECK)
    elif i == 0:
      cause = _first_hold_cause(seed_traces, held) or cause
    numbers.append(fidelity.PaperNumber(
        f'Fig. 5, MNIST, rounds sigma holds at {sigma}', 'rounds', held, value, best, reading,
        cause))
  return numbers


def _first_with(settings: list[Setting], default: Setting, has) -> Setting | None:
  """The default setting if `has(setting)`, else the first regeneration's, else None."""
  return next((s for s in dict.fromkeys([default, FIRST]) if s in settings and has(s)), None)


def _fallback_note(setting: Setting, default: Setting) -> str:
  return (_label(setting) if setting == default else
          f'{_label(setting)} (the default reading, {_label(default)}, has not run them all)')


def _fidelity_claims(figs: str, settings: list[Setting], default: Setting) -> list:
  claims = []
  for dataset, name, panel in (('mnist', 'MNIST', '4a'), ('cifar10', 'CIFAR-10', '4b')):
    text = T.text('claim_fig4', panel=panel, name=name)
    acc = lambda s: {m: 100 * a for m, a in _final(_fig4_rows(figs, dataset, s)[0]).items()}
    s = _first_with(settings, default, lambda s: all(m in acc(s) for m in PRIVATE))
    if s is None:
      claims.append(fidelity.Claim(text, 'not run', 'DPFL, CL-FL and A-DPFL not all run.'))
      continue
    a = acc(s)
    others = [m for m in a if m.startswith('CL-FL (')]
    claims.append(fidelity.Claim(
        text, fidelity.margin_verdict([a['A-DPFL'] - a['CL-FL'], a['CL-FL'] - a['DPFL']],
                                     SETTLED_POINTS), T.text(
            'claim_fig4_evidence', setting=_fallback_note(s, default), a_dpfl=a['A-DPFL'],
            cl_fl=a['CL-FL'], dpfl=a['DPFL'], others=' (' + ', '.join(
                f'{m} {a[m]:.2f}%' for m in others) + ')' if others else '')))
  text = f'Fig. 6 (MNIST): {PAPER_FIG6}'
  fig6 = lambda s: _rows(os.path.join(figs, f'fig6_mnist{_sfx(s)}.csv')) or []
  s = _first_with(settings, default, lambda s: (
      any(float(r['k']) <= PAPER_K_KNEE for r in fig6(s)) and
      any(float(r['k']) > PAPER_K_KNEE for r in fig6(s))))
  if s is None:
    claims.append(fidelity.Claim(text, 'not run', 'No k on both sides of the knee.'))
  else:
    acc = {float(r['k']): 100 * float(r['final_test_accuracy']) for r in fig6(s)}
    low = [a for k, a in acc.items() if k <= PAPER_K_KNEE]
    high = [a for k, a in acc.items() if k > PAPER_K_KNEE]
    claims.append(seed_checks.restate(fidelity.Claim(
        text, fidelity.margin_verdict([min(low) - max(high)], SETTLED_POINTS), T.text(
            'claim_fig6_evidence', setting=_fallback_note(s, default), knee=PAPER_K_KNEE,
            low_min=min(low), low_max=max(low), high_min=min(high), high_max=max(high),
            spread=max(acc.values()) - min(acc.values()))), figs,
        'a_dpfl_fig6_mnist', s == seed_checks.A_DPFL_SETTING))
  for dataset, name in (('mnist', 'MNIST'), ('cifar10', 'CIFAR-10')):
    paper = 100 * (PAPER_T2[(dataset, 'IID')] - PAPER_T2[(dataset, 'non-IID')])
    text = T.text('claim_table2', name=name, paper=paper)
    cell = lambda s, split: _table2_readings(figs, [s], dataset, split)
    top_k = lambda s, split: next((v for k, v in cell(s, split).items()
                                   if k.split(', IID read as')[0] == _label(s)), None)
    s = _first_with(settings, default, lambda s: None not in (top_k(s, 'IID'),
                                                            top_k(s, 'non-IID')))
    if s is None:
      claims.append(fidelity.Claim(text, 'not run', 'The IID or non-IID run is missing.'))
      continue
    iid, non = cell(s, 'IID'), cell(s, 'non-IID')
    gap = top_k(s, 'IID') - top_k(s, 'non-IID')
    split_note = next((k.split(', ')[-1] for k in iid if 'IID read as' in k
                       and k.split(', IID read as')[0] == _label(s)), '')
    others = [f'{sel} {iid[_reading(s, sel)] - non[_reading(s, sel)]:+.2f}'
              for sel in common.SELECTIONS[1:]
              if _reading(s, sel) in iid and _reading(s, sel) in non]
    claim = fidelity.Claim(text, fidelity.margin_verdict([gap], SETTLED_POINTS), T.text(
        'claim_table2_evidence', setting=_fallback_note(s, default), iid=top_k(s, 'IID'),
        non_iid=top_k(s, 'non-IID'), gap=gap, split=f'; {split_note}' if split_note else '',
        others=f'; other selections: {", ".join(others)} points' if others else ''))
    claims.append(seed_checks.restate(claim, figs, 'a_dpfl_table2_mnist',
                                      s == seed_checks.A_DPFL_SETTING)
                  if dataset == 'mnist' else claim)
  return claims


def _fidelity(figs: str) -> list[str]:
  """Issue 42's table: every paper number attempted under tffdp's default reading and the
  best other reading run, and the paper's claims."""
  return [*fidelity.section(*fidelity_items(figs)), '', T.text(
      'fidelity_readings', default=_label(_default_setting(figs)), first=_label(FIRST),
      settled=SETTLED_POINTS, sigmas=', '.join(f'{s}' for s, _ in PAPER_FIG5_HOLDS[1:]))]


def fidelity_items(figs: str) -> tuple[list[fidelity.PaperNumber], list[fidelity.Claim]]:
  """Table 2's and Fig. 5's numbers under both readings, and the claims of Figs. 4, 6 and
  Table 2."""
  settings, default = _settings_present(figs), _default_setting(figs)
  return (_fidelity_numbers(figs, settings, default),
          _fidelity_claims(figs, settings, default))


def _ceiling_section(figs) -> list[str]:
  """Fidelity pass 2, item 4: non-private FedAvg on Table 2's IID split."""
  from experiments.a_dpfl import ceiling as a_dpfl_ceiling  # pylint: disable=g-import-not-at-top
  rows = _rows(os.path.join(figs, 'ceiling.csv'))
  if not rows:
    return T.lines('ceiling_not_run') + ['']
  fedavg = _ceiling_rows(figs, a_dpfl_ceiling.FEDAVG)
  rates = lambda d: ' '.join(dict.fromkeys(f'{float(r["learning_rate"]):g}' for r in fedavg
                                           if r['dataset'] == d))
  out = [*T.lines('ceiling', rates=rates('mnist'), cifar10=T.text(
      'ceiling_cifar10', rates=rates('cifar10')) if rates('cifar10') else '',
                  epochs=', '.join(dict.fromkeys(r['local_epochs'] for r in rows))), '',
         *T.table('ceiling_table', [dict(r, method=r.get('method') or 'FedAvg',
                                         dataset=_DATASET.get(r['dataset'], r['dataset']),
                                         paper=r['paper_private_iid'] or '-') for r in rows])]
  for dataset in ('mnist', 'cifar10'):
    iid = [r for r in fedavg if r['partition'] == 'iid' and r['dataset'] == dataset]
    if iid:
      out += _ceiling_best(figs, dataset, iid)
  return out + ['']


_DATASET = {'mnist': 'MNIST', 'cifar10': 'CIFAR-10'}


def _ceiling_best(figs, dataset: str, iid: list[dict]) -> list[str]:
  """The best non-private IID run of `dataset` against Table 2's private IID cell (and
  on MNIST, the A-DPFL no-noise controls' cause of its miss)."""
  out = []
  if iid:
    best = max(iid, key=lambda r: float(r['final_test_accuracy']))
    acc, paper = float(best['final_test_accuracy']), 100 * PAPER_T2[(dataset, 'IID')]
    gain = (f', {float(best["gain_last_10pct"]):+.2f} points over the last 10% of rounds'
            if best['gain_last_10pct'] not in ('', None) else '')
    others = ', '.join(f'lr {r["learning_rate"]}: {r["final_test_accuracy"]}%' for r in iid
                       if r is not best)
    verdict = T.text('ceiling_within' if fidelity.within('accuracy', paper, acc)
                     else 'ceiling_below', paper=paper, rounds=best['rounds'])
    out += ['', T.text('ceiling_best', accuracy=acc, learning_rate=best['learning_rate'],
                       gain=gain, others='; at ' + others if others else '', verdict=verdict,
                       dataset=_DATASET.get(dataset, dataset))]
    default = _default_setting(figs)
    private = _table2_readings(figs, [default], dataset, 'IID').get(_reading(default))
    cause = (_control_cause(figs, paper, private)
             if private is not None and dataset == 'mnist' else None)
    if cause:
      out += [f'- {cause[0].upper()}{cause[1:]} (the private run: {private:.2f}%).']
  return out


def build(figs: str) -> str:
  settings = _settings_present(figs)
  out = [*T.lines('intro'), '', *_fidelity(figs), '']
  out += _sweep_section(figs)
  out += _ceiling_section(figs)
  out += _cifar10_pilot_section(figs)
  for e in sorted(settings, reverse=True):
    out += [f'## Figures with {_label(e)}'
            + (' (first regeneration, before issue 11)' if e == FIRST else ''), '']
    out += _figure_sections(figs, e)
  rerun = [e for e in settings if e != FIRST]
  if rerun:
    out += _not_rerun(figs, max(rerun))
  out += parked_section(figs)
  out += ['## What regenerating it costs', '', *cost_section('a_dpfl')]
  out += ['## Rounds that trained nothing', '', *untrained_rounds_section(figs), '']
  out += [*T.lines('notes'), *_cl_fl_noise_note(figs), *T.lines('wall_note'), '']
  return '\n'.join(out) + '\n'


def _not_rerun(figs: str, setting: Setting, costs: str = COSTS_CSV) -> list[str]:
  """Issue 11's "say what was not rerun and how long it would take", for `setting`: each
  missing artefact's command and its cost (`common.missing_items`: per run, the mean
  projected run of the same artefact with this setting, else of its E = 1 artefact, in
  the cost table `costs`)."""
  sfx, flags = _sfx(setting), _flags(setting)
  like = lambda artefact: (artefact + sfx, artefact)
  def missing_curves(folder):  # Fig. 4's curves (paper's and variants) without a run copy
    return [slug for slug in [*common.LABELS, *common.VARIANTS]
            if not os.path.exists(os.path.join(folder, slug, 'summary.json'))]

  fig4a = os.path.join(figs, f'fig4_mnist{sfx}')
  items = []
  if os.path.isdir(fig4a):
    missing = missing_curves(fig4a)
    if missing:
      items.append(Missing(f'Fig. 4a (MNIST), {", ".join(map(common.label_of, missing))}',
                           f'python -m experiments.a_dpfl.fig4 --dataset mnist{flags}',
                           len(missing), like('fig4_mnist')))
  missing = missing_curves(os.path.join(figs, f'fig4_cifar10{sfx}'))
  first = [s for s in missing if s in ('fedavg', 'a_dpfl')]
  items += [Missing(f'Fig. 4b (CIFAR-10), {", ".join(map(common.label_of, group))}{note}',
                   f'python -m experiments.a_dpfl.fig4 --dataset cifar10{flags}' + extra,
                   len(group), like('fig4_cifar10'))
           for group, note, extra in (
               (first, ' (the rows issue 11 asks for at least)',
                f' --methods {" ".join(first)} --variants'),
               ([s for s in missing if s not in first], '', '')) if group]
  if _rows(os.path.join(figs, f'fig6_mnist{sfx}.csv')) is None:
    ks = [k for k in K_VALUES if k != REUSED_K and not os.path.exists(
        os.path.join(figs, f'fig6_mnist{sfx}', f'k{k:g}', 'summary.json'))]
    if ks:
      items.append(Missing(f'Fig. 6 (MNIST), k = {", ".join(f"{k:g}" for k in ks)}',
                           f'python -m experiments.a_dpfl.fig6{flags}', len(ks),
                           like('fig6_mnist')))
  if not any(r['dataset'] == 'cifar10' for r in _rows(os.path.join(figs, f'table2{sfx}.csv'))
             or []):
    items.append(Missing('Table 2 (CIFAR-10), the three IID rows (its non-IID rows are Fig. '
                         '4b\'s A-DPFL runs)', f'python -m experiments.a_dpfl.table2 --datasets '
                         f'cifar10{flags}', len(common.SELECTIONS), like('fig4_cifar10')))
  if not items:
    return []
  return [*T.lines('not_rerun', setting=_label(setting)), '', *missing_items('a_dpfl', items, costs),
          '', *_pilot_warning(figs, setting)]


def _cl_fl_noise_note(figs: str) -> list[str]:
  """Why CL-FL's accuracy depends on the cohort size, from its CIFAR-10 and MNIST configs."""
  configs = {}
  for dataset in ('cifar10', 'mnist'):
    path = os.path.join(figs, f'fig4_{dataset}', 'cl_fl', 'config.json')
    if not os.path.exists(path):
      return []
    with open(path) as f:
      configs[dataset] = json.load(f)
  # tff DifferentiallyPrivateFactory.gaussian_fixed: noise N(0, (sigma S)^2) on the sum,
  # divided by the expected cohort.
  std = {d: c['noise_multiplier'] * c['clip_norm'] / c['clients_per_round']
         for d, c in configs.items()}
  from tffdp import models  # pylint: disable=g-import-not-at-top
  c = configs['cifar10']
  dim = models.count_params(c['model'], (32, 32, 3), 10)
  return [T.text('cl_fl_noise', clients=c['clients'], cohort=c['clients_per_round'],
                 std=std['cifar10'], std_mnist=std['mnist'],
                 clients_mnist=configs['mnist']['clients'],
                 dim=dim, norm=std['cifar10'] * dim ** 0.5, clip=c['clip_norm'])]


def _slug(label: str) -> str:
  return common.slug_of(label)


def main(argv=None) -> int:
  return report_main('python -m experiments.a_dpfl.report', __doc__, 'figures/a_dpfl', build, argv)


if __name__ == '__main__':
  raise SystemExit(main())
