"""Writes `figures/adap_dp_fl/README.md` from the committed results (no numbers typed).

    python -m experiments.adap_dp_fl.report [--figures-dir figures/adap_dp_fl]

Reads `fig3.csv` ... `fig6.csv` and the runs' `config.json` / `summary.json` copies in
`runs/`; figures not regenerated yet, or runs still in progress, are listed as such.
"""

from __future__ import annotations

import json
import math
import os

from experiments.adap_dp_fl import common
from experiments import fidelity
from experiments import seed_checks
from experiments.common import cost_section, parked_section, report_main
from experiments.common import read_rows as _rows
from experiments.common import copied_run_file
from experiments.report_template import Template
from tffdp import runner

T = Template('adap_dp_fl')


def _run_doc(figs, run_dir, name):
  path = copied_run_file(figs, run_dir, name)
  if path is None:
    return {}
  with open(path) as f:
    return json.load(f)


def _table(figs, rows, first_col, paper_col):
  def cells(r):
    profile = _run_doc(figs, r['run'], 'profile.json')
    return dict(r, dataset=common.LABEL[r['dataset']], paper=r[paper_col],
                stop=runner.stop_kind(_run_doc(figs, r['run'], 'summary.json')) or 'round cap',
                per_round=T.text('per_round', profile) if profile else '-')
  return T.table('run_table', [cells(r) for r in rows], first_col=first_col)


def _seed_spread(figs, dataset) -> str:
  """The seed spread of Fig. 4's constant sigma = 3 curve (`adap_dp_fl.seeds`)."""
  from experiments.adap_dp_fl import seeds as adap_dp_fl_seeds  # pylint: disable=g-import-not-at-top
  s = adap_dp_fl_seeds.spread(_rows(os.path.join(figs, 'seeds.csv')) or [], dataset)
  if s is None:
    return None, T.text('spread_unmeasured')
  return s[0], T.text('spread', range=s[0], std=s[1], seeds=s[2])


def _ordering(rows, dataset, figs='') -> str:
  """Fig. 4's curves of `dataset` ranked by the paper's and by tffdp's test accuracy,
  with the seed spread and the adjacent gaps it does not settle."""
  rows = [r for r in rows if r['dataset'] == dataset]
  def rank(col):
    ranked = sorted(rows, key=lambda r: -float(r[col]))
    return [r['curve'] for r in ranked], ' > '.join(
        T.text('ranked', curve=r['curve'], acc=r[col]) for r in ranked)
  paper_order, paper_text = rank('paper_test_accuracy')
  tffdp_order, tffdp_text = rank('tffdp_test_accuracy')
  spread, spread_text = _seed_spread(figs, dataset)
  unsettled = ''
  if spread is not None:
    acc = sorted((float(r['tffdp_test_accuracy']), r['curve']) for r in rows)[::-1]
    close = [f'{a[1]} / {b[1]} ({a[0] - b[0]:.2f})' for a, b in zip(acc, acc[1:])
             if a[0] - b[0] <= spread]
    unsettled = T.text('unsettled', close='; '.join(close) if close else 'none')
  return T.text('ordering', dataset=common.LABEL[dataset], paper=paper_text, tffdp=tffdp_text,
                verdict='reproduces' if paper_order == tffdp_order else 'does **not** reproduce',
                spread=spread_text, unsettled=unsettled)


def _adaptive_gap(rows, dataset, spread: str) -> str:
  """Fig. 5: each Adap DP-FL run's test accuracy minus DP-FL's, paper and tffdp (points)."""
  rows = [r for r in rows if r['dataset'] == dataset]
  base = next(r for r in rows if r['curve'].startswith('DP-FL'))
  parts = [f"{r['curve']}: {float(r['tffdp_test_accuracy']) - float(base['tffdp_test_accuracy']):+.2f}"
           for r in rows if r is not base]
  paper = float(rows[0]['paper_test_accuracy']) - float(base['paper_test_accuracy'])
  return T.text('adaptive_gap', dataset=common.LABEL[dataset], paper=paper,
                parts='; '.join(parts), spread=spread)


