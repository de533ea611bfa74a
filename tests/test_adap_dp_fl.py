"""Adap DP-FL: clipping recursion, noise decay rule, stateful clients, slicing, budget stop,
ledger values against `dp_accounting`, resume."""

import csv
import dataclasses
import functools
import math
import os

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tffdp import config as config_lib
from tffdp import models, privacy, runner
from tffdp.algorithms import adap_dp_fl, per_example

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)
LOT = 8


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
  """4 clients of 30, 30, 40, 60 synthetic examples and a 20-example validation split."""
  from tffdp.data import FederatedData
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (180, *SHAPE), dtype=np.uint8)
  y = rng.integers(0, 10, 180)
  bounds = [0, 30, 60, 100, 160]
  parts = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
  data = FederatedData(x[:160], y[:160], parts, cache_dir=str(tmp_path_factory.mktemp('c')))
  return data, (x[160:], y[160:])


def build(data, val, **kw):
  """`build_adap_dp_fl` with the options of `AdapDPFLHparams` in `kw` passed as its `hp`."""
  kw = dict(dict(lot_size=LOT, learning_rate=0.01, noise_multiplier=0.0, beta=0.5,
                 clipping_factor=1.0), **kw)
  options = {f.name for f in dataclasses.fields(adap_dp_fl.AdapDPFLHparams)}
  hp = adap_dp_fl.AdapDPFLHparams(**{k: kw.pop(k) for k in list(kw) if k in options})
  return adap_dp_fl.build_adap_dp_fl(BUILDER, data, val, hp=hp, **kw)


def run_rounds(method, n, cohort=None, start=None):
  state = start if start is not None else method.initialize()
  metrics = []
  for r in range(n):
    c = np.arange(method.process.clients_per_slice * len(state['clients'])) \
        if cohort is None else np.asarray(cohort)
    state, m = method.run_round(state, c, r, 0)
    metrics.append(m)
  return state, metrics


def client_field(state, name):
  return np.concatenate([np.asarray(c[name]) for c in state['clients']])


def trainable(state):
  return [np.asarray(w) for w in state['server']['model'].trainable]


# ----- pure pieces ---------------------------------------------------------------------

def test_next_clip_norm_zero_noise_is_alpha_times_mean_clipped_norm():
  norms = tf.constant([0.5, 2.0, 3.0, 0.1, 0.2, 0.9])
  splits = tf.constant([0, 4, 4, 6], tf.int64)  # the middle client's lot is empty
  got = adap_dp_fl.next_clip_norm(norms, splits, tf.constant([1.0, 2.0, 0.5]),
                                  tf.constant(0.0), 4.0, 0.5,
                                  tf.constant([[1, 2], [3, 4], [5, 6]], tf.int64))
  # alpha * |(sum of min(norm, C)) / L| per client
  np.testing.assert_allclose(got.numpy(), [0.5 * 2.6 / 4, 0.0, 0.5 * 0.7 / 4], rtol=1e-6)


def test_next_clip_norm_noise_scale():
  """The noise on the clipped-norm sum has std C * sigma (statistical, 4000 draws)."""
  n = 4000
  c, sigma, lot = 2.0, 3.0, 100.0
  norms = tf.fill([100 * n], 5.0)  # every norm clipped: each client's sum is 100 * C
  splits = tf.range(0, 100 * n + 1, 100, dtype=tf.int64)
  seeds = tf.stack([tf.range(n, dtype=tf.int64), tf.fill([n], tf.constant(9, tf.int64))], 1)
  draws = adap_dp_fl.next_clip_norm(norms, splits, tf.fill([n], c), tf.constant(sigma), lot,
                                    1.0, seeds).numpy()
  noise = draws * lot - 100 * c  # abs() does not bite: the sum is 200 >> 6
  assert abs(noise.mean()) < 4 * c * sigma / math.sqrt(n)
  assert noise.std() == pytest.approx(c * sigma, rel=0.05)


