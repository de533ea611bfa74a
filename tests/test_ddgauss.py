"""DDGauss (AADP-FL's baseline): the Kairouz et al. 2021 RDP curve against dp_accounting's
Gaussian and by hand, TFF's distributed discrete Gaussian mean (simulated SecAgg) in
value and noise scale, the method's ledgers against the DP query TFF states."""

import functools
import json
import math

import dp_accounting
import numpy as np
import pytest
import tensorflow_federated as tff

from tffdp import config as config_lib, models, privacy, runner
from tffdp.algorithms import ddgauss

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)
ORDERS = [1.5, 2.0, 8.0, 32.0, 256.0]


def test_rdp_is_the_gaussian_when_the_noise_shares_are_wide():
  # s = 50 (scaled units): tau = 10 sum exp(-2 pi^2 2500 k/(k+1)) underflows to 0, so the
  # curve is the continuous Gaussian's with z = sqrt(n) s / D2.
  event = privacy.DistributedDiscreteGaussianDpEvent(l2_sensitivity=120.0,
                                                     local_stddev=50.0, num_clients=9,
                                                     dim=4096)
  assert event.tau == 0.0
  acc = dp_accounting.rdp.RdpAccountant(ORDERS)
  acc.compose(dp_accounting.GaussianDpEvent(3 * 50.0 / 120.0))
  np.testing.assert_allclose(event.rdp(ORDERS), acc._rdp, rtol=1e-12)
  ledger = privacy.PrivacyLedger(2, 1e-5, privacy.CLIENT_LEVEL)
  for _ in range(7):
    ledger.record([0], event)
  acc = dp_accounting.rdp.RdpAccountant(list(ledger.orders))
  acc.compose(dp_accounting.GaussianDpEvent(1.25), 7)
  assert ledger.epsilon(0) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
  assert ledger.epsilon(1) == 0.0


def test_rdp_with_narrow_shares_by_hand():
  d2, s, n, d = 3.0, 0.4, 3, 64
  event = privacy.DistributedDiscreteGaussianDpEvent(d2, s, n, d)
  tau = 10 * (math.exp(-2 * math.pi ** 2 * s * s / 2) +
              math.exp(-2 * math.pi ** 2 * s * s * 2 / 3))
  assert event.tau == pytest.approx(tau, rel=1e-12)
  sigma, d1 = math.sqrt(n) * s, d2 * min(8.0, d2)
  for a, got in zip(ORDERS, event.rdp(ORDERS)):
    expected = min(a * d2 ** 2 / (2 * sigma ** 2) + tau * d,
                   a / 2 * (d2 ** 2 / sigma ** 2 + 2 * d1 * tau / sigma + tau ** 2 * d),
                   a / 2 * (d2 / sigma + tau * 8.0) ** 2)
    assert got == pytest.approx(expected, rel=1e-12)
  with pytest.raises(ValueError, match='positive'):
    privacy.DistributedDiscreteGaussianDpEvent(0.0, 1.0, 2, 4)


def _mean_process(noise_multiplier, clip, n, dim=64):
  factory = ddgauss.ddgauss_factory(noise_multiplier, clip, n, bits=20)
  return factory.create(tff.TensorType(np.float32, [dim]))


def test_factory_returns_the_mean_of_clipped_updates():
  rng = np.random.default_rng(0)
  values = [rng.normal(size=64).astype(np.float32) * s for s in (0.01, 0.05, 10.0)]
  clip = 0.5
  proc = _mean_process(1e-4, clip, 3)
  out = proc.next(proc.initialize(), values)
  clipped = [v * min(1.0, clip / np.linalg.norm(v)) for v in values]
  np.testing.assert_allclose(out.result, np.mean(clipped, axis=0), atol=2e-4)
  m = out.measurements['mean_value']
  assert int(m['actual_num_clients']) == 3 and int(m['padded_dim']) == 64
  assert float(m['l2_clip']) == clip


def test_factory_noise_scale():
  # Zero updates: the mean carries only the summed shares, std sigma S / n per coordinate.
  sigma, clip, n, dim = 1.5, 0.2, 4, 4096
  proc = _mean_process(sigma, clip, n, dim)
  out = proc.next(proc.initialize(), [np.zeros(dim, np.float32)] * n)
  assert np.std(out.result) == pytest.approx(sigma * clip / n, rel=0.05)
  assert abs(np.mean(out.result)) < 0.1 * sigma * clip / n


