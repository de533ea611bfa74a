"""cosAFed and its reconstructed baselines: formulas 1-6 on hand-computed inputs, the
budget rules, the Laplace upload factory (L1 clip, noise scale, exact zero-noise round),
the Laplace ledger against dp_accounting, budget counts of scripted runs."""

import collections
import csv
import dataclasses
import functools

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, config as config_lib, models, privacy, runner
from tffdp.algorithms import cosafed
from tffdp.data import partitioners

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


@pytest.fixture()
def tiny(tmp_path):
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (40, *SHAPE), dtype=np.uint8)
  y = np.arange(40) % 10
  parts = [np.arange(0, 6), np.arange(6, 12), np.arange(12, 18), np.arange(18, 30)]
  validation = (x[30:], y[30:])
  return FederatedData(x[:30], y[:30], parts, cache_dir=str(tmp_path)), x, y, parts, validation


# ----- formulas 1-6 -------------------------------------------------------------------

def test_formula1_adjustment_coefficient():
  p = cosafed.adjustment_coefficient(tf.constant([0.9, -0.2, 1.0, 0.0]), 100, 3,
                                     tf.constant([0.01, 0.01, 0.1, 0.5]))
  # |1 - 0.9 * 100/3 * 0.01| = 0.7; negative cosine -> 1; |1 - 100/3 * 0.1| = 2.333 (p > 1)
  np.testing.assert_allclose(p.numpy(), [0.7, 1.0, 7 / 3, 1.0], rtol=1e-6)


def _score(acc, loss, count, rounds=10, n=3, reading='formula4'):
  return [float(v) for v in cosafed.score(tf.constant(acc, tf.float32),
                                          tf.constant(loss, tf.float32), count,
                                          rounds=rounds, cohort_size=n, score_acc=reading)]


def test_score_formulas_2_to_5():
  # t = 5 of T = 10: score_t = 1. Last three accuracies .5 .6 .7: mean .6 < .7 -> 0.
  # loss_{t-1} = .8 >= loss_{t-2} = .7 -> 1.
  assert _score([0.4, 0.5, 0.6, 0.7], [0.7, 0.8], 4) == [60.0, 1.0, 0.0, 1.0]
  # accuracy fell: mean(.7, .6, .5) = .6 >= .5 -> 1; loss fell -> 0; t = 2 of 10: 0.4.
  s, s_loss, s_acc, s_t = _score([0.0, 0.7, 0.6, 0.5], [0.8, 0.7], 1)
  assert (s_loss, s_acc, s_t) == (0.0, 1.0, pytest.approx(0.4))
  assert s == pytest.approx(52.0)


def test_accuracy_window_starts_with_fewer_than_n_rounds():
  # count = 2 (t = 3): the window holds acc_1, acc_2 only; the zero padding is not read.
  # mean(.9, .5) = .7 >= .5 -> 1 (with the padding the mean of 3 would be .467 < .5).
  assert _score([0.0, 0.0, 0.9, 0.5], [1.0, 0.9], 2)[2] == 1.0
  # Alg. 2 sums N + 1 accuracies without dividing: always >= the last one.
  assert _score([0.1, 0.2, 0.3, 0.9], [1.0, 0.9], 4, reading='alg2')[2] == 1.0
  assert _score([0.1, 0.2, 0.3, 0.9], [1.0, 0.9], 4)[2] == 0.0
  # Nothing recorded at t = 1; no loss comparison before t = 3 (Amendment 4).
  assert _score([0.0] * 4, [0.0, 0.0], 0)[1:3] == [0.0, 0.0]
  assert _score([0.0] * 4, [0.0, 0.0], 1)[1] == 0.0


def _inputs(score, cosine=1.0, fraction=0.01, global_cosine=1.0):
  return cosafed.BudgetInputs(epsilon=100.0, cosine=tf.constant(cosine),
                              data_fraction=tf.constant(fraction), num_clients=100,
                              cohort_size=3, score=tf.constant(score),
                              global_cosine=tf.constant(global_cosine))