def test_unclipped_statistic_has_a_fixed_point_at_alpha_times_the_mean_norm():
  """Issue 11: eq. 6's clipped statistic shrinks C; the unclipped one settles at
  alpha x the mean norm from any start (zero noise, lot size = lot count)."""
  norms = tf.constant([1.0, 2.0, 3.0, 6.0])
  splits = tf.constant([0, 4], tf.int64)
  seeds = tf.constant([[1, 2]], tf.int64)
  step = lambda c, stat: float(adap_dp_fl.next_clip_norm(
      norms, splits, tf.constant([c]), tf.constant(0.0), 4.0, 0.5, seeds, stat)[0])
  for start in (0.1, 1.0, 50.0):
    c = start
    for _ in range(3):
      c = step(c, 'unclipped')
    assert c == pytest.approx(0.5 * 3.0)   # alpha * mean(1, 2, 3, 6)
  c = 3.0
  for _ in range(5):
    c_next = step(c, 'clipped')
    assert c_next <= 0.5 * c + 1e-7       # each term <= C: C_{t+1} <= alpha C_t B / L
    c = c_next


def test_bounded_statistic_has_sensitivity_c_max():
  splits = tf.constant([0, 3], tf.int64)
  seeds = tf.constant([[1, 2]], tf.int64)
  def total(last_norm):
    c = adap_dp_fl.next_clip_norm(tf.constant([0.2, 0.4, last_norm]), splits,
                                  tf.constant([10.0]), tf.constant(0.0), 1.0, 1.0, seeds,
                                  'bounded', 0.5)
    return float(c[0])   # alpha = L = 1: the clipped-norm sum itself
  assert total(0.0) == pytest.approx(0.2 + 0.4)
  assert total(1e6) - total(0.0) == pytest.approx(0.5)   # one example moves it by C_max
  # noise std sigma * C_max (not sigma * C): 2000 clients' draws
  n = 2000
  draws = adap_dp_fl.next_clip_norm(
      tf.fill([n], 5.0), tf.range(0, n + 1, dtype=tf.int64), tf.fill([n], 10.0),
      tf.constant(3.0), 1.0, 1.0,
      tf.stack([tf.range(n, dtype=tf.int64), tf.fill([n], tf.constant(5, tf.int64))], 1),
      'bounded', 0.5).numpy()
  # |0.5 + N(0, 1.5^2)|: the folded normal's second moment is 0.25 + 2.25
  assert np.mean(draws ** 2) == pytest.approx(0.25 + 1.5 ** 2, rel=0.08)


def test_unclipped_statistic_guarantees_nothing_and_says_why():
  assert adap_dp_fl.executed_round_event(2.0, 0.1, 'adaptive', 'unclipped') is None
  bounded = adap_dp_fl.executed_round_event(2.0, 0.1, 'adaptive', 'bounded')
  assert bounded == adap_dp_fl.executed_round_event(2.0, 0.1, 'adaptive', 'clipped')
  with pytest.raises(ValueError, match='statistic must be one of'):
    adap_dp_fl.next_clip_norm(tf.constant([1.0]), tf.constant([0, 1], tf.int64),
                              tf.constant([1.0]), tf.constant(0.0), 1.0, 1.0,
                              tf.constant([[1, 2]], tf.int64), 'median')


def test_unclipped_statistic_run_reports_inf_with_the_reason(tmp_path):
  summary = runner.run(_cfg(tmp_path, 'unclipped', None, clip_statistic='unclipped',
                            noise_schedule='constant', rounds=2), log=lambda s: None)
  assert summary['epsilon_guaranteed'] == 'inf'
  assert adap_dp_fl.UNCLIPPED_REASON in summary['epsilon_reasons']
  assert summary['epsilon_claimed'] != 'inf'   # eq. 10 counts the gradient query only
  rows = _read(tmp_path / 'unclipped')
  assert float(rows[-1]['clip_norm']) > 0


