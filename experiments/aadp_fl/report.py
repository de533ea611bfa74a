"""Writes `figures/aadp_fl/README.md` from the committed results (no numbers typed).

    python -m experiments.aadp_fl.report [--figures-dir figures/aadp_fl]

Reads `table2.csv`, `fig4.csv` ... `fig7.csv` and the runs' copies in `runs/` (config,
metrics, summary); what was not regenerated is listed as such, with its command.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import os
import statistics

from experiments.aadp_fl import cnn_pilot as aadp_fl_cnn_pilot
from experiments.aadp_fl import common
from experiments.aadp_fl import fig3 as aadp_fl_fig3
from experiments.aadp_fl import fig5 as aadp_fl_fig5
from experiments.aadp_fl import fig7 as aadp_fl_fig7
from experiments.aadp_fl import table2 as aadp_fl_table2
from experiments import fidelity
from experiments import seed_checks
from experiments.common import finished_runs_table, finished_summaries, fmt, md_table, read_rows, report_main
from experiments.common import cost_section, parked_section, untrained_rounds_section
from experiments.common import copied_metrics, copied_run_file
from experiments.common import COSTS_CSV, Missing, missing_items
from experiments.common import dash as _f
from experiments.report_template import Template

COMMANDS = {
    'table2': 'python -m experiments.aadp_fl.table2 --datasets mnist fashion_mnist',
    'fig3': 'python -m experiments.aadp_fl.fig3',
    'fig4': 'python -m experiments.aadp_fl.fig4 --datasets mnist cifar10',
    'fig5': 'python -m experiments.aadp_fl.fig5 --datasets mnist cifar10',
    'fig5_fl_mnist_cnn': 'python -m experiments.aadp_fl.fig5 --model fl_mnist_cnn '
                         '--clips 0.3 0.5 0.75 1.0',
    'fig6': 'python -m experiments.aadp_fl.fig6',
    'fig7': 'python -m experiments.aadp_fl.fig7',
    'fig6_fl_mnist_cnn': 'python -m experiments.aadp_fl.fig6 --model fl_mnist_cnn',
    'fig6_mcmahan_cnn': 'python -m experiments.aadp_fl.fig6 --model mcmahan_cnn',
    'fig7_alexnet_cnn': 'python -m experiments.aadp_fl.fig7 --datasets cifar10 '
                        '--model alexnet_cnn --eval-every 10',
}
T = Template('aadp_fl')
PAPER = {name: T.text(f'paper_{name}') for name in COMMANDS}  # what the paper shows
# What the report lists as not run while it is missing: (present(tables), the missing
# artefact, costed per run as the mean run of its `like` artefact in the cost table).
EXPECTED = [
    (lambda t: _has(t['table2'], 'cifar10', common.LABELS['dp_scaffold_own']), Missing(
        'Table 2, CIFAR-10 DP-SCAFFOLD at its own accountant\'s sigma',
        'python -m experiments.aadp_fl.table2 --datasets cifar10', 1, 'table2')),
    (lambda t: _has_curves(t['fig3'], aadp_fl_fig3.CURVES), Missing(
        'Fig. 3, AlexNet-style panel', COMMANDS['fig3'], len(aadp_fl_fig3.CURVES), 'fig3')),
    (lambda t: _has(t['fig4'], 'cifar10'), Missing(
        'Fig. 4b (CIFAR-10)', 'python -m experiments.aadp_fl.fig4 --datasets cifar10', 4,
        'fig4')),
    (lambda t: _has(t['fig5'], 'cifar10'), Missing(
        'Fig. 5, CIFAR-10', 'python -m experiments.aadp_fl.fig5 --datasets cifar10', 4,
        'fig5')),
    (lambda t: bool(t['fig5_fl_mnist_cnn']), Missing(
        'Fig. 5 for the MNIST CNN', COMMANDS['fig5_fl_mnist_cnn'], 4, 'fig5_fl_mnist_cnn')),
    (lambda t: bool(t['fig6_fl_mnist_cnn']), Missing(
        'Fig. 6, CNN panel (the paper code\'s CNN)', COMMANDS['fig6_fl_mnist_cnn'], 5,
        'fig6_fl_mnist_cnn')),
    (lambda t: bool(t['fig6_mcmahan_cnn']), Missing(
        'Fig. 6, CNN panel (McMahan CNN)', COMMANDS['fig6_mcmahan_cnn'], 5, 'fig6_mcmahan_cnn')),
    (lambda t: bool(t['fig7_alexnet_cnn']), Missing(
        'Fig. 7a (CIFAR-10, AlexNet-style)', COMMANDS['fig7_alexnet_cnn'],
        2 * len(aadp_fl_fig7.Q_USER), 'fig7_alexnet_cnn')),
]
# Artefacts built from several long runs that land one by one: what -> the glob of their
# run copies under `runs/` (Fig. 7a has an AADP-FL and a DP-FedAvg run per q_user).
RUN_SETS = {'Fig. 7a (CIFAR-10, AlexNet-style)': 'cifar10_*_alexnet_cnn_seed0'}


def _not_run(tables, figs, costs: str = COSTS_CSV) -> list[str]:
  """`- what: cost: command` for each expected artefact the tables do not hold yet
  (`common.missing_items`, costed from the cost table `costs`); one made of several
  runs (`RUN_SETS`) says which of them are finished and is costed for the rest."""
  missing = []
  for present, item in EXPECTED:
    if present(tables):
      continue
    pattern = RUN_SETS.get(item.what)
    done = [name for name, *_ in finished_summaries(
        os.path.join(figs, 'runs'), keep=lambda name: fnmatch.fnmatch(name, pattern))
            ] if pattern else []
    if done:
      item = dataclasses.replace(item, runs=item.runs - len(done), what=(
          f'{item.what}, the {item.runs - len(done)} runs of {item.runs} not finished (done: '
          + ', '.join(f'`{d}`' for d in done) + ')'))
    missing.append(item)
  return missing_items('aadp_fl', missing, costs) if missing else T.lines('nothing_missing')


def _has(rows, dataset, curve=None) -> bool:
  return any(r['dataset'] == dataset and curve in (None, r['curve']) for r in rows or [])


def _has_curves(rows, curves) -> bool:
  """Every curve in `curves` (`aadp_fl.common.LABELS` keys) has a row, labelled
  `<label>, <model>` (a figure run with `--curves` for a subset writes only those rows)."""
  present = {r['curve'].rsplit(', ', 1)[0] for r in rows or []}
  return all(common.LABELS[c] in present for c in curves)


def _span(values, digits=4) -> str:
  """`min-max` of `values`, each with `digits` significant digits."""
  return f'{_f(min(values), digits)}-{_f(max(values), digits)}'


def _run_file(figs, row, name):
  return copied_run_file(figs, row['run'], name)


def _metrics(figs, row):
  return copied_metrics(figs, row['run'])


def _profile(rows) -> str:
  def med(k):
    vals = [float(r[k]) for r in rows if r.get(k) not in (None, '')]
    return statistics.median(vals) if vals else math.nan
  return T.text('profile', {k: med(k) for k in ('train_seconds', 'accounting_seconds',
                                                 'eval_seconds')})


def _table(figs, rows, extra_cols=()) -> list[str]:
  head = ['dataset', 'curve', *extra_cols, 'final test acc (%)', 'best (%)',
          'final test loss', 'rounds', 'epsilon_claimed', 'epsilon_guaranteed',
          'budget max (end)', 'sigma max (end)', 'budget increases', 'wall s',
          's/round: TFF round / accounting / evaluation (median)']
  # The TFF round is one call: client training, aggregation (clip, noise, mean) and the
  # server update cannot be timed apart from Python.
  out = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for r in rows:
    cells = [common.LABEL.get(r['dataset'], r['dataset']), r['curve'],
             *(_f(r.get(c)) for c in extra_cols), _f(r['final_test_accuracy']),
             _f(r['best_test_accuracy']), _f(r['final_test_loss']), r['rounds'],
             _f(r['epsilon_claimed']), _f(r['epsilon_guaranteed']), _f(r['final_budget_max']),
             _f(r['final_noise_multiplier_max']), _f(r['budget_increases']),
             _f(r['wall_seconds'], 6), _profile(_metrics(figs, r))]
    out.append('| ' + ' | '.join(str(c) for c in cells) + ' |')
  stops = [r for r in rows if r.get('stop_reason')]
  if stops:
    out.append('')
    out += [f"- {common.LABEL.get(r['dataset'], r['dataset'])} {r['curve']} stopped after "
            f"round {r['rounds']}: {r['stop_reason']}." for r in stops]
  return out


def _pilot(figs, table2) -> list[str]:
  rows = [r for r in (table2 or []) if r['dataset'] == 'mnist' and r['curve'] == 'AADP-FL']
  if not rows:
    return ['Not regenerated yet.']
  metrics = _metrics(figs, rows[0])
  with open(_run_file(figs, rows[0], 'config.json')) as f:
    cfg = json.load(f)
  opts = cfg['method_options']
  hp = cfg['method_hyperparameters']
  s, b, k = cfg['clip_norm'], cfg['batch_size'], cfg['clients']
  sigma = hp['initial_noise_multipliers'][0]
  predicted = 0.1 * sigma * s / b / math.sqrt(k)
  picks = sorted({1, 2, 5, 10, 15, 20, 25, 30, 40, len(metrics)} & set(range(1, len(metrics) + 1)))
  rms = [float(m['rms_first_moment_change']) for m in metrics]
  zeroed = [int(m['round']) for m in metrics if float(m['nonzero_fraction_after_clip']) < 0.01]
  last = metrics[-1]
  return [*T.lines('pilot_heading', clients=k, clip=s, batch=b, epsilon=opts['epsilon'],
                   rounds=cfg['rounds'], l=opts['l']), '',
          *T.table('pilot_table', [metrics[i - 1] for i in picks]), '',
          T.text('pilot_convergence', span=_span(rms, 3), rounds=len(metrics),
                 predicted=predicted, l=opts['l'], increases=last['budget_increases'],
                 ablation=_l_ablation(figs, table2, opts)),
          T.text('pilot_clipping', zeroed=_range(zeroed), stability=_stability(metrics)),
          T.text('pilot_noise', sigma=sigma, std=sigma * s / b, multiplier=sigma / b,
                 guaranteed=last['epsilon_guaranteed'], rounds=len(metrics),
                 claimed=last['epsilon_claimed']),
          *_baseline_pilot(figs, table2)]


def _baseline_pilot(figs, table2) -> list[str]:
  """What the DDGauss and DP-SCAFFOLD runs (MNIST, Theorem-1 sigma) did per round."""
  rows = {r['curve']: r for r in table2 if r['dataset'] == 'mnist'}
  out = []
  dd = rows.get(common.LABELS['ddgauss_theorem1'])
  if dd and _metrics(figs, dd):
    m = _metrics(figs, dd)[-1]
    with open(_run_file(figs, dd, 'config.json')) as f:
      cfg = json.load(f)
    n, s = cfg['clients_per_round'], cfg['clip_norm']
    scale, d2, share = (float(m[k]) for k in ('scale_factor', 'scaled_inflated_l2',
                                             'scaled_local_stddev'))
    out.append(T.text('ddgauss', scale=scale, n=n, clip=s, scaled_clip=s * scale, d2=d2,
                      inflation=100 * (d2 / (s * scale) - 1), share=share,
                      multiplier=math.sqrt(n) * share / d2, sigma=float(m['noise_multiplier'])))
  sc = rows.get(common.LABELS['dp_scaffold_theorem1'])
  if sc and _metrics(figs, sc):
    ms = _metrics(figs, sc)
    norms = [(int(m['round']), float(m['server_control_norm'])) for m in ms]
    picks = [norms[i] for i in sorted({1, 9, 24, len(norms) - 1} & set(range(len(norms))))]
    mid, last = norms[len(norms) // 2][1], norms[-1][1]
    trend = ('settles (within 20% over the second half of the run)'
             if abs(last - mid) <= 0.2 * mid else
             'keeps growing' if last > mid else 'shrinks over the second half')
    out.append(
        '- **DP-SCAFFOLD.** The norm of the server control variate c (before the round: '
        + ', '.join(f'round {r}: {v:.3g}' for r, v in picks) + f') {trend}; per-example '
        'clip 1.0.')
  return out


def _stability(metrics) -> str:
  accs = [float(m['test_accuracy']) for m in metrics if m['test_accuracy'] != '']
  best = max(accs)
  return T.text('stability_holds' if accs[-1] >= best - 0.01 else 'stability_falls',
                final=100 * accs[-1], best=100 * best)


def _l_ablation(figs, table2, opts) -> str:
  rows = [r for r in table2
          if r['dataset'] == 'mnist' and r['curve'] == common.LABELS['aadp_fl_l2e-4']]
  metrics = _metrics(figs, rows[0]) if rows else []
  if not metrics:
    return 'The l = 2e-4 run is not regenerated yet.'
  fired = sum(float(m['rms_first_moment_change']) < 2e-4 and
              float(m['rms_second_moment_change']) < 2e-4 for m in metrics)
  budgets = [float(m['epsilon_budget_max']) for m in metrics]
  reached = next((i + 1 for i, v in enumerate(budgets) if v >= opts['epsilon_max']), None)
  return T.text('l_ablation', rows[0], fired=fired, rounds=len(metrics), reached=reached,
                epsilon_max=opts['epsilon_max'])


def _fig5_main(rows) -> list[dict]:
  """Fig. 5's sweep rows (rows written before the control have no `series`)."""
  return [r for r in rows or [] if (r.get('series') or aadp_fl_fig5.SERIES)
          == aadp_fl_fig5.SERIES]