@pytest.fixture()
def tiny(tmp_path):
  from tffdp.data import FederatedData  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (24, *SHAPE), dtype=np.uint8)
  y = np.arange(24) % 10
  parts = [np.arange(0, 8), np.arange(8, 16), np.arange(16, 24)]
  return FederatedData(x, y, parts, cache_dir=str(tmp_path))


def test_method_accounts_the_query_tff_states(tiny):
  kw = dict(learning_rate=0.1, batch_size=4, clip_norm=0.5, clients_per_round=3)
  m = ddgauss.build_ddgauss(BUILDER, tiny, noise_multiplier=1.0, **kw)
  cohort = np.arange(3)
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, state),
                                 m.accounting.executed(cohort, state, metrics)) is None
  q = ddgauss.ddgauss_measurements(metrics)
  (clients, event, _), = m.accounting.guaranteed(cohort, state)
  np.testing.assert_array_equal(clients, cohort)
  assert event == privacy.DistributedDiscreteGaussianDpEvent(
      float(q['scaled_inflated_l2']), float(q['scaled_local_stddev']), 3,
      ddgauss.padded_dim(7850, 'hd'))
  # The sensitivity is the scaled clip, inflated by the rounding: S gamma^-1 + sqrt(d).
  scale = float(q['scale_factor'])
  assert event.l2_sensitivity == pytest.approx(0.5 * scale + math.sqrt(8192), rel=1e-4)
  # Sigma S / sqrt(n) per share, in scaled units.
  assert event.local_stddev == pytest.approx(0.5 / math.sqrt(3) * scale, rel=1e-5)
  # Two clients sent shares: the guaranteed event has n = 2, the claimed one keeps 3.
  assert m.accounting.guaranteed(cohort[:2], state)[0][1].num_clients == 2
  assert m.accounting.claimed(cohort[:2], state)[0][1].num_clients == 3
  other = ddgauss.build_ddgauss(BUILDER, tiny, noise_multiplier=2.0, **kw)
  assert 'DistributedDiscreteGaussianDpEvent' in privacy.releases_differ(
      other.accounting.guaranteed(cohort, state), m.accounting.executed(cohort, state, metrics))
  # The event the round states, for the cohort: what the runner accounts.
  assert m.accounting.executed(cohort, state, metrics)[0][1] == event
  with pytest.raises(ValueError, match='noise_multiplier must be positive'):
    ddgauss.build_ddgauss(BUILDER, tiny, noise_multiplier=0.0, **kw)


def test_run_reports_both_epsilons(tmp_path):
  cfg = config_lib.RunConfig.create(
      method='ddgauss', dataset='synthetic', clients=4, clients_per_round=4,
      partition='iid', model='logistic_regression', batch_size=50, rounds=2,
      noise_multiplier=1.2, clip_norm=0.3, num_validation=500, out=str(tmp_path / 'r'),
      client_cache_dir=str(tmp_path / 'c'))
  summary = runner.run(cfg, log=lambda s: None)
  with open(tmp_path / 'r' / 'config.json') as f:
    hp = json.load(f)['method_hyperparameters']
  event = privacy.DistributedDiscreteGaussianDpEvent(
      hp['scaled_l2_sensitivity'], hp['scaled_local_stddev'], 4, hp['padded_dim'])
  ledger = privacy.PrivacyLedger(1, 1e-5, privacy.CLIENT_LEVEL)
  ledger.record([0], event)
  ledger.record([0], event)
  assert summary['epsilon_claimed'] == pytest.approx(summary['epsilon_guaranteed'])
  assert summary['epsilon_guaranteed'] == pytest.approx(ledger.epsilon(0), rel=1e-9)


@pytest.mark.parametrize('kw, match', [(dict(bits=23), 'bits'), (dict(beta=1.0), 'beta'),
                                       (dict(rotation_type='fft'), 'rotation_type')])
def test_bad_options_are_named(kw, match):
  with pytest.raises(ValueError, match=match):
    ddgauss.DDGaussHparams(**kw)


def test_calibrated_sigma_meets_epsilon_and_is_the_smallest():
  kw = dict(clip_norm=0.5, clients_per_round=4, dim=1000)
  sigma = ddgauss.calibrate_noise_multiplier(3.0, 1e-5, 6, tol=1e-3, **kw)

  def eps(s):
    ledger = privacy.PrivacyLedger(1, 1e-5, privacy.CLIENT_LEVEL)
    for _ in range(6):
      ledger.record([0], ddgauss.stated_event(s, kw['clip_norm'], kw['clients_per_round'],
                                              kw['dim']))
    return ledger.epsilon(0)

  assert eps(sigma) <= 3.0 < eps(sigma * (1 - 2e-3))
  # The rounding inflation (sqrt(d) in scaled units) needs more noise than the Gaussian.
  assert sigma > privacy.calibrate_noise_multiplier(3.0, 1e-5, 1.0, 6)


