"""Main job: FedAvg, DPFL and DP-FedAvg (client-level) on real MNIST, label-skew non-IID.

    python -m experiments.demo [--data-dir DIR] [--rounds 50] [--quick] [--resume]

100 clients, 10 per round (A-DPFL's label-skew partition, `s_i ~ U[0, 1)`), A-DPFL's
Table 1 client settings (B = 20, learning rate 0.05, sigma = 1, C = 4) for FedAvg and
DPFL, and McMahan et al. 2018's client-level DP-FedAvg (sigma = 1, S = 0.5, Poisson
cohort q = 0.1). Model: the 26,010-parameter CNN of Adap DP-FL (chosen so the demo takes
minutes on a 2-core CPU; the A-DPFL experiments use the 3.3M-parameter network).
Writes each run under `--runs-dir`, copies results and plots into `--figures-dir`
(`test_accuracy.png`, `epsilon.png`, `results.csv`) and prints the final table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp import plotting, runner, runtime  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top

METHODS = {
    'FedAvg (non-private)': dict(method='fedavg'),
    'DPFL (sample-level)': dict(method='dpfl', noise_multiplier=1.0, clip_norm=4.0),
    'DP-FedAvg (client-level)': dict(method='dp_fedavg', noise_multiplier=1.0, clip_norm=0.5),
}


def configs(args) -> dict[str, config_lib.RunConfig]:
  base = dict(dataset='mnist', data_dir=args.data_dir, rounds=args.rounds, clients=100,
              clients_per_round=10, partition='label_skew', seed=args.seed,
              model='adap_dp_fl_cnn', learning_rate=0.05, batch_size=20, delta=1e-5)
  if args.quick:
    base.update(rounds=2, clients=4, clients_per_round=2, model='logistic_regression',
                num_validation=500, partition_options={'examples_per_client': 200})
  out = {}
  for name, kw in METHODS.items():
    c = config_lib.RunConfig(**dict(base, **kw, out=os.path.join(args.runs_dir, kw['method'])))
    c.notes['model'] = 'Adap DP-FL CNN: small enough for a minutes-long demo on 2 cores'
    out[name] = c
  return out


def fmt(v) -> str:
  if v is None:
    return '-'
  if v == 'inf' or (isinstance(v, float) and math.isinf(v)):
    return 'inf'
  return f'{v:.4g}' if isinstance(v, float) else str(v)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m experiments.demo', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--data-dir', default=None)
  p.add_argument('--rounds', type=int, default=50)
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--runs-dir', default='runs/demo')
  p.add_argument('--figures-dir', default='figures/demo')
  p.add_argument('--quick', action='store_true', help='toy size (smoke test)')
  p.add_argument('--resume', action='store_true', help='continue interrupted runs')
  args = p.parse_args(argv)
  runtime.use_local_context()
  summaries, runs = {}, {}
  t0 = time.time()
  for name, cfg in configs(args).items():
    print(f'== {name}: {cfg.method}', flush=True)
    ckpt = os.path.join(cfg.out, runner.CHECKPOINT)
    if os.path.exists(ckpt) and not args.resume:
      shutil.rmtree(cfg.out)
    try:
      summaries[name] = runner.run(cfg, resume=args.resume,
                                   command=['python', '-m', 'experiments.demo'] + list(argv or sys.argv[1:]))
    except DataError as e:
      print(f'error: {e}', file=sys.stderr)
      return 2
    runs[name] = plotting.read_metrics(cfg.out)
    dest = os.path.join(args.figures_dir, cfg.method)
    os.makedirs(dest, exist_ok=True)
    for f in ('config.json', 'metrics.csv', 'summary.json'):
      shutil.copy(os.path.join(cfg.out, f), os.path.join(dest, f))
  label = 'MNIST, label-skew, 100 clients, 10 per round'
  plotting.save(plotting.plot_curves(runs, 'test_accuracy', 'test accuracy', label),
                os.path.join(args.figures_dir, 'test_accuracy.png'))
  plotting.save(plotting.plot_epsilon(runs, label, delta=1e-5),
                os.path.join(args.figures_dir, 'epsilon.png'))
  header = ['method', 'final_test_accuracy', 'best_test_accuracy', 'epsilon_claimed',
            'epsilon_guaranteed', 'dp_unit', 'delta', 'rounds_completed', 'wall_seconds']
  lines = [','.join(header)]
  print('\n' + ' | '.join(header))
  for name, s in summaries.items():
    vals = [name] + [fmt(s[k]) for k in header[1:]]
    lines.append(','.join(vals))
    print(' | '.join(vals))
  with open(os.path.join(args.figures_dir, 'results.csv'), 'w') as f:
    f.write('\n'.join(lines) + '\n')
  print(f'\ntotal wall time {time.time() - t0:.0f} s; figures in {args.figures_dir}/')
  return 0


if __name__ == '__main__':
  code = main()
  runtime.shutdown_workers()
  sys.exit(code)
