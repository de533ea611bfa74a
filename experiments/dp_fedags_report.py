"""Writes `figures/dp_fedags/README.md` from the committed results (no numbers typed).

    python -m experiments.dp_fedags_report [--figures-dir figures/dp_fedags]

Reads `table4.csv`, `mia.csv`, `pilot.csv` and the runs' copies in `runs/`; what was not
regenerated is listed as such, with its command.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Optional

from experiments import dp_fedags_common as dc
from experiments.common import fmt, md_table as _md_table, read_rows, report_main
from experiments.common import untrained_rounds_section
from experiments import common
from experiments import fidelity
from tffdp import config as config_lib

COMMANDS = {
    'table4': 'python -m experiments.dp_fedags_table4 --datasets mnist',
    'table4_cifar10': 'python -m experiments.dp_fedags_table4 --datasets cifar10 '
                      '--epsilons 0.5',
    'table4_cifar100': 'python -m experiments.dp_fedags_table4 --datasets cifar100 '
                       '--data-dir DIR   # DIR/cifar100/cifar-100-python.tar.gz',
    'mia': 'python -m experiments.dp_fedags_mia --datasets mnist',
    'mia_cifar10': 'python -m experiments.dp_fedags_mia --datasets cifar10 --epsilons 0.5',
    'pilot': 'python -m experiments.dp_fedags_pilot',
    'reference': 'python -m experiments.dp_fedags_reference',
    'calibrate': 'python -m experiments.dp_fedags_calibrate',
    'table4_calibrated': 'python -m experiments.dp_fedags_table4 --datasets mnist '
                         '--delta-s-scale calibrated --seeds 0 1 2',
}
_COUNT = {2: 'two', 3: 'three', 4: 'four'}
PAPER_ORDER = ('DP-FedAGS', 'DP-FedSNLC (reconstructed)', 'DP-FedAvg (reconstructed)', 'cpSGD')


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
  table = _literal_rows(figs)
  out = []
  phases = ((1, 10), (91, 100), (191, 200))
  for r in table:
    if r['method'] not in ('DP-FedAGS', 'cpSGD', 'DP-FedAvg (reconstructed)'):
      continue
    m = _metrics(figs, r['run'])
    for lo, hi in phases:
      if not any(lo <= int(x['round']) <= hi for x in m):
        continue
      noise, grad = _mean(m, 'noise_std', lo, hi), _mean(m, 'mean_abs_gradient', lo, hi)
      out.append(dict(
          dataset=dc.LABEL[r['dataset']], method=r['method'], epsilon=r['epsilon'],
          rounds=f'{lo}-{hi}',
          acc=fmt(100 * _mean(m, 'test_accuracy', lo, hi), 4),
          lam=fmt(_mean(m, 'threshold', lo, hi), 3),
          frac=fmt(_mean(m, 'significant_fraction', lo, hi), 3),
          noise=fmt(noise, 3), grad=fmt(grad, 3), ratio=fmt(noise / grad, 3),
          wmin=fmt(_mean(m, 'weight_min', lo, hi), 3),
          wmax=fmt(_mean(m, 'weight_max', lo, hi), 3),
          trials=fmt(_mean(m, 'num_trials', lo, hi), 4) if r['method'] == 'cpSGD' else '-'))
  lines = []
  if out:
    lines += _md_table(out, [
        ('dataset', lambda r: r['dataset']),
        ('method', lambda r: r['method']), ('epsilon', lambda r: r['epsilon']),
        ('rounds', lambda r: r['rounds']), ('test acc (%)', lambda r: r['acc']),
        ('lambda_t', lambda r: r['lam']), ('perturbed fraction', lambda r: r['frac']),
        ('noise std', lambda r: r['noise']), ('mean abs g\'', lambda r: r['grad']),
        ('noise / abs g\'', lambda r: r['ratio']), ('weight min', lambda r: r['wmin']),
        ('weight max', lambda r: r['wmax']), ('cpSGD m', lambda r: r['trials'])])
    lines += ['', 'Per phase, the mean over rounds and clients of eq. 35\'s threshold, the '
              'fraction of coordinates perturbed (DP-FedAGS: the sparse-vector test\'s '
              'selection; DP-FedAvg and cpSGD: all), the per-coordinate noise std and '
              '`|g\'_j|`, and eq. 37\'s weight range over the cohort (DP-FedAvg and cpSGD: '
              '`n_k / n`).']
  pilot = read_rows(os.path.join(figs, 'pilot.csv')) or []
  if pilot:
    lines += ['', f'**The paper\'s `Delta_S = C`** (Amendment 1; command: '
              f'`{COMMANDS["pilot"]}`):', '']
    last = {}
    for r in pilot:
      last[r['epsilon']] = r
    lines += _md_table(list(last.values()), [
        ('epsilon', lambda r: r['epsilon']), ('rounds', lambda r: r['round']),
        ('test acc (%)', lambda r: fmt(100 * float(r['test_accuracy']), 4)),
        ('noise std', lambda r: fmt(r['noise_std'], 3)),
        ('mean abs g\'', lambda r: fmt(r['mean_abs_gradient'], 3)),
        ('perturbed fraction', lambda r: fmt(r['significant_fraction'], 3))])
    lines += ['', 'With `Delta_S = C` eq. 2\'s noise std is `sigma C` with sigma 8.04 / 2.40 '
              '(epsilon 0.1 / 0.5): thousands of times the gradient\'s entries, so the model '
              'stays at chance; the paper\'s 85-95% need a much smaller sensitivity, hence '
              'tffdp\'s reading `2 eta C / n_k` (the sensitivity of the clipped sum scaled '
              'by `eta / n_k`).']
  return lines or ['Not regenerated yet.']


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
    out.append(f'- epsilon {r["epsilon"]}: m from {hp["num_trials_min"]:.4g} to '
               f'{hp["num_trials_max"]:.4g} over the clients; per upload at the true '
               f'sensitivity {fmt(eps[0], 4)} (smallest m) to {fmt(eps[1], 4)} (largest m).')
  if out:
    out = ['cpSGD per upload, Theorem 1 with the true add/remove sensitivity (`Delta_2 = C + '
           's sqrt(|W|)`, `Delta_1 = sqrt(|W|) C + s |W|`, `Delta_inf = C`, worst-case '
           'rounding) at delta 1e-3, computed here from each run\'s recorded `m` range '
           '(`inf` where `m` is below the theorem\'s `m >= 8 C / s` condition; the runs\' '
           'own config notes, written before this was corrected, give the median client '
           'only):', ''] + out
  return out


def _table4(figs) -> list[str]:
  rows = _literal_rows(figs)
  out = []
  for dataset in dc.DATASETS:
    rs = [r for r in rows if r['dataset'] == dataset]
    if not rs:
      out += [f'**{dc.LABEL[dataset]}: not run.** Command: '
              f'`{COMMANDS["table4_" + dataset] if dataset != "mnist" else COMMANDS["table4"]}`'
              + (' (estimated 2-4 h per run of 200 rounds on this 2-core machine, '
                 'Amendment 5; 12 runs)' if dataset == 'cifar10' else
                 ' (the CIFAR-100 files are not available offline here; the loader is '
                 'tested on small files in the official format)'
                 if dataset == 'cifar100' else ''), '']
      continue
    command = COMMANDS['table4'] if dataset == 'mnist' else COMMANDS['table4_' + dataset]
    out += [f'**{dc.LABEL[dataset]}** (command: `{command}`; seed 0; {len(rs)} runs):', '']
    out += _md_table(rs, [
        ('epsilon', lambda r: r['epsilon']), ('method', lambda r: r['method']),
        ('paper mean acc (%)', lambda r: r['paper_mean_accuracy']),
        ('tffdp mean acc (%)', lambda r: r['mean_accuracy']),
        ('tffdp final acc (%)', lambda r: r['final_accuracy']),
        ('epsilon_claimed', lambda r: fmt(r['epsilon_claimed'])),
        ('epsilon_guaranteed', lambda r: fmt(r['epsilon_guaranteed'])),
        ('perturbed fraction', lambda r: r['perturbed_fraction']),
        ('wall s', lambda r: r['wall_seconds'])])
    out += ['']
    for eps in sorted({r['epsilon'] for r in rs}, key=float):
      group = {r['method']: float(r['mean_accuracy']) for r in rs if r['epsilon'] == eps}
      paper = {r['method']: float(r['paper_mean_accuracy']) for r in rs
               if r['epsilon'] == eps and r['paper_mean_accuracy']}
      ours = sorted(group, key=group.get, reverse=True)
      theirs = sorted(paper, key=paper.get, reverse=True)
      gaps = ', '.join(f'{m} {group[m] - paper[m]:+.2f}' for m in ours if m in paper)
      span = max(group.values()) - min(group.values())
      paper_span = (max(paper.values()) - min(paper.values())) if paper else math.nan
      out.append(f'- epsilon {eps}: tffdp order {" > ".join(ours)}; paper order '
                 f'{" > ".join(theirs)}. tffdp minus paper (mean accuracy, points): '
                 f'{gaps}. The {_COUNT.get(len(group), len(group))} methods span {span:.2f} points here (paper '
                 f'{paper_span:.2f}): '
                 + ('a tie within one seed, so the ordering is not reproduced and not '
                    'contradicted either.' if span < 0.5 else 'see the order above.'))
    run_eps = {float(r['epsilon']) for r in rs}
    missing = [e for e in dc.EPSILONS if e not in run_eps]
    if missing:
      hours = sum(float(r['wall_seconds']) for r in rs) / len(rs) / 3600
      out.append(f'- Not run: epsilon {", ".join(f"{e:g}" for e in missing)} '
                 f'({len(missing) * len(dc.METHODS)} runs; about {hours:.1f} h each as '
                 f'measured here). Command: `python -m experiments.dp_fedags_table4 '
                 f'--datasets {dataset} --epsilons {" ".join(f"{e:g}" for e in missing)}`.')
    ref = next((r for r in read_rows(os.path.join(figs, 'reference.csv')) or []
                if r['dataset'] == dataset), None)
    if ref:
      best = max(rs, key=lambda r: float(r['mean_accuracy']))
      out.append(f"- Non-private FedAvg at the same settings (`{COMMANDS['reference']}`): "
                 f"mean accuracy {ref['mean_accuracy']}%, final {ref['final_accuracy']}%; "
                 f"the best private run ({best['method']}, epsilon {best['epsilon']}) is "
                 f"{float(ref['mean_accuracy']) - float(best['mean_accuracy']):.2f} points "
                 'below it in mean accuracy.')
    else:
      out.append(f"- Non-private FedAvg at the same settings: not run (`{COMMANDS['reference']}"
                 f" --datasets {dataset}`).")
    means = [float(r['mean_accuracy']) for r in rs]
    paper_means = [float(r['paper_mean_accuracy']) for r in rs if r['paper_mean_accuracy']]
    out.append(f'- Across the runs the mean accuracy spans {min(means):.2f}-{max(means):.2f}% '
               + (f'(paper {min(paper_means):.2f}-{max(paper_means):.2f}%)' if paper_means
                  else '')
               + ': under `Delta_S = 2 eta C / n_k` the noise (pilot table: its std per '
               'coordinate against the mean `|g\'_j|`) slows every method alike, whichever '
               'coordinates it lands on, so '
               + ('neither the paper\'s growth with epsilon nor its ordering appears'
                  if len(run_eps) > 1 else 'the paper\'s ordering does not appear')
               + (f" (against non-private FedAvg: {float(ref['mean_accuracy']) - max(means):.2f}-"
                  f"{float(ref['mean_accuracy']) - min(means):.2f} points of mean accuracy)"
                  if ref else '')
               + (f"; even non-private FedAvg's mean ({ref['mean_accuracy']}%) is below the "
                  f"paper's private {min(paper_means):.2f}%, so this setup (model, T, E, lr) "
                  'under-trains against the paper\'s'
                  if ref and paper_means and float(ref['mean_accuracy']) < min(paper_means)
                  else '')
               + '; the runs shared the 2 cores with another experiment, so their wall times '
               'include the sharing.')
    out += ['']
  return out


def _calibration(figs) -> list[str]:
  """Fidelity pass 2, item 1: the kappa sweep and the clip-only control."""
  from experiments import dp_fedags_calibrate as cal  # pylint: disable=g-import-not-at-top
  rows = read_rows(os.path.join(figs, 'calibration.csv')) or []
  if not rows:
    return [f'Not run yet. Command: `{COMMANDS["calibrate"]}`.']
  mean_n = (dc.TRAIN_EXAMPLES['mnist'] - config_lib.RunConfig.num_validation) / dc.CLIENTS
  seeds = ', '.join(sorted({r.get('seed') or '0' for r in rows}))
  out = [f'Command: `{COMMANDS["calibrate"]}` (DP-FedAvg (reconstructed), MNIST, epsilon '
         f'{rows[0]["epsilon"]}, seed {seeds}, Sec. V-A settings otherwise). `Delta_S = kappa '
         '2 eta C / n_k`: kappa 1 is Amendment 1\'s reading (the Table IV run above), kappa 0 '
         'the clip-only control (the same clipping of `g` to C = 1, no noise), and kappa = '
         f'`n_k / (2 eta)` ({mean_n / (2 * dc.LEARNING_RATE["mnist"]):,.0f} for the mean client '
         'here) the paper\'s `Delta_S = C`. Wall times include sharing the 2 cores with up to '
         'three other runs.', '']
  out += _md_table(rows, [
      ('kappa', lambda r: fmt(r['delta_s_scale'])),
      ('noise std per coordinate', lambda r: fmt(r['noise_std'], 3)),
      ('mean acc (%)', lambda r: r['mean_accuracy']),
      ('final acc (%)', lambda r: r['final_accuracy']),
      ('paper mean acc (%)', lambda r: r['paper_mean_accuracy']),
      ('wall s', lambda r: r['wall_seconds'])])
  by_kappa = {float(r['delta_s_scale']): float(r['mean_accuracy']) for r in rows}
  ref = next((r for r in read_rows(os.path.join(figs, 'reference.csv')) or []
              if r['dataset'] == 'mnist'), None)
  out.append('')
  if 0.0 in by_kappa:
    clip = by_kappa[0.0]
    line = f'- Clip-only control: mean accuracy {clip:.2f}%'
    if ref:
      line += (f', against non-private FedAvg\'s {ref["mean_accuracy"]}% at the same settings: '
               f'clipping `g` to C = 1 alone costs {float(ref["mean_accuracy"]) - clip:.2f} '
               'points of mean accuracy')
    if 1.0 in by_kappa:
      line += (f'; Amendment 1\'s noise (kappa 1) moves it by {by_kappa[1.0] - clip:+.2f} '
               'points')
    above = sorted(p[0] for p in dc.PAPER_TABLE4.values()
                   if p[0] > clip and not fidelity.within('accuracy', p[0], clip))
    line += ('. The paper\'s MNIST means above this control by more than the tolerance (' +
             ', '.join(f'{v:.2f}' for v in above) + ') are out of reach of any noise at this '
             'clipping, so no kappa reproduces them.' if above else '.')
    out.append(line)
  chosen = next((r for r in rows if r.get('closest_to_paper') == 'True'), None)
  if chosen:   # marked by dp_fedags_calibrate
    kappa = float(chosen['delta_s_scale'])
    out.append(f'- Closest to the paper\'s {cal.PAPER_DP_FEDAVG_EPS01}: kappa {kappa:g} '
               f'(mean accuracy {chosen["mean_accuracy"]}%, '
               f'{float(chosen["mean_accuracy"]) - cal.PAPER_DP_FEDAVG_EPS01:+.2f} points). '
               + (f'Frozen as `dp_fedags_common.DELTA_S_SCALE = {dc.DELTA_S_SCALE:g}` for the '
                  'calibrated Table IV below.' if dc.DELTA_S_SCALE == kappa else
                  f'`dp_fedags_common.DELTA_S_SCALE` is {dc.DELTA_S_SCALE}: not frozen at '
                  'the closest kappa yet.'))
  return out


def _table4_calibrated(figs) -> list[str]:
  """Table IV at each kappa other than 1: seeds' mean, std and values, and the verdicts
  on the paper's rise with epsilon and its ordering (a win only when the seeds separate)."""
  rows = [r for r in read_rows(os.path.join(figs, 'table4.csv')) or []
          if dc.table4_cell(r)[1] != 1.0]
  if not rows:
    return [f'Not run yet. Command: `{COMMANDS["table4_calibrated"]}`.']
  out = []
  for dataset, kappa in sorted({dc.table4_cell(r)[:2] for r in rows}):
    rs = [r for r in rows if dc.table4_cell(r)[:2] == (dataset, kappa)]
    cells = {}
    for r in rs:
      cells.setdefault((float(r['epsilon']), r['method']), []).append(r)
    spreads = {k: common.SeedSpread(tuple(float(r['mean_accuracy']) for r in sorted(
        v, key=lambda r: int(r['seed'])))) for k, v in cells.items()}
    seeds = sorted({int(r['seed']) for r in rs})
    out += [f'**{dc.LABEL[dataset]}, kappa {kappa:g}** (`Delta_S = {kappa:g} x 2 eta C / '
            f'n_k`; seeds {", ".join(map(str, seeds))}; {len(rs)} runs):', '']
    table = [dict(epsilon=e, method=m, spread=spreads[(e, m)], runs=v)
             for (e, m), v in sorted(cells.items(), key=lambda kv: (
                 kv[0][0], PAPER_ORDER.index(kv[0][1])))]
    out += _md_table(table, [
        ('epsilon', lambda t: f'{t["epsilon"]:g}'), ('method', lambda t: t['method']),
        ('paper mean acc (%)', lambda t: t['runs'][0]['paper_mean_accuracy']),
        ('tffdp mean acc (%)', lambda t: t['spread'].text()),
        ('per seed', lambda t: ' / '.join(f'{v:.2f}' for v in t['spread'].values)),
        ('final acc (%, mean)', lambda t: f'{statistics.mean(float(r["final_accuracy"]) for r in t["runs"]):.2f}'),
        ('epsilon_guaranteed (max)', lambda t: fmt(max(float(r['epsilon_guaranteed'])
                                                       for r in t['runs'])))])
    out.append('')
    epsilons = sorted({e for e, _ in spreads})
    methods = [m for m in PAPER_ORDER if any((e, m) in spreads for e in epsilons)]
    paper = {k: v[dc.DATASETS.index(dataset)] for k, v in dc.PAPER_TABLE4.items()}
    if len(epsilons) > 1:
      lo, hi = epsilons[0], epsilons[-1]
      rises = []
      for m in methods:
        if (lo, m) in spreads and (hi, m) in spreads:
          a, b = spreads[(hi, m)], spreads[(lo, m)]
          rises.append(f'{m} {a.mean - b.mean:+.2f} ('
                       + ('separated' if a.beats(b) or b.beats(a) else 'seeds overlap') + ')')
      paper_rise = [f'{dc.METHOD_LABEL[k]} {paper[(hi, k)] - paper[(lo, k)]:+.2f}'
                    for k in dc.METHODS if (hi, k) in paper and (lo, k) in paper]
      out.append(f'- Rise from epsilon {lo:g} to {hi:g} (mean accuracy, points): '
                 + '; '.join(rises) + '. Paper: ' + (', '.join(paper_rise) or 'none') + '.')
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
      out.append(f'- epsilon {e:g}: tffdp order by mean {" > ".join(ours)}; wins (every seed '
                 f'above every seed): {", ".join(wins) if wins else "none"}. Of the paper\'s '
                 f'{len(paper_pairs)} pairwise orderings, {agree} reproduced, {against} '
                 f'reversed, {len(paper_pairs) - agree - against} ties.')
    out.append('')
  return out


