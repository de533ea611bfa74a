"""The example method (`examples/clipped_mean_method.py`) and the `tffdp` console command."""

import csv
import json
import os
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import cli
from tffdp import config as config_lib
from tffdp import privacy, runner
from tffdp.algorithms import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# As tests/test_runner.py's TOY, on the generated `synthetic` dataset (no files needed).
TOY = dict(dataset='synthetic', clients=4, clients_per_round=2, partition='iid',
           model='logistic_regression', batch_size=100, learning_rate=0.5,
           num_validation=500, checkpoint_every=1)


@pytest.fixture(autouse=True)
def client_cache(tmp_path_factory, monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path_factory.getbasetemp() / 'clients'))


@pytest.fixture
def example():
  """The example module, its method registered for the test and unregistered after it."""
  if ROOT not in sys.path:  # `examples` is not installed: import it from the checkout
    sys.path.insert(0, ROOT)
  from examples import clipped_mean_method  # pylint: disable=g-import-not-at-top
  clipped_mean_method.register()  # importing registers it, but only the first import
  assert clipped_mean_method.NAME in config_lib.methods()
  yield clipped_mean_method
  registry.unregister(clipped_mean_method.NAME)
  assert clipped_mean_method.NAME not in config_lib.methods()


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')


def test_example_run_finishes_with_dp_accountings_epsilon(tmp_path, example):
  sigma, rounds = 1.3, 3
  cfg = config_lib.RunConfig.create(**TOY, method=example.NAME, out=str(tmp_path / 'run'),
                                    rounds=rounds, noise_multiplier=sigma, clip_norm=1.0,
                                    server_learning_rate=0.8)
  summary = runner.run(cfg, log=lambda s: None)
  assert summary['method'] == example.NAME and summary['dp_unit'] == privacy.CLIENT_LEVEL
  assert summary['rounds_completed'] == rounds and summary['stop_kind'] is None
  assert 0.0 <= summary['final_test_accuracy'] <= 1.0

  # Every client, every round: one Poisson-sampled Gaussian at q = K / N, with the
  # float32 sigma the noise is drawn with; composed here by dp_accounting itself.
  event = dp_accounting.PoissonSampledDpEvent(
      2 / 4, dp_accounting.GaussianDpEvent(float(np.float32(sigma))))
  accountant = dp_accounting.rdp.RdpAccountant(list(privacy.DEFAULT_ORDERS))
  for _ in range(rounds):
    accountant.compose(event)
  direct = accountant.get_epsilon(cfg.delta)
  assert summary['epsilon_guaranteed'] == pytest.approx(direct, rel=1e-12)
  assert summary['epsilon_claimed'] == pytest.approx(direct, rel=1e-12)

  written = json.loads((tmp_path / 'run' / 'config.json').read_text())
  assert written['cohort_sampling'] == 'poisson'  # the method's default
  assert written['method_hyperparameters'] == {'server_learning_rate': 0.8}
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  # The aggregator's measurement, through Method.round_metrics (a Poisson cohort may be
  # empty: that round runs nothing and measures nothing, but is still accounted).
  assert [row['clipped_clients'] == '' for row in rows] == [
      row['cohort_size'] == '0' for row in rows]
  assert all(0 <= int(row['clipped_clients']) <= int(row['cohort_size'])
             for row in rows if row['clipped_clients'])


def test_example_options_are_checked(example):
  with pytest.raises(ValueError, match='server_learning_rate must be positive'):
    config_lib.RunConfig.create(method=example.NAME, server_learning_rate=0.0).hparams
  with pytest.raises(ValueError, match='poisson'):
    config_lib.RunConfig.create(method=example.NAME, dataset='synthetic',
                                cohort_sampling='uniform').resolved().validate()
  with pytest.raises(ValueError, match='clip_norm > 0'):
    example.ClippedMeanFactory(1.0, 0.0, 2)


VALUE_TYPE = tff.types.tensorflow_to_type([tf.TensorSpec([3], tf.float32),
                                           tf.TensorSpec([2, 2], tf.float32)])


