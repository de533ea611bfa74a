"""TFF runtime: a context that never hangs, TFF workers, rounds spread over loopback workers."""

import csv
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import config as config_lib
from tffdp import models, runner, runtime
from tffdp.algorithms import baselines, common
from tffdp.data import FederatedData

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)
TOY = dict(dataset='synthetic', clients=8, clients_per_round=4, partition='iid',
           model='logistic_regression', batch_size=100, learning_rate=0.5,
           num_validation=500, checkpoint_every=1, log_every=1)


def _sigint_ignored(args: list) -> list:
  """`args` started with SIGINT ignored, as `cmd &` in a script starts it: through bash's
  `trap '' INT; exec` (same pid). Not a `preexec_fn`: Python code between fork and exec
  in this gRPC-threaded test process can abort the child (gRPC's fork handlers)."""
  return ['bash', '-c', 'trap "" INT; exec "$@"', 'sigint-ignored', *args]


# ----- Local context ------------------------------------------------------------------

REPRO = '''
from tffdp import runtime; import tensorflow as tf, tensorflow_federated as tff
runtime.use_local_context()
print(tff.tensorflow.computation(lambda: tf.constant(1.0))())
runtime.use_local_context(); print("second context ok", flush=True)
runtime.use_local_context(default_num_clients=1)  # a real replacement
print(tff.tensorflow.computation(lambda: tf.constant(2.0))())
print("third context ok", flush=True)
'''