def _fig5_control(rows) -> tuple[list[str], bool]:
  """The Nadam-epsilon control beside each S it ran at: peak and final against the run
  without it. Returns the lines and whether the control removes every fall-back (final
  within 1.5 points of its peak where the run without it fell further; None: no run
  without it fell further, so there is nothing to remove)."""
  out, removed = [], None
  main = {(r['dataset'], float(r['clip_norm'])): r for r in _fig5_main(rows)}
  for r in rows:
    if r.get('series') != aadp_fl_fig5.CONTROL_SERIES:
      continue
    base = main.get((r['dataset'], float(r['clip_norm'])))
    if base is None:
      continue
    fell = float(base['best_test_accuracy']) - float(base['final_test_accuracy'])
    now = float(r['best_test_accuracy']) - float(r['final_test_accuracy'])
    if fell > 1.5:
      removed = (removed is not False) and now <= 1.5
    out.append(T.text('fig5_control', dataset=common.LABEL[r['dataset']],
                      clip=float(r['clip_norm']), epsilon=aadp_fl_fig5.CONTROL_EPSILON,
                      best=r['best_test_accuracy'], final=r['final_test_accuracy'], now=now,
                      base_best=base['best_test_accuracy'],
                      base_final=base['final_test_accuracy'], fell=fell))
  return out, removed


