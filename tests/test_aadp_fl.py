"""AADP-FL: eq. 2 budgets, Theorem 1 calibration, the eq. 3 budget increase, an exact
zero-noise round against a NumPy/Keras reference, the ledgers against dp_accounting,
option checks."""

import csv
import functools
import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tffdp import aggregators, config as config_lib, models, privacy, runner
from tffdp.algorithms import aadp_fl

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


@pytest.fixture()
def tiny(tmp_path):
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (30, *SHAPE), dtype=np.uint8)
  y = np.arange(30) % 10
  parts = [np.arange(0, 6), np.arange(6, 12), np.arange(12, 18), np.arange(18, 30)]
  return FederatedData(x, y, parts, cache_dir=str(tmp_path)), x, y, parts


def test_eq2_budgets_follow_data_volume():
  b = aadp_fl.data_volume_budgets([100, 300, 600], 4.0)
  np.testing.assert_allclose(b, [1.2, 3.6, 7.2])
  assert b.sum() == pytest.approx(3 * 4.0)
  with pytest.raises(ValueError, match='positive'):
    aadp_fl.data_volume_budgets([0, 3], 4.0)


def _classic_epsilon(sigma, q, rounds, delta=1e-5):
  acc = dp_accounting.rdp.RdpAccountant(list(aadp_fl.THEOREM1_ORDERS))
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
              rounds)
  orders = np.array(aadp_fl.THEOREM1_ORDERS)
  return float(np.min(acc._rdp + math.log(1 / delta) / (orders - 1)))  # Def. 4


def test_theorem1_sigma_meets_the_budget_and_is_the_smallest():
  q, t = 32 / 2750, 50   # MNIST: 20 clients of 2750 examples, B = 32, T = 50
  sigma = aadp_fl.theorem1_noise_multiplier(4.0, 1e-5, q, t)
  assert _classic_epsilon(sigma, q, t) <= 4.0
  assert _classic_epsilon(sigma - 2e-4, q, t) > 4.0   # bisection bracket (tol 1e-4)
  assert sigma == pytest.approx(0.712, abs=1e-3)      # Amendment 2: 0.712 (Def. 4) ...
  tight = privacy.calibrate_noise_multiplier(4.0, 1e-5, q, t, aadp_fl.THEOREM1_ORDERS)
  assert tight == pytest.approx(0.642, abs=1e-3)      # ... vs 0.642 (dp_accounting)


def test_budget_step_fires_only_when_both_moments_settle():
  step = functools.partial(aadp_fl.budget_increase_step, l=1e-3, rho=0.1, epsilon_max=5.0)
  b = tf.constant([4.0, 4.6, 5.0])
  for rms_m, rms_n, fired in ((2e-3, 1e-4, False), (1e-4, 2e-3, False), (1e-4, 1e-4, True)):
    new, f = step(b, tf.constant(rms_m), tf.constant(rms_n), cap_at_max=False)
    assert bool(f) == fired
    expected = [4 / 0.9, 4.6 / 0.9, 5.0] if fired else [4.0, 4.6, 5.0]
    np.testing.assert_allclose(new.numpy(), expected, rtol=1e-6)   # 4.6 overshoots to 5.11
  new, _ = step(b, tf.constant(0.0), tf.constant(0.0), cap_at_max=True)
  np.testing.assert_allclose(new.numpy(), [4 / 0.9, 5.0, 5.0], rtol=1e-6)


