"""A-DPFL process: state/type wiring, Alg. 4 in the server state, exact zero-noise
rounds, the `paper_order` guarantee, ledger values, resume."""

import csv
import functools
import math

import dp_accounting
import numpy as np
import pytest

from tffdp import config as config_lib
from tffdp import models, privacy, runner
from tffdp.algorithms import a_dpfl, baselines

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


@pytest.fixture()
def tiny(tmp_path):
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (24, *SHAPE), dtype=np.uint8)
  y = np.arange(24) % 10
  parts = [np.arange(i * 6, (i + 1) * 6) for i in range(4)]
  return FederatedData(x, y, parts, cache_dir=str(tmp_path)), (x[:12], y[:12])


def rounds(method, data, n, cohort=(0, 1)):
  round_fn = runner.build_round_computation(method, data)
  state = method.process.initialize()
  outs = []
  for r in range(n):
    out = round_fn(state, [str(c) for c in cohort],
                   [np.array([r, c], np.int64) for c in cohort])
    state = out.state
    outs.append(out)
  return state, outs


def sigma(state):
  return float(state['learning'].client_work['noise_multiplier'])


def test_state_carries_sigma_and_type_signature(tiny):
  data, val = tiny
  m = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=2, noise_multiplier=1.0)
  state_type = m.process.initialize.type_signature.result
  assert str(state_type.member.learning.client_work) == '<noise_multiplier=float32,clip_norm=float32>'
  assert str(state_type.member.noise_adjustment) == \
      '<previous_score=float32,round_num=int32,validation_accuracy=float32>'
  assert m.process.next.type_signature.parameter[0].is_equivalent_to(state_type)
  assert m.process.next.type_signature.result.state.is_equivalent_to(state_type)


def test_executed_events_follow_the_sigma_the_clients_drew_with(tiny):
  data, val = tiny
  m = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=2, noise_multiplier=1.0,
                          hp=a_dpfl.ADPFLHparams(k=0.5, alpha=2.0), clip_norm=1.0)   # sigma halves every round
  state = m.process.initialize()
  cohort = np.array([0, 1])
  for r in range(2):
    declared = m.accounting.guaranteed(cohort, state)
    new_state, metrics = m.run_round(state, cohort, r, 0)
    executed = m.accounting.executed(cohort, new_state, metrics)
    # The round ran at the sigma of the state it started from (1, then 0.5), one
    # Gaussian release per epoch for each client.
    assert [(sorted(c.tolist()), e) for c, e, _ in executed] == [
        ([0, 1], dp_accounting.GaussianDpEvent(0.5 ** r))]
    assert privacy.releases_differ(declared, executed) is None
    if r:   # the post-round sigma (0.25) is not what the clients drew with
      assert privacy.releases_differ(m.accounting.guaranteed(cohort, new_state), executed)
    state = new_state
  paper = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=2,
                                  hp=a_dpfl.ADPFLHparams(dp_sgd='paper_order'))
  _, metrics = paper.run_round(paper.initialize(), cohort, 0, 0)
  assert [r for _, e, r in paper.accounting.executed(cohort, None, metrics) if e is None] == [
      a_dpfl.PAPER_ORDER_REASON]


@pytest.mark.parametrize('alpha,adjust_every,expected', [
    (2.0, 1, [0.5, 0.25, 0.125]),   # any gain <= 2: decay every round
    (-2.0, 1, [1.0, 1.0, 1.0]),     # no gain <= -2: never
    (2.0, 2, [1.0, 0.5, 0.5]),      # checked every second round
])
def test_noise_adjustment_in_server_state(tiny, alpha, adjust_every, expected):
  data, val = tiny
  m = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=2, noise_multiplier=1.0,
                          hp=a_dpfl.ADPFLHparams(k=0.5, alpha=alpha,
                                                 adjust_every=adjust_every), clip_norm=1.0)
  state = m.process.initialize()
  round_fn = runner.build_round_computation(m, data)
  got = []
  for r in range(3):
    out = round_fn(state, ['0', '1'], [np.array([r, 0]), np.array([r, 1])])
    state = out.state
    got.append(sigma(state))
    acc = float(out.metrics['noise_adjustment']['validation_accuracy'])
    assert 0.0 <= acc <= 1.0
  np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_validation_accuracy_matches_keras(tiny):
  data, (xv, yv) = tiny
  m = a_dpfl.build_a_dpfl(BUILDER, data, (xv, yv), clients_per_round=2,
                          noise_multiplier=0.0)
  state, outs = rounds(m, data, 1)
  w = m.process.get_model_weights(state)
  model = BUILDER()
  model.set_weights(list(w.trainable))
  pred = np.argmax(model(xv.astype(np.float32) / 255.0).numpy(), axis=1)
  assert float(outs[0].metrics['noise_adjustment']['validation_accuracy']) == \
      pytest.approx(np.mean(pred == yv))


