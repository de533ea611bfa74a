"""Dry-run calibration of the privacy knob (`tffdp.calibration`): the dry ledger against
`dp_accounting` directly, rescaled events against rebuilt ones, and the bisection."""

import dataclasses
import os
import subprocess
import sys

import dp_accounting
import pytest

from tffdp import calibration
from tffdp import config as config_lib
from tffdp import privacy

TOY = dict(dataset='synthetic', clients=20, clients_per_round=5, partition='iid',
           model='logistic_regression', batch_size=50, learning_rate=0.1,
           num_validation=500, rounds=30, delta=1e-5, clip_norm=1.0)


def _config(tmp_path, **kw):
  return config_lib.RunConfig.create(**dict(TOY, out=str(tmp_path / 'run'), **kw))


def test_scale_noise_rescales_every_mechanism_and_keeps_the_rest():
  g = dp_accounting.GaussianDpEvent(1.5)
  event = dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, g), 7),
      dp_accounting.LaplaceDpEvent(0.5), dp_accounting.NoOpDpEvent()])
  scaled = calibration.scale_noise(event, 2.0)
  assert scaled == dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(3.0)), 7),
      dp_accounting.LaplaceDpEvent(1.0), dp_accounting.NoOpDpEvent()])
  ddg = privacy.DistributedDiscreteGaussianDpEvent(1.0, 1.0, 3, 8)
  with pytest.raises(ValueError, match='DistributedDiscreteGaussianDpEvent'):
    calibration.scale_noise(ddg, 2.0)


def test_dry_run_of_dp_fedavg_equals_dp_accounting(tmp_path):
  cfg = _config(tmp_path, method='dp_fedavg', cohort_sampling='poisson',
                noise_multiplier=1.3)
  dry = calibration.DryRun(cfg)
  # DP-FedAvg with Poisson cohorts: every client, every round, a Poisson-sampled Gaussian.
  acc = dp_accounting.rdp.RdpAccountant(privacy.DEFAULT_ORDERS)
  acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
      5 / 20, dp_accounting.GaussianDpEvent(1.3)), 30))
  # (30 rounds summed vs one self-composition: float64 round-off only.)
  assert dry.epsilon() == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
  assert dry.scalable()


def test_a_dry_run_from_plain_python_uses_tffdp_s_local_context(tmp_path):
  # Not TFF's default context, whose worker is unconfined and outlives the process (it
  # held a pipe open after its Python process ended).
  code = ('from tffdp import calibration, config, runtime\n'
          f'cfg = config.RunConfig.create(**{dict(TOY, method="dpfl", out=str(tmp_path))!r})\n'
          'assert runtime._local_context is None\n'
          'calibration.DryRun(cfg)\n'
          'assert runtime._local_context is not None\n'
          'print("ok")\n')
  # Output to files, not pipes: a worker that outlives the process would hold a pipe open.
  with open(tmp_path / 'out', 'w') as out, open(tmp_path / 'err', 'w') as err:
    r = subprocess.run([sys.executable, '-c', code], stdout=out, stderr=err, timeout=600,
                       env=dict(os.environ, TFFDP_CACHE_DIR=str(tmp_path / 'c')))
  assert r.returncode == 0 and (tmp_path / 'out').read_text().strip().endswith('ok'), (
      (tmp_path / 'err').read_text()[-2000:])


@pytest.mark.parametrize('method,knob,settings,values', [
    ('dpfl', 'noise_multiplier', {}, (1.0, 2.5)),
    ('lapfed', 'epsilon', dict(method_options={'l1_clip': 1.0}), (10.0, 4.0)),
    ('adap_dp_fl', 'noise_multiplier', dict(method_options={'noise_schedule': 'constant'}),
     (3.0, 6.0)),
])
def test_rescaled_events_equal_a_rebuilt_run(tmp_path, method, knob, settings, values):
  a, b = values
  cfg = _config(tmp_path, method=method, noise_multiplier=1.0, **settings)
  at_a = calibration.DryRun(calibration.with_knob(cfg, knob, a))
  at_b = calibration.DryRun(calibration.with_knob(cfg, knob, b))
  factor = b / a if knob == 'noise_multiplier' else a / b
  assert at_a.scalable()
  assert at_a.epsilon(factor) == pytest.approx(at_b.epsilon(), rel=1e-9)
  assert at_a.epsilon() != pytest.approx(at_b.epsilon(), rel=1e-3)  # the knob matters


