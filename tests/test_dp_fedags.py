"""DP-FedAGS: eq. 35 on hand arrays, the sparse-vector selection with negligible noise,
the noise scales, eq. 37's weights, the ledgers against dp_accounting, a run."""

import collections
import math

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import config as config_lib, runner
from tffdp.algorithms import dp_fedags


def test_eq35_threshold_one_indexed_ceilings():
  g = tf.constant([0.3, 0.1, 0.2, 0.4])
  got = [float(dp_fedags.significance_threshold(g, t, 4)) for t in (1, 2, 3, 4)]
  # ceil(t |W| / T) = t; ceil(0.9 * 4) = 4 caps nothing here
  assert got == pytest.approx([0.1, 0.2, 0.3, 0.4])
  g10 = tf.constant(np.arange(1, 11, dtype=np.float32))   # sorted 1..10
  assert float(dp_fedags.significance_threshold(g10, 1, 3)) == 4.0    # ceil(10 / 3) = 4
  assert float(dp_fedags.significance_threshold(g10, 3, 3)) == 9.0    # capped: ceil(9) = 9
  assert float(dp_fedags.significance_threshold(g10, 50, 3)) == 9.0   # rank > |W| capped


def test_kth_smallest_matches_a_sort():
  rng = np.random.default_rng(0)
  for n in (1, 2, 7, 1000):
    for trial in range(6):
      x = np.abs(rng.standard_normal(n)).astype(np.float32)
      if trial % 2:
        x = np.round(x, 1)           # ties
      if trial % 3 == 0:
        x[:n // 2] = 0.0             # a block of zeros
      ranks = sorted({1, n, (n + 1) // 2, max(1, n // 10)})
      got = [float(dp_fedags.kth_smallest(tf.constant(x), k)) for k in ranks]
      assert got == [float(np.sort(x)[k - 1]) for k in ranks]


def test_eq2_sigma():
  # Amendment 1: 8.04 / 4.60 / 2.40 at epsilon 0.1 / 0.2 / 0.5 with Delta_S = 1
  got = [dp_fedags.eq2_noise_multiplier(1.0, e) for e in (0.1, 0.2, 0.5)]
  assert got == pytest.approx([8.04, 4.60, 2.40], abs=0.01)
  assert got[2] == pytest.approx(math.sqrt(2 * (math.log(1.25) + 0.5)) / 0.5)


def test_eq37_weights_sum_to_one_and_favour_the_higher_loss():
  w = dp_fedags.loss_weights(tf.constant([100.0, 300.0]), tf.constant([1.0, 3.0])).numpy()
  np.testing.assert_allclose(w, [0.25, 0.75])   # (100*4 + 400*1) / 3200, (1200 + 1200) / 3200
  w = dp_fedags.loss_weights(tf.constant([100.0, 300.0]), tf.constant([3.0, 1.0])).numpy()
  np.testing.assert_allclose(w, [(400 + 1200) / 3200, (1200 + 400) / 3200])
  assert w.sum() == pytest.approx(1.0)
  np.testing.assert_allclose(
      dp_fedags.loss_weights(tf.constant([1.0, 3.0]), tf.constant([5.0, 1.0]), 'size'),
      [0.25, 0.75])


def _value_type(dim):
  return tff.types.tensorflow_to_type(collections.OrderedDict(
      update=[tf.TensorSpec([dim], tf.float32)], loss=tf.TensorSpec([], tf.float32),
      num_examples=tf.TensorSpec([], tf.float32)))


def _values(updates, losses, sizes):
  return [collections.OrderedDict(update=[np.asarray(u, np.float32)], loss=np.float32(l),
                                  num_examples=np.float32(n))
          for u, l, n in zip(updates, losses, sizes)]


def test_loss_weighted_mean_factory():
  process = dp_fedags.LossWeightedMeanFactory().create(_value_type(2))
  out = process.next(process.initialize(), _values([[1.0, 0.0], [0.0, 1.0]], [1.0, 3.0],
                                                   [100.0, 300.0]))
  np.testing.assert_allclose(out.result[0], [0.25, 0.75], rtol=1e-6)
  assert float(out.measurements['loss_sum']) == 4.0
  size = dp_fedags.LossWeightedMeanFactory('size').create(_value_type(2))
  out = size.next(size.initialize(), _values([[1.0, 0.0], [0.0, 1.0]], [5.0, 1.0],
                                             [100.0, 300.0]))
  np.testing.assert_allclose(out.result[0], [0.25, 0.75], rtol=1e-6)
  assert float(out.measurements['loss_sum']) == 0.0   # size weights never read the losses


def test_loss_weighted_mean_weights_and_its_client_bound():
  # gamma = (n_k L + n L_k) / (2 n L) with n = 600, L = 6: (0.25, 0.75 / 2 + 0.5 / 2...)
  losses, sizes = [1.0, 2.0, 3.0], [100.0, 200.0, 300.0]
  gamma = (np.array(sizes) * 6.0 + 600.0 * np.array(losses)) / (2 * 600.0 * 6.0)
  updates = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
  process = dp_fedags.LossWeightedMeanFactory(max_clients=3).create(_value_type(2))
  out = process.next(process.initialize(), _values(updates, losses, sizes))
  np.testing.assert_allclose(out.result[0], gamma @ np.array(updates), rtol=1e-6)
  assert float(out.measurements['weight_min']) == pytest.approx(gamma.min(), rel=1e-6)
  assert float(out.measurements['weight_max']) == pytest.approx(gamma.max(), rel=1e-6)
  assert float(out.measurements['num_examples']) == 600.0
  small = dp_fedags.LossWeightedMeanFactory(max_clients=2).create(_value_type(2))
  with pytest.raises(Exception, match='more clients than max_clients'):
    small.next(small.initialize(), _values(updates, losses, sizes))
  with pytest.raises(ValueError, match='max_clients must be at least 1'):
    dp_fedags.LossWeightedMeanFactory(max_clients=0)


def test_svt_selection_with_negligible_noise_is_the_threshold_test():
  # epsilon huge: every Laplace and Gaussian scale ~1e-12, so the test is |g'_j| >= lambda_t
  g = np.array([0.05, 0.4, 0.1, 0.3, 0.2, 0.15, 0.25, 0.35, 0.01, 0.02], np.float32)
  factory = dp_fedags.SignificantGradientFactory(1.0, 1e12, 1e12, 1e12, 1e12, rounds=10,
                                                 delta_s='clip')
  process = factory.create(_value_type(10))
  state = process.initialize()
  norm = np.linalg.norm(g)   # < 1: not clipped
  for t in (1, 4, 9):
    while int(state['round']) < t - 1:
      state = process.next(state, _values([g], [1.0], [10.0])).state
    out = process.next(state, _values([g], [1.0], [10.0]))
    lam = np.sort(np.abs(g))[min(math.ceil(t * 10 / 10), 9) - 1]
    m = out.measurements['significant_gradient']
    assert float(m['threshold']) == pytest.approx(lam)
    assert float(m['significant_fraction']) == pytest.approx(np.mean(np.abs(g) >= lam))
    # one client: weight 1; eq. 2 noise std sqrt(2 (ln 1.25 + eps)) / eps ~ 1.4e-6
    np.testing.assert_allclose(out.result[0], g, atol=1e-5)
    assert norm < 1 and int(m['clipped']) == 0


@pytest.mark.parametrize('perturbation,kappa', [('gaussian', 1.0), ('laplace', 1.0),
                                                ('gaussian', 30.0)])
def test_noise_scales(perturbation, kappa):
  dim, n_k, lr = 100_000, 50.0, 0.1
  factory = dp_fedags.SignificantGradientFactory(
      1.0, 0.5, 0.025, 0.025, 0.45, rounds=10, learning_rate=lr, perturbation=perturbation,
      perturb_all=True, delta_s_scale=kappa)
  process = factory.create(_value_type(dim))
  out = process.next(process.initialize(), _values([np.zeros(dim)], [1.0], [n_k]))
  ds = kappa * 2 * lr * 1.0 / n_k           # Delta_S = kappa 2 eta C / n_k (Amendment 1)
  noise = np.asarray(out.result[0])
  if perturbation == 'gaussian':
    expected = dp_fedags.eq2_noise_multiplier(ds, 0.5) * 1.0   # sigma C
    assert noise.std() == pytest.approx(expected, rel=0.02)
  else:
    # Laplace scale b = Delta_S / epsilon: E|z| = b (sd of the mean b / sqrt(dim), 0.3%
    # here), and var = 2 b^2 (sd of the sample variance 0.7% of it; bound about 4 sd). A
    # CI draw once came out 3.8% high: one coordinate at 87.3 b, the float32 sampler's
    # atom (see test_cosafed.test_laplace_noise_has_no_float32_atom_in_its_tail).
    assert np.abs(noise).mean() == pytest.approx(ds / 0.45, rel=0.02)
    assert noise.var() == pytest.approx(2 * (ds / 0.45) ** 2, rel=0.03)
  assert float(out.measurements['significant_gradient']['noise_std']) == pytest.approx(
      expected if perturbation == 'gaussian' else math.sqrt(2) * ds / 0.45, rel=1e-5)


def _run(tmp_path, name, **kw):
  config = config_lib.RunConfig.create(
      method='dp_fedags', dataset='synthetic', rounds=3, clients=6, clients_per_round=3,
      model='logistic_regression', partition='iid', learning_rate=0.1, batch_size=32,
      clip_norm=1.0, delta=1e-3, out=str(tmp_path / name), **kw)
  return runner.run(config, log=lambda s: None), config


def test_ledgers(tmp_path):
  summary, _ = _run(tmp_path, 'literal', epsilon=0.2)
  assert summary['epsilon_claimed'] == pytest.approx(0.2)   # the paper's per-round epsilon
  assert summary['epsilon_guaranteed'] == 'inf'
  assert dp_fedags.UNPERTURBED_REASON in summary['epsilon_reasons']
  summary, _ = _run(tmp_path, 'loss', epsilon=0.2, perturb_all=True)
  assert dp_fedags.LOSS_REASON in summary['epsilon_reasons']
  summary, config = _run(tmp_path, 'dp', epsilon=0.2, perturb_all=True, weighting='size')
  with open(tmp_path / 'dp' / 'metrics.csv') as f:
    import csv
    rows = list(csv.DictReader(f))
  assert rows[-1]['significant_fraction'] != '' and rows[-1]['weight_min'] != ''
  assert 0 < summary['epsilon_guaranteed'] < math.inf   # the events: see the next test


def test_guaranteed_event_matches_dp_accounting(tmp_path):
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  shape = (28, 28, 1)
  x = rng.integers(0, 256, (40, *shape), dtype=np.uint8)
  y = np.arange(40) % 10
  parts = [np.arange(0, 10), np.arange(10, 40)]
  data = FederatedData(x, y, parts, cache_dir=str(tmp_path))
  import functools
  from tffdp import models
  builder = functools.partial(models.build_keras_model, 'logistic_regression', shape, 10)
  m = dp_fedags.build_dp_fedags(
      builder, data, rounds=3, learning_rate=0.1,
      hp=dp_fedags.DPFedAGSHparams(epsilon=0.5, perturb_all=True, weighting='size'))
  state = m.initialize()
  releases = m.accounting.guaranteed(np.array([0, 1]), state)
  events = {int(c[0]): e for c, e, _ in releases}
  # client 0: n = 10, Delta_S = 2 * 0.1 / 10 = 0.02, noise std eq2(0.02, 0.5) * C on C = 1
  assert events[0] == dp_accounting.GaussianDpEvent(dp_fedags.eq2_noise_multiplier(0.02, 0.5))
  assert events[1] == dp_accounting.GaussianDpEvent(
      dp_fedags.eq2_noise_multiplier(2 * 0.1 / 30, 0.5))
  claimed = m.accounting.claimed(np.array([0]), state)
  assert len(claimed) == 1 and len(claimed[0][0]) == 2   # every client charged once
  assert claimed[0][1] == dp_accounting.LaplaceDpEvent(1 / 0.5)


def _three_clients(tmp_path):
  """`(data, builder)`: three clients of 10, 30 and 30 random 28x28 images, and a
  logistic regression on them."""
  import functools
  from tffdp import models
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  shape = (28, 28, 1)
  x = rng.integers(0, 256, (70, *shape), dtype=np.uint8)
  data = FederatedData(x, np.arange(70) % 10,
                       [np.arange(0, 10), np.arange(10, 40), np.arange(40, 70)],
                       cache_dir=str(tmp_path))
  return data, functools.partial(models.build_keras_model, 'logistic_regression', shape, 10)


@pytest.mark.parametrize('perturbation', ['gaussian', 'laplace'])
def test_executed_events_are_the_declared_ones(tmp_path, perturbation):
  from tffdp import privacy
  data, builder = _three_clients(tmp_path)
  def build(**options):
    return dp_fedags.build_dp_fedags(builder, data, rounds=3, hp=dp_fedags.DPFedAGSHparams(
        **dict(dict(perturb_all=True, weighting='size', perturbation=perturbation), **options)))
  m = build(epsilon=0.5)
  cohort = np.array([2, 0, 1])
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  assert m.accounting.check_round(cohort, state, metrics) is None
  executed = m.accounting.executed(cohort, state, metrics)
  ds = {0: 2 * 0.1 / 10, 1: 2 * 0.1 / 30, 2: 2 * 0.1 / 30}   # Delta_S (lr 0.1, C = 1)
  by_client = {int(c): e for members, e, _ in executed for c in members}
  for c in cohort:
    if perturbation == 'gaussian':   # std sigma C on L2 sensitivity C
      expected = dp_accounting.GaussianDpEvent(dp_fedags.eq2_noise_multiplier(ds[c], 0.5))
    else:                            # scale Delta_S / epsilon_3 on L1 sensitivity sqrt(|W|) C
      expected = dp_accounting.LaplaceDpEvent(ds[c] / (0.9 * 0.5) / math.sqrt(7850))
    assert type(by_client[c]) is type(expected)
    np.testing.assert_allclose(by_client[c].noise_multiplier, expected.noise_multiplier,
                               rtol=1e-6)
  assert len(executed) == 2   # clients 1 and 2 (30 examples each) share one release
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, state), executed) is None
  other = build(epsilon=0.4)   # declares other events for the same round
  assert 'client' in privacy.releases_differ(other.accounting.guaranteed(cohort, state),
                                             executed)
  # a cohort the factory did not state events for (client 0 and not 1)
  assert all(e is None for _, e, _ in m.accounting.executed(np.array([0, 0, 2]), state, metrics))
  loss = build(epsilon=0.5, weighting='loss')
  assert [r for _, _, r in loss.accounting.executed(cohort, state, metrics)] == [
      dp_fedags.LOSS_REASON]


@pytest.mark.parametrize('kw,reason', [
    (dict(selection='svt'), dp_fedags.UNPERTURBED_REASON),
    (dict(selection='top'), dp_fedags.TOP_REASON),
    (dict(selection='all', perturbation='binomial'), dp_fedags.BINOMIAL_REASON),
    (dict(selection='all', delta_s_scale=0.0), dp_fedags.NO_NOISE_REASON),
    (dict(selection='svt', perturb_all=True), ''),
])
def test_factory_states_no_guarantee_with_its_reason(kw, reason):
  factory = dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.025, 0.025, 0.45, rounds=10,
                                                 max_clients=4, **kw)
  process = factory.create(_value_type(50))
  out = process.next(process.initialize(),
                     _values([np.full(50, 0.01), np.full(50, 0.02)], [1.0, 1.0], [20.0, 40.0]))
  events = factory.executed_events(out.measurements['significant_gradient'])
  assert sorted(n for n, _, _ in events) == [20.0, 40.0]
  assert [r for _, _, r in events] == [reason, reason]
  if reason:
    assert all(e is None for _, e, _ in events)
  else:
    assert {n: e.noise_multiplier for n, e, _ in events} == pytest.approx(
        {n: dp_fedags.eq2_noise_multiplier(2 * 0.1 / n, 0.5) for n in (20.0, 40.0)}, rel=1e-6)
  with pytest.raises(ValueError, match='max_clients'):
    dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.025, 0.025, 0.45, rounds=10,
                                         **kw).executed_events({})
  small = dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.025, 0.025, 0.45, rounds=10,
                                               max_clients=1, **kw)
  out = small.create(_value_type(50)).next(
      process.initialize(), _values([np.zeros(50)] * 2, [1.0, 1.0], [20.0, 40.0]))
  with pytest.raises(ValueError, match='more than the max_clients=1'):
    small.executed_events(out.measurements['significant_gradient'])


