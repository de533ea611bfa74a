"""Baselines and DP-SGD client work: type signatures, exact zero-noise rounds, noise scale."""

import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import models, runner
from tffdp.algorithms import aadp_fl, baselines
from tffdp.data import FederatedData

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


@pytest.fixture()
def tiny(tmp_path):
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (8, *SHAPE), dtype=np.uint8)
  y = np.array([0, 1, 2, 3, 4, 5, 6, 7])
  return FederatedData(x, y, [np.arange(4), np.arange(4, 8)], cache_dir=str(tmp_path)), x, y


def run_round(method, data, cohort=(0, 1)):
  round_fn = runner.build_round_computation(method, data)
  state = method.process.initialize()
  w0 = method.process.get_model_weights(state)
  seeds = [np.array([7, c], np.int64) for c in cohort]
  if method.clients_per_slice:  # cohort slices (`runner.slice_inputs`)
    out = round_fn(state, runner.slice_inputs(np.asarray(cohort), seeds,
                                              method.clients_per_slice))
  else:
    out = round_fn(state, [str(c) for c in cohort], seeds)
  w1 = method.process.get_model_weights(out.state)
  return [np.asarray(a, np.float64) for a in w0.trainable], \
         [np.asarray(a, np.float64) for a in w1.trainable], out


def logreg_example_grads(w, xs, ys):
  """Per-example gradients of softmax cross-entropy for logits = x W + b (float64)."""
  kernel, bias = w
  x = xs.reshape(len(xs), -1).astype(np.float64) / 255.0
  logits = x @ kernel + bias
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  d = p - np.eye(10)[ys]
  return [np.einsum('bi,bo->bio', x, d), d]


def dp_sgd_update(w, xs, ys, lr, clip):
  gk, gb = logreg_example_grads(w, xs, ys)
  norms = np.sqrt((gk ** 2).sum((1, 2)) + (gb ** 2).sum(1))
  s = np.minimum(1.0, clip / norms)
  return [lr * np.einsum('b,bio->io', s, gk) / len(ys), lr * (s @ gb) / len(ys)]


def test_client_work_type_signature(tiny):
  data, _, _ = tiny
  m = baselines.build_dpfl(BUILDER, data, learning_rate=0.1, batch_size=4,
                           noise_multiplier=1.0, clip_norm=1.0)
  cw = m.process.next.type_signature
  state_type = m.process.initialize.type_signature.result
  assert cw.parameter[0].is_equivalent_to(state_type)
  assert cw.parameter[1].is_equivalent_to(tff.FederatedType(data.client_data_type, tff.CLIENTS))
  assert str(state_type.member.client_work) == '<noise_multiplier=float32,clip_norm=float32>'
  expected_metrics = '<loss_sum=float32,num_examples=int64,num_steps=int32>'
  assert str(cw.result.metrics.member.client_work.train) == expected_metrics
  # The clients' (examples, steps, sigma) rows, gathered for up to N clients.
  assert str(cw.result.metrics.member.client_work.dp_event) == (
      f'<float32[{data.num_clients},3],int32>')


def test_fedavg_zero_noise_exact(tiny):
  data, x, y = tiny
  lr = 0.5
  m = baselines.build_fedavg(BUILDER, data, learning_rate=lr, batch_size=4)
  w0, w1, out = run_round(m, data)
  updates = []
  for idx in (np.arange(4), np.arange(4, 8)):
    gk, gb = logreg_example_grads(w0, x[idx], y[idx])
    updates.append([lr * gk.mean(0), lr * gb.mean(0)])
  expected = [w0[i] - 0.5 * (updates[0][i] + updates[1][i]) for i in range(2)]
  for a, b in zip(w1, expected):
    np.testing.assert_allclose(a, b, atol=2e-6)
  assert int(out.metrics['client_work']['train']['num_examples']) == 8