@pytest.mark.parametrize('sequence,decays', [
    # J(w_1), J(w_2) are inf by definition; drops counted from J(w_3) on.
    ([9, 9, 5, 4, 3, 2, 1], [False, False, False, False, True, True, True]),
    ([9, 9, 5, 4, 6, 5, 4, 3], [False] * 7 + [True]),  # a rise restarts the window
    ([9, 9, 5, 5, 4, 3, 2], [False] * 6 + [True]),      # equal is not a drop
])
def test_noise_decay_three_drops_sliding_window(sequence, decays):
  losses = tf.fill([3], math.inf)
  sigma, beta = tf.constant(1.0), 0.5
  got = []
  for t, j in enumerate(sequence, start=1):  # j is J(w_t)
    j = math.inf if t <= 2 else j
    sigma_new, losses, decayed = adap_dp_fl.noise_decay(losses, tf.constant(float(j)), sigma,
                                                        beta)
    assert float(sigma_new) == (0.5 * float(sigma) if bool(decayed) else float(sigma))
    sigma = sigma_new
    got.append(bool(decayed))
  assert got == decays


def test_adam_update_matches_keras_adam():
  w = tf.Variable([1.0, -2.0, 3.0])
  opt = tf.keras.optimizers.Adam(learning_rate=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-8)
  m, v, step = [tf.zeros([3])], [tf.zeros([3])], tf.constant(0.0)
  mine = tf.constant([1.0, -2.0, 3.0])
  for g in ([0.5, -1.0, 2.0], [0.1, 0.3, -0.2], [1.0, 1.0, 1.0]):
    opt.apply_gradients([(tf.constant(g), w)])
    delta, m, v, step = adap_dp_fl.adam_update([tf.constant(g)], m, v, step, 0.1)
    mine = mine - delta[0]
  # Keras puts epsilon inside its bias correction slightly differently; agree to 1e-6.
  np.testing.assert_allclose(mine.numpy(), w.numpy(), atol=1e-6)


def test_segment_sums_equal_per_segment_clipping():
  model = models.build_keras_model('adap_dp_fl_cnn', SHAPE, 10, seed=0)
  x = tf.random.stateless_uniform([20, *SHAPE], seed=[1, 2])
  y = tf.random.stateless_uniform([20], seed=[3, 4], maxval=10, dtype=tf.int32)
  splits = tf.constant([0, 5, 5, 12, 20], tf.int64)
  clips = tf.constant([0.5, 1.0, 2.0, 0.1])
  sums, norms, _ = per_example.clipped_gradient_segment_sums(model, x, y, splits, clips)
  for k in range(4):
    lo, hi = int(splits[k]), int(splits[k + 1])
    if lo == hi:
      expected = [tf.zeros_like(s[k]) for s in sums]
    else:
      expected, n_k, _ = per_example.clipped_gradient_sum(model, x[lo:hi], y[lo:hi], clips[k])
      np.testing.assert_allclose(norms[lo:hi].numpy(), n_k.numpy(), rtol=1e-5)
    for s, e in zip(sums, expected):
      np.testing.assert_allclose(s[k].numpy(), e.numpy(), rtol=1e-4, atol=1e-6)


# ----- the TFF process -------------------------------------------------------------------

def test_type_signature_carries_client_state_at_clients(tiny):
  data, val = tiny
  m = build(data, val, clients_per_slice=2)
  params = m.process.next.type_signature.parameter
  result = m.process.next.type_signature.result
  assert str(params[0].placement) == 'SERVER' and str(params[1].placement) == 'CLIENTS'
  assert result.client_states.is_equivalent_to(params[1])
  assert result.state.is_equivalent_to(m.process.initialize.type_signature.result)
  member = params[1].member
  assert str(member.clip_norm) == 'float32[2]' and str(member.adam_step) == 'float32[2]'
  assert [str(t) for t in member.adam_m] == ['float32[2,784,10]', 'float32[2,10]']