def _fig5_notes(figs, rows) -> list[str]:
  out = []
  control, removed = _fig5_control(rows)
  rows = _fig5_main(rows)
  for r in rows:
    metrics = _metrics(figs, r)
    if not metrics:
      continue
    accs = [float(m['test_accuracy']) for m in metrics if m['test_accuracy'] != '']
    peak = max(range(len(accs)), key=accs.__getitem__) + 1
    sparse = sum(float(m['nonzero_fraction_after_clip']) < 0.01 for m in metrics)
    out.append(T.text('fig5_run', dataset=common.LABEL[r['dataset']], curve=r['curve'],
                      peak_acc=100 * accs[peak - 1], peak=peak, final=100 * accs[-1],
                      sparse=sparse, rounds=len(metrics)))
  if out:
    epsilon = aadp_fl_fig5.CONTROL_EPSILON
    cause = (T.text('fig5_cause_removed', epsilon=epsilon) if removed else
             T.text('fig5_cause_nothing') if control and removed is None else
             T.text('fig5_cause_likely', control=T.text(
                 'fig5_cause_not_confirmed' if control else 'fig5_cause_not_isolated',
                 epsilon=epsilon)))
    out.insert(0, T.text('fig5_intro', cause=cause))
  return out + control


def _range(rounds: list[int]) -> str:
  if not rounds:
    return 'none'
  return f'{rounds[0]}-{rounds[-1]}' if rounds == list(range(rounds[0], rounds[-1] + 1)) else \
      ', '.join(map(str, rounds))


def _same_schedule_notes(figs, table2) -> list[str]:
  """Datasets where AADP-FL at l = 1e-4 and at l = 2e-4 used the same budget every round.

  Then the two runs differ only in the noise draw (unseeded, see
  `tffdp.aggregators.PerClientGaussianFactory`), and their accuracy gap measures the
  run-to-run spread of one configuration, not an effect of l.
  """
  out = []
  for dataset, accs in _same_schedule_pairs(figs, table2):
    out.append(T.text('same_schedule', dataset=common.LABEL[dataset], first=accs[0],
                      second=accs[1], apart=abs(accs[0] - accs[1])))
  return out


def _same_schedule_pairs(figs, table2) -> list[tuple[str, list[float]]]:
  """`(dataset, [final accuracy at l = 1e-4, at l = 2e-4])` for each dataset whose two
  AADP-FL rows used the same budget every round (their run copies' metrics): two runs of
  one configuration, apart only by the unseeded noise draw."""
  out = []
  for dataset in ('mnist', 'fashion_mnist', 'cifar10'):
    rows = {r['curve']: r for r in table2 if r['dataset'] == dataset}
    pair = [rows.get(common.LABELS['aadp_fl']), rows.get(common.LABELS['aadp_fl_l2e-4'])]
    if not all(pair):
      continue
    budgets = [[m['epsilon_budget_max'] for m in _metrics(figs, r)] for r in pair]
    if not budgets[0] or budgets[0] != budgets[1]:
      continue
    out.append((dataset, [float(r['final_test_accuracy']) for r in pair]))
  return out


