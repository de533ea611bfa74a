"""Canaries (`tffdp.canaries`): a client-level canary's update goes through the method's
own aggregator exactly like a real client's (clipped to S, summed, noised, divided by K);
a sample-level gradient canary goes through the host's DP-SGD step exactly like one of
its examples (clipped to C, summed, noised, divided by B)."""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf

from tffdp import canaries, models, seeds
from tffdp.algorithms import baselines, common
from tffdp.data import FederatedData
from tffdp.data.federated import ShuffleBatch

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


def _toy(tmp_path):
  """4 clients of 10 random MNIST-shaped examples, and the logistic regression builder."""
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (40, *SHAPE), dtype=np.uint8),
                       rng.integers(0, 10, 40), [np.arange(i * 10, i * 10 + 10)
                                                 for i in range(4)],
                       cache_dir=str(tmp_path))
  return data, BUILDER


def _dp_fedavg_with_canaries(tmp_path, sigma, clip, norm, cohort=4.0):
  data, builder = _toy(tmp_path)
  work = baselines.client_work(builder, data, learning_rate=0.5, dp_sgd='none')
  factory = baselines.seeded_gaussian_fixed(sigma, cohort, clip, seeds.server_noise_seed(0))
  process = common.compose_fedavg_style(builder, canaries.with_canaries(work, norm, seed=7),
                                        factory, seed=0)
  batching = ShuffleBatch(10, 1)
  round_fn = canaries.cohort_round_computation(process,
                                               data.client_data_computation(batching))
  return process, round_fn


def _delta(process, round_fn, ids, canary):
  state = process.initialize()
  before = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  out = round_fn(state, [str(i) for i in ids], [np.array([1, i], np.int64) for i in ids],
                 [np.int32(c) for c in canary])
  after = [np.asarray(w) for w in process.get_model_weights(out.state).trainable]
  return np.concatenate([(b - a).ravel() for a, b in zip(after, before)])  # initial - final


def test_a_canary_is_clipped_summed_and_divided_like_a_real_update(tmp_path):
  clip, norm, k = 0.05, 3.0, 4.0
  process, round_fn = _dp_fedavg_with_canaries(tmp_path, 0.0, clip, norm, k)
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 3, shapes)
  assert np.allclose(np.linalg.norm(u, axis=1), 1.0, atol=1e-5)
  real = _delta(process, round_fn, [0, 1], [-1, -1])
  # Client 0's data trains canary 2 too, and is discarded: what reaches the aggregator is
  # norm * u_2, clipped to S like any update, in the sum divided by K.
  both = _delta(process, round_fn, [0, 1, 0], [-1, -1, 2])
  np.testing.assert_allclose(both - real, clip * u[2] / k, atol=1e-6)
  alone = _delta(process, round_fn, [0], [1])
  np.testing.assert_allclose(alone, clip * u[1] / k, atol=1e-6)
  with pytest.raises(ValueError, match='norm'):
    canaries.with_canaries(None, 0.0, 1)


def test_a_canary_round_is_noised_like_any_round(tmp_path):
  sigma, clip, k = 0.05, 0.05, 4.0
  process, round_fn = _dp_fedavg_with_canaries(tmp_path, sigma, clip, 1.0, k)
  delta = _delta(process, round_fn, [0], [0])
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 1, shapes)[0]
  noise = delta - clip * u / k
  assert np.std(noise) == pytest.approx(sigma * clip / k, rel=0.05)  # 7,850 coordinates
  # The auditor's statistic: the canary's cosine with the released delta, about
  # 1 / sqrt(1 + sigma^2 d) = 0.22 here, far above the N(0, 1/d) null (sd 0.011) of a
  # direction that was not inserted.
  other = canaries.canary_directions(8, 1, shapes)[0]
  cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
  assert cos(delta, u) > 5 / np.sqrt(u.size) > abs(cos(delta, other))


# ----- a run with canaries (RunConfig.audit_canaries) ------------------------------