@pytest.mark.parametrize('clip', [1e-2, 1e3])
def test_dpfl_zero_noise_exact(tiny, clip):
  data, x, y = tiny
  lr = 0.5
  m = baselines.build_dpfl(BUILDER, data, learning_rate=lr, batch_size=4,
                           noise_multiplier=0.0, clip_norm=clip)
  w0, w1, _ = run_round(m, data)
  ups = [dp_sgd_update(w0, x[i], y[i], lr, clip) for i in (np.arange(4), np.arange(4, 8))]
  for k in range(2):
    np.testing.assert_allclose(w1[k], w0[k] - 0.5 * (ups[0][k] + ups[1][k]), atol=2e-6)


def test_dpfl_noise_scale(tiny):
  data, _, _ = tiny
  sigma, clip, batch = 1000.0, 1e-3, 4
  m = baselines.build_dpfl(BUILDER, data, learning_rate=1.0, batch_size=batch,
                           noise_multiplier=sigma, clip_norm=clip)
  w0, w1, _ = run_round(m, data, cohort=(0,))
  delta = np.concatenate([(a - b).ravel() for a, b in zip(w0, w1)])
  # Update = (clipped sum + N(0, (sigma C)^2)) / B; the signal is at most C/B = 2.5e-4.
  assert np.std(delta) == pytest.approx(sigma * clip / batch, rel=0.03)
  assert abs(np.mean(delta)) < 0.03 * sigma * clip / batch


@pytest.mark.parametrize('clients_per_slice', [None, 2])
def test_dp_fedavg_zero_noise_exact_and_noise_scale(tiny, clients_per_slice):
  """The sum of the clipped updates over the cohort size; with `clients_per_slice=2`
  both updates are clipped inside one slice (`update_clip`) and summed there."""
  data, x, y = tiny
  lr, clip = 0.5, 0.05
  m = baselines.build_dp_fedavg(BUILDER, data, learning_rate=lr, batch_size=4,
                                noise_multiplier=0.0, clip_norm=clip, clients_per_round=2,
                                clients_per_slice=clients_per_slice)
  w0, w1, _ = run_round(m, data)
  total = [np.zeros_like(a) for a in w0]
  for idx in (np.arange(4), np.arange(4, 8)):
    gk, gb = logreg_example_grads(w0, x[idx], y[idx])
    u = [lr * gk.mean(0), lr * gb.mean(0)]
    norm = np.sqrt(sum((t ** 2).sum() for t in u))
    assert norm > clip  # the clip is active
    total = [t + v * min(1.0, clip / norm) for t, v in zip(total, u)]
  for k in range(2):
    np.testing.assert_allclose(w1[k], w0[k] - total[k] / 2, atol=2e-6)

  sigma, clip = 1000.0, 1e-3
  m = baselines.build_dp_fedavg(BUILDER, data, learning_rate=lr, batch_size=4,
                                clients_per_slice=clients_per_slice,
                                noise_multiplier=sigma, clip_norm=clip, clients_per_round=2)
  w0, w1, _ = run_round(m, data)
  delta = np.concatenate([(a - b).ravel() for a, b in zip(w0, w1)])
  assert np.std(delta) == pytest.approx(sigma * clip / 2, rel=0.03)


def test_dp_sgd_paper_order_zero_noise_exact(tiny):
  from tffdp.algorithms.dp_sgd import build_dp_sgd_client_work
  from tffdp.algorithms import common
  data, x, y = tiny
  lr, clip = 0.5, 1e-2
  cw = build_dp_sgd_client_work(BUILDER, common.weights_type_of(BUILDER),
                                data.client_data_type, learning_rate=lr,
                                dp_sgd='paper_order', noise_multiplier=0.0, clip_norm=clip)
  process = common.compose_fedavg_style(BUILDER, cw, tff.aggregators.MeanFactory(), seed=0)
  m = baselines.build_fedavg(BUILDER, data, learning_rate=lr, batch_size=4)
  m.process = process
  w0, w1, _ = run_round(m, data, cohort=(0,))
  gk, gb = logreg_example_grads(w0, x[:4], y[:4])
  g = [gk.mean(0), gb.mean(0)]
  norm = np.sqrt(sum((t ** 2).sum() for t in g))
  for k in range(2):
    np.testing.assert_allclose(w1[k], w0[k] - lr * g[k] * min(1.0, clip / norm), atol=2e-6)


