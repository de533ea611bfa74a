"""TFF execution context with worker clean-up.

TFF 0.87's local C++ execution context starts `tensorflow_federated/data/worker_binary`
as a child process and talks to it over gRPC. The worker outlives the Python process
(re-parented to PID 1, stdout/stderr still open), so `python -m tffdp.run ... | cat`
would never finish. `use_local_context()` sets the standard context and registers
clean-up that ends every worker this process started: at interpreter exit, on SIGTERM,
and on demand via `shutdown_workers()`.
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import threading

import tensorflow_federated as tff

_WORKER_NAME = 'worker_binary'
_lock = threading.Lock()
_installed = False


def worker_pids(parent: int | None = None) -> list[int]:
  """PIDs of TFF worker processes whose parent is `parent` (default: this process)."""
  parent = os.getpid() if parent is None else parent
  pids = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat') as f:
        stat = f.read()
      # Format: pid (comm) state ppid ...; comm may contain spaces.
      comm = stat[stat.index('(') + 1:stat.rindex(')')]
      ppid = int(stat[stat.rindex(')') + 2:].split()[1])
    except (OSError, ValueError, IndexError):
      continue
    if ppid == parent and comm.startswith(_WORKER_NAME[:15]):
      pids.append(int(entry))
  return pids


def shutdown_workers() -> int:
  """Ends every TFF worker started by this process; returns how many were signalled.

  TFF restarts a worker on the next computation call, so this is safe mid-session.
  """
  pids = worker_pids()
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
      os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
      pass
  if pids:
    # TFF's ServiceManager would signal the (now reaped) pid again when collected.
    for obj in gc.get_objects():
      if type(obj).__name__ == 'ServiceManager' and getattr(obj, '_process', None) is not None:
        if getattr(obj._process, 'pid', None) in pids:
          obj._process, obj._stub = None, None
  return len(pids)


def _at_exit() -> None:
  shutdown_workers()
  # Drop the context now, while the interpreter is whole: TFF's ServiceManager.__del__
  # fails if it first runs during interpreter teardown.
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl, runtime_error_context  # pylint: disable=g-import-not-at-top,g-multiple-import
  context_stack_impl.context_stack.set_default_context(
      runtime_error_context.RuntimeErrorContext())
  gc.collect()


def _on_sigterm(signum, frame):
  shutdown_workers()
  raise SystemExit(128 + signum)


def use_local_context(**kwargs) -> None:
  """Sets TFF's sync local C++ execution context and installs worker clean-up.

  Args:
    **kwargs: Passed to `tff.backends.native.set_sync_local_cpp_execution_context`.
  """
  global _installed
  tff.backends.native.set_sync_local_cpp_execution_context(**kwargs)
  with _lock:
    if not _installed:
      atexit.register(_at_exit)
      if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
      _installed = True