AUDIT_TOY = dict(dataset='synthetic', clients=50, clients_per_round=10, partition='iid',
                 model='logistic_regression', num_validation=100, learning_rate=0.5,
                 batch_size=20, rounds=10, clip_norm=0.5, checkpoint_every=1)


def _audit_run(tmp_path, name, method='dp_fedavg', **kw):
  from tffdp import config as config_lib, runner  # pylint: disable=g-import-not-at-top
  cfg = config_lib.RunConfig.create(**dict(AUDIT_TOY, method=method,
                                           out=str(tmp_path / name), **kw))
  return runner.run(cfg, log=lambda s: None)


def _register_understated(sigma_executed, sigma_declared):
  """`dp_fedavg` whose aggregator adds noise at `sigma_executed` while both ledgers account
  `sigma_declared`: a planted accounting bug."""
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top

  def build(ctx, hp):
    c = ctx.config
    m = baselines.build_dp_fedavg(ctx.keras_builder, ctx.data, learning_rate=c.learning_rate,
                                  batch_size=c.batch_size, noise_multiplier=sigma_executed,
                                  clip_norm=c.clip_norm, clients_per_round=c.clients_per_round,
                                  seed=c.seed)
    q = c.clients_per_round / c.clients
    declared = lambda cohort, state=None: [
        (np.arange(c.clients), privacy.subsampled_gaussian_event(sigma_declared, q), '')]
    m.accounting.claimed = m.accounting.guaranteed = declared
    # Its aggregator's own event would give it away before the first round is accounted
    # (the runner checks `Accounting.executed` against the declaration); without it only
    # the audit can.
    m.accounting.executed = None
    return m
  registry.register(registry.MethodSpec('understated', build, registry.MethodHparams, 'test'))


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_the_audit_of_dp_fedavg_stays_below_its_guarantee(tmp_path, seed):
  s = _audit_run(tmp_path, f's{seed}', noise_multiplier=3.0, audit_canaries=200, seed=seed)
  assert 0 < s['epsilon_guaranteed'] < 2
  for model in ('every_round', 'final_model'):
    assert s['audit'][model]['epsilon_lower_bound'] <= s['epsilon_guaranteed']
  assert s['epsilon_lower_bound'] == s['audit']['every_round']['epsilon_lower_bound']
  assert s['audit']['canaries'] == 200 and 0 < s['audit']['joins']


def test_the_audit_catches_noise_ten_times_smaller_than_accounted(tmp_path):
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  _register_understated(0.3, 3.0)
  try:
    s = _audit_run(tmp_path, 'bug', method='understated', audit_canaries=200)
  finally:
    registry.unregister('understated')
  assert s['epsilon_lower_bound'] > s['epsilon_guaranteed'] > 0


def test_an_audit_resumes_to_the_same_report(tmp_path):
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  kw = dict(noise_multiplier=0.5, audit_canaries=40, rounds=4)
  full = _audit_run(tmp_path, 'a', **kw)
  _audit_run(tmp_path, 'b', stop_after_round=2, **kw)  # pauses with a checkpoint
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  cfg = config_lib.RunConfig.create(**dict(AUDIT_TOY, method='dp_fedavg',
                                           out=str(tmp_path / 'b'), **kw))
  resumed = runner.run(cfg, resume=True, log=lambda s: None)
  assert resumed['audit'] == full['audit']


def test_a_method_whose_build_takes_canaries_twice_is_refused(tmp_path):
  # Every registered method takes canaries once; a build that composes two processes
  # (which would the canaries be in?) is refused. (--workers is refused too; not run here:
  # a gRPC channel left open makes later forks of the test process abort.)
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top

  def build(ctx, hp):
    c = ctx.config
    make = lambda: baselines.build_dp_fedavg(
        ctx.keras_builder, ctx.data, learning_rate=c.learning_rate,
        batch_size=c.batch_size, noise_multiplier=1.0, clip_norm=c.clip_norm,
        clients_per_round=c.clients_per_round, seed=c.seed)
    make()
    return make()
  registry.register(registry.MethodSpec('twice', build, registry.MethodHparams, 'test'))
  try:
    with pytest.raises(ValueError, match='cannot audit twice: 2 client works and 2 cohort'):
      _audit_run(tmp_path, 'twice', method='twice', audit_canaries=8, rounds=1)
  finally:
    registry.unregister('twice')