@pytest.mark.parametrize('kw', [dict(learning_rate=0.0), dict(noise_multiplier=-1.0),
                                dict(clip_norm=0.0)])
def test_invalid_hyperparameters(tiny, kw):
  data, _, _ = tiny
  args = dict(learning_rate=0.1, batch_size=4, noise_multiplier=1.0, clip_norm=1.0)
  args.update(kw)
  with pytest.raises(ValueError, match=list(kw)[0]):
    baselines.build_dpfl(BUILDER, data, **args)


def per_client_and_sliced_rounds(tmp_path, build, clients_per_slice, data_seed, **kw):
  """One round of `build(BUILDER, data, **kw)` on 3 random clients (8, 12 and 10 examples)
  with one TFF client per client and in slices of `clients_per_slice` (the last one
  padded): `(per-client method, its output, sliced method, its output)`."""
  rng = np.random.default_rng(data_seed)
  x = rng.integers(0, 256, (30, *SHAPE), dtype=np.uint8)
  y = rng.integers(0, 10, 30)
  data = FederatedData(x, y, [np.arange(0, 8), np.arange(8, 20), np.arange(20, 30)],
                       cache_dir=str(tmp_path))
  cohort = np.array([0, 1, 2])
  seeds = runner.client_seeds(runner.RunConfig(seed=3), 5, cohort)
  plain = build(BUILDER, data, **kw)
  out_plain = runner.build_round_computation(plain, data)(
      plain.process.initialize(), [str(c) for c in cohort], seeds)
  sliced = build(BUILDER, data, clients_per_slice=clients_per_slice, **kw)
  inputs = runner.slice_inputs(cohort, seeds, clients_per_slice)
  assert len(inputs) == -(-3 // clients_per_slice)
  out_sliced = runner.build_round_computation(sliced, data)(sliced.process.initialize(), inputs)
  return plain, out_plain, sliced, out_sliced


@pytest.mark.parametrize('clients_per_slice', [1, 2, 3])
def test_cohort_slices_give_the_same_round(tmp_path, clients_per_slice):
  """DPFL with noise, 3 clients: per-client TFF clients vs slices (last one padded)."""
  plain, out_plain, sliced, out_sliced = per_client_and_sliced_rounds(
      tmp_path, baselines.build_dpfl, clients_per_slice, 1, learning_rate=0.1, batch_size=4,
      noise_multiplier=0.7, clip_norm=1.0, local_epochs=2)
  for a, b in zip(plain.process.get_model_weights(out_plain.state).trainable,
                  sliced.process.get_model_weights(out_sliced.state).trainable):
    if clients_per_slice == 1:  # the same float32 operations: bit-identical
      np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  train_plain = runner.client_work_metrics(out_plain.metrics)['train']
  train_sliced = runner.client_work_metrics(out_sliced.metrics)['train']
  assert int(train_sliced['num_examples']) == int(train_plain['num_examples']) == 60
  assert int(train_sliced['num_steps']) == int(train_plain['num_steps'])
  # Epoch-aligned batches: E * ceil(n / B) = 2 * (2 + 3 + 3) steps, none spanning epochs.
  assert int(train_plain['num_steps']) == 16
  # Each client states (examples, steps, float32 sigma) on both paths (padding: no row).
  from tffdp.algorithms import dp_sgd  # pylint: disable=g-import-not-at-top
  stated = [dp_sgd.stated_rows(runner.client_work_metrics(out.metrics))
            for out in (out_plain, out_sliced)]
  expected = [[16, 4, np.float32(0.7)], [24, 6, np.float32(0.7)], [20, 6, np.float32(0.7)]]
  for rows in stated:
    np.testing.assert_array_equal(rows[np.argsort(rows[:, 0])], sorted(expected))


@pytest.mark.parametrize('clients_per_slice', [1, 2, 3])
def test_dp_fedavg_in_cohort_slices_gives_the_same_round(tmp_path, clients_per_slice):
  """Client-level DP-FedAvg, 3 clients, noise and an active clip: per-client TFF clients
  (TFF's DP aggregator clips each update) vs slices (each update clipped in its slice,
  the slices' sums noised by the same seeded query; the last slice padded)."""
  plain, out_plain, sliced, out_sliced = per_client_and_sliced_rounds(
      tmp_path, baselines.build_dp_fedavg, clients_per_slice, 2, learning_rate=0.5,
      batch_size=4, noise_multiplier=0.3, clip_norm=0.05, clients_per_round=3,
      local_epochs=2)
  cohort = np.array([0, 1, 2])
  w0 = plain.process.get_model_weights(plain.process.initialize()).trainable
  w_plain = plain.process.get_model_weights(out_plain.state).trainable
  w_sliced = sliced.process.get_model_weights(out_sliced.state).trainable
  moved = np.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(w0, w_plain)))
  assert moved > 0.05 * 0.3 / 3  # the noise and the clipped updates moved the model
  for a, b in zip(w_plain, w_sliced):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The same DP event, stated by the aggregator of each.
  executed = [m.accounting.executed(cohort, out.state, out.metrics)
              for m, out in ((plain, out_plain), (sliced, out_sliced))]
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  assert privacy.releases_differ(executed[0], executed[1]) is None
  train = [runner.client_work_metrics(out.metrics)['train'] for out in (out_plain, out_sliced)]
  assert int(train[0]['num_examples']) == int(train[1]['num_examples']) == 60  # E = 2


