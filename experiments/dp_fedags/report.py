"""Writes `figures/dp_fedags/README.md` from the committed results (no numbers typed).

    python -m experiments.dp_fedags.report [--figures-dir figures/dp_fedags]

Reads `table4.csv`, `mia.csv`, `pilot.csv` and the runs' copies in `runs/`; what was not
regenerated is listed as such, with its command.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Optional

from experiments.dp_fedags import common as dc
from experiments.common import fmt, read_rows, report_main
from experiments.common import untrained_rounds_section
from experiments import common
from experiments import fidelity
from experiments.report_template import Template
from tffdp import config as config_lib

COMMANDS = {
    'table4': 'python -m experiments.dp_fedags.table4 --datasets mnist',
    'table4_cifar10': 'python -m experiments.dp_fedags.table4 --datasets cifar10 '
                      '--epsilons 0.5',
    'table4_cifar100': 'python -m experiments.dp_fedags.table4 --datasets cifar100 '
                       '--data-dir DIR   # DIR/cifar100/cifar-100-python.tar.gz',
    'mia': 'python -m experiments.dp_fedags.mia --datasets mnist',
    'mia_cifar10': 'python -m experiments.dp_fedags.mia --datasets cifar10 --epsilons 0.5',
    'pilot': 'python -m experiments.dp_fedags.pilot',
    'reference': 'python -m experiments.dp_fedags.reference',
    'calibrate': 'python -m experiments.dp_fedags.calibrate',
    'table4_calibrated': 'python -m experiments.dp_fedags.table4 --datasets mnist '
                         '--delta-s-scale calibrated --seeds 0 1 2',
}
_COUNT = {2: 'two', 3: 'three', 4: 'four'}
PAPER_ORDER = ('DP-FedAGS', 'DP-FedSNLC (reconstructed)', 'DP-FedAvg (reconstructed)', 'cpSGD')
T = Template('dp_fedags')
NOT_REGENERATED = T.lines('not_regenerated')


_metrics = common.copied_metrics


def _mean(rows, key, lo=1, hi=10 ** 9):
  vals = [float(r[key]) for r in rows
          if lo <= int(r['round']) <= hi and r.get(key) not in (None, '')]
  return statistics.mean(vals) if vals else math.nan


def _literal_rows(figs) -> list[dict]:
  """`table4.csv`'s rows of Amendment 1's reading (kappa 1), seed 0."""
  return [r for r in read_rows(os.path.join(figs, 'table4.csv')) or []
          if dc.table4_cell(r)[1:] == (1.0, 0)]


def _pilot(figs) -> list[str]:
  out = []
  for r in _literal_rows(figs):
    if r['method'] not in ('DP-FedAGS', 'cpSGD', 'DP-FedAvg (reconstructed)'):
      continue
    m = _metrics(figs, r['run'])
    for lo, hi in ((1, 10), (91, 100), (191, 200)):
      if not any(lo <= int(x['round']) <= hi for x in m):
        continue
      mean = lambda key, lo=lo, hi=hi: _mean(m, key, lo, hi)
      out.append(dict(
          dataset=dc.LABEL[r['dataset']], method=r['method'], epsilon=r['epsilon'],
          rounds=f'{lo}-{hi}', acc=100 * mean('test_accuracy'), lam=mean('threshold'),
          frac=mean('significant_fraction'), noise=mean('noise_std'),
          grad=mean('mean_abs_gradient'), ratio=mean('noise_std') / mean('mean_abs_gradient'),
          wmin=mean('weight_min'), wmax=mean('weight_max'),
          trials=fmt(mean('num_trials'), 4) if r['method'] == 'cpSGD' else '-'))
  lines = [*T.table('pilot_table', out), '', *T.lines('pilot_reading')] if out else []
  pilot = read_rows(os.path.join(figs, 'pilot.csv')) or []
  if pilot:
    rows = _literal_pilot_rows(pilot)
    lines += ['', *T.lines('pilot_literal', command=COMMANDS['pilot']), '',
              *T.table('pilot_literal_table', rows), '',
              *T.lines('pilot_literal_reading',
                       sigmas=' / '.join(fmt(float(r['noise_std']), 3) for r in rows),
                       epsilons=' / '.join(r['epsilon'] for r in rows),
                       ratios=' / '.join(fmt(r['ratio'], 2) for r in rows),
                       low=min(r['acc_min'] for r in rows),
                       high=max(r['acc_max'] for r in rows))]
  return lines or NOT_REGENERATED


def _literal_pilot_rows(pilot: list[dict]) -> list[dict]:
  """One row per epsilon of `pilot.csv` (Amendment 1's `Delta_S = C` runs): rounds run,
  the last round's and the range of test accuracy (%), the noise std, round 1's mean
  `|g'_j|` (the gradient before any noise reached the model) and their ratio, the mean
  perturbed fraction, and the rounds whose gradient metrics are not finite (a model the
  noise has blown up gives an infinite loss on some client)."""
  out = []
  for epsilon in dict.fromkeys(r['epsilon'] for r in pilot):
    rows = [r for r in pilot if r['epsilon'] == epsilon]
    acc = [100 * float(r['test_accuracy']) for r in rows]
    grad = float(rows[0]['mean_abs_gradient'])
    noise = float(rows[0]['noise_std'])
    bad = [r['round'] for r in rows if not math.isfinite(float(r['mean_abs_gradient']))]
    out.append(dict(epsilon=epsilon, rounds=len(rows), accuracy=acc[-1], acc_min=min(acc),
                    acc_max=max(acc), noise_std=rows[0]['noise_std'], grad=grad,
                    ratio=noise / grad, frac=_mean(rows, 'significant_fraction'),
                    nonfinite=', '.join(bad) or '-'))
  return out


def _cpsgd_true_sensitivity(figs) -> list[str]:
  """Theorem 1 per upload at the true sensitivity, from each cpSGD run's recorded m."""
  import json  # pylint: disable=g-import-not-at-top
  from tffdp import models  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import cpsgd  # pylint: disable=g-import-not-at-top
  rows = [r for r in _literal_rows(figs) if r['method'] == 'cpSGD']
  out = []
  for r in rows:
    path = os.path.join(figs, 'runs', os.path.basename(r['run']), 'config.json')
    if not os.path.exists(path):
      continue
    with open(path) as f:
      cfg = json.load(f)
    hp = cfg['method_hyperparameters']
    shape = {'mnist': (28, 28, 1)}.get(cfg['dataset'], (32, 32, 3))
    dim = models.build_keras_model(cfg['model'], shape, 100 if cfg['dataset'] == 'cifar100'
                                   else 10).count_params()
    c, s = cfg['clip_norm'], hp['quantization_step']
    eps = [cpsgd.true_sensitivity_epsilon(hp[k], cfg['delta'], s, dim, c)
           for k in ('num_trials_min', 'num_trials_max')]
    out.append(T.text('cpsgd_upload', epsilon=r['epsilon'], m_min=hp['num_trials_min'],
                      m_max=hp['num_trials_max'], eps_min=eps[0], eps_max=eps[1]))
  return [*T.lines('cpsgd_intro'), '', *out] if out else []


def _table4_orders(rs) -> list[str]:
  """Per epsilon: tffdp's and the paper's order of the methods and their gaps (one seed)."""
  out = []
  for eps in sorted({r['epsilon'] for r in rs}, key=float):
    group = {r['method']: float(r['mean_accuracy']) for r in rs if r['epsilon'] == eps}
    paper = {r['method']: float(r['paper_mean_accuracy']) for r in rs
             if r['epsilon'] == eps and r['paper_mean_accuracy']}
    ours = sorted(group, key=group.get, reverse=True)
    span = max(group.values()) - min(group.values())
    out.append(T.text(
        'table4_order', epsilon=eps, ours=' > '.join(ours),
        theirs=' > '.join(sorted(paper, key=paper.get, reverse=True)),
        gaps=', '.join(f'{m} {group[m] - paper[m]:+.2f}' for m in ours if m in paper),
        count=_COUNT.get(len(group), len(group)), span=span,
        paper_span=(max(paper.values()) - min(paper.values())) if paper else math.nan,
        verdict=T.text('table4_tie') if span < 0.5 else 'see the order above.'))
  return out


def _table4_span(rs, ref, several_epsilons: bool) -> str:
  """The range of the runs' mean accuracies against the paper's and the reference's."""
  means = [float(r['mean_accuracy']) for r in rs]
  paper_means = [float(r['paper_mean_accuracy']) for r in rs if r['paper_mean_accuracy']]
  reference = float(ref['mean_accuracy']) if ref else None
  return T.text(
      'table4_span', low=min(means), high=max(means),
      paper=T.text('table4_span_paper', low=min(paper_means), high=max(paper_means))
      if paper_means else '',
      verdict=T.text('table4_no_growth' if several_epsilons else 'table4_no_order'),
      reference=T.text('table4_span_reference', low=reference - max(means),
                       high=reference - min(means)) if ref else '',
      under_trains=T.text('table4_under_trains', reference=ref['mean_accuracy'],
                          paper=min(paper_means))
      if ref and paper_means and reference < min(paper_means) else '')


def _table4(figs) -> list[str]:
  rows = _literal_rows(figs)
  out = []
  for dataset in dc.DATASETS:
    rs = [r for r in rows if r['dataset'] == dataset]
    command = COMMANDS['table4'] if dataset == 'mnist' else COMMANDS['table4_' + dataset]
    if not rs:
      note = (T.text(f'table4_not_run_{dataset}')
              if dataset in ('cifar10', 'cifar100') else '')
      out += [T.text('table4_not_run', dataset=dc.LABEL[dataset], command=command,
                     note=note), '']
      continue
    out += [*T.lines('table4_heading', dataset=dc.LABEL[dataset], command=command,
                     runs=len(rs)), '', *T.table('table4_table', rs), '', *_table4_orders(rs)]
    run_eps = {float(r['epsilon']) for r in rs}
    missing = [e for e in dc.EPSILONS if e not in run_eps]
    if missing:
      out.append(T.text('table4_missing', missing=', '.join(f'{e:g}' for e in missing),
                        runs=len(missing) * len(dc.METHODS), dataset=dataset,
                        hours=sum(float(r['wall_seconds']) for r in rs) / len(rs) / 3600,
                        epsilons=' '.join(f'{e:g}' for e in missing)))
    ref = next((r for r in read_rows(os.path.join(figs, 'reference.csv')) or []
                if r['dataset'] == dataset), None)
    if ref:
      best = max(rs, key=lambda r: float(r['mean_accuracy']))
      out.append(T.text('table4_reference', ref, command=COMMANDS['reference'],
                        method=best['method'], epsilon=best['epsilon'],
                        gap=float(ref['mean_accuracy']) - float(best['mean_accuracy'])))
    else:
      out.append(T.text('table4_no_reference', command=COMMANDS['reference'], dataset=dataset))
    out += [_table4_span(rs, ref, len(run_eps) > 1), '']
  return out


def _calibration(figs) -> list[str]:
  """Fidelity pass 2, item 1: the kappa sweep and the clip-only control."""
  from experiments.dp_fedags import calibrate as cal  # pylint: disable=g-import-not-at-top
  rows = read_rows(os.path.join(figs, 'calibration.csv')) or []
  if not rows:
    return T.lines('calibration_not_run', command=COMMANDS['calibrate'])
  mean_n = (dc.TRAIN_EXAMPLES['mnist'] - config_lib.RunConfig.num_validation) / dc.CLIENTS
  out = [*T.lines('calibration', command=COMMANDS['calibrate'], epsilon=rows[0]['epsilon'],
                  seeds=', '.join(sorted({r.get('seed') or '0' for r in rows})),
                  literal_kappa=mean_n / (2 * dc.LEARNING_RATE['mnist']),
                  control=T.text('calibration_control') if any(
                      float(r['delta_s_scale']) == cal.CPSGD_CONTROL_SCALE for r in rows) else ''), '',
         *T.table('calibration_table', rows), '']
  by_kappa = {float(r['delta_s_scale']): float(r['mean_accuracy']) for r in rows}
  ref = next((r for r in read_rows(os.path.join(figs, 'reference.csv')) or []
              if r['dataset'] == 'mnist'), None)
  if 0.0 in by_kappa:
    clip = by_kappa[0.0]
    above = sorted(p[0] for p in dc.PAPER_TABLE4.values()
                   if p[0] > clip and not fidelity.within('accuracy', p[0], clip))
    out.append(T.text(
        'clip_only', clip=clip,
        reference=T.text('clip_only_reference', reference=ref['mean_accuracy'],
                         cost=float(ref['mean_accuracy']) - clip) if ref else '',
        noise=T.text('clip_only_noise', change=by_kappa[1.0] - clip) if 1.0 in by_kappa else '',
        out_of_reach=T.text('clip_only_out_of_reach', above=', '.join(
            f'{v:.2f}' for v in above)) if above else '.'))
  chosen = next((r for r in rows if r.get('closest_to_paper') == 'True'), None)
  if chosen:   # marked by dp_fedags_calibrate
    kappa = float(chosen['delta_s_scale'])
    out.append(T.text('closest', paper=cal.PAPER_DP_FEDAVG_EPS01, kappa=kappa,
                      accuracy=chosen['mean_accuracy'],
                      gap=float(chosen['mean_accuracy']) - cal.PAPER_DP_FEDAVG_EPS01,
                      frozen=T.text('frozen' if dc.DELTA_S_SCALE == kappa else 'not_frozen',
                                    kappa=dc.DELTA_S_SCALE)))
  return out


def _table4_calibrated(figs) -> list[str]:
  """Table IV at each kappa other than 1: seeds' mean, std and values, and the verdicts
  on the paper's rise with epsilon and its ordering (a win only when the seeds separate)."""
  rows = [r for r in read_rows(os.path.join(figs, 'table4.csv')) or []
          if dc.table4_cell(r)[1] != 1.0]
  if not rows:
    return T.lines('calibrated_not_run', command=COMMANDS['table4_calibrated'])
  out = []
  for dataset, kappa in sorted({dc.table4_cell(r)[:2] for r in rows}):
    rs = [r for r in rows if dc.table4_cell(r)[:2] == (dataset, kappa)]
    cells = {}
    for r in rs:
      cells.setdefault((float(r['epsilon']), r['method']), []).append(r)
    spreads = {k: common.SeedSpread(tuple(float(r['mean_accuracy']) for r in sorted(
        v, key=lambda r: int(r['seed'])))) for k, v in cells.items()}
    seeds = sorted({int(r['seed']) for r in rs})
    table = [dict(epsilon=e, method=m, paper=v[0]['paper_mean_accuracy'],
                  spread=spreads[(e, m)].text(),
                  per_seed=' / '.join(f'{x:.2f}' for x in spreads[(e, m)].values),
                  final=statistics.mean(float(r['final_accuracy']) for r in v),
                  epsilon_guaranteed=max(float(r['epsilon_guaranteed']) for r in v))
             for (e, m), v in sorted(cells.items(), key=lambda kv: (
                 kv[0][0], PAPER_ORDER.index(kv[0][1])))]
    out += [*T.lines('calibrated_heading', dataset=dc.LABEL[dataset], kappa=kappa, runs=len(rs),
                     seeds=', '.join(map(str, seeds))), '',
            *T.table('calibrated_table', table), '', *_code_line(figs, rs), '']
    epsilons = sorted({e for e, _ in spreads})
    methods = [m for m in PAPER_ORDER if any((e, m) in spreads for e in epsilons)]
    paper = {k: v[dc.DATASETS.index(dataset)] for k, v in dc.PAPER_TABLE4.items()}
    if len(epsilons) > 1:
      lo, hi = epsilons[0], epsilons[-1]
      rises = []
      for m in methods:
        if (lo, m) in spreads and (hi, m) in spreads:
          a, b = spreads[(hi, m)], spreads[(lo, m)]
          if a.beats(b) or b.beats(a):
            how = 'separated'
          elif min(len(a.values), len(b.values)) >= common.MIN_SEEDS:
            how = 'a tie: seeds overlap'
          else:
            how = f'a tie until {common.MIN_SEEDS} seeds separate'
          rises.append(f'{m} {a.mean - b.mean:+.2f} ({how})')
      paper_rise = [f'{dc.METHOD_LABEL[k]} {paper[(hi, k)] - paper[(lo, k)]:+.2f}'
                    for k in dc.METHODS if (hi, k) in paper and (lo, k) in paper]
      out.append(T.text('rise', low=lo, high=hi, rises='; '.join(rises),
                        paper=', '.join(paper_rise) or 'none'))
    for e in epsilons:
      here = [m for m in methods if (e, m) in spreads]
      ours = sorted(here, key=lambda m: spreads[(e, m)].mean, reverse=True)
      wins = [f'{a} > {b}' for i, a in enumerate(ours) for b in ours[i + 1:]
              if spreads[(e, a)].beats(spreads[(e, b)])]
      theirs = sorted((m for m in here if (e, _METHOD_KEY[m]) in paper),
                      key=lambda m: paper[(e, _METHOD_KEY[m])], reverse=True)
      paper_pairs = [(a, b) for i, a in enumerate(theirs) for b in theirs[i + 1:]]
      agree = sum(spreads[(e, a)].beats(spreads[(e, b)]) for a, b in paper_pairs)
      against = sum(spreads[(e, b)].beats(spreads[(e, a)]) for a, b in paper_pairs)
      out.append(T.text('wins', epsilon=e, ours=' > '.join(ours),
                        wins=', '.join(wins) if wins else 'none', pairs=len(paper_pairs),
                        agree=agree, against=against,
                        ties=len(paper_pairs) - agree - against))
    out.append('')
  return out


_METHOD_KEY = {label: key for key, label in dc.METHOD_LABEL.items()}


def _code_line(figs, rows) -> list[str]:
  """Which of `rows`' runs (by their copies' `summary.json`) were made before the
  aggregator change `check_reproduces.DP_FEDAGS_MEAN_CHANGE`; nothing when none was."""
  from experiments import check_reproduces  # pylint: disable=g-import-not-at-top
  change = check_reproduces.DP_FEDAGS_MEAN_CHANGE
  found = [check_reproduces.includes(common.read_json(os.path.join(
      figs, 'runs', os.path.basename(r['run']), 'summary.json')), change) for r in rows]
  before = [r['seed'] for r, f in zip(rows, found) if f is False]   # the runs' seeds
  unknown = found.count(None)
  if not before and not unknown:
    return []
  return [T.text('calibrated_code', commit=change, before=len(before), runs=len(rows),
                 unknown=T.text('calibrated_code_unknown', unknown=unknown) if unknown else '',
                 seeds=', '.join(sorted(set(before), key=int)))]


def _paper_mia(row: dict):
  """Table II's attack accuracy (%) for a `mia.csv` row, or '' where the paper has none."""
  from experiments.dp_fedags import mia as dp_fedags_mia  # pylint: disable=g-import-not-at-top
  from tffdp import mia  # pylint: disable=g-import-not-at-top
  if row['epsilon'] in ('', None):  # the non-private reference: not in the paper
    return ''
  paper = dp_fedags_mia.PAPER_MIA.get(
      (row['dataset'], float(row['epsilon']), _METHOD_KEY.get(row['method'])))
  attacks = list(mia.ATTACK_LABEL.values())
  return paper[attacks.index(row['attack'])] if paper and row['attack'] in attacks else ''


def _mia_average(rows) -> list[str]:
  """Table III: the mean over the three attacks per run, beside the paper's."""
  from experiments.dp_fedags import mia as dp_fedags_mia  # pylint: disable=g-import-not-at-top
  runs = {}
  for r in rows:
    runs.setdefault((r['dataset'], float(r['epsilon']), r['method']), []).append(
        float(r['accuracy']))
  table = [dict(dataset=d, epsilon=e, method=m, ours=statistics.mean(v), n=len(v),
                paper=dp_fedags_mia.PAPER_MIA_AVERAGE.get((d, e, _METHOD_KEY.get(m)), ''))
           for (d, e, m), v in runs.items()]
  if not table:
    return []
  return ['', *T.lines('mia_average'), '', *T.table('mia_average_table', [
      dict(t, dataset=dc.LABEL.get(t['dataset'], t['dataset'])) for t in table])]


def _calibrated_spreads(figs) -> tuple[Optional[float], dict]:
  """The kappa of `dp_fedags.common.DELTA_S_SCALE` and its Table IV cells' seed spreads,
  `{(dataset, epsilon, method label): SeedSpread}` (empty until those runs exist)."""
  kappa = dc.DELTA_S_SCALE
  cells = {}
  for r in read_rows(os.path.join(figs, 'table4.csv')) or []:
    if kappa is not None and dc.table4_cell(r)[1] == float(kappa):
      cells.setdefault((r['dataset'], float(r['epsilon']), r['method']), []).append(
          (int(r['seed']), float(r['mean_accuracy'])))
  return kappa, {k: common.SeedSpread(tuple(v for _, v in sorted(vals)))
                 for k, vals in cells.items()}


def _noise_std(figs, cell) -> Optional[float]:
  """Mean per-coordinate noise std (`noise_std`, per round, then over seeds) that the
  calibrated Table IV runs of `cell` (dataset, epsilon, method label) measured, read from
  their run copies; None without them."""
  stds = []
  for r in read_rows(os.path.join(figs, 'table4.csv')) or []:
    if ((r['dataset'], float(r['epsilon']), r['method']) == cell
        and dc.table4_cell(r)[1] == float(dc.DELTA_S_SCALE)):
      vals = [float(m['noise_std']) for m in common.copied_metrics(figs, r['run'])
              if m.get('noise_std') not in (None, '')]
      if vals:
        stds.append(statistics.mean(vals))
  return statistics.mean(stds) if stds else None


def _noise_control(figs, cell, paper: float) -> Optional[str]:
  """The cause of a calibrated Table IV miss when the calibration ran the reconstructed
  DP-FedAvg at the noise std `cell`'s runs measured (within 10%) and that run misses the
  paper's number below it too: the noise magnitude alone explains the miss. None
  otherwise."""
  std = _noise_std(figs, cell)
  rows = [r for r in read_rows(os.path.join(figs, 'calibration.csv')) or []
          if float(r['noise_std'] or 0) > 0]
  if std is None or not rows:
    return None
  row = min(rows, key=lambda r: abs(math.log(float(r['noise_std']) / std)))
  acc = float(row['mean_accuracy'])
  if abs(float(row['noise_std']) / std - 1) > 0.1 or fidelity.within('accuracy', paper, acc) \
      or acc > paper:
    return None
  return T.text('cause_noise_control', method=cell[2], std=std, epsilon=cell[1],
                kappa=float(row['delta_s_scale']), control_std=float(row['noise_std']),
                accuracy=acc, command=COMMANDS['calibrate'])


def _fidelity(figs) -> list[str]:
  """Issue 42's table: every paper number attempted, both readings, the claims."""
  return [*fidelity.section(*fidelity_items(figs)), '', *T.lines('fidelity_readings')]


def fidelity_items(figs) -> tuple[list[fidelity.PaperNumber], list[fidelity.Claim]]:
  """Every paper number attempted (Tables II and IV) under both readings, and the
  claims."""
  literal = {(r['dataset'], float(r['epsilon']), r['method']): float(r['mean_accuracy'])
             for r in _literal_rows(figs)}
  kappa, calibrated = _calibrated_spreads(figs)
  clip = {float(r['delta_s_scale']): float(r['mean_accuracy'])
          for r in read_rows(os.path.join(figs, 'calibration.csv')) or []}.get(0.0)
  refs = {r['dataset']: float(r['mean_accuracy'])
          for r in read_rows(os.path.join(figs, 'reference.csv')) or []}
  numbers = []
  for i, dataset in enumerate(dc.DATASETS):
    for (eps, key), paper in sorted(dc.PAPER_TABLE4.items()):
      label = dc.METHOD_LABEL[key]
      default = literal.get((dataset, eps, label))
      best = calibrated.get((dataset, eps, label))
      if default is None and best is None:
        continue
      cause = fidelity.NO_CAUSE
      if dataset in refs and refs[dataset] < paper[i]:
        cause = T.text('cause_reference', reference=refs[dataset], command=COMMANDS['reference'])
      elif (dataset == 'mnist' and clip is not None and clip < paper[i]
            and not fidelity.within('accuracy', paper[i], clip)):
        cause = T.text('cause_clip_only', clip=clip, command=COMMANDS['calibrate'])
      elif best and key != 'dp_fedavg_ags':
        cause = _noise_control(figs, (dataset, eps, label), paper[i]) or cause
      numbers.append(fidelity.PaperNumber(
          f'Table IV, {dc.LABEL[dataset]}, epsilon {eps:g}, {label}', 'accuracy', paper[i],
          default, best.mean if best else None,
          f'kappa {kappa:g}, {len(best.values)} seed(s)'
          + (' (kappa was fitted to this cell)' if (dataset, eps, key) == (
              'mnist', 0.1, 'dp_fedavg_ags') else '') if best else '', cause))
  mia_rows = read_rows(os.path.join(figs, 'mia.csv')) or []
  for r in mia_rows:
    paper = _paper_mia(r)
    if paper == '' or r['accuracy'] in ('', 'not run'):
      continue
    numbers.append(fidelity.PaperNumber(
        f'Table II, {dc.LABEL[r["dataset"]]}, epsilon {float(r["epsilon"]):g}, '
        f'{r["method"]}, {r["attack"].split(" (")[0]}', 'accuracy', float(paper),
        float(r['accuracy']), cause=_mia_cause(mia_rows, r, float(paper))))
  claims = []
  one_seed = {k: common.SeedSpread((v,)) for k, v in literal.items()}

  def pair(cells):
    """`(reading, spreads)` of `cells` at the calibrated kappa where all are there, else
    at Amendment 1's reading; None where neither has them all."""
    for reading, source in ((f'kappa {kappa:g}' if calibrated else '', calibrated),
                            ('Amendment 1\'s reading (kappa 1), one seed', one_seed)):
      found = [source.get(c) for c in cells]
      if source and all(found):
        return reading, found
    return None

  for eps in dc.EPSILONS:
    got = pair([('mnist', eps, dc.METHOD_LABEL[k]) for k in ('dp_fedags', 'dp_fedavg_ags')])
    if got:
      reading, (a, b) = got
      gap = dc.PAPER_TABLE4[(eps, 'dp_fedags')][0] - dc.PAPER_TABLE4[(eps, 'dp_fedavg_ags')][0]
      claims.append(fidelity.Claim(T.text('claim_above', epsilon=eps, gap=gap),
                                   fidelity.above(a, b), f'{reading}: {a.text()} vs {b.text()}'))
  for key in dc.METHODS:
    got = pair([('mnist', e, dc.METHOD_LABEL[key]) for e in (0.1, 0.5)])
    if got:
      reading, (lo, hi) = got
      gap = dc.PAPER_TABLE4[(0.5, key)][0] - dc.PAPER_TABLE4[(0.1, key)][0]
      claims.append(fidelity.Claim(T.text('claim_rises', method=dc.METHOD_LABEL[key], gap=gap),
                                   fidelity.above(hi, lo),
                                   f'{reading}: {lo.text()} to {hi.text()}'))
  return numbers, claims


def _mia_cause(rows: list[dict], row: dict, paper: float) -> str:
  """The cause of a Table II miss: the non-private reference's row (the same attack on
  FedAvg without clipping or noise, `dp_fedags.mia`'s reference rows) also below the
  paper's private number; else the paper's number inside the 95% interval of the row's
  own accuracy (`attack_accuracy_interval`: the miss is below what the held-out examples
  resolve). `fidelity.NO_CAUSE` otherwise."""
  from experiments.dp_fedags import mia as dp_fedags_mia  # pylint: disable=g-import-not-at-top
  command = COMMANDS['mia_cifar10' if row['dataset'] == 'cifar10' else 'mia']
  ref = next((r for r in rows if r['dataset'] == row['dataset']
              and r['method'] == dp_fedags_mia.REFERENCE and r['attack'] == row['attack']
              and r['accuracy'] not in ('', 'not run')), None)
  if ref is not None:
    acc = float(ref['accuracy'])
    if acc < paper and not fidelity.within('accuracy', paper, acc):
      return T.text('cause_mia', accuracy=acc, command=command)
  interval = attack_accuracy_interval(row)
  if interval and interval[0] <= paper <= interval[1]:
    return T.text('cause_mia_sampling', low=interval[0], high=interval[1], paper=paper,
                  members=row['members'], command=command)
  return fidelity.NO_CAUSE


def attack_accuracy_interval(row: dict) -> Optional[tuple[float, float]]:
  """The 95% interval (%) of a `mia.csv` row's held-out attack accuracy.

  The accuracy is `(TP + TN) / (2 n)` over `n = members` held-out members and as many
  held-out non-members (`tffdp.mia.score_result`): `TP + TN` is a sum of `2 n` independent
  Bernoulli trials with two rates (TPR, 1 - FPR). The binomial's Clopper-Pearson
  interval of `k = TP + TN` out of `2 n` (`tffdp.mia.clopper_pearson`) covers at least
  95% for such a sum: a Poisson-binomial's tails are no heavier than the binomial's of
  the same mean (Hoeffding 1956, Theorem 4).

  Args:
    row: A `mia.csv` row (`tpr`, `fpr`, `members`).

  Returns:
    `(low, high)` in %, or None where the row lacks a rate or the count.
  """
  from tffdp import mia  # pylint: disable=g-import-not-at-top
  try:
    tpr, fpr, n = (float(row[k]) for k in ('tpr', 'fpr', 'members'))
  except (KeyError, TypeError, ValueError):
    return None
  if n < 1:
    return None
  correct = round(tpr * n) + round((1 - fpr) * n)
  low, high = mia.clopper_pearson(correct, 2 * int(n))
  return 100 * low, 100 * high


def _mia_cells(r: dict) -> dict:
  """A `mia.csv` row as the cells of the report's table."""
  return dict(r, dataset=dc.LABEL.get(r['dataset'], r['dataset']),
              epsilon=r['epsilon'] or '- (no privacy)', paper=_paper_mia(r),
              best_accuracy=r.get('best_accuracy', ''), auc=r.get('auc', ''),
              tpr=fmt(r.get('tpr', ''), 3), fpr=fmt(r.get('fpr', ''), 3),
              epsilon_lower_bound=fmt(r.get('epsilon_lower_bound', ''), 3),
              epsilon_guaranteed=fmt(r.get('epsilon_guaranteed', ''), 4))


def _mia(figs) -> list[str]:
  from experiments.dp_fedags import mia as dp_fedags_mia  # pylint: disable=g-import-not-at-top
  rows = read_rows(os.path.join(figs, 'mia.csv')) or []
  if not rows:
    return T.lines('mia_not_regenerated', command=COMMANDS['mia'])
  cifar = any(r['dataset'] == 'cifar10' for r in rows)
  out = [*T.lines('mia_commands', command=COMMANDS['mia'],
                  cifar=f' and `{COMMANDS["mia_cifar10"]}`' if cifar else ''), '',
         *T.table('mia_table', [_mia_cells(r) for r in rows])]
  finished = [r for r in rows if r['accuracy'] not in ('', 'not run')]
  done = [r for r in finished if r['method'] != dp_fedags_mia.REFERENCE]
  for dataset in dc.DATASETS:
    ref = [r for r in finished if r['dataset'] == dataset and r not in done]
    if ref:
      out += ['', T.text('mia_reference', dataset=dc.LABEL[dataset], command=COMMANDS['reference'],
                         attacks=', '.join(f'{r["attack"].split(" (")[0]} '
                                           f'{float(r["accuracy"]):.2f}%' for r in ref))]
    accs = [float(r['accuracy']) for r in done if r['dataset'] == dataset]
    paper = [_paper_mia(r) for r in done if r['dataset'] == dataset and _paper_mia(r) != '']
    if accs:
      out += ['', T.text('mia_range', dataset=dc.LABEL[dataset], low=min(accs), high=max(accs),
                         pairs=len(accs), paper=f'{min(paper):.2f}-{max(paper):.2f}% on the '
                         'same rows.' if paper else '(no row).')]
  if done:
    accs = [float(r['accuracy']) for r in done]
    out += ['', T.text('mia_reading', low=min(accs), high=max(accs), pairs=len(accs),
                       positive=sum(float(r['epsilon_lower_bound']) > 0 for r in done),
                       largest=fmt(max(float(r['epsilon_lower_bound']) for r in done), 3))]
  return out + _mia_average(done)


def _fig3_images(figs) -> list[str]:
  return [' '.join(f'![fig3 {d} {e:g}](fig3_{d}_eps{e:g}.png)' for d in dc.DATASETS
                   for e in dc.EPSILONS
                   if os.path.exists(os.path.join(figs, f'fig3_{d}_eps{e:g}.png')))]


def build(figs: str) -> str:
  sections = dict(
      fidelity=_fidelity(figs), pilot=_pilot(figs),
      table4=_table4(figs) + _cpsgd_true_sensitivity(figs), calibration=_calibration(figs),
      calibrated=_table4_calibrated(figs), fig3=_fig3_images(figs), mia=_mia(figs),
      cost=common.cost_section('dp_fedags'), untrained=untrained_rounds_section(figs))
  parked = common.parked_section(figs)
  return T.text('page', {k: '\n'.join(v) for k, v in sections.items()},
                laplace=_laplace_sampler(figs)) + '\n' + (
                    '\n' + '\n'.join(parked) + '\n' if parked else '')


def _laplace_draws(config: dict, rows: list[dict]) -> int:
  """Laplace coordinates a run drew: DP-FedAGS's sparse-vector test (Alg. 1: one `alpha`
  per weight and one `beta` per upload), plus the noise itself with `perturbation=laplace`.
  The baselines draw none (`selection` top / all)."""
  if config['method'] != 'dp_fedags':
    return 0
  uploads = common.cohort_uploads(rows)
  size = common.model_size(config['model'], config['dataset'])
  laplace_noise = (config.get('method_options') or {}).get('perturbation') == 'laplace'
  return uploads * (size + 1 + (size if laplace_noise else 0))


def _laplace_sampler(figs: str) -> str:
  return common.float32_laplace_section(figs, _laplace_draws, T.lines('laplace'))


def main(argv=None) -> int:
  return report_main('python -m experiments.dp_fedags.report', __doc__, 'figures/dp_fedags',
                     build, argv)


if __name__ == '__main__':
  dc.entry(main)
