"""Main job: a privacy-utility trade-off on real MNIST at each DP unit, in about 5 minutes.

    python -m experiments.demo [--data-dir DIR] [--quick] [--resume]

Two tracks, each a private run beside its non-private reference on the same clients,
cohorts, model and client optimiser (the 26,010-parameter CNN of Adap DP-FL, so the
whole demo takes minutes on a 2-core CPU; seed 0 for everything):

- *client-level*: 1,000 clients (Dirichlet(0.5) label split, Hsu et al. 2019; 55
  examples a client on average), Poisson cohorts of expected size 50 (`q = 0.05`),
  100 rounds. **DP-FedAvg** (McMahan et al. 2018, ICLR: clip each client update to
  `S`, add `N(0, sigma^2 S^2)` to the sum, divide by the expected cohort; Geyer et al.
  2017 run MNIST with 1,000 clients at this unit) with `sigma = 1.0`, `S = 0.5`: about
  `epsilon = 4` at `delta = 1e-5` after 100 rounds. Against **FedAvg** with the same
  Poisson cohorts.
- *sample-level*: 10 clients (IID, 5,500 examples each), every client every round
  (cross-silo), 10 rounds of one local epoch. **DPFL** (clients run DP-SGD, Abadi et al.
  2016) with `sigma = 2.0`, per-example clip `C = 1.0`, batches of `B = 100` and client
  learning rate 1.0: the noise on each step's mean gradient, `sigma C / B = 0.02`, sits
  at Abadi et al.'s MNIST setting (`sigma = 4`, `C = 4`, lot 600: 0.027); about
  `epsilon_guaranteed = 8` (one Gaussian release per epoch) and `epsilon_claimed = 1`
  (the Poisson analysis the papers use). Against **FedAvg** with the same batches at
  learning rate 0.1.

The private settings were chosen by short pilots of the same commands (DP-FedAvg: clip
norm 0.5 and 1.0; DPFL: batch 20-522, learning rate 0.1-3, 10-100 clients, IID or not;
the commit that set them lists the results); the demo's own runs are the numbers below.

Writes each run under `--runs-dir` and the whole of `--figures-dir`: the runs' files,
`results.csv`, `test_accuracy.png` (per track, against rounds),
`accuracy_vs_epsilon.png`, `epsilon.png` and `README.md`, generated from those runs, so
the report cannot go stale.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import shutil
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')  # TF's C++ start-up lines, as tffdp.run

from experiments import common  # pylint: disable=g-import-not-at-top
from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp import plotting, runner, runtime  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top

CLIENT_LEVEL = 'client-level'
SAMPLE_LEVEL = 'sample-level'
TRACKS = {
    CLIENT_LEVEL: dict(
        title='MNIST, 1,000 clients (Dirichlet(0.5)), Poisson cohorts of 50',
        settings=dict(clients=1000, clients_per_round=50, partition='dirichlet',
                      partition_options={'alpha': 0.5}, cohort_sampling='poisson',
                      rounds=100, learning_rate=0.1, batch_size=20)),
    SAMPLE_LEVEL: dict(
        title='MNIST, 10 clients (IID), every client every round',
        settings=dict(clients=10, clients_per_round=10, partition='iid', rounds=10,
                      learning_rate=0.1, batch_size=100, eval_every=1)),
}


@dataclasses.dataclass(frozen=True)
class DemoRun:
  """One run of the demo: its label, folder, track and method settings."""
  label: str
  key: str
  track: str
  options: dict
  source: str


RUNS = (
    DemoRun('FedAvg (non-private), client-level track', 'fedavg_client_level', CLIENT_LEVEL,
            dict(method='fedavg'), 'McMahan et al. 2017, on the same Poisson cohorts'),
    DemoRun('DP-FedAvg (client-level)', 'dp_fedavg', CLIENT_LEVEL,
            dict(method='dp_fedavg', noise_multiplier=1.0, clip_norm=0.5),
            'McMahan et al. 2018 (ICLR), Alg. 1 with the fixed denominator'),
    DemoRun('FedAvg (non-private), sample-level track', 'fedavg_sample_level', SAMPLE_LEVEL,
            dict(method='fedavg'), 'McMahan et al. 2017, with the same batches as DPFL'),
    DemoRun('DPFL (sample-level)', 'dpfl', SAMPLE_LEVEL,
            dict(method='dpfl', noise_multiplier=2.0, clip_norm=1.0, learning_rate=1.0),
            'DP-SGD clients (Abadi et al. 2016)'),
)
METHODS = tuple(r.label for r in RUNS)
COLUMNS = ('run', 'track', 'method', 'final_test_accuracy', 'best_test_accuracy',
           'epsilon_claimed', 'epsilon_guaranteed', 'dp_unit', 'delta',
           'rounds_completed', 'wall_seconds')
QUICK = dict(clients=4, clients_per_round=2, rounds=2, model='logistic_regression',
             num_validation=500, batch_size=50, partition='iid', partition_options={},
             cohort_sampling=None)


def configs(args) -> dict[str, config_lib.RunConfig]:
  """`RunConfig` per demo run (label -> config), the track's settings plus the run's."""
  out = {}
  for run in RUNS:
    kw = dict(dict(dataset='mnist', data_dir=args.data_dir, seed=args.seed,
                   model='adap_dp_fl_cnn', delta=1e-5, eval_every=5, log_every=10),
              **TRACKS[run.track]['settings'])
    kw.update(run.options)
    if args.quick:
      kw.update(QUICK)
    c = config_lib.RunConfig.create(**kw, out=os.path.join(args.runs_dir, run.key))
    c.notes['model'] = 'Adap DP-FL CNN: small enough for a minutes-long demo on 2 cores'
    c.notes['method'] = run.source
    out[run.label] = c
  return out


def fmt(v) -> str:
  """The one text of a value, in `results.csv` and in the README's table alike."""
  return common.fmt(v, empty='-')