def _accs(rows, dataset) -> dict[str, dict]:
  return {r['curve']: r for r in rows or [] if r['dataset'] == dataset}


def _pct(row) -> str:
  stop = f" (stopped after round {row['rounds']})" if row.get('stop_reason') else ''
  return f"{_f(row['final_test_accuracy'])}%{stop}"


def _table2_claims(table2, spread) -> list:
  claims = []
  baselines = ('dp_fedavg_theorem1', 'ddgauss_theorem1', 'dp_scaffold_theorem1')
  for dataset, bound in aadp_fl_table2.PAPER_BOUND.items():
    rows = _accs(table2, dataset)
    acc = {k: float(rows[common.LABELS[k]]['final_test_accuracy'])
           for k in common.LABELS if common.LABELS[k] in rows}
    name = common.LABEL[dataset]
    command = f'`python -m experiments.aadp_fl.table2 --datasets {dataset}`'
    text = T.text('claim_bound', name=name, bound=bound, plural='s' * (bound != 1))
    if 'aadp_fl' not in acc or 'fedavg' not in acc:
      claims.append(fidelity.Claim(text, 'not run', f'not run yet: {command}'))
      claims.append(fidelity.Claim(T.text('claim_ahead', name=name), 'not run',
                                   f'not run yet: {command}'))
      continue
    a, f = acc['aadp_fl'], acc['fedavg']
    evidence = f'AADP-FL {_f(a)}% vs FedAvg {_f(f)}% ({a - f:+.2f} points), seed 0 each.'
    if 'nadam_control' in acc:
      n = acc['nadam_control']
      rest = a - n
      within = fidelity.margin_verdict([bound - abs(rest)], spread)
      evidence += T.text('claim_nadam', label=common.LABELS['nadam_control'], nadam=n,
                         against=n - f, command=COMMANDS['table2'], rest=rest, within=T.text(
                             'claim_nadam_' + within.replace(' ', '_'), bound=bound))
    else:
      evidence += f' {common.LABELS["nadam_control"]}: not run yet ({command}).'
    claims.append(fidelity.Claim(text, fidelity.margin_verdict([bound - abs(a - f)], spread),
                                 evidence))
    present = [k for k in baselines if k in acc]
    missing = [common.LABELS[k] for k in baselines if k not in acc]
    verdict = (fidelity.margin_verdict([a - acc[k] for k in present], spread) if present
               else 'not run')
    if missing and verdict != 'not reproduced':
      verdict = 'not run'
    own = [k.replace('theorem1', 'own') for k in baselines]
    listed = lambda keys: ', '.join(f'{common.LABELS[k].split(" (")[0]} '
                                    f'{_pct(rows[common.LABELS[k]])}' for k in keys if k in acc)
    claims.append(fidelity.Claim(T.text('claim_ahead', name=name), verdict, T.text(
        'claim_ahead_evidence', aadp=a, theorem1=listed(present),
        missing=f'; not run: {", ".join(missing)}' if missing else '',
        own=listed(own) or 'not run')))
  return claims


