"""The arithmetic of the benchmarks' projections, and a smoke run of one benchmark (their
timings are not tested)."""

import argparse
import math

import pytest

from benchmarks import run


def test_project_run_counts_evaluated_rounds_once_each():
  row = lambda seconds, evaluation: dict(round_seconds=seconds, eval_seconds=evaluation)
  # Round 1 (tracing) is left out; rounds 2-3 train in 10 s, round 4 also evaluates (3 s).
  rows = [row(99.0, 50.0), row(10.0, None), row(10.0, None), row(13.0, 3.0)]
  seconds, train = run.project_run(rows, rounds=25, eval_every=10)
  assert train == 10.0
  assert seconds == pytest.approx(25 * 10.0 + 3 * 3.0)  # rounds 10, 20 and the last, 25
  # Every round evaluated: T x (training + evaluation) medians.
  every = [row(99.0, 50.0), row(12.0, 2.0), row(14.0, 4.0)]
  assert run.project_run(every, rounds=50, eval_every=1)[0] == pytest.approx(50 * (10 + 3))


def test_project_run_scales_random_cohorts_to_the_expected_size():
  row = lambda seconds, cohort: dict(round_seconds=seconds, eval_seconds=None,
                                     cohort_size=cohort)
  # Poisson cohorts of 7 and 5 clients at 1.5 s a client, 4 expected.
  rows = [row(60.0, 5), row(10.5, 7), row(7.5, 5)]
  assert run.project_run(rows, 10, 10, cohort=4)[1] == pytest.approx(6.0)
  assert run.project_run(rows, 10, 10)[1] == pytest.approx(9.0)  # as measured
  cfg = lambda **kw: argparse.Namespace(**{'clients_per_round': 20, 'method_options': {},
                                           **kw})
  assert run.expected_cohort(cfg()) == 20
  assert run.expected_cohort(cfg(method_options={'q_user': 0.2})) == pytest.approx(4)
  assert run.expected_cohort(cfg(clients_per_round=8)) == 8


def test_figure_cases_name_real_modules_and_models():
  import importlib  # pylint: disable=g-import-not-at-top
  from tffdp import models  # pylint: disable=g-import-not-at-top
  for module, dataset, model, eval_every, _ in run.FIGURE_CASES.values():
    assert hasattr(importlib.import_module(f'experiments.{module}'), 'curves')
    assert model in models.MODELS and dataset in ('mnist', 'cifar10') and eval_every >= 1


def test_aadp_fl_aggregation_benchmark_runs():
  from tffdp import runtime  # pylint: disable=g-import-not-at-top
  runtime.use_local_context()
  out = run.bench_aadp_fl_aggregation(1, clients=3, cases=run.AGGREGATION_CASES[:1])
  t_aadp, t_mean, t_clip, t_sort = out['MLP, MNIST (Fig. 3)']
  assert min(t_aadp, t_mean, t_clip, t_sort) > 0  # timings themselves are not tested


def test_guard_fails_only_a_regression_past_its_guard_and_noise():
  guards = {'a': (1.3, 1.3), 'b': (1.2, 1.8)}
  lines, code = run.guard_report([('a', 1.25, 0.05), ('b', 1.7, 0.1)], guards)
  assert code == 0
  assert 'target met' in lines[0] and 'target not met (guard 1.80x)' in lines[1]
  # 1.9 > 1.8 x (1 + 0.02): a regression; within the noise (1.9 <= 1.8 x 1.1) it is not.
  assert run.guard_report([('b', 1.9, 0.02)], guards)[1] == 1
  assert run.guard_report([('b', 1.9, 0.1)], guards)[1] == 0
  assert 'REGRESSED' in run.guard_report([('a', 1.5, 0.0)], guards)[0][0]