_METHOD_KEY = {label: key for key, label in dc.METHOD_LABEL.items()}


def _paper_mia(row: dict):
  """Table II's attack accuracy (%) for a `mia.csv` row, or '' where the paper has none."""
  from experiments import dp_fedags_mia  # pylint: disable=g-import-not-at-top
  from tffdp import mia  # pylint: disable=g-import-not-at-top
  if row['epsilon'] in ('', None):  # the non-private reference: not in the paper
    return ''
  paper = dp_fedags_mia.PAPER_MIA.get(
      (row['dataset'], float(row['epsilon']), _METHOD_KEY.get(row['method'])))
  attacks = list(mia.ATTACK_LABEL.values())
  return paper[attacks.index(row['attack'])] if paper and row['attack'] in attacks else ''


def _mia_average(rows) -> list[str]:
  """Table III: the mean over the three attacks per run, beside the paper's."""
  from experiments import dp_fedags_mia  # pylint: disable=g-import-not-at-top
  runs = {}
  for r in rows:
    runs.setdefault((r['dataset'], float(r['epsilon']), r['method']), []).append(
        float(r['accuracy']))
  table = [dict(dataset=d, epsilon=e, method=m, ours=statistics.mean(v), n=len(v),
                paper=dp_fedags_mia.PAPER_MIA_AVERAGE.get((d, e, _METHOD_KEY.get(m)), ''))
           for (d, e, m), v in runs.items()]
  if not table:
    return []
  return ['', '**Table III: the mean attack accuracy over the three attacks** (per run; the '
          'paper\'s Table III is the mean of its Table II row):', ''] + _md_table(table, [
              ('dataset', lambda t: dc.LABEL.get(t['dataset'], t['dataset'])),
              ('epsilon', lambda t: f'{t["epsilon"]:g}'), ('method', lambda t: t['method']),
              ('paper mean acc (%)', lambda t: t['paper']),
              ('tffdp mean acc (%)', lambda t: f'{t["ours"]:.2f}'),
              ('attacks', lambda t: t['n'])])


