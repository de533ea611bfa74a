"""`python -m tffdp.worker --port P --tls-cert C --tls-key K --tls-ca CA`: one TFF worker.

    python -m tffdp.worker --port P --tls-cert worker.pem --tls-key worker.key --tls-ca ca.pem
    python -m tffdp.worker --port P --insecure
    python -m tffdp.worker make-certs DIR --hosts HOST[,HOST...]

Runs TFF's own C++ executor service (`tensorflow_federated/data/worker_binary`, the
binary TFF's local context uses) for `python -m tffdp.run --workers`. With the TLS files
(`tffdp.tls`), the binary runs in a network namespace of its own
(`tffdp.confined_worker`) and `P` is served with mutual TLS: only a client whose
certificate the CA signed gets through (the coordinator's `--tls-*` files); plain text,
no certificate or another CA's are refused before anything reaches the binary. Where
the kernel refuses the namespace, the binary listens on a second port of its own and a
warning says so. `--insecure` serves the binary itself on `P`: plain gRPC without
authentication or encryption, which anyone who can reach `P` can use to run code as
this user; only on a network you trust.

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
import shutil
import signal
import subprocess
import sys
import threading
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
  argv = list(sys.argv[1:] if argv is None else argv)
  if argv[:1] == ['make-certs']:
    from tffdp import tls  # pylint: disable=g-import-not-at-top
    return tls.main_make_certs(argv[1:])
  p = argparse.ArgumentParser(prog='python -m tffdp.worker', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--port', type=int, required=True, help='gRPC port to serve on')
  p.add_argument('--max-concurrent-computation-calls', type=int, default=-1,
                 help='passed to the TFF worker (non-positive: no limit)')
  p.add_argument('--tls-cert', help='this worker\'s certificate (PEM; make-certs: worker.pem)')
  p.add_argument('--tls-key', help='its private key (PEM; worker.key)')
  p.add_argument('--tls-ca', help='the CA a client certificate must chain to (ca.pem)')
  p.add_argument('--insecure', action='store_true',
                 help='serve plain gRPC without authentication or encryption (anyone who '
                 'reaches --port can run code as this user)')
  p.add_argument('--allow-unconfined', action='store_true',
                 help='with the TLS files, where the kernel refuses a network namespace, '
                 'still serve: the TFF worker then also listens, unauthenticated, on a '
                 'port of its own (default: exit 2)')
  args = p.parse_args(argv)
  if not 0 < args.port < 65536:
    p.error(f'--port must be in 1-65535. Found {args.port}.')
  given = [f for f in (args.tls_cert, args.tls_key, args.tls_ca) if f]
  if args.insecure and given:
    p.error('--insecure and --tls-* exclude each other.')
  if not args.insecure and len(given) != 3:
    p.error('give --tls-cert, --tls-key and --tls-ca (python -m tffdp.worker make-certs DIR '
            'makes them), or --insecure for plain text on a network you trust.')
  context = listener = None
  if not args.insecure:
    from tffdp import tls  # pylint: disable=g-import-not-at-top
    files = tls.TlsFiles(args.tls_cert, args.tls_key, args.tls_ca)
    try:
      files.check()
      context = files.server_context()
    except (ValueError, OSError) as e:  # ssl.SSLError is an OSError
      p.error(f'TLS files: {e}')
    try:
      listener = tls.bind_listener(args.port)
    except OSError as e:
      print(f'error: cannot serve port {args.port}: {e}', file=sys.stderr)
      return 2
  binary = worker_binary_path()
  if not os.path.isfile(binary):
    print(f'error: no TFF worker binary at {binary}', file=sys.stderr)
    return 2
  # The binary logs through TensorFlow's C++ logging: keep its start-up lines quiet.
  env = dict(os.environ)
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  calls = f'--max_concurrent_computation_calls={args.max_concurrent_computation_calls}'
  directory = None
  if args.insecure:
    print(f'tffdp.worker: warning: --insecure: plain gRPC on port {args.port} of every '
          'interface, without authentication or encryption; anyone who can reach it can '
          'run code as this user.', file=sys.stderr, flush=True)
    proc = subprocess.Popen([binary, f'--port={args.port}', calls],
                            preexec_fn=_die_with_parent, env=env)
  else:
    import asyncio  # pylint: disable=g-import-not-at-top
    from tffdp import confined_worker  # pylint: disable=g-import-not-at-top
    try:
      proc, path, directory = confined_worker.start(
          binary, args.max_concurrent_computation_calls, env, stderr=subprocess.PIPE,
          text=True, preexec_fn=_die_with_parent)
      threading.Thread(target=lambda: [sys.stderr.write(line) for line in proc.stderr],
                       daemon=True).start()  # the helper's and the binary's log lines
      upstream = lambda: asyncio.open_unix_connection(path)
    except confined_worker.NotConfined as e:
      proc, why = None, str(e)
    if proc is None and not args.allow_unconfined:
      listener.close()
      print(f'error: the TFF worker cannot be confined here ({why}): it would listen, '
            'unauthenticated, on a port of every interface beside the TLS port. Add '
            '--allow-unconfined to serve anyway (behind a firewall that keeps that port '
            'closed).', file=sys.stderr)
      return 2
    elif proc is None:
      inner = confined_worker.free_loopback_port()
      print(f'tffdp.worker: warning: the TFF worker cannot be confined here ({why}); '
            f'--allow-unconfined: it also listens, unauthenticated, on port {inner} of '
            'every interface.', file=sys.stderr, flush=True)
      proc = subprocess.Popen([binary, f'--port={inner}', calls],
                              preexec_fn=_die_with_parent, env=env)
      upstream = lambda: asyncio.open_connection('127.0.0.1', inner)
    log = lambda line: print(line, flush=True)
    threading.Thread(target=tls.serve, args=(listener, context, upstream, log),
                     daemon=True).start()
  stopping = []

  def stop(signum, frame):
    del frame
    if not stopping:
      stopping.extend([signum, time.monotonic()])
    if proc.poll() is None:
      proc.terminate()

  signal.signal(signal.SIGTERM, stop)
  signal.signal(signal.SIGINT, stop)
  how = 'plain text' if args.insecure else 'mutual TLS'
  print(f'tffdp.worker: TFF worker (pid {proc.pid}) serving on port {args.port} '
        f'({how})', flush=True)
  while True:
    try:
      code = proc.wait(timeout=1.0)
      break
    except subprocess.TimeoutExpired:
      if stopping and time.monotonic() - stopping[1] > 10:
        proc.kill()
  if directory:
    shutil.rmtree(directory, ignore_errors=True)
  if stopping:
    print(f'tffdp.worker: stopped (signal {stopping[0]})', flush=True)
    return 0
  return code


if __name__ == '__main__':
  sys.exit(main())
