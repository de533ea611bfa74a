"""Runner and CLI: smoke runs on real MNIST at toy size, resume, budget stop, bad input."""

import csv
import dataclasses
import json
import os
import pickle
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest

from tffdp import config as config_lib
from tffdp import checkpoints, privacy, runner
from tffdp import run as run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = dict(dataset='mnist', clients=4, clients_per_round=2, partition='iid',
           model='logistic_regression', batch_size=100, learning_rate=0.5,
           num_validation=500, checkpoint_every=1)


@pytest.fixture(autouse=True)
def client_cache(tmp_path_factory, monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path_factory.getbasetemp() / 'clients'))


def cli(args, **kw):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run([sys.executable, '-m', 'tffdp.run'] + args, capture_output=True,
                        text=True, cwd=ROOT, env=env, timeout=600, **kw)


def read_rows(out):
  with open(os.path.join(out, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('flag,value,listed', [('--method', 'nope', 'dp_fedavg'),
                                               ('--dataset', 'svhn', 'cifar100'),
                                               ('--partition', 'x', 'dirichlet')])
def test_cli_unknown_names_exit_2(flag, value, listed):
  args = {'--method': 'fedavg', '--dataset': 'mnist', '--partition': 'iid'}
  args[flag] = value
  r = cli([a for kv in args.items() for a in kv])
  assert r.returncode == 2
  assert listed in r.stderr and 'Traceback' not in r.stderr


@pytest.mark.parametrize('args,name', [(['--noise-multiplier', '-1'], 'noise_multiplier'),
                                       (['--clip-norm', '0'], 'clip_norm'),
                                       (['--clients', '5', '--clients-per-round', '6'],
                                        'clients_per_round'),
                                       (['--rounds', '0'], 'rounds'),
                                       (['--stop-after-round', '0'], 'stop_after_round'),
                                       (['--delta', '1.5'], 'delta')])
def test_cli_invalid_hyperparameters_exit_2(args, name):
  r = cli(['--method', 'dpfl', '--dataset', 'mnist'] + args)
  assert r.returncode == 2
  assert name in r.stderr and 'Traceback' not in r.stderr


@pytest.mark.parametrize('method,flag', [('cosafed', '--noise-multiplier'),
                                         ('lapfed', '--clip-norm'),
                                         ('dp_fedags', '--noise-multiplier'),
                                         ('aadp_fl', '--noise-multiplier'),
                                         ('fedavg', '--clip-norm')])
def test_cli_refuses_a_shared_setting_the_method_does_not_read(method, flag):
  parser = run_cli.make_parser()
  base = ['--method', method, '--dataset', 'synthetic']
  with pytest.raises(ValueError, match=f'method {method} does not use {flag} \\(unused: '):
    run_cli.config_from_args(parser.parse_args(base + [flag, '2.0']))
  # Left out, the shared default is recorded, as before; a method that reads it takes it.
  cfg = run_cli.config_from_args(parser.parse_args(base))
  assert (cfg.noise_multiplier, cfg.clip_norm) == (config_lib.RunConfig.noise_multiplier,
                                                   config_lib.RunConfig.clip_norm)
  cfg = run_cli.config_from_args(parser.parse_args(
      ['--method', 'dpfl', '--dataset', 'synthetic', flag, '2.0']))
  assert getattr(cfg, flag[2:].replace('-', '_')) == 2.0
  if flag == '--clip-norm':  # an audit takes it as the canaries' norm, unless given one
    audit = base + ['--audit-canaries', '10', flag, '2.0']
    assert run_cli.config_from_args(parser.parse_args(audit)).clip_norm == 2.0
    with pytest.raises(ValueError, match=f'does not use {flag}'):
      run_cli.config_from_args(parser.parse_args(audit + ['--audit-canary-norm', '1']))


_TOY_CLI = ['--dataset', 'synthetic', '--rounds', '2', '--clients', '20',
            '--clients-per-round', '5', '--model', 'logistic_regression',
            '--num-validation', '100']


@pytest.mark.parametrize('args,reason', [
    (['--method', 'fedavg', '--learning-rate', 'nan'], 'learning_rate must be a finite'),
    (['--method', 'dp_fedavg', '--noise-multiplier', 'inf'], 'noise_multiplier must be a finite'),
    (['--method', 'dpfl', '--clip-norm=-inf'], 'clip_norm must be a finite'),
    (['--method', 'dpfl', '--delta', 'nan'], 'delta must be a finite'),
    (['--method', 'fedavg', '--epsilon-budget', 'inf'], 'epsilon_budget must be a finite'),
    (['--method', 'aadp_fl', '--epsilon', 'nan'], 'epsilon must be a finite'),
    (['--method', 'a_dpfl', '--k', 'inf'], 'k must be a finite'),
    (['--method', 'adap_dp_fl', '--lot-size', '100000000'],
     "lot_size must be at most the largest client's example count"),
])
def test_cli_bad_numbers_exit_2_with_one_line_and_write_nothing(tmp_path, args, reason):
  out = tmp_path / 'run'
  r = cli(args + _TOY_CLI + ['--out', str(out)])
  assert r.returncode == 2, r.stderr
  errors = [line for line in r.stderr.splitlines() if line.startswith('error:')]
  assert len(errors) == 1 and reason in errors[0], r.stderr
  assert 'Traceback' not in r.stderr
  assert not out.exists()   # nothing half-written


def test_cli_out_naming_a_file_exits_2_and_leaves_it(tmp_path):
  out = tmp_path / 'a_file'
  out.write_text('mine')
  r = cli(['--method', 'fedavg'] + _TOY_CLI + ['--out', str(out)])
  assert r.returncode == 2 and 'Traceback' not in r.stderr
  assert 'out names an existing file' in r.stderr
  assert out.read_text() == 'mine'


def test_cli_resume_without_a_checkpoint_exits_2(tmp_path):
  out = tmp_path / 'empty'
  r = cli(['--method', 'fedavg', '--resume'] + _TOY_CLI + ['--out', str(out)])
  assert r.returncode == 2 and 'Traceback' not in r.stderr
  assert f'nothing to resume: {out} holds no checkpoint.npz' in r.stderr
  assert not out.exists()


def test_hparams_reject_non_finite_floats_unless_allowed():
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  import dataclasses as dc  # pylint: disable=g-import-not-at-top

  @dc.dataclass(frozen=True)
  class Toy(registry.MethodHparams):
    a: float = registry.option(1.0, 'a')
    b: float = registry.option(1.0, 'b (inf: no cap)', allow_infinite=True)
  assert Toy(b=float('inf')).b == float('inf')
  for kw in (dict(a=float('nan')), dict(a=float('inf')), dict(b=float('nan'))):
    with pytest.raises(ValueError, match='must be a finite number'):
      Toy(**kw)


def test_cli_missing_data_offline(tmp_path):
  env_url = 'file://' + str(tmp_path / 'no-mirror')
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', '--method', 'fedavg', '--dataset',
                      'mnist', '--data-dir', str(tmp_path), '--out', str(tmp_path / 'o')],
                     capture_output=True, text=True, cwd=ROOT, timeout=600,
                     env=dict(os.environ, TFFDP_DATA_URL_MNIST=env_url))
  assert r.returncode == 2
  assert 'train-images-idx3-ubyte.gz' in r.stderr and str(tmp_path) in r.stderr
  assert '--data-dir' in r.stderr and 'Traceback' not in r.stderr