def test_context_reset_with_sigint_ignored_finishes():
  # Issue 10's reproduction: with SIGINT ignored (what `cmd &` in a script gives), TFF's
  # ServiceManager.__del__ used to wait forever on a worker that ignores its SIGINT.
  r = subprocess.run(_sigint_ignored([sys.executable, '-c', REPRO]), capture_output=True,
                     text=True, cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split() == ['1.0', 'second', 'context', 'ok', '2.0', 'third', 'context',
                              'ok']


def test_use_local_context_twice_keeps_context_and_worker():
  runtime.use_local_context()
  before = tff.framework.get_context_stack().current
  assert float(tff.tensorflow.computation(lambda: tf.constant(3.0))()) == 3.0
  pids = runtime.worker_pids()
  runtime.use_local_context()
  assert tff.framework.get_context_stack().current is before
  assert runtime.worker_pids() == pids and len(pids) == 1


# ----- Confinement of the local worker (tffdp.confined_worker) -------------------------

def _socket_inodes(pids) -> set[str]:
  inodes = set()
  for pid in pids:
    try:
      for fd in os.listdir(f'/proc/{pid}/fd'):
        target = os.readlink(f'/proc/{pid}/fd/{fd}')
        if target.startswith('socket:['):
          inodes.add(target[len('socket:['):-1])
    except OSError:
      continue
  return inodes


def _listening_inodes() -> set[str]:
  """Inodes of the TCP sockets listening in this process's network namespace (what
  another host, or any local process here, could connect to)."""
  out = set()
  for name in ('/proc/net/tcp', '/proc/net/tcp6'):
    with open(name) as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        if fields[3] == '0A':  # TCP_LISTEN
          out.add(fields[9])
  return out


_CLI_TOY = ['--method', 'fedavg', '--dataset', 'synthetic', '--rounds', '40', '--clients',
            '8', '--clients-per-round', '4', '--partition', 'iid', '--model',
            'logistic_regression', '--num-validation', '100', '--log-every', '1']


def _tree_while_running(out, mode):
  """Starts a CLI run with TFFDP_LOCAL_WORKER=mode; at round 2, its process tree, the
  worker pids and the listening sockets seen from here. Ends the run."""
  env = dict(ENV, TFFDP_LOCAL_WORKER=mode, PYTHONUNBUFFERED='1')
  p = subprocess.Popen(_sigint_ignored([sys.executable, '-m', 'tffdp.run', *_CLI_TOY,
                                        '--out', str(out)]),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                       env=env)
  try:
    for line in p.stdout:
      if line.startswith('round 2/'):
        break
    workers = runtime.worker_pids(p.pid)
    tree = [p.pid, *runtime.helper_pids(p.pid), *workers]
    exposed = _socket_inodes(tree) & _listening_inodes()
    netns = {pid: os.readlink(f'/proc/{pid}/ns/net') for pid in workers}
  finally:
    p.terminate()
    _, err = p.communicate(timeout=120)
  return workers, exposed, netns, err


def test_a_local_run_listens_on_no_port_outside_its_own_namespace(tmp_path):
  if runtime.confinement_problem():
    pytest.skip(f'this kernel refuses the namespaces: {runtime.confinement_problem()}')
  workers, exposed, netns, err = _tree_while_running(tmp_path / 'c', 'confined')
  assert len(workers) == 1, err
  assert not exposed  # no TCP listener of the run's tree in this (the host's) namespace
  assert netns[workers[0]] != os.readlink('/proc/self/ns/net')
  assert 'cannot be confined' not in err
  # The check bites: the unconfined worker listens here, on every interface.
  workers, exposed, netns, _ = _tree_while_running(tmp_path / 'o', 'open')
  assert len(workers) == 1 and exposed
  assert netns[workers[0]] == os.readlink('/proc/self/ns/net')


def test_confined_and_open_workers_give_the_same_rows(tmp_path):
  rows = {}
  for mode in ('confined', 'open'):
    out = tmp_path / mode
    r = subprocess.run([sys.executable, '-m', 'tffdp.run', '--method', 'dp_fedavg',
                        '--dataset', 'synthetic', '--rounds', '3', '--clients', '8',
                        '--clients-per-round', '4', '--partition', 'iid', '--model',
                        'logistic_regression', '--num-validation', '100',
                        '--clip-norm', '0.3', '--out', str(out)], capture_output=True,
                       text=True, cwd=ROOT, env=dict(ENV, TFFDP_LOCAL_WORKER=mode),
                       timeout=600)
    assert r.returncode == 0, r.stderr
    rows[mode] = _rows(out)
  timing = ('train_seconds', 'accounting_seconds', 'eval_seconds', 'round_seconds',
            'wall_seconds', 'paused_seconds')
  strip = lambda rs: [{k: v for k, v in r.items() if k not in timing} for r in rs]
  assert strip(rows['confined']) == strip(rows['open']) and len(rows['open']) == 3


FALLBACK = '''
import os
from tffdp import runtime; import tensorflow as tf, tensorflow_federated as tff
runtime._confinement = 'unshare(CLONE_NEWUSER | CLONE_NEWNET): Operation not permitted'
runtime.use_local_context()
print(float(tff.tensorflow.computation(lambda: tf.constant(1.0))()))
w = runtime.worker_pids()
print(len(w), os.readlink(f'/proc/{w[0]}/ns/net') == os.readlink('/proc/self/ns/net'))
'''


def test_where_the_kernel_refuses_the_worker_runs_open_with_a_one_line_warning():
  r = subprocess.run([sys.executable, '-c', FALLBACK], capture_output=True, text=True,
                     cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split() == ['1.0', '1', 'True']
  warnings = [l for l in r.stderr.splitlines() if 'cannot be confined' in l]
  assert len(warnings) == 1 and 'Operation not permitted' in warnings[0]
  assert warnings[0].startswith('tffdp: warning:')


def test_cli_unknown_local_worker_mode_exits_2():
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', *_CLI_TOY], capture_output=True,
                     text=True, cwd=ROOT, env=dict(ENV, TFFDP_LOCAL_WORKER='nope'),
                     timeout=300)
  assert r.returncode == 2 and 'TFFDP_LOCAL_WORKER must be one of confined, open' in r.stderr
  assert 'Traceback' not in r.stderr


def _local_mean():
  """A federated mean in tffdp's local context (installed here)."""
  runtime.use_local_context()

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def mean(x):
    return tff.federated_mean(x)
  return mean


def test_computations_run_on_after_shutdown_workers_mid_session():
  # TFF caches its executors with the old worker's stub: after `shutdown_workers` the next
  # call must fail over to a new worker (UNAVAILABLE, retried), not on a closed channel.
  mean = _local_mean()
  assert float(mean([1.0, 3.0])) == 2.0
  before = runtime.worker_pids()
  assert runtime.shutdown_workers() == 1 and runtime.worker_pids() == []
  assert float(mean([1.0, 5.0])) == 3.0
  after = runtime.worker_pids()
  assert len(after) == 1 and after != before


def test_the_worker_s_socket_is_the_user_s_alone():
  runtime.use_local_context()
  if not runtime._managers:  # pylint: disable=protected-access
    pytest.skip('the local worker is not confined here')
  assert float(tff.tensorflow.computation(lambda: tf.constant(5.0))()) == 5.0
  manager = runtime._managers[-1]  # pylint: disable=protected-access
  assert os.stat(manager._dir).st_mode & 0o777 == 0o700  # pylint: disable=protected-access
  sock = os.path.join(manager._dir, 'worker.sock')  # pylint: disable=protected-access
  assert os.stat(sock).st_mode & 0o777 == 0o600


# ----- Worker process and addresses ---------------------------------------------------

@pytest.mark.parametrize('spec,expected', [
    ('localhost:8000', ['localhost:8000']),
    ('a.example.org:1, 10.0.0.2:65535', ['a.example.org:1', '10.0.0.2:65535']),
    ('[::1]:9000', ['[::1]:9000'])])
def test_parse_workers(spec, expected):
  assert runtime.parse_workers(spec) == expected


@pytest.mark.parametrize('spec', ['localhost', 'h:0', 'h:70000', 'h:1,h:1', '', 'h:p'])
def test_parse_workers_rejects(spec):
  with pytest.raises(ValueError, match='workers'):
    runtime.parse_workers(spec)


def test_cli_bad_workers_exit_2():
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', '--method', 'fedavg', '--dataset',
                      'mnist', '--workers', 'nohost'], capture_output=True, text=True,
                     cwd=ROOT, env=ENV, timeout=300)
  assert r.returncode == 2 and 'HOST:PORT' in r.stderr and 'Traceback' not in r.stderr