def _figure_claims(tables, spread, figs) -> list:
  claims = []
  # Fig. 4b: the paper's falling-accuracy claim is CIFAR-10's (for MNIST it says the
  # final results differ slightly and the optimum comes later).
  pts = sorted((float(r['non_iid_percentage']), float(r['final_test_accuracy']))
               for r in tables['fig4'] or [] if r['dataset'] == 'cifar10'
               and (r.get('series') or 'AADP-FL') == 'AADP-FL')
  text = 'Fig. 4b, CIFAR-10: the larger the non-IID percentage p, the lower the accuracy'
  if len(pts) < 2:
    claims.append(fidelity.Claim(text, 'not run', 'not run yet: `python -m '
                                 'experiments.aadp_fl.fig4 --datasets cifar10`'))
  else:
    claims.append(fidelity.Claim(
        text, fidelity.margin_verdict([a[1] - b[1] for a, b in zip(pts, pts[1:])], spread),
        'final test accuracy ' + ', '.join(f'p = {p:g}: {_f(v)}%' for p, v in pts) +
        f' (`{COMMANDS["fig4"]}`, seed 0 each).'))
  for dataset, best in aadp_fl_fig5.PAPER_BEST.items():
    if best is None:
      continue
    rows = [r for r in _fig5_main(tables['fig5']) if r['dataset'] == dataset]
    acc = {float(r['clip_norm']): float(r['final_test_accuracy']) for r in rows}
    text = (f'Fig. 5, {common.LABEL[dataset]} ({common.SETTINGS[dataset]["model"]}, no '
            f'noise): S = {best:g} gives the best accuracy of the thresholds swept')
    if best not in acc or len(acc) < 2:
      claims.append(fidelity.Claim(text, 'not run', 'not run yet: `python -m '
                                   f'experiments.aadp_fl.fig5 --datasets {dataset}`'))
      continue
    peak = max(rows, key=lambda r: float(r['best_test_accuracy']))
    ctl = {float(r['clip_norm']): float(r['final_test_accuracy']) for r in tables['fig5']
           if r['dataset'] == dataset and r.get('series') == aadp_fl_fig5.CONTROL_SERIES}
    control = ''
    if best in ctl and len(ctl) > 1:
      control = T.text(
          'claim_fig5_control', epsilon=aadp_fl_fig5.CONTROL_EPSILON,
          accuracies=', '.join(f'S = {s:g}: {_f(v)}%' for s, v in sorted(ctl.items())),
          verdict=fidelity.margin_verdict(
              [ctl[best] - v for s, v in ctl.items() if s != best], spread))
    claim = fidelity.Claim(
        text, fidelity.margin_verdict([acc[best] - v for s, v in acc.items() if s != best], spread),
        'final test accuracy ' + ', '.join(f'S = {s:g}: {_f(v)}%' for s, v in sorted(acc.items()))
        + f'; by peak accuracy S = {float(peak["clip_norm"]):g} '
        f'({_f(peak["best_test_accuracy"])}%) (`{COMMANDS["fig5"]}`, seed 0 each).' + control)
    check = f'aadp_fl_fig5_{dataset}'
    claims.append(seed_checks.restate(claim, figs, check)
                  if check in seed_checks.CHECKS else claim)
  mlp = _budget_stats(tables['fig6'])
  cnn = {name: _budget_stats(tables[name]) for name in ('fig6_mcmahan_cnn', 'fig6_fl_mnist_cnn')}
  text = T.text('claim_fig6')
  if not mlp or not cnn['fig6_mcmahan_cnn']:
    claims.append(fidelity.Claim(text, 'not run', f'not run yet: `{COMMANDS["fig6"]}` and '
                                 f'`{COMMANDS["fig6_mcmahan_cnn"]}`'))
  else:
    other = cnn['fig6_fl_mnist_cnn']
    seed0_hours = sum(float(r['wall_seconds'] or 0) for n in ('fig6', 'fig6_mcmahan_cnn')
                      for r in tables[n]) / 3600
    claims.append(fidelity.Claim(
        text, fidelity.margin_verdict([mlp[0] - cnn['fig6_mcmahan_cnn'][0]], spread), T.text(
            'claim_fig6_evidence', mlp=mlp[0], cnn=cnn['fig6_mcmahan_cnn'][0],
            command=COMMANDS['fig6_mcmahan_cnn'], hours=2 * seed0_hours,
            other=f'; the paper code\'s CNNMnist (other reading of the widths): {other[0]:.2f}'
            if other else '')))
  for name, dataset, panel in (('fig7_alexnet_cnn', 'cifar10', 'Fig. 7a, CIFAR-10 '
                                'AlexNet-style'), ('fig7', 'mnist', 'Fig. 7b, MNIST MLP')):
    rows = [r for r in tables[name] or [] if r['dataset'] == dataset]
    gaps = _fig7_gaps(rows).get(dataset)
    texts = (f'{panel}: AADP-FL ahead of DP-FedAvg at every user sampling probability q',
             f'{panel}: the gap to DP-FedAvg larger at higher q')
    if not gaps:
      claims += [fidelity.Claim(t, 'not run', f'not run yet: `{COMMANDS[name]}`') for t in texts]
      continue
    stopped = [f'q = {_f(float(r["q_user"]))} ({r["stop_reason"].split(":")[0]})'
               for r in rows if r['series'] != 'AADP-FL' and r.get('stop_reason')]
    evidence = ('AADP-FL minus DP-FedAvg, final test accuracy in points: ' +
                ', '.join(f'q = {q:g}: {g:+.2f}' for q, g in gaps) +
                (f'; DP-FedAvg stopped early at {", ".join(stopped)}' if stopped else '') +
                f' (`{COMMANDS[name]}`, seed 0 each).')
    claims.append(fidelity.Claim(texts[0], fidelity.margin_verdict([g for _, g in gaps], spread),
                                 evidence))
    claims.append(fidelity.Claim(
        texts[1], fidelity.margin_verdict([b[1] - a[1] for a, b in zip(gaps, gaps[1:])], spread),
        evidence))
  return claims


def _tables(figs) -> dict:
  return {name: read_rows(os.path.join(figs, f'{name}.csv')) for name in COMMANDS}


def fidelity_items(figs, tables=None) -> tuple[list[fidelity.PaperNumber],
                                               list[fidelity.Claim]]:
  """The paper's numbers (none in its text) and its claims, judged against the spread of
  two runs of one configuration (`_same_schedule_pairs`). `tables`: the figures' CSVs
  (read from `figs` when None)."""
  tables = tables or _tables(figs)
  spread = _spread(_same_schedule_pairs(figs, tables['table2'] or []))
  return [], _table2_claims(tables['table2'], spread) + _figure_claims(tables, spread, figs)


def _spread(pairs) -> float | None:
  """The largest gap between two runs of one configuration (`_same_schedule_pairs`)."""
  return max((max(a) - min(a) for _, a in pairs), default=None)


def _fidelity(figs, tables) -> list[str]:
  """Issue 42's table: the paper's numbers (none in its text) and its claims."""
  pairs = _same_schedule_pairs(figs, tables['table2'] or [])
  spread = _spread(pairs)
  measured = ('; '.join(f'{common.LABEL[d]} AADP-FL at l = 1e-4 and l = 2e-4, the same '
                        f'budget every round: {_f(a[0])}% and {_f(a[1])}%' for d, a in pairs)
              if pairs else 'none')
  return [*fidelity.section(*fidelity_items(figs, tables)), '', T.text(
      'fidelity_readings', spread=f'{_f(spread, 3)} points ({measured})' if pairs else
      'and none is measured here, so each is a tie')]