def result_rows(summaries: dict[str, dict]) -> list[dict]:
  """The rows of `results.csv` (text, as written), one per run in `RUNS` order."""
  by_label = {r.label: r for r in RUNS}
  rows = []
  for label, s in summaries.items():
    run = by_label[label]
    row = dict(run=label, track=run.track, method=run.options['method'])
    row.update({k: fmt(s[k]) for k in COLUMNS[3:]})
    rows.append(row)
  return rows


def write_csv(path: str, rows: list[dict]) -> None:
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator='\n')
    w.writeheader()
    w.writerows(rows)


def plots(runs: dict[str, list[dict]], figures_dir: str) -> None:
  """Accuracy per track against rounds, accuracy against epsilon, epsilon against rounds."""
  by_label = {r.label: r for r in RUNS}
  for track, spec in TRACKS.items():
    mine = {k: v for k, v in runs.items() if by_label[k].track == track}
    name = f'test_accuracy_{track.replace("-", "_")}.png'
    plotting.save(plotting.plot_curves(mine, 'test_accuracy', 'test accuracy',
                                       f'{track}: {spec["title"]}'),
                  os.path.join(figures_dir, name))
  # Accuracy against the epsilon spent so far: guaranteed solid, claimed dashed where it
  # differs (DPFL: the Poisson analysis the papers use; see the README's notes).
  curves, styles = {}, {}
  colors = plotting.plt.rcParams['axes.prop_cycle'].by_key()['color']
  for i, (label, rows) in enumerate(k for k in runs.items() if by_label[k[0]].options['method']
                                    != 'fedavg'):
    color = colors[i % len(colors)]
    for kind, line in (('guaranteed', '-'), ('claimed', '--')):
      pts = [dict(r, epsilon=r[f'epsilon_{kind}']) for r in rows]
      if kind == 'claimed' and all(r['epsilon_claimed'] == r['epsilon_guaranteed']
                                   for r in rows):
        continue
      curves[f'{label}, epsilon_{kind}'] = pts
      styles[f'{label}, epsilon_{kind}'] = dict(color=color, linestyle=line)
  plotting.save(plotting.plot_curves(curves, 'test_accuracy', 'test accuracy',
                                     'accuracy against epsilon spent (delta = 1e-5)',
                                     x='epsilon', xlabel='epsilon (each run\'s own DP unit)',
                                     styles=styles),
                os.path.join(figures_dir, 'accuracy_vs_epsilon.png'))
  plotting.save(plotting.plot_epsilon(runs, 'MNIST demo', delta=1e-5),
                os.path.join(figures_dir, 'epsilon.png'))