def test_zero_noise_round_is_exact(tiny):
  """One round, sigma = 0: C_1 = alpha * mean clipped norm; w_1 = weighted mean of Adam steps."""
  data, val = tiny
  alpha, lr = 0.7, 0.01
  m = build(data, val, clipping_factor=alpha, learning_rate=lr)
  state0 = m.initialize()
  state1, _ = run_rounds(m, 1, start=state0)
  w0 = trainable(state0)
  c0 = client_field(state0, 'clip_norm')
  seeds = np.stack(adap_dp_fl.common.client_seeds(0, 0, range(4)))
  x, y, splits, sizes = data.poisson_lots(tf.constant(data.client_ids), tf.constant(seeds),
                                          float(LOT))
  model = BUILDER()
  model.set_weights(w0)
  total_w, expected = 0.0, [np.zeros_like(w) for w in w0]
  for k in range(4):
    lo, hi = int(splits[k]), int(splits[k + 1])
    s, norms, _ = per_example.clipped_gradient_sum(model, x[lo:hi], y[lo:hi], c0[k])
    g = [t.numpy() / LOT for t in s]
    # First Adam step: m_hat = g, v_hat = g^2.
    delta = [lr * gi / (np.sqrt(gi ** 2) + 1e-8) for gi in g]
    expected = [e + float(sizes[k]) * d for e, d in zip(expected, delta)]
    total_w += float(sizes[k])
    c1 = alpha * np.sum(np.minimum(norms.numpy(), c0[k])) / LOT
    assert client_field(state1, 'clip_norm')[k] == pytest.approx(c1, rel=1e-5)
  for got, w, e in zip(trainable(state1), w0, expected):
    np.testing.assert_allclose(got, w - e / total_w, atol=1e-6)
  assert list(client_field(state1, 'adam_step')) == [1.0] * 4


def test_initial_clip_norm_is_mean_norm_on_random_noise(tiny):
  data, val = tiny
  c0 = client_field(build(data, val).initialize(), 'clip_norm')
  assert np.all(c0 > 0) and len(set(c0.tolist())) == 4  # per-client noise lots
  const = client_field(build(data, val, clipping='constant', clip_norm=0.3).initialize(),
                       'clip_norm')
  np.testing.assert_allclose(const, 0.3)


def test_slicing_does_not_change_results(tiny):
  data, val = tiny
  states = []
  for per_slice in (1, 2, 4):
    m = build(data, val, noise_multiplier=1.0, clients_per_slice=per_slice)
    states.append(run_rounds(m, 3)[0])
  for other in states[1:]:
    for a, b in zip(trainable(states[0]), trainable(other)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(client_field(states[0], 'clip_norm'),
                               client_field(other, 'clip_norm'), rtol=1e-5)


@pytest.mark.parametrize('kw', [dict(clipping='adaptive', clients_per_slice=2),
                                dict(clipping='constant'),
                                dict(clipping='adaptive', clip_statistic='unclipped')])
def test_executed_events_are_what_each_client_states(tiny, kw):
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  data, val = tiny
  m = build(data, val, noise_multiplier=1.3, **kw)
  state = m.initialize()
  cohort = np.arange(4)
  new_state, metrics = m.run_round(state, cohort, 0, 0)
  executed = m.accounting.executed(cohort, new_state, metrics)
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, state), executed) is None
  by_client = {int(c): e for members, e, _ in executed for c in members}
  for c, n in enumerate((30, 30, 40, 60)):
    expected = adap_dp_fl.executed_round_event(
        float(np.float32(1.3)), LOT / n, kw['clipping'], kw.get('clip_statistic', 'clipped'))
    assert by_client[c] == expected
  if kw.get('clip_statistic') != 'unclipped':   # another sigma is caught
    other = build(data, val, noise_multiplier=1.2, **kw)
    assert privacy.releases_differ(other.accounting.guaranteed(cohort, other.initialize()),
                                   executed)


def test_client_optimizer_state_persists_or_resets(tiny):
  data, val = tiny
  keep, _ = run_rounds(build(data, val, noise_multiplier=0.5), 3)
  reset, _ = run_rounds(build(data, val, noise_multiplier=0.5,
                              client_optimizer_state='reset'), 3)
  assert list(client_field(keep, 'adam_step')) == [3.0] * 4
  assert not any(np.allclose(a, b) for a, b in zip(trainable(keep), trainable(reset)))
  m_keep = np.asarray(keep['clients'][0]['adam_m'][0])
  assert np.any(m_keep != 0)