def test_clip_only_control_releases_the_clipped_gradient_exactly():
  g = np.full(400, 0.1, np.float32)        # norm 2 > C = 1: clipped to norm 1
  factory = dp_fedags.SignificantGradientFactory(
      1.0, 0.1, 0.005, 0.005, 0.09, rounds=10, delta_s_scale=0.0, selection='all')
  process = factory.create(_value_type(400))
  out = process.next(process.initialize(), _values([g], [1.0], [30.0]))
  np.testing.assert_allclose(np.asarray(out.result[0]), g / 2.0, rtol=1e-6, atol=0)
  assert float(out.measurements['significant_gradient']['noise_std']) == 0.0
  # DP-FedAGS itself: the SVT noise is 0 too, so its test is |g'_j| >= lambda_t exactly
  ramp = np.linspace(0.01, 0.04, 400).astype(np.float32)   # norm < 1: not clipped
  svt = dp_fedags.SignificantGradientFactory(
      1.0, 0.1, 0.005, 0.005, 0.09, rounds=10, delta_s_scale=0.0).create(_value_type(400))
  out = svt.next(svt.initialize(), _values([ramp], [1.0], [30.0]))
  np.testing.assert_allclose(np.asarray(out.result[0]), ramp, rtol=1e-6, atol=0)
  sig = out.measurements['significant_gradient']
  lam = float(dp_fedags.significance_threshold(tf.constant(ramp), 1, 10))
  assert float(sig['threshold']) == pytest.approx(lam)
  assert float(sig['significant_fraction']) == pytest.approx(np.mean(ramp >= lam))
  assert 0 < float(sig['significant_fraction']) < 1