def test_scripted_moment_sequences_drive_the_increases():
  """rms of the moment change as the process computes it, over a scripted sequence."""
  m = [np.zeros(100, np.float32)]
  for delta in (1e-2, 1e-2, 1e-5, 1e-5, 1e-2, 1e-5):
    m.append(m[-1] + np.float32(delta))
  budgets, fired_at = tf.constant([4.0]), []
  for t in range(1, len(m)):
    rms = aadp_fl._rms([tf.constant(m[t])], [tf.constant(m[t - 1])])
    assert float(rms) == pytest.approx(abs(float(np.mean(m[t] - m[t - 1]))), rel=1e-3)
    budgets, fired = aadp_fl.budget_increase_step(budgets, rms, tf.constant(0.0), l=1e-4,
                                                  rho=0.1, epsilon_max=20.0, cap_at_max=False)
    if bool(fired):
      fired_at.append(t)
  assert fired_at == [3, 4, 6]
  assert float(budgets[0]) == pytest.approx(4 / 0.9 ** 3, rel=1e-6)


def _set_sigmas(method, state, sigmas):
  learning = state['learning']
  return dict(learning=learning._replace(aggregator=aggregators.with_noise_multipliers(
      learning.aggregator, sigmas)), budget=state['budget'])


def test_zero_noise_round_matches_a_numpy_keras_reference(tiny, full_batch_delta):
  data, x, y, parts = tiny
  # B >= d_i: one full-batch local step, so the reference needs no shuffle order.
  m = aadp_fl.build_aadp_fl(BUILDER, data, rounds=5, batch_size=12, clip_norm=0.05,
                            learning_rate=0.5,
                            hp=aadp_fl.AADPFLHparams(server_learning_rate=0.01))
  state = m.initialize()
  assert np.all(aadp_fl.noise_multipliers_of(state) > 0)
  state = _set_sigmas(m, state, np.zeros(2))
  w0 = [np.array(w) for w in m.model_weights(state).trainable]
  cohort = np.array([0, 1, 3])
  new_state, metrics = m.run_round(state, cohort, 0, 0)

  model = BUILDER()
  deltas = []
  for c in cohort:
    delta = full_batch_delta(model, w0, x[parts[c]], y[parts[c]], 0.5)
    clipped, _, _ = aggregators.longitudinal_clip([tf.constant(d) for d in delta],
                                                  tf.constant(0.05))
    deltas.append([c.numpy() for c in clipped])
  mean = [np.mean([d[i] for d in deltas], axis=0) for i in range(len(w0))]
  keras_vars = [tf.Variable(w) for w in w0]
  tf.keras.optimizers.Nadam(learning_rate=0.01).apply_gradients(
      zip([tf.constant(g) for g in mean], keras_vars))
  for ours, theirs in zip(m.model_weights(new_state).trainable, keras_vars):
    np.testing.assert_allclose(np.array(ours), theirs.numpy(), rtol=1e-4, atol=1e-6)
  q = m.round_metrics(metrics)
  assert q['clipped_clients'] == 3
  assert q['rms_first_moment_change'] == pytest.approx(
      0.1 * np.sqrt(np.mean(np.concatenate([np.ravel(g) for g in mean]) ** 2)), rel=1e-4)


def test_budget_increase_recalibrates_sigma_in_the_state(tiny):
  data, *_ = tiny
  m = aadp_fl.build_aadp_fl(BUILDER, data, rounds=5, batch_size=6, clip_norm=0.05,
                            hp=aadp_fl.AADPFLHparams(l=1e3, rho=0.5, epsilon=4.0,
                                                     epsilon_max=10.0))
  state = m.initialize()
  sizes = np.unique(data.client_sizes)
  np.testing.assert_allclose(aadp_fl.budgets_of(state), [4 * 4 * 6 / 30, 4 * 4 * 12 / 30],
                             rtol=1e-6)   # eq. 2 per distinct size: 3.2 and 6.4
  s0 = aadp_fl.noise_multipliers_of(state)
  for r in range(2):
    state, metrics = m.run_round(state, np.arange(4), r, 0)
  b = aadp_fl.budgets_of(state)
  np.testing.assert_allclose(b, [3.2 * 4, 6.4 * 2], rtol=1e-5)   # 6.4 -> 12.8 stops (> 10)
  expected = [aadp_fl.theorem1_noise_multiplier(float(np.float32(e)), 1e-5, min(1, 6 / n), 5)
              for e, n in zip(b, sizes)]
  np.testing.assert_allclose(aadp_fl.noise_multipliers_of(state), expected, rtol=1e-6)
  assert np.all(aadp_fl.noise_multipliers_of(state) < s0)
  assert m.round_metrics(metrics)['budget_increases'] == 2