def test_update_clip_needs_cohort_slices_and_a_positive_norm(tiny):
  data, _, _ = tiny
  lr, clip = 0.5, 0.05
  with pytest.raises(ValueError, match='update_clip must be positive'):
    baselines.client_work(BUILDER, data, learning_rate=lr, dp_sgd='none',
                          clients_per_slice=2, update_clip=0.0)
  with pytest.raises(ValueError, match='set clients_per_slice'):
    baselines.client_work(BUILDER, data, learning_rate=lr, dp_sgd='none', update_clip=clip)


def test_dp_sgd_step_check_compares_measured_and_declared_steps(tiny):
  from tffdp.algorithms import common  # pylint: disable=g-import-not-at-top
  from tffdp.data import ShuffleBatch  # pylint: disable=g-import-not-at-top
  data, _, _ = tiny
  m = baselines.build_dpfl(BUILDER, data, learning_rate=0.1, batch_size=3,
                           noise_multiplier=1.0, clip_norm=1.0, local_epochs=2)
  cohort = np.array([0, 1])
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  # 4 examples per client, B = 3, E = 2: 2 x ceil(4 / 3) = 4 steps per client.
  assert int(metrics['client_work']['train']['num_steps']) == 8
  assert m.accounting.check_round(cohort, state, metrics) is None
  wrong = common.dp_sgd_step_check(data, ShuffleBatch(4, 2))(cohort, state, metrics)
  assert 'ran 8 DP-SGD steps but the DP events declared 4' in wrong
  # The examples are measured too: a client that skipped one is caught.
  short = {'client_work': {'train': dict(metrics['client_work']['train'], num_examples=15)}}
  assert 'processed 15 examples but' in m.accounting.check_round(cohort, state, short)