def test_cli_smoke_piped_run_finishes(tmp_path, data_dir):
  out = tmp_path / 'run'
  cmd = (f'{sys.executable} -m tffdp.run --method dpfl --dataset mnist --data-dir {data_dir} '
         f'--rounds 2 --clients 4 --clients-per-round 2 --partition label_skew '
         f'--partition-options \'{{"examples_per_client": 500}}\' '
         f'--model logistic_regression --batch-size 50 --num-validation 500 --out {out} | cat')
  r = subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert r.returncode == 0, r.stderr
  assert 'round 2/2' in r.stdout
  cfg = json.loads((out / 'config.json').read_text())
  assert cfg['seed'] == 0 and cfg['noise_multiplier'] == 1.0 and 'tensorflow' in cfg['versions']
  assert cfg['command'][:3] == ['python', '-m', 'tffdp.run']
  rows = read_rows(out)
  assert len(rows) == 2
  for col in ('round', 'test_accuracy', 'test_loss', 'epsilon_claimed', 'epsilon_guaranteed',
              'wall_seconds', 'noise_multiplier', 'clip_norm'):
    assert col in rows[0]
  summary = json.loads((out / 'summary.json').read_text())
  assert summary['delta'] == 1e-5 and summary['dp_unit'] == 'sample-level'
  assert 0 < summary['epsilon_claimed'] <= summary['epsilon_guaranteed']


def _cfg(tmp_path, name, **kw):
  """A toy run on the generated `synthetic` dataset (no files needed)."""
  return config_lib.RunConfig.create(**dict(TOY, dataset='synthetic', out=str(tmp_path / name), **kw))


def test_resume_equals_uninterrupted(tmp_path, interrupt_at):
  kw = dict(method='dpfl', noise_multiplier=0.5, clip_norm=1.0)
  full = runner.run(_cfg(tmp_path, 'a', rounds=4, **kw), log=lambda s: None)

  with pytest.raises(KeyboardInterrupt):
    runner.run(_cfg(tmp_path, 'b', rounds=4, **kw), log=interrupt_at(3))
  assert not os.path.exists(tmp_path / 'b' / 'summary.json')
  assert os.path.exists(tmp_path / 'b' / runner.CHECKPOINT)
  with pytest.raises(runner.ResumeError, match='--resume'):
    runner.run(_cfg(tmp_path, 'b', rounds=4, **kw), log=lambda s: None)
  resumed = runner.run(_cfg(tmp_path, 'b', rounds=4, **kw), resume=True, log=lambda s: None)
  a, b = read_rows(tmp_path / 'a'), read_rows(tmp_path / 'b')
  assert len(a) == len(b) == 4
  for ra, rb in zip(a, b):
    for col in ('test_accuracy', 'test_loss', 'epsilon_claimed', 'epsilon_guaranteed'):
      assert float(ra[col]) == pytest.approx(float(rb[col]), rel=1e-5, abs=1e-6)
  assert resumed['epsilon_guaranteed'] == full['epsilon_guaranteed']
  # Each process that ran rounds is one segment, with the code it ran.
  assert [(g['start_round'], g['code']) for g in full['segments']] == [
      (0, runner.code_version())]
  first, second = resumed['segments']
  assert first['start_round'] == 0 and 0 < second['start_round'] < 4
  assert first['code'] == second['code'] == runner.code_version()
  assert runner.code_version().startswith(runner.versions()['tffdp'])


