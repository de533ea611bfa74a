"""Membership-inference evaluation of a trained model: three attacks and a lower bound on epsilon.

Any run's final model gets the same table (DP-FedAGS's Tables II-III, spec
`dp_fedags.md`): members are examples the clients trained on, non-members held-out
examples, balanced (equal counts).

* **Basic MIA** (Yeom et al., "Privacy risk in machine learning", CSF 2018): the loss
  threshold attack, `tensorflow_privacy`'s `AttackType.THRESHOLD_ATTACK` on the
  per-example loss; its accuracy is at the best threshold.
* **ML-Leaks** (Salem et al., NDSS 2019, adversary 1): a shadow model of the target's
  architecture trained on data of the same distribution (`shadow_in`, disjoint from the
  target's members and non-members); an attack MLP (`tensorflow_privacy`'s
  `MultilayerPerceptronAttacker`, grid-searched) learns shadow-in against `shadow_out` from
  the sorted top-3 softmax posteriors and is applied to the target's members and
  non-members; its accuracy is at its own 0.5 decision. The shadow is trained centrally
  without noise (`train_shadow_model`), so it overfits more than a DP-trained target and
  its 0.5 cut suits a leakier model: the AUC and the in-sample best accuracy show what
  a better-tuned cut could get.
* **White-box** (after Nasr et al., S&P 2019, reduced as the spec says): per-example loss
  and gradient L2 norm (over every trainable weight) of the target model; a logistic
  regression attack (`LogisticRegressionAttacker`) trained on half of the members and
  non-members and scored on the other half; accuracy at its 0.5 decision.

Each result has the attack's balanced accuracy at its decision, measured on examples
that did not choose the decision (the threshold attack picks its threshold on one half
of the members and non-members and is scored on the other half; ML-Leaks' cut comes from
the shadow model; the white-box attack is trained on one half), the in-sample best
balanced accuracy over all thresholds (optimistic), the ROC AUC, the TPR / FPR at the
decision, and `epsilon_lower_bound`: the hypothesis-testing bound of Kairouz, Oh and
Viswanath (ICML 2015) made statistical. An `(epsilon, delta)`-DP mechanism has, for any
test, `TPR <= e^eps FPR + delta`, `1 - FPR <= e^eps (1 - TPR) + delta` and the two with
the roles of members and non-members swapped; with one-sided Clopper-Pearson bounds on
TPR and FPR (each at 0.05 / 4, so all four hold together with 95% confidence) every
inequality gives a lower bound on epsilon, and the largest is reported (0 when none is
positive). `tensorflow_privacy`'s `EpsilonLowerBound` is not used for this: it takes
the maximum of its per-threshold bounds over every threshold on the same data, which is
positive for most attacks that see nothing (members and non-members from one
distribution), and has no delta.

What the bound audits: members are a sample of the training examples and non-members
a sample of the random validation split, so the two are exchangeable draws of the same
distribution before training. Membership of one example is a replace-one-example change
inside one client; under client-level add/remove DP that is a two-step change (2 epsilon,
(1 + e^epsilon) delta), so a client-level guarantee `epsilon` is contradicted only by a
lower bound above `2 epsilon`.

The attack library is PyPI `tensorflow-empirical-privacy` 0.1.0 (the attack code that
left `tensorflow-privacy`), installed with `--no-deps`: its declared requirements
(`tf-models-official ~= 2.13`, which resolves to TensorFlow 2.17, and `pandas ~= 1.4`)
cannot sit beside TFF 0.87's TensorFlow 2.14. Its attack modules need only pandas,
scipy, scikit-learn < 1.5 (`sklearn.utils.parallel_backend`), statsmodels and
immutabledict, which `requirements.txt` pins.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Callable, Optional

import numpy as np
from scipy import stats
import tensorflow as tf
from sklearn import exceptions as sk_exceptions
from sklearn import metrics as sk_metrics
from tensorflow_privacy.privacy.privacy_tests.membership_inference_attack import (
    data_structures as mia_data, membership_inference_attack as mia_lib, models as mia_models)

from tffdp.algorithms import per_example

ATTACKS = ('basic_mia', 'ml_leaks', 'white_box')
ATTACK_LABEL = {'basic_mia': 'Basic MIA (Yeom et al. 2018)',
                'ml_leaks': 'ML-Leaks (Salem et al. 2019)',
                'white_box': 'White-box (loss, gradient norm; after Nasr et al. 2019)'}


@dataclasses.dataclass
class AttackResult:
  """One attack on one model.

  Attributes:
    attack: A name of `ATTACKS`.
    accuracy: Balanced accuracy `(TPR + 1 - FPR) / 2` at the attack's decision, on
      examples that did not set the decision, in `[0, 1]`.
    best_accuracy: In-sample `0.5 + max(TPR - FPR) / 2` over every threshold (optimistic).
    auc: ROC AUC (all scored examples).
    tpr, fpr: At the decision (the examples of `accuracy`).
    epsilon_lower_bound: 95% lower bound on epsilon at the run's delta (Kairouz et al.
      2015 with Clopper-Pearson bounds; `kairouz_lower_bound`).
    num_members, num_nonmembers: The examples of `accuracy` and the bound.
  """
  attack: str
  accuracy: float
  best_accuracy: float
  auc: float
  tpr: float
  fpr: float
  epsilon_lower_bound: float
  num_members: int
  num_nonmembers: int

  def row(self) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in dataclasses.asdict(self).items()}


def clopper_pearson(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float]:
  """The two-sided `1 - alpha` Clopper-Pearson interval of a binomial rate.

  Each side at `alpha / 2`: `Beta(alpha/2; k, n - k + 1)` and `Beta(1 - alpha/2; k + 1,
  n - k)` (Clopper and Pearson, Biometrika 1934), 0 and 1 at `k = 0` and `k = n`.

  Args:
    successes: `k`, in `[0, trials]`.
    trials: `n >= 1`.
    alpha: One minus the confidence, in `(0, 1)`.

  Returns:
    `(low, high)`, rates in `[0, 1]`.

  Raises:
    ValueError: On `trials < 1`, `successes` outside `[0, trials]` or `alpha` outside
      `(0, 1)`.
  """
  k, n = int(successes), int(trials)
  if n < 1 or not 0 <= k <= n:
    raise ValueError(f'Need 0 <= successes <= trials and trials >= 1. Found {k} of {n}.')
  if not 0 < alpha < 1:
    raise ValueError(f'alpha must be in (0, 1). Found {alpha!r}.')
  lo = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
  hi = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
  return float(lo), float(hi)


def kairouz_lower_bound(true_positives: int, members: int, false_positives: int,
                        nonmembers: int, delta: float, alpha: float = 0.05) -> float:
  """A `1 - alpha` lower bound on epsilon from one test's counts (Kairouz et al. 2015).

  One-sided Clopper-Pearson bounds at `alpha / 4` on TPR and FPR (upper and lower each),
  so the four hold together with probability `>= 1 - alpha`; then the largest of
  `log((TPR_lo - delta) / FPR_hi)`, `log((1 - FPR_hi - delta) / (1 - TPR_lo))`,
  `log((FPR_lo - delta) / TPR_hi)`, `log((1 - TPR_hi - delta) / (1 - FPR_lo))` over the
  terms with positive numerator and denominator.

  Args:
    true_positives, members: Members flagged, and members tested (`members >= 1`).
    false_positives, nonmembers: Non-members flagged, and non-members tested.
    delta: The delta of the `(epsilon, delta)` claim, in `[0, 1)`.
    alpha: One minus the confidence.

  Returns:
    float `>= 0`.
  """
  tpr_lo, tpr_hi = clopper_pearson(true_positives, members, alpha / 2)
  fpr_lo, fpr_hi = clopper_pearson(false_positives, nonmembers, alpha / 2)
  best = 0.0
  for num, den in ((tpr_lo - delta, fpr_hi), (1 - fpr_hi - delta, 1 - tpr_lo),
                   (fpr_lo - delta, tpr_hi), (1 - tpr_hi - delta, 1 - fpr_lo)):
    if num > 0 and den > 0:
      best = max(best, math.log(num / den))
  return best


def score_result(attack: str, member_scores: np.ndarray, nonmember_scores: np.ndarray,
                 delta: float, decision: Optional[float] = None,
                 seed: int = 0) -> AttackResult:
  """An `AttackResult` from membership scores (higher = more likely a member).

  Args:
    attack: The attack's name.
    member_scores, nonmember_scores: float `[n_in]`, `[n_out]`.
    delta: The run's delta (for `epsilon_lower_bound`).
    decision: The attack's own cut (`score >= decision` says member), chosen without
      these examples; None: the cut maximising `TPR - FPR` on a random half of the
      members and of the non-members, scored on the other halves.
    seed: The halves' split.
  """
  m, n = np.asarray(member_scores, np.float64), np.asarray(nonmember_scores, np.float64)
  labels = np.concatenate([np.ones(len(m)), np.zeros(len(n))])
  fpr, tpr, _ = sk_metrics.roc_curve(labels, np.concatenate([m, n]))
  best = 0.5 + float(np.max(tpr - fpr)) / 2
  if decision is None:
    rng = np.random.default_rng(seed)
    pm, pn = rng.permutation(len(m)), rng.permutation(len(n))
    pick_m, pick_n = m[pm[:len(m) // 2]], n[pn[:len(n) // 2]]
    m, n = m[pm[len(m) // 2:]], n[pn[len(n) // 2:]]
    f, t, cuts = sk_metrics.roc_curve(
        np.concatenate([np.ones(len(pick_m)), np.zeros(len(pick_n))]),
        np.concatenate([pick_m, pick_n]))
    decision = float(cuts[int(np.argmax(t - f))])
  tp, fp = int(np.sum(m >= decision)), int(np.sum(n >= decision))
  tpr_d, fpr_d = tp / len(m), fp / len(n)
  return AttackResult(attack, 0.5 * (tpr_d + 1.0 - fpr_d), best,
                      float(sk_metrics.auc(fpr, tpr)), tpr_d, fpr_d,
                      kairouz_lower_bound(tp, len(m), fp, len(n), delta), len(m), len(n))


# ----- per-example outputs of a Keras model -----------------------------------------

def model_outputs(model: tf.keras.Model, x: np.ndarray, y: np.ndarray, *,
                  gradient_norms: bool = False, batch_size: int = 250) -> dict:
  """Per-example logits, softmax posteriors, cross-entropy loss and gradient norm.

  Args:
    model: A Keras model with logits out (inputs scaled by 1/255 as in training).
    x: uint8 `[n, h, w, c]`; y: int `[n]`.
    gradient_norms: Also the L2 norm of each example's loss gradient over every
      trainable weight (`per_example.clipped_gradient_sum`'s norms; float32 `[n]`).
    batch_size: Examples per batch.

  Returns:
    dict of numpy arrays: `logits [n, classes]`, `probs [n, classes]`, `loss [n]`
    (and `grad_norm [n]`).
  """
  logits, grad = [], []

  @tf.function(reduce_retracing=True)
  def grad_norms(xb, yb):
    # the DP-SGD clipping path's per-example norms (one forward and backward pass;
    # vectorized_map for layers it does not cover); the clipped sum is not used
    _, norms, _ = per_example.clipped_gradient_sum(model, xb, yb, tf.constant(1.0),
                                                   training=False)
    return norms

  for i in range(0, len(y), batch_size):
    xb = tf.cast(x[i:i + batch_size], tf.float32) / 255.0
    yb = tf.constant(np.asarray(y[i:i + batch_size], np.int32))
    logits.append(model(xb, training=False).numpy())
    if gradient_norms:
      grad.append(grad_norms(xb, yb).numpy())
  logits = np.concatenate(logits).astype(np.float64)
  probs = tf.nn.softmax(logits).numpy()
  loss = -np.log(np.maximum(probs[np.arange(len(y)), np.asarray(y, np.int64)], 1e-30))
  out = dict(logits=logits, probs=probs, loss=loss)
  if gradient_norms:
    out['grad_norm'] = np.concatenate(grad).astype(np.float64)
  return out


# ----- the three attacks ------------------------------------------------------------

def basic_mia(member_loss: np.ndarray, nonmember_loss: np.ndarray, delta: float,
              seed: int = 0) -> AttackResult:
  """Yeom et al.'s loss threshold attack via `tensorflow_privacy.run_attacks`.

  The library's threshold attack scores `-loss`; its AUC is checked against this
  module's. The threshold is chosen on half of the examples and scored on the rest
  (`score_result`).
  """
  with np.errstate(divide='ignore', invalid='ignore'):
    lib = mia_lib.run_attacks(
        mia_data.AttackInputData(loss_train=np.asarray(member_loss),
                                 loss_test=np.asarray(nonmember_loss)),
        attack_types=(mia_data.AttackType.THRESHOLD_ATTACK,))
  result = score_result('basic_mia', -np.asarray(member_loss), -np.asarray(nonmember_loss),
                        delta, seed=seed)
  lib_auc = lib.single_attack_results[0].get_auc()
  if abs(lib_auc - result.auc) > 1e-6:
    raise AssertionError(f'threshold attack AUC {lib_auc} != {result.auc}')
  return result


def top3_features(probs: np.ndarray) -> np.ndarray:
  """ML-Leaks' features: the three largest posteriors, sorted descending, `[n, 3]`."""
  return -np.sort(-np.asarray(probs), axis=1)[:, :3]


def ml_leaks(shadow_in_probs: np.ndarray, shadow_out_probs: np.ndarray,
             member_probs: np.ndarray, nonmember_probs: np.ndarray, delta: float,
             seed: int = 0) -> AttackResult:
  """Salem et al.'s adversary 1: an MLP on the shadow model's sorted top-3 posteriors."""
  np.random.seed(seed)   # scikit-learn's MLP and grid search draw from numpy's global RNG
  attacker = mia_models.MultilayerPerceptronAttacker()
  features = np.concatenate([top3_features(shadow_in_probs), top3_features(shadow_out_probs)])
  labels = np.concatenate([np.ones(len(shadow_in_probs)), np.zeros(len(shadow_out_probs))])
  with warnings.catch_warnings():   # the grid's small MLPs stop at max_iter
    warnings.simplefilter('ignore', sk_exceptions.ConvergenceWarning)
    attacker.train_model(features, labels)
  return score_result('ml_leaks', attacker.predict(top3_features(member_probs)),
                      attacker.predict(top3_features(nonmember_probs)), delta, decision=0.5)


def white_box(member_features: np.ndarray, nonmember_features: np.ndarray, delta: float,
              seed: int = 0) -> AttackResult:
  """Logistic regression on `[loss, gradient norm]`: trained on half, scored on the rest.

  Args:
    member_features, nonmember_features: float `[n, 2]` (log-scaled inside).
  """
  rng = np.random.default_rng(seed)
  m, n = np.log1p(np.asarray(member_features)), np.log1p(np.asarray(nonmember_features))
  pm, pn = rng.permutation(len(m)), rng.permutation(len(n))
  hm, hn = len(m) // 2, len(n) // 2
  attacker = mia_models.LogisticRegressionAttacker()
  attacker.train_model(np.concatenate([m[pm[:hm]], n[pn[:hn]]]),
                       np.concatenate([np.ones(hm), np.zeros(hn)]))
  return score_result('white_box', attacker.predict(m[pm[hm:]]), attacker.predict(n[pn[hn:]]),
                      delta, decision=0.5)


def train_shadow_model(keras_builder: Callable[[], tf.keras.Model], x: np.ndarray,
                       y: np.ndarray, *, epochs: int, learning_rate: float, batch_size: int,
                       seed: int) -> tf.keras.Model:
  """ML-Leaks' shadow model: the target's architecture, centralised SGD on `(x, y)`."""
  tf.keras.utils.set_random_seed(seed)
  model = keras_builder()
  model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x.astype(np.float32) / 255.0, np.asarray(y, np.int32), epochs=epochs,
            batch_size=batch_size, verbose=0, shuffle=True)
  return model