def _collapse(figs, rows, dataset) -> str:
  """Fig. 5: where each Adap DP-FL run's clipping threshold and test accuracy ended."""
  parts = []
  for r in rows:
    if r['dataset'] != dataset or not r['curve'].startswith('Adap'):
      continue
    path = os.path.join(figs, 'runs', os.path.basename(r['run']), 'metrics_evaluated.csv')
    evaluated = _rows(path) or []
    if not evaluated:
      continue
    last = evaluated[-1]
    frozen = int(last['round'])  # the first round from which accuracy stays at its final value
    for e in reversed(evaluated):
      if abs(float(e['test_accuracy']) - float(last['test_accuracy'])) >= 1e-4:
        break
      frozen = int(e['round'])
    parts.append(T.text('collapse', last, curve=r['curve'], frozen=frozen,
                        accuracy=100 * float(last['test_accuracy'])))
  return f"{common.LABEL[dataset]}: " + '; '.join(parts) + '.' if parts else ''


def _clipping_notes(figs) -> list[str]:
  """The Notes on eq. 6's threshold and the clipping-norm query, computed from Fig. 3's runs."""
  fig3 = {(r['dataset'], r['curve']): r for r in _rows(os.path.join(figs, 'fig3.csv')) or []}
  def evaluated(dataset):
    row = fig3.get((dataset, 'adaptive clipping, budget on the paper\'s count'))
    return (_rows(os.path.join(figs, 'runs', os.path.basename(row['run']),
                               'metrics_evaluated.csv')) or []) if row else []
  out = T.lines('clipping_notes')
  for d, key, block in (('mnist', 'clip_norm', 'clipping_mnist'),
                        ('fashion_mnist', 'clip_norm_max', 'clipping_fmnist')):
    rows = evaluated(d)
    if rows:
      out.append(T.text(block, first=rows[0][key], last=rows[-1][key],
                        first_round=rows[0]['round'], last_round=rows[-1]['round'],
                        alpha=common.PAPER[d]['clipping_factor']))
  out.append(T.text('joint_query'))
  joint = fig3.get(('mnist', 'adaptive clipping, budget on epsilon_guaranteed'))
  if joint:
    out.append(T.text('joint_query_cost', joint, sigma=common.FIG3_SIGMA,
                      joint=common.FIG3_SIGMA / math.sqrt(2)))
  return out + ['']


_READINGS = (
    ('eq. 6 as written (clipped norms)', lambda c: c in (
        "adaptive clipping, budget on the paper's count", "Adap DP-FL, budget on the paper's count")),
    ('unclipped norms', lambda c: 'unclipped norms' in c),
    ('norms clipped at C_max', lambda c: 'C_max' in c),
    ('constant C = 1.0', lambda c: c.startswith('constant C') or c.startswith('DP-FL')),
)


def _what_changed_row(figs, name, title, d, rs) -> tuple[str, bool]:
  """One figure's readings on one dataset: `(line, whether all readings ran)`."""
  parts, accs = [], {}
  for label, match in _READINGS:
    r = next((r for r in rs if match(r['curve'])), None)
    if r is None:
      continue
    accs[label] = float(r['tffdp_test_accuracy'])
    evaluated = _rows(os.path.join(figs, 'runs', os.path.basename(r['run']),
                                   'metrics_evaluated.csv')) or []
    c = evaluated[-1].get('clip_norm') if evaluated else None
    parts.append(T.text('reading_result', label=label, accuracy=r['tffdp_test_accuracy'],
                        final=T.text('reading_final_clip', clip_norm=c)
                        if c not in (None, '') else ''))
  if len(parts) <= 2:
    return T.text('what_changed_missing', title=title, dataset=common.LABEL[d], name=name), False
  paper = next((r['paper_test_accuracy'] for r in rs if r['paper_test_accuracy']), '')
  constant = accs.get(_READINGS[-1][0], math.inf)
  above = [k for k, a in accs.items() if k != _READINGS[-1][0] and a > constant]
  return T.text('what_changed_row', title=title, dataset=common.LABEL[d],
                parts='; '.join(parts), above=', '.join(above) or 'none',
                paper=T.text('what_changed_paper', paper=paper)
                if paper and name == 'fig5' else ''), True


