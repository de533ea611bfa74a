"""Membership-inference module: the Kairouz bound on hand rates, the three attacks on a
deliberately overfit model (well above chance) and on a model never trained on the
members (about chance)."""

import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from tffdp import mia, models


def test_kairouz_lower_bound_hand_values():
  from scipy import stats
  # 900 / 1000 members flagged, 100 / 1000 non-members: Clopper-Pearson at 0.0125 each
  tpr_lo = stats.beta.ppf(0.0125, 900, 101)
  fpr_hi = stats.beta.ppf(0.9875, 101, 900)
  want = math.log((tpr_lo - 1e-5) / fpr_hi)   # the largest of the four here
  assert mia.kairouz_lower_bound(900, 1000, 100, 1000, 1e-5) == pytest.approx(want)
  assert want == pytest.approx(math.log(0.87 / 0.125), abs=0.1)
  # swapped roles: an attack that is reliably wrong bounds epsilon just as well
  assert mia.kairouz_lower_bound(100, 1000, 900, 1000, 1e-5) == pytest.approx(want)
  assert mia.kairouz_lower_bound(500, 1000, 500, 1000, 1e-5) == 0.0
  # a degenerate attack (flags everyone) gives nothing, not inf
  assert mia.kairouz_lower_bound(1000, 1000, 998, 1000, 1e-5) == 0.0
  # a large delta absorbs the gap
  assert mia.kairouz_lower_bound(600, 1000, 400, 1000, 0.5) == 0.0


def test_clopper_pearson_bounds_and_coverage():
  from scipy import stats
  assert mia.clopper_pearson(30, 100) == pytest.approx(
      (stats.beta.ppf(0.025, 30, 71), stats.beta.ppf(0.975, 31, 70)))
  assert mia.clopper_pearson(0, 10)[0] == 0.0 and mia.clopper_pearson(10, 10)[1] == 1.0
  # Exact coverage of the rate 0.3 at n = 100: the probability that the interval holds it.
  n, p = 100, 0.3
  coverage = sum(stats.binom.pmf(k, n, p) for k in range(n + 1)
                 if mia.clopper_pearson(k, n)[0] <= p <= mia.clopper_pearson(k, n)[1])
  assert 0.95 <= coverage < 0.99
  for bad in ((5, 0), (-1, 10), (11, 10)):
    with pytest.raises(ValueError, match='successes'):
      mia.clopper_pearson(*bad)
  with pytest.raises(ValueError, match='alpha'):
    mia.clopper_pearson(1, 10, alpha=1.0)


def test_score_result_perfect_and_chance():
  r = mia.score_result('x', np.arange(100.0) + 200, np.arange(100.0), 1e-5)
  assert r.best_accuracy == 1.0 and r.auc == 1.0 and r.num_members == 50
  assert r.accuracy >= 0.95   # the cut comes from the other half
  assert r.epsilon_lower_bound > 2.0
  rng = np.random.default_rng(0)
  r = mia.score_result('x', rng.normal(size=4000), rng.normal(size=4000), 1e-5, decision=0.0)
  assert abs(r.accuracy - 0.5) < 0.03 and abs(r.auc - 0.5) < 0.03
  assert r.num_members == 4000   # an outside decision scores every example


def test_lower_bound_is_rarely_positive_without_signal():
  rng = np.random.default_rng(1)
  positive = [mia.score_result('x', rng.normal(size=1000), rng.normal(size=1000), 1e-5,
                               seed=i).epsilon_lower_bound > 0 for i in range(60)]
  assert np.mean(positive) <= 0.1   # 95% confidence: about 5% expected
  accs = [mia.score_result('x', rng.normal(size=1000), rng.normal(size=1000), 1e-5,
                           seed=i).accuracy for i in range(30)]
  assert abs(np.mean(accs) - 0.5) < 0.01   # held-out threshold: no upward bias


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
    assert r.epsilon_lower_bound > 0.3, r
  untrained = builder().get_weights()
  chance = mia.evaluate(builder, untrained, members, nonmembers, shadow_in, shadow_out,
                        delta=1e-5, shadow_epochs=150, shadow_learning_rate=0.5,
                        batch_size=32)
  for r in chance:
    assert abs(r.accuracy - 0.5) < 0.12, r
  with pytest.raises(ValueError, match='balanced'):
    mia.evaluate(builder, untrained, members, _data(10, 5), shadow_in, shadow_out,
                 delta=1e-5)