def test_the_audit_s_draws_are_apart_from_the_run_s():
  # NumPy seeds `[s, 2]` and `[s, 2, 0]` alike: the inclusion draw once was round 2's
  # cohort stream, and round 0's joins reused the inclusion's uniforms.
  from tffdp import seeds  # pylint: disable=g-import-not-at-top
  m, n, q = 1000, 1000, 0.05
  aud = canaries.Auditor(m, 0, n, q, [np.zeros((10, 3), np.float32)])
  for r in range(5):
    cohort = set(np.flatnonzero(seeds.round_rng(0, r, seeds.COHORT).random(n) < q))
    assert set(aud.joining(r)) != cohort
    assert not np.array_equal(aud.included,
                              seeds.round_rng(0, r, seeds.COHORT).random(m) < 0.5)
  # Each included canary joins a round at rate q, whatever round (round 0 included).
  joins = np.array([aud.included[aud.joining(r)].size for r in range(200)])
  expected = q * aud.included.sum()
  assert abs(joins.mean() - expected) < 4 * np.sqrt(expected / 200)
  assert abs(joins[0] - expected) < 5 * np.sqrt(expected)
  assert np.all(aud.included[np.concatenate([aud.joining(r) for r in range(20)])])


# ----- sample-level gradient canaries ------------------------------------------------

def _dpfl_with_gradient_canaries(tmp_path, sigma, clip, norm, dp_sgd='clip_then_noise'):
  """DPFL on 4 clients of 10 examples, one DP-SGD step a round (B = 10), built with
  gradient canaries (3 of them, direction seed 7)."""
  data, builder = _toy(tmp_path)
  with canaries.inserting(norm, 7, 4, count=3) as insertion:
    work = baselines.client_work(builder, data, learning_rate=0.5, dp_sgd=dp_sgd,
                                 noise_multiplier=sigma, clip_norm=clip)
    process = common.compose_fedavg_style(
        builder, work, __import__('tensorflow_federated').aggregators.MeanFactory(), seed=0)
    _, comp = common.cohort_round(process, data, ShuffleBatch(10, 1))
  assert insertion.kind == 'gradient' and insertion.wrapped == insertion.rounds == 1
  return process, comp


def _round(process, comp, ids, tables):
  state = process.initialize()
  before = [np.asarray(w) for w in process.get_model_weights(state).trainable]
  out = comp(state, [str(i) for i in ids], [np.array([1, i], np.int64) for i in ids],
             [np.asarray(t, np.int32) for t in tables])
  after = [np.asarray(w) for w in process.get_model_weights(out.state).trainable]
  return (np.concatenate([(b - a).ravel() for a, b in zip(after, before)]),
          out.metrics['client_work']['train'])