def _calibrated_spreads(figs) -> tuple[Optional[float], dict]:
  """The kappa of `dp_fedags_common.DELTA_S_SCALE` and its Table IV cells' seed spreads,
  `{(dataset, epsilon, method label): SeedSpread}` (empty until those runs exist)."""
  kappa = dc.DELTA_S_SCALE
  cells = {}
  for r in read_rows(os.path.join(figs, 'table4.csv')) or []:
    if kappa is not None and dc.table4_cell(r)[1] == float(kappa):
      cells.setdefault((r['dataset'], float(r['epsilon']), r['method']), []).append(
          (int(r['seed']), float(r['mean_accuracy'])))
  return kappa, {k: common.SeedSpread(tuple(v for _, v in sorted(vals)))
                 for k, vals in cells.items()}


def _fidelity(figs) -> list[str]:
  """Issue 42's table: every paper number attempted, both readings, the claims."""
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
        cause = (f'non-private FedAvg at the same settings reaches a mean of '
                 f'{refs[dataset]:.2f}% (`{COMMANDS["reference"]}`): the setup trains slower '
                 'than the paper\'s')
      elif (dataset == 'mnist' and clip is not None and clip < paper[i]
            and not fidelity.within('accuracy', paper[i], clip)):
        cause = (f'above the clip-only control\'s {clip:.2f}% (`{COMMANDS["calibrate"]}`): '
                 'clipping g to C = 1 caps the mean accuracy, and noise only lowers it')
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
      claims.append(fidelity.Claim(
          f'MNIST, epsilon {eps:g}: DP-FedAGS above DP-FedAvg (paper '
          f'{dc.PAPER_TABLE4[(eps, "dp_fedags")][0] - dc.PAPER_TABLE4[(eps, "dp_fedavg_ags")][0]:+.2f} points)',
          fidelity.above(a, b), f'{reading}: {a.text()} vs {b.text()}'))
  for key in dc.METHODS:
    got = pair([('mnist', e, dc.METHOD_LABEL[key]) for e in (0.1, 0.5)])
    if got:
      reading, (lo, hi) = got
      claims.append(fidelity.Claim(
          f'MNIST: {dc.METHOD_LABEL[key]} rises from epsilon 0.1 to 0.5 (paper '
          f'{dc.PAPER_TABLE4[(0.5, key)][0] - dc.PAPER_TABLE4[(0.1, key)][0]:+.2f} points)',
          fidelity.above(hi, lo), f'{reading}: {lo.text()} to {hi.text()}'))
  return [*fidelity.section(numbers, claims), '',
          'Default reading: tffdp\'s default configuration (the spec with its Amendments: '
          '`Delta_S = 2 eta C / n_k`, seed 0). Best reading run: Table IV at the calibrated '
          'kappa (mean over its seeds). Table III is the mean of Table II and is not counted '
          'again. A claim is reproduced only when every seed separates (one seed: a tie).']