def _what_changed(figs) -> list[str]:
  """Issue 11: each threshold statistic's accuracy and final threshold, and the seed spread."""
  out, found = [*T.lines('what_changed'), ''], False
  for name, title in (('fig3', 'Fig. 3 (sigma 1.1)'), ('fig5', 'Fig. 5 (noise decay)')):
    rows = _rows(os.path.join(figs, f'{name}.csv')) or []
    for d in common.DATASETS:
      rs = [r for r in rows if r['dataset'] == d]
      if rs:
        line, ran = _what_changed_row(figs, name, title, d, rs)
        out.append(line)
        found = found or ran
  for d in common.DATASETS:
    spread, text = _seed_spread(figs, d)
    if spread is not None:
      found = True
      out.append(f'- {common.LABEL[d]}: {text}.')
  if not found:
    out.append(T.text('seed_spread_unmeasured'))
  return out + ['']


def _commands(figs, rows):
  """One line per distinct command, naming its runs, seeds and machine."""
  by_command: dict[str, list[str]] = {}
  machines = set()
  for r in rows:
    cfg = _run_doc(figs, r['run'], 'config.json')
    if cfg:
      by_command.setdefault(' '.join(cfg['command']), []).append(
          f"`{os.path.basename(r['run'])}` (seed {cfg['seed']})")
      machines.add(f"{cfg['machine']['platform']}, {cfg['machine']['cpus']} CPUs")
  lines = [f'- `{c}`: ' + ', '.join(runs) for c, runs in by_command.items()]
  return lines + [f"- machine: {'; '.join(sorted(machines))}"] if lines else []


# --- Fidelity: every paper number attempted (issue 42) ---

CONTROLS = 'python -m experiments.adap_dp_fl.controls'
DEFAULT_CURVE = {  # tffdp's default reading of each figure's adaptive run
    'fig3': 'adaptive clipping, budget on epsilon_guaranteed',
    'fig5': 'Adap DP-FL, budget on epsilon_guaranteed',
}


def _reading_name(curve: str) -> str:
  """A fig3/fig5 curve as a reading: `Adap DP-FL, budget on the paper's count` ->
  `eq. 6 as written, budget on the paper's count`."""
  for prefix in ('adaptive clipping, ', 'Adap DP-FL, '):
    if curve.startswith(prefix):
      rest = curve[len(prefix):]
      return rest if rest.startswith(('noisy mean', 'norms clipped')) else (
          f'eq. 6 as written, {rest}')
  return curve


def _control_cause(ctrl: list[dict], paper: float, rounds: int, sigma_min_cell: bool,
                   no_stop: str = '') -> str:
  """The cause a control of `controls.csv` gives a miss of `paper` (%) whose default run
  made `rounds` rounds, or `fidelity.NO_CAUSE`: a noise-free control of at least as many
  rounds that ends below `paper` (without clipping: the setup itself; with C = 1: the
  clipping), or, for the sigma_min cell the controls accompany, the author's CNN code or
  twice the learning rate reaching `paper`; then the no-budget-stop control of the cell
  (sigma_min's, or the `--no-stop` one labelled `no_stop`, e.g. `sigma = 3`):
  `_no_stop_cause`."""
  from experiments.adap_dp_fl import controls as adap_dp_fl_controls  # pylint: disable=g-import-not-at-top
  def row(prefix):
    return next((r for r in ctrl if r['curve'].startswith(prefix)), None)
  for prefix, what in (('no noise, no clipping', 'without noise or clipping'),
                       ('no noise, clipped', 'without noise, at the same clip C = 1,')):
    r = row(prefix)
    if r and int(r['rounds']) >= rounds and float(r['tffdp_test_accuracy']) < paper:
      return T.text('cause_noise_free', what=what, accuracy=float(r['tffdp_test_accuracy']),
                    rounds=r['rounds'], controls=CONTROLS, curve=r['curve'],
                    default_rounds=rounds, paper=paper)
  # Readings of the sigma_min run that reach the paper's number: (curve, its cause).
  for prefix, block in ((adap_dp_fl_controls.AUTHOR_CNN, 'cause_author_cnn'),
                        ('lr x 2', 'cause_lr2'), (adap_dp_fl_controls.FRESH_ADAM,
                                                  'cause_fresh_adam')):
    r = row(prefix)
    if sigma_min_cell and r:
      acc = float(r['tffdp_test_accuracy'])
      if acc >= paper or fidelity.within('accuracy', paper, acc):
        return T.text(block, accuracy=acc, controls=CONTROLS, curve=r['curve'])
  name = adap_dp_fl_controls.NO_STOP
  r = (row(f'{name} (') if sigma_min_cell else row(f'{name}, {no_stop} (') if no_stop
       else None)
  no_stop_arg = no_stop.split(' = ')[-1] if '=' in no_stop else 'decay'
  return _no_stop_cause(r, paper, rounds,
                        CONTROLS if sigma_min_cell else f'{CONTROLS} --no-stop {no_stop_arg}')