def test_clip_only_control_is_not_a_guarantee(tmp_path):
  summary, _ = _run(tmp_path, 'clip_only', epsilon=0.2, delta_s_scale=0.0, perturb_all=True,
                    weighting='size')
  assert summary['epsilon_guaranteed'] == 'inf'
  assert dp_fedags.NO_NOISE_REASON in summary['epsilon_reasons']


@pytest.mark.parametrize('kw,match', [
    (dict(epsilon_1_fraction=0.6, epsilon_2_fraction=0.5), 'sum below 1'),
    (dict(epsilon=0.0), 'epsilon must be positive'),
    (dict(delta_s='both'), 'delta_s must be one of'),
    (dict(delta_s_scale=-1.0), 'delta_s_scale must be finite and >= 0'),
    (dict(delta_s='clip', delta_s_scale=3.0), 'scales delta_s=scaled only')])
def test_bad_options_are_named(kw, match):
  with pytest.raises(ValueError, match=match):
    dp_fedags.DPFedAGSHparams(**kw)


def test_snlc_top_selection_and_dp_fedavg_all_selection():
  g = np.arange(1, 21, dtype=np.float32) / 100.0   # |g| = 0.01 .. 0.20, norm < 1
  top = dp_fedags.SignificantGradientFactory(1.0, 1e12, 1e12, 1e12, 1e12, rounds=5,
                                             delta_s='clip', selection='top',
                                             top_fraction=0.1).create(_value_type(20))
  m = top.next(top.initialize(), _values([g], [1.0], [10.0])).measurements
  sig = m['significant_gradient']
  assert float(sig['significant_fraction']) == pytest.approx(0.1)   # the two largest
  assert float(sig['threshold']) == pytest.approx(0.19)
  everything = dp_fedags.SignificantGradientFactory(
      1.0, 0.5, 0.025, 0.025, 0.45, rounds=5, selection='all').create(_value_type(20))
  sig = everything.next(everything.initialize(),
                        _values([g], [1.0], [10.0])).measurements['significant_gradient']
  assert float(sig['significant_fraction']) == 1.0
  with pytest.raises(ValueError, match='selection must be one of'):
    dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.1, 0.1, 0.3, 5, selection='random')


