"""Privacy audit (issue 40): canaries in each method's own TFF process, epsilon measured.

    python -m experiments.audit [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR]
                                [--quick]

Pilot stage (issue 40, item 7): before auditing all sixteen methods, check on DP-FedAvg
that the canary count gives a lower bound above 0, and see how the two numbers move with
the noise. Every run is the demo's client-level track (MNIST, 1,000 clients, Dirichlet(0.5)
label split, Poisson cohorts of expected size 50, the 26k CNN, clip norm `S = 0.5`, 100
rounds, seed 0) with `M = 1,000` canary clients (`--audit-canaries`, each included with
probability 1/2, an included one joining each round with probability `q = 0.05` like a
client; its update `S u_j`, clipped like any). Non-private FedAvg is the power check;
DDGauss (Kairouz et al. 2021, distributed discrete Gaussian with secure aggregation) is
the one other client-level method the option takes today.

For each run the report gives `epsilon_guaranteed` and `epsilon_claimed` (the ledgers)
beside, for both threat models (the auditor sees every round's model delta, or only the
final model), Steinke, Nasr and Jagielski 2023's one-run lower bound (95%) and Andrew et
al. 2024's one-shot estimate (`tffdp.canaries.Auditor.report`). It also lists, for every
registered method, whether `--audit-canaries` can audit it yet, and why not.

Writes each run under `--runs-dir` and the whole of `--figures-dir`: the run copies,
`results.csv`, `audit.png` and `README.md`, generated from those runs.
"""

from __future__ import annotations

import argparse
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

from experiments import common  # pylint: disable=g-import-not-at-top
from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp import runner  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top

TRACK = dict(dataset='mnist', clients=1000, clients_per_round=50, partition='dirichlet',
             partition_options={'alpha': 0.5}, cohort_sampling='poisson',
             model='adap_dp_fl_cnn', rounds=100, learning_rate=0.1, batch_size=20,
             clip_norm=0.5, delta=1e-5, eval_every=5, checkpoint_every=10, log_every=10,
             seed=0, audit_canaries=1000)
# (name, method, settings beyond TRACK)
PILOT = (
    ('fedavg', 'fedavg', {}),
    ('dp_fedavg_sigma1.0', 'dp_fedavg', dict(noise_multiplier=1.0)),
    ('dp_fedavg_sigma0.5', 'dp_fedavg', dict(noise_multiplier=0.5)),
    ('dp_fedavg_sigma0.3', 'dp_fedavg', dict(noise_multiplier=0.3)),
    ('ddgauss_sigma1.0', 'ddgauss', dict(noise_multiplier=1.0)),
)
QUICK = dict(clients=40, clients_per_round=10, rounds=3, audit_canaries=40,
             model='logistic_regression', num_validation=500, log_every=1, eval_every=1)


def configs(data_dir, quick: bool):
  extra = QUICK if quick else {}
  return [(name, config_lib.RunConfig.create(**dict(TRACK, method=method, data_dir=data_dir,
                                                    **settings, **extra)))
          for name, method, settings in PILOT]


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


