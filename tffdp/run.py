"""Command line: `python -m tffdp.run --method NAME --dataset NAME ...`.

Runs one experiment (see `tffdp.runner`). Exit codes: 0 done; 2 bad arguments, invalid
hyperparameters, missing/corrupt data, or `--workers` with a method whose round cannot
run on them (a message, no traceback); 1 a TFF worker of `--workers` does not answer
(at start, or mid-run: then a resumable checkpoint is left in --out); 3 a round did not
match the DP events declared for it (a defect; the last good round is checkpointed); 130
interrupted, 143 terminated by SIGTERM (a resumable checkpoint is left in --out; after
SIGTERM the process ends at once, see `tffdp.runtime.exit_process`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing

# Quiet TensorFlow's C++ start-up logging for CLI users (cuDNN/cuFFT/cuBLAS factory
# errors, the CPU-instructions and TensorRT lines) unless --verbose is given. It must be
# set before TensorFlow is imported, so it is read from the command line here; an
# explicit TF_CPP_MIN_LOG_LEVEL in the environment wins.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0' if '--verbose' in sys.argv[1:] else '3')

from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
from tffdp import runtime  # pylint: disable=g-import-not-at-top
from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
from tffdp.data.loaders import DATASETS  # pylint: disable=g-import-not-at-top
from tffdp.data.partitioners import PARTITIONERS  # pylint: disable=g-import-not-at-top
from tffdp.models import MODELS  # pylint: disable=g-import-not-at-top


class _Parser(argparse.ArgumentParser):
  def error(self, message):
    self.print_usage(sys.stderr)
    self.exit(2, f'{self.prog}: error: {message}\n')


_OPTION_DEST = 'method_option__'


def _parse_bool(text: str) -> bool:
  if text.lower() in ('true', '1', 'yes'):
    return True
  if text.lower() in ('false', '0', 'no'):
    return False
  raise argparse.ArgumentTypeError(f'expected true or false, found {text!r}')


def _option_type(cls, f):
  """The argparse type of hyperparameter field `f` of `cls` (Optional[X] -> X)."""
  hint = typing.get_type_hints(cls).get(f.name, str)
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  hint = args[0] if args else hint
  if hint is bool:
    return _parse_bool
  return hint if hint in (int, float, str) else str


def add_method_options(p: argparse.ArgumentParser) -> None:
  """One argument group per registered method, generated from its hyperparameter dataclass.

  A flag `--<option>` sets the chosen method's option; a name two methods share is one
  flag whose meaning follows `--method`. Only options given on the command line are
  recorded (the rest take the method's defaults in `RunConfig.resolved`).
  """
  owners: dict[str, list[str]] = {}
  for name in config_lib.methods():
    for f in dataclasses.fields(registry.get(name).hparams):
      owners.setdefault(f.name, []).append(name)
  added = set()
  for name in config_lib.methods():
    spec = registry.get(name)
    fields = dataclasses.fields(spec.hparams)
    if not fields:
      continue
    group = p.add_argument_group(f'{name} options (--method {name}): {spec.title}')
    for f in fields:
      if f.name in added:
        continue
      added.add(f.name)
      # argparse %-formats help text: a literal % (e.g. '10%') must be doubled.
      kw = dict(help=f.metadata.get('help', '').replace('%', '%%'), dest=_OPTION_DEST + f.name,
                default=argparse.SUPPRESS, type=_option_type(spec.hparams, f))
      if len(owners[f.name]) > 1:
        # Each method reads it with its own type and choices (`config_from_args`).
        kw.update(type=str, metavar=f.name.upper(),
                  help=f'an option of {", ".join(owners[f.name])}, with each method\'s '
                  'meaning (see its group)')
      elif f.metadata.get('choices'):
        kw['choices'] = f.metadata['choices']
      else:
        kw['metavar'] = f.name.upper()
      if f.default is not None and len(owners[f.name]) == 1:
        kw['help'] += f' (default: {f.default})'
      group.add_argument('--' + f.name.replace('_', '-'), **kw)


def make_parser(prog: str = 'python -m tffdp.run') -> argparse.ArgumentParser:
  d = config_lib.RunConfig()
  specs = [registry.get(name) for name in config_lib.methods()]
  p = _Parser(
      prog=prog,
      description='Run one differentially private federated learning experiment.',
      epilog=(f'methods: {", ".join(config_lib.methods())}\n'
              f'datasets: {", ".join(DATASETS)}\n'
              f'partitions: {", ".join(PARTITIONERS)}\n'
              f'models: {", ".join(MODELS)}'),
      formatter_class=argparse.RawDescriptionHelpFormatter)
  training = p.add_argument_group('training: the method and its training (RunConfig.training)')
  training.add_argument('--method', required=True,
                        help=f'one of: {", ".join(config_lib.methods())}')
  training.add_argument('--model', help=f'one of: {", ".join(MODELS)} (default per dataset)')
  training.add_argument('--rounds', type=int, default=d.rounds, help='rounds T')
  training.add_argument('--clients-per-round', type=int, default=d.clients_per_round,
                 help='cohort size K (expected size under poisson sampling)')
  training.add_argument('--cohort-sampling', choices=config_lib.COHORT_SAMPLING,
                 help='default: the method\'s (poisson for dp_fedavg, all for adap_dp_fl, '
                 'uniform otherwise)')
  training.add_argument('--seed', type=int, default=d.seed)
  training.add_argument('--learning-rate', type=float, default=d.learning_rate,
                 help='client learning rate')
  training.add_argument('--batch-size', type=int, default=d.batch_size, help='client batch size B')
  training.add_argument('--local-epochs', type=int, default=d.local_epochs)
  data = p.add_argument_group('data: the dataset and its clients (RunConfig.data)')
  data.add_argument('--dataset', required=True, help=f'one of: {", ".join(DATASETS)}')
  data.add_argument('--data-dir', help='directory with one folder per dataset '
                 '(default: $TFFDP_DATA_DIR, else ~/.cache/tffdp/datasets)')
  data.add_argument('--clients', type=int, default=d.clients, help='clients N')
  data.add_argument('--partition', default=d.partition, help=f'one of: {", ".join(PARTITIONERS)}')
  data.add_argument('--partition-options', default='{}',
                 help='JSON object of partitioner keyword arguments, e.g. \'{"alpha": 0.5}\'')
  data.add_argument('--num-validation', type=int, default=d.num_validation,
                 help='server-side validation examples held out of the training set')
  privacy = p.add_argument_group('privacy: shared DP settings, budget, audit (RunConfig.privacy)')
  # Default None: a value given to a method that does not read it is refused
  # (`config_from_args`); left out, the shared default is recorded as before.
  for name, what in (('noise_multiplier', 'the noise multiplier sigma'),
                     ('clip_norm', 'the clipping norm of the method\'s DP mechanism')):
    privacy.add_argument('--' + name.replace('_', '-'), type=float, help=(
        f'{what} (default: {getattr(d, name)}): ' + '; '.join(
            f'{s.name}: {s.shared_meanings[name]}' for s in specs
            if name in s.shared_meanings)))
  privacy.add_argument('--delta', type=float, default=d.delta)
  privacy.add_argument('--epsilon-budget', type=float,
                 help='stop before epsilon would exceed this (epsilon_guaranteed; for '
                 'adap_dp_fl per client, on the ledger --clip-norm-query names)')
  privacy.add_argument('--budget-last-round', choices=config_lib.BUDGET_LAST_ROUND,
                 default=d.budget_last_round,
                 help='the round that would pass --epsilon-budget: skip it (the run ends '
                 'below the budget by up to one round\'s cost), or raise_noise: run it at '
                 'the noise multiplier, raised, that lands on the budget, and end there '
                 '(a_dpfl)')
  privacy.add_argument('--audit-canaries', type=int, default=d.audit_canaries, metavar='M',
                 help='insert M canaries (each included with probability 1/2): canary '
                 'clients for a client-level method, canary gradients in one host '
                 'client\'s DP-SGD steps for a sample-level one; write epsilon_lower_bound '
                 'and epsilon_estimate to summary.json; the run is an audit, its accuracy '
                 'not the method\'s (default: 0, no audit)')
  privacy.add_argument('--audit-canary-norm', type=float, metavar='NORM',
                 help='L2 norm of a canary\'s update or gradient (default: --clip-norm)')
  execution = p.add_argument_group('execution: where and how rounds run (RunConfig.execution)')
  execution.add_argument('--resume', action='store_true',
                 help='continue from --out/checkpoint.npz (exit 2 if there is none)')
  execution.add_argument('--trust-pickle', action='store_true',
                 help='with --resume, also load a pickled checkpoint.pkl written by tffdp '
                 'before 2026-11-26. Unpickling runs any code the file holds: only for '
                 'your own runs or files you trust (python -m tffdp.checkpoints convert '
                 'converts one once)')
  execution.add_argument('--stop-after-round', type=int, metavar='R',
                 help='pause after round R of T: checkpoint, no summary.json; --resume '
                 'without it continues to T (a pilot of the first rounds, calibrated for T)')
  execution.add_argument('--stop-after-rejected', type=int, metavar='N',
                 help='stop the run as diverged after N consecutive rounds whose aggregated '
                 'update TFF rejected as non-finite (the model unchanged since); default: '
                 'run every round')
  execution.add_argument('--checkpoint-every', type=int, default=d.checkpoint_every)
  execution.add_argument('--clients-per-slice', type=int,
                 help='clients per TFF client computation (cohort slices; same results, '
                 'less TFF overhead). fedavg, dpfl, a_dpfl, dp_fedavg: default one per '
                 'client (dp_fedavg clips each update inside its slice); aadp_fl, '
                 'ddgauss, dp_fedags, dp_fedsnlc, dp_fedavg_ags, cpsgd, cosafed, lapfed, '
                 'adpfl, cosfed: 1 only; '
                 'adap_dp_fl: default all clients in one slice')
  execution.add_argument('--workers', metavar='HOST:PORT[,HOST:PORT...]',
                 help='run each round\'s cohort on these TFF workers (`python -m '
                 'tffdp.worker --port PORT` on each machine), one sub-round per worker; '
                 'default: this process\'s local TFF context')
  execution.add_argument('--tls-cert', help='with --workers: this coordinator\'s certificate '
                 '(PEM; `python -m tffdp.worker make-certs DIR` writes coordinator.pem)')
  execution.add_argument('--tls-key', help='with --workers: its private key (coordinator.key)')
  execution.add_argument('--tls-ca', help='with --workers: the CA the workers\' certificates '
                 'chain to (ca.pem); each worker\'s certificate must name its host')
  execution.add_argument('--insecure', action='store_true', dest='insecure_workers',
                 help='with --workers: plain text, no authentication (workers started '
                 'with --insecure), on a network you trust only')
  execution.add_argument('--worker-timeout', type=float, default=d.worker_timeout,
                 help='seconds a worker whose connection failed may stay unreachable '
                 'before the run stops with a resumable checkpoint (exit 1)')
  execution.add_argument('--verbose', action='store_true',
                 help='keep TensorFlow\'s start-up log lines (hidden by default)')
  output = p.add_argument_group('output: what the run writes (RunConfig.output)')
  output.add_argument('--out', default=d.out, help='output directory')
  output.add_argument('--eval-every', type=int, default=d.eval_every)
  output.add_argument('--no-eval-validation', dest='eval_validation', action='store_false',
                 help='evaluate on the test set only (the validation columns stay empty; '
                 'training is unchanged)')
  output.add_argument('--log-every', type=int, default=d.log_every,
                 help='print a progress line every this many rounds')
  add_method_options(p)
  return p


# Shared settings some methods do not read (`MethodSpec.unused_reason`): given to such a
# method, `config_from_args` refuses them rather than ignore them (except `--clip-norm`
# in an audit without `--audit-canary-norm`: the canaries' norm defaults to it).
UNUSED_CHECKED = ('noise_multiplier', 'clip_norm')


def config_from_args(args) -> config_lib.RunConfig:
  """The `RunConfig` of parsed arguments (method options only where given).

  Raises:
    ValueError: On bad JSON in `--partition-options`, an option the chosen method does
      not have, or a shared setting it does not read (`UNUSED_CHECKED`).
  """
  try:
    options = json.loads(args.partition_options)
  except json.JSONDecodeError as e:
    raise ValueError('partition_options must be a JSON object. '
                     f'Found {args.partition_options!r}.') from e
  method_options = {k[len(_OPTION_DEST):]: v for k, v in vars(args).items()
                    if k.startswith(_OPTION_DEST)}
  shared = {}
  for name in UNUSED_CHECKED:
    value = getattr(args, name)
    reason = registry.get(args.method).unused_reason(name) if (
        args.method in config_lib.methods()) else None
    if name == 'clip_norm' and args.audit_canaries and args.audit_canary_norm is None:
      reason = None  # an audit's canary norm defaults to --clip-norm, whatever the method
    if value is not None and reason:
      flag = '--' + name.replace('_', '-')
      raise ValueError(f'method {args.method} does not use {flag} ({reason}); leave it out')
    shared[name] = getattr(config_lib.RunConfig, name) if value is None else value
  if args.method in config_lib.methods():
    # A name several methods share came in as text: read it as the chosen method's.
    cls = registry.get(args.method).hparams
    for f in dataclasses.fields(cls):
      if isinstance(method_options.get(f.name), str) and _option_type(cls, f) is not str:
        try:
          method_options[f.name] = _option_type(cls, f)(method_options[f.name])
        except (ValueError, argparse.ArgumentTypeError) as e:
          raise ValueError(f'{f.name} of method {args.method}: {e}') from e
  return config_lib.RunConfig.create(
      method=args.method, dataset=args.dataset, data_dir=args.data_dir, rounds=args.rounds,
      stop_after_round=args.stop_after_round, stop_after_rejected=args.stop_after_rejected,
      clients=args.clients, clients_per_round=args.clients_per_round,
      partition=args.partition, partition_options=options, seed=args.seed, out=args.out,
      model=args.model, learning_rate=args.learning_rate, batch_size=args.batch_size,
      local_epochs=args.local_epochs, **shared, delta=args.delta,
      cohort_sampling=args.cohort_sampling,
      epsilon_budget=args.epsilon_budget, budget_last_round=args.budget_last_round,
      eval_every=args.eval_every,
      eval_validation=args.eval_validation,
      checkpoint_every=args.checkpoint_every, num_validation=args.num_validation,
      log_every=args.log_every, clients_per_slice=args.clients_per_slice,
      workers=args.workers, worker_timeout=args.worker_timeout, tls_cert=args.tls_cert,
      tls_key=args.tls_key, tls_ca=args.tls_ca, insecure_workers=args.insecure_workers,
      audit_canaries=args.audit_canaries, audit_canary_norm=args.audit_canary_norm,
      method_options=method_options)


def main(argv=None, prog: str = 'python -m tffdp.run') -> int:
  """Parses `argv`, runs the experiment and returns the exit code (module docstring).

  `prog` names the command in usage lines and in the command `config.json` records
  (`tffdp run` for the console entry point, `tffdp.cli`).
  """
  argv = sys.argv[1:] if argv is None else argv
  parser = make_parser(prog)
  args = parser.parse_args(argv)
  for flag, value, valid in (('method', args.method, config_lib.methods()),
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
  mode = os.environ.get('TFFDP_LOCAL_WORKER', 'confined')
  if mode not in runtime.LOCAL_WORKER_MODES:
    parser.exit(2, f'error: TFFDP_LOCAL_WORKER must be one of '
                f'{", ".join(runtime.LOCAL_WORKER_MODES)}. Found {mode!r}.\n')
  if args.resume and not any(os.path.exists(os.path.join(cfg.out, f)) for f in (
      config_lib.CHECKPOINT, config_lib.LEGACY_CHECKPOINT)):
    parser.exit(2, f'error: nothing to resume: {cfg.out} holds no {config_lib.CHECKPOINT} '
                '(leave out --resume to start a new run there).\n')

  # Heavy imports only once the arguments are known to be good.
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  from tffdp.data.loaders import DataError  # pylint: disable=g-import-not-at-top
  runtime.use_local_context()
  try:
    summary = runner.run(cfg, resume=args.resume, command=prog.split() + list(argv),
                         trust_pickle=args.trust_pickle)
  except (DataError, runner.ResumeError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except runner.DeclaredEventError as e:
    print(f'error: {e}', file=sys.stderr)
    return 3
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


def exit_code(exc: SystemExit) -> int:
  """The exit status a `SystemExit` asks for (argparse: 0 or 2; SIGTERM: 143)."""
  return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


if __name__ == '__main__':
  try:
    code = main()
  except SystemExit as e:
    code = exit_code(e)
  except BaseException:  # pylint: disable=broad-except
    if not ('tffdp.runtime' in sys.modules
            and sys.modules['tffdp.runtime'].terminate_requested()):
      raise
    code = 1  # a call that failed because SIGTERM ended its worker: exit_process's 143
  from tffdp import runtime as _rt  # pylint: disable=g-import-not-at-top
  _rt.exit_process(code)  # ends the workers; after SIGTERM, at once (143 on a failure)
