"""Writes `figures/cosafed/README.md` from the committed results (no numbers typed).

    python -m experiments.cosafed_report [--figures-dir figures/cosafed]

Reads `calibration.csv`, `table3.csv`, `table3_runs.csv`, `figs.csv` and the runs'
copies in `runs/`; what was not regenerated is listed as such, with its command.
"""

from __future__ import annotations

import math
import os
import statistics

from experiments import cosafed_common as cc
from experiments import fidelity
from experiments.common import md_table as _md_table, read_rows, report_main
from experiments.common import untrained_rounds_section
from experiments import common

COMMANDS = {
    'calibration': 'python -m experiments.cosafed_calibrate',
    'table3': 'python -m experiments.cosafed_table3',
    'figs': 'python -m experiments.cosafed_figs',
}
PAPER_HEADLINE = ('cosAFed spends about 14% (Equal) and 16% (Random) less total budget '
                  'than LAPFed, at a best accuracy at most 2 points lower')
# The headline's numbers (Sec. 5.3: "approximately 14% less than LAPFed" in the Equal
# group, 16% in the Random group), and its accuracy bound in points (the spec's reading of
# "the decrease is minimal": at most 2 points).
PAPER_SAVING_PCT = {'Equal': 14.0, 'Random': 16.0}   # "about": held within 5% relative
PAPER_ACC_GAP = 2.0


def _paper_multiplier(group: str) -> float:
  """The mean multiplier on epsilon the paper's cosFed total needs (its total over
  LAPFed's, which adjusts nothing)."""
  return cc.PAPER_TABLE3[(group, 'cosfed')][0] / cc.PAPER_TABLE3[(group, 'lapfed')][0]


COSFED_NEEDED = _paper_multiplier('equal')


_f = common.dash


_metrics = common.copied_metrics


def _calibration(figs) -> list[str]:
  rows = read_rows(os.path.join(figs, 'calibration.csv'))
  if not rows:
    return ['Not regenerated yet.']
  chosen = [r for r in rows if r['closest_to_paper'] == 'True']
  out = _md_table(rows, [('run', lambda r: r['run']),
                         ('best acc (%)', lambda r: r['best_test_accuracy']),
                         ('final acc (%)', lambda r: r['final_test_accuracy']),
                         ('wall s', lambda r: r['wall_seconds'])])
  out += ['', f'The paper\'s LAPFed (Equal, N = 3, epsilon 100) reaches 81.95. Closest: '
          f'{chosen[0]["run"]} (best {chosen[0]["best_test_accuracy"]}%); the figures use '
          f'`Delta_f = {cc.SENSITIVITY:g}` (`cosafed_common.SENSITIVITY`) with the spec\'s '
          'local training (lr 0.01, batch 10, 1 epoch). The noise-free runs bound what any '
          'budget can give with each local setup.', '', '![calibration](calibration.png)']
  return out


def _phase_stats(metrics, lo, hi) -> dict:
  rs = [r for r in metrics if lo <= int(r['round']) <= hi]
  def mean(k):
    vals = [float(r[k]) for r in rs if r.get(k) not in (None, '')]
    return statistics.mean(vals) if vals else math.nan
  return dict(rounds=f'{lo}-{hi}', cosine=mean('mean_cosine'), p=mean('mean_p'),
              score=mean('score'), above50=100 * mean_bool(rs, lambda r: float(r['score']) > 50),
              eps=mean('epsilon_prime_sum'), val_acc=mean('validation_accuracy'))


def mean_bool(rows, pred) -> float:
  return sum(1 for r in rows if pred(r)) / len(rows) if rows else math.nan