def test_round_check_reads_what_the_aggregator_states(tiny):
  data, *_ = tiny
  m = aadp_fl.build_aadp_fl(BUILDER, data, rounds=3, batch_size=6, clip_norm=0.05,
                            hp=aadp_fl.AADPFLHparams(l=1e3, rho=0.5))
  state = m.initialize()
  cohort = np.array([0, 3])
  new, metrics = m.run_round(state, cohort, 0, 0)
  noise = metrics['learning']['aggregator']['longitudinal_clipping']['per_client_noise']
  np.testing.assert_array_equal(noise['clients_per_key'], [1, 1])   # sizes 6 and 12
  assert m.accounting.check_round(cohort, new, metrics) is None
  assert 'per sigma-table entry [1, 1], the cohort has [2, 0]' in m.accounting.check_round(
      np.array([0, 1]), new, metrics)
  # The events the aggregator states: each entry's sigma x (S / B) / S, for all its clients.
  executed = m.accounting.executed(cohort, new, metrics)
  sigmas = aadp_fl.noise_multipliers_of(state)
  assert [e.noise_multiplier for _, e, _ in executed] == pytest.approx(sigmas / 6, rel=1e-6)
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, state), executed) is None
  # The budgets rose, so the next round's declared table differs from the one run here.
  assert not np.allclose(aadp_fl.noise_multipliers_of(new), sigmas)
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, new), executed).startswith(
      'client 0: declared')


def test_ledgers_match_dp_accounting(tiny, tmp_path):
  data, *_ = tiny
  m = aadp_fl.build_aadp_fl(BUILDER, data, rounds=3, batch_size=6, clip_norm=0.05,
                            hp=aadp_fl.AADPFLHparams(q_user=0.5, epsilon=4.0))
  state = m.initialize()
  sigmas = aadp_fl.noise_multipliers_of(state)
  claimed = privacy.PrivacyLedger(4, 1e-5, orders=m.accounting.rdp_orders,
                                  conversion=m.accounting.claimed_conversion)
  guaranteed = privacy.PrivacyLedger(4, 1e-5, orders=m.accounting.rdp_orders)
  for _ in range(3):
    for clients, event, _ in m.accounting.claimed(np.arange(4), state):
      claimed.record(clients, event)
    for clients, event, _ in m.accounting.guaranteed(np.arange(4), state):
      guaranteed.record(clients, event)
  # Claimed: Theorem 1 meets each client's eq. 2 budget (3.2 for 6 examples, 6.4 for 12).
  assert claimed.epsilon(0) == pytest.approx(_classic_epsilon(sigmas[0], 1.0, 3), rel=1e-9)
  assert claimed.epsilon(0) <= 3.2 and claimed.epsilon(3) <= 6.4
  assert claimed.epsilon(3) == pytest.approx(6.4, abs=0.01)
  # Guaranteed: noise std sigma S / B on sensitivity S, amplified by q_user only.
  acc = dp_accounting.rdp.RdpAccountant(list(aadp_fl.THEOREM1_ORDERS))
  acc.compose(dp_accounting.PoissonSampledDpEvent(
      0.5, dp_accounting.GaussianDpEvent(float(np.float32(sigmas[1])) / 6)), 3)
  assert guaranteed.epsilon(3) == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
  kept = aadp_fl.build_aadp_fl(BUILDER, data, rounds=3, batch_size=6,
                               hp=aadp_fl.AADPFLHparams(noise_on='kept'))
  assert kept.accounting.guaranteed(np.arange(4), state)[0][1] is None