@pytest.mark.parametrize('dp_sgd', ['clip_then_noise', 'paper_order'])
def test_zero_noise_round_equals_dpfl_client_work(tiny, dp_sgd):
  data, val = tiny
  kw = dict(learning_rate=0.3, batch_size=3, noise_multiplier=0.0, clip_norm=0.01)
  m = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=2,
                          hp=a_dpfl.ADPFLHparams(dp_sgd=dp_sgd), **kw)
  ref = baselines.build_dpfl(BUILDER, data, **kw)
  if dp_sgd == 'paper_order':
    from tffdp.algorithms import common
    from tffdp.algorithms.dp_sgd import build_dp_sgd_client_work
    import tensorflow_federated as tff
    cw = build_dp_sgd_client_work(BUILDER, common.weights_type_of(BUILDER),
                                  data.client_data_type, learning_rate=0.3,
                                  dp_sgd='paper_order', noise_multiplier=0.0, clip_norm=0.01)
    ref.process = common.compose_fedavg_style(BUILDER, cw, tff.aggregators.MeanFactory(), 0)
  s1, _ = rounds(m, data, 2)
  s2, _ = rounds(ref, data, 2)
  for a, b in zip(m.process.get_model_weights(s1).trainable,
                  ref.process.get_model_weights(s2).trainable):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_noise_scale(tiny):
  data, val = tiny
  m = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_round=1, learning_rate=1.0,
                          batch_size=6, noise_multiplier=1000.0, clip_norm=1e-3,
                          hp=a_dpfl.ADPFLHparams(alpha=-1.0))
  round_fn = runner.build_round_computation(m, data)
  state = m.process.initialize()
  w0 = m.process.get_model_weights(state)
  w1 = m.process.get_model_weights(round_fn(state, ['0'], [np.array([0, 0])]).state)
  delta = np.concatenate([(a - b).ravel() for a, b in zip(w0.trainable, w1.trainable)])
  assert np.std(delta) == pytest.approx(1000.0 * 1e-3 / 6, rel=0.03)


TOY = dict(method='a_dpfl', dataset='synthetic', clients=10, clients_per_round=3,
           partition='label_skew', partition_options={'examples_per_client': 60},
           model='logistic_regression', batch_size=20, learning_rate=0.1, num_validation=500,
           checkpoint_every=1, alpha=0.5, k=0.7)


def read_rows(path):
  with open(path / 'metrics.csv') as f:
    return list(csv.DictReader(f))


def test_ledger_matches_dp_accounting_for_participants(tmp_path, monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  cfg = config_lib.RunConfig.create(**TOY, rounds=3, out=str(tmp_path / 'r'))
  summary = runner.run(cfg, log=lambda s: None)
  rows = read_rows(tmp_path / 'r')
  sigmas = [float(r['noise_multiplier']) for r in rows]
  assert sigmas[0] == 1.0 and sigmas[1] < 1.0  # alpha 0.5: early gains are below it
  # top_k picks the same 3 clients every round; each holds 60 examples, B = 20.
  orders = list(privacy.DEFAULT_ORDERS)
  acc_c = dp_accounting.rdp.RdpAccountant(orders)
  acc_g = dp_accounting.rdp.RdpAccountant(orders)
  for s in sigmas:
    acc_c.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(20 / 60, dp_accounting.GaussianDpEvent(s)), 3))
    acc_g.compose(dp_accounting.GaussianDpEvent(s))
  assert summary['epsilon_claimed'] == pytest.approx(acc_c.get_epsilon(1e-5), rel=1e-9)
  assert summary['epsilon_guaranteed'] == pytest.approx(acc_g.get_epsilon(1e-5), rel=1e-9)
  # 3 of 10 clients took part: the mean is 3/10 of the max.
  assert summary['epsilon_claimed_mean'] == pytest.approx(0.3 * summary['epsilon_claimed'])


def test_paper_order_guarantee_is_inf_and_resume_is_exact(tmp_path, monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  cfg = config_lib.RunConfig.create(**TOY, rounds=2, dp_sgd='paper_order',
                             out=str(tmp_path / 'p'))
  summary = runner.run(cfg, log=lambda s: None)
  assert summary['epsilon_guaranteed'] == 'inf'
  assert math.isfinite(summary['epsilon_claimed'])
  assert any('unbounded' in r for r in summary['epsilon_reasons'])

  full = config_lib.RunConfig.create(**TOY, rounds=4, out=str(tmp_path / 'a'))
  runner.run(full, log=lambda s: None)
  part = config_lib.RunConfig.create(**TOY, rounds=2, out=str(tmp_path / 'b'))
  runner.run(part, log=lambda s: None)
  runner.run(config_lib.RunConfig.create(**TOY, rounds=4, out=str(tmp_path / 'b')),
             resume=True, log=lambda s: None)
  a, b = read_rows(tmp_path / 'a'), read_rows(tmp_path / 'b')
  for ra, rb in zip(a, b):
    for col in ('test_accuracy', 'noise_multiplier', 'epsilon_claimed', 'epsilon_guaranteed'):
      assert float(ra[col]) == pytest.approx(float(rb[col]), rel=1e-5, abs=1e-6)


def test_slices_of_one_client_run_the_same_rounds(tiny):
  """`clients_per_slice=1` (`MethodSpec.slices_of_one`): with noise, two rounds of A-DPFL
  bit-identical to one TFF client per client (the same float32 operations and seeded
  noise), sigma and the validation accuracy of Alg. 4 included."""
  data, val = tiny
  kw = dict(clients_per_round=2, noise_multiplier=1.0, learning_rate=0.5, batch_size=4,
            hp=a_dpfl.ADPFLHparams(adjust_every=1))
  plain = a_dpfl.build_a_dpfl(BUILDER, data, val, **kw)
  sliced = a_dpfl.build_a_dpfl(BUILDER, data, val, clients_per_slice=1, **kw)
  state_plain, _ = rounds(plain, data, 2)
  round_fn = runner.build_round_computation(sliced, data)
  state = sliced.process.initialize()
  cohort = np.array([0, 1])
  for r in range(2):
    state = round_fn(state, runner.slice_inputs(
        cohort, [np.array([r, c], np.int64) for c in cohort], 1)).state
  for a, b in zip(plain.process.get_model_weights(state_plain).trainable,
                  sliced.process.get_model_weights(state).trainable):
    np.testing.assert_array_equal(a, b)
  assert sigma(state_plain) == sigma(state)
