"""Privacy audit (issue 40): canaries in each method's own TFF process, epsilon measured.

    python -m experiments.audit [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR]
                                [--quick]

Pilot stage (issue 40, item 7), on both privacy units, before auditing all sixteen
methods: does the canary count give a lower bound above 0, and how do the two numbers move
with the noise?

- Client-level track: the demo's (MNIST, 1,000 clients, Dirichlet(0.5) label split,
  Poisson cohorts of expected size 50, the 26k CNN, clip norm `S = 0.5`, 100 rounds, seed
  0) with `M = 1,000` canary clients (`--audit-canaries`, each included with probability
  1/2, an included one joining each round with probability `q = 0.05` like a client; its
  update `S u_j`, clipped like any). Non-private FedAvg is the power check; DDGauss
  (Kairouz et al. 2021, distributed discrete Gaussian with secure aggregation) and
  AADP-FL (its own Poisson cohorts, `q_user = 0.05`) are audited alike.
- The client-level `inf` methods on the same track with uniform cohorts of 50 (they draw
  fixed-size cohorts): DP-FedAGS, DP-FedSNLC, DP-FedAvg-AGS and cpSGD at their per-round
  budget 0.5, DP-FedAGS with every coordinate noised and size weights (its DP-safe
  reading), cosAFed, LapFed, ADPFL and cosFed at `epsilon' = 100` and `Delta_f = 1`, and
  LapFed with each upload clipped to L1 norm `Delta_f` (finite guarantee).
- Sample-level track: issue 41's sample-level task (MNIST, 100 clients, Dirichlet(0.5),
  the same CNN), uniform cohorts of 10, clip norm `C = 1`, 50 rounds, with `M = 1,000`
  gradient canaries in one host client's DP-SGD steps (`tffdp.canaries.GradientAuditor`):
  DPFL at two noise levels, DP-SCAFFOLD, Adap DP-FL (its own Poisson lots at
  `q_k = L / |D^k|`, canaries clipped to the host's adaptive `C^k`; they enter its
  gradient query, not its clipping-norm query), A-DPFL with Abadi et al.'s clip-then-noise and
  with Alg. 3 as printed (`paper_order`, noise on the unclipped sum: `epsilon_guaranteed
  = inf`), the latter also with canary gradients of norm 100 (unbounded sensitivity).

For each run the report gives `epsilon_guaranteed` and `epsilon_claimed` (the ledgers; the
host client's for gradient canaries) beside, for both threat models (the auditor sees
every round's release, or only the final model), Steinke, Nasr and Jagielski 2023's
one-run lower bound (95%) and Andrew et al. 2024's one-shot estimate
(`tffdp.canaries.Auditor.report`), and the verdict. It also lists, for every registered
method, whether `--audit-canaries` can audit it yet, and why not.

Writes each run under `--runs-dir` and the whole of `--figures-dir`: the run copies,
`results.csv`, `audit.png` and `README.md`, generated from those runs.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # pylint: disable=g-import-not-at-top

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments import common  # pylint: disable=g-import-not-at-top
from tffdp import canaries  # pylint: disable=g-import-not-at-top
from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp import runner  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top

# The client-level track: the demo's (canary clients).
TRACK = dict(dataset='mnist', clients=1000, clients_per_round=50, partition='dirichlet',
             partition_options={'alpha': 0.5}, cohort_sampling='poisson',
             model='adap_dp_fl_cnn', rounds=100, learning_rate=0.1, batch_size=20,
             clip_norm=0.5, delta=1e-5, eval_every=5, checkpoint_every=10, log_every=10,
             seed=0, audit_canaries=1000)
# The sample-level track (gradient canaries in one host client's DP-SGD steps): issue 41's
# sample-level task (100 clients, Dirichlet(0.5)), uniform cohorts of 10, 50 rounds.
SAMPLE_TRACK = dict(TRACK, clients=100, clients_per_round=10, cohort_sampling='uniform',
                    rounds=50, clip_norm=1.0)
# DP-FedAGS's and cosAFed's families draw fixed-size cohorts (k of N): the client-level
# track with uniform cohorts of 50 (canaries still join at q = K / N).
UNIFORM_TRACK = dict(TRACK, cohort_sampling='uniform')
TRACKS = {'client': TRACK, 'client_uniform': UNIFORM_TRACK, 'sample': SAMPLE_TRACK}
# (name, track, method, settings beyond the track)
PILOT = (
    ('fedavg', 'client', 'fedavg', {}),
    ('dp_fedavg_sigma1.0', 'client', 'dp_fedavg', dict(noise_multiplier=1.0)),
    ('dp_fedavg_sigma0.5', 'client', 'dp_fedavg', dict(noise_multiplier=0.5)),
    ('dp_fedavg_sigma0.3', 'client', 'dp_fedavg', dict(noise_multiplier=0.3)),
    ('ddgauss_sigma1.0', 'client', 'ddgauss', dict(noise_multiplier=1.0)),
    # The `inf` methods of the client-level unit at their paper's own budgets, and their
    # DP-safe variants: DP-FedAGS's family (per-round epsilon 0.5) and cosAFed's
    # (per-round epsilon' 100, Delta_f 1).
    # AADP-FL draws its own Poisson cohorts: q_user = 0.05 (50 of 1,000 expected).
    ('aadp_fl', 'client', 'aadp_fl', dict(q_user=0.05)),
    ('dp_fedags', 'client_uniform', 'dp_fedags', {}),
    ('dp_fedags_perturb_all_size', 'client_uniform', 'dp_fedags',
     dict(perturb_all=True, weighting='size')),
    ('dp_fedsnlc', 'client_uniform', 'dp_fedsnlc', {}),
    ('dp_fedavg_ags', 'client_uniform', 'dp_fedavg_ags', {}),
    ('cpsgd', 'client_uniform', 'cpsgd', {}),
    ('cosafed', 'client_uniform', 'cosafed', {}),
    ('lapfed', 'client_uniform', 'lapfed', {}),
    ('lapfed_l1_clip', 'client_uniform', 'lapfed', dict(l1_clip=1.0)),
    ('adpfl', 'client_uniform', 'adpfl', {}),
    ('cosfed', 'client_uniform', 'cosfed', {}),
    ('dpfl_sigma1.0', 'sample', 'dpfl', dict(noise_multiplier=1.0)),
    ('dpfl_sigma0.5', 'sample', 'dpfl', dict(noise_multiplier=0.5)),
    ('dp_scaffold_sigma1.0', 'sample', 'dp_scaffold', dict(noise_multiplier=1.0)),
    # Adap DP-FL at its MNIST setting (Adam lr 0.002, sigma_0 6 decaying, lot 78, every
    # client every round); canary gradients of norm 100, clipped to the host's C^k.
    ('adap_dp_fl', 'sample', 'adap_dp_fl',
     dict(noise_multiplier=6.0, learning_rate=0.002, clients_per_slice=10,
          audit_canary_norm=100.0)),
    ('a_dpfl', 'sample', 'a_dpfl', dict(noise_multiplier=1.0)),
    ('a_dpfl_paper_order', 'sample', 'a_dpfl',
     dict(noise_multiplier=1.0, dp_sgd='paper_order')),
    ('a_dpfl_paper_order_norm100', 'sample', 'a_dpfl',
     dict(noise_multiplier=1.0, dp_sgd='paper_order', audit_canary_norm=100.0)),
)
QUICK = dict(clients=40, clients_per_round=10, rounds=3, audit_canaries=40,
             model='logistic_regression', num_validation=500, log_every=1, eval_every=1)
QUICK_SAMPLE = dict(QUICK, clients=10, clients_per_round=5, rounds=2)


def configs(data_dir, quick: bool):
  quick_of = {'client': QUICK, 'client_uniform': QUICK, 'sample': QUICK_SAMPLE}
  return [(name, config_lib.RunConfig.create(**dict(
      TRACKS[track], method=method, data_dir=data_dir,
      **dict(settings, **(quick_of[track] if quick else {})))))
          for name, track, method, settings in PILOT]


def auditable(data_dir) -> list[dict]:
  """Every registered method: whether `--audit-canaries` can audit it now, and why not.

  Built on a tiny MNIST configuration (four clients, no round run).
  """
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in config_lib.methods():
      cfg = config_lib.RunConfig.create(
          method=name, dataset='mnist', data_dir=data_dir, clients=4, clients_per_round=2,
          partition='iid', model='logistic_regression', num_validation=100, rounds=1,
          audit_canaries=4, out=os.path.join(tmp, name)).resolved()
      try:
        runner.build_experiment(cfg, log=lambda s: None)
        why = ''
      except ValueError as e:
        why = str(e).split(': ', 1)[-1]
      rows.append(dict(method=name, auditable='yes' if not why else 'not yet', why=why))
  return rows


def result_row(name: str, summary: dict, config: dict, metrics: list[dict]) -> dict:
  """One run's audit. The epsilons it is held against are the run's largest over clients
  (client-level) or, with gradient canaries, the host client's own. `metrics`: the run's
  metrics.csv rows (the noise multiplier at the first and last round, where it moves)."""
  audit = summary['audit']
  host = audit.get('host')
  # Held against: the host's own (gradient canaries), else the larger of real and canary
  # clients' (`epsilon_*_compared`), else the run's.
  against = lambda kind: audit.get(f'epsilon_{kind}_host', audit.get(
      f'epsilon_{kind}_compared', summary[f'epsilon_{kind}']))
  row = dict(run=name, method=summary['method'], unit=summary['dp_unit'],
             dp_sgd=config.get('method_options', {}).get('dp_sgd', ''),
             noise_multiplier=config['method_hyperparameters'].get('noise_multiplier', ''),
             canary_norm=config.get('audit_canary_norm') or config['clip_norm'],
             host='' if host is None else host,
             epsilon_claimed=against('claimed'), epsilon_guaranteed=against('guaranteed'),
             max_joins=audit.get('max_joins', ''))
  # A per-round claim the paper does not compose, composed (basic, pure epsilon) over the
  # rounds of the canary that joined most.
  row['claim_composed'] = (float(row['epsilon_claimed']) * int(row['max_joins'])
                           if summary['method'] in PER_ROUND_CLAIMS and row['max_joins']
                           else '')
  for model in ('every_round', 'final_model'):
    row[f'{model}_lower_bound'] = audit[model]['epsilon_lower_bound']
    row[f'{model}_estimate'] = audit[model]['epsilon_estimate']
  sigmas = [r.get('noise_multiplier', '') for r in (metrics[0], metrics[-1])]
  row['sigma_first_last'] = (' -> '.join(common.fmt(float(v)) for v in sigmas)
                             if '' not in sigmas and sigmas[0] != sigmas[1] else '')
  row.update(verdict=verdict(row), canaries=audit['canaries'], included=audit['included'],
             joins=audit['joins'], final_test_accuracy=summary['final_test_accuracy'],
             wall_seconds=summary['wall_seconds'])
  return row


INF = float('inf')
# Methods whose claim is a per-round epsilon the paper labels its tables with and does not
# compose over rounds (DP-FedAGS, Theorem 2; spec dp_fedags.md): their ledger charges it
# once for the run.
PER_ROUND_CLAIMS = ('dp_fedags', 'dp_fedsnlc', 'dp_fedavg_ags', 'cpsgd')
DELTA = TRACK['delta']


def ceiling(m: int, n_included: int, delta: float) -> float:
  """The largest lower bound `canaries.Auditor.report` can give with `m` canaries of which
  `n_included` were included: every guess right (the included canaries score highest),
  Bonferroni over the guess counts."""
  included = np.arange(m) < n_included
  return canaries.bonferroni_lower_bound(included.astype(float), included, delta)[0]


def verdict(row: dict) -> str:
  """Issue 40's verdict: `guarantee contradicted` where the lower bound exceeds a finite
  `epsilon_guaranteed` (a bug in tffdp), `claimed contradicted` where it exceeds the
  paper's claim (for a per-round claim the paper does not compose, `PER_ROUND_CLAIMS`:
  whether it also exceeds that claim composed over the busiest canary's rounds), else
  `none contradicted`. On the every-round bound alone (the run's `epsilon_lower_bound`):
  each threat model's bound holds at 95%, the larger of the two only at 90%."""
  bound = float(row['every_round_lower_bound'])
  if bound > float(row['epsilon_guaranteed']):
    return 'guarantee contradicted'
  if bound > float(row['epsilon_claimed']):
    if row['claim_composed'] != '' and bound <= float(row['claim_composed']):
      return 'claimed contradicted as one epsilon for the run (not composed per round)'
    return 'claimed contradicted'
  return 'none contradicted'


def _ratio(row: dict, model: str) -> float:
  """`model`'s estimate over a finite `epsilon_guaranteed` (Andrew et al. 2024 compare
  their estimate with the analytical epsilon this way); NaN where it is not finite."""
  g = float(row['epsilon_guaranteed'])
  return float(row[f'{model}_estimate']) / g if 0 < g < float('inf') else float('nan')


def _ratios(row: dict) -> str:
  if not 0 < float(row['epsilon_guaranteed']) < float('inf'):
    return ''
  return ', '.join(common.fmt(_ratio(row, m), 2) for m in ('every_round', 'final_model'))


def plot(rows: list[dict], path: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(10, 4.5))
  x = np.arange(len(rows))
  series = [('epsilon_guaranteed', 'epsilon_guaranteed (ledger)'),
            ('every_round_estimate', 'estimate, every round'),
            ('final_model_estimate', 'estimate, final model'),
            ('every_round_lower_bound', 'lower bound (95%), every round'),
            ('final_model_lower_bound', 'lower bound (95%), final model')]
  width = 0.8 / len(series)
  for i, (key, label) in enumerate(series):
    vals = [float(r[key]) for r in rows]
    shown = [v if np.isfinite(v) else 0.0 for v in vals]
    bars = ax.bar(x + (i - len(series) / 2 + 0.5) * width, shown, width, label=label)
    for b, v in zip(bars, vals):
      if not np.isfinite(v):
        ax.annotate('inf', (b.get_x() + b.get_width() / 2, 0), ha='center', va='bottom',
                    fontsize=7)
  claimed = [float(r['epsilon_claimed']) for r in rows]
  ax.scatter(x, [c if np.isfinite(c) else np.nan for c in claimed], marker='_', s=300,
             color='black', zorder=3, label='epsilon_claimed (the paper\'s analysis)')
  ax.set_xticks(x, [r['run'] for r in rows], rotation=25, ha='right', fontsize=8)
  ax.set_yscale('symlog', linthresh=1.0)
  ax.set_ylabel('epsilon (delta 1e-5)')
  ax.set_title('Audit of both tracks (sample-level: the host client\'s epsilons)')
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def readme(rows, methods, command, seconds, quick) -> str:
  f = common.fmt
  quick_of = {'client': QUICK, 'client_uniform': QUICK, 'sample': QUICK_SAMPLE}
  setting = lambda track: ', '.join(
      f'{k} {v}' for k, v in dict(TRACKS[track], **(quick_of[track] if quick else {})).items())
  lines = [
      '# Privacy audit (issue 40): pilot on both units', '',
      'Generated by `' + ' '.join(command) + '` (do not edit by hand) on '
      f'{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} '
      f'CPUs; the command took {seconds:.0f} s (a run it reused keeps its own wall time, '
      'in the table).' + (' **Quick (toy) run.**' if quick else ''), '',
      'Client-level track: ' + setting('client') + '; for DP-FedAGS\'s and cosAFed\'s '
      'families (fixed-size cohorts) with cohort_sampling uniform.', '',
      'Sample-level track: ' + setting('sample') + ' (each run copy under `runs/` holds its '
      '`config.json`, with the command, and its `summary.json`).', '',
      'What is scaled down: every method runs on one of these two shared tracks rather '
      'than its paper\'s main-table setup, so that all sixteen sit on one data split, '
      'model and cohort and each run takes minutes. A method keeps its own options\' '
      'defaults (per-round budgets, noise schedules); the data (MNIST, Dirichlet(0.5) '
      'label split), the 26k CNN, the cohort, the 50-100 rounds, delta and the shared '
      'learning rate, batch size, noise multiplier and clip norm are the track\'s (Adap '
      'DP-FL keeps its paper\'s Adam learning rate 0.002 and sigma_0 6). So DP-FedAGS\'s '
      '`Delta_S = 2 eta C / n_k` and cpSGD\'s binomial count follow this track\'s eta, '
      '`C = 0.5` and delta 1e-5 (its own experiments: `C = 1`, delta 1e-3), and the cosAFed '
      'family runs at its option default `Delta_f = 1`, not the calibrated 4.0 of its '
      'figures.', '',
      'Client-level canaries (`tffdp.canaries.Auditor`): each of the `M` canary clients is '
      'included with probability 1/2 (drawn from the seed, before the run); an included '
      'canary joins each round with probability `q = K / N`, as a client does, and its '
      'update is `S u_j` (a seeded unit direction) in place of its training, through the '
      'method\'s own clipping, noise and weighting. Scores: the largest cosine over rounds '
      'between `u_j` and the model delta (every round) and the cosine with `w_0 - w_T` '
      '(final model).', '',
      'Sample-level gradient canaries (`tffdp.canaries.GradientAuditor`): the `M` canaries '
      'are examples of one host client (the first client of the first non-empty cohort); '
      'an included canary\'s gradient (norm `C`, or the `canary norm` column) joins the '
      'host\'s DP-SGD steps once per local epoch, in a step drawn uniformly (Adap DP-FL: '
      'each of its Poisson lots at the host\'s rate), clipped where the step clips its '
      'examples (not under A-DPFL\'s `paper_order`) and noised with them. Scores: the largest cosine over the host\'s rounds between `u_j` and the '
      'host\'s upload (every round: the release its sample-level guarantee covers) and the '
      'cosine with `w_0 - w_T` (final model). The epsilons in the table are then the '
      'host\'s own (a sample-level run reports the largest over clients).', '',
      'Lower bound: Steinke, Nasr and Jagielski 2023, one run, 95% (Bonferroni over the '
      'guess counts). Estimate: Andrew et al. 2024, two fitted Gaussians (final model: '
      'against the `N(0, 1/d)` null; every round: against the left-out canaries\' '
      'scores). An estimate is not a bound. The accuracies are those of audit runs '
      '(canaries took part), not the methods\'.', '',
  ]
  lines += common.md_table(rows, [
      ('run', lambda r: r['run']),
      ('unit', lambda r: r['unit']),
      ('eps claimed', lambda r: f(r['epsilon_claimed'])),
      ('eps guaranteed', lambda r: f(r['epsilon_guaranteed'])),
      ('lower bound, every round', lambda r: f(r['every_round_lower_bound'])),
      ('lower bound, final model', lambda r: f(r['final_model_lower_bound'])),
      ('estimate, every round', lambda r: f(r['every_round_estimate'])),
      ('estimate, final model', lambda r: f(r['final_model_estimate'])),
      ('estimate / guaranteed (every round, final)', lambda r: _ratios(r)),
      ('verdict', lambda r: r['verdict']),
      ('canary norm', lambda r: f(r['canary_norm'])),
      ('sigma, first -> last round', lambda r: r['sigma_first_last']),
      ('included / joins', lambda r: f'{r["included"]} / {r["joins"]}'),
      ('test acc', lambda r: f(r['final_test_accuracy'])),
      ('wall s', lambda r: f(r['wall_seconds'], 3)),
  ])
  named = lambda v: [r['run'] for r in rows if r['verdict'].startswith(v)]
  lines += ['', 'Guarantee contradicted (a lower bound above a finite `epsilon_guaranteed`): '
            + (', '.join(named('guarantee contradicted')) or 'none') + '. Claim contradicted '
            '(a lower bound above `epsilon_claimed`, within its guarantee): '
            + (', '.join(named('claimed contradicted')) or 'none') + '. For a client-level '
            'run both epsilons are the larger of the real clients\' and the canary clients\' '
            '(a canary may join more rounds than any real client); for a sample-level run, '
            'the host client\'s.', '']
  gaussian = [r for r in rows if r['method'] == 'dp_fedavg']
  if gaussian:
    spread = lambda m: (f(min(_ratio(r, m) for r in gaussian), 2) + '-' +
                        f(max(_ratio(r, m) for r in gaussian), 2))
    lines += ['Estimate over the analytical epsilon of Gaussian DP-FedAvg (Poisson cohorts, '
              f'so claimed = guaranteed): {spread("every_round")} when the auditor sees '
              f'every round, {spread("final_model")} when it sees the final model only. '
              'Andrew et al. 2024 find the estimate close to the analytical epsilon in the '
              'first threat model and much smaller in the second.', '']
  inf = [r for r in rows if r['unit'] != 'none' and float(r['epsilon_guaranteed']) == INF]
  if inf:
    counts = sorted({(int(r['canaries']), int(r['included'])) for r in inf})
    ceilings = ', '.join(f'{f(ceiling(m, n, DELTA))} with {m} canaries ({n} included)'
                         for m, n in counts)
    lines += ['## The `inf` variants: empirical epsilon against the claim', '',
              'A variant whose `epsilon_guaranteed` is `inf` has no finite guarantee for '
              'its executed mechanism. Its audit says how much of that this auditor sees: '
              'with 95% confidence the mechanism is not (epsilon, delta)-DP for any '
              'epsilon below the lower bound. The largest bound the audit can give is '
              f'{ceilings} (every guess right), so a bound at that ceiling means the '
              'canaries were told apart without error and the true epsilon may be far '
              'higher.', '']
    lines += common.md_table(inf, [
        ('run', lambda r: r['run']),
        ('eps claimed', lambda r: f(r['epsilon_claimed'])),
        ('lower bound (every round)', lambda r: f(r['every_round_lower_bound'])),
        ('lower bound / claimed', lambda r: f(float(r['every_round_lower_bound'])
                                              / float(r['epsilon_claimed']), 2)
         if float(r['epsilon_claimed']) > 0 else ''),
        ('at the ceiling', lambda r: 'yes' if float(r['every_round_lower_bound'])
         >= ceiling(int(r['canaries']), int(r['included']), DELTA) - 1e-6 else 'no'),
        ('estimate (every round)', lambda r: f(r['every_round_estimate'])),
        ('most rounds one canary joined', lambda r: r['max_joins']),
        ('per-round claim composed over them', lambda r: f(r['claim_composed'])
         if r['claim_composed'] != '' else ''),
        ('verdict', lambda r: r['verdict'])])
    lines += ['', 'DP-FedAGS\'s family (' + ', '.join(PER_ROUND_CLAIMS) + ') claims a '
              'per-round epsilon (Theorem 2) and labels its tables with it without composing '
              'over rounds; the ledger charges it once for the run. A bound above it '
              'contradicts that reading; the composed column is the same per-round claim '
              'summed over the rounds of the canary that joined most (basic composition), '
              'which the verdict checks too.', '']
  lines += [
            '![audit](audit.png)', '', '## Which methods `--audit-canaries` takes today', '']
  lines += common.md_table(methods, [('method', lambda r: r['method']),
                                     ('auditable', lambda r: r['auditable']),
                                     ('why not yet', lambda r: r['why'])])
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.audit', description=__doc__)
  p.add_argument('--data-dir', default=None)
  p.add_argument('--runs-dir', default='runs/audit')
  p.add_argument('--figures-dir', default=os.path.join('figures', 'audit'))
  p.add_argument('--quick', action='store_true', help='toy sizes (tests)')
  args = p.parse_args(argv)
  command = p.command(argv)
  t0 = time.time()
  items = [(cfg, os.path.join(args.runs_dir, name)) for name, cfg in
           configs(args.data_dir, args.quick)]
  try:
    common.run_all(items, command)
    methods = auditable(args.data_dir)
  except DataError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  seconds = time.time() - t0
  figs = args.figures_dir
  shutil.rmtree(figs, ignore_errors=True)
  rows = []
  for (name, _), (_, out) in zip(configs(args.data_dir, args.quick), items):
    common.copy_results(out, os.path.join(figs, 'runs', name))
    with open(os.path.join(out, 'summary.json')) as f:
      summary = json.load(f)
    with open(os.path.join(out, 'config.json')) as f:
      config = json.load(f)
    with open(os.path.join(out, 'metrics.csv')) as f:
      metrics = list(csv.DictReader(f))
    rows.append(result_row(name, summary, config, metrics))
  common.write_table(os.path.join(figs, 'results.csv'), rows)
  plot(rows, os.path.join(figs, 'audit.png'))
  with open(os.path.join(figs, 'README.md'), 'w') as f:
    f.write(readme(rows, methods, command, seconds, args.quick))
  return 0


if __name__ == '__main__':
  common.entry(main)