def test_stop_after_round_pauses_and_resume_finishes_the_same_run(tmp_path):
  kw = dict(method='dpfl', noise_multiplier=0.5, clip_norm=1.0, rounds=4, eval_every=3)
  runner.run(_cfg(tmp_path, 'a', **kw), log=lambda s: None)
  lines = []
  paused = runner.run(_cfg(tmp_path, 'b', stop_after_round=2, **kw), log=lines.append)
  assert paused['stop_kind'] == runner.STOP_PAUSED and paused['rounds_completed'] == 2
  assert paused['stop_reason'] == 'paused after round 2 of 4 (stop_after_round)'
  assert any('--resume' in line for line in lines)
  assert not os.path.exists(tmp_path / 'b' / 'summary.json')  # not a finished run
  rows = read_rows(tmp_path / 'b')
  assert len(rows) == 2 and rows[1]['test_accuracy'] != ''  # evaluated where it paused
  assert rows[0]['test_accuracy'] == ''  # eval_every 3 elsewhere
  # Resuming with the same pause runs nothing more; without it, to the round cap.
  again = runner.run(_cfg(tmp_path, 'b', stop_after_round=2, **kw), resume=True,
                     log=lambda s: None)
  assert again['rounds_completed'] == 2 and len(read_rows(tmp_path / 'b')) == 2
  done = runner.run(_cfg(tmp_path, 'b', **kw), resume=True, log=lambda s: None)
  assert done['stop_kind'] is None and done['rounds_completed'] == 4
  assert os.path.exists(tmp_path / 'b' / 'summary.json')
  a, b = read_rows(tmp_path / 'a'), read_rows(tmp_path / 'b')
  for ra, rb in zip(a, b):
    for col in ('epsilon_claimed', 'epsilon_guaranteed', 'train_loss'):
      assert float(ra[col]) == pytest.approx(float(rb[col]), rel=1e-5, abs=1e-6)
  assert float(a[3]['test_accuracy']) == pytest.approx(float(b[3]['test_accuracy']), abs=1e-6)
  # A pause at or past the round cap is no pause.
  assert runner.run(_cfg(tmp_path, 'c', stop_after_round=9, **kw),
                    log=lambda s: None)['stop_kind'] is None


def test_a_run_directory_another_process_runs_is_refused_before_any_work(tmp_path):
  cfg = _cfg(tmp_path, 'busy', rounds=1, method='fedavg')
  os.makedirs(cfg.out)
  holder = subprocess.Popen(  # another process holding the lock, as a second run would
      [sys.executable, '-c', 'import fcntl, os, sys, time\n'
       'fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)\n'
       'print("locked", flush=True); time.sleep(60)', cfg.out],
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'locked'
    with pytest.raises(runner.RunInProgressError, match='another process'):
      runner.run(cfg, log=lambda s: None)
    assert os.listdir(cfg.out) == []  # nothing written, nothing built
  finally:
    holder.kill()
    holder.wait()
  # The lock goes with the process that held it; within one process a second holder is
  # refused too, and the lock is free again once the first block ends.
  assert runner.run(cfg, log=lambda s: None)['rounds_completed'] == 1
  with runner.run_lock(cfg.out):
    with pytest.raises(runner.RunInProgressError):
      with runner.run_lock(cfg.out):
        pass
  with runner.run_lock(cfg.out):
    pass


def test_resume_of_a_checkpoint_without_segments_marks_its_code_unknown(tmp_path):
  cfg = _cfg(tmp_path, 'old', rounds=2, method='fedavg')
  runner.run(cfg, log=lambda s: None)
  path = tmp_path / 'old' / runner.CHECKPOINT
  ckpt = checkpoints.load(str(path))
  del ckpt['segments']  # as written before segments were recorded
  path.write_bytes(checkpoints.dumps(ckpt))
  summary = runner.run(_cfg(tmp_path, 'old', rounds=3, method='fedavg'), resume=True,
                       log=lambda s: None)
  assert [(g['start_round'], g['code']) for g in summary['segments']] == [
      (0, None), (2, runner.code_version())]


def test_epsilon_budget_stops_before_exceeding(tmp_path):
  summary = runner.run(_cfg(tmp_path, 'c', method='dp_fedavg', rounds=50,
                            noise_multiplier=1.0, clip_norm=0.1, clients_per_round=2,
                            epsilon_budget=1.5), log=lambda s: None)
  assert summary['stop_reason'] and summary['rounds_completed'] < 50
  assert summary['stop_kind'] == runner.STOP_BUDGET
  assert summary['epsilon_guaranteed'] <= 1.5
  assert summary['dp_unit'] == 'client-level'


def test_budget_last_round_raise_noise_lands_on_the_budget(tmp_path):
  kw = dict(method='a_dpfl', noise_multiplier=2.0, clip_norm=1.0, clients_per_round=2)
  free = runner.run(_cfg(tmp_path, 'free', rounds=3, **kw), log=lambda s: None)
  assert free['rounds_completed'] == 3
  plain = read_rows(str(tmp_path / 'free'))
  eps = [float(row['epsilon_guaranteed']) for row in plain]
  budget = (eps[1] + eps[2]) / 2  # round 3 at its own sigma would pass it
  skip = runner.run(_cfg(tmp_path, 'skip', rounds=5, epsilon_budget=budget, **kw),
                    log=lambda s: None)
  assert skip['rounds_completed'] == 2 and skip['stop_kind'] == runner.STOP_BUDGET
  assert skip['stop_reason'].startswith('round 3 would take')
  summary = runner.run(_cfg(tmp_path, 'raised', rounds=5, epsilon_budget=budget,
                            budget_last_round='raise_noise', **kw), log=lambda s: None)
  rows = read_rows(str(tmp_path / 'raised'))
  assert summary['rounds_completed'] == 3 and summary['stop_kind'] == runner.STOP_BUDGET
  assert 'is spent' in summary['stop_reason']
  assert budget * (1 - 1e-3) <= summary['epsilon_guaranteed'] <= budget
  for a, b in zip(plain[:2], rows[:2]):  # the rounds before it as without the option
    assert a['epsilon_guaranteed'] == b['epsilon_guaranteed']
    assert a['noise_multiplier'] == b['noise_multiplier'] and a['test_loss'] == b['test_loss']
  factor = float(rows[2][runner.BUDGET_NOISE_FACTOR])
  assert factor > 1 and [row[runner.BUDGET_NOISE_FACTOR] for row in rows[:2]] == ['', '']
  np.testing.assert_allclose(float(rows[2]['noise_multiplier']),
                             np.float32(factor * float(plain[2]['noise_multiplier'])),
                             rtol=1e-6)
  # Resumed (a longer round cap), the run stops before any further round: a cohort that
  # left out the clients at the budget would fit it again.
  resumed = runner.run(_cfg(tmp_path, 'raised', rounds=6, epsilon_budget=budget,
                            budget_last_round='raise_noise', **kw), resume=True,
                       log=lambda s: None)
  assert resumed['rounds_completed'] == 3 and resumed['stop_reason'] == summary['stop_reason']
  assert len(read_rows(str(tmp_path / 'raised'))) == 3


@pytest.mark.parametrize('kw,match', [
    (dict(method='a_dpfl', budget_last_round='raise_noise'), 'needs an epsilon_budget'),
    (dict(method='a_dpfl', epsilon_budget=1.0, budget_last_round='fill'), 'must be one of'),
])
def test_budget_last_round_bad_settings(tmp_path, kw, match):
  with pytest.raises(ValueError, match=match):
    _cfg(tmp_path, 'bad', **kw).validate()


def test_budget_last_round_raise_noise_needs_a_method_that_states_it(tmp_path):
  with pytest.raises(ValueError, match='does not state how to raise its noise'):
    runner.run(_cfg(tmp_path, 'x', method='dp_fedavg', epsilon_budget=1.0,
                    budget_last_round='raise_noise'), log=lambda s: None)


def test_fedavg_reports_inf_with_reason(tmp_path):
  summary = runner.run(_cfg(tmp_path, 'd', method='fedavg', rounds=1),
                       log=lambda s: None)
  assert summary['epsilon_claimed'] == 'inf' and summary['epsilon_guaranteed'] == 'inf'
  assert any('non-private' in r for r in summary['epsilon_reasons'])


def _direct_epsilon(events, delta=1e-5):
  acc = dp_accounting.rdp.RdpAccountant(list(privacy.DEFAULT_ORDERS))
  for event in events:
    acc.compose(event)
  return acc.get_epsilon(delta)


def test_dpfl_ledgers_match_dp_accounting(tmp_path):
  # Every client every round (K = N), so each client's events follow from its size alone:
  # 5,500 training examples (6,000 - 500 validation) over 4 iid clients = 1,375 each;
  # B = 100 gives ceil(1375 / 100) = 14 steps a round with q = 100 / 1375.
  rounds, sigma = 3, 0.8
  summary = runner.run(_cfg(tmp_path, 'e', method='dpfl', rounds=rounds, clients_per_round=4,
                            noise_multiplier=sigma, clip_norm=1.0), log=lambda s: None)
  sigma = float(np.float32(sigma))  # the clients' noise uses the float32 sigma of their state
  step = dp_accounting.PoissonSampledDpEvent(100 / 1375, dp_accounting.GaussianDpEvent(sigma))
  claimed = _direct_epsilon([dp_accounting.SelfComposedDpEvent(step, 14 * rounds)])
  # Executed: a shuffle into disjoint batches, one Gaussian release per epoch.
  guaranteed = _direct_epsilon([dp_accounting.GaussianDpEvent(sigma)] * rounds)
  assert summary['epsilon_claimed'] == pytest.approx(claimed, rel=1e-9)
  assert summary['epsilon_claimed_mean'] == pytest.approx(claimed, rel=1e-9)
  assert summary['epsilon_guaranteed'] == pytest.approx(guaranteed, rel=1e-9)


def test_dp_fedavg_ledgers_match_dp_accounting(tmp_path):
  # Poisson cohort at rate K / N = 2 / 4: every client composes the sampled Gaussian
  # every round, whether drawn or not; the analysis is exact, so claimed = guaranteed.
  rounds, sigma = 4, 1.3
  summary = runner.run(_cfg(tmp_path, 'f', method='dp_fedavg', rounds=rounds,
                            noise_multiplier=sigma, clip_norm=0.5), log=lambda s: None)
  # The ledger composes the event TFF's DP aggregator states: its float32 sigma.
  stated = float(np.float32(sigma))
  expected = _direct_epsilon([dp_accounting.PoissonSampledDpEvent(
      0.5, dp_accounting.GaussianDpEvent(stated))] * rounds)
  for key in ('epsilon_claimed', 'epsilon_guaranteed', 'epsilon_guaranteed_mean'):
    assert summary[key] == pytest.approx(expected, rel=1e-9), key
  assert summary['epsilon_claimed'] == pytest.approx(_direct_epsilon(
      [dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(sigma))] *
      rounds), rel=1e-6)
  assert summary['dp_unit'] == 'client-level'