def test_inactive_client_keeps_state_and_adds_nothing(tiny):
  data, val = tiny
  m = build(data, val, noise_multiplier=0.5)
  state, metrics = run_rounds(m, 2, cohort=[0, 2, 3])
  steps = client_field(state, 'adam_step')
  assert list(steps) == [2.0, 0.0, 2.0, 2.0]
  assert int(metrics[-1]['train']['num_uploading']) == 3
  init = m.initialize()
  assert client_field(state, 'clip_norm')[1] == client_field(init, 'clip_norm')[1]


def test_server_noise_decay_in_process(tiny):
  """With a learning rate that steadily lowers the validation loss, sigma decays."""
  data, val = tiny
  m = build(data, val, noise_multiplier=0.0, beta=0.5, learning_rate=0.002)
  state, metrics = run_rounds(m, 7)
  losses = [float(x['server_validation_loss']) for x in metrics]
  decayed = [bool(x['noise_decayed']) for x in metrics]
  # Replay the rule on the measured losses (J(w_1), J(w_2) are inf by definition).
  h, expect = [math.inf] * 3, []
  for t, j in enumerate(losses, start=1):
    j = math.inf if t <= 2 else j
    expect.append(h[0] > h[1] > h[2] > j)
    h = h[1:] + [j]
  assert decayed == expect
  off, metrics_off = run_rounds(build(data, val, noise_schedule='constant'), 2)
  assert math.isnan(float(metrics_off[0]['server_validation_loss']))


# ----- accounting and runner ------------------------------------------------------------------

def _cfg(tmp_path, name, data_dir, **kw):
  """A toy Adap DP-FL run; `data_dir=None`: the generated `synthetic` dataset."""
  base = dict(method='adap_dp_fl', dataset='mnist' if data_dir else 'synthetic',
              data_dir=data_dir, rounds=3, clients=2,
              clients_per_round=2, partition='shards',
              partition_options={'num_shards': 20, 'shards_per_client': 2},
              model='logistic_regression', learning_rate=0.002, lot_size=78,
              noise_multiplier=2.0, clip_norm=1.0, num_validation=500, eval_every=1,
              out=str(tmp_path / name), client_cache_dir=str(tmp_path / 'clients'))
  base.update(kw)
  return config_lib.RunConfig.create(**base)