def _pilot(figs) -> list[str]:
  runs = read_rows(os.path.join(figs, 'table3_runs.csv')) or []
  out = []
  for group in cc.GROUPS:
    pick = [r for r in runs if r['group'] == group and r['method'] == 'cosafed'
            and r['seed'] == '0']
    if not pick:
      continue
    metrics = _metrics(figs, pick[0]['run'])
    if not metrics:
      continue
    n = len(metrics)
    phases = [_phase_stats(metrics, lo, hi) for lo, hi in
              ((1, min(10, n)), (11, n // 2), (n // 2 + 1, n)) if lo <= hi]
    out += [f'{cc.GROUP_LABEL[group]} group, cosAFed, N = 3, epsilon 100, seed 0 (per-round '
            'means; `metrics.csv` of the run has every round):', '']
    out += _md_table(phases, [
        ('rounds', lambda r: r['rounds']), ('cosine S_c', lambda r: _f(r['cosine'])),
        ('p (formula 1)', lambda r: _f(r['p'])), ('score', lambda r: _f(r['score'], 3)),
        ('rounds with score > 50 (%)', lambda r: _f(r['above50'], 3)),
        ("sum of epsilon' per round", lambda r: _f(r['eps'], 5)),
        ('validation acc', lambda r: _f(r['val_acc']))])
    zero = sum(int(float(r['zero_budget_clients'])) for r in metrics)
    out += ['', f'epsilon\' = 0 occurred {zero} times (the floor option was not needed).'
            if zero == 0 else f'epsilon\' = 0 occurred {zero} times.', '']
  if not out:
    return ['Not regenerated yet.']
  return out + [
      'The cosine between the global model and a local model stays close to 1 (the '
      'models, not the updates, are compared), so with `|D_i| / |D| = 1 / 100` and '
      '`M / N = 100 / 3`, formula 1 gives `p = 1 - S_c / 3`, about 2/3, whenever the score '
      'exceeds 50: the budget alternates between epsilon and about 2/3 epsilon. The '
      'score crosses 50 through formula 5 (`score_t` = 1 from round 175) and the '
      'accuracy/loss terms, which flip with the noisy validation curve.']


def _mean_l1_norm(figs, group) -> float:
  """Mean L1 norm of the scaled uploads before the clip, in a run with l1_clip."""
  runs = read_rows(os.path.join(figs, 'table3_runs.csv')) or []
  pick = [r for r in runs if r['group'] == group and r['method'] == 'lapfed_clipped']
  metrics = _metrics(figs, pick[0]['run']) if pick else []
  vals = [float(r['mean_l1_norm']) for r in metrics if r.get('mean_l1_norm') not in (None, '')]
  return statistics.mean(vals) if vals else math.nan


def _table3(figs) -> list[str]:
  rows = read_rows(os.path.join(figs, 'table3.csv'))
  if not rows:
    return ['Not regenerated yet.']
  out = _md_table(rows, [
      ('group', lambda r: r['group']), ('method', lambda r: r['method']),
      ('seeds', lambda r: r['seeds']),
      ('total budget: paper', lambda r: _f(r['paper_total_budget'], 8)),
      ('tffdp (mean +- half-range)', lambda r: f"{_f(r['total_budget'], 8)} +- "
                                               f"{_f(r['total_budget_spread'], 4)}"),
      ('vs LAPFed: paper', lambda r: f"{_f(r['paper_budget_vs_lapfed_pct'], 3)}%"),
      ('tffdp', lambda r: f"{_f(r['budget_vs_lapfed_pct'], 3)}%"),
      ('best_acc: paper', lambda r: _f(r['paper_best_acc'])),
      ('tffdp (mean +- half-range)',
       lambda r: f"{_f(r['best_acc'])} +- {_f(r['best_acc_spread'], 2)}"),
      ('acc vs LAPFed', lambda r: f"{_f(r['acc_vs_lapfed'], 3)} ({r['acc_verdict']})"),
      ('epsilon_claimed (max per client)', lambda r: _f(r['epsilon_claimed_max'], 6)),
      ('epsilon_guaranteed', lambda r: _f(r['epsilon_guaranteed_max'], 6)),
      ('wall s / run', lambda r: r['wall_seconds_mean'])])
  out += ['']
  by = {(r['group'], r['method']): r for r in rows}
  for g in ('Equal', 'Random'):
    cos, lap = by.get((g, 'cosAFed')), by.get((g, cc.LABEL['lapfed']))
    if cos and lap:
      saving, gap = -float(cos['budget_vs_lapfed_pct']), float(cos['acc_vs_lapfed'])
      least = PAPER_SAVING_PCT[g] * (1 - fidelity.TOLERANCE['budget'][1])
      verdict = ('both parts hold' if saving >= least and gap >= -PAPER_ACC_GAP else
                 f'the budget part holds, the accuracy part does not (more than '
                 f'{PAPER_ACC_GAP:g} points lower)' if saving >= least else
                 'the budget part does not hold')
      out.append(f'- **{g}, headline** (paper: {PAPER_HEADLINE}): tffdp cosAFed spends '
                 f"{_f(saving, 3)}% less than LAPFed (paper "
                 f"{_f(-float(cos['paper_budget_vs_lapfed_pct']), 3)}%), at "
                 f"{_f(gap, 3)} points of best accuracy "
                 f"({cos['acc_verdict']}; paper "
                 f"{_f(float(cos['paper_best_acc']) - float(lap['paper_best_acc']), 3)}): "
                 f'{verdict}.')
    cf = by.get((g, cc.LABEL['cosfed']))
    cfu = by.get((g, cc.LABEL['cosfed_updates']))
    if cf:
      out.append(f'- **{g}, cosFed** (reconstructed; Amendment 6: not reproducible from the '
                 f'description): the paper\'s total needs a mean multiplier of '
                 f'{COSFED_NEEDED:.3f} on epsilon; consecutive global models give '
                 f"{cf['mean_budget_multiplier']}" +
                 (f", consecutive global updates {cfu['mean_budget_multiplier']}" if cfu else '')
                 + '.')
    alg2 = by.get((g, cc.LABEL['cosafed_alg2']))
    if alg2:
      out.append(f'- **{g}, Alg. 2\'s accuracy score** (`score_acc=alg2`, always 1 once an '
                 f"accuracy is recorded): total budget {_f(alg2['total_budget'], 8)} "
                 f"({_f(alg2['budget_vs_lapfed_pct'], 3)}% vs LAPFed), best acc "
                 f"{_f(alg2['best_acc'])}; the figures use formula 4.")
    clipped = by.get((g, cc.LABEL['cosafed_clipped']))
    lap_clipped = by.get((g, cc.LABEL['lapfed_clipped']))
    if clipped and lap_clipped:
      norm = _mean_l1_norm(figs, g.lower())
      out.append(f'- **{g}, `l1_clip = Delta_f`**: each upload is clipped to L1 norm '
                 f'Delta_f = {cc.SENSITIVITY:g} before the noise (the uploads\' mean L1 norm '
                 f'is {_f(norm, 3)}, so the clip shrinks them about '
                 f'{_f(norm / cc.SENSITIVITY, 2)}-fold): '
                 f"LAPFed best acc {_f(lap_clipped['best_acc'])}, "
                 f"epsilon_guaranteed {_f(lap_clipped['epsilon_guaranteed_max'], 6)} per client "
                 '(best of basic composition, RDP and PLD); cosAFed best acc '
                 f"{_f(clipped['best_acc'])}, epsilon_guaranteed "
                 f"{_f(clipped['epsilon_guaranteed_max'], 6)}: its epsilon' depends on the "
                 "client's own data and sets the noise scale, so no clip makes it finite.")
  return out


def _seeds(runs, group, method, key) -> common.SeedSpread | None:
  """The seeds' values of `key` in `table3_runs.csv` for one group and method, in seed
  order (None: no run)."""
  vals = [float(r[key]) for r in sorted(runs, key=lambda r: int(r['seed']))
          if r['group'] == group and r['method'] == method]
  return common.SeedSpread(tuple(vals)) if vals else None


def _other_readings(group, method, by, calibration, kind) -> list[tuple[str, float]]:
  """`(reading, value)` of every reading run for a Table 3 cell other than tffdp's
  default: the named variants of Table 3 (seed 0) and, for the best accuracy of the
  method and group calibrated, the calibration's other `Delta_f` (seed 0)."""
  key = 'total_budget' if kind == 'budget' else 'best_acc'
  out = [(f'{cc.LABEL[v]} (seed 0)', float(by[(cc.GROUP_LABEL[group], cc.LABEL[v])][key]))
         for v, (m, _) in cc.VARIANTS.items()
         if m == method and (cc.GROUP_LABEL[group], cc.LABEL[v]) in by]
  if kind == 'accuracy':
    out += [(f'Delta_f = {float(r["sensitivity"]):g} (calibration, seed 0)',
             float(r['best_test_accuracy'])) for r in calibration
            if os.path.basename(r['run_dir']).startswith(f'{group}_{method}_')
            and r['local_training'] == 'spec' and r['sensitivity'] not in ('', None)
            and float(r['sensitivity']) != cc.SENSITIVITY]
  return out


def _fidelity(figs) -> list[str]:
  """Issue 42's table: Table 3's sixteen numbers, both readings, the headline's claims."""
  rows = read_rows(os.path.join(figs, 'table3.csv')) or []
  runs = read_rows(os.path.join(figs, 'table3_runs.csv')) or []
  calibration = read_rows(os.path.join(figs, 'calibration.csv')) or []
  by = {(r['group'], r['method']): r for r in rows}
  table3 = f'`{COMMANDS["table3"]}`'
  numbers = []
  for group in cc.GROUPS:
    for method in cc.METHODS:
      paper = cc.PAPER_TABLE3[(group, method)]
      row = by.get((cc.GROUP_LABEL[group], cc.LABEL[method]))
      for kind, key, seed_key, value in (
          ('budget', 'total_budget', 'total_budget', paper[0]),
          ('accuracy', 'best_acc', 'best_test_accuracy', paper[1])):
        default = float(row[key]) if row else None
        others = _other_readings(group, method, by, calibration, kind)
        reading, best = min(others, key=lambda o: abs(o[1] - value)) if others else ('', None)
        cause = fidelity.NO_CAUSE
        seeds = _seeds(runs, group, method, seed_key)
        near = [(r['seed'], float(r[seed_key])) for r in runs
                if r['group'] == group and r['method'] == method
                and fidelity.within(kind, value, float(r[seed_key]))]
        cosfed = [by.get((cc.GROUP_LABEL[group], cc.LABEL[m]))
                  for m in ('cosfed', 'cosfed_updates')]
        if method == 'cosfed' and kind == 'budget' and all(cosfed):
          cause = (f'neither cosine reading run gives the mean multiplier on epsilon the '
                   f'paper\'s total needs ({_paper_multiplier(group):.3f}): consecutive global '
                   f'models {cosfed[0]["mean_budget_multiplier"]}, consecutive global updates '
                   f'{cosfed[1]["mean_budget_multiplier"]} ({table3}; Amendment 6: not '
                   'reproducible from the description)')
        elif near and seeds and len(seeds.values) > 1:
          cause = (f'within the seeds\' spread: seed {near[0][0]} gives {_f(near[0][1])}, within '
                   f'tolerance of the paper (seeds {_f(seeds.low)}-{_f(seeds.high)}, '
                   f'{table3})')
        what = (f'Table 3, {cc.GROUP_LABEL[group]}, {cc.LABEL[method].split(" (")[0]}, '
                + ('total budget' if kind == 'budget' else 'best_acc'))
        if row and int(row['seeds']) > 1:
          what += f' (mean of {row["seeds"]} seeds)'
        numbers.append(fidelity.PaperNumber(what, kind, value, default, best, reading, cause))
  claims = []
  for group in cc.GROUPS:
    g = cc.GROUP_LABEL[group]
    cos, lap = (_seeds(runs, group, m, 'total_budget') for m in ('cosafed', 'lapfed'))
    cos_acc, lap_acc = (_seeds(runs, group, m, 'best_test_accuracy')
                        for m in ('cosafed', 'lapfed'))
    least = PAPER_SAVING_PCT[g] * (1 - fidelity.TOLERANCE['budget'][1])
    text = f'{g}: cosAFed spends about {PAPER_SAVING_PCT[g]:g}% less total budget than LAPFed'
    if cos and lap:
      cap = common.SeedSpread(tuple(v * (1 - least / 100) for v in lap.values))
      saving = [100 * (1 - c / l) for c, l in zip(cos.values, lap.values)]
      paper = 100 * (1 - cc.PAPER_TABLE3[(group, 'cosafed')][0]
                     / cc.PAPER_TABLE3[(group, 'lapfed')][0])
      claims.append(fidelity.Claim(
          text, fidelity.above(cap, cos),
          f'cosAFed {cos.text(0)} against LAPFed {lap.text(0)}: '
          f'{_f(min(saving), 3)}-{_f(max(saving), 3)}% less over the seeds (paper Table 3: '
          f'{paper:.2f}%; {table3}); read as the least saving, as the headline verdict '
          'under Table 3'))
    else:
      claims.append(fidelity.Claim(text, 'not run', f'not run yet: {table3}'))
    text = (f'{g}: cosAFed\'s best accuracy at most {PAPER_ACC_GAP:g} points below '
            'LAPFed\'s')
    if cos_acc and lap_acc:
      shifted = common.SeedSpread(tuple(v + PAPER_ACC_GAP for v in cos_acc.values))
      paper = cc.PAPER_TABLE3[(group, 'cosafed')][1] - cc.PAPER_TABLE3[(group, 'lapfed')][1]
      claims.append(fidelity.Claim(
          text, fidelity.above(shifted, lap_acc),
          f'cosAFed {cos_acc.text()} against LAPFed {lap_acc.text()}: '
          f'{cos_acc.mean - lap_acc.mean:+.2f} points (paper {paper:+.2f}); a verdict only '
          f'where every seed separates from the bound ({table3})'))
    else:
      claims.append(fidelity.Claim(text, 'not run', f'not run yet: {table3}'))
  return [*fidelity.section(numbers, claims), '',
          'Default reading: tffdp\'s default configuration (the spec with its Amendments: '
          f'ref. [18] partitions, `p_fixed = 0.95`, `Delta_f = {cc.SENSITIVITY:g}` '
          'calibrated, formula 4, no clip), Table 3\'s mean over its seeds. Best reading run: '
          'the closest of the other readings run: the named variants of Table 3 and, for '
          'LAPFed\'s Equal best_acc, the calibration\'s other `Delta_f`. LAPFed\'s Equal '
          'best_acc is the value `Delta_f` was calibrated against (Amendment 3), so it is '
          'within tolerance by construction. Claims: the headline, with a verdict only '
          'where every seed separates.']


def _figs(figs) -> list[str]:
  rows = read_rows(os.path.join(figs, 'figs.csv'))
  if not rows:
    return ['Not regenerated yet.']
  out = _md_table(rows, [
      ('group', lambda r: cc.GROUP_LABEL[r['group']]), ('N', lambda r: r['cohort_size']),
      ('epsilon', lambda r: _f(r['epsilon'])), ('best_acc (%)', lambda r: r['best_test_accuracy']),
      ('final (%)', lambda r: r['final_test_accuracy']),
      ('total budget', lambda r: _f(r['total_budget'], 8)),
      ("uploads with a lowered epsilon' (%)", lambda r: r['lowered_uploads_pct']),
      ("mean epsilon' / epsilon", lambda r: r['mean_budget_ratio']),
      ('wall s', lambda r: r['wall_seconds'])])
  images = sorted(f for f in os.listdir(figs) if f.startswith('fig') and f.endswith('.png'))
  return out + [''] + [f'![{f}]({f})' for f in images]


def _speed(figs) -> list[str]:
  out, seen, grand, fastest = [], set(), 0.0, math.inf
  for name in ('calibration', 'table3_runs', 'figs'):
    rows = read_rows(os.path.join(figs, f'{name}.csv')) or []
    if rows:
      total = sum(float(r['wall_seconds']) for r in rows)
      grand += sum(float(r['wall_seconds']) for r in rows if r.get('run', r.get('run_dir'))
                   not in seen)
      seen |= {r.get('run', r.get('run_dir')) for r in rows}
      fastest = min(fastest, min(float(r['wall_seconds']) for r in rows))
      out.append(f'- `{name}.csv`: {len(rows)} runs, {total / 60:.1f} min of run wall time '
                 f'in all ({total / len(rows):.0f} s per run).')
  if out:
    out.append(f'- The whole set ({len(seen)} distinct runs of 350 rounds; Figs. 2-7 reuse '
               f'Table 3\'s N = 3, epsilon 100 runs): {grand / 60:.0f} min of run wall time, '
               'against the 2-hour target. Measured while a CIFAR-10 run or the test suite '
               f'shared the 2 cores for most runs; the fastest run took {fastest:.0f} s.')
  runs = read_rows(os.path.join(figs, 'table3_runs.csv')) or []
  if runs:
    metrics = _metrics(figs, runs[0]['run'])
    if metrics:
      def med(k):
        return statistics.median(float(r[k]) for r in metrics if r.get(k) not in (None, ''))
      out.append(f"- Per-round profile ({os.path.basename(runs[0]['run'])}, medians): TFF "
                 f"round {med('train_seconds'):.3f} s (3 clients' local SGD, the Laplace "
                 f"upload aggregator, the server step and its validation evaluation), "
                 f"accounting {med('accounting_seconds'):.4f} s, test + validation "
                 f"evaluation by the runner {med('eval_seconds'):.3f} s.")
  return out or ['Not regenerated yet.']


def build(figs: str) -> str:
  out = ['# cosAFed: regenerated results', '',
         'Paper: `../shared/papers/002_62db0ee4188ee1f3.txt`; spec '
         '`../shared/specs/cosafed.md` (its Amendments apply: ref. [18] partitions, '
         '`p_fixed = 0.95`, `Delta_f` calibrated, Laplace noise, formula 4). Every number '
         'below is read from the CSVs and run copies in this folder, written by the '
         'commands given. Settings: `experiments/cosafed_common.py`; each run\'s '
         '`runs/<name>/config.json` holds its full configuration, the notes on what the '
         'paper does not give, versions and machine.', '',
         '**Reconstructed baselines.** LAPFed, ADPFL (Tang 2023; not A-DPFL) and cosFed '
         '(Zhang 2022) are rebuilt from cosAFed\'s prose (`../shared/specs/baselines.md`), '
         'not from their own papers; every row names them so.', '',
         '**Two epsilons.** `epsilon_claimed` is the paper\'s count per client: the sum of '
         'the client\'s epsilon\' over the rounds it was sampled (Theorem 1 per upload, '
         'basic composition); the paper\'s "total privacy budget" sums it over clients. '
         '`epsilon_guaranteed` is inf for every paper-literal run (the upload is never '
         'clipped: its L1 sensitivity is unbounded), and for cosAFed whatever the clip '
         '(its epsilon\' = p epsilon depends on the client\'s own data, its cosine and '
         'size, and sets the Laplace scale). For LAPFed, ADPFL and cosFed (budgets from '
         'server-side data only) `l1_clip = Delta_f` makes each upload an epsilon\'-DP '
         'Laplace release under client-level add/remove adjacency (replacement doubles it); '
         'the ledger reports the best of basic composition, dp_accounting\'s RDP and its '
         'PLD accountant (delta 1e-5). The per-round diagnostics in `metrics.csv` (cosine, '
         'L1 norm, score inputs) are the simulation\'s, not part of the mechanism.', '',
         '## Fidelity: every paper number attempted', '', *_fidelity(figs), '',
         f'## Calibration of Delta_f and the local training (Amendments 3, 7)', '',
         f'Command: `{COMMANDS["calibration"]}`', '', *_calibration(figs), '',
         '## Pilot: the adaptive quantities', '', *_pilot(figs), '',
         '## Table 3: total budget and best accuracy (N = 3, epsilon 100, 350 rounds)', '',
         f'Command: `{COMMANDS["table3"]}` (seeds 0, 1, 2; the named readings on seed 0). '
         'The spread is half the range over the seeds; an accuracy difference within the '
         'larger of the two methods\' spreads is called a tie.', '',
         *_table3(figs), '',
         '![table3_equal](table3_equal.png) ![table3_random](table3_random.png)', '',
         '![table3_equal_budget](table3_equal_budget.png) '
         '![table3_random_budget](table3_random_budget.png)', '',
         '## Figs. 2-7: cosAFed over N x epsilon (seed 0)', '',
         f'Command: `{COMMANDS["figs"]}`. Paper: accuracy rises and its fluctuation falls '
         'with N (Figs. 2-5); the budget drops and returns to its initial value, with a '
         'wider range for larger epsilon and a narrower one for larger N (Figs. 6-7; '
         'plots only).', '', *_figs(figs), '',
         '## What regenerating it costs', '', *common.cost_section('cosafed'),
         '## Rounds that trained nothing', '', *untrained_rounds_section(figs), '',
         *_laplace_sampler(figs),
         '## Speed', '', *_speed(figs), '']
  return '\n'.join(out) + '\n'


def _laplace_sampler(figs: str) -> list[str]:
  """Every cosAFed-family upload is `d * update + Lap(b)` on all of the model's weights."""
  lines = common.float32_laplace_section(figs, lambda config, rows: common.model_size(
      config['model'], config['dataset']) * common.cohort_uploads(rows))
  return ['## Laplace sampler', '', *lines] if lines else []


def main(argv=None) -> int:
  return report_main('python -m experiments.cosafed_report', __doc__, 'figures/cosafed',
                     build, argv)


if __name__ == '__main__':
  cc.entry(main)