def test_worker_serves_and_ends_on_sigterm():
  import portpicker  # pylint: disable=g-import-not-at-top
  port = portpicker.pick_unused_port()
  # Started with SIGINT ignored, as from a script's `&`: SIGTERM must still end it.
  proc = subprocess.Popen(_sigint_ignored([sys.executable, '-m', 'tffdp.worker', '--port',
                                           str(port), '--insecure']),
                          stdout=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
  try:
    runtime.wait_for_workers([f'localhost:{port}'], timeout_s=60)
    children = runtime.worker_pids(proc.pid)  # the wrapper's TFF worker binary
    assert len(children) == 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert 'stopped (signal 15)' in proc.stdout.read()
    assert not os.path.exists(f'/proc/{children[0]}') or \
        open(f'/proc/{children[0]}/stat').read().split()[2] == 'Z'
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def test_unreachable_worker_is_a_clear_error():
  import portpicker  # pylint: disable=g-import-not-at-top
  port = portpicker.pick_unused_port()
  with pytest.raises(runtime.WorkerError, match=f'localhost:{port}.*tffdp.worker'):
    runtime.wait_for_workers([f'localhost:{port}'], timeout_s=1)


# ----- Mergeable form -----------------------------------------------------------------

def test_mergeable_reason_names_a_dependent_second_aggregation():
  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def two_rounds(x):
    mean = tff.federated_mean(x)
    return tff.federated_mean(tff.federated_map(
        tff.tensorflow.computation(lambda a, b: a - b),
        (x, tff.federated_broadcast(mean))))

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def one_round(x):
    return tff.federated_mean(x)

  assert runtime.mergeable_reason(one_round) is None
  assert 'aggregat' in runtime.mergeable_reason(two_rounds).lower()


def test_round_with_dependent_aggregations_refused_before_training(tmp_path):
  # A round whose second sum needs the first one's result (as DP-FedAGS's eq. 37 weights
  # did before its mean became four independent sums) has no mergeable form: refused in
  # one sentence, the compiler's, before any worker is contacted.
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (8, *SHAPE), dtype=np.uint8), np.arange(8),
                       [np.arange(4), np.arange(4, 8)], cache_dir=str(tmp_path))
  method = baselines.build_fedavg(BUILDER, data, learning_rate=0.1, batch_size=4)

  @tff.tensorflow.computation(np.float32, np.float32)
  def times(a, b):
    return a * b

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def two_dependent_sums(x):
    total = tff.federated_broadcast(tff.federated_sum(x))
    return tff.federated_sum(tff.federated_map(times, (x, total)))

  method.round_computation, method.name = two_dependent_sums, 'toy_two_sums'
  exp = runner.Experiment(config_lib.RunConfig(workers='localhost:1'), data, method, None)
  with pytest.raises(ValueError, match=r'toy_two_sums cannot run on remote TFF workers: its '
                     r'round does not compile to TFF.s mergeable form \(ValueError: Detected '
                     r'one aggregate dependent on another\.\)\.$'):
    runner.connect_workers(exp.config, exp, log=lambda s: None)


def test_method_without_round_computation_refused_before_training(tmp_path):
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (8, *SHAPE), dtype=np.uint8), np.arange(8),
                       [np.arange(4), np.arange(4, 8)], cache_dir=str(tmp_path))
  method = baselines.build_fedavg(BUILDER, data, learning_rate=0.1, batch_size=4)
  method.round_computation = None  # a Python-driven round exposing no one computation
  method.name = 'toy_python_round'
  exp = runner.Experiment(config_lib.RunConfig(workers='localhost:1'), data, method, None)
  with pytest.raises(ValueError, match='toy_python_round cannot run on remote TFF workers'):
    runner.connect_workers(exp.config, exp, log=lambda s: None)


# ----- Rounds on two loopback workers -------------------------------------------------