def build(figs: str) -> str:
  tables = _tables(figs)
  out = [*T.lines('intro'), '', *_fidelity(figs, tables), '',
         '## Pilot: the adaptive quantities', '', *_pilot(figs, tables['table2']), '',
         '## Pilot: the MNIST CNN panel (Fig. 6b)', '', *_cnn_pilot(figs), '']
  sections = [('table2', 'Table 2 and Fig. 3 (MLP): accuracy at epsilon = 4', (), 'paper'),
              ('fig3', 'Fig. 3, AlexNet-style panel (tffdp\'s narrowed widths): test loss '
               'per round', ('model',), None),
              ('fig4', 'Fig. 4: non-IID percentage', ('non_iid_percentage',), None),
              ('fig5', 'Fig. 5: clipping threshold S without noise', ('clip_norm',), None),
              ('fig5_fl_mnist_cnn', 'Fig. 5 for the MNIST CNN (the paper code\'s '
               'CNNMnist): S without noise', ('clip_norm',), None),
              ('fig6', 'Fig. 6: privacy budget', ('epsilon',), None),
              ('fig6_fl_mnist_cnn', 'Fig. 6, CNN panel (the paper code\'s CNNMnist): '
               'privacy budget', ('epsilon',), None),
              ('fig6_mcmahan_cnn', 'Fig. 6, CNN panel (McMahan CNN): privacy budget',
               ('epsilon',), None),
              ('fig7', 'Fig. 7: user sampling probability (S = 0.3)', ('q_user',), None),
              ('fig7_alexnet_cnn', 'Fig. 7a: user sampling probability, CIFAR-10 '
               'AlexNet-style', ('q_user',), None)]
  for name, title, extra, _ in sections:
    out += [f'## {title}', '', f'Paper: {PAPER[name]}.', '', f'Command: `{COMMANDS[name]}`', '']
    rows = tables[name]
    if not rows:
      out += ['Not regenerated yet.', '']
      continue
    if name == 'table2':
      same = _same_schedule_notes(figs, rows)
      out += [*(same + [''] if same else []), *T.lines('table2_notes'), '']
    if name == 'fig4':
      out += [*_fig4_verdicts(rows), '']
    if name.startswith('fig7'):
      out += _fig7_noise_notes(figs, rows)
    if name == 'fig5':
      out += [*_fig5_notes(figs, rows), '']
    if name.startswith(('fig5_', 'fig6_')) and name.endswith('_cnn'):
      out += [_rounds_to(figs, rows, SLOW_START_ACCURACY), '']
    if name.startswith('fig6_'):
      out += [_budget_sensitivity(rows, tables['fig6']), '']
    out += _table(figs, rows, extra) + ['']
    others = [n for n, *_ in sections if n != name and n.startswith(name + '_')]
    images = sorted(f for f in os.listdir(figs) if f.startswith(name + '_')
                    and f.endswith('.png') and not any(f.startswith(o) for o in others))
    out += [f'![{f}]({f})' for f in images] + ['']
  out += ['## What regenerating it costs', '', *cost_section('aadp_fl')]
  out += ['## Rounds that trained nothing', '', *untrained_rounds_section(figs), '']
  out += ['## Not run or not built', '']
  out += _not_run(tables, figs)
  out += _unlisted_runs(figs, tables)
  parked = parked_section(figs)
  if parked:
    out += ['', *parked]
  return '\n'.join(out) + '\n'


def _median_round(metrics) -> float | None:
  """Median `round_seconds` of a run's metrics rows; None without round times."""
  times = [float(m['round_seconds']) for m in metrics if m.get('round_seconds')]
  return statistics.median(times) if times else None


def _pilot_calibration(figs, rows) -> str:
  """Whether the pilot runs' sigma is the 50-round figure's: runs paused by
  `stop_after_round` are calibrated for their full T; older pilots ran `--rounds` only."""
  paused = []
  for run in {r['run'] for r in rows}:
    path = os.path.join(figs, 'runs', os.path.basename(run), 'config.json')
    if not os.path.exists(path):  # no copy: not known to be paused
      paused.append(False)
      continue
    with open(path) as f:
      cfg = json.load(f)
    paused.append(bool(cfg.get('stop_after_round')) and cfg['stop_after_round'] < cfg['rounds'])
  return T.text('pilot_calibration_paused' if all(paused) else 'pilot_calibration_short')


def _cnn_pilot(figs) -> list[str]:
  """The CNN-panel pilot (`cnn_pilot.csv`): per model and reading of step 4, what
  longitudinal clipping keeps and how far each run trained."""
  rows = read_rows(os.path.join(figs, 'cnn_pilot.csv'))
  if not rows:
    return [f'Not run yet: `{PILOT_COMMAND}`.']
  runs: dict[tuple[str, str], list[dict]] = {}
  for r in rows:
    runs.setdefault((r['model'], r['reading']), []).append(r)
  # The MLP for reference: the same rounds of Fig. 6's epsilon = 1 run (same settings).
  mlp = [r for r in read_rows(os.path.join(figs, 'fig6.csv')) or []
         if r['dataset'] == 'mnist' and r['epsilon'] and float(r['epsilon']) == 1.0]
  metrics = _metrics(figs, mlp[0]) if mlp else []
  if metrics:
    with open(_run_file(figs, mlp[0], 'config.json')) as f:
      cfg = json.load(f)
    pilot_rounds = max(int(r['round']) for r in rows)
    runs[('mlp', 'literal (Fig. 6 run)')] = aadp_fl_cnn_pilot.rows_of(
        'mlp', 'literal (Fig. 6 run)', common.model_dim('mnist', 'mlp'),
        [m for m in metrics if int(m['round']) <= pilot_rounds], mlp[0]['run'],
        cfg['clip_norm'], cfg['clip_norm'] / cfg['batch_size'])
  summary = []
  for (model, reading), rs in runs.items():
    rs.sort(key=lambda r: int(r['round']))
    dim, last = int(rs[0]['parameters']), rs[-1]
    kept = [float(r['kept_coordinates']) for r in rs]
    noise = float(last['noise_std'])
    # Noise of the cohort mean against the largest signal a clipped update can carry:
    # ||mean of n noise vectors|| ~ std sqrt(d / n), against S; d is the kept coordinates
    # where only those are noised.
    noised = float(last['kept_coordinates']) if reading == 'noise_on_kept' else dim
    ratio = noise * math.sqrt(noised / float(last['clients'])) / float(last['clip_norm'])
    summary.append(dict(
        model=model, reading=reading, dim=dim, rounds=last['round'],
        acc=_f(100 * float(last['test_accuracy'])),
        best=_f(100 * max(float(r['test_accuracy']) for r in rs)),
        kept=_span(kept, 3), frac=_span([float(r['kept_fraction']) for r in rs], 2),
        norm=_span([float(r['update_norm']) for r in rs], 3),
        clipped=f"{_span([float(r['clipped_clients']) for r in rs])} of "
                f"{int(float(last['clients']))}",
        sigma=_f(last['noise_multiplier'], 3) if noise else '-',
        noise=_f(noise, 3), ratio=_f(ratio, 3) if noise else '-'))
  out = [*T.lines('cnn_pilot', command=PILOT_COMMAND, clip=rows[0]['clip_norm']), '',
         *T.table('cnn_pilot_table', summary), '',
         T.text('cnn_pilot_readings', calibration=_pilot_calibration(figs, rows)), '']
  by = {(r['model'], r['reading']): r for r in summary}
  ref = by.get(('mlp', 'literal (Fig. 6 run)'))
  if ref:
    out.append(T.text('cnn_pilot_mlp', ref))
  for model in sorted({r['model'] for r in summary}):
    lit, free = by.get((model, 'literal')), by.get((model, 'noiseless'))
    if lit and free:
      out.append(T.text('cnn_pilot_model', lit, free_acc=free['acc'], free_rounds=free['rounds']))
  return out