def result_row(name: str, summary: dict, config: dict) -> dict:
  audit = summary['audit']
  private = summary['dp_unit'] != 'none'
  row = dict(run=name, method=summary['method'],
             noise_multiplier=config['noise_multiplier'] if private else '',
             epsilon_claimed=summary['epsilon_claimed'],
             epsilon_guaranteed=summary['epsilon_guaranteed'])
  for model in ('every_round', 'final_model'):
    row[f'{model}_lower_bound'] = audit[model]['epsilon_lower_bound']
    row[f'{model}_estimate'] = audit[model]['epsilon_estimate']
  row.update(canaries=audit['canaries'], included=audit['included'], joins=audit['joins'],
             final_test_accuracy=summary['final_test_accuracy'],
             wall_seconds=summary['wall_seconds'])
  return row


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
  import numpy as np  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 4))
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
  ax.set_xticks(x, [r['run'] for r in rows], rotation=15, fontsize=8)
  ax.set_yscale('symlog', linthresh=1.0)
  ax.set_ylabel('epsilon (delta 1e-5)')
  ax.set_title('Audit of the client-level track, 1,000 canaries')
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def readme(rows, methods, command, seconds, quick) -> str:
  f = common.fmt
  setting = dict(TRACK, **(QUICK if quick else {}))
  lines = [
      '# Privacy audit (issue 40): pilot on DP-FedAvg', '',
      'Generated by `' + ' '.join(command) + '` (do not edit by hand) on '
      f'{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} '
      f'CPUs; the command took {seconds:.0f} s (a run it reused keeps its own wall time, '
      'in the table).' + (' **Quick (toy) run.**' if quick else ''), '',
      'Setting: ' + ', '.join(f'{k} {v}' for k, v in setting.items()) + ' (each run copy under '
      '`runs/` holds its `config.json`, with the command, and its `summary.json`).', '',
      'Canaries (`tffdp.canaries`): each of the `M` canary clients is included with '
      'probability 1/2 (drawn from the seed, before the run); an included canary joins '
      'each round with probability `q = K / N`, as a client does, and its update is `S '
      'u_j` (a seeded unit direction) in place of its training, through the method\'s own '
      'clipping, noise and weighting. Scores: the largest cosine over rounds between `u_j` '
      'and the model delta (every round) and the cosine with `w_0 - w_T` (final model). '
      'Lower bound: Steinke, Nasr and Jagielski 2023, one run, 95% (Bonferroni over the '
      'guess counts). Estimate: Andrew et al. 2024, two fitted Gaussians (final model: '
      'against the `N(0, 1/d)` null; every round: against the left-out canaries\' '
      'scores). An estimate is not a bound. The accuracies are those of audit runs '
      '(canaries took part), not the methods\'.', '',
  ]
  lines += common.md_table(rows, [
      ('run', lambda r: r['run']),
      ('eps claimed', lambda r: f(r['epsilon_claimed'])),
      ('eps guaranteed', lambda r: f(r['epsilon_guaranteed'])),
      ('lower bound, every round', lambda r: f(r['every_round_lower_bound'])),
      ('lower bound, final model', lambda r: f(r['final_model_lower_bound'])),
      ('estimate, every round', lambda r: f(r['every_round_estimate'])),
      ('estimate, final model', lambda r: f(r['final_model_estimate'])),
      ('estimate / guaranteed (every round, final)', lambda r: _ratios(r)),
      ('included / joins', lambda r: f'{r["included"]} / {r["joins"]}'),
      ('test acc', lambda r: f(r['final_test_accuracy'])),
      ('wall s', lambda r: f(r['wall_seconds'], 3)),
  ])
  contradicted = [r['run'] for r in rows
                  if float(r['every_round_lower_bound']) > float(r['epsilon_guaranteed'])
                  or float(r['final_model_lower_bound']) > float(r['epsilon_guaranteed'])]
  lines += ['', 'Guarantee contradicted (a lower bound above a finite `epsilon_guaranteed`): '
            + (', '.join(contradicted) if contradicted else 'none') + '.', '']
  gaussian = [r for r in rows if r['method'] == 'dp_fedavg']
  if gaussian:
    spread = lambda m: (f(min(_ratio(r, m) for r in gaussian), 2) + '-' +
                        f(max(_ratio(r, m) for r in gaussian), 2))
    lines += ['Estimate over the analytical epsilon of Gaussian DP-FedAvg (Poisson cohorts, '
              f'so claimed = guaranteed): {spread("every_round")} when the auditor sees '
              f'every round, {spread("final_model")} when it sees the final model only. '
              'Andrew et al. 2024 find the estimate close to the analytical epsilon in the '
              'first threat model and much smaller in the second.', '']
  lines += [
            '![audit](audit.png)', '', '## Which methods `--audit-canaries` takes today', '']
  lines += common.md_table(methods, [('method', lambda r: r['method']),
                                     ('auditable', lambda r: r['auditable']),
                                     ('why not yet', lambda r: r['why'])])
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.audit', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--data-dir', default=None)
  p.add_argument('--runs-dir', default='runs/audit')
  p.add_argument('--figures-dir', default=os.path.join('figures', 'audit'))
  p.add_argument('--quick', action='store_true', help='toy sizes (tests)')
  args = p.parse_args(argv)
  command = ['python', '-m', 'experiments.audit'] + list(argv if argv is not None
                                                          else sys.argv[1:])
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
    rows.append(result_row(name, summary, config))
  common.write_table(os.path.join(figs, 'results.csv'), rows)
  plot(rows, os.path.join(figs, 'audit.png'))
  with open(os.path.join(figs, 'README.md'), 'w') as f:
    f.write(readme(rows, methods, command, seconds, args.quick))
  return 0


if __name__ == '__main__':
  common.entry(main)