def _no_stop_cause(r: dict | None, paper: float, rounds: int, command: str) -> str:
  """The cause the no-budget-stop control row `r` of `controls.csv` (run by `command`)
  gives a miss of `paper` (%) whose run the budget stopped after `rounds` rounds:
  reaching `paper` past that round, or never within its own rounds; else
  `fidelity.NO_CAUSE`."""
  if r and r.get('first_round_within_tolerance') not in (None, ''):
    at = int(float(r['first_round_within_tolerance']))
    guaranteed, claimed = (float(r.get(k) or 'nan') for k in ('epsilon_guaranteed_there',
                                                             'epsilon_claimed_there'))
    if at > rounds:
      return T.text('cause_no_stop', paper=paper, at=at, controls=command, curve=r['curve'],
                    epsilon=guaranteed, rounds=rounds,
                    claimed=T.text('no_stop_claimed', claimed=claimed)
                    if not math.isnan(claimed) and claimed != guaranteed else '')
  elif r and int(r['rounds']) > rounds:
    return T.text('cause_no_stop_never', paper=paper, controls=command, curve=r['curve'],
                  rounds=r['rounds'], accuracy=float(r['tffdp_test_accuracy']),
                  epsilon=float(r['epsilon_guaranteed']))
  return fidelity.NO_CAUSE


def _fidelity_numbers(figs: str) -> list:
  from experiments.adap_dp_fl import controls as adap_dp_fl_controls  # pylint: disable=g-import-not-at-top
  fig4 = _rows(os.path.join(figs, 'fig4.csv')) or []
  fig5 = _rows(os.path.join(figs, 'fig5.csv')) or []
  fig6 = _rows(os.path.join(figs, 'fig6.csv')) or []
  controls = _rows(os.path.join(figs, 'controls.csv')) or []
  numbers = {4: [], 5: [], 6: []}  # by figure
  for d in common.DATASETS:
    paper, label = common.PAPER_RESULTS[d], common.LABEL[d]
    ctrl = [r for r in controls if r['dataset'] == d]
    f4 = {r['curve']: r for r in fig4 if r['dataset'] == d}
    sigma_min = adap_dp_fl_controls.sigma_min(d)
    cells = [('noise decay', 'noise decay', paper['decay'], False)] + [
        (f'constant sigma = {s:g}', f'constant sigma = {s:g}', v, s == sigma_min)
        for s, v in paper['constant'].items()]
    for curve, what, value, is_min in cells:
      r = f4.get(curve)
      best, reading = None, ''
      if is_min:   # the readings among the controls: no hold-out, the author's CNN code
        readings = [(float(c['tffdp_test_accuracy']), f'{c["curve"]} (controls)')
                    for c in ctrl if c['curve'].startswith(
                        ('no validation hold-out', adap_dp_fl_controls.AUTHOR_CNN))]
        if readings:
          best, reading = min(readings, key=lambda x: abs(x[0] - value))
      numbers[4].append(fidelity.PaperNumber(
          f'Fig. 4, {label}, {what}', 'accuracy', value,
          float(r['tffdp_test_accuracy']) if r else None, best, reading,
          _control_cause(ctrl, value, int(r['rounds']), is_min,
                         curve.replace('constant ', '')) if r else fidelity.NO_CAUSE))
    f5 = [r for r in fig5 if r['dataset'] == d and not r['curve'].startswith('DP-FL')]
    default = next((r for r in f5 if r['curve'] == DEFAULT_CURVE['fig5']), None)
    others = {_reading_name(r['curve']): float(r['tffdp_test_accuracy'])
              for r in f5 if r is not default}
    found = sorted((abs(v - paper['adap_dp_fl']), k) for k, v in others.items())
    best = others[found[0][1]] if found else None
    numbers[5].append(fidelity.PaperNumber(
        f'Fig. 5, {label}, Adap DP-FL', 'accuracy', paper['adap_dp_fl'],
        float(default['tffdp_test_accuracy']) if default else None, best,
        found[0][1] if found else '', _fig5_cause(figs, ctrl, paper['adap_dp_fl'], default, f5)
        if default else fidelity.NO_CAUSE))
    decay = next((r for r in fig6 if r['dataset'] == d and r['run'].startswith('noise decay')),
                 None)
    numbers[6].append(fidelity.PaperNumber(
        f'Fig. 6, {label}, sigma at epsilon = {common.BUDGET:g} (noise decay, C = '
        f'{common.CONSTANT_CLIP:g})', 'sigma', paper['final_sigma'],
        float(decay['tffdp_final_sigma']) if decay else None))
  return [n for fig in sorted(numbers) for n in numbers[fig]]