def test_formula6_gates_at_score_50_and_p_above_1():
  # score exactly 50: no adjustment (formula 6 needs score > 50).
  assert float(cosafed.cosafed_rule(_inputs(50.0))) == 100.0
  assert float(cosafed.cosafed_rule(_inputs(50.001))) == pytest.approx(100 * (1 - 1 / 3))
  # p = |1 - 100/3 * 0.1| = 2.33 > 1: the budget stays epsilon.
  assert float(cosafed.cosafed_rule(_inputs(90.0, fraction=0.1))) == 100.0
  # negative cosine: p = 1 -> epsilon.
  assert float(cosafed.cosafed_rule(_inputs(90.0, cosine=-0.5))) == 100.0


def test_baseline_budget_rules():
  assert float(cosafed.lapfed_rule(_inputs(90.0))) == 100.0
  adpfl = cosafed.adpfl_rule(0.95)
  assert float(adpfl(_inputs(90.0))) == pytest.approx(95.0)
  assert float(adpfl(_inputs(50.0))) == 100.0
  assert float(cosafed.cosfed_rule(_inputs(90.0, global_cosine=0.2))) == pytest.approx(180.0)


# ----- the upload factory -------------------------------------------------------------

def _factory_round(factory, updates, cosines, epsilons):
  value_type = tff.types.tensorflow_to_type(collections.OrderedDict(
      update=[tf.TensorSpec([len(updates[0])], tf.float32)],
      cosine=tf.TensorSpec([], tf.float32), epsilon=tf.TensorSpec([], tf.float32)))
  process = factory.create(value_type)
  values = [collections.OrderedDict(update=[np.asarray(u, np.float32)], cosine=np.float32(c),
                                    epsilon=np.float32(e))
            for u, c, e in zip(updates, cosines, epsilons)]
  return process.next(process.initialize(), values)


def test_zero_noise_upload_is_the_mean_of_cosine_scaled_clipped_updates():
  updates = [[1.0, -3.0, 0.0], [0.5, 0.5, 0.5]]
  out = _factory_round(aggregators.LaplaceUploadFactory(1.0, l1_clip=2.0),
                       updates, [0.5, 1.0], [np.inf, np.inf])
  # client 0: 0.5 * u = [.5, -1.5, 0] (L1 2.0, unclipped); client 1: L1 1.5, unclipped.
  np.testing.assert_allclose(out.result[0], [0.5, -0.5, 0.25], rtol=1e-6)
  out = _factory_round(aggregators.LaplaceUploadFactory(1.0, l1_clip=1.0),
                       updates, [0.5, 1.0], [np.inf, np.inf])
  # both scaled to L1 1: [.25, -.75, 0] and [1/3, 1/3, 1/3]
  np.testing.assert_allclose(out.result[0], [(0.25 + 1 / 3) / 2, (-0.75 + 1 / 3) / 2, 1 / 6],
                             rtol=1e-6)
  m = out.measurements['laplace_upload']
  assert int(m['l1_clipped']) == 2 and int(m['clients']) == 2
  unscaled = _factory_round(aggregators.LaplaceUploadFactory(1.0, scale_by_cosine=False),
                            updates, [0.5, 1.0], [np.inf, np.inf])
  np.testing.assert_allclose(unscaled.result[0], np.mean(updates, axis=0), rtol=1e-6)


def test_laplace_noise_has_variance_two_b_squared():
  x = aggregators.laplace_noise([400_000], tf.constant(0.5)).numpy()
  assert np.var(x) == pytest.approx(2 * 0.25, rel=0.02)
  assert np.mean(np.abs(x)) == pytest.approx(0.5, rel=0.02)   # E|Lap(b)| = b
  # Through the factory: Delta_f / epsilon' = 2 / 4 = 0.5 on one client's zero update.
  out = _factory_round(aggregators.LaplaceUploadFactory(2.0), [np.zeros(200_000)], [1.0], [4.0])
  assert np.var(out.result[0]) == pytest.approx(0.5, rel=0.03)
  zero = _factory_round(aggregators.LaplaceUploadFactory(2.0), [np.zeros(3)], [1.0], [0.0])
  assert int(zero.measurements['laplace_upload']['zero_budget_clients']) == 1
  assert not np.all(np.isfinite(zero.result[0]))