def _mia_cause(rows: list[dict], row: dict, paper: float) -> str:
  """The cause of a Table II miss that the non-private reference's row gives: the same
  attack on FedAvg without clipping or noise (`dp_fedags_mia`'s reference rows) also
  below the paper's private number. `fidelity.NO_CAUSE` otherwise."""
  from experiments import dp_fedags_mia  # pylint: disable=g-import-not-at-top
  ref = next((r for r in rows if r['dataset'] == row['dataset']
              and r['method'] == dp_fedags_mia.REFERENCE and r['attack'] == row['attack']
              and r['accuracy'] not in ('', 'not run')), None)
  if ref is None:
    return fidelity.NO_CAUSE
  acc = float(ref['accuracy'])
  if acc < paper and not fidelity.within('accuracy', paper, acc):
    return (f'the same attack on the non-private FedAvg reference (no clipping, no noise) '
            f'reaches {acc:.2f}% (`{COMMANDS["mia_cifar10" if row["dataset"] == "cifar10" else "mia"]}`): this setup\'s models do not leak '
            'membership to it even without privacy, so the paper\'s number needs a model '
            'that fits its training data more closely than these do')
  return fidelity.NO_CAUSE


def _mia(figs) -> list[str]:
  rows = read_rows(os.path.join(figs, 'mia.csv')) or []
  if not rows:
    return ['Not regenerated yet. Command: `' + COMMANDS['mia'] + '`']
  cifar = any(r['dataset'] == 'cifar10' for r in rows)
  out = [f'Command: `{COMMANDS["mia"]}`'
         + (f' and `{COMMANDS["mia_cifar10"]}`' if cifar else '') + ' (1000 members from the training data, 1000 '
         'non-members from the validation split, shadow model on 1000 + 1000 test examples; '
         'seed 0).', '']
  out += _md_table(rows, [
      ('dataset', lambda r: dc.LABEL.get(r['dataset'], r['dataset'])),
      ('epsilon', lambda r: r['epsilon'] or '- (no privacy)'),
      ('method', lambda r: r['method']), ('attack', lambda r: r['attack']),
      ('paper acc (%)', _paper_mia),
      ('acc (%)', lambda r: r['accuracy']),
      ('in-sample best acc (%)', lambda r: r.get('best_accuracy', '')),
      ('AUC', lambda r: r.get('auc', '')),
      ('TPR / FPR', lambda r: f"{fmt(r.get('tpr', ''), 3)} / {fmt(r.get('fpr', ''), 3)}"),
      ('epsilon >= (95%)', lambda r: fmt(r.get('epsilon_lower_bound', ''), 3)),
      ('epsilon_guaranteed', lambda r: fmt(r.get('epsilon_guaranteed', ''), 4))])
  from experiments import dp_fedags_mia  # pylint: disable=g-import-not-at-top
  finished = [r for r in rows if r['accuracy'] not in ('', 'not run')]
  done = [r for r in finished if r['method'] != dp_fedags_mia.REFERENCE]
  for dataset in dc.DATASETS:
    ref = [r for r in finished if r['dataset'] == dataset and r not in done]
    if ref:
      out += ['', f'{dc.LABEL[dataset]}, the non-private FedAvg reference (no clipping, no '
              'noise; `' + COMMANDS['reference'] + '`): ' + ', '.join(
                  f'{r["attack"].split(" (")[0]} {float(r["accuracy"]):.2f}%' for r in ref)
              + ' held-out attack accuracy: what these attacks reach on this setup\'s models '
              'without privacy.']
    accs = [float(r['accuracy']) for r in done if r['dataset'] == dataset]
    paper = [_paper_mia(r) for r in done if r['dataset'] == dataset and _paper_mia(r) != '']
    if accs:
      out += ['', f'{dc.LABEL[dataset]}: held-out attack accuracy {min(accs):.2f}-'
              f'{max(accs):.2f}% over {len(accs)} (run, attack) pairs; paper '
              + (f'{min(paper):.2f}-{max(paper):.2f}% on the same rows.' if paper
                 else '(no row).')]
  if done:
    accs = [float(r['accuracy']) for r in done]
    lower = max(float(r['epsilon_lower_bound']) for r in done)
    positive = sum(float(r['epsilon_lower_bound']) > 0 for r in done)
    out += ['', f'Held-out attack accuracy ranges over {min(accs):.2f}-{max(accs):.2f}% '
            f'across {len(accs)} (run, attack) pairs; {positive} of them give a positive '
            f'lower bound on epsilon, the largest {fmt(lower, 3)}. The accuracy is at the '
            'attack\'s decision on examples that did not set it (the in-sample best is '
            'optimistic). The bound is Kairouz et al. (2015)\'s with Clopper-Pearson '
            'intervals on TPR and FPR at the run\'s delta, 95% jointly '
            '(`tffdp.mia.kairouz_lower_bound`); membership of one example is a '
            'replace-one-example change inside a client, so it contradicts a client-level '
            'epsilon only above twice that epsilon. ML-Leaks\' shadow model is trained '
            'centrally without noise, so its 0.5 cut suits a leakier model than these.']
  return out + _mia_average(done)