PILOT_COMMAND = 'python -m experiments.aadp_fl.cnn_pilot'
SLOW_START_ACCURACY = 0.9


def _fig4_verdicts(rows) -> list[str]:
  """Markdown lines: per dataset, whether AADP-FL's final accuracy falls at every step of
  the non-IID percentage (Fig. 4's claim), with the steps where it does not (the FedAvg
  and Nadam control rows, `series` other than AADP-FL, left out)."""
  lines = []
  all_rows, rows = rows, [r for r in rows if (r.get('series') or 'AADP-FL') == 'AADP-FL']
  for dataset in dict.fromkeys(r['dataset'] for r in rows):
    pts = sorted((float(r['non_iid_percentage']), float(r['final_test_accuracy']))
                 for r in rows if r['dataset'] == dataset)
    if len(pts) < 2:
      continue
    rises = [f'p = {a[0]:g} -> {b[0]:g}: {a[1]:g}% -> {b[1]:g}%'
             for a, b in zip(pts, pts[1:]) if b[1] >= a[1]]
    verdict = ('falls at every step' if not rises else
               'does not fall at every step (' + '; '.join(rises) + ')')
    lines.append(f'- {common.LABEL.get(dataset, dataset)}: final accuracy {verdict}; '
                 f'p = {pts[0][0]:g} to p = {pts[-1][0]:g}: {pts[0][1]:g}% -> '
                 f'{pts[-1][1]:g}% ({pts[-1][1] - pts[0][1]:+.2f} points, one seed each).')
  lines += _fig4_controls(all_rows)
  return ['Verdicts (final test accuracy against the non-IID percentage p):', ''] + lines \
      if lines else []


def _fig4_controls(rows) -> list[str]:
  """Per dataset with the p = 0 / p = 1 controls: how far each series falls from p = 0 to
  p = 1, so the fall is put on the partition (FedAvg falls too), the server Nadam (the
  Nadam control falls), or AADP-FL's clipping and noise (only AADP-FL falls)."""
  out = []
  for dataset in dict.fromkeys(r['dataset'] for r in rows):
    acc = {(r.get('series') or 'AADP-FL', float(r['non_iid_percentage'])):
           float(r['final_test_accuracy']) for r in rows if r['dataset'] == dataset}
    series = ['AADP-FL', common.LABELS['fedavg'], common.LABELS['nadam_control']]
    falls = {k: acc[(k, 0.0)] - acc[(k, 1.0)] for k in series
             if (k, 0.0) in acc and (k, 1.0) in acc}
    if len(falls) < 3:
      continue
    a, f, n = (falls[k] for k in series)
    verdict = T.text('fig4_partition' if f >= a / 2 else 'fig4_nadam' if n >= a / 2
                     else 'fig4_aadp')
    out.append(T.text(
        'fig4_controls', dataset=common.LABEL.get(dataset, dataset), verdict=verdict,
        a0=acc[(series[0], 0.0)], a1=acc[(series[0], 1.0)], a=-a, f0=acc[(series[1], 0.0)],
        f1=acc[(series[1], 1.0)], f=-f, n0=acc[(series[2], 0.0)], n1=acc[(series[2], 1.0)], n=-n))
  return out


def _fig7_gaps(rows) -> dict[str, list[tuple[float, float]]]:
  """Per dataset with two q or more: `(q_user, AADP-FL minus DP-FedAvg final test
  accuracy in points)`, in q order."""
  out = {}
  for dataset in dict.fromkeys(r['dataset'] for r in rows):
    acc = {}
    for r in rows:
      if r['dataset'] == dataset:
        key = 'aadp' if r['series'] == 'AADP-FL' else 'dp_fedavg'
        acc.setdefault(float(r['q_user']), {})[key] = float(r['final_test_accuracy'])
    gaps = sorted((q, a['aadp'] - a['dp_fedavg']) for q, a in acc.items()
                  if {'aadp', 'dp_fedavg'} <= set(a))
    if len(gaps) >= 2:
      out[dataset] = gaps
  return out


def _fig7_noise_notes(figs, rows) -> list[str]:
  """One paragraph: the DP-FedAvg runs' expected noise norm of the cohort mean over S
  (`dp_fedavg_noise_ratio`), from their run copies; [] where none is DP-FedAvg."""
  ratios = _dp_fedavg_ratios(figs, rows)
  if not ratios:
    return []
  above = sum(r > 1 for *_, r in ratios)
  return [T.text('fig7_noise', why=_NOISE_RATIO_WHY, above=above, runs=len(ratios),
                 ratios=', '.join(f"{_f(r, 3)} at q = {_f(float(row['q_user']))}"
                                  for row, _, r in ratios)), '']


# Why `dp_fedavg_noise_ratio` is `sigma sqrt(d) / K`, as the report states it.
_NOISE_RATIO_WHY = T.text('noise_ratio_why')


def _dp_fedavg_ratios(figs, rows) -> list[tuple[dict, dict, float]]:
  """`(row, config, dp_fedavg_noise_ratio)` of each DP-FedAvg row whose run copy (its
  `config.json` under `figs/runs/`) is here, in the order of `rows`."""
  out = []
  for row in rows:
    path = _run_file(figs, row, 'config.json')
    if not path:
      continue
    with open(path) as f:
      config = json.load(f)
    ratio = dp_fedavg_noise_ratio(config)
    if ratio is not None:
      out.append((row, config, ratio))
  return out