def _fig5_cause(figs: str, ctrl: list[dict], paper: float, default: dict,
                fig5: list[dict]) -> str:
  """The cause of a miss of Fig. 5's Adap DP-FL number: a noise-free control (as Fig. 4's
  cells), else the no-budget-stop control of a reading in
  `controls.FIG5_NO_STOP` (`--no-stop fig5_unclipped`) against that reading's own run,
  with the default run's final mean threshold beside it."""
  from experiments.adap_dp_fl import controls as ctl  # pylint: disable=g-import-not-at-top
  cause = _control_cause(ctrl, paper, int(default['rounds']), False)
  for arg, (tag, _, label, _) in ctl.FIG5_NO_STOP.items():
    run = next((r for r in fig5 if os.path.basename(r.get('run', '')).startswith(
        f'{default["dataset"]}_{tag}_seed')), None)
    if cause != fidelity.NO_CAUSE or run is None:
      continue
    control = next((r for r in ctrl if r['curve'].startswith(f'{ctl.NO_STOP}, {label} (')),
                   None)
    cause = _no_stop_cause(control, paper, int(run['rounds']), f'{CONTROLS} --no-stop {arg}')
    if cause != fidelity.NO_CAUSE:
      evaluated = _rows(os.path.join(figs, 'runs', os.path.basename(default.get('run', '')),
                                     'metrics_evaluated.csv')) or []
      clip = evaluated[-1].get('clip_norm') if evaluated else None
      if clip not in (None, ''):
        cause += T.text('cause_fig5_default', accuracy=float(default['tffdp_test_accuracy']),
                        clip_norm=float(clip))
  return cause


def _fidelity_claims(figs: str) -> list:
  rows = {name: [r for r in _rows(os.path.join(figs, f'{name}.csv')) or []]
          for name in ('fig3', 'fig4', 'fig5')}
  claims = {3: [], 4: [], 5: []}  # by figure
  for d in common.DATASETS:
    label = common.LABEL[d]
    spread, spread_text = _seed_spread(figs, d)
    acc = {name: {r['curve']: float(r['tffdp_test_accuracy']) for r in rs if r['dataset'] == d}
           for name, rs in rows.items()}
    def others(name, skip):
      return '; '.join(f'{_reading_name(c)} {a:.2f}%' for c, a in acc[name].items()
                       if c not in skip and not c.startswith(('constant', 'DP-FL')))
    # Fig. 3: adaptive clipping above constant C.
    text = T.text('claim_fig3', dataset=label, clip=common.CONSTANT_CLIP,
                  sigma=common.FIG3_SIGMA)
    a, c = acc['fig3'].get(DEFAULT_CURVE['fig3']), acc['fig3'].get('constant C = 1.0')
    if a is None or c is None:
      claims[3].append(fidelity.Claim(text, 'not run', 'The default adaptive or the constant '
                                      'run is missing.'))
    else:
      claims[3].append(fidelity.Claim(text, fidelity.margin_verdict([a - c], spread), T.text(
          'claim_fig3_evidence', reading=_reading_name(DEFAULT_CURVE['fig3']), adaptive=a,
          constant=c, gap=a - c, spread=spread_text,
          others=others('fig3', {DEFAULT_CURVE['fig3']}))))
    # Fig. 4: noise decay above every constant sigma.
    paper = common.PAPER_RESULTS[d]
    text = T.text('claim_fig4', dataset=label, decay=paper['decay'],
                  constants=' / '.join(f'{v:g}' for v in paper['constant'].values()))
    decay = acc['fig4'].get('noise decay')
    const = {s: acc['fig4'].get(f'constant sigma = {s:g}') for s in paper['constant']}
    if decay is None or None in const.values():
      claims[4].append(fidelity.Claim(text, 'not run', 'Not every Fig. 4 curve is run.'))
    else:
      claim = fidelity.Claim(
          text, fidelity.margin_verdict([decay - v for v in const.values()], spread), T.text(
              'claim_fig4_evidence', decay=decay, spread=spread_text, constants=', '.join(
                  f'sigma {s:g} {v:.2f}% ({decay - v:+.2f})' for s, v in const.items())))
      check = f'adap_dp_fl_fig4_{d}'
      claims[4].append(seed_checks.restate(claim, figs, check)
                       if check in seed_checks.CHECKS else claim)
    # Fig. 5: Adap DP-FL above DP-FL.
    text = T.text('claim_fig5', dataset=label)
    a = acc['fig5'].get(DEFAULT_CURVE['fig5'])
    base = next((v for k, v in acc['fig5'].items() if k.startswith('DP-FL')), None)
    if a is None or base is None:
      claims[5].append(fidelity.Claim(text, 'not run', 'Adap DP-FL or DP-FL is not run.'))
    else:
      claims[5].append(fidelity.Claim(text, fidelity.margin_verdict([a - base], spread), T.text(
          'claim_fig5_evidence', reading=_reading_name(DEFAULT_CURVE['fig5']), adaptive=a,
          constant=base, gap=a - base, spread=spread_text,
          others=others('fig5', {DEFAULT_CURVE['fig5']}))))
  return [c for fig in sorted(claims) for c in claims[fig]]


