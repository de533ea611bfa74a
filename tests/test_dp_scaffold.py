"""DP-SCAFFOLD (AADP-FL's baseline): with zero noise and no clipping it is plain SCAFFOLD
(NumPy reference, option II, two rounds on changing cohorts); the controls live in the
checkpoint (a resumed run equals an uninterrupted one); ledgers as DPFL's."""

import functools

import numpy as np
import pytest

from tffdp import config as config_lib, models, privacy, runner
from tffdp.algorithms import dp_scaffold

SHAPE = (28, 28, 1)
BUILDER = functools.partial(models.build_keras_model, 'logistic_regression', SHAPE, 10)


@pytest.fixture()
def tiny(tmp_path):
  from tffdp.data import FederatedData  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, (18, *SHAPE), dtype=np.uint8)
  y = np.array([0, 1, 2, 3, 4, 5, 1, 1, 1, 2, 2, 2, 7, 8, 9, 7, 8, 9])
  parts = [np.arange(0, 6), np.arange(6, 12), np.arange(12, 18)]
  return FederatedData(x, y, parts, cache_dir=str(tmp_path)), x, y, parts


def _grad(w, xs, ys):
  """Mean softmax cross-entropy gradient of logits = x W + b (float64)."""
  kernel, bias = w
  x = xs.reshape(len(xs), -1).astype(np.float64) / 255.0
  logits = x @ kernel + bias
  p = np.exp(logits - logits.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  d = (p - np.eye(10)[ys]) / len(ys)
  return [x.T @ d, d.sum(0)]


def test_zero_noise_no_clip_is_plain_scaffold(tiny):
  data, x, y, parts = tiny
  lr, lr_g, epochs = 0.5, 0.8, 3
  # One full batch per epoch (B >= n_i): K = 3 gradient steps per client, order-free.
  m = dp_scaffold.build_dp_scaffold(BUILDER, data, learning_rate=lr, batch_size=6,
                                    noise_multiplier=0.0, clip_norm=1e6,
                                    local_epochs=epochs,
                                    hp=dp_scaffold.DPScaffoldHparams(server_learning_rate=lr_g))
  state = m.initialize()
  w = [np.asarray(t, np.float64) for t in state['server']['model'].trainable]
  c = [np.zeros_like(t) for t in w]
  ci = [[np.zeros_like(t) for t in w] for _ in parts]
  for r, cohort in enumerate((np.array([0, 1]), np.array([1, 2]))):
    state, metrics = m.run_round(state, cohort, r, 0)
    assert m.accounting.check_round(cohort, state, metrics) is None
    dys, dcs = [], []
    for k in cohort:
      yk = [t.copy() for t in w]
      for _ in range(epochs):
        g = _grad(yk, x[parts[k]], y[parts[k]])
        yk = [a - lr * (gg + cc - cik) for a, gg, cc, cik in zip(yk, g, c, ci[k])]
      new = [cik - cc + (a - b) / (epochs * lr) for cik, cc, a, b in zip(ci[k], c, w, yk)]
      dys.append([b - a for a, b in zip(w, yk)])
      dcs.append([n - o for n, o in zip(new, ci[k])])
      ci[k] = new
    w = [a + lr_g * np.mean([d[j] for d in dys], 0) for j, a in enumerate(w)]
    c = [a + np.sum([d[j] for d in dcs], 0) / len(parts) for j, a in enumerate(c)]
    for got, want in zip(state['server']['model'].trainable, w):
      np.testing.assert_allclose(got, want, atol=2e-5)
    for got, want in zip(state['server']['control'], c):
      np.testing.assert_allclose(got, want, atol=2e-5)
    for k in range(len(parts)):
      for got, want in zip(state['controls'][k], ci[k]):
        np.testing.assert_allclose(got, want, atol=2e-4)
  # Client 0 sat out round 2: its control is the one round 1 gave it.
  assert np.abs(state['controls'][2][0]).sum() > 0


def test_ledgers_are_dpfl_dp_sgd_releases(tiny):
  data, _, _, _ = tiny
  m = dp_scaffold.build_dp_scaffold(BUILDER, data, learning_rate=0.1, batch_size=4,
                                    noise_multiplier=1.1, clip_norm=1.0, local_epochs=2)
  cohort = np.array([0, 2])
  (clients, event, _), = m.accounting.claimed(cohort, None)
  np.testing.assert_array_equal(clients, cohort)
  assert event == privacy.subsampled_gaussian_event(float(np.float32(1.1)), 4 / 6, 2 * 2)
  (_, event, _), = m.accounting.guaranteed(cohort, None)
  assert event == privacy.subsampled_gaussian_event(float(np.float32(1.1)), 1.0, 2)
  # What its clients state they ran gives the same releases.
  state, metrics = m.run_round(m.initialize(), cohort, 0, 0)
  executed = m.accounting.executed(cohort, state, metrics)
  assert privacy.releases_differ(m.accounting.guaranteed(cohort, None), executed) is None
  assert [(sorted(c.tolist()), e) for c, e, _ in executed] == [([0, 2], event)]
  with pytest.raises(ValueError, match='clip_norm must be positive'):
    dp_scaffold.build_dp_scaffold(BUILDER, data, learning_rate=0.1, batch_size=4,
                                  noise_multiplier=1.0, clip_norm=0.0)
  with pytest.raises(ValueError, match='server_learning_rate'):
    dp_scaffold.DPScaffoldHparams(server_learning_rate=0.0)


def _config(tmp_path, name, rounds):
  return config_lib.RunConfig.create(
      method='dp_scaffold', dataset='synthetic', clients=4, clients_per_round=2,
      partition='iid', model='logistic_regression', batch_size=64, rounds=rounds,
      noise_multiplier=1.0, clip_norm=1.0, num_validation=500, checkpoint_every=1,
      out=str(tmp_path / name), client_cache_dir=str(tmp_path / 'c'))


def test_resumed_run_equals_uninterrupted(tmp_path):
  whole = runner.run(_config(tmp_path, 'whole', 3), log=lambda s: None)
  runner.run(_config(tmp_path, 'split', 2), log=lambda s: None)
  lines = []
  split = runner.run(_config(tmp_path, 'split', 3), resume=True, log=lines.append)
  assert any('resuming' in line and 'at round 2' in line for line in lines)
  assert split['final_test_loss'] == pytest.approx(whole['final_test_loss'], rel=1e-6)
  assert split['epsilon_guaranteed'] == pytest.approx(whole['epsilon_guaranteed'])
  assert 0 < whole['epsilon_claimed'] < whole['epsilon_guaranteed'] < np.inf