def test_calibrate_lands_within_two_percent_below_and_agrees_with_dp_accounting(tmp_path):
  cfg = _config(tmp_path, method='dp_fedavg', cohort_sampling='poisson',
                noise_multiplier=1.0)
  result = calibration.calibrate(cfg, 4.0)
  assert 4.0 * 0.98 <= result.epsilon <= 4.0 and result.rescaled
  check = calibration.DryRun(calibration.with_knob(cfg, 'noise_multiplier', result.value))
  assert check.epsilon() == pytest.approx(result.epsilon, rel=1e-7) and check.epsilon() < 4
  # dp_accounting's own calibration (smallest sigma with epsilon <= 4) sits just below.
  sigma = privacy.calibrate_noise_multiplier(4.0, 1e-5, 5 / 20, 30)
  assert sigma <= result.value <= sigma * 1.05
  # Started inside the band (a value found for a like run), one dry run and no search.
  again = calibration.calibrate(
      calibration.with_knob(cfg, 'noise_multiplier', result.value), 4.0)
  assert (again.value, again.trials) == (result.value, 1)
  assert again.epsilon == pytest.approx(result.epsilon, rel=1e-7)  # rescaled vs built


@pytest.mark.parametrize('method,options', [
    ('dp_fedavg_ags', {}), ('dp_fedags', {'perturb_all': True, 'weighting': 'size'})])
def test_calibrate_rebuilds_where_noise_is_not_proportional_to_the_knob(tmp_path, method,
                                                                       options):
  # Eq. 2's noise multiplier is sqrt(2 (ln 1.25 + epsilon)) / epsilon x Delta_S.
  cfg = _config(tmp_path, method=method, rounds=5, method_options=dict(options, epsilon=0.5))
  result = calibration.calibrate(cfg, 4.0, knob='epsilon')
  assert not result.rescaled and 4.0 * 0.98 <= result.epsilon <= 4.0


def test_calibrate_an_epsilon_option(tmp_path):
  cfg = _config(tmp_path, method='lapfed', method_options={'l1_clip': 1.0, 'epsilon': 1.0})
  result = calibration.calibrate(cfg, 16.0, knob='epsilon')
  assert 16.0 * 0.98 <= result.epsilon <= 16.0
  assert calibration.with_knob(cfg, 'epsilon', result.value).method_options['epsilon'] == \
      result.value


@pytest.mark.parametrize('method,settings', [
    ('dp_fedavg', dict(cohort_sampling='poisson', noise_multiplier=0.8)),
    ('lapfed', dict(method_options={'l1_clip': 1.0, 'epsilon': 2.0})),  # after-round events
    ('ddgauss', dict(noise_multiplier=1.0)),
])
def test_dry_run_equals_the_runners_own_guaranteed_ledger(tmp_path, method, settings):
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  cfg = _config(tmp_path, method=method, rounds=4, **settings)
  summary = runner.run(cfg, log=lambda s: None)
  assert calibration.DryRun(cfg).epsilon() == pytest.approx(
      summary['epsilon_guaranteed'], rel=1e-9)


def test_a_knob_value_out_of_the_methods_range_is_stepped_back_from(tmp_path, monkeypatch):
  # AADP-FL's Theorem 1 cannot calibrate a budget below about 0.05 (integer RDP orders up
  # to 256): no run builds there. A stand-in dry run: epsilon = budget^2, no run below
  # 0.05. From 4 (epsilon 16) the first secant step (slope 1 assumed) asks for 0.0297.
  class FakeDryRun:
    def __init__(self, config):
      self.value = config.method_options['epsilon']
      if self.value < 0.05:
        raise ValueError('no sigma for so small a budget')

    def epsilon(self, factor=1.0):
      return self.value ** 2

    def scalable(self):
      return False

  monkeypatch.setattr(calibration, 'DryRun', FakeDryRun)
  cfg = _config(tmp_path, method='aadp_fl', method_options={'epsilon': 4.0})
  logs = []
  result = calibration.calibrate(cfg, 0.12, knob='epsilon', log=logs.append)
  assert any('0.0297' in line and 'no run' in line for line in logs), logs
  assert 0.12 * 0.98 <= result.epsilon <= 0.12 and result.value >= 0.05
  # The budget cap moves with the knob (AADP-FL refuses a budget above epsilon_max).
  assert calibration.with_knob(cfg, 'epsilon', 50.0).method_options['epsilon_max'] == 50.0
  # No run at the start value: an error, not a search.
  with pytest.raises(ValueError, match='no sigma'):
    calibration.calibrate(calibration.with_knob(cfg, 'epsilon', 0.01), 0.12, knob='epsilon')


def test_what_cannot_be_calibrated_says_why(tmp_path):
  with pytest.raises(ValueError, match='from what the round did'):
    calibration.DryRun(_config(tmp_path, method='cosafed'))
  with pytest.raises(ValueError, match='epsilon_guaranteed is inf'):
    calibration.calibrate(_config(tmp_path, method='lapfed'), 4.0, knob='epsilon')  # no L1 clip
  with pytest.raises(ValueError, match='no epsilon option'):
    calibration.knob_value(_config(tmp_path, method='dpfl'), 'epsilon')
  with pytest.raises(ValueError, match='positive'):
    calibration.calibrate(_config(tmp_path, method='dpfl', noise_multiplier=0.0), 4.0)
  ddgauss = _config(tmp_path, method='ddgauss', noise_multiplier=1.0, rounds=3)
  assert not calibration.DryRun(ddgauss).scalable()
