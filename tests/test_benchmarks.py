"""The arithmetic of the benchmarks' projections, and a smoke run of one benchmark (their
timings are not tested)."""

import argparse

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