def _fidelity(figs: str) -> list[str]:
  """Issue 42's table: every paper number attempted under tffdp's default reading and the
  best other reading run, and the paper's claims."""
  return [*fidelity.section(*fidelity_items(figs)), '',
          T.text('fidelity_readings', controls=CONTROLS)]


def fidelity_items(figs: str) -> tuple[list[fidelity.PaperNumber], list[fidelity.Claim]]:
  """Figs. 4-6's numbers under both readings, and the claims of Figs. 3-5."""
  return _fidelity_numbers(figs), _fidelity_claims(figs)


def _control_line(rs: dict) -> str | None:
  """One dataset's controls (`curve -> row`): what clipping, noise and each reading cost."""
  from experiments.adap_dp_fl import controls as ctl  # pylint: disable=g-import-not-at-top
  fig4 = next((r for c, r in rs.items() if c.endswith('(Fig. 4)')), None)
  acc = lambda key: next((float(r['tffdp_test_accuracy']) for c, r in rs.items()
                          if c.startswith(key)), None)
  clipped, free = acc('no noise, clipped'), acc('no noise, no clip')
  if fig4 is None or None in (clipped, free):
    return None
  ours, paper = float(fig4['tffdp_test_accuracy']), float(fig4['paper_test_accuracy'])
  parts = [T.text('control_split', dataset=common.LABEL[fig4['dataset']], paper=paper,
                  ours=ours, gap=ours - paper, rounds=fig4['rounds'], free=free,
                  clipped=clipped, clipping=free - clipped, noise=clipped - ours)]
  if free < paper:
    parts.append(T.text('control_out_of_reach', free=free))
  for key, block in (('no validation', 'control_no_validation'), ('lr x 2', 'control_lr2'),
                     (ctl.AUTHOR_CNN, 'control_author_cnn'),
                     (ctl.FRESH_ADAM, 'control_fresh_adam')):
    if acc(key) is not None:
      parts.append(T.text(block, accuracy=acc(key), gap=acc(key) - ours))
  no_stop = next((r for c, r in rs.items() if c.startswith(ctl.NO_STOP)), None)
  if no_stop is not None:
    at = no_stop.get('first_round_within_tolerance') or ''
    tolerance = (T.text('control_no_stop_within', paper=paper, at=int(float(at)),
                        epsilon=float(no_stop['epsilon_guaranteed_there']))
                 if at != '' else T.text('control_no_stop_never', paper=paper))
    parts.append(T.text('control_no_stop', accuracy=float(no_stop['tffdp_test_accuracy']),
                        rounds=no_stop['rounds'], tolerance=tolerance,
                        epsilon=float(no_stop['epsilon_guaranteed'])))
  return T.text('control_line', parts='; '.join(parts))