def test_laplace_noise_has_no_float32_atom_in_its_tail():
  # The float32 sampler this replaced mapped a uniform draw of exactly 0 to -log(tiny) =
  # 87.3: an atom at 87.3 b with probability 2^-23 per draw, hit by about 9 in 10 calls
  # of this size (one such coordinate put a 100,000-draw variance 3.8% high in CI). For
  # Lap(1), P(max |z| > 40 over 10^7 draws) is about 4e-11.
  x = aggregators.laplace_noise([10_000_000], tf.constant(1.0)).numpy()
  assert x.dtype == np.float32
  assert np.max(np.abs(x)) < 40.0
  assert np.max(np.abs(x)) > 10.0        # the tail is there: E max is about ln(10^7) = 16


def test_l1_clip_scales_to_the_bound():
  clipped, norm = aggregators.l1_clip([tf.constant([3.0, -1.0]), tf.constant([[4.0]])], 2.0)
  assert float(norm) == 8.0
  np.testing.assert_allclose(clipped[0].numpy(), [0.75, -0.25])
  np.testing.assert_allclose(clipped[1].numpy(), [[1.0]])


# ----- the process ---------------------------------------------------------------------

def test_zero_noise_round_matches_a_numpy_keras_reference(tiny, full_batch_delta):
  data, x, y, parts, validation = tiny
  m = cosafed.build_cosafed(BUILDER, data, validation, method='cosafed', rounds=4,
                            cohort_size=3, batch_size=12,
                            hp=cosafed.CosAFedHparams(epsilon=np.inf),
                            learning_rate=0.5)
  state = m.initialize()
  w0 = [np.array(w) for w in m.model_weights(state).trainable]
  cohort = np.array([0, 1, 3])
  new_state, metrics = m.run_round(state, cohort, 0, 0)
  model = BUILDER()
  scaled = []
  for c in cohort:
    delta = full_batch_delta(model, w0, x[parts[c]], y[parts[c]], 0.5)
    a = np.concatenate([w.ravel() for w in w0])
    b = np.concatenate([(w - d).ravel() for w, d in zip(w0, delta)])
    d = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    scaled.append([d * u for u in delta])
  expected = [w - np.mean([s[i] for s in scaled], axis=0) for i, w in enumerate(w0)]
  for ours, theirs in zip(m.model_weights(new_state).trainable, expected):
    np.testing.assert_allclose(np.array(ours), theirs, rtol=1e-4, atol=1e-6)
  # the server recorded the validation accuracy/loss of A^1 into its history
  history = new_state['history']
  assert int(history['count']) == 1
  assert float(history['recent_accuracy'][-1]) == pytest.approx(
      float(metrics['server']['validation_accuracy']))
  assert np.all(metrics['client_epsilons'] == np.inf)


@pytest.mark.parametrize('method', ['cosafed', 'cosfed'])
def test_cohort_slices_of_one_client_give_the_same_rounds(tiny, method):
  """Without noise, two rounds whose batches straddle epochs: the same models, signals and
  epsilon' with each client's batches read by index tensors (slices of one client) as
  from its `tf.data` pipeline."""
  data, *_, validation = tiny
  hp = cosafed.HPARAMS[method](epsilon=np.inf)
  build = functools.partial(cosafed.build_cosafed, BUILDER, data, validation, method=method,
                            rounds=4, cohort_size=3, batch_size=5, local_epochs=2, hp=hp,
                            learning_rate=0.3)
  runs = []
  for clients_per_slice in (None, 1):
    m = build(clients_per_slice=clients_per_slice)
    assert m.clients_per_slice == clients_per_slice
    state, out = m.initialize(), []
    for r, cohort in enumerate([np.array([0, 1, 3]), np.array([1, 2, 3])]):
      state, metrics = m.run_round(state, cohort, r, 7)
      out.append((m.model_weights(state).trainable, metrics['client_epsilons'],
                  metrics['signals'], metrics['client_work']['train']))
    runs.append(out)
  for per_client, sliced in zip(*runs):
    for a, b in zip(tf.nest.flatten(per_client), tf.nest.flatten(sliced)):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