@pytest.mark.parametrize('sigma', [0.0, 0.7])
def test_a_gradient_canary_is_clipped_noised_and_divided_like_an_example(tmp_path, sigma):
  lr, clip, norm, b = 0.5, 0.05, 3.0, 10
  process, comp = _dpfl_with_gradient_canaries(tmp_path, sigma, clip, norm)
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 3, shapes)
  host_alone = [[canaries.NOT_A_CANARY]]
  plain, train = _round(process, comp, [0, 1], [host_alone, canaries.no_canaries()])
  # Canary 2 joins the host's one step: clipped to C like its examples, in the same sum
  # as they are, under the same noise draw (same seed), divided by the batch's B; the
  # round's weighted mean gives the host 10 of 20 examples.
  joined, _ = _round(process, comp, [0, 1], [[[2]], canaries.no_canaries()])
  np.testing.assert_allclose(joined - plain, 0.5 * lr * clip * u[2] / b, atol=1e-6)
  both, _ = _round(process, comp, [0, 1], [[[0, 2]], canaries.no_canaries()])
  np.testing.assert_allclose(both - plain, 0.5 * lr * clip * (u[0] + u[2]) / b, atol=1e-6)
  assert int(train['num_steps']) == 2  # canaries are no extra steps
  # The auditor's view: the host's upload (here the round's delta) on each u_j.
  upload, train_alone = _round(process, comp, [0], [[[2]]])
  np.testing.assert_allclose(train_alone['upload_norm'], np.linalg.norm(upload), rtol=1e-4)
  np.testing.assert_allclose(train_alone['canary_projections'], u @ upload, atol=1e-6)
  # A client that is not the host scores nothing.
  _, none = _round(process, comp, [1], [canaries.no_canaries()])
  assert float(none['upload_norm']) == 0 and not np.any(none['canary_projections'])


def test_a_gradient_canary_is_not_clipped_where_examples_are_not(tmp_path):
  # paper_order (A-DPFL Alg. 3 as printed) clips the noised mean, not the examples: with
  # a clip that does not bind, the canary enters at its full norm.
  lr, norm, b = 0.5, 0.01, 10
  process, comp = _dpfl_with_gradient_canaries(tmp_path, 0.0, 1e6, norm, 'paper_order')
  shapes = [w.shape for w in process.get_model_weights(process.initialize()).trainable]
  u = canaries.canary_directions(7, 3, shapes)
  plain, _ = _round(process, comp, [0], [[[canaries.NOT_A_CANARY]]])
  joined, _ = _round(process, comp, [0], [[[1]]])
  np.testing.assert_allclose(joined - plain, lr * norm * u[1] / b, atol=1e-6)


def test_gradient_canaries_join_the_host_s_steps_as_its_examples_would():
  from tffdp.data.federated import PoissonLot  # pylint: disable=g-import-not-at-top
  sizes = np.array([95, 40, 60])
  aud = canaries.GradientAuditor(400, 3, sizes, ShuffleBatch(20, 2),
                                 [np.zeros((5, 2), np.float32)])
  assert list(aud.cohort(0, np.array([0, 2]))) == [0, 2] and aud.host == 0
  steps = aud.steps(4)
  assert len(steps) == 2 * 5  # E * ceil(95 / 20)
  # Every included canary once per epoch, never a left-out one.
  for epoch in (steps[:5], steps[5:]):
    joined = np.sort(np.concatenate(epoch))
    np.testing.assert_array_equal(joined, np.flatnonzero(aud.included))
  tables = aud.tables(4, np.array([2, 0]))
  np.testing.assert_array_equal(tables[0], canaries.no_canaries())
  assert tables[1].shape[0] == 10 and set(tables[1][3]) - {-1} == set(steps[3])
  assert aud.joined(4, np.array([2, 0])) == 2 * aud.included.sum()
  assert aud.joined(4, np.array([1, 2])) == 0
  assert all(len(t) == 1 for t in aud.tables(4, np.array([1, 2])))
  lot = canaries.GradientAuditor(2000, 3, sizes, PoissonLot(0.1),
                                 [np.zeros((5, 2), np.float32)])
  lot.cohort(0, np.array([1]))
  rates = [len(lot.steps(r)[0]) / lot.included.sum() for r in range(20)]
  assert abs(np.mean(rates) - 0.1) < 0.01
  with pytest.raises(ValueError, match='upload'):
    aud.observe(np.array([0]), [np.zeros((5, 2))], 4)


