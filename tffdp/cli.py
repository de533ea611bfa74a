"""The `tffdp` console command: `tffdp run ARGS...` (installed by `setup.cfg`).

`tffdp run` takes the options of `python -m tffdp.run` (see `tffdp.run.main`, whose exit
codes it returns) and, as `tffdp.run`'s `__main__` block does, ends the TFF worker
processes it started before exiting (`tffdp.runtime.shutdown_workers`). `tffdp --help`
lists the subcommands; an unknown subcommand exits 2 with a one-line message.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

# Subcommand -> one line for `tffdp --help`.
SUBCOMMANDS = {
    'run': 'run one experiment (the options of `python -m tffdp.run`; see tffdp run --help)',
}

USAGE = 'usage: tffdp {' + ','.join(SUBCOMMANDS) + '} [ARGS...]'


def _help() -> str:
  lines = [USAGE, '', 'Differentially private federated learning methods on TensorFlow '
           'Federated.', '', 'subcommands:']
  lines += [f'  {name:<6} {text}' for name, text in SUBCOMMANDS.items()]
  return '\n'.join(lines)


def _run(argv: list[str]) -> int:
  """`tffdp.run.main(argv)` with TFF's workers shut down afterwards; its exit code."""
  # As `tffdp.run` does for `python -m`: quiet TensorFlow's C++ start-up log unless
  # --verbose is given (read before TensorFlow is imported; the environment wins).
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '0' if '--verbose' in argv else '3')
  from tffdp import run  # pylint: disable=g-import-not-at-top
  code = 1
  try:
    code = run.main(argv, prog='tffdp run')
    return code
  except SystemExit as e:  # argparse: --help (0), bad arguments (2); SIGTERM (143)
    code = run.exit_code(e)
    return code
  finally:
    # `tffdp.run.main` imports tffdp.runtime before it starts any TFF worker: without
    # it nothing was started and there is nothing to shut down.
    if 'tffdp.runtime' in sys.modules:
      runtime = sys.modules['tffdp.runtime']
      runtime.shutdown_workers()
      if runtime.terminate_requested():  # SIGTERM: end now (see runtime.exit_process)
        runtime.exit_process(code)  # 143 on a failure, 0 for a run that finished first


def console_main(argv: Optional[Sequence[str]] = None) -> int:
  """Entry point of the `tffdp` command.

  Args:
    argv: The arguments after the program name (default `sys.argv[1:]`): a subcommand
      and its arguments, or `-h` / `--help`.

  Returns:
    The exit code: the subcommand's (`tffdp run`: 0 done, 2 bad arguments or data, 1
    unreachable worker, 3 a round unlike its declared DP events, 130 interrupted, 143
    terminated by SIGTERM; see `tffdp.run`); 0 for `--help`; 2 without a subcommand or
    for an unknown one (with a one-line message on stderr).
  """
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv and argv[0] in ('-h', '--help'):
    print(_help())
    return 0
  if not argv:
    print(f'{USAGE}\ntffdp: error: a subcommand is required (tffdp --help lists them)',
          file=sys.stderr)
    return 2
  command, rest = argv[0], argv[1:]
  if command not in SUBCOMMANDS:
    print(f'tffdp: error: unknown subcommand {command!r}; subcommands: '
          f'{", ".join(SUBCOMMANDS)} (tffdp --help)', file=sys.stderr)
    return 2
  return _run(rest)


if __name__ == '__main__':
  sys.exit(console_main())