def test_dpsgd_benchmark_records_its_guarded_ratio(monkeypatch):
  monkeypatch.setattr(run, 'RESULTS', [])
  run.bench_dpsgd('Adap DP-FL CNN, batch 8', 'adap_dp_fl_cnn', 8, 1)
  ((name, ratio, noise),) = run.RESULTS
  assert name == 'dpsgd/adap_dp_fl_cnn' and ratio > 0 and noise >= 0
  with pytest.raises(KeyError, match='no guard'):
    run.record('dpsgd/no_such_model', 1.0, 0.0)


def test_client_level_benchmark_records_each_case_against_its_floor(monkeypatch, tmp_path):
  """Toy size (4 clients, cohort 2, 6 examples, batch 3): every case timed and guarded."""
  monkeypatch.setattr(run, 'RESULTS', [])
  monkeypatch.setattr(run, 'GUARDS', {f'client_level/toy/{name}': (1.2, 1.2) for name in (
      'fedavg', 'fedavg_one_slice', 'dp_fedavg', 'dp_fedavg_one_slice')})
  out = run.bench_client_level(1, str(tmp_path), 'toy', clients=4, per_client=6, cohort=2,
                               batch=3)
  assert set(out) == {'fedavg', 'fedavg_one_slice', 'dp_fedavg', 'dp_fedavg_one_slice'}
  assert all(tff_s > 0 and floor_s > 0 for tff_s, floor_s in out.values())
  assert [name for name, _, _ in run.RESULTS] == list(run.GUARDS)


def test_per_client_benchmark_times_each_stage_at_both_cohorts(tmp_path):
  """Toy size (4 clients of 6 examples, cohorts 1 and 3): a cost per client and a fixed
  cost for each of the four stages, the data stage reading every example."""
  out = run.bench_tff_per_client(1, str(tmp_path), clients=4, per_client=6, batch=3,
                                 cohorts=(1, 3))
  assert set(out) == {'dispatch', 'data', 'data_in_one', 'fedavg', 'fedavg_slices_of_1',
                      'aadp_fl', 'aadp_fl_slices_of_1', 'dp_fedavg_ags',
                      'dp_fedavg_ags_slices_of_1', 'floor'}
  assert all(math.isfinite(a) and math.isfinite(b) for a, b in out.values())


def test_tff_round_benchmark_records_its_ratios_under_the_model_name(monkeypatch, tmp_path):
  monkeypatch.setattr(run, 'RESULTS', [])
  out, floor = run.bench_tff('toy', 'adap_dp_fl_cnn', 3, 6, 3, 1, str(tmp_path),
                             slices=(None, 5))
  assert set(out) == {None, 5} and floor > 0
  assert [name for name, _, _ in run.RESULTS] == ['tff/adap_dp_fl_cnn/one_per_client',
                                                   'tff/adap_dp_fl_cnn/slices_of_5']


def test_dpsgd_profile_times_every_stage():
  out = run.bench_dpsgd_profile('Adap DP-FL CNN, batch 4', 'adap_dp_fl_cnn', 4, 1)
  assert list(out) == ['forward + loss', '+ backward to pre-activations',
                       '+ per-example factors and norms', '+ clipped sum',
                       '+ noise (= DP-SGD gradient)', 'non-private gradient']
  assert min(out.values()) > 0


def test_ghost_clipping_comparison_gives_the_same_norms_and_clipped_sum():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tffdp import models  # pylint: disable=g-import-not-at-top
  m = models.build_keras_model('lenet_cnn', (32, 32, 3), 10, seed=0)
  h = tf.random.stateless_uniform([5, 32, 32, 3], seed=[1, 2])
  scale = tf.random.stateless_uniform([5], seed=[5, 6])
  for layer in [l for l in m.layers if isinstance(l, tf.keras.layers.Conv2D)]:
    z = layer(h)
    d = tf.random.stateless_normal(z.shape, seed=[3, 4])
    (sq1, k1), (sq2, k2) = (f(h, d, layer, scale) for f in (
        run._per_example_norms_and_sum, run._ghost_norms_and_sum))  # pylint: disable=protected-access
    np.testing.assert_allclose(sq2, sq1, rtol=1e-4)
    np.testing.assert_allclose(k2, k1, rtol=1e-4, atol=1e-4 * float(tf.reduce_max(tf.abs(k1))))
    h = tf.nn.max_pool2d(tf.nn.relu(z), 2, 2, 'VALID')