def test_binomial_perturbation_quantises_and_adds_theorem1_noise():
  from tffdp.algorithms import cpsgd
  dim, n_k, lr, levels = 50_000, 50.0, 0.1, 2 ** 10
  g = np.full(dim, 0.5 / math.sqrt(dim), np.float32)          # ||g|| = 0.5 < C
  factory = dp_fedags.SignificantGradientFactory(
      1.0, 0.5, 0.025, 0.025, 0.45, rounds=10, learning_rate=lr, selection='all',
      perturbation='binomial', quantization_levels=levels, delta=1e-3,
      inner=dp_fedags.LossWeightedMeanFactory('size'))
  process = factory.create(_value_type(dim))
  out = process.next(process.initialize(), _values([g], [1.0], [n_k]))
  ds, step = 2 * lr / n_k, 2.0 / (levels - 1)
  m = cpsgd.smallest_num_trials(0.5, 0.5, 1e-3, step, dim, math.sqrt(dim) * ds, ds, ds)
  sig = out.measurements['significant_gradient']
  assert abs(float(sig['num_trials']) - m) <= 1
  noise = np.asarray(out.result[0], np.float64) - g
  assert noise.mean() == pytest.approx(0.0, abs=5 * step * math.sqrt(m / 4 / dim))
  # std of s (Bin(m, 1/2) - m/2) plus the rounding's (at most s / 2)
  assert noise.std() == pytest.approx(step * math.sqrt(m / 4), rel=0.02)
  # quantised, then s (Bin(m, 1/2) - m/2): the output sits on the grid -C + j s shifted
  # by s (m/2 mod 1)
  out_grid = (np.asarray(out.result[0], np.float64) + 1.0) / step - m / 2
  np.testing.assert_allclose(out_grid, np.round(out_grid), atol=2e-3)
  with pytest.raises(ValueError, match='selection must be all'):
    dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.1, 0.1, 0.3, 5, selection='svt',
                                         perturbation='binomial')
  with pytest.raises(ValueError, match='quantization_levels'):
    dp_fedags.SignificantGradientFactory(1.0, 0.5, 0.1, 0.1, 0.3, 5, selection='all',
                                         perturbation='binomial', quantization_levels=1)