def _setting_lines(cfgs: dict[str, config_lib.RunConfig], quick: bool) -> list[str]:
  out = []
  for track, spec in TRACKS.items():
    c = next(cfg for label, cfg in cfgs.items()
             if next(r for r in RUNS if r.label == label).track == track).resolved()
    title = 'toy size, --quick' if quick else spec['title']
    out.append(f'- **{track}** ({title}): {c.clients} clients, partition '
               f'`{c.partition}` {json.dumps(c.partition_options)}, cohort '
               f'`{c.cohort_sampling}` of (expected) size '
               f'{c.clients_per_round}, {c.rounds} rounds, model `{c.model}`, one local '
               f'epoch of SGD, batch {c.batch_size}, client learning rate '
               f'{c.learning_rate} (unless the run says otherwise), {c.num_validation} '
               'validation examples held out.')
  for run in RUNS:
    c = cfgs[run.label].resolved()
    private = ('' if run.options['method'] == 'fedavg' else
               f' sigma = {c.noise_multiplier}, clip norm = {c.clip_norm}, client '
               f'learning rate {c.learning_rate}.')
    out.append(f'  - {run.label} (`{run.key}/`): {run.source}; cohort '
               f'`{c.cohort_sampling}`.{private}')
  return out


def readme(cfgs: dict[str, config_lib.RunConfig], rows: list[dict], summaries: dict,
           command: list[str], total_seconds: float, quick: bool = False) -> str:
  """`README.md` of the demo folder, from the runs' configs, summaries and CSV rows."""
  first = json.load(open(os.path.join(next(iter(cfgs.values())).out, 'config.json')))
  versions = first.get('versions', {})
  machine = first.get('machine', {})
  started = min(g['started'] for s in summaries.values() for g in s.get('segments', [])
                if g.get('started')) if summaries else ''
  lines = [
      '# Main job: a privacy-utility trade-off on real MNIST',
      '',
      'Generated by `python -m experiments.demo` from the runs it made; do not edit.',
      '',
      '```bash',
      ' '.join(command) + '     # = make demo DATA_DIR=...',
      '```',
      '',
      f'- Started {started} (UTC); {total_seconds:.0f} s for the whole command, per run '
      'in `wall_seconds`.',
      f'- Machine: {machine.get("platform", "?")}, {machine.get("cpus", "?")} CPUs; '
      + ', '.join(f'{k} {v}' for k, v in versions.items()) + '.',
      f'- Seed {cfgs[RUNS[0].label].seed} for the validation split, partition, model '
      'initialisation, cohorts, batches and every noise draw: rerunning the command gives '
      'the same numbers (`python -m experiments.check_reproduces` checks a run folder).',
      '',
      '## Settings',
      '',
      *_setting_lines(cfgs, quick),
      '',
      'Full configurations: `*/config.json`; per-round results: `*/metrics.csv`; '
      'summaries: `*/summary.json`.',
      '',
      'Where the private settings come from: client-level DP-FedAvg follows McMahan et al. '
      '2018 (noise multiplier about 1, a clip norm near the typical update norm, Poisson '
      'cohorts and the fixed denominator) at the scale of Geyer et al. 2017\'s MNIST '
      'population of 1,000 clients; DPFL puts the per-step noise `sigma C / B` at Abadi et '
      'al. 2016\'s MNIST setting, who report 90% / 95% / 97% test accuracy at epsilon 0.5 / '
      '2 / 8 (delta 1e-5) for central DP-SGD under the Poisson analysis. Clip norm, batch '
      'size and learning rates were chosen by short pilots of the same commands (clip norm '
      '0.5 and 1.0; batch 20-522; learning rate 0.1-3; 10 or 100 clients, IID or not; the '
      'commit that set them lists the results); tuning is not accounted for in the '
      'epsilons.',
      '',
      '## Results',
      '',
      *common.md_table(rows, [(k, lambda r, k=k: r[k]) for k in COLUMNS]),
      '',
      '## Reading it',
      '',
  ]
  by_track = {}
  for row in rows:
    by_track.setdefault(row['track'], []).append(row)
  for track, rs in by_track.items():
    ref = next((r for r in rs if r['method'] == 'fedavg'), None)
    for r in rs:
      if r['method'] == 'fedavg' or ref is None:
        continue
      gap = _points(ref['final_test_accuracy'], r['final_test_accuracy'])
      lines.append(
          f'- {track}: {r["run"]} ends at {r["final_test_accuracy"]} test accuracy at '
          f'`epsilon_guaranteed` = {r["epsilon_guaranteed"]} (`epsilon_claimed` = '
          f'{r["epsilon_claimed"]}, delta = {r["delta"]}), {gap} below non-private '
          f'FedAvg on the same clients ({ref["final_test_accuracy"]}).')
  lines += [
      '- Epsilons are the largest over clients. The two tracks protect different units (a '
      'client\'s whole data; one example), so their epsilons are not comparable with each '
      'other.',
      '- DP-FedAvg: the Poisson cohort is what its analysis assumes, so its two epsilons '
      'are equal. DPFL: the clients shuffle their data into disjoint batches, which the '
      'Poisson-subsampling analysis the papers use (`epsilon_claimed`, `q = B / n_i`) '
      'does not cover; `epsilon_guaranteed` counts each local epoch as one Gaussian '
      'release (see the main README\'s methods table).',
      '',
      'Figures: `test_accuracy_client_level.png` and `test_accuracy_sample_level.png` '
      '(test accuracy against rounds, each private run beside its reference), '
      '`accuracy_vs_epsilon.png` (test accuracy against the epsilon spent so far; '
      'guaranteed solid, claimed dashed where it differs), `epsilon.png` (epsilon '
      'against rounds).',
      '',
  ]
  return '\n'.join(lines)