@pytest.mark.parametrize('clients_per_slice', [None, 1])
def test_run_writes_adaptive_quantities_and_both_epsilons(tmp_path, clients_per_slice):
  config = config_lib.RunConfig.create(
      method='aadp_fl', dataset='synthetic', rounds=2, clients=4, clients_per_round=4,
      model='logistic_regression', partition='iid', learning_rate=0.01, batch_size=32,
      clip_norm=0.25, out=str(tmp_path / 'run'), q_user=1.0,
      clients_per_slice=clients_per_slice)
  summary = runner.run(config, log=lambda s: None)
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  for key in ('noise_multiplier_min', 'epsilon_budget_max', 'rms_first_moment_change',
              'rms_second_moment_change', 'nonzero_fraction_after_clip', 'update_norm',
              'clipped_clients', 'budget_increases'):
    assert rows[-1][key] != ''
  for r in rows:  # the rms of the clients' sigmas lies between their min and max
    assert (float(r['noise_multiplier_min']) <= float(r['noise_multiplier_rms'])
            <= float(r['noise_multiplier_max']))
  assert summary['dp_unit'] == 'client-level'
  assert 0 < summary['epsilon_claimed'] <= 4.0 + 1e-6
  assert summary['epsilon_guaranteed'] > summary['epsilon_claimed']


@pytest.mark.parametrize('kw,match', [
    (dict(rho=1.0), 'rho must be in'), (dict(rho=0.0), 'rho must be in'),
    (dict(epsilon_max=3.0), 'epsilon_max must be >='), (dict(q_user=0.0), 'q_user'),
    (dict(noise_scale='sum'), 'noise_scale'), (dict(l=0.0), 'l must be positive'),
    (dict(nadam_epsilon=0.0), 'nadam_epsilon must be positive'),
])
def test_bad_options_are_named(kw, match):
  with pytest.raises(ValueError, match=match):
    aadp_fl.AADPFLHparams(**kw)


def test_bad_clip_norm_is_named(tiny):
  data, *_ = tiny
  with pytest.raises(ValueError, match='clip_norm S must be positive'):
    aadp_fl.build_aadp_fl(BUILDER, data, rounds=3, clip_norm=0.0)


@pytest.mark.parametrize('noise_scale', ['none', 'batch'])
def test_slices_of_one_client_run_the_same_round(tiny, noise_scale):
  """`clients_per_slice=1` (index-tensor reading, no tf.data) gives the per-client round:
  without noise the same model, budgets and sigmas to float rounding; with noise the
  same per-client events stated by the aggregator (its noise is unseeded)."""
  data, *_ = tiny
  kw = dict(rounds=3, batch_size=6, clip_norm=0.05, learning_rate=0.5,
            hp=aadp_fl.AADPFLHparams(l=1e3, rho=0.5, noise_scale=noise_scale))
  cohort = np.array([0, 2, 3])
  out = {}
  for per_slice in (None, 1):
    m = aadp_fl.build_aadp_fl(BUILDER, data, clients_per_slice=per_slice, **kw)
    assert m.clients_per_slice == per_slice
    state = m.initialize()
    new, metrics = m.run_round(state, cohort, 0, 0)
    assert m.accounting.check_round(cohort, new, metrics) is None
    out[per_slice] = (m, new, m.accounting.executed(cohort, new, metrics))
  (m0, s0, e0), (m1, s1, e1) = out[None], out[1]
  assert privacy.releases_differ(e0, e1) is None
  np.testing.assert_allclose(aadp_fl.budgets_of(s1), aadp_fl.budgets_of(s0), rtol=1e-6)
  np.testing.assert_allclose(aadp_fl.noise_multipliers_of(s1),
                             aadp_fl.noise_multipliers_of(s0), rtol=1e-6)
  if noise_scale == 'none':
    for a, b in zip(m0.model_weights(s0).trainable, m1.model_weights(s1).trainable):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match='unset or 1 for aadp_fl'):
    aadp_fl.build_aadp_fl(BUILDER, data, clients_per_slice=2, **kw)