@pytest.mark.parametrize('method,finite', [('dp_fedsnlc', False), ('dp_fedavg_ags', True),
                                           ('cpsgd', False)])
def test_reconstructed_baselines_run(tmp_path, method, finite):
  config = config_lib.RunConfig.create(
      method=method, dataset='synthetic', rounds=2, clients=6, clients_per_round=3,
      model='logistic_regression', partition='iid', learning_rate=0.1, batch_size=32,
      clip_norm=1.0, delta=1e-3, out=str(tmp_path / method), epsilon=0.5)
  summary = runner.run(config, log=lambda s: None)
  assert summary['epsilon_claimed'] == pytest.approx(0.5)
  assert (summary['epsilon_guaranteed'] != 'inf') == finite
  if method == 'dp_fedsnlc':
    assert dp_fedags.TOP_REASON in summary['epsilon_reasons']
  if method == 'cpsgd':
    assert dp_fedags.BINOMIAL_REASON in summary['epsilon_reasons']
    with open(tmp_path / method / 'config.json') as f:
      text = f.read()
    assert 'num_trials_median' in text and 'quantization_levels' in text


def test_cpsgd_refuses_the_clip_only_control_before_any_run():
  with pytest.raises(ValueError, match='no cpSGD'):
    dp_fedags.CPSGDHparams(delta_s_scale=0.0)
  assert dp_fedags.CPSGDHparams(delta_s_scale=3.0).delta_s_scale == 3.0