@pytest.fixture(scope='module')
def two_workers():
  """Two loopback workers serving mutual TLS: the RunConfig settings that reach them."""
  with runtime.loopback_workers(2) as (addresses, _, tls):
    yield dict(workers=','.join(addresses), tls_cert=tls.cert, tls_key=tls.key,
               tls_ca=tls.ca)


def _remote(two_workers):
  return runtime.RemoteContext(runtime.parse_workers(two_workers['workers']),
                               tls=config_lib.RunConfig(**two_workers).worker_tls)


def _rows(out):
  with open(os.path.join(out, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


def _state(out):
  return runner.read_checkpoint(str(out))['state']


@pytest.mark.parametrize('method,kw', [
    ('fedavg', {}),
    ('dpfl', dict(noise_multiplier=0.0, clip_norm=1.0)),
    # Client noise is drawn from per-client seeds, so noisy DPFL matches too.
    ('dpfl', dict(noise_multiplier=1.0, clip_norm=1.0, clients_per_slice=2)),
    ('a_dpfl', dict(noise_multiplier=1.0, clip_norm=1.0, batch_size=200)),
    # Stateful clients: their states are split with the cohort and joined back in order.
    ('adap_dp_fl', dict(noise_multiplier=1.0, clip_norm=1.0, lot_size=50,
                        learning_rate=0.01, clients_per_slice=4)),
    # Client controls as CLIENTS-placed values, in and out with the cohort.
    ('dp_scaffold', dict(noise_multiplier=1.0, clip_norm=1.0)),
])
def test_two_workers_match_local_context(tmp_path, two_workers, method, kw,
                                         monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  cfg = config_lib.RunConfig.create(**dict(TOY, method=method, rounds=2, **kw))
  lines = []
  local = runner.run(config_lib.RunConfig(**dict(vars(cfg), out=str(tmp_path / 'local'))),
                     log=lambda s: None)
  remote = runner.run(config_lib.RunConfig(**dict(vars(cfg), out=str(tmp_path / 'remote'),
                                                  **two_workers)), log=lines.append)
  assert any('2 TFF worker(s)' in line for line in lines)
  assert len(_state(tmp_path / 'local')) == len(_state(tmp_path / 'remote'))
  assert len(_rows(tmp_path / 'local')) == len(_rows(tmp_path / 'remote')) == 2
  for a, b in zip(_state(tmp_path / 'local'), _state(tmp_path / 'remote')):
    np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                               rtol=1e-5, atol=1e-6)
  for ra, rb in zip(_rows(tmp_path / 'local'), _rows(tmp_path / 'remote')):
    for col in ('test_accuracy', 'test_loss', 'train_loss', 'epsilon_claimed',
                'epsilon_guaranteed', 'cohort_size', 'noise_multiplier'):
      if col in ra:
        assert float(rb[col]) == pytest.approx(float(ra[col]), rel=1e-5, abs=1e-6), col
  assert local['epsilon_guaranteed'] == remote['epsilon_guaranteed']


def test_the_example_method_on_two_workers_matches_the_local_context(tmp_path, two_workers,
                                                                    monkeypatch):
  # A method added from outside the package (one module, one registry line) runs on
  # workers as the built-in ones do: its seeded server noise drawn once, after the merge.
  from examples import clipped_mean_method  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  clipped_mean_method.register()
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  try:
    cfg = config_lib.RunConfig.create(**dict(
        TOY, method=clipped_mean_method.NAME, rounds=2, noise_multiplier=1.0, clip_norm=1.0))
    lines = []
    runs = {name: runner.run(config_lib.RunConfig(**dict(
        vars(cfg), out=str(tmp_path / name), **extra)), log=lines.append)
            for name, extra in (('local', {}), ('remote', two_workers))}
  finally:
    registry.unregister(clipped_mean_method.NAME)
  assert any('2 TFF worker(s)' in line for line in lines)
  for a, b in zip(_state(tmp_path / 'local'), _state(tmp_path / 'remote')):
    np.testing.assert_allclose(np.asarray(b, np.float64), np.asarray(a, np.float64),
                               rtol=1e-5, atol=1e-6)
  for ra, rb in zip(_rows(tmp_path / 'local'), _rows(tmp_path / 'remote')):
    for col in ('test_accuracy', 'test_loss', 'train_loss', 'epsilon_guaranteed'):
      assert float(rb[col]) == pytest.approx(float(ra[col]), rel=1e-5, abs=1e-6), col
  assert runs['local']['epsilon_guaranteed'] == runs['remote']['epsilon_guaranteed']


@pytest.mark.parametrize('method,kw', [
    # Secure sums run as their plain-sum bodies on the workers, as in the local context.
    ('ddgauss', dict(noise_multiplier=1e-3, clip_norm=1.0)),
    ('aadp_fl', dict(clip_norm=1.0)),
    # Each client's epsilon' comes back CLIENTS-placed, in cohort order.
    ('cosafed', dict(method_options=dict(epsilon=100.0))),
    ('lapfed', dict(method_options=dict(epsilon=100.0, l1_clip=10.0))),
    ('adpfl', dict(method_options=dict(epsilon=100.0))),
    ('cosfed', dict(method_options=dict(epsilon=100.0))),
    # DP-FedAGS's pipeline: eq. 37's mean from four independent sums, the weights from the
    # (n_k, L_k) pairs gathered on the server, so the round compiles to mergeable form.
    # DP-FedAGS noises every coordinate here (its SVT still runs): with only the SVT's
    # coordinates noised, the noised share differs run to run (0.56-0.70 of the weights)
    # and so does the spread the test compares. It also takes FedAvg's weights, the
    # `size` path of the mean; DP-FedSNLC and the other two take eq. 37's.
    ('dp_fedags', dict(clip_norm=1.0, method_options=dict(perturb_all=True,
                                                          weighting='size'))),
    ('dp_fedsnlc', dict(clip_norm=1.0)),
    ('dp_fedavg_ags', dict(clip_norm=1.0)),
    ('cpsgd', dict(clip_norm=1.0)),
])
def test_unseeded_noise_methods_on_two_workers_differ_as_a_second_local_run(
    tmp_path, two_workers, method, kw, monkeypatch):
  # Their noise is drawn unseeded inside TFF's aggregators (DDGauss's discrete Gaussian
  # shares, AADP-FL's server noise, the cosAFed family's Laplace noise, the DP-FedAGS
  # pipeline's perturbation of each upload), so two runs
  # differ by the noise: the remote run is as far from a local one as a second local run
  # is, and states the same epsilons (cosAFed's, data-dependent, as close as a second
  # local run's).
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  cfg = config_lib.RunConfig.create(**dict(TOY, method=method, rounds=1, **kw))
  lines = []
  runs = {}
  for name, extra in (('local', {}), ('local_again', {}), ('remote', two_workers)):
    runs[name] = runner.run(config_lib.RunConfig(**dict(
        vars(cfg), out=str(tmp_path / name), **extra)), log=lines.append)
  assert any('2 TFF worker(s)' in line for line in lines)
  for key in ('epsilon_guaranteed', 'epsilon_claimed'):   # data-dependent for cosAFed
    a, b, again = (runs[n][key] for n in ('local', 'remote', 'local_again'))
    if a == again:
      assert b == pytest.approx(a, rel=1e-9), key
    else:   # cosAFed's epsilon' follow its noisy model's cosines
      assert b == pytest.approx(a, rel=0.05), key
  weights = {n: np.concatenate([np.ravel(np.asarray(a, np.float64))
                                for a in _state(tmp_path / n) if np.size(a) >= 10])
             for n in runs}
  # One round: the difference is one release's noise over thousands of weights, so the
  # two spreads agree to about 2% (noise drawn twice remotely would make it 22% more).
  noise = np.std(weights['local_again'] - weights['local'])
  assert 0.85 * noise < np.std(weights['remote'] - weights['local']) < 1.15 * noise


def test_dp_fedavg_server_noise_added_once_across_workers(tmp_path, two_workers):
  # The server's Gaussian noise is part of the round after the merge: it must be drawn
  # once per round, not once per sub-round (which would give sqrt(2) x the std).
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (24, *SHAPE), dtype=np.uint8),
                       rng.integers(0, 10, 24), [np.arange(i * 4, i * 4 + 4) for i in range(6)],
                       cache_dir=str(tmp_path))
  sigma, clip, k = 2.0, 0.5, 6
  ids, seeds = [str(c) for c in range(6)], common.client_seeds(0, 0, range(6))

  def weights_after_round(noise):
    m = baselines.build_dp_fedavg(BUILDER, data, learning_rate=0.5, batch_size=4,
                                  noise_multiplier=noise, clip_norm=clip, clients_per_round=k)
    round_fn = runner.build_round_computation(m, data)
    state = m.process.initialize()
    with _remote(two_workers) as remote:
      out = remote.run(round_fn, state, ids, seeds)
    return np.concatenate([np.ravel(w) for w in m.process.get_model_weights(out.state).trainable])

  noise = weights_after_round(sigma) - weights_after_round(0.0)
  expected = sigma * clip / k  # std of the noise on the mean over the expected cohort
  assert noise.size == 7850
  assert np.std(noise) == pytest.approx(expected, rel=0.05)