@pytest.mark.parametrize('clients_per_slice', [None, 2])
def test_dpfl_accounts_the_steps_its_clients_state(tmp_path, clients_per_slice):
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, (30, *SHAPE), dtype=np.uint8)
  data = FederatedData(x, rng.integers(0, 10, 30),
                       [np.arange(0, 8), np.arange(8, 20), np.arange(20, 30)],
                       cache_dir=str(tmp_path))
  build = lambda sigma: baselines.build_dpfl(
      BUILDER, data, learning_rate=0.1, batch_size=4, noise_multiplier=sigma, clip_norm=1.0,
      local_epochs=2, clients_per_slice=clients_per_slice)
  m = build(1.3)
  cohort = np.array([2, 0, 1])
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  executed = m.accounting.executed(cohort, state, metrics)
  # Every client: one Gaussian release per epoch at the float32 sigma it drew with.
  expected = dp_accounting.SelfComposedDpEvent(
      dp_accounting.GaussianDpEvent(float(np.float32(1.3))), 2)
  assert [(sorted(c.tolist()), e, r) for c, e, r in executed] == [([0, 1, 2], expected, '')]
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, state), executed) is None
  assert 'client' in privacy.releases_differ(build(1.2).accounting.guaranteed(cohort, state),
                                             executed)
  # Rows that give other steps, or another cohort, leave no guarantee with the reason.
  work = dict(metrics['client_work'])
  rows, count = work['dp_event']
  more = np.array(rows)
  more[np.argmax(more[:, 0] == 24), 1] += 1   # client 1 (12 examples) ran 7 steps, not 6
  bad = {'client_work': dict(work, dp_event=(more, count))}
  out = m.accounting.executed(cohort, state, bad)
  assert [r for _, e, r in out if e is None] == [
      'client 1 ran 7 noised steps; its event covers 6']
  assert 'not the cohort' in m.accounting.executed(np.array([0, 0, 1]), state, metrics)[0][2]


def test_dp_fedavg_accounts_the_event_its_tff_aggregator_states(tiny):
  data, _, _ = tiny
  kw = dict(learning_rate=0.1, batch_size=4, clip_norm=0.5, clients_per_round=2)
  from tffdp import privacy  # pylint: disable=g-import-not-at-top
  m = baselines.build_dp_fedavg(BUILDER, data, noise_multiplier=1.3, **kw)
  cohort = np.array([0, 1])
  declared = m.accounting.guaranteed(cohort, m.initialize())
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  executed = m.accounting.executed(cohort, state, metrics)   # read from the new state
  assert [float(e.noise_multiplier) for _, e, _ in executed] == pytest.approx([1.3])  # uniform
  assert privacy.releases_differ(declared, executed) is None
  # A method declaring another sigma than its aggregator ran is caught by the runner.
  other = baselines.build_dp_fedavg(BUILDER, data, noise_multiplier=2.0, **kw)
  problem = privacy.releases_differ(other.accounting.guaranteed(cohort, other.initialize()),
                                    executed)
  assert 'GaussianDpEvent(noise_multiplier=2.0)' in problem


def test_runner_accounts_the_events_the_mechanism_states_and_stops_where_they_differ(
    tmp_path):
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  seen = []

  def build(ctx, hp, scale):
    m = registry.get('aadp_fl').build(ctx, hp)
    stated = m.accounting.executed

    def executed(cohort, state, metrics):
      releases = stated(cohort, state, metrics)
      seen.append(releases)
      return [(c, dp_accounting.GaussianDpEvent(e.noise_multiplier * scale), why)
              for c, e, why in releases]
    m.accounting.executed = executed
    return m

  def run(name, scale):
    registry.register(registry.MethodSpec(
        name, lambda ctx, hp: build(ctx, hp, scale), registry.get('aadp_fl').hparams))
    try:
      cfg = config_lib.RunConfig.create(
          method=name, dataset='synthetic', clients=4, clients_per_round=4, partition='iid',
          model='logistic_regression', batch_size=32, rounds=2, clip_norm=0.25,
          num_validation=500, out=str(tmp_path / name), client_cache_dir=str(tmp_path / 'c'))
      return runner.run(cfg, log=lambda s: None)
    finally:
      registry.unregister(name)

  # As stated (q_user 1: one Gaussian per client and round): the run's epsilon is the
  # stated events' composition, read for the round just run.
  summary = run('aadp_fl_stated', 1.0)
  assert len(seen) == 2
  epsilons = []
  for client in range(4):
    acc = dp_accounting.rdp.RdpAccountant(list(aadp_fl.THEOREM1_ORDERS))
    for releases in seen:
      acc.compose(next(e for c, e, _ in releases if client in c))
    epsilons.append(acc.get_epsilon(1e-5))
  assert summary['epsilon_guaranteed'] == pytest.approx(max(epsilons), rel=1e-9)
  # Stated 1% apart from the declaration: the run stops before accounting round 1.
  with pytest.raises(runner.DeclaredEventError,
                     match='round 1: the DP events the mechanism states differ'):
    run('aadp_fl_misstated', 1.01)
  assert (tmp_path / 'aadp_fl_misstated' / 'metrics.csv').read_text() == ''