def test_the_audit_of_dpfl_stays_below_its_guarantee_and_catches_a_planted_bug(tmp_path):
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  # One DP-SGD step a round (B >= every client's size), the host in every round.
  kw = dict(clients=10, clients_per_round=10, batch_size=200, rounds=4, clip_norm=0.5,
            audit_canaries=400)
  honest = _audit_run(tmp_path, 'dpfl', method='dpfl', noise_multiplier=10.0, **kw)
  host = honest['audit']['host']
  assert honest['audit']['unit'].startswith('sample-level')
  assert 0 < honest['audit']['epsilon_guaranteed_host'] <= honest['epsilon_guaranteed']
  for model in ('every_round', 'final_model'):
    assert (honest['audit'][model]['epsilon_lower_bound']
            <= honest['audit']['epsilon_guaranteed_host'])
  assert honest['audit']['joins'] == 4 * honest['audit']['included']
  assert host in range(10)

  def build(ctx, hp):  # DPFL whose ledgers account sigma 10 while its clients add 0.1
    c = ctx.config
    m = baselines.build_dpfl(ctx.keras_builder, ctx.data, learning_rate=c.learning_rate,
                             batch_size=c.batch_size, noise_multiplier=0.1,
                             clip_norm=c.clip_norm, seed=c.seed)
    releases = lambda cohort, state=None: common.dp_sgd_releases(
        cohort, ctx.data, m.batching, 10.0, False)
    m.accounting.claimed = m.accounting.guaranteed = releases
    m.accounting.executed = None   # its clients' stated sigma would give it away first
    return m
  registry.register(registry.MethodSpec('understated_dpfl', build, registry.MethodHparams,
                                        'test'))
  try:
    bug = _audit_run(tmp_path, 'bug', method='understated_dpfl', noise_multiplier=10.0, **kw)
  finally:
    registry.unregister('understated_dpfl')
  assert bug['audit']['epsilon_guaranteed_host'] == honest['audit']['epsilon_guaranteed_host']
  assert bug['epsilon_lower_bound'] > bug['audit']['epsilon_guaranteed_host']


def test_dp_scaffold_s_steps_take_a_gradient_canary_like_an_example():
  from tffdp.algorithms import dp_scaffold  # pylint: disable=g-import-not-at-top
  lr, clip, b = 0.5, 0.05, 10
  builder = BUILDER
  rng = np.random.default_rng(1)
  batches = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=rng.random((b, *SHAPE), np.float32), y=rng.integers(0, 10, b).astype(np.int32))
  ).batch(b)
  with canaries.inserting(3.0, 7, 4, count=3) as insertion:
    update = dp_scaffold.build_client_update(builder, lr, insertion)
  model = builder()
  x = [v.numpy() for v in model.trainable_variables]
  zeros = [np.zeros_like(w) for w in x]
  u = canaries.canary_directions(7, 3, [w.shape for w in x])

  def dy(table):
    out, _, _, metrics = update(x, zeros, zeros, batches, tf.constant([1, 2], tf.int64),
                                tf.constant(0.7), tf.constant(clip), tf.constant(table))
    return np.concatenate([np.asarray(t).ravel() for t in out]), metrics

  plain, _ = dy([[canaries.NOT_A_CANARY]])
  joined, metrics = dy([[1]])
  # dy = trained - x: the canary's clipped gradient, under the same noise draw, moves it
  # by -lr C u_1 / B; the upload the server receives is scored against each canary.
  np.testing.assert_allclose(joined - plain, -lr * clip * u[1] / b, atol=1e-6)
  np.testing.assert_allclose(metrics['canary_projections'], u @ -joined, atol=1e-6)