def test_only_the_cohort_is_charged(tiny):
  m = ddgauss.build_ddgauss(BUILDER, tiny, noise_multiplier=1.0, learning_rate=0.1,
                            batch_size=4, clip_norm=0.5, clients_per_round=2)
  cohort = np.array([0, 2])
  for releases in (m.accounting.claimed(cohort, None), m.accounting.guaranteed(cohort, None)):
    (clients, event, _), = releases
    np.testing.assert_array_equal(clients, cohort)
    assert event.num_clients == 2
  assert m.accounting.guaranteed(np.array([], np.int64), None) == []


def test_a_non_finite_update_ends_the_run_as_diverged(tiny, tmp_path):
  # A learning rate of 1e37 overflows the logits in the second local step: NaN updates.
  m = ddgauss.build_ddgauss(BUILDER, tiny, noise_multiplier=1.0, learning_rate=1e37,
                            batch_size=4, clip_norm=0.5, clients_per_round=3)
  with pytest.raises(Exception) as failure:  # pylint: disable=broad-exception-raised
    m.run_round(m.initialize(), np.arange(3), 0, 0)
  assert ddgauss.NORM_CHECK_MESSAGE in str(failure.value)
  assert 'non-finite' in m.round_failure(failure.value)
  assert m.round_failure(ValueError('something else')) is None
  cfg = config_lib.RunConfig.create(
      method='ddgauss', dataset='synthetic', clients=3, clients_per_round=3,
      partition='iid', model='logistic_regression', batch_size=50, rounds=3,
      learning_rate=1e37, noise_multiplier=1.0, clip_norm=0.5, num_validation=500,
      out=str(tmp_path / 'r'), client_cache_dir=str(tmp_path / 'c'))
  summary = runner.run(cfg, log=lambda s: None)
  assert summary['stop_reason'].startswith('diverged in round 1: a client update reached')
  assert summary['rounds_completed'] == 0
  assert summary['epsilon_guaranteed'] == 0  # the failed round released nothing


def test_stated_event_keeps_the_context_in_use():
  from tffdp import runtime  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  try:
    runtime.use_local_context(default_num_clients=3)  # a context of other arguments
    before = context_stack_impl.context_stack.current
    event = ddgauss.stated_event(1.0, 0.5, 4, 1000)
    assert context_stack_impl.context_stack.current is before
    assert event.num_clients == 4 and event.dim == 1024
  finally:
    runtime.use_local_context()


def test_slices_of_one_client_run_the_same_round(tiny):
  """`clients_per_slice=1` (index-tensor reading, no tf.data): the aggregator states the
  same event, and with little noise the sliced round's model differs from a per-client
  round's no more than a second per-client round's does (the shares are unseeded)."""
  kw = dict(learning_rate=0.5, batch_size=4, clip_norm=1.0, clients_per_round=3,
            noise_multiplier=1e-3, hp=ddgauss.DDGaussHparams(bits=22))
  cohort = np.arange(3)
  models_, events = {}, {}
  for name, per_slice in (('a', None), ('b', None), ('sliced', 1)):
    m = ddgauss.build_ddgauss(BUILDER, tiny, clients_per_slice=per_slice, **kw)
    assert m.clients_per_slice == per_slice
    state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
    events[name] = m.accounting.executed(cohort, state, metrics)
    models_[name] = np.concatenate([np.ravel(t) for t in m.model_weights(state).trainable])
  assert privacy.releases_differ(events['a'], events['sliced']) is None
  start = np.concatenate([np.ravel(t) for t in ddgauss.build_ddgauss(
      BUILDER, tiny, **kw).model_weights(m.initialize()).trainable])
  moved = np.linalg.norm(models_['a'] - start)
  noise = np.linalg.norm(models_['b'] - models_['a'])
  assert noise < 0.25 * moved   # the round moves the model well beyond its noise (~8%)
  assert np.linalg.norm(models_['sliced'] - models_['a']) < 3 * noise + 1e-6
  with pytest.raises(ValueError, match='unset or 1 for ddgauss'):
    ddgauss.build_ddgauss(BUILDER, tiny, clients_per_slice=2, **kw)