def _controls(figs) -> list[str]:
  """Fidelity pass 2, item 3: `adap_dp_fl.controls`' rows and what they split the gap into."""
  from experiments.adap_dp_fl import controls as adap_dp_fl_controls  # pylint: disable=g-import-not-at-top
  rows = _rows(os.path.join(figs, 'controls.csv'))
  if not rows:
    return T.lines('controls_not_run') + ['']
  out = [*T.lines('controls', no_stop_factor=adap_dp_fl_controls.NO_STOP_FACTOR), '',
         *_table(figs, rows, 'curve', 'paper_test_accuracy'), '']
  for d in dict.fromkeys(r['dataset'] for r in rows):
    line = _control_line({r['curve']: r for r in rows if r['dataset'] == d})
    if line:
      out += [line, '']
  return out


def _figure_section(figs, name) -> list[str]:
  """Figs. 3-5: the plots, the paper's numbers, the runs' table and what they say."""
  rows = _rows(os.path.join(figs, f'{name}.csv'))
  out = [f'## {T.text(name + "_title")}', '']
  if rows is None:
    return out + [T.text('figure_not_regenerated'), '']
  done = sorted({r['dataset'] for r in rows})
  out += [f'![{name} {d}]({name}_{d}.png)' for d in done]
  out += [f'![{name} {d} threshold]({name}_{d}_threshold.png)' for d in done
          if os.path.exists(os.path.join(figs, f'{name}_{d}_threshold.png'))]
  papers = {'fig4': '; '.join(T.text(
      'fig4_paper_item', dataset=common.LABEL[d], decay=p['decay'],
      constants=' / '.join(f'{v:g}' for v in p['constant'].values()),
      sigmas=' / '.join(f'{s:g}' for s in p['constant'])) for d, p in common.PAPER_RESULTS.items()),
            'fig5': ', '.join(f'{p["adap_dp_fl"]:g}% ({common.LABEL[d]})'
                              for d, p in common.PAPER_RESULTS.items())}
  out += ['', T.text(f'{name}_paper', papers=papers.get(name)), '',
          *_table(figs, rows, 'curve', 'paper_test_accuracy'), '']
  for d in done:
    if name == 'fig4':
      out += [_ordering(rows, d, figs), '']
    elif name == 'fig5':
      out += [_adaptive_gap(rows, d, _seed_spread(figs, d)[1]), '', _collapse(figs, rows, d), '']
  missing = set(common.DATASETS) - set(done)
  if missing:
    out += [f"Not regenerated yet: {', '.join(common.LABEL[d] for d in sorted(missing))}.", '']
  return out + ['Commands:', '', *_commands(figs, rows), '']


def _fig6(figs) -> list[str]:
  rows = _rows(os.path.join(figs, 'fig6.csv'))
  out = [*T.lines('fig6'), '']
  if rows is None:
    return out + [T.text('fig6_not_regenerated'), '']
  done = sorted({r['dataset'] for r in rows})
  papers = ', '.join(f'{common.PAPER[d]["sigma_0"]:g} -> {p["final_sigma"]:g} '
                     f'({common.LABEL[d]})' for d, p in common.PAPER_RESULTS.items())
  return out + [f'![fig6 {d}](fig6_{d}.png)' for d in done] + [
      '', T.text('fig6_paper', papers=papers, budget=common.BUDGET), '',
      *T.table('fig6_table', [dict(r, dataset=common.LABEL[r['dataset']]) for r in rows]), '']


def build(figs: str) -> str:
  out = [*T.lines('intro'), '', *_fidelity(figs), '']
  for name in ('fig3', 'fig4', 'fig5'):
    out += _figure_section(figs, name)
  out += [*_fig6(figs), *_controls(figs), *_what_changed(figs),
          '## What regenerating it costs', '', *cost_section('adap_dp_fl'),
          *T.lines('notes'), *_clipping_notes(figs)]
  parked = parked_section(figs)
  return '\n'.join(out + ([''] + parked if parked else [])) + '\n'


def main(argv=None) -> int:
  return report_main('python -m experiments.adap_dp_fl.report', __doc__, 'figures/adap_dp_fl', build, argv)


if __name__ == '__main__':
  raise SystemExit(main())