def test_a_canary_client_of_dp_fedags_sends_its_direction_and_its_data_s_loss(tmp_path):
  # DP-FedAGS's clients send <update=g, loss, num_examples>: a canary replaces g only.
  from tffdp.algorithms import dp_fedags  # pylint: disable=g-import-not-at-top
  data, builder = _toy(tmp_path)
  work = dp_fedags.gradient_client_work(builder, data, learning_rate=0.1, local_epochs=1)
  wrapped = canaries.with_canaries(work, 2.5, seed=7)
  weights = common.initial_weights_computation(builder, 0)()
  value = canaries.client_value(data.client_data_computation(ShuffleBatch(10, 1)))
  clients = [value('0', np.array([1, 0], np.int64), np.int32(c)) for c in (-1, 1)]
  out = wrapped.next(wrapped.initialize(), [weights] * 2, clients)
  real, canary = out.result
  u = canaries.canary_directions(7, 2, [w.shape for w in weights.trainable])[1]
  got = np.concatenate([np.asarray(t).ravel() for t in canary.update['update']])
  np.testing.assert_allclose(got, 2.5 * u, atol=1e-6)
  assert float(canary.update['loss']) == pytest.approx(float(real.update['loss']))
  assert float(canary.update['num_examples']) == float(real.update['num_examples']) == 10
  assert float(canary.update_weight) == float(real.update_weight)


@pytest.mark.parametrize('method', ['dp_fedags', 'cpsgd', 'cosafed'])
def test_the_audit_of_an_inf_method_runs_with_canary_clients(tmp_path, method):
  s = _audit_run(tmp_path, method, method=method, audit_canaries=100, clients=20,
                 clients_per_round=5, rounds=3)
  assert s['epsilon_guaranteed'] == 'inf' and s['audit']['joins'] > 0
  for model in ('every_round', 'final_model'):
    assert s['audit'][model]['epsilon_lower_bound'] >= 0
  # Canary clients keep their own ledgers (they join by their own draw, possibly more
  # rounds than any real client); the audit holds the bound against the larger.
  a = s['audit']
  assert a['epsilon_guaranteed_canaries'] > 0 and a['epsilon_claimed_canaries'] >= 0
  for kind in ('claimed', 'guaranteed'):
    assert a[f'epsilon_{kind}_compared'] == max(a[f'epsilon_{kind}_canaries'],
                                                float(s[f'epsilon_{kind}']))
  assert 1 <= a['max_joins'] <= 3
  if method != 'cosafed':
    # DP-FedAGS and cpSGD claim epsilon = 0.5 for the whole run (Theorem 2 / the
    # per-round budget); their canaries give a lower bound above it.
    assert s['epsilon_claimed'] == pytest.approx(0.5)
    assert s['epsilon_lower_bound'] > s['epsilon_claimed']


def test_a_gradient_audit_resumes_to_the_same_report_and_skips_rounds_without_its_host(
    tmp_path):
  from tffdp import config as config_lib, runner  # pylint: disable=g-import-not-at-top
  kw = dict(method='dpfl', noise_multiplier=1.0, audit_canaries=40, clients=10,
            clients_per_round=3, rounds=6)
  full = _audit_run(tmp_path, 'a', **kw)
  _audit_run(tmp_path, 'b', stop_after_round=3, **kw)  # pauses with a checkpoint
  cfg = config_lib.RunConfig.create(**dict(AUDIT_TOY, out=str(tmp_path / 'b'), **kw))
  resumed = runner.run(cfg, resume=True, log=lambda s: None)
  assert resumed['audit'] == full['audit']
  # The host joined only the rounds it was drawn into (3 of 10 clients a round): each
  # included canary once per such round (one epoch), none in the others.
  import csv  # pylint: disable=g-import-not-at-top
  with open(tmp_path / 'a' / 'metrics.csv') as f:
    joined = [int(r['audit_canaries_joined']) for r in csv.DictReader(f)]
  a = full['audit']
  assert set(joined) <= {0, a['included']} and 0 < sum(joined) == a['joins'] < 6 * a['included']


def test_aadp_fl_s_canaries_join_at_its_own_participation_rate(tmp_path):
  # AADP-FL draws its own Poisson cohorts at q_user (not K / N): canaries join at q_user.
  s = _audit_run(tmp_path, 'aadp', method='aadp_fl', q_user=0.5, audit_canaries=200,
                 clients=20, clients_per_round=2, rounds=4)
  a = s['audit']
  expected = 0.5 * 4 * a['included']
  assert abs(a['joins'] - expected) < 4 * np.sqrt(expected / 2)
  assert a['every_round']['epsilon_lower_bound'] <= float(s['epsilon_guaranteed'])