def _fig3_images(figs) -> list[str]:
  return [' '.join(f'![fig3 {d} {e:g}](fig3_{d}_eps{e:g}.png)' for d in dc.DATASETS
                   for e in dc.EPSILONS
                   if os.path.exists(os.path.join(figs, f'fig3_{d}_eps{e:g}.png')))]


def _speed(figs) -> list[str]:
  rows = _literal_rows(figs)
  out = []
  by_method = {}
  for r in rows:
    m = _metrics(figs, r['run'])
    if m:
      by_method.setdefault((r['dataset'], r['method']), []).append(m)
  for (dataset, method), runs in by_method.items():
    med = lambda k: statistics.median(float(x[k]) for m in runs for x in m if x.get(k))
    out.append(f'- {dc.LABEL[dataset]} {method}: round {med("round_seconds"):.2f} s (median '
               f'over {len(runs)} runs): TFF round (client training, perturbation, '
               f'aggregation) {med("train_seconds"):.2f} s, accounting '
               f'{med("accounting_seconds"):.4f} s, evaluation (test and validation '
               'sets for runs made before fidelity pass 2, the test set since) '
               f'{med("eval_seconds"):.2f} s.')
  for dataset in dc.DATASETS:
    rs = [r for r in rows if r['dataset'] == dataset and r.get('wall_seconds')]
    if rs:
      total = sum(float(r['wall_seconds']) for r in rs)
      out.append(f'- {dc.LABEL[dataset]} Table IV runs: {len(rs)} runs, {total / 3600:.2f} h '
                 f'of run wall time in all ({total / len(rs) / 60:.0f} min per run)'
                 + (' (the issue\'s target for MNIST: 12 runs in under 2 h).'
                    if dataset == 'mnist' else '.'))
  return out or ['Not regenerated yet.']


