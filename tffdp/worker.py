"""`python -m tffdp.worker --port P`: one TFF worker for `python -m tffdp.run --workers`.

Runs TFF's own C++ executor service (`tensorflow_federated/data/worker_binary`, the
binary TFF's local context uses) on `P`, listening on every interface. It is a plain gRPC
server without authentication or encryption: open `P` to the machine that runs
`tffdp.run` only, on a trusted network.

The worker reads client data from the files `tffdp.run` wrote in its client cache
(`TFFDP_CACHE_DIR`, default `~/.cache/tffdp/clients`), at the path the coordinator
names: on another machine that folder must exist at the same absolute path (a shared
file system, or a copy).

SIGTERM or SIGINT ends the binary (SIGTERM, then SIGKILL after 10 s) and this process
with exit code 0; the binary also dies with this process if it is killed (Linux
`PR_SET_PDEATHSIG`). Exit code 2: bad arguments; otherwise the binary's own exit code.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import time


def _die_with_parent() -> None:
  """In the child, before exec: receive SIGKILL when the parent dies (Linux only)."""
  try:
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
  except OSError:
    pass
  # A worker started from a shell that ignores SIGINT would inherit that; restore it.
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def worker_binary_path() -> str:
  """Path of TFF's C++ worker, found without importing TensorFlow."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or not spec.origin:
    return ''
  return os.path.join(os.path.dirname(spec.origin), 'data', 'worker_binary')


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m tffdp.worker', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--port', type=int, required=True, help='gRPC port to serve on')
  p.add_argument('--max-concurrent-computation-calls', type=int, default=-1,
                 help='passed to the TFF worker (non-positive: no limit)')
  args = p.parse_args(argv)
  if not 0 < args.port < 65536:
    p.error(f'--port must be in 1-65535. Found {args.port}.')
  binary = worker_binary_path()
  if not os.path.isfile(binary):
    print(f'error: no TFF worker binary at {binary}', file=sys.stderr)
    return 2
  # The binary logs through TensorFlow's C++ logging: keep its start-up lines quiet.
  env = dict(os.environ)
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  proc = subprocess.Popen(
      [binary, f'--port={args.port}',
       f'--max_concurrent_computation_calls={args.max_concurrent_computation_calls}'],
      preexec_fn=_die_with_parent, env=env)
  stopping = []

  def stop(signum, frame):
    del frame
    if not stopping:
      stopping.extend([signum, time.monotonic()])
    if proc.poll() is None:
      proc.terminate()

  signal.signal(signal.SIGTERM, stop)
  signal.signal(signal.SIGINT, stop)
  print(f'tffdp.worker: TFF worker pid {proc.pid} serving on port {args.port}', flush=True)
  while True:
    try:
      code = proc.wait(timeout=1.0)
      break
    except subprocess.TimeoutExpired:
      if stopping and time.monotonic() - stopping[1] > 10:
        proc.kill()
  if stopping:
    print(f'tffdp.worker: stopped (signal {stopping[0]})', flush=True)
    return 0
  return code


if __name__ == '__main__':
  sys.exit(main())