def test_zero_noise_aggregate_is_the_exact_clipped_mean(example):
  clip, k = 2.0, 4  # the denominator is the expected cohort K, not the 3 clients here
  values = [[np.array([3.0, 4.0, 0.0]), np.zeros((2, 2))],          # norm 5: clipped
            [np.array([0.5, 0.0, 0.0]), np.full((2, 2), 0.5)],      # norm 1.118: kept
            [np.array([1.0, -1.0, 1.0]), np.ones((2, 2))]]          # norm 2.646: clipped
  values = [[v.astype(np.float32) for v in client] for client in values]
  expected = [np.zeros(3), np.zeros((2, 2))]
  for client in values:
    norm = np.sqrt(sum(np.sum(v.astype(np.float64) ** 2) for v in client))
    for e, v in zip(expected, client):
      e += v * min(1.0, clip / norm)
  expected = [e / k for e in expected]

  process = example.ClippedMeanFactory(0.0, clip, k, seed=7).create(VALUE_TYPE)
  out = process.next(process.initialize(), values)
  for got, want in zip(out.result, expected):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  assert int(out.measurements['clipped']) == 2
  assert int(out.state['round']) == 1


def test_noise_is_seeded_and_of_std_sigma_s_over_k(example):
  value_type = tff.types.tensorflow_to_type([tf.TensorSpec([20000], tf.float32)])
  zeros = [[np.zeros(20000, np.float32)] for _ in range(2)]

  def two_rounds(seed, sigma=0.5, clip=2.0, k=4):
    process = example.ClippedMeanFactory(sigma, clip, k, seed).create(value_type)
    first = process.next(process.initialize(), zeros)
    return first.result[0], process.next(first.state, zeros).result[0]

  a1, a2 = two_rounds(seed=3)
  b1, b2 = two_rounds(seed=3)
  np.testing.assert_array_equal(a1, b1)  # same seed, same round: the same noise
  np.testing.assert_array_equal(a2, b2)
  assert not np.array_equal(a1, a2)      # a fresh draw each round
  assert not np.array_equal(a1, two_rounds(seed=4)[0])
  # sigma S / K = 0.25 per coordinate (20000 draws: std error of the std about 0.5%).
  assert np.std(a1) == pytest.approx(0.25, rel=0.03)
  assert abs(np.mean(a1)) < 0.01


def test_example_main_runs_as_a_module(tmp_path):
  r = subprocess.run([sys.executable, '-m', 'examples.clipped_mean_method', '--dataset',
                      'synthetic', '--rounds', '1', '--out', str(tmp_path / 'out')],
                     capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  last = r.stdout.strip().splitlines()[-1]
  assert 'final test accuracy' in last and 'epsilon_claimed' in last
  assert 'epsilon_guaranteed' in last
  assert json.loads((tmp_path / 'out' / 'summary.json').read_text())['rounds_completed'] == 1


# ----- the `tffdp` console command ---------------------------------------------------

def test_console_main_run_help_and_unknown_subcommand(capsys, monkeypatch):
  from tffdp import runtime  # pylint: disable=g-import-not-at-top
  shutdowns = []
  # Record instead of ending this test session's TFF worker.
  monkeypatch.setattr(runtime, 'shutdown_workers', lambda: shutdowns.append(1) or 0)

  assert cli.console_main(['run', '--help']) == 0
  out = capsys.readouterr().out
  assert '--method' in out and '--noise-multiplier' in out and 'dp_fedavg' in out
  assert out.startswith('usage: tffdp run ')
  assert shutdowns == [1]

  assert cli.console_main(['nope', '--method', 'fedavg']) == 2
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1 and "'nope'" in err and 'run' in err

  assert cli.console_main(['--help']) == 0
  assert 'run' in capsys.readouterr().out
  assert cli.console_main([]) == 2
  assert cli.console_main(['run', '--method', 'nope', '--dataset', 'synthetic']) == 2
  assert 'unknown method' in capsys.readouterr().err


def test_installed_tffdp_script(tmp_path):
  script = os.path.join(os.path.dirname(sys.executable), 'tffdp')
  if not os.path.exists(script):
    pytest.skip(f'{script} not installed: pip install --no-deps --no-build-isolation -e .')
  r = subprocess.run([script, '--help'], capture_output=True, text=True, env=_env(),
                     timeout=60)
  assert r.returncode == 0 and 'run' in r.stdout
  r = subprocess.run([script, 'bogus'], capture_output=True, text=True, env=_env(),
                     timeout=60)
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
  assert "unknown subcommand 'bogus'" in r.stderr and 'Traceback' not in r.stderr
  # A real run through the entry point (and its TFF worker shut down: the process ends).
  out = tmp_path / 'run'
  r = subprocess.run([script, 'run', '--method', 'fedavg', '--dataset', 'synthetic',
                      '--rounds', '1', '--clients', '4', '--clients-per-round', '2',
                      '--partition', 'iid', '--model', 'logistic_regression',
                      '--num-validation', '500', '--out', str(out)],
                     capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert json.loads((out / 'summary.json').read_text())['rounds_completed'] == 1
  assert json.loads((out / 'config.json').read_text())['command'][:2] == ['tffdp', 'run']
