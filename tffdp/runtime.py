"""TFF execution contexts: the local context (with worker clean-up) and remote workers.

Local. TFF 0.87's local C++ execution context starts
`tensorflow_federated/data/worker_binary` as a child process and talks to it over gRPC.
The worker outlives the Python process (re-parented to PID 1, stdout/stderr still open),
so `python -m tffdp.run ... | cat` would never finish. `use_local_context()` sets the
standard context once per process and registers clean-up that ends every worker this
process started: at interpreter exit, on SIGTERM, and on demand via `shutdown_workers()`.

TFF's `ServiceManager.__del__` ends its worker with SIGINT and waits for it with no
timeout. A process started with SIGINT ignored (`cmd &` in a script, `nohup`, many CI
runners and batch schedulers) passes "ignore" on to the worker, so that wait never ends.
tffdp therefore never lets TFF drop a context whose worker is alive: a repeated
`use_local_context()` is a no-op, and any real replacement first kills this process's
own workers by pid (SIGKILL) and detaches them from their `ServiceManager`.

Confined. TFF's worker binary listens on a TCP port of every interface and runs any
computation sent to it. `use_local_context()` therefore starts it through
`tffdp.confined_worker`: in a user + network namespace of its own (loopback only),
reached through a Unix socket in a directory only this user can enter, so no other host
and no process outside the namespace can reach it. Where the kernel refuses such
namespaces, the context falls back to an unconfined worker (the binary on a TCP port of
every interface, as TFF starts it) with a one-line warning; `TFFDP_LOCAL_WORKER=open`
chooses it without trying. Either way the worker ends with this process, even when it
is killed (`PR_SET_PDEATHSIG`).

SIGTERM. The handler ends the workers and raises `Terminated` once; the runner also
checks `terminate_requested()` after every round, since Python drops an exception raised
in a weakref callback or `__del__`. After it no new worker is started, and the command
line entry points end at once (`exit_process`).

Remote. `remote_context(['host:port', ...])` is TFF's own mergeable-computation execution
context (`tff.framework.MergeableCompExecutionContext`) over one `RemoteExecutor` per
worker (each a `worker_binary` started by `python -m tffdp.worker --port P`). A round
computation with one aggregation is compiled to `MergeableCompForm`; its CLIENTS-placed
arguments are split into one sub-round per worker, the partial aggregates merged, and
the rest of the round (server update, server noise) run once. `mergeable_reason(comp)`
says, before any training, why a computation cannot run this way.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence

import grpc
import tensorflow_federated as tff

_WORKER_NAME = 'worker_binary'
_HELPER_MODULE = 'tffdp.confined_worker'
# `TFFDP_LOCAL_WORKER`: how the local TFF worker runs: `confined` (its own network
# namespace; falls back with a warning where the kernel refuses) or `open` (unconfined,
# as TFF starts it: a TCP port on every interface).
LOCAL_WORKER_MODES = ('confined', 'open')
_managers: list = []  # the _LocalServiceManagers of this process
_confinement: Optional[str] = None  # None until probed: '' works, else why not
_lock = threading.Lock()
_terminate_requested = False  # set by the first SIGTERM (see _on_sigterm)
_installed = False
_local_context = None  # the context use_local_context() set, and its arguments
_local_kwargs: Optional[dict] = None

# TFF's own channel options for its workers (2 GB messages).
_GRPC_CHANNEL_OPTIONS = [
    ('grpc.max_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_receive_message_length', 2 * 1000 * 1000 * 1000),
    ('grpc.max_send_message_length', 2 * 1000 * 1000 * 1000),
]


def _process_table() -> list[tuple[int, int, str]]:
  """`(pid, ppid, comm)` of every process visible in /proc."""
  out = []
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
    out.append((int(entry), ppid, comm))
  return out


def helper_pids(parent: int | None = None) -> list[int]:
  """PIDs of the `tffdp.confined_worker` helpers this process (or `parent`) started."""
  parent = os.getpid() if parent is None else parent
  pids = []
  for pid, ppid, _ in _process_table():
    if ppid != parent:
      continue
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if _HELPER_MODULE.encode() in f.read():
          pids.append(pid)
    except OSError:
      continue
  return pids


def worker_pids(parent: int | None = None) -> list[int]:
  """PIDs of the TFF worker processes `parent` (default: this process) started: its
  children, and those of its `tffdp.confined_worker` helpers."""
  parent = os.getpid() if parent is None else parent
  table = _process_table()
  owners = {parent, *helper_pids(parent)}
  return [pid for pid, ppid, comm in table
          if ppid in owners and comm.startswith(_WORKER_NAME[:15])]


def shutdown_workers() -> int:
  """Ends every TFF worker started by this process; returns how many were signalled.

  Each worker (and each `tffdp.confined_worker` helper) is killed by pid (SIGKILL, which
  a worker cannot ignore) and reaped where it is this process's child, and its service
  manager is detached from it, so that neither TFF's restart path nor its `__del__`
  signals or waits for it again. A fresh worker is started on the next computation
  call, so this is safe mid-session.
  """
  # An open manager's worker is also ended by its pid: between fork and exec it is not
  # yet named `worker_binary` (a confined manager's process is its helper, found below).
  owned = [m.worker_pid for m in _managers if m.worker_pid is not None]
  pids = sorted(set(worker_pids()) | set(owned))
  helpers = [pid for pid in helper_pids() if pid not in pids]
  for pid in pids + helpers:
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  for pid in pids + helpers:
    try:
      os.waitpid(pid, 0)
    except ChildProcessError:  # a helper's worker: its helper is gone, init reaps it
      pass
  for manager in _managers:
    manager.detach()
  if pids:
    for obj in gc.get_objects():
      if type(obj).__name__ == 'ServiceManager' and getattr(obj, '_process', None) is not None:
        if getattr(obj._process, 'pid', None) in pids:
          obj._process, obj._stub = None, None
  return len(pids)


class _LocalServiceManager:
  """TFF's `ServiceManager` for this process's local worker: starts it and returns a
  stub; restarts it when it is gone.

  Confined (`confined=True`): through `tffdp.confined_worker`, which starts the worker
  in namespaces of its own and relays a Unix socket to it. Open: the worker binary
  itself on a free port, as TFF's own manager starts it (listening on every interface),
  but ended by the kernel when this process ends (Linux `PR_SET_PDEATHSIG`), so a run
  that dies, even by SIGKILL, leaves no worker behind. In both, no worker is started
  after SIGTERM (`terminate_requested`).
  """

  def __init__(self, binary: str, max_concurrent_computation_calls: int, confined: bool):
    self._binary, self._max_calls = binary, max_concurrent_computation_calls
    self._confined = confined
    self._process: Optional[subprocess.Popen] = None
    self._stub = None
    self._dir: Optional[str] = None

  def detach(self) -> None:
    # The stub's channel is left open: TFF's cached executors may still hold the stub, and
    # an RPC on a closed channel raises ValueError, which TFF does not retry; on a dead
    # worker the RPC fails as UNAVAILABLE instead, and TFF rebuilds its executors
    # (`get_stub` starts a new worker). The old channel goes with its last reference.
    self._process, self._stub = None, None
    if self._dir:
      shutil.rmtree(self._dir, ignore_errors=True)
      self._dir = None

  @property
  def worker_pid(self) -> Optional[int]:
    """The pid of the running worker this (open) manager started itself, else None."""
    if self._confined or self._process is None or self._process.poll() is not None:
      return None
    return self._process.pid

  def _start(self) -> tuple[subprocess.Popen, str]:
    """Starts the worker (or its confining helper); returns it and the gRPC target."""
    from tffdp import confined_worker  # pylint: disable=g-import-not-at-top
    if not self._confined:
      port = confined_worker.free_loopback_port()
      process = subprocess.Popen(
          [self._binary, f'--port={port}',
           f'--max_concurrent_computation_calls={self._max_calls}'],
          preexec_fn=confined_worker.dying_with(os.getpid()))
      return process, f'localhost:{port}'
    try:
      process, path, self._dir = confined_worker.start(self._binary, self._max_calls)
    except confined_worker.NotConfined as e:
      raise RuntimeError(f'{e}; TFFDP_LOCAL_WORKER=open uses an unconfined worker') from None
    return process, f'unix:{path}'

  def get_stub(self):
    if self._stub is not None and self._process is not None and \
        self._process.poll() is None and self._stub.is_ready:
      return self._stub
    if self._process is not None and self._process.poll() is None:
      self._process.kill()
      self._process.wait()
    self.detach()
    if _terminate_requested:  # TFF retries on a worker ended by SIGTERM: no new one
      raise RuntimeError('terminated (SIGTERM): no new TFF worker is started')
    process, target = self._start()
    deadline = time.monotonic() + 60
    self._process = process
    self._stub = tff.framework.RemoteExecutorGrpcStub(
        grpc.insecure_channel(target, _GRPC_CHANNEL_OPTIONS))
    while not self._stub.is_ready:
      if process.poll() is not None or time.monotonic() > deadline:
        status = process.poll()
        if status is None:
          process.kill()
          process.wait()
        raise RuntimeError(f'the local TFF worker did not serve (exit status {status})')
      time.sleep(0.01)
    return self._stub


def _worker_binary() -> str:
  return os.path.join(os.path.dirname(os.path.abspath(tff.__file__)), 'data', _WORKER_NAME)


def confinement_problem() -> str:
  """'' where the local worker can be confined here, else the reason (probed once)."""
  global _confinement
  if _confinement is None:
    from tffdp import confined_worker  # pylint: disable=g-import-not-at-top
    r = subprocess.run([sys.executable, '-m', _HELPER_MODULE, '--probe'],
                       capture_output=True, text=True, timeout=60,
                       env=confined_worker.helper_env())
    _confinement = '' if r.returncode == 0 else (
        r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f'exit {r.returncode}')
  return _confinement


def local_worker_mode() -> str:
  """`TFFDP_LOCAL_WORKER` (`confined` or `open`); raises `ValueError` on another value."""
  mode = os.environ.get('TFFDP_LOCAL_WORKER', 'confined')
  if mode not in LOCAL_WORKER_MODES:
    raise ValueError(f'TFFDP_LOCAL_WORKER must be one of {", ".join(LOCAL_WORKER_MODES)}. '
                     f'Found {mode!r}.')
  return mode


def _local_context_with(confined: bool, default_num_clients: int = 0,
                        max_concurrent_computation_calls: int = -1,
                        stream_structs: bool = False):
  """`tff.backends.test.create_sync_test_cpp_execution_context` with its worker started
  by `_LocalServiceManager` (confined or open)."""
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.backends.native import compiler as native_compiler
  from tensorflow_federated.python.core.backends.test import compiler as test_compiler
  from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
  from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
  from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
  from tensorflow_federated.python.core.impl.executors import remote_executor
  from tensorflow_federated.python.core.impl.types import placements
  # pylint: enable=g-import-not-at-top
  manager = _LocalServiceManager(_worker_binary(), max_concurrent_computation_calls,
                                confined)
  _managers.append(manager)

  def stack_fn(cardinalities):
    if cardinalities.get(placements.CLIENTS) is None:
      cardinalities[placements.CLIENTS] = default_num_clients
    ex = remote_executor.RemoteExecutor(manager.get_stub(), stream_structs=stream_structs)
    ex.set_cardinalities(cardinalities)
    return ex

  def compile_fn(comp):  # as TFF's test context: secure sums to their plain-sum bodies
    comp = test_compiler.replace_secure_intrinsics_with_bodies(comp)
    return native_compiler.desugar_and_transform_to_native(comp)

  return sync_execution_context.SyncExecutionContext(
      executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
          executor_stack_fn=stack_fn),
      compiler_fn=compile_fn,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)


def _default_context():
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  return context_stack_impl.context_stack.current


def _set_default_context(context) -> None:
  """Makes `context` TFF's default after ending this process's workers (see module doc)."""
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  shutdown_workers()
  context_stack_impl.context_stack.set_default_context(context)
  gc.collect()


def _at_exit() -> None:
  _quiet_sigterm()
  if _terminate_requested:
    # After SIGTERM only the workers are ended: dropping the context would join TFF's
    # event-loop thread, which may still be inside a call to a worker ended under it.
    shutdown_workers()
    return
  # Drop the context now, while the interpreter is whole: TFF's ServiceManager.__del__
  # fails if it first runs during interpreter teardown.
  from tensorflow_federated.python.core.impl.context_stack import runtime_error_context  # pylint: disable=g-import-not-at-top
  _set_default_context(runtime_error_context.RuntimeErrorContext())


class Terminated(SystemExit):
  """Raised in the main thread on SIGTERM (exit status 128 + 15), after this process's
  workers are ended: a run stopped from outside, checkpointed like a Ctrl-C."""


def terminate_requested() -> bool:
  """Whether this process has received SIGTERM (with `use_local_context`'s handler).

  A SIGTERM that arrives while Python runs a weakref callback or a `__del__` has its
  `Terminated` printed and dropped by the interpreter; `tffdp.runner` therefore also
  checks this flag after every round, and treats any failure after it as the stop.
  """
  return _terminate_requested


def _on_sigterm(signum, frame):
  global _terminate_requested
  first = not _terminate_requested
  _terminate_requested = True  # before the workers end: TFF's retry starts no new one
  shutdown_workers()
  if first:  # a second SIGTERM while the first is handled: nothing raised
    raise Terminated(128 + signum)


def _on_sigterm_while_ending(signum, frame):
  """SIGTERM while this process already ends: its workers are ended, nothing raised."""
  global _terminate_requested
  _terminate_requested = True
  shutdown_workers()


def _quiet_sigterm() -> None:
  if _installed and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGTERM, _on_sigterm_while_ending)


def exit_process(code: int) -> None:
  """Ends a command-line entry point with exit status `code` after its TFF workers.

  After SIGTERM (`terminate_requested()`), the process ends at once (`os._exit`, after
  flushing stdout and stderr), so that no interpreter clean-up waits for TFF's
  event-loop thread; the checkpoint and the metrics were written before. Its status is
  then 143 for any failure (a call whose worker SIGTERM ended fails as it can), 0 for a
  run that finished first. Otherwise it is `sys.exit(code)`.

  A SIGTERM that arrives from here on only ends the workers.

  Raises:
    SystemExit: With `code`, when no SIGTERM was received.
  """
  _quiet_sigterm()
  shutdown_workers()
  if _terminate_requested:
    code = code and 128 + signal.SIGTERM
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (OSError, ValueError):
        pass
    os._exit(code)  # pylint: disable=protected-access
  sys.exit(code)


def allow_deep_protos() -> None:
  """Lifts protobuf's nesting limit (100) on parsing, for deeply composed aggregators.

  TFF serialises each computation as nested building-block protos; a learning process
  around TFF's `DistributedDpSumFactory` (about ten nested aggregators) nests past
  protobuf's default depth and fails with `DecodeError: Error parsing message`. This
  calls the Python protobuf runtime's `SetAllowOversizeProtos(True)` (upb or cpp; the
  pure-Python runtime has no such limit), which also lifts the 64 MiB size limit.
  """
  from google.protobuf.internal import api_implementation  # pylint: disable=g-import-not-at-top
  kind = api_implementation.Type()
  if kind == 'upb':
    from google._upb import _message  # pylint: disable=g-import-not-at-top
  elif kind == 'cpp':
    from google.protobuf.pyext import _message  # pylint: disable=g-import-not-at-top
  else:
    return
  _message.SetAllowOversizeProtos(True)


def use_local_context(**kwargs) -> None:
  """Sets TFF's sync local C++ execution context (once) and installs worker clean-up.

  The context is TFF's test variant of the local one
  (`tff.backends.test.create_sync_test_cpp_execution_context`): the same C++ executor,
  with secure-sum intrinsics (SecAgg) compiled to their plain-sum bodies first, so
  aggregators built on secure aggregation (DDGauss's `DistributedDpSumFactory`) run in
  simulation; a computation without them compiles exactly as in the native context.

  Calling it again with the same arguments while its context is still TFF's default
  does nothing, so library code, tests and entry points may each call it. With other
  arguments, or after something else replaced the context, this process's workers are
  ended by pid before TFF drops the old context (never a wait on a worker that ignores
  SIGINT).

  Args:
    **kwargs: Passed to `tff.backends.test.create_sync_test_cpp_execution_context`.
  """
  global _installed, _local_context, _local_kwargs
  with _lock:
    if _local_context is not None and _local_kwargs == kwargs and \
        _default_context() is _local_context:
      return
    confined = local_worker_mode() == 'confined'
    problem = confinement_problem() if confined else ''
    if problem:
      print(f'tffdp: warning: the local TFF worker cannot be confined here ({problem}); '
            'it listens on a TCP port of every interface while this process runs '
            '(README: Security).', file=sys.stderr, flush=True)
    context = _local_context_with(confined and not problem, **kwargs)
    _set_default_context(context)
    _local_context, _local_kwargs = context, dict(kwargs)
    if not _installed:
      atexit.register(_at_exit)
      if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
      _installed = True


def ensure_local_context() -> None:
  """`use_local_context()` unless this process already installed one (any arguments).

  Library entry points (`tffdp.runner.run`) call it, so that a run started from Python
  never falls to TFF's lazily made default context, whose worker is unconfined and
  outlives the process.
  """
  if _local_context is None:
    use_local_context()


# ----- Remote workers ----------------------------------------------------------------

class WorkerError(RuntimeError):
  """A remote TFF worker cannot be reached (not started, ended, or network down)."""


_ADDRESS = re.compile(r'^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$')


def parse_workers(spec: str | Sequence[str]) -> list[str]:
  """`'host:port,host:port'` (or a sequence of them) -> list of addresses.

  Raises:
    ValueError: If an entry is not `HOST:PORT` with a port in 1-65535, or an address is
      repeated.
  """
  items = spec.split(',') if isinstance(spec, str) else list(spec)
  out = []
  for item in (i.strip() for i in items):
    m = _ADDRESS.match(item)
    if not m or not 0 < int(m['port']) < 65536:
      raise ValueError(f'workers must be HOST:PORT[,HOST:PORT...] with ports in 1-65535. '
                       f'Found {item!r}.')
    if item in out:
      raise ValueError(f'workers lists {item!r} twice.')
    out.append(item)
  if not out:
    raise ValueError('workers is empty.')
  return out


def worker_channel(address: str, tls=None) -> grpc.Channel:
  """A gRPC channel to a worker: mutual TLS with `tls` (a `tffdp.tls.TlsFiles`: this
  coordinator's certificate and the CA, the worker's certificate must name `address`'s
  host), else plain text."""
  if tls is None:
    return grpc.insecure_channel(address, _GRPC_CHANNEL_OPTIONS)
  return grpc.secure_channel(address, tls.channel_credentials(), _GRPC_CHANNEL_OPTIONS)


def wait_for_workers(addresses: Sequence[str], timeout_s: float = 30.0, tls=None) -> None:
  """Blocks until every worker accepts gRPC connections (over mutual TLS with `tls`).

  Raises:
    WorkerError: Naming the workers not ready within `timeout_s` seconds (with `tls`,
      also a worker whose certificate the CA did not sign or that does not name the
      host, or one that refuses this coordinator's certificate).
  """
  deadline = time.monotonic() + timeout_s
  missing = []
  for address in addresses:
    with worker_channel(address, tls) as channel:
      try:
        grpc.channel_ready_future(channel).result(
            timeout=max(0.1, deadline - time.monotonic()))
      except grpc.FutureTimeoutError:
        missing.append(address)
  if missing:
    how = ('over mutual TLS (check that each worker runs with --tls-* files of the same CA '
           'and that its certificate names the host dialled)' if tls is not None else
           'in plain text')
    raise WorkerError(
        f'no TFF worker answers at {", ".join(missing)} {how} (waited {timeout_s:g} s). '
        'Start one on each machine with `python -m tffdp.worker --port PORT` and open '
        'that port.')


class _FailFastStub(tff.framework.RemoteExecutorGrpcStub):
  """TFF's gRPC stub to one worker; a worker that stays unreachable raises `WorkerError`.

  TFF retries a `RetryableGRPCError` (UNAVAILABLE, FAILED_PRECONDITION) forever, which
  hangs a run whose worker died. Here each such error first waits up to
  `unreachable_after_s` for the channel to be ready again (a restarted worker: TFF's
  retry then reruns the sub-round on it); if it is not, `WorkerError` (not retryable)
  ends the round with a message naming the worker.
  """

  def __init__(self, address: str, unreachable_after_s: float, tls=None):
    self.address = address
    self._unreachable_after_s = unreachable_after_s
    self._closed = False
    self._grpc_channel = worker_channel(address, tls)
    super().__init__(self._grpc_channel)

  def _call(self, name, request):
    from tensorflow_federated.python.core.impl.executors import executors_errors  # pylint: disable=g-import-not-at-top
    try:
      return getattr(super(), name)(request)
    except executors_errors.RetryableError as e:
      try:
        grpc.channel_ready_future(self._grpc_channel).result(
            timeout=self._unreachable_after_s)
      except grpc.FutureTimeoutError:
        why = (f'{e.code().name}: {e.details()}' if isinstance(e, grpc.Call) else str(e))
        raise WorkerError(
            f'TFF worker {self.address} stopped answering ({why}) and was not back '
            f'within {self._unreachable_after_s:g} s.') from None
      raise

  def get_executor(self, request):
    return self._call('get_executor', request)

  def create_value(self, request):
    return self._call('create_value', request)

  def create_struct(self, request):
    return self._call('create_struct', request)

  def create_call(self, request):
    return self._call('create_call', request)

  def create_selection(self, request):
    return self._call('create_selection', request)

  def compute(self, request):
    return self._call('compute', request)

  # Freeing values on a worker is best effort: TFF also calls these from finalizers at
  # interpreter exit, after `close()` or with the worker gone, where an error only
  # prints a traceback.
  def dispose(self, request):
    return self._release('dispose', request)

  def dispose_executor(self, request):
    return self._release('dispose_executor', request)

  def _release(self, name, request):
    if not self._closed:
      try:
        return getattr(super(), name)(request)
      except (grpc.RpcError, ValueError):
        pass
    return None

  def close(self) -> None:
    self._closed = True
    self._grpc_channel.close()


def _remote_async_context(stub: _FailFastStub) -> tff.framework.AsyncExecutionContext:
  """TFF's async execution context over one remote worker (as its local context is built)."""
  from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top

  def stack_fn(cardinalities):
    cardinalities.setdefault(placements.CLIENTS, 0)
    executor = tff.framework.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.AsyncExecutionContext(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(executor_stack_fn=stack_fn),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result)


class _CachedMergeableCompiler:
  """`compile_to_mergeable_comp_form`, each computation compiled once.

  Secure-sum intrinsics are first compiled to their plain-sum bodies, as the local
  context (`_local_context_with`) compiles them: a round runs on the workers as it runs
  locally, and DDGauss's secure sums (whose modular wrap-around happens in the
  aggregator around them) merge across sub-rounds as plain sums do.
  """

  def __init__(self):
    self._forms: dict[int, tuple] = {}

  def __call__(self, comp):
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.test import compiler as test_compiler
    from tensorflow_federated.python.core.impl.computation import computation_impl
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
    # pylint: enable=g-import-not-at-top
    hit = self._forms.get(id(comp))
    if hit is None or hit[0] is not comp:
      plain = test_compiler.replace_secure_intrinsics_with_bodies(comp)
      # The same computation with comp's type, whose Python containers (e.g. a
      # LearningProcessOutput) the result is returned in.
      plain = computation_impl.ConcreteComputation(
          computation_proto=plain.to_building_block().proto,
          context_stack=context_stack_impl.context_stack,
          annotated_type=comp.type_signature)
      hit = (comp, tff.backends.native.compile_to_mergeable_comp_form(plain))
      self._forms[id(comp)] = hit
    return hit[1]


def mergeable_reason(comp: tff.Computation) -> Optional[str]:
  """Why `comp` cannot run as one mergeable round over several workers, or None if it can.

  Compiles `comp` with `tff.backends.native.compile_to_mergeable_comp_form` (what the
  remote context runs) and reports the compiler's objection, e.g. two aggregations one
  of which depends on the other, without the intrinsics TFF prints after it (`Examples
  are: ...`, thousands of characters of its internal representation).
  """
  try:
    _COMPILER(comp)
  except (ValueError, TypeError, NotImplementedError) as e:
    return f'{type(e).__name__}: {str(e).split(" Examples are:")[0]}'
  return None


_COMPILER = _CachedMergeableCompiler()


class _OrderedMergeableContext(tff.framework.MergeableCompExecutionContext):
  """TFF's mergeable-computation context with results in sub-round order.

  TFF 0.87's context joins the CLIENTS-placed results of `after_merge` in the order the
  sub-rounds *finish* (`_invoke_after_merge_in_async_pool`), so a round that returns
  client states (Adap DP-FL) could get them back swapped between workers; it also merges
  partial aggregates in completion order (float sums then depend on timing). Here
  sub-round `i` runs on worker `i mod W`, partial aggregates are merged in sub-round
  order, and results are joined in sub-round order: the same values as the local
  context, run after run. Everything else is TFF's own code.
  """

  def invoke(self, comp, arg=None):
    from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mcec  # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.types import type_conversions  # pylint: disable=g-import-not-at-top
    form = self._compiler_pipeline.compile(comp)
    if arg is not None:
      arg = mcec.MergeableCompExecutionContextValue(
          arg, form.up_to_merge.type_signature.parameter, self._num_subrounds)
    result = self._async_runner.run_coro_and_return_result(
        _invoke_in_order(form, arg, self._async_execution_contexts))
    return type_conversions.type_to_py_container(result,
                                                 form.after_merge.type_signature.result)


async def _invoke_in_order(form, arg, contexts):
  """`_invoke_mergeable_comp_form` of TFF with every step in sub-round order."""
  import asyncio  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mcec  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import computation_types, type_analysis  # pylint: disable=g-import-not-at-top,g-multiple-import
  args = arg.value() if arg is not None else [None] * len(contexts)
  ctxs = [contexts[i % len(contexts)] for i in range(len(args))]
  partials = await asyncio.gather(*[
      mcec._invoke_up_to_merge_and_return_context(form, a, c) for a, c in zip(args, ctxs)])  # pylint: disable=protected-access
  merged = partials[0]
  for partial in partials[1:]:
    merged = await mcec._merge_results(form, merged, partial, ctxs[0])  # pylint: disable=protected-access
  result_type = form.after_merge.type_signature.result
  if type_analysis.contains_only(result_type, lambda t: not isinstance(
      t, computation_types.FederatedType) or t.all_equal):
    return await mcec._compute_after_merged(form, args[0], merged, ctxs[0])  # pylint: disable=protected-access
  results = await asyncio.gather(*[
      mcec._compute_after_merged(form, a, merged, c) for a, c in zip(args, ctxs)])  # pylint: disable=protected-access
  return mcec._repackage_partitioned_values(list(results), result_type_spec=result_type)  # pylint: disable=protected-access


class RemoteContext:
  """TFF's mergeable-computation context over remote workers; a context manager.

  `with RemoteContext(addresses) as ctx: ctx.run(round_fn, *args)` runs `round_fn` with
  its CLIENTS-placed arguments split into one sub-round per worker (in order: the first
  `ceil(n / W)` clients on the first worker, ...). The merge of the partial aggregates and
  the server part of the round (server update, server-side noise, A-DPFL's validation)
  run on the first worker, which therefore sees the aggregate before any server noise
  and reads the server-side files. Computations outside `run` stay in the local context.
  Channels are closed on exit.

  Args:
    addresses: `host:port` of each worker (`parse_workers`).
    unreachable_after_s: How long a worker whose connection failed (refused, reset: the
      worker process ended) may stay unreachable before the round fails with
      `WorkerError` (instead of TFF retrying forever). A host that stops answering
      without closing the connection is detected only when TCP gives up.
    connect_timeout_s: How long to wait for every worker at start.
    tls: `tffdp.tls.TlsFiles` of this coordinator (mutual TLS); None: plain text.

  Raises:
    WorkerError: At start, if a worker does not answer within `connect_timeout_s`.
  """

  def __init__(self, addresses: Sequence[str], unreachable_after_s: float = 20.0,
               connect_timeout_s: float = 30.0, tls=None):
    self.addresses = list(addresses)
    wait_for_workers(self.addresses, connect_timeout_s, tls)
    self._stubs = [_FailFastStub(a, unreachable_after_s, tls) for a in self.addresses]
    self.context = _OrderedMergeableContext(
        async_contexts=[_remote_async_context(s) for s in self._stubs],
        compiler_fn=_COMPILER)

  def run(self, comp: tff.Computation, *args):
    """`comp(*args)` with this context installed for the call only."""
    with self.installed():
      return comp(*args)

  def installed(self):
    """Context manager: TFF computations invoked inside it run on the workers."""
    return tff.framework.get_context_stack().install(self.context)

  def close(self) -> None:
    for s in self._stubs:
      s.close()

  def __enter__(self) -> 'RemoteContext':
    return self

  def __exit__(self, *exc) -> None:
    self.close()


@contextlib.contextmanager
def loopback_workers(n: int, log=None, insecure: bool = False):
  """Starts `n` TFF workers on free loopback ports for the duration.

  Each is `python -m tffdp.worker` in its own process, serving mutual TLS with
  certificates made for the occasion (`tffdp.tls.make_certs` in a temporary folder), or
  plain text with `insecure`; all are ended (SIGTERM, then SIGKILL) on exit. For tests
  and benchmarks.

  Yields:
    `(addresses, processes, tls)`: `host:port` of each worker, their processes, and the
    coordinator's `tffdp.tls.TlsFiles` (None with `insecure`).
  """
  import portpicker  # pylint: disable=g-import-not-at-top
  from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
  procs, addresses = [], []
  certs = tempfile.mkdtemp(prefix='tffdp-certs-')
  try:
    tls = None
    flags = ['--insecure']
    if not insecure:
      paths = tls_lib.make_certs(certs, ['localhost'])
      tls = tls_lib.TlsFiles(paths['coordinator'], paths['coordinator_key'], paths['ca'])
      flags = ['--tls-cert', paths['worker'], '--tls-key', paths['worker_key'], '--tls-ca',
               paths['ca']]
    for _ in range(n):
      port = portpicker.pick_unused_port()
      procs.append(subprocess.Popen(
          [sys.executable, '-m', 'tffdp.worker', '--port', str(port), *flags],
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')))
      addresses.append(f'localhost:{port}')
    wait_for_workers(addresses, timeout_s=60.0, tls=tls)
    if log:
      log(f'loopback workers: {", ".join(addresses)}')
    yield addresses, procs, tls
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
    for p in procs:
      try:
        p.wait(timeout=10)
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    shutil.rmtree(certs, ignore_errors=True)