def test_conv_benchmark_smoke(monkeypatch, capsys):
  monkeypatch.setattr(run, 'CONV_CASES', (('adap_dp_fl_cnn', (28, 28, 1), 3),))
  totals = run.bench_conv_grads(repeats=1)
  assert set(totals) == {'depthwise', 'extract_patches', 'picked', 'tffdp', 'ghost'}
  assert all(v > 0 for v in totals.values())
  out = capsys.readouterr().out
  assert 'depthwise* ' in out and 'extract_patches* ' in out  # the picked path per layer


def test_evaluation_benchmark_times_both_paths(tmp_path):
  out = run.bench_evaluation(1, str(tmp_path), n=1200, models_=('logistic_regression',),
                             methods=('fedavg',))
  assert set(out) == {'logistic_regression', 'fedavg'}
  assert all(t > 0 for pair in out.values() for t in pair)


def test_slices_benchmark_probes_the_published_config_both_ways(monkeypatch):
  probed = []
  monkeypatch.setattr(run.costs, 'find_published', lambda r, figs: {'method': 'lapfed'})
  monkeypatch.setattr(run.costs, 'probe', lambda config, data_dir, cache, rounds: (
      probed.append((config['clients_per_slice'], rounds)) or
      {'train_seconds': 0.2 if config['clients_per_slice'] is None else 0.1}))
  out = run.bench_slices_on_published('data', 'figures', 10, runs=('cosafed/x',))
  assert probed == [(None, 10), (1, 10)] and out == {'cosafed/x': (0.2, 0.1)}


def test_interleaved_calls_the_functions_in_turn():
  calls = []
  timings = run.interleaved((lambda: calls.append('a'), lambda: calls.append('b')), 3)
  assert calls == ['a', 'a', 'b', 'b'] + ['a', 'b'] * 3  # two warm-ups each, then in turn
  assert len(timings) == 2 and all(t.median >= 0 and t.spread >= 0 for t in timings)


def test_adap_dp_fl_breakdown_composes_two_rounds(tmp_path):
  """Toy size (4 clients of 20 examples): the state's size and the three timings."""
  import functools  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tffdp import models, runtime  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import adap_dp_fl  # pylint: disable=g-import-not-at-top
  from tffdp.data import FederatedData  # pylint: disable=g-import-not-at-top
  runtime.use_local_context()
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (80, 28, 28, 1), dtype=np.uint8)
  parts = [np.arange(i * 20, (i + 1) * 20) for i in range(4)]
  data = FederatedData(x, rng.integers(0, 10, 80), parts, cache_dir=str(tmp_path))
  val = (x[:10], rng.integers(0, 10, 10))
  builder = functools.partial(models.build_keras_model, 'adap_dp_fl_cnn', (28, 28, 1), 10)
  method = adap_dp_fl.build_adap_dp_fl(builder, data, val, noise_multiplier=1.0,
                                       hp=adap_dp_fl.AdapDPFLHparams(lot_size=4))
  state = method.initialize()
  breakdown = run._adap_dp_fl_breakdown  # pylint: disable=protected-access
  out = breakdown(method, state, np.array(data.client_ids), 1.0, 0.5, 1)
  # Two Adam moments of every weight for each of the 4 clients, plus their clip norms etc.
  params = sum(int(np.prod(w.shape)) for w in builder().trainable_weights)
  assert out['client_state_bytes'] >= 4 * 2 * params * 4
  assert out['client_state_bytes'] == sum(np.asarray(v).nbytes
                                          for v in tf.nest.flatten(state['clients']))
  assert all(out[k].median > 0 for k in ('round_trip', 'one_round', 'two_rounds'))