def test_cohort_slices_hold_one_client_and_run_through_the_runner(tiny, tmp_path):
  data, *_, validation = tiny
  with pytest.raises(ValueError, match='clients_per_slice must be unset or 1'):
    cosafed.build_cosafed(BUILDER, data, validation, method='lapfed', rounds=2,
                          cohort_size=2, clients_per_slice=2)
  config = config_lib.RunConfig.create(
      method='lapfed', dataset='synthetic', rounds=3, clients=4, clients_per_round=2,
      model='logistic_regression', partition='iid', learning_rate=0.05, batch_size=16,
      out=str(tmp_path / 'run'), epsilon=100.0, clients_per_slice=1)
  summary = runner.run(config, log=lambda s: None)
  assert summary['epsilon_claimed_mean'] * 4 == pytest.approx(3 * 2 * 100.0)
  with pytest.raises(ValueError, match='clients_per_slice must be unset or 1'):
    runner.run(dataclasses.replace(config, clients_per_slice=2, out=str(tmp_path / 'b')),
               log=lambda s: None)


def test_adpfl_budget_count_of_a_scripted_run_equals_the_hand_count(tmp_path):
  config = config_lib.RunConfig.create(
      method='adpfl', dataset='synthetic', rounds=6, clients=6, clients_per_round=2,
      model='logistic_regression', partition='iid', learning_rate=0.05, batch_size=16,
      out=str(tmp_path / 'run'), epsilon=10.0, sensitivity=1.0, l1_clip=1.0)
  summary = runner.run(config, log=lambda s: None)
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  hand = sum(2 * (0.95 * 10 if float(r['score']) > 50 else 10.0) for r in rows)
  assert any(float(r['score']) > 50 for r in rows) and any(float(r['score']) <= 50 for r in rows)
  assert sum(float(r['epsilon_prime_sum']) for r in rows) == pytest.approx(hand, rel=1e-6)
  assert summary['epsilon_claimed_mean'] * 6 == pytest.approx(hand, rel=1e-6)
  assert summary['epsilon_guaranteed'] <= summary['epsilon_claimed']   # clipped: finite
  assert summary['dp_unit'] == 'client-level'


def test_lapfed_paper_literal_run_claims_the_sum_and_guarantees_nothing(tmp_path):
  config = config_lib.RunConfig.create(
      method='lapfed', dataset='synthetic', rounds=3, clients=4, clients_per_round=2,
      model='logistic_regression', partition='iid', learning_rate=0.05, batch_size=16,
      out=str(tmp_path / 'run'), epsilon=100.0)
  summary = runner.run(config, log=lambda s: None)
  assert summary['epsilon_claimed_mean'] * 4 == pytest.approx(3 * 2 * 100.0)
  assert summary['epsilon_guaranteed'] == 'inf'
  assert any('unbounded' in r for r in summary['epsilon_reasons'])


@pytest.mark.parametrize('method,extra', [('cosafed', dict(epsilon_floor=60.0)),
                                          ('cosfed', dict(cosfed_cosine='updates'))])
def test_cosafed_and_cosfed_run_and_log_their_signals(tmp_path, method, extra):
  config = config_lib.RunConfig.create(
      method=method, dataset='synthetic', rounds=4, clients=4, clients_per_round=2,
      model='logistic_regression', partition='iid', learning_rate=0.05, batch_size=16,
      out=str(tmp_path / 'run'), epsilon=100.0, **extra)
  runner.run(config, log=lambda s: None)
  with open(tmp_path / 'run' / 'metrics.csv') as f:
    rows = list(csv.DictReader(f))
  for key in ('score', 'mean_cosine', 'mean_p', 'global_cosine', 'epsilon_prime_sum',
              'floor_binding', 'validation_accuracy'):
    assert rows[-1][key] != ''
  eps = [float(r['epsilon_prime_min']) for r in rows]
  if method == 'cosafed':
    assert min(eps) >= 60.0 - 1e-4 and max(float(r['epsilon_prime_max']) for r in rows) <= 100
  else:
    assert min(eps) >= 100.0 - 1e-4   # epsilon (2 - cos) >= epsilon


def test_epsilon_budget_is_refused(tmp_path):
  config = config_lib.RunConfig.create(
      method='lapfed', dataset='synthetic', rounds=2, clients=4, clients_per_round=2,
      model='logistic_regression', partition='iid', out=str(tmp_path / 'run'),
      epsilon_budget=5.0)
  with pytest.raises(ValueError, match='known only after each round'):
    runner.run(config, log=lambda s: None)


# ----- the Laplace ledger -------------------------------------------------------------