def build(figs: str) -> str:
  out = ['# DP-FedAGS: regenerated results', '',
         'Paper: `../shared/papers/004_fd8e6656ad8e147a.txt`; spec '
         '`../shared/specs/dp_fedags.md` (its Amendments apply: `Delta_S = 2 eta C / n_k`, '
         'epsilon_guaranteed inf while losses set the weights, mean accuracy over training). '
         'Every number below is read from the CSVs and run copies in this folder, written by '
         'the commands given. Settings: `experiments/dp_fedags_common.py` (100 clients, 10 '
         'per round, Dirichlet(1.0), batch 128, E = 1, C = 1, lr 0.1, delta 1e-3, T = 200; '
         'McMahan CNN on MNIST, conv 32-32-pool-64-64-pool and dense 512 on CIFAR-10); each run\'s `runs/<name>/config.json` holds its full '
         'configuration, the notes on what the paper does not give, versions and machine '
         '(runs made two at a time by the same module with a scratch `--figures-dir` record '
         'it in their command, as `SCRATCH_FIGURES_DIR` (MNIST) or `runs/scratch_figs_*` '
         '(CIFAR-10); the final pass with the default folder reused them).', '',
         '**Reconstructed baselines.** DP-FedAvg as this paper runs it (eq. 2 Gaussian on '
         'every coordinate, weights `n_k / n`) and DP-FedSNLC (eq. 2 Gaussian on the top 10% '
         'of `|g\'|` chosen without noise) are rebuilt from the paper\'s prose '
         '(`../shared/specs/baselines.md`). cpSGD follows Agarwal et al. 2018: stochastic '
         'quantisation of `g\'` to k = 2^16 levels on [-C, C], Binomial noise '
         '`s (Bin(m, 1/2) - m/2)` with `m` per client the smallest of their Theorem 1 at '
         '(epsilon, delta = 1e-3), sensitivities under the same reading as the Gaussian '
         '(`Delta_2 = Delta_inf = Delta_S`, `Delta_1 = sqrt(|W|) Delta_S`). Theorem 1 at '
         'delta 1e-3 pays for the L1 term, while eq. 2 uses `zeta = e^{-epsilon}` (about '
         '0.9) as its delta: at the same epsilon cpSGD\'s noise is several times the '
         'Gaussian\'s (the pilot table gives both).', '',
         '**Two epsilons.** `epsilon_claimed` is the paper\'s per-round epsilon (Theorem 2), '
         'charged once per client: the paper does not compose over rounds. '
         '`epsilon_guaranteed` is inf for DP-FedAGS (coordinates the sparse-vector test '
         'does not select are uploaded without noise, and the losses `L_k` set the weights '
         'in the clear), DP-FedSNLC (top coordinates chosen without noise, the rest '
         'released exactly) and cpSGD (Theorem 1 gives a per-upload (epsilon, delta) the '
         'RDP ledger cannot compose; its value at the true sensitivity is in each run\'s '
         'config notes). For DP-FedAvg it is the Gaussian mechanism with noise multiplier '
         'eq. 2 sigma on the true sensitivity C, composed by RDP over the client\'s rounds: '
         'finite, and very large, because `Delta_S = 2 eta C / n_k` sets the noise far below '
         'what C needs.', '',
         '## Fidelity: every paper number attempted', '', *_fidelity(figs), '',
         '## Pilot: the adaptive quantities (Amendments 1-2)', '', *_pilot(figs), '',
         '## Table IV: mean test accuracy over training (and final)', '', *_table4(figs),
         *_cpsgd_true_sensitivity(figs), '',
         '## Calibrating Delta_S between the two readings (fidelity pass 2)', '',
         *_calibration(figs), '',
         '## Table IV at the calibrated Delta_S', '', *_table4_calibrated(figs), '',
         *_fig3_images(figs), '',
         '## Tables II-III: membership inference', '', *_mia(figs), '',
         '## What regenerating it costs', '', *common.cost_section('dp_fedags'),
         '## Rounds that trained nothing', '', *untrained_rounds_section(figs), '',
         *_laplace_sampler(figs),
         '## Speed', '', *_speed(figs), '']
  return '\n'.join(out) + '\n'


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


def _laplace_sampler(figs: str) -> list[str]:
  lines = common.float32_laplace_section(figs, _laplace_draws)
  return (['## Laplace sampler', '', 'DP-FedAGS draws Laplace noise in its sparse-vector '
           'test (a weight with an `alpha` of +87.3 b passes the test regardless of its '
           'gradient; one of -87.3 b fails it), and in the released values only with '
           '`perturbation=laplace`.', '', *lines] if lines else [])


def main(argv=None) -> int:
  return report_main('python -m experiments.dp_fedags_report', __doc__, 'figures/dp_fedags',
                     build, argv)


if __name__ == '__main__':
  dc.entry(main)