def test_worker_dying_mid_run_gives_error_and_resumable_checkpoint(tmp_path):
  out = tmp_path / 'run'
  env = dict(ENV, TFFDP_CACHE_DIR=str(tmp_path / 'clients'))
  args = ['--method', 'dpfl', '--dataset', 'synthetic', '--rounds', '6',
          '--clients', '8', '--clients-per-round', '4', '--partition', 'iid', '--model',
          'logistic_regression', '--batch-size', '100', '--num-validation', '500',
          '--noise-multiplier', '0.5', '--clip-norm', '1.0', '--checkpoint-every', '100',
          '--out', str(out)]
  with runtime.loopback_workers(2) as (addresses, procs, tls):
    run = subprocess.Popen(_sigint_ignored([sys.executable, '-m', 'tffdp.run', *args,
                                            '--workers', ','.join(addresses),
                                            '--worker-timeout', '3', '--tls-cert', tls.cert,
                                            '--tls-key', tls.key, '--tls-ca', tls.ca]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           cwd=ROOT, env=env)
    try:
      deadline = time.monotonic() + 300
      while not (out / 'metrics.csv').exists() or len(_rows(out)) < 2:
        assert run.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
      procs[1].kill()  # the second worker dies mid-run
      stdout, stderr = run.communicate(timeout=120)  # never a hang
    finally:
      if run.poll() is None:
        run.kill()
  assert run.returncode == 1, stderr[-2000:]
  assert addresses[1] in stderr and '--resume' in stderr and 'Traceback' not in stderr
  assert not (out / 'summary.json').exists()
  done = len(_rows(out))
  assert 2 <= done < 6
  # Every written row is a completed round, and the checkpoint holds exactly those.
  assert runner.read_checkpoint(str(out))['round'] == done
  # Resume on the local context; the result equals an uninterrupted local run.
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', *args, '--resume'],
                     capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  full = tmp_path / 'full'
  args[args.index('--out') + 1] = str(full)
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', *args], capture_output=True,
                     text=True, cwd=ROOT, env=env, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  a, b = _rows(out), _rows(full)
  assert len(a) == len(b) == 6
  for ra, rb in zip(a, b):
    for col in ('test_accuracy', 'test_loss', 'epsilon_guaranteed'):
      assert float(ra[col]) == pytest.approx(float(rb[col]), rel=1e-5, abs=1e-6)


# ----- Mutual TLS between the coordinator and the workers ------------------------------

def test_make_certs_writes_a_ca_and_certificates_for_each_side(tmp_path):
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
  r = subprocess.run([sys.executable, '-m', 'tffdp.worker', 'make-certs', str(tmp_path / 'c'),
                      '--hosts', 'gpu1.example.org,10.0.0.7'], capture_output=True,
                     text=True, cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 0, r.stderr
  assert '--tls-cert' in r.stdout and 'ca.key off the workers' in r.stdout
  files = sorted(os.listdir(tmp_path / 'c'))
  assert files == ['ca.key', 'ca.pem', 'coordinator.key', 'coordinator.pem', 'worker.key',
                   'worker.pem']
  for key in ('ca.key', 'coordinator.key', 'worker.key'):
    assert os.stat(tmp_path / 'c' / key).st_mode & 0o777 == 0o600
  worker = x509.load_pem_x509_certificate((tmp_path / 'c' / 'worker.pem').read_bytes())
  sans = worker.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
  assert sans.get_values_for_type(x509.DNSName) == ['gpu1.example.org', 'localhost']
  assert [str(a) for a in sans.get_values_for_type(x509.IPAddress)] == ['10.0.0.7',
                                                                        '127.0.0.1']
  with pytest.raises(FileExistsError):  # a CA key is never overwritten
    tls_lib.make_certs(str(tmp_path / 'c'), [])
  r = subprocess.run([sys.executable, '-m', 'tffdp.worker', 'make-certs', str(tmp_path / 'c')],
                     capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 2 and 'already holds' in r.stderr and 'ca.key' in r.stderr


def _tls_worker(port, files, extra=()):
  return subprocess.Popen(
      [sys.executable, '-m', 'tffdp.worker', '--port', str(port), '--tls-cert',
       files['worker'], '--tls-key', files['worker_key'], '--tls-ca', files['ca'], *extra],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)


def _stop(proc):
  proc.terminate()
  try:
    return proc.communicate(timeout=30)
  except subprocess.TimeoutExpired:
    proc.kill()
    return proc.communicate()


def test_a_tls_worker_refuses_plain_text_no_certificate_and_another_ca(tmp_path):
  import grpc  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
  from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
  ours = tls_lib.make_certs(str(tmp_path / 'ours'), ['localhost'])
  theirs = tls_lib.make_certs(str(tmp_path / 'theirs'), ['localhost'])
  port = portpicker.pick_unused_port()
  address = f'localhost:{port}'
  proc = _tls_worker(port, ours)
  good = tls_lib.TlsFiles(ours['coordinator'], ours['coordinator_key'], ours['ca'])
  try:
    runtime.wait_for_workers([address], timeout_s=60, tls=good)
    with runtime.RemoteContext([address], tls=good) as remote:  # the right certificates
      @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
      def mean(x):
        return tff.federated_mean(x)
      assert float(remote.run(mean, [1.0, 2.0, 6.0])) == pytest.approx(3.0)
    refused = []
    with pytest.raises(runtime.WorkerError, match='in plain text'):
      runtime.wait_for_workers([address], timeout_s=3)
    refused.append('plain text')
    no_cert = grpc.ssl_channel_credentials(root_certificates=open(ours['ca'], 'rb').read())
    with grpc.secure_channel(address, no_cert) as channel:
      with pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=3)
    other_ca = tls_lib.TlsFiles(theirs['coordinator'], theirs['coordinator_key'], ours['ca'])
    with pytest.raises(runtime.WorkerError, match='over mutual TLS'):
      runtime.wait_for_workers([address], timeout_s=3, tls=other_ca)
  finally:
    out, err = _stop(proc)
  assert 'serving on port' in out and '(mutual TLS)' in out
  # Each refused client stopped at the handshake: nothing reached the TFF worker.
  assert out.count('tffdp.worker: refused') >= 3, out
  assert 'TLSV1_ALERT_UNKNOWN_CA' in out or 'CERTIFICATE_VERIFY_FAILED' in out, out


def test_a_worker_certificate_for_another_host_is_refused_by_the_coordinator(tmp_path):
  import portpicker  # pylint: disable=g-import-not-at-top
  from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
  files = tls_lib.make_certs(str(tmp_path / 'c'), ['gpu1.example.org'], loopback=False)
  port = portpicker.pick_unused_port()
  proc = _tls_worker(port, files)
  coordinator = tls_lib.TlsFiles(files['coordinator'], files['coordinator_key'],
                                 files['ca'])
  try:
    time.sleep(1.0)
    assert proc.poll() is None
    with pytest.raises(runtime.WorkerError, match='names the host dialled'):
      runtime.wait_for_workers([f'localhost:{port}'], timeout_s=5, tls=coordinator)
  finally:
    _stop(proc)


UNCONFINED = '''
import sys
from tffdp import confined_worker, worker
def refused(*args, **kwargs):
  raise confined_worker.NotConfined('unshare: Operation not permitted')
confined_worker.start = refused
sys.exit(worker.main(sys.argv[1:]))
'''


def test_a_tls_worker_that_cannot_be_confined_refuses_to_serve_unless_told(tmp_path):
  import portpicker  # pylint: disable=g-import-not-at-top
  from tffdp import tls as tls_lib  # pylint: disable=g-import-not-at-top
  files = tls_lib.make_certs(str(tmp_path / 'c'), ['localhost'])
  port = portpicker.pick_unused_port()
  args = ['--port', str(port), '--tls-cert', files['worker'], '--tls-key',
          files['worker_key'], '--tls-ca', files['ca']]
  r = subprocess.run([sys.executable, '-c', UNCONFINED, *args], capture_output=True,
                     text=True, cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 2 and '--allow-unconfined' in r.stderr, r.stderr
  assert 'Operation not permitted' in r.stderr and 'Traceback' not in r.stderr
  # Told: it serves, with the warning, and the right coordinator gets through.
  p = subprocess.Popen([sys.executable, '-c', UNCONFINED, *args, '--allow-unconfined'],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                       env=ENV)
  try:
    runtime.wait_for_workers([f'localhost:{port}'], timeout_s=60, tls=tls_lib.TlsFiles(
        files['coordinator'], files['coordinator_key'], files['ca']))
  finally:
    _, err = _stop(p)
  assert 'also listens, unauthenticated' in err


def test_workers_need_tls_files_or_insecure_on_both_sides(tmp_path):
  r = subprocess.run([sys.executable, '-m', 'tffdp.worker', '--port', '8000'],
                     capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
  assert r.returncode == 2 and 'make-certs' in r.stderr and '--insecure' in r.stderr
  base = ['--method', 'fedavg', '--dataset', 'synthetic']
  for extra, why in ((['--workers', 'localhost:8000'], 'needs tls_cert, tls_key and tls_ca'),
                     (['--workers', 'localhost:8000', '--insecure', '--tls-ca', 'x'],
                      'excludes tls_cert'),
                     (['--tls-cert', 'x'], 'is for --workers only'),
                     (['--workers', 'localhost:8000', '--tls-cert', str(tmp_path / 'no'),
                       '--tls-key', 'k', '--tls-ca', 'c'], 'tls_cert must name a readable')):
    r = subprocess.run([sys.executable, '-m', 'tffdp.run', *base, *extra],
                       capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert r.returncode == 2 and why in r.stderr, (extra, r.stderr)
    assert 'Traceback' not in r.stderr


def _slow_identity_round():
  """`x@CLIENTS -> <x@CLIENTS after a loop of x iterations, mean@SERVER>`."""
  @tff.tensorflow.computation(np.float32)
  def busy(x):
    n = tf.cast(x, tf.int32)
    _, acc = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + 1.0),
                           (tf.constant(0), tf.constant(0.0)))
    return acc

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def round_fn(x):
    y = tff.federated_map(busy, x)
    return y, tff.federated_mean(y)
  return round_fn


def test_client_results_keep_cohort_order_when_first_worker_is_slower(two_workers):
  # TFF 0.87's own context joins CLIENTS-placed results in the order sub-rounds finish;
  # the first sub-round is made slow here, so that order would be the wrong one.
  values = [2e6, 2e6, 0.0, 1.0]
  with _remote(two_workers) as remote:
    clients, mean = remote.run(_slow_identity_round(), values)
  assert [float(v) for v in clients] == values
  assert float(mean) == pytest.approx(np.mean(values))


def test_after_sigterm_exit_ends_the_workers_and_keeps_tff_s_context(monkeypatch):
  # Dropping the context at exit joins TFF's event-loop thread, which after SIGTERM may
  # sit in a call to a worker ended under it: only the workers are ended.
  mean = _local_mean()
  assert float(mean([1.0, 3.0])) == 2.0
  context = runtime._default_context()
  monkeypatch.setattr(runtime, '_terminate_requested', True)
  handler = signal.getsignal(signal.SIGTERM)
  try:
    runtime._at_exit()
    # A SIGTERM from here on only ends workers: nothing raised into the clean-up.
    assert signal.getsignal(signal.SIGTERM) is runtime._on_sigterm_while_ending
  finally:
    signal.signal(signal.SIGTERM, handler)
  assert runtime.worker_pids() == [] and runtime._default_context() is context
  monkeypatch.setattr(runtime, '_terminate_requested', False)
  assert float(mean([1.0, 5.0])) == 3.0  # without SIGTERM, a new worker serves


@pytest.mark.parametrize('mode', ['confined', 'open'])
def test_a_run_killed_by_sigkill_leaves_no_worker(tmp_path, mode):
  if mode == 'confined' and runtime.confinement_problem():
    pytest.skip(f'this kernel refuses the namespaces: {runtime.confinement_problem()}')
  env = dict(ENV, TFFDP_LOCAL_WORKER=mode, PYTHONUNBUFFERED='1')
  p = subprocess.Popen(_sigint_ignored([sys.executable, '-m', 'tffdp.run', *_CLI_TOY,
                                        '--out', str(tmp_path / mode)]),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       cwd=ROOT, env=env)
  for line in p.stdout:
    if line.startswith('round 2/'):
      break
  started = runtime.worker_pids(p.pid) + runtime.helper_pids(p.pid)
  assert runtime.worker_pids(p.pid)
  p.kill()  # no handler, no atexit: only the kernel ends what it started
  p.wait(timeout=30)
  deadline = time.monotonic() + 10
  while [pid for pid in started if _alive(pid)]:
    assert time.monotonic() < deadline, [pid for pid in started if _alive(pid)]
    time.sleep(0.1)
  p.stdout.close()


def _alive(pid):
  """Whether `pid` runs (a zombie that its new parent has not reaped yet has ended)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


LIBRARY_RUN = '''
import sys
from tffdp import config, runner
runner.run(config.RunConfig.create(method='dp_fedavg', dataset='synthetic', rounds=1,
           clients=8, clients_per_round=4, partition='iid', model='logistic_regression',
           num_validation=100, out=sys.argv[1]), log=lambda s: None)
print('done', flush=True)
'''


def test_a_run_started_from_python_leaves_no_worker_behind(tmp_path):
  # Without tffdp's context, TFF makes its own on first use, whose worker outlives the
  # process and keeps its stdout open: a caller reading it would wait forever.
  p = subprocess.Popen([sys.executable, '-c', LIBRARY_RUN, str(tmp_path / 'run')],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       cwd=ROOT, env=ENV)
  assert p.wait(timeout=300) == 0
  try:
    out, _ = p.communicate(timeout=30)
  except subprocess.TimeoutExpired:
    pytest.fail('a process the run started still holds its stdout')
  assert out.split() == ['done']
