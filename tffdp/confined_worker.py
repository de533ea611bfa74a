"""The local TFF worker in a network namespace of its own, reached through a Unix socket.

    python -m tffdp.confined_worker --socket PATH --binary WORKER_BINARY [--probe]

TFF 0.87's local context starts its C++ `worker_binary` on a TCP port of every
interface; the binary has no flag to bind it to loopback, and it runs whatever TFF
computation reaches it. `tffdp.runtime` therefore starts it through this helper, which

1. moves itself into a new user and network namespace (`unshare(CLONE_NEWUSER |
   CLONE_NEWNET)`, as `unshare --user --net` does; the user namespace maps the caller's
   own uid and gid, so files keep their owner), in which only a loopback interface
   exists, and brings that interface up;
2. starts the worker binary there on a free loopback port: no other host can reach it,
   and no process outside the namespace can either;
3. serves a Unix socket at `PATH` (in a directory only the caller can enter, made by
   `tffdp.runtime`) and relays each connection to the worker's port. Unix sockets bound
   to a path are reachable across network namespaces, so the process that started the
   helper (and nobody without access to that directory) talks to the worker through it.

It ends the worker and itself when its parent process ends, when the worker ends, or on
SIGTERM / SIGINT. Exit status 3 means the kernel refused the namespaces (unprivileged
user namespaces disabled): `tffdp.runtime` then falls back to an unconfined worker
with a one-line warning. `--probe` only tries the namespaces and exits (0 or 3).

Standard library only, and single-threaded until the namespaces are made (the kernel
refuses a new user namespace to a multithreaded process).
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_CHUNK = 1 << 20
EXIT_NO_NAMESPACE = 3


def enter_private_network() -> None:
  """Moves this (single-threaded) process into new user + network namespaces, lo up.

  Raises:
    OSError: If the kernel refuses (errno EPERM, EINVAL, ENOSPC, ...).
  """
  uid, gid = os.getuid(), os.getgid()
  libc = ctypes.CDLL(None, use_errno=True)
  if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
    err = ctypes.get_errno()
    raise OSError(err, f'unshare(CLONE_NEWUSER | CLONE_NEWNET): {os.strerror(err)}')
  with open('/proc/self/setgroups', 'w') as f:
    f.write('deny')
  with open('/proc/self/uid_map', 'w') as f:
    f.write(f'{uid} {uid} 1')
  with open('/proc/self/gid_map', 'w') as f:
    f.write(f'{gid} {gid} 1')
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack('16sh', b'lo', 0)
    flags = struct.unpack('16sh', fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack('16sh', b'lo', flags | _IFF_UP))


_PR_SET_PDEATHSIG = 1


def dying_with(parent: int):
  """A `preexec_fn`: the child gets SIGKILL when `parent` (this process) dies (Linux
  PR_SET_PDEATHSIG), even by SIGKILL, and exits at once if it already has.

  `prctl` is looked up here, in the parent: between fork and exec a child of a
  multithreaded process must not load anything (`dlopen` may deadlock). Its SIGINT
  disposition stays the one inherited (ignored where the run ignores it, as TFF's own
  worker).
  """
  prctl = ctypes.CDLL(None, use_errno=True).prctl

  def preexec() -> None:
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the death signal was set
      os._exit(1)  # pylint: disable=protected-access
  return preexec


def socket_dir() -> str:
  """A new directory (mode 0700) for a worker's Unix socket; under /tmp where the
  temporary directory's path would make the socket path too long (108 bytes on Linux)."""
  import tempfile  # pylint: disable=g-import-not-at-top
  base = tempfile.gettempdir()
  if len(os.path.join(base, 'tffdp-worker-xxxxxxxx', 'worker.sock')) > 100:
    base = '/tmp'
  return tempfile.mkdtemp(prefix='tffdp-worker-', dir=base)


class NotConfined(RuntimeError):
  """The helper ended before serving (exit status 3: the kernel refused the namespaces)."""


