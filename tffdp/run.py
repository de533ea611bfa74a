"""Command line: `python -m tffdp.run --method NAME --dataset NAME ...`.

Runs one experiment (see `tffdp.runner`). Exit codes: 0 done; 2 bad arguments, invalid
hyperparameters, missing/corrupt data, or `--workers` with a method whose round cannot
run on them (a message, no traceback); 1 a TFF worker of `--workers` does not answer
(at start, or mid-run: then a resumable checkpoint is left in --out); 130 interrupted (likewise).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Quiet TensorFlow's C++ start-up logging for CLI users (cuDNN/cuFFT/cuBLAS factory
# errors, the CPU-instructions and TensorRT lines) unless --verbose is given. It must be
# set before TensorFlow is imported, so it is read from the command line here; an
# explicit TF_CPP_MIN_LOG_LEVEL in the environment wins.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0' if '--verbose' in sys.argv[1:] else '3')

from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DATASETS  # pylint: disable=g-import-not-at-top
from tffdp.data.partitioners import PARTITIONERS  # pylint: disable=g-import-not-at-top
from tffdp.models import MODELS  # pylint: disable=g-import-not-at-top


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    self.print_usage(sys.stderr)
    self.exit(2, f'{self.prog}: error: {message}\n')


def make_parser() -> argparse.ArgumentParser:
  d = config_lib.RunConfig()
  p = _Parser(
      prog='python -m tffdp.run',
      description='Run one differentially private federated learning experiment.',
      epilog=(f'methods: {", ".join(config_lib.METHODS)}\n'
              f'datasets: {", ".join(DATASETS)}\n'
              f'partitions: {", ".join(PARTITIONERS)}\n'
              f'models: {", ".join(MODELS)}'),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  g = p.add_argument_group('experiment')
  g.add_argument('--method', required=True, help=f'one of: {", ".join(config_lib.METHODS)}')
  g.add_argument('--dataset', required=True, help=f'one of: {", ".join(DATASETS)}')
  g.add_argument('--data-dir', help='directory with one folder per dataset '
                 '(default: $TFFDP_DATA_DIR, else ~/.cache/tffdp/datasets)')
  g.add_argument('--rounds', type=int, default=d.rounds, help='rounds T')
  g.add_argument('--clients', type=int, default=d.clients, help='clients N')
  g.add_argument('--clients-per-round', type=int, default=d.clients_per_round,
                 help='cohort size K (expected size under poisson sampling)')
  g.add_argument('--cohort-sampling', choices=config_lib.COHORT_SAMPLING,
                 help='default: poisson for dp_fedavg, uniform otherwise')
  g.add_argument('--partition', default=d.partition, help=f'one of: {", ".join(PARTITIONERS)}')
  g.add_argument('--partition-options', default='{}',
                 help='JSON object of partitioner keyword arguments, e.g. \'{"alpha": 0.5}\'')
  g.add_argument('--seed', type=int, default=d.seed)
  g.add_argument('--out', default=d.out, help='output directory')
  g.add_argument('--resume', action='store_true', help='continue from --out/checkpoint.pkl')
  g.add_argument('--num-validation', type=int, default=d.num_validation,
                 help='server-side validation examples held out of the training set')
  g.add_argument('--eval-every', type=int, default=d.eval_every)
  g.add_argument('--checkpoint-every', type=int, default=d.checkpoint_every)
  g.add_argument('--workers', metavar='HOST:PORT[,HOST:PORT...]',
                 help='run each round\'s cohort on these TFF workers (`python -m '
                 'tffdp.worker --port PORT` on each machine), one sub-round per worker; '
                 'default: this process\'s local TFF context')
  g.add_argument('--worker-timeout', type=float, default=d.worker_timeout,
                 help='seconds a worker may stay unreachable mid-round before the run '
                 'stops with a resumable checkpoint (exit 1)')
  g.add_argument('--verbose', action='store_true',
                 help='keep TensorFlow\'s start-up log lines (hidden by default)')
  m = p.add_argument_group('method options')
  m.add_argument('--model', help=f'one of: {", ".join(MODELS)} (default per dataset)')
  m.add_argument('--learning-rate', type=float, default=d.learning_rate, help='client learning rate')
  m.add_argument('--batch-size', type=int, default=d.batch_size, help='client batch size B')
  m.add_argument('--local-epochs', type=int, default=d.local_epochs)
  m.add_argument('--noise-multiplier', type=float, default=d.noise_multiplier, help='sigma')
  m.add_argument('--clip-norm', type=float, default=d.clip_norm,
                 help='C (per-example, dpfl) or S (per-update, dp_fedavg)')
  m.add_argument('--delta', type=float, default=d.delta)
  m.add_argument('--clients-per-slice', type=int,
                 help='clients per TFF client computation (cohort slices; same results, '
                 'less TFF overhead). fedavg, dpfl, a_dpfl: default one per client; '
                 'adap_dp_fl: default all clients in one slice')
  m.add_argument('--epsilon-budget', type=float,
                 help='stop before epsilon_guaranteed would exceed this')
  a = p.add_argument_group('A-DPFL options (--method a_dpfl)')
  a.add_argument('--k', type=float, default=d.k, help='noise decay factor k (Alg. 4)')
  a.add_argument('--alpha', type=float, default=d.alpha,
                 help='validation-accuracy gain threshold alpha (Alg. 4)')
  a.add_argument('--adjust-every', type=int, default=d.adjust_every)
  a.add_argument('--selection', default=d.selection,
                 help='top_k (Alg. 2), weighted_sample or uniform')
  a.add_argument('--dp-sgd', default=d.dp_sgd,
                 help='clip_then_noise (Abadi et al.) or paper_order (Alg. 3 as printed)')
  d_ = p.add_argument_group('Adap DP-FL options (--method adap_dp_fl)')
  d_.add_argument('--lot-size', type=int, default=d.lot_size, help='expected lot size L')
  d_.add_argument('--clipping-factor', type=float,
                  help='clipping factor alpha of eq. 6 (default: 1.0 MNIST, 0.01 FMNIST)')
  d_.add_argument('--beta', type=float,
                  help='noise decay factor beta (default: 0.9999 MNIST, 0.9998 FMNIST)')
  d_.add_argument('--clipping', default=d.clipping, help='adaptive (eqs. 6-8) or constant')
  d_.add_argument('--noise-schedule', default=d.noise_schedule, help='decay or constant')
  d_.add_argument('--client-optimizer-state', default=d.client_optimizer_state,
                  help='keep (per-client Adam moments persist) or reset')
  d_.add_argument('--clip-norm-query', default=d.clip_norm_query,
                  help='accounted (budget on epsilon_guaranteed) or free (paper\'s count)')
  g.add_argument('--log-every', type=int, default=d.log_every,
                 help='print a progress line every this many rounds')
  return p


def config_from_args(args) -> config_lib.RunConfig:
  try:
    options = json.loads(args.partition_options)
  except json.JSONDecodeError as e:
    raise ValueError(f'partition_options must be a JSON object. Found {args.partition_options!r}.') from e
  return config_lib.RunConfig(
      method=args.method, dataset=args.dataset, data_dir=args.data_dir, rounds=args.rounds,
      clients=args.clients, clients_per_round=args.clients_per_round,
      partition=args.partition, partition_options=options, seed=args.seed, out=args.out,
      model=args.model, learning_rate=args.learning_rate, batch_size=args.batch_size,
      local_epochs=args.local_epochs, noise_multiplier=args.noise_multiplier,
      clip_norm=args.clip_norm, delta=args.delta, cohort_sampling=args.cohort_sampling,
      epsilon_budget=args.epsilon_budget, eval_every=args.eval_every,
      checkpoint_every=args.checkpoint_every, num_validation=args.num_validation,
      k=args.k, alpha=args.alpha, adjust_every=args.adjust_every, selection=args.selection,
      dp_sgd=args.dp_sgd, log_every=args.log_every, lot_size=args.lot_size,
      clipping_factor=args.clipping_factor, beta=args.beta, clipping=args.clipping,
      noise_schedule=args.noise_schedule, client_optimizer_state=args.client_optimizer_state,
      clip_norm_query=args.clip_norm_query, clients_per_slice=args.clients_per_slice,
      workers=args.workers, worker_timeout=args.worker_timeout)


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  parser = make_parser()
  args = parser.parse_args(argv)
  for flag, value, valid in (('method', args.method, config_lib.METHODS),
                             ('dataset', args.dataset, DATASETS),
                             ('partition', args.partition, tuple(PARTITIONERS))):
    if value not in valid:
      parser.exit(2, f'error: unknown {flag} {value!r}. Valid {flag}s: {", ".join(valid)}\n')
  if args.model is not None and args.model not in MODELS:
    parser.exit(2, f'error: unknown model {args.model!r}. Valid models: {", ".join(MODELS)}\n')
  try:
    cfg = config_from_args(args)
    cfg.resolved().validate()
  except ValueError as e:
    parser.exit(2, f'error: {e}\n')

  # Heavy imports only once the arguments are known to be good.
  from tffdp import runner, runtime  # pylint: disable=g-import-not-at-top
  from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top
  runtime.use_local_context()
  try:
    summary = runner.run(cfg, resume=args.resume, command=['python', '-m', 'tffdp.run'] + argv)
  except (DataError, runner.ResumeError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except runtime.WorkerError as e:
    resumable = os.path.exists(os.path.join(cfg.out, runner.CHECKPOINT))
    print(f'error: {e}' + (f' The checkpoint in {cfg.out} holds every completed round: '
                           'restart the worker(s) and add --resume.' if resumable else ''),
          file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    return 130
  print(json.dumps(summary, indent=2))
  return 0


if __name__ == '__main__':
  code = main()
  from tffdp import runtime as _rt  # pylint: disable=g-import-not-at-top
  _rt.shutdown_workers()
  sys.exit(code)