def _read(path):
  with open(os.path.join(path, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


@pytest.mark.parametrize('clipping', ['adaptive', 'constant'])
def test_ledgers_match_dp_accounting(tmp_path, clipping):
  summary = runner.run(_cfg(tmp_path, clipping, None, clipping=clipping,
                            noise_schedule='constant'), log=lambda s: None)
  # q from the data, not from what the code wrote: 6,000 - 500 validation = 5,500
  # examples in 20 shards of 275, two shards per client: |D^k| = 550, q = L / 550.
  q = 78 / 550
  with open(tmp_path / clipping / 'config.json') as f:
    import json
    assert json.load(f)['method_hyperparameters']['sampling_rates'] == [q]
  def eps(sigma):
    acc = dp_accounting.rdp.RdpAccountant(list(privacy.INTEGER_ORDERS))
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
                3)
    return acc.get_epsilon(1e-5)
  assert summary['epsilon_claimed'] == pytest.approx(eps(2.0), rel=1e-9)
  joint = 2.0 / math.sqrt(2) if clipping == 'adaptive' else 2.0
  assert summary['epsilon_guaranteed'] == pytest.approx(eps(joint), rel=1e-9)
  if clipping == 'adaptive':
    assert summary['epsilon_guaranteed'] > summary['epsilon_claimed']


# q = 78 / 550 on the synthetic data: 6 (accounted) and 8 (free) rounds fit the budget.
@pytest.mark.parametrize('query,sigma,budget', [('accounted', 2.0, 2.0), ('free', 1.5, 2.0)])
def test_budget_stop_per_client(tmp_path, query, sigma, budget):
  lines = []
  summary = runner.run(_cfg(tmp_path, query, None, rounds=40, noise_multiplier=sigma,
                            epsilon_budget=budget, clip_norm_query=query,
                            noise_schedule='constant'),
                       log=lines.append)
  rows = _read(tmp_path / query)
  # Constant per-round cost: the first round's ETA counts exactly the rounds that followed.
  first = next(line for line in lines if line.startswith('round 1/'))
  assert f'(to the budget at the current per-round cost, {len(rows) - 1} rounds)' in first
  ledger_eps = summary['epsilon_guaranteed' if query == 'accounted' else 'epsilon_claimed']
  assert summary['stop_reason'].startswith('every client has spent its budget')
  assert ledger_eps <= budget
  assert len(rows) < 40 and summary['client_stop_round'] == {'0': len(rows), '1': len(rows)}
  assert all(int(r['uploading_clients']) == 2 for r in rows)
  assert rows[-1]['test_accuracy'] != ''  # the final model is evaluated at the stop
  if query == 'free':
    assert summary['epsilon_guaranteed'] > budget  # the paper's count lets it run past


def test_resume_equals_uninterrupted(tmp_path, interrupt_at):
  kw = dict(rounds=4, noise_multiplier=1.0)
  full = runner.run(_cfg(tmp_path, 'a', None, **kw), log=lambda s: None)

  with pytest.raises(KeyboardInterrupt):
    runner.run(_cfg(tmp_path, 'b', None, **kw), log=interrupt_at(3))
  resumed = runner.run(_cfg(tmp_path, 'b', None, **kw), resume=True, log=lambda s: None)
  a, b = _read(tmp_path / 'a'), _read(tmp_path / 'b')
  assert len(a) == len(b) == 4
  for ra, rb in zip(a, b):
    for col in ('test_accuracy', 'test_loss', 'clip_norm', 'epsilon_guaranteed',
                'server_validation_loss'):
      assert float(ra[col]) == pytest.approx(float(rb[col]), rel=1e-5, abs=1e-6)
  assert resumed['final_test_accuracy'] == pytest.approx(full['final_test_accuracy'])


@pytest.mark.parametrize('field,value', [('clipping', 'sometimes'), ('beta', 1.5),
                                         ('clipping_factor', 0.0), ('clients_per_slice', 3),
                                         ('clip_norm_query', 'cheap')])
def test_invalid_hyperparameters_name_themselves(field, value):
  with pytest.raises(ValueError, match=field):
    config_lib.RunConfig.create(method='adap_dp_fl', clients=10, **{field: value}).resolved().validate()


def test_budget_stop_unequal_clients_stop_for_good(tmp_path, data_dir):
  """Clients with more data (smaller q) spend their budget later; a stopped client
  never uploads again and every client's epsilon stays within the budget.

  Sizes 21,378 / 31,058 / 2,564 (q = 78/n): at sigma 1.0 and budget 0.82 the small
  client stops before its first upload, the middle one after about 10-20 rounds, the
  large one not within 30 rounds (epsilons from dp_accounting)."""
  budget = 0.82
  summary = runner.run(_cfg(tmp_path, 'u', data_dir, rounds=30, clients=3,
                            clients_per_round=3, partition='random_size',
                            partition_options={'min_size': 2000}, noise_multiplier=1.0,
                            epsilon_budget=budget, clipping='constant', eval_every=30),
                       log=lambda s: None)
  rows = _read(tmp_path / 'u')
  stops = {int(c): r for c, r in summary['client_stop_round'].items()}
  assert stops[2] == 0 and 0 < stops[0] < 30 and 1 not in stops
  uploading = [int(r['uploading_clients']) for r in rows]
  assert len(rows) == 30
  for r, n in enumerate(uploading):  # a stopped client stays stopped
    assert n == 3 - sum(1 for s in stops.values() if s <= r)
  assert summary['epsilon_guaranteed'] <= budget


def test_cohort_is_every_client_whatever_clients_per_round():
  cfg = config_lib.RunConfig(method='adap_dp_fl', clients=2, clients_per_round=10).resolved()
  cfg.validate()
  assert cfg.cohort_sampling == 'all' and cfg.clients_per_round == 2