def test_laplace_ledger_matches_dp_accounting():
  basic = privacy.LaplaceLedger(3, 1e-5, composition='basic')
  best = privacy.LaplaceLedger(3, 1e-5, composition='best')
  script = {0: [1.0], 1: [0.1] * 50, 2: [100.0, 70.0, 95.5]}
  for c, epsilons in script.items():
    for e in epsilons:
      for ledger in (basic, best):
        ledger.record([c], dp_accounting.LaplaceDpEvent(1 / e))
  for c, epsilons in script.items():
    assert basic.epsilon(c) == pytest.approx(sum(epsilons))
    rdp = dp_accounting.rdp.RdpAccountant(list(privacy.DEFAULT_ORDERS))
    pld = dp_accounting.pld.PLDAccountant(
        value_discretization_interval=1e-4 * max(1.0, epsilons[0]))
    for e in epsilons:
      rdp.compose(dp_accounting.LaplaceDpEvent(1 / e))
      pld.compose(dp_accounting.LaplaceDpEvent(1 / e))
    expected = min(sum(epsilons), rdp.get_epsilon(1e-5), pld.get_epsilon(1e-5))
    assert best.epsilon(c) == pytest.approx(expected, rel=1e-9)
  # one Laplace(1): RDP 1.0035 is worse than the pure 1; PLD is below it.
  assert rdp_one() == pytest.approx(1.0035, abs=1e-4)
  assert best.epsilon(0) < 1.0
  assert best.epsilon(1) < 0.6 * basic.epsilon(1)   # many small releases: RDP/PLD win
  assert best.report().max == pytest.approx(best.epsilon(2))
  restored = privacy.LaplaceLedger(3, 1e-5, composition='best')
  restored.load_state_dict(best.state_dict())
  assert restored.epsilon(1) == pytest.approx(best.epsilon(1))
  with pytest.raises(dp_accounting.UnsupportedEventError):
    best.record([0], dp_accounting.GaussianDpEvent(1.0))


def rdp_one():
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.LaplaceDpEvent(1.0))
  return acc.get_epsilon(1e-5)


# ----- partitions ---------------------------------------------------------------------

def test_label_shards_give_two_labels_per_client_and_equal_sizes():
  labels = np.repeat(np.arange(10), [61, 62, 63, 64, 65, 66, 67, 68, 69, 70])
  equal = partitioners.label_shards_equal(labels, 10, seed=1)
  # 20 shards, 2 per label; each label cut to 60 (61 rounded down to a multiple of 2)
  assert {len(p) for p in equal} == {60}
  rand = partitioners.label_shards(labels, 10, seed=1)
  assert sum(len(p) for p in rand) == len(labels)
  for parts in (equal, rand):
    assert all(len(np.unique(labels[p])) == 2 for p in parts)
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat))
  with pytest.raises(ValueError, match='multiple'):
    partitioners.label_shards(labels, 7)


def test_guaranteed_releases_per_method(tiny):
  data, _, _, _, validation = tiny
  metrics = {'client_epsilons': np.array([50.0, 0.0, np.inf])}
  cohort = np.array([0, 1, 2])
  cos = cosafed.build_cosafed(BUILDER, data, validation, method='cosafed', rounds=3,
                              cohort_size=3, hp=cosafed.CosAFedHparams(l1_clip=1.0))
  claimed, guaranteed = cos.accounting.releases_from_round(cohort, None, metrics)
  # epsilon' = 0 (infinite noise) releases nothing: neither ledger charges client 1
  assert [int(c[0]) for c, _, _ in claimed] == [0, 2]
  assert claimed[0][1] == dp_accounting.LaplaceDpEvent(1 / 50.0)
  assert guaranteed[0][1] is None and guaranteed[0][2] == cosafed.DATA_DEPENDENT_REASON
  lap = cosafed.build_cosafed(BUILDER, data, validation, method='lapfed', rounds=3,
                              cohort_size=3,
                              hp=cosafed.LaplaceUploadHparams(sensitivity=1.0, l1_clip=2.0))
  _, guaranteed = lap.accounting.releases_from_round(cohort, None, metrics)
  # Lap(Delta_f / eps') on an update of L1 norm <= 2: (2 eps' / Delta_f)-DP
  assert guaranteed[0][1] == dp_accounting.LaplaceDpEvent(1 / 100.0)
  assert guaranteed[1][2] == "epsilon' = inf: no noise"