def _points(ref: str, value: str) -> str:
  try:
    return f'{100 * (float(ref) - float(value)):.2f} points'
  except ValueError:
    return 'an unknown amount'


def main(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  p = argparse.ArgumentParser(prog='python -m experiments.demo', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--data-dir', default=None)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--runs-dir', default='runs/demo')
  p.add_argument('--figures-dir', default='figures/demo')
  p.add_argument('--quick', action='store_true', help='toy size (smoke test)')
  p.add_argument('--resume', action='store_true', help='continue interrupted runs')
  args = p.parse_args(argv)
  runtime.use_local_context()
  command = ['python', '-m', 'experiments.demo'] + argv
  summaries, runs = {}, {}
  t0 = time.time()
  cfgs = configs(args)
  for label, cfg in cfgs.items():
    print(f'== {label}: {cfg.method}', flush=True)
    if os.path.exists(cfg.out) and not (args.resume and runner.has_checkpoint(cfg.out)):
      shutil.rmtree(cfg.out)
    try:
      summaries[label] = runner.run(cfg, resume=args.resume, command=command)
    except DataError as e:
      print(f'error: {e}', file=sys.stderr)
      return 2
    runs[label] = plotting.read_metrics(cfg.out)
  total = time.time() - t0
  # The figures folder is written whole from these runs: nothing of an older demo stays.
  if os.path.isdir(args.figures_dir):
    shutil.rmtree(args.figures_dir)
  os.makedirs(args.figures_dir)
  for run in RUNS:
    dest = os.path.join(args.figures_dir, run.key)
    os.makedirs(dest)
    for f in ('config.json', 'metrics.csv', 'summary.json'):
      shutil.copy(os.path.join(cfgs[run.label].out, f), os.path.join(dest, f))
  rows = result_rows(summaries)
  write_csv(os.path.join(args.figures_dir, 'results.csv'), rows)
  plots(runs, args.figures_dir)
  with open(os.path.join(args.figures_dir, 'README.md'), 'w') as f:
    f.write(readme(cfgs, rows, summaries, command, total, args.quick))
  print('\n' + ' | '.join(COLUMNS))
  for row in rows:
    print(' | '.join(row[k] for k in COLUMNS))
  print(f'\ntotal wall time {total:.0f} s; report and figures in {args.figures_dir}/')
  return 0


if __name__ == '__main__':
  code = main()
  runtime.shutdown_workers()
  sys.exit(code)