def test_adap_dp_fl_s_gradient_query_takes_a_canary_clipped_to_the_client_s_threshold():
  # One slice of two clients: the host (row 0) with an empty lot and canary 1, the other
  # with its lot and no canary. Zero noise, Adam reset with epsilon 1: the host's step is
  # lr * m / (sqrt(v) + 1) with m = g, v = g^2, g = C^0 u_1 / L (the canary clipped to the
  # host's own threshold, divided by the expected lot size).
  from tffdp.algorithms import adap_dp_fl  # pylint: disable=g-import-not-at-top
  lr, lot, clip = 0.1, 5.0, np.array([0.3, 0.7], np.float32)
  with canaries.inserting(4.0, 7, 2, count=3) as insertion:
    update = adap_dp_fl._build_slice_update(  # pylint: disable=protected-access
        BUILDER, 2, lot, lr, 1.0, 'fixed', 'reset',
        dict(beta_1=0.9, beta_2=0.999, epsilon=1.0), insertion=insertion)
  model = BUILDER()
  w = [v.numpy() for v in model.trainable_variables]
  shapes = [x.shape for x in w]
  u = canaries.canary_directions(7, 3, shapes)
  rng = np.random.default_rng(0)
  zeros = lambda: [np.zeros((2, *x.shape), np.float32) for x in w]
  state = collections.OrderedDict(clip_norm=clip, adam_m=zeros(), adam_v=zeros(),
                                  adam_step=np.zeros(2, np.float32))
  data = collections.OrderedDict(
      x=rng.random((4, *SHAPE)).astype(np.float32), y=rng.integers(0, 10, 4).astype(np.int32),
      row_splits=np.array([0, 0, 4]), seeds=np.array([[1, 2], [3, 4]]),
      active=np.array([True, False]), dataset_size=np.array([10.0, 10.0], np.float32),
      canaries=np.array([[1, canaries.NOT_A_CANARY], [canaries.NOT_HOST] * 2], np.int32))
  update_sum, weight, _, _, _, _, projections, norm = update(w, 0.0, state, data)
  g = clip[0] * u[1] / lot
  m_hat, v_hat = g, g * g  # Adam's bias-corrected first step
  step = lr * m_hat / (np.sqrt(v_hat) + 1.0)
  got = np.concatenate([np.asarray(t).ravel() for t in update_sum]) / float(weight)
  np.testing.assert_allclose(got, step, atol=1e-7)
  np.testing.assert_allclose(projections, u @ step, atol=1e-7)
  np.testing.assert_allclose(norm, np.linalg.norm(step), rtol=1e-5)


def test_adap_dp_fl_s_lots_take_gradient_canaries_at_the_host_s_rate(tmp_path):
  # Adap DP-FL (own slices, per-client rates q_k = L / |D^k|): canaries join the host's
  # lots at its own rate, and with much noise the bound stays below the host's guarantee.
  kw = dict(method='adap_dp_fl', clients=4, lot_size=700, rounds=2, audit_canaries=100,
            learning_rate=0.01)
  quiet = _audit_run(tmp_path, 'quiet', noise_multiplier=20.0, **kw)
  a = quiet['audit']
  assert a['host'] == 0 and a['unit'].startswith('sample-level')
  assert quiet['epsilon_lower_bound'] <= a['epsilon_guaranteed_host']
  # Joins: each included canary at q_0 = L / |D^0| per round (two rounds).
  from tffdp import config as config_lib, runner  # pylint: disable=g-import-not-at-top
  exp = runner.build_experiment(config_lib.RunConfig.create(**dict(
      AUDIT_TOY, out=str(tmp_path / 'x'), **kw)).resolved(), log=lambda s: None)
  q = 700 / exp.data.client_sizes[0]
  assert abs(a['joins'] - 2 * q * a['included']) < 4 * np.sqrt(2 * a['included'])
