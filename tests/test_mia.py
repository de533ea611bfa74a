"""Membership-inference module: the Kairouz bound on hand rates, the three attacks on a
deliberately overfit model (well above chance) and on a model never trained on the
members (about chance)."""

import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from tffdp import mia, models


def test_audited_epsilon_hand_values():
  # TPR 0.5, FPR 0.1: max(log(0.5 / 0.1), log(0.9 / 0.5)) = log 5
  assert mia.audited_epsilon([0.5], [0.1], 0.0) == pytest.approx(math.log(5))
  assert mia.audited_epsilon([0.5], [0.1], 0.05) == pytest.approx(math.log(4.5))
  # the complementary side: TPR 0.95, FPR 0.5 -> (1 - 0.5) / (1 - 0.95) = 10
  assert mia.audited_epsilon([0.95], [0.5], 0.0) == pytest.approx(math.log(10))
  assert mia.audited_epsilon([0.3, 0.6], [0.3, 0.6], 0.0) == 0.0    # chance line
  assert mia.audited_epsilon([0.2], [0.0], 0.0) == math.inf


def test_score_result_perfect_and_chance():
  r = mia.score_result('x', np.array([2.0, 3.0]), np.array([0.0, 1.0]), 1e-5)
  assert r.accuracy == r.best_accuracy == 1.0 and r.auc == 1.0
  rng = np.random.default_rng(0)
  r = mia.score_result('x', rng.normal(size=4000), rng.normal(size=4000), 1e-5, decision=0.0)
  assert abs(r.accuracy - 0.5) < 0.03 and abs(r.auc - 0.5) < 0.03
  assert r.epsilon_lower_bound < 0.3


def _data(n, seed):
  rng = np.random.default_rng(seed)
  y = rng.integers(0, 10, n)
  x = rng.integers(0, 256, (n, 8, 8, 1), dtype=np.uint8)   # labels carry no signal
  return x, y


@pytest.fixture(scope='module')
def builder():
  return functools.partial(models.build_keras_model, 'mlp', (8, 8, 1), 10) \
      if 'mlp' in models.MODELS else functools.partial(
          models.build_keras_model, 'logistic_regression', (8, 8, 1), 10)


def test_attacks_on_an_overfit_and_an_untrained_model(builder):
  members, nonmembers = _data(150, 1), _data(150, 2)
  shadow_in, shadow_out = _data(150, 3), _data(150, 4)
  # the target memorises random labels: members' loss near 0, non-members' large
  target = mia.train_shadow_model(builder, *members, epochs=150, learning_rate=0.5,
                                  batch_size=32, seed=0)
  overfit = mia.evaluate(builder, target.get_weights(), members, nonmembers, shadow_in,
                         shadow_out, delta=1e-5, shadow_epochs=150,
                         shadow_learning_rate=0.5, batch_size=32)
  assert [r.attack for r in overfit] == list(mia.ATTACKS)
  for r in overfit:
    assert r.accuracy > 0.75, r
    assert r.epsilon_audit > 1.0 and r.epsilon_lower_bound > 0.3, r
  untrained = builder().get_weights()
  chance = mia.evaluate(builder, untrained, members, nonmembers, shadow_in, shadow_out,
                        delta=1e-5, shadow_epochs=150, shadow_learning_rate=0.5,
                        batch_size=32)
  for r in chance:
    assert abs(r.accuracy - 0.5) < 0.12, r
  with pytest.raises(ValueError, match='balanced'):
    mia.evaluate(builder, untrained, members, _data(10, 5), shadow_in, shadow_out,
                 delta=1e-5)