@pytest.mark.parametrize('method,hp,exact', [
    ('dp_fedavg_ags', dp_fedags.BaselineHparams(epsilon=0.5, delta_s_scale=0.0), True),
    ('dp_fedags', dp_fedags.DPFedAGSHparams(epsilon=0.5), False),
])
def test_slices_of_one_client_run_the_same_round(tmp_path, method, hp, exact):
  """`clients_per_slice=1` (each client's batches read by index tensors, no tf.data): the
  same DP events as one TFF client per client, over two rounds of two epochs whose
  batches straddle the epochs; without noise (the clip-only control) the same model and
  training losses, with noise (unseeded `tf.random`) the same first-round loss."""
  from tffdp import privacy
  data, builder = _three_clients(tmp_path)
  out = {}
  for per_slice in (None, 1):
    m = dp_fedags.build_dp_fedags(builder, data, rounds=3, method=method, hp=hp,
                                  batch_size=7, local_epochs=2, clients_per_round=3,
                                  clients_per_slice=per_slice)
    assert m.clients_per_slice == per_slice
    state, rows = m.initialize(), []
    for round_num, cohort in enumerate((np.array([2, 0, 1]), np.array([1, 2, 0]))):
      state, metrics = m.run_round(state, cohort, round_num, 5)
      assert m.accounting.check_round(cohort, state, metrics) is None
      rows.append((m.train_loss(metrics) if m.train_loss else
                   float(metrics['client_work']['train']['loss_sum']),
                   m.accounting.executed(cohort, state, metrics)))
    out[per_slice] = (np.concatenate([np.ravel(t) for t in
                                      m.model_weights(state).trainable]), rows)
  if exact:
    np.testing.assert_allclose(out[1][0], out[None][0], rtol=1e-5, atol=1e-6)
    assert np.linalg.norm(out[None][0]) > 0
  else:
    assert not np.allclose(out[1][0], out[None][0], rtol=1e-5, atol=1e-6)
  for i, ((loss, events), (loss_1, events_1)) in enumerate(zip(out[None][1], out[1][1])):
    if exact or i == 0:
      assert loss_1 == pytest.approx(loss, rel=1e-5)
    assert privacy.releases_differ(events, events_1) is None
  with pytest.raises(ValueError, match='unset or 1 for dp_fedags'):
    dp_fedags.build_dp_fedags(builder, data, rounds=3, hp=hp if method == 'dp_fedags' else
                              None, clients_per_slice=2)