def _dp_fedavg_cli(out, *extra):
  return [sys.executable, '-m', 'tffdp.run', '--method', 'dp_fedavg', '--dataset',
          'synthetic', '--rounds', '4', '--clients', '8', '--clients-per-round', '4',
          '--partition', 'iid',
          '--model', 'logistic_regression', '--num-validation', '100',
          '--noise-multiplier', '1.0', '--clip-norm', '0.3', '--learning-rate', '0.5',
          '--checkpoint-every', '1', '--out', str(out), *extra]


_TIMING = ('train_seconds', 'accounting_seconds', 'eval_seconds', 'round_seconds',
           'wall_seconds', 'paused_seconds')


def test_dp_fedavg_stopped_by_sigterm_and_resumed_equals_an_uninterrupted_run(tmp_path):
  """The server noise is drawn from the run's seed and its release count, kept in the
  aggregator state (`queries.StatelessGaussianSumQuery`): a rerun and a resumed run
  release the same noise, so every row is the same."""
  import signal  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', PYTHONUNBUFFERED='1')
  for name in ('a', 'b'):
    r = subprocess.run(_dp_fedavg_cli(tmp_path / name), capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
  p = subprocess.Popen(_dp_fedavg_cli(tmp_path / 'c'), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
  for line in p.stdout:
    if line.startswith('round 2/'):
      p.send_signal(signal.SIGTERM)
      break
  assert p.wait(timeout=120) == 128 + signal.SIGTERM
  try:  # EOF on its pipes: nothing it started (a TFF worker, a helper) outlives it
    p.communicate(timeout=30)
  except subprocess.TimeoutExpired:
    left = subprocess.run(['ps', '-eo', 'pid,ppid,args'], capture_output=True, text=True)
    pytest.fail('a process the run started still holds its stdout:\n' + left.stdout)
  assert not (tmp_path / 'c' / 'summary.json').exists()
  stopped = len(read_rows(tmp_path / 'c'))
  assert 2 <= stopped < 4
  r = subprocess.run(_dp_fedavg_cli(tmp_path / 'c', '--resume'), capture_output=True,
                     text=True, cwd=ROOT, env=env, timeout=600)
  assert r.returncode == 0, r.stderr
  a, b, c = (read_rows(tmp_path / n) for n in 'abc')
  assert len(a) == len(b) == len(c) == 4
  for ra, rb, rc in zip(a, b, c):
    for col in ra:
      if col not in _TIMING:
        assert ra[col] == rb[col] == rc[col], (col, ra[col], rb[col], rc[col])
  assert len(set(row['test_loss'] for row in a)) == 4  # the model moves every round
  summary = json.loads((tmp_path / 'c' / 'summary.json').read_text())
  first, second = summary['segments']   # resumed from the last checkpointed round
  assert first['start_round'] == 0 and 1 <= second['start_round'] <= stopped


def test_config_parts_split_every_field_once_and_validate_their_own():
  parts = config_lib.PARTS
  names = [f.name for cls in parts.values() for f in dataclasses.fields(cls)]
  assert len(names) == len(set(names))  # no field in two parts
  assert names == [f.name for f in dataclasses.fields(config_lib.RunConfig)]
  c = config_lib.RunConfig.create(method='a_dpfl', dataset='mnist', clients=7, delta=1e-6,
                                  workers=None, out='runs/x', k=0.5)
  assert c.data == config_lib.DataConfig(clients=7)
  assert c.privacy.delta == 1e-6 and c.output.out == 'runs/x'
  assert c.training.method_options == {'k': 0.5} and c.execution.workers is None
  assert all(isinstance(c, cls) for cls in parts.values())
  c.data.clients = 9  # a copy: the run's own field is unchanged
  assert c.clients == 7
  # Each part checks its own fields, alone or as part of a RunConfig.
  with pytest.raises(ValueError, match=r'num_validation must be >= 0\. Found num_validation=-1'):
    config_lib.DataConfig(num_validation=-1).validate()
  with pytest.raises(ValueError, match='budget_last_round needs an epsilon_budget'):
    config_lib.PrivacyConfig(budget_last_round='raise_noise').validate()
  with pytest.raises(ValueError, match=r'stop_after_round must be positive \(or None: no pause\)'):
    config_lib.RunConfig(stop_after_round=0).validate()
  with pytest.raises(ValueError, match=r'clients_per_round must be in \[1, clients=5\]'):
    config_lib.RunConfig(clients=5, clients_per_round=6).validate()  # spans two parts
  with pytest.raises(KeyError):
    c.part('model')


def test_cli_help_groups_each_setting_with_its_config_part():
  part_of = {f.name: name for name, cls in config_lib.PARTS.items()
             for f in dataclasses.fields(cls)}
  placed = {}
  for group in run_cli.make_parser()._action_groups:  # pylint: disable=protected-access
    for action in group._group_actions:  # pylint: disable=protected-access
      if action.dest in part_of:
        placed[action.dest] = group.title.split(':')[0]
  assert placed and all(placed[d] == part_of[d] for d in placed), placed
  assert set(part_of) - set(placed) == {'method_options', 'notes', 'client_cache_dir'}


def test_config_fields_added_later_count_as_their_defaults():
  new = dataclasses.asdict(config_lib.RunConfig(method='dpfl'))
  old = dict(new)
  del old['workers'], old['clients_per_slice']  # a run made before these fields existed
  assert config_lib.differing_fields(old, new) == []
  new_changed = dict(new, clients_per_slice=5, rounds=7)
  assert config_lib.differing_fields(old, new_changed) == ['clients_per_slice', 'rounds']
  assert config_lib.differing_fields(old, new_changed, ignore=('rounds',)) == ['clients_per_slice']


def test_configs_with_flat_method_options_still_match():
  # Configs (and checkpoints) written before `method_options` hold every method's options
  # flat; only the run's own method's options count, and missing ones are defaults.
  new = dataclasses.asdict(config_lib.RunConfig.create(method='a_dpfl', k=0.5).resolved())
  old = {k: v for k, v in new.items() if k != 'method_options'}
  old.update(k=0.5, alpha=0.01, adjust_every=1, selection='top_k', lot_size=78,
             clipping='adaptive', beta=None)  # beta, lot_size: Adap DP-FL's, ignored
  assert config_lib.differing_fields(old, new) == []
  assert config_lib.differing_fields(dict(old, k=0.7), new) == ['method_options.k']
  del old['adjust_every']  # an option added later: its default
  assert config_lib.differing_fields(old, new) == []
  assert config_lib.from_dict(dict(old, k=0.5)).method_options == dict(
      k=0.5, alpha=0.01, selection='top_k')


def test_method_options_are_scoped_to_the_method():
  with pytest.raises(ValueError, match='method dpfl has no option k. Its options: none'):
    config_lib.RunConfig.create(method='dpfl', k=0.5)
  cfg = config_lib.RunConfig.create(method='adap_dp_fl', dataset='fashion_mnist', clients=4,
                                    clipping='constant').resolved()
  assert cfg.method_options['clipping'] == 'constant'
  assert cfg.method_options['clipping_factor'] == 0.01 and cfg.method_options['beta'] == 0.9998
  assert cfg.cohort_sampling == 'all' and cfg.clients_per_round == 4
  assert cfg.hparams.lot_size == 78


def test_cli_option_of_another_method_exit_2():
  r = cli(['--method', 'dpfl', '--dataset', 'synthetic', '--k', '0.5'])
  assert r.returncode == 2 and 'method dpfl has no option k' in r.stderr
  assert 'Traceback' not in r.stderr
  r = cli(['--method', 'adap_dp_fl', '--dataset', 'synthetic', '--clipping', 'sometimes'])
  assert r.returncode == 2 and 'adaptive' in r.stderr and 'Traceback' not in r.stderr


def test_a_registered_toy_method_runs_end_to_end(tmp_path):
  """Adding a method = its module (here: this test) + one `register` call."""
  from tffdp.algorithms import baselines, registry  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class ToyHparams(registry.MethodHparams):
    local_lr: float = registry.option(0.3, 'the toy\'s learning rate', note='toy value')

    def __post_init__(self):
      super().__post_init__()
      if self.local_lr <= 0:
        raise ValueError(f'local_lr must be positive. Found local_lr={self.local_lr!r}.')

  def build(ctx, hp):
    m = baselines.build_fedavg(ctx.keras_builder, ctx.data, learning_rate=hp.local_lr,
                               batch_size=ctx.config.batch_size, seed=ctx.config.seed)
    m.name, m.hyperparameters = 'toy', dict(m.hyperparameters, local_lr=hp.local_lr)
    return m

  registry.register(registry.MethodSpec('toy', build, ToyHparams, 'a test method'))
  try:
    assert 'toy' in config_lib.methods()
    with pytest.raises(ValueError, match='local_lr must be positive'):
      config_lib.RunConfig.create(method='toy', local_lr=-1.0).resolved().validate()
    summary = runner.run(_cfg(tmp_path, 'toy', method='toy', rounds=2, local_lr=0.4),
                         log=lambda s: None)
    assert summary['method'] == 'toy' and summary['rounds_completed'] == 2
    cfg = json.loads((tmp_path / 'toy' / 'config.json').read_text())
    assert cfg['method_options'] == {'local_lr': 0.4}
    assert cfg['method_hyperparameters']['local_lr'] == 0.4
    assert 'local_lr' not in cfg['notes']  # set by the user: no default's note
    assert config_lib.RunConfig.create(method='toy').resolved().notes['local_lr'] == 'toy value'
    # Given, but at its default: the default's reason still holds.
    assert config_lib.RunConfig.create(method='toy', local_lr=0.3).resolved().notes[
        'local_lr'] == 'toy value'
  finally:
    registry.unregister('toy')
  assert 'toy' not in config_lib.methods()


def test_an_option_name_two_methods_share_follows_the_chosen_method():
  from tffdp import run  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top

  @dataclasses.dataclass(frozen=True)
  class Counts(registry.MethodHparams):
    k: int = registry.option(3, 'a count')  # A-DPFL's k is a float in (0, 1]

  def build(ctx, hp):
    return registry.get('fedavg').build(ctx, hp)

  registry.register(registry.MethodSpec('toy_k', build, Counts))
  try:
    parser = run.make_parser()
    args = parser.parse_args(['--method', 'toy_k', '--dataset', 'synthetic', '--k', '5'])
    assert run.config_from_args(args).method_options == {'k': 5}
    args = parser.parse_args(['--method', 'a_dpfl', '--dataset', 'synthetic', '--k', '0.5'])
    assert run.config_from_args(args).method_options == {'k': 0.5}
    args = parser.parse_args(['--method', 'toy_k', '--dataset', 'synthetic', '--k', '0.5'])
    with pytest.raises(ValueError, match='k of method toy_k'):
      run.config_from_args(args)
  finally:
    registry.unregister('toy_k')


def _toy_with(tmp_path, name, wrap, rounds=4, log=lambda s: None, learning_rate=0.5,
              resume=False, **kw):
  """Runs FedAvg on the toy data with its `Method` changed by `wrap(method)`; `kw`: other
  `RunConfig` fields."""
  from tffdp.algorithms import baselines, registry  # pylint: disable=g-import-not-at-top

  def build(ctx, hp):
    m = baselines.build_fedavg(ctx.keras_builder, ctx.data, learning_rate=learning_rate,
                               batch_size=ctx.config.batch_size, seed=ctx.config.seed)
    wrap(m)
    return m

  registry.register(registry.MethodSpec('wrapped', build, registry.MethodHparams, 'test'))
  try:
    return runner.run(_cfg(tmp_path, name, method='wrapped', rounds=rounds, **kw), log=log,
                      resume=resume)
  finally:
    registry.unregister('wrapped')


def _failing_at(round_num, round_failure=None):
  """A `wrap` for `_toy_with`: `run_round` raises RuntimeError('boom') at `round_num`."""
  def wrap(m):
    inner = m.run_round

    def run_round(state, cohort, r, seed):
      if r == round_num:
        raise RuntimeError('boom')
      return inner(state, cohort, r, seed)
    m.run_round = run_round
    if round_failure is not None:
      m.round_failure = round_failure
  return wrap


def test_a_declared_round_failure_ends_the_run_as_diverged(tmp_path):
  wrap = _failing_at(2, lambda exc: 'the toy exploded' if 'boom' in str(exc) else None)
  summary = _toy_with(tmp_path, 'declared', wrap)
  assert summary['stop_reason'] == 'diverged in round 3: the toy exploded'
  assert summary['stop_kind'] == runner.STOP_DIVERGED
  assert summary['rounds_completed'] == 2 and len(read_rows(tmp_path / 'declared')) == 2
  assert summary['final_test_accuracy'] is not None


def test_an_undeclared_failure_propagates_with_a_checkpoint(tmp_path):
  lines = []
  with pytest.raises(RuntimeError, match='boom'):
    _toy_with(tmp_path, 'undeclared', _failing_at(1), log=lines.append)
  assert any('failed in round 2 (RuntimeError)' in s and 'after round 1' in s
             for s in lines), lines
  assert not any('interrupted' in s for s in lines)
  assert os.path.exists(tmp_path / 'undeclared' / runner.CHECKPOINT)


def test_sigterm_is_logged_as_terminated_with_a_checkpoint(tmp_path, monkeypatch):
  from tffdp import runtime  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(runtime, '_terminate_requested', False)  # restored afterwards

  def wrap(m):
    inner = m.run_round

    def run_round(state, cohort, r, seed):
      if r == 1:
        runtime._on_sigterm(15, None)  # what SIGTERM runs in the main thread
      return inner(state, cohort, r, seed)
    m.run_round = run_round
  lines = []
  with pytest.raises(SystemExit) as exc:
    _toy_with(tmp_path, 'term', wrap, log=lines.append)
  assert exc.value.code == 143
  assert any('terminated (SIGTERM); the state after round 1 is checkpointed' in s
             for s in lines), lines
  assert not any('failed' in s for s in lines)
  assert os.path.exists(tmp_path / 'term' / runner.CHECKPOINT)
  assert runtime.terminate_requested()


def _sigterm_in_round(round_num, then, monkeypatch):
  """A `wrap` for `_toy_with`: in round `round_num` a SIGTERM arrives whose `Terminated`
  Python drops (as it does in a weakref callback or `__del__`). With `then='fail'` its
  handler has ended the worker, and the round fails as a call to an ended worker does;
  with `then='finish'` the round completes (TFF's own worker, restarted by its retry)."""
  from tffdp import runtime  # pylint: disable=g-import-not-at-top

  def wrap(m):
    inner = m.run_round

    def run_round(state, cohort, r, seed):
      if r == round_num and then == 'fail':
        with pytest.raises(runtime.Terminated):
          runtime._on_sigterm(15, None)
        raise RuntimeError('UNAVAILABLE: the worker is gone')
      if r == round_num:
        monkeypatch.setattr(runtime, '_terminate_requested', True)
      return inner(state, cohort, r, seed)
    m.run_round = run_round
  return wrap


@pytest.mark.parametrize('then,completed', [('finish', 2), ('fail', 1)])
def test_a_dropped_sigterm_still_stops_the_run_as_terminated(tmp_path, monkeypatch, then,
                                                             completed):
  from tffdp import runtime  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(runtime, '_terminate_requested', False)
  lines = []
  with pytest.raises(runtime.Terminated) as exc:
    _toy_with(tmp_path, then, _sigterm_in_round(1, then, monkeypatch),
              log=lines.append)
  assert exc.value.code == 143
  assert any(f'terminated (SIGTERM); the state after round {completed} is checkpointed' in s
             for s in lines), [s for s in lines if 'SIGTERM' in s]
  assert not any('failed' in s for s in lines)
  assert len(read_rows(tmp_path / then)) == completed
  assert not (tmp_path / then / 'summary.json').exists()
  # A second SIGTERM while the first is handled only ends the workers again.
  assert runtime._on_sigterm(15, None) is None


def test_non_finite_model_weights_end_the_run_after_that_round(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def wrap(m):
    inner_round, inner_weights, done = m.run_round, m.model_weights, []

    def run_round(state, cohort, r, seed):
      done.append(r)
      return inner_round(state, cohort, r, seed)

    def model_weights(state):
      w = inner_weights(state)
      if len(done) < 2:
        return w
      return tf.nest.map_structure(lambda t: np.asarray(t) * np.float32('nan'), w)
    m.run_round, m.model_weights = run_round, model_weights

  summary = _toy_with(tmp_path, 'nan', wrap)
  assert summary['stop_reason'].startswith('diverged in round 2: the model weights are '
                                           'non-finite')
  assert summary['stop_kind'] == runner.STOP_DIVERGED
  assert summary['rounds_completed'] == 2


def test_rounds_whose_update_tff_rejects_are_marked_and_counted(tmp_path):
  # An infinite client learning rate makes every client update non-finite: TFF's finalizer
  # rejects each aggregate, so the model never moves, and the run says so.
  lines = []
  summary = _toy_with(tmp_path, 'rejected', lambda m: None, rounds=3, log=lines.append,
                      learning_rate=float('inf'))
  rows = read_rows(tmp_path / 'rejected')
  assert [r['update_rejected'] for r in rows] == ['1', '1', '1']
  assert len({r['test_loss'] for r in rows}) == 1  # the evaluated model is the initial one
  assert summary['rounds_update_rejected'] == 3 and summary['stop_kind'] is None
  assert sum('the aggregated update was non-finite' in s for s in lines) == 1
  assert any('3 update(s) rejected' in s for s in lines)
  # A healthy run records the column too, all zeros.
  summary = _toy_with(tmp_path, 'healthy', lambda m: None, rounds=2)
  assert [r['update_rejected'] for r in read_rows(tmp_path / 'healthy')] == ['0', '0']
  assert summary['rounds_update_rejected'] == 0


def test_stop_after_rejected_ends_a_run_whose_model_no_longer_moves(tmp_path, interrupt_at):
  inf = float('inf')
  lines = []
  summary = _toy_with(tmp_path, 'stalled', lambda m: None, rounds=5, log=lines.append,
                      learning_rate=inf, stop_after_rejected=2, eval_every=5)
  rows = read_rows(tmp_path / 'stalled')
  assert [r['update_rejected'] for r in rows] == ['1', '1']
  assert rows[0]['test_accuracy'] == '' and rows[1]['test_accuracy'] != ''  # final model
  assert summary['stop_kind'] == runner.STOP_DIVERGED and summary['rounds_completed'] == 2
  assert summary['stop_reason'] == (
      'diverged in round 1: the aggregated updates of rounds 1-2 were all rejected as '
      'non-finite, the model is unchanged since round 0 (stop_after_rejected=2)')
  assert f'tffdp: stopping: {summary["stop_reason"]}' in lines
  # Without it the same run goes on (the test above); an interrupted run may take it up on
  # resume (a stopping rule, not a setting of the mechanism), counting the rows it has.
  with pytest.raises(KeyboardInterrupt):
    _toy_with(tmp_path, 'later', lambda m: None, rounds=6, learning_rate=inf,
              log=interrupt_at(4))
  summary = _toy_with(tmp_path, 'later', lambda m: None, rounds=6, learning_rate=inf,
                      resume=True, stop_after_rejected=3)
  # Checkpointed after round 3, interrupted in round 4: the 3 rejected rounds end it
  # before another round runs (and is accounted); the model is evaluated there.
  assert summary['rounds_completed'] == 3
  assert summary['stop_reason'].startswith('diverged in round 1: the aggregated updates '
                                           'of rounds 1-3 were all rejected')
  rows = read_rows(tmp_path / 'later')
  assert len(rows) == 3 and rows[-1]['test_accuracy'] != ''
  assert runner.rejected_streak([{'update_rejected': '1'}, {'update_rejected': 0},
                                 {'update_rejected': 1}, {'update_rejected': '1'}]) == 2
  assert runner.rejected_streak([{'update_rejected': 0}]) == 0
  empty = {'update_rejected': 0, 'cohort_size': 0}  # nothing ran: neither counts nor ends
  assert runner.rejected_streak([{'update_rejected': 1, 'cohort_size': 3}, empty,
                                 {'update_rejected': '1', 'cohort_size': '2'}]) == 2
  assert runner.rejected_streak([{'round': 1}]) == 0  # runs made before the column
  with pytest.raises(ValueError, match='stop_after_rejected must be positive'):
    _cfg(tmp_path, 'bad', stop_after_rejected=0).validate()


def test_update_rejected_finds_the_finalizer_measurement_in_nested_metrics():
  nested = {'learning': {'client_work': {'train': {'loss': 1.0}},
                         'finalizer': {'update_non_finite': np.int32(1)}}}
  assert runner.update_rejected(nested) is True
  assert runner.update_rejected({'finalizer': {'update_non_finite': 0}}) is False
  assert runner.update_rejected([{'a': 1}, ({'update_non_finite': 1},)]) is True
  assert runner.update_rejected({'client_work': {'train': 1}}) is None
  assert runner.rejected_rounds([{'round': 1, 'update_rejected': '1'},
                                 {'round': 2, 'update_rejected': 0.0}]) == 1
  assert runner.rejected_rounds([{'round': 1}]) is None


@pytest.mark.parametrize('summary, kind', [
    (dict(stop_reason=None, stop_kind=None), None),
    (dict(stop_reason='round 7 would take epsilon_guaranteed past the budget 4',
          stop_kind='budget'), runner.STOP_BUDGET),
    # Summaries written before `stop_kind`: read from the reason.
    (dict(stop_reason='diverged in round 8: a client update reached ...'),
     runner.STOP_DIVERGED),
    (dict(stop_reason='every client has spent its budget: ...'), runner.STOP_BUDGET),
    (dict(), None),
])
def test_stop_kind_reads_the_field_or_an_older_summary_s_reason(summary, kind):
  assert runner.stop_kind(summary) == kind


def test_cli_help_lists_every_method_option():
  # argparse %-formats help text: an option whose help says '10%' once broke --help.
  from tffdp import run  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  text = run.make_parser().format_help()
  assert '10%' in text
  for name in config_lib.methods():
    for f in dataclasses.fields(registry.get(name).hparams):
      assert '--' + f.name.replace('_', '-') in text


def test_notes_on_defaults_keep_a_default_s_note_only_at_the_default():
  notes = dict(a='why a', b='why b', c='about c')
  defaults = dict(a=1, b=2)
  assert config_lib.notes_on_defaults(notes, {}, defaults) == notes
  assert config_lib.notes_on_defaults(notes, dict(a=1, b=3, c=9), defaults) == dict(
      a='why a', c='about c')
  # The option's default, and the dataset's value filled in (Adap DP-FL Sec. V-A).
  mnist = config_lib.method_defaults('adap_dp_fl', 'mnist')
  assert (mnist['lot_size'], mnist['clipping_factor'], mnist['beta']) == (78, 1.0, 0.9999)
  assert config_lib.method_defaults('adap_dp_fl', 'fashion_mnist')['clipping_factor'] == 0.01


def test_method_notes_drop_defaults_the_run_overrides():
  notes = dict(local_epochs='one pass is the default', alpha='alpha default', l_z='a constant')
  cfg = config_lib.RunConfig.create(method='a_dpfl', dataset='mnist').resolved()
  assert runner.method_notes(notes, cfg) == dict(notes, alpha=cfg.notes['alpha'])
  cfg = config_lib.RunConfig.create(method='a_dpfl', dataset='mnist', local_epochs=5,
                                    alpha=0.05).resolved()
  assert runner.method_notes(notes, cfg) == dict(l_z='a constant')  # both set by the run
  cfg.notes['local_epochs'] = 'the sweep chose it'  # an experiment's reason wins
  assert runner.method_notes(notes, cfg) == dict(local_epochs='the sweep chose it',
                                                 l_z='a constant')
  # An option left at its default keeps a note that config.notes does not repeat.
  cfg = config_lib.RunConfig.create(method='adap_dp_fl', dataset='mnist').resolved()
  assert 'lot_size' not in cfg.notes
  assert runner.method_notes(dict(lot_size='why'), cfg) == dict(lot_size='why')
  lot = cfg.method_options['lot_size'] + 1
  cfg = config_lib.RunConfig.create(method='adap_dp_fl', dataset='mnist',
                                    lot_size=lot).resolved()
  assert runner.method_notes(dict(lot_size='why'), cfg) == {}


def test_eval_validation_off_evaluates_the_test_set_alone_and_trains_the_same(tmp_path):
  kw = dict(method='fedavg', rounds=2)
  runner.run(_cfg(tmp_path, 'both', **kw), log=lambda s: None)
  runner.run(_cfg(tmp_path, 'test', eval_validation=False, **kw), log=lambda s: None)
  both, test = read_rows(tmp_path / 'both'), read_rows(tmp_path / 'test')
  assert all(r['validation_accuracy'] == '' and r['test_accuracy'] != '' for r in test)
  assert all(r['validation_accuracy'] != '' for r in both)
  assert [r['test_accuracy'] for r in test] == [r['test_accuracy'] for r in both]
  with open(tmp_path / 'test' / 'config.json') as f:
    assert json.load(f)['eval_validation'] is False