def helper_env(env=None) -> dict:
  """`env` (default `os.environ`) with this package importable by `python -m`."""
  env = dict(os.environ if env is None else env)
  parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env['PYTHONPATH'] = os.pathsep.join(
      [parent] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
  return env


def start(binary: str, max_calls: int = -1, env=None, timeout_s: float = 60.0, **popen):
  """Starts this helper for `binary` and waits until its socket serves.

  Args:
    binary: TFF's `worker_binary`.
    max_calls: Its `--max_concurrent_computation_calls`.
    env: The helper's environment (default `os.environ`; `helper_env` is applied).
    timeout_s: How long the helper may take to serve.
    **popen: More `subprocess.Popen` arguments (`stderr`, `preexec_fn`, `text`).

  Returns:
    `(process, socket path, directory)`; the caller removes the directory when done.

  Raises:
    NotConfined: If the helper ended first (the reason: its stderr where piped, else its
      exit status), or did not serve within `timeout_s` (it is killed).
  """
  import shutil  # pylint: disable=g-import-not-at-top
  directory = socket_dir()
  path = os.path.join(directory, 'worker.sock')
  proc = subprocess.Popen(
      [sys.executable, '-m', 'tffdp.confined_worker', '--socket', path, '--binary', binary,
       '--max-concurrent-computation-calls', str(max_calls), '--parent-pid',
       str(os.getpid())], env=helper_env(env), **popen)
  deadline = time.monotonic() + timeout_s
  while not os.path.exists(path):
    if proc.poll() is not None or time.monotonic() > deadline:
      if proc.poll() is None:
        proc.kill()
      proc.wait()
      shutil.rmtree(directory, ignore_errors=True)
      err = proc.stderr.read().strip() if proc.stderr is not None else ''
      raise NotConfined(err or f'the confined TFF worker did not start (exit status '
                        f'{proc.returncode})')
    time.sleep(0.01)
  return proc, path, directory


def free_loopback_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _pump(src: socket.socket, dst: socket.socket) -> None:
  buf = bytearray(_CHUNK)
  view = memoryview(buf)
  try:
    while True:
      n = src.recv_into(buf)
      if not n:
        break
      dst.sendall(view[:n])
  except OSError:
    pass
  finally:
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
      try:
        s.shutdown(how)
      except OSError:
        pass


def _relay(client: socket.socket, port: int) -> None:
  deadline = time.monotonic() + 30
  while True:
    try:
      upstream = socket.create_connection(('127.0.0.1', port))
      break
    except OSError:
      if time.monotonic() > deadline:
        client.close()
        return
      time.sleep(0.02)
  for s in (client, upstream):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * _CHUNK)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * _CHUNK)
  upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
  back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
  back.start()
  _pump(client, upstream)
  back.join()
  client.close()
  upstream.close()


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m tffdp.confined_worker', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--socket', help='path of the Unix socket to serve')
  p.add_argument('--binary', help='TFF worker_binary')
  p.add_argument('--max-concurrent-computation-calls', type=int, default=-1)
  p.add_argument('--probe', action='store_true', help='only try the namespaces')
  p.add_argument('--parent-pid', type=int,
                 help='the process this helper serves: it exits at once if that is no '
                 'longer its parent (the parent died while it started)')
  args = p.parse_args(argv)
  parent = args.parent_pid or os.getppid()
  if os.getppid() != parent:
    return 0
  try:
    enter_private_network()
  except OSError as e:
    print(f'tffdp.confined_worker: {e}', file=sys.stderr)
    return EXIT_NO_NAMESPACE
  if args.probe:
    return 0
  if not args.socket or not args.binary:
    p.error('--socket and --binary are required')
  port = free_loopback_port()
  worker = subprocess.Popen([args.binary, f'--port={port}',
                             '--max_concurrent_computation_calls='
                             f'{args.max_concurrent_computation_calls}'],
                            preexec_fn=dying_with(os.getpid()))

  stop = threading.Event()

  def request_stop(*_):
    # Signal-safe: no wait here (the main loop may hold Popen's wait lock); the loop
    # below sees the worker end and cleans up.
    stop.set()
    try:
      os.kill(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass

  def end():
    if worker.poll() is None:
      worker.kill()
    worker.wait()
    try:
      os.unlink(args.socket)
    except OSError:
      pass
    os._exit(0)  # pylint: disable=protected-access

  signal.signal(signal.SIGTERM, request_stop)
  if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # as inherited otherwise
    signal.signal(signal.SIGINT, request_stop)
  server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
  tmp = args.socket + '.tmp'
  server.bind(tmp)
  os.chmod(tmp, 0o600)
  server.listen(16)
  os.rename(tmp, args.socket)  # appears only once it accepts connections

  def accept():
    while True:
      try:
        client, _ = server.accept()
      except OSError as e:
        if e.errno == errno.EINTR:
          continue
        request_stop()  # a helper that no longer accepts ends (its parent restarts it)
        return
      threading.Thread(target=_relay, args=(client, port), daemon=True).start()
  threading.Thread(target=accept, daemon=True).start()
  # Watch the parent and the worker: either ending ends both.
  while not stop.is_set() and worker.poll() is None and os.getppid() == parent:
    time.sleep(0.5)
  end()
  return 0


if __name__ == '__main__':
  sys.exit(main())