def test_runner_stops_before_accounting_a_round_that_breaks_its_declaration(tmp_path):
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import common, registry  # pylint: disable=g-import-not-at-top
  from tffdp.data import ShuffleBatch  # pylint: disable=g-import-not-at-top

  def build(ctx, hp):
    m = registry.get('dpfl').build(ctx, hp)
    m.accounting.check_round = common.dp_sgd_step_check(ctx.data, ShuffleBatch(1000))  # 1 step each
    return m

  registry.register(registry.MethodSpec('dpfl_misdeclared', build))
  try:
    cfg = config_lib.RunConfig.create(
        method='dpfl_misdeclared', dataset='synthetic', clients=4, clients_per_round=2,
        partition='iid', model='logistic_regression', batch_size=100, rounds=2,
        num_validation=500, out=str(tmp_path / 'r'), client_cache_dir=str(tmp_path / 'c'))
    with pytest.raises(runner.DeclaredEventError, match='round 1: the clients ran 28 DP-SGD'):
      runner.run(cfg, log=lambda s: None)
    assert (tmp_path / 'r' / 'metrics.csv').read_text() == ''
  finally:
    registry.unregister('dpfl_misdeclared')


def test_shuffle_batches_are_epoch_aligned(tiny, tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tffdp.data import ShuffleBatch  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  data = FederatedData(rng.integers(0, 256, (10, *SHAPE), dtype=np.uint8), np.arange(10) % 10,
                       [np.arange(10)], cache_dir=str(tmp_path / 'c'))
  batching = ShuffleBatch(4, local_epochs=2)
  seed = tf.constant([3, 0], tf.int64)
  ys = [b['y'].numpy() for b in data.client_batches(tf.constant('0'), seed, batching)]
  assert [len(b) for b in ys] == [4, 4, 2, 4, 4, 2]
  for epoch in (ys[:3], ys[3:]):  # each epoch holds every example exactly once
    assert sorted(np.concatenate(epoch)) == list(range(10))
  # The index path used by cohort slices gives the same batches.
  xs_, ys_, order, b, num_batches, epoch_size = data.client_batch_indices(
      tf.constant('0'), seed, batching)
  assert int(num_batches) == 6
  rows = [ys_.numpy()[FederatedData.batch_rows(order, tf.constant(s), b, epoch_size).numpy()]
          for s in range(6)]
  for got, want in zip(rows, ys):
    np.testing.assert_array_equal(got, want)


def test_each_hyperparameter_class_has_one_name():
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  classes = {registry.get(n).hparams for n in registry.names()}
  by_name = {}
  for c in classes:
    by_name.setdefault(c.__name__, []).append(c.__module__)
  assert {k: v for k, v in by_name.items() if len(v) > 1} == {}
  assert len(registry.names()) == 16


def test_builders_take_method_options_only_through_their_hyperparameter_class():
  """No `build_*` function of a method module gives an option of its methods'
  hyperparameter classes a default of its own (the options' defaults live in one place;
  a lower-level builder may take an option's value as a required keyword)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import importlib  # pylint: disable=g-import-not-at-top
  import inspect  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import registry  # pylint: disable=g-import-not-at-top
  restated = {}
  for module_name in registry.BUILTIN_MODULES:
    module = importlib.import_module(module_name)
    options = {f.name for spec in module.METHODS for f in dataclasses.fields(spec.hparams)}
    for name, fn in vars(module).items():
      if name.startswith('build_') and getattr(fn, '__module__', None) == module_name:
        defaulted = {p.name for p in inspect.signature(fn).parameters.values()
                     if p.default is not inspect.Parameter.empty}
        shared = sorted(options & defaulted)
        if shared:
          restated[f'{module_name}.{name}'] = shared
  assert restated == {}


def test_a_shared_builder_takes_only_its_method_s_hyperparameter_class():
  from tffdp.algorithms import cosafed, dp_fedags, registry  # pylint: disable=g-import-not-at-top
  assert registry.hparams_of('cpsgd', None, dp_fedags.HPARAMS) == dp_fedags.CPSGDHparams()
  hp = cosafed.ADPFLUploadHparams(p_fixed=0.5)
  assert registry.hparams_of('adpfl', hp, cosafed.HPARAMS) is hp
  with pytest.raises(ValueError, match='method must be one of dp_fedags, dp_fedsnlc'):
    registry.hparams_of('dp_fedag', None, dp_fedags.HPARAMS)
  # A subclass carries another method's options (SNLC's top_fraction is not DP-FedAvg's).
  with pytest.raises(TypeError, match='hp of dp_fedavg_ags must be a BaselineHparams'):
    registry.hparams_of('dp_fedavg_ags', dp_fedags.SNLCHparams(), dp_fedags.HPARAMS)
  with pytest.raises(ValueError, match='p_fixed must be in'):
    cosafed.ADPFLUploadHparams(p_fixed=1.5)


@pytest.mark.parametrize('method', ['fedavg', 'a_dpfl', 'cosafed'])
def test_model_weights_read_in_python_equal_the_process_s(tmp_path, method, monkeypatch):
  """The three state layouts (`LearningAlgorithmState`, `wrapped_learning_process`,
  cosAFed's own): the weights read without a TFF call equal `get_model_weights`, and the
  runner's check catches an accessor that reads the wrong part of the state."""
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import common  # pylint: disable=g-import-not-at-top
  cfg = config_lib.RunConfig(method=method, dataset='synthetic', rounds=2, clients=20,
                             clients_per_round=5, model='logistic_regression',
                             num_validation=100, out=str(tmp_path / 'out'),
                             client_cache_dir=str(tmp_path / 'clients'))
  m = runner.build_experiment(cfg, log=lambda s: None).method
  state = m.initialize()
  common.check_model_weights(m, state)
  expected = m.process.get_model_weights(state)
  read = m.model_weights
  if isinstance(read, functools.partial):  # the default: no TFF call to fall back on
    read = functools.partial(read.func, None)
  got = read(state)
  assert type(got) is type(expected)
  for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(expected)):
    np.testing.assert_array_equal(a, b)
  wrong = tff.learning.models.ModelWeights(
      [np.zeros_like(w) for w in expected.trainable], list(expected.non_trainable))
  monkeypatch.setattr(m, 'model_weights', lambda s: wrong)
  with pytest.raises(ValueError, match='differs from the process'):
    common.check_model_weights(m, state)


def test_state_model_weights_of_an_unknown_layout_needs_an_accessor():
  from tffdp.algorithms import common  # pylint: disable=g-import-not-at-top
  with pytest.raises(TypeError, match='give the method a model_weights accessor'):
    common.state_model_weights(None, {'model': 1})
  assert common.state_model_weights(lambda s: s['model'], {'model': 1}) == 1
