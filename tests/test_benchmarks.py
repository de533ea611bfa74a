"""The arithmetic of the benchmarks' projections (their timings are not tested)."""

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


def test_figure_cases_name_real_modules_and_models():
  import importlib  # pylint: disable=g-import-not-at-top
  from tffdp import models  # pylint: disable=g-import-not-at-top
  for module, dataset, model, eval_every, _ in run.FIGURE_CASES.values():
    assert hasattr(importlib.import_module(f'experiments.{module}'), 'curves')
    assert model in models.MODELS and dataset in ('mnist', 'cifar10') and eval_every >= 1