def _budget_stats(rows):
  """A Fig. 6 panel's MNIST rows: `(spread of AADP-FL's final accuracy over the budgets,
  its min, its max, FedAvg minus the max, FedAvg minus the min, private runs ending at
  their best, private runs)`; None without FedAvg and two budgets."""
  mnist = [r for r in rows or [] if r['dataset'] == 'mnist']
  private = [float(r['final_test_accuracy']) for r in mnist if r['epsilon']]
  fedavg = [float(r['final_test_accuracy']) for r in mnist if not r['epsilon']]
  if len(private) < 2 or not fedavg:
    return None
  at_best = sum(r['final_test_accuracy'] == r['best_test_accuracy'] for r in mnist
                if r['epsilon'])
  return (max(private) - min(private), min(private), max(private),
          fedavg[0] - max(private), fedavg[0] - min(private), at_best, len(private))


def _budget_sensitivity(cnn_rows, mlp_rows) -> str:
  """One line: the spread of AADP-FL's final accuracy over the budgets and its gap to
  FedAvg, for a CNN panel against the MLP panel (the paper: the CNN is "less affected when
  privacy budgets fluctuate")."""
  cnn, mlp = _budget_stats(cnn_rows), _budget_stats(mlp_rows)
  if not cnn or not mlp:
    return 'Budget sensitivity: needs the FedAvg run and two budgets of both panels.'
  return T.text('budget_sensitivity', verdict='holds' if cnn[0] < mlp[0] else 'does not hold',
                cnn_spread=cnn[0], cnn_min=cnn[1], cnn_max=cnn[2], cnn_low=cnn[3],
                cnn_high=cnn[4], mlp_spread=mlp[0], mlp_min=mlp[1], mlp_max=mlp[2],
                mlp_low=mlp[3], mlp_high=mlp[4], gap=abs(mlp[0] - cnn[0]), at_best=cnn[5],
                private=cnn[6])


def _rounds_to(figs, rows, level: float) -> str:
  """One line: per curve, the first round whose test accuracy reaches `level` (the CNN
  runs at small S start slowly: longitudinal clipping keeps a few dozen coordinates until
  the update norms come down)."""
  parts = []
  for r in rows:
    first = next((int(m['round']) for m in _metrics(figs, r)
                  if m.get('test_accuracy') and float(m['test_accuracy']) >= level), None)
    parts.append(f"{r['curve']}: {f'round {first}' if first else 'never'}")
  return (f'First round at >= {100 * level:g}% test accuracy (of {rows[0]["rounds"]}): '
          + '; '.join(parts) + '.')


def _median_round_seconds(run_dir) -> str:
  median = _median_round(read_rows(os.path.join(run_dir, 'metrics.csv')) or [])
  return _f(math.nan if median is None else median, 3)


def _unlisted_runs(figs, tables) -> list[str]:
  """Finished CIFAR-10 runs in no written table yet (e.g. Table 2's first CIFAR-10 rows
  while the others still run), read from their copies in `runs/`."""
  listed = {os.path.basename(r['run']) for rows in tables.values() for r in rows or []
            if r.get('run')}
  table = finished_runs_table(
      os.path.join(figs, 'runs'), percent=True, empty='-',
      keep=lambda name: name.startswith('cifar10_') and name not in listed,
      extra=[('median s/round', _median_round_seconds),
             ('DP-FedAvg noise norm of the mean / S', _dp_fedavg_noise_cell)])
  if not table:
    return []
  return ['', *T.lines('unlisted'), '', *table, '',
          T.text('unlisted_note', why=_NOISE_RATIO_WHY, reference=_mlp_noise_reference(figs))]


def dp_fedavg_noise_ratio(config: dict):
  """Expected L2 norm of DP-FedAvg's noise on the cohort mean over the clip norm S.

  `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed` adds
  `N(0, (sigma S)^2 I_d)` to the sum of the clipped client updates and divides by the
  expected cohort K (`clients_per_round`), so the noise of the mean has norm about
  `sigma S sqrt(d) / K`; over S that is `sigma sqrt(d) / K`.

  Args:
    config: A run's `config.json` (`method`, `dataset`, `model`, `noise_multiplier`,
      `clients_per_round`).

  Returns:
    The ratio (float), or None for a run that is not DP-FedAvg.
  """
  if config.get('method') != 'dp_fedavg':
    return None
  dim = common.model_dim(config['dataset'], config['model'])
  return float(config['noise_multiplier']) * math.sqrt(dim) / float(
      config['clients_per_round'])


def _dp_fedavg_noise_cell(run_dir) -> str:
  with open(os.path.join(run_dir, 'config.json')) as f:
    ratio = dp_fedavg_noise_ratio(json.load(f))
  return '-' if ratio is None else _f(ratio, 3)


def _mlp_noise_reference(figs) -> str:
  """` For reference, ...`: the same ratio for Fig. 7's MNIST MLP DP-FedAvg runs (which
  trained), from their run copies (`fig7.csv` holds accuracies in %); '' without them."""
  mnist = [r for r in read_rows(os.path.join(figs, 'fig7.csv')) or []
           if r['dataset'] == 'mnist']
  parts = [f"{_f(ratio, 3)} at q = {_f(cfg['clients_per_round'] / cfg['clients'])} "
           f"({_f(float(row['final_test_accuracy']))}% final test accuracy)"
           for row, cfg, ratio in _dp_fedavg_ratios(figs, mnist)]
  if not parts:
    return ''
  return T.text('mlp_noise_reference', dim=common.model_dim('mnist', 'mlp'),
                parts=', '.join(parts))


def main(argv=None) -> int:
  return report_main('python -m experiments.aadp_fl.report', __doc__, 'figures/aadp_fl',
                     build, argv)


if __name__ == '__main__':
  common.entry(main)