def evaluate(keras_builder: Callable[[], tf.keras.Model], weights, members, nonmembers,
             shadow_in, shadow_out, *, delta: float, shadow_epochs: int = 10,
             shadow_learning_rate: float = 0.1, batch_size: int = 128,
             seed: int = 0) -> list[AttackResult]:
  """The three attacks on the model `keras_builder()` with `weights`.

  Args:
    keras_builder: No-arg callable returning the target's architecture (logits out).
    weights: The trained `tff.learning.models.ModelWeights` (or a list of arrays).
    members, nonmembers, shadow_in, shadow_out: `(x uint8 [n, ...], y int [n])` pairs;
      `members` the target trained on, the other three disjoint from its training data.
    delta: The run's delta (for `epsilon_lower_bound`).
    shadow_epochs, shadow_learning_rate, batch_size: The shadow model's training.
    seed: Shadow initialisation and attack splits.

  Returns:
    `[basic_mia, ml_leaks, white_box]` results.

  Raises:
    ValueError: If `members` and `nonmembers` differ in size (the attacks are balanced).
  """
  if len(members[1]) != len(nonmembers[1]) or len(shadow_in[1]) != len(shadow_out[1]):
    raise ValueError('members / non-members (and shadow in / out) must be balanced. Found '
                     f'{len(members[1])} / {len(nonmembers[1])} and {len(shadow_in[1])} / '
                     f'{len(shadow_out[1])}.')
  model = keras_builder()
  if hasattr(weights, 'assign_weights_to'):
    weights.assign_weights_to(model)   # Keras orders trainable / non-trainable per layer
  else:
    model.set_weights(weights)
  inside = model_outputs(model, *members, gradient_norms=True)
  outside = model_outputs(model, *nonmembers, gradient_norms=True)
  shadow = train_shadow_model(keras_builder, *shadow_in, epochs=shadow_epochs,
                              learning_rate=shadow_learning_rate, batch_size=batch_size,
                              seed=seed)
  s_in, s_out = model_outputs(shadow, *shadow_in), model_outputs(shadow, *shadow_out)
  features = lambda o: np.stack([o['loss'], o['grad_norm']], axis=1)
  return [basic_mia(inside['loss'], outside['loss'], delta, seed),
          ml_leaks(s_in['probs'], s_out['probs'], inside['probs'], outside['probs'], delta,
                   seed),
          white_box(features(inside), features(outside), delta, seed)]
