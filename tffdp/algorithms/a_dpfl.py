"""A-DPFL: adaptive differentially private federated learning.

Paper: "Adaptive differentially private federated learning", Discrete Dynamics in Nature
and Society (`../shared/papers/000_1ca5440dd20e2e15.txt`), Algorithms 1-4; spec
`a_dpfl.md`. Per round: the server selects the K clients whose label distribution is
closest (1-Wasserstein) to the global one (Alg. 2, `a_dpfl_selection`), broadcasts the
weights and the current noise multiplier sigma_t, clients run DP-SGD (Alg. 3), the
server takes the example-weighted mean (eq. 20) and then, every `adjust_every` rounds,
multiplies sigma by `k` if the validation accuracy gained no more than `alpha` (Alg. 4).

The learning process's state is `<learning=LearningAlgorithmState,
noise_adjustment=<previous_score, round_num, validation_accuracy>>@SERVER`; sigma lives
in `learning.client_work.noise_multiplier`, so it is broadcast from the server state and
a checkpointed state resumes exactly. The validation accuracy is computed inside the
process at the server, from the server-side validation split (`FederatedData.add_server_split`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import privacy, seeds
from tffdp.algorithms import a_dpfl_selection as selection_lib
from tffdp.algorithms import common, registry
from tffdp.algorithms.baselines import client_work as dp_sgd_client_work
from tffdp.algorithms.dp_sgd import DP_SGD_MODES
from tffdp.data.federated import FederatedData, ShuffleBatch

PAPER_ORDER_REASON = ('dp_sgd=paper_order adds noise before clipping (Alg. 3 as printed): '
                      'per-example sensitivity is unbounded')


def _validation_accuracy_computation(keras_builder, data: FederatedData, weights_type):
  def accuracy(model, xs, ys):
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(1000)

    def count(acc, batch):
      x, y = batch
      pred = tf.argmax(model(x, training=False), axis=-1, output_type=tf.int32)
      return acc + tf.stack([tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.int64)),
                             tf.cast(tf.shape(y)[0], tf.int64)])
    c = ds.reduce(tf.zeros([2], tf.int64), count)
    return tf.cast(c[0], tf.float32) / tf.cast(tf.maximum(c[1], 1), tf.float32)

  @tff.tensorflow.computation(weights_type)
  def validation_accuracy(weights):
    evaluate = common.server_split_metric(keras_builder, data, 'validation', accuracy)
    return evaluate(list(weights.trainable))
  return validation_accuracy


def noise_adjustment_step(sigma: tf.Tensor, previous_score: tf.Tensor, round_num: tf.Tensor,
                          score: tf.Tensor, *, k: float, alpha: float, adjust_every: int):
  """Algorithm 4 (eq. 15), one server step: `sigma <- k sigma` if the score gained `<= alpha`.

  The check runs every `adjust_every` rounds; at a check the score is carried forward as
  the next `S_prev` whether or not sigma decays.

  Args:
    sigma: float32 scalar, the noise multiplier used this round.
    previous_score: float32 scalar `S_prev` (the validation accuracy at the last check;
      `S_0 = 0`).
    round_num: int32 scalar, rounds completed before this one.
    score: float32 scalar `S_t`, the validation accuracy of the new global model.
    k: Decay factor in `(0, 1]`.
    alpha: Accuracy-gain threshold.
    adjust_every: Rounds between checks.

  Returns:
    `(new_sigma float32, new_previous_score float32, round_num + 1 int32)`.
  """
  round_num = round_num + 1
  due = tf.equal(round_num % adjust_every, 0)
  decay = tf.logical_and(due, score - previous_score <= alpha)
  return tf.where(decay, k * sigma, sigma), tf.where(due, score, previous_score), round_num


def with_noise_adjustment(inner: tff.learning.templates.LearningProcess,
                          validation_accuracy: tff.Computation, *, k: float, alpha: float,
                          adjust_every: int) -> tff.learning.templates.LearningProcess:
  """Alg. 4 as a component around a learning process whose client work holds sigma.

  The returned process's state is `<learning=inner state, noise_adjustment=<previous_score,
  round_num, validation_accuracy>>@SERVER`. Each round runs `inner.next`, scores the new
  global model with `validation_accuracy` (a `tff.tensorflow.computation` of the model
  weights, at the server) and applies `noise_adjustment_step` to the noise multiplier in
  the inner state's `client_work` (`<noise_multiplier, clip_norm>`), which the next round
  broadcasts. Metrics: `<learning=inner metrics, noise_adjustment=...>`.

  Args:
    inner: A `LearningProcess` composed with `tff.learning.templates.compose_learning_process`
      whose client-work state is `<noise_multiplier=float32, clip_norm=float32>`.
    validation_accuracy: `(ModelWeights) -> float32`, the server's score `S_t`.
    k, alpha, adjust_every: As `noise_adjustment_step`.
  """
  inner_state_type = inner.initialize.type_signature.result.member

  @tff.tensorflow.computation
  def initial_adjustment():
    return collections.OrderedDict(previous_score=tf.constant(0.0),
                                   round_num=tf.constant(0, tf.int32),
                                   validation_accuracy=tf.constant(0.0))

  adjustment_type = initial_adjustment.type_signature.result

  @tff.tensorflow.computation(inner_state_type, adjustment_type, tf.float32)
  def adjust(learning_state, adj, score):
    """Alg. 4 on the server state; returns (new learning state, new adjustment state)."""
    new_sigma, previous, round_num = noise_adjustment_step(
        learning_state.client_work['noise_multiplier'], adj['previous_score'],
        adj['round_num'], score, k=k, alpha=alpha, adjust_every=adjust_every)
    cw = collections.OrderedDict(noise_multiplier=new_sigma,
                                 clip_norm=learning_state.client_work['clip_norm'])
    return learning_state._replace(client_work=cw), collections.OrderedDict(
        previous_score=previous, round_num=round_num, validation_accuracy=score)

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict(
        learning=inner.initialize(),
        noise_adjustment=tff.federated_eval(initial_adjustment, tff.SERVER)))

  state_type = init_fn.type_signature.result
  data_type = inner.next.type_signature.parameter[1]

  @tff.tensorflow.computation(inner_state_type)
  def inner_weights(learning_state):
    return learning_state.global_model_weights

  @tff.federated_computation(state_type, data_type)
  def next_fn(state, client_data):
    out = inner.next(state.learning, client_data)
    score = tff.federated_map(validation_accuracy,
                              tff.federated_map(inner_weights, out.state))
    learning, adj = tff.federated_map(adjust, (out.state, state.noise_adjustment, score))
    new_state = tff.federated_zip(collections.OrderedDict(learning=learning,
                                                          noise_adjustment=adj))
    metrics = tff.federated_zip(collections.OrderedDict(
        learning=out.metrics, noise_adjustment=adj))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  return common.wrapped_learning_process(init_fn, next_fn, 'noise_adjustment')


def noise_multiplier_of(state) -> float:
  """sigma_t, the noise multiplier the clients draw with this round (from the state)."""
  return float(state['learning'].client_work['noise_multiplier'])


def raise_noise(state, factor: float):
  """`Accounting.raise_noise`: `state` with sigma_t multiplied by `factor` (float >= 1).

  The clients of the round run from the returned state draw at `float32(factor *
  sigma_t)`, the value the ledgers read (`noise_multiplier_of`). The round after it decays
  from the raised sigma as Alg. 4 does; with `budget_last_round='raise_noise'` there is none.
  """
  learning = state['learning']
  client_work = collections.OrderedDict(learning.client_work)
  client_work['noise_multiplier'] = np.float32(factor * float(client_work['noise_multiplier']))
  raised = collections.OrderedDict(state)
  raised['learning'] = learning._replace(client_work=client_work)
  return raised


def adaptive_quantities(state) -> dict:
  """`Method.adaptive_quantities`: sigma_t and C, logged per round."""
  return {'noise_multiplier': noise_multiplier_of(state),
          'clip_norm': float(state['learning'].client_work['clip_norm'])}


def round_metrics(metrics) -> dict:
  """`Method.round_metrics`: Alg. 4's server validation accuracy of the round."""
  return {'server_validation_accuracy':
          float(metrics['noise_adjustment']['validation_accuracy'])}


def select_cohort(probabilities: np.ndarray, clients_per_round: int, selection: str,
                  seed: int, round_num: int) -> np.ndarray:
  """Alg. 2's participants of round `round_num` (`selection_lib.select_participants` with
  the round's selection stream): int `[K]` client indices."""
  rng = seeds.round_rng(seed, round_num, seeds.SELECTION)
  return selection_lib.select_participants(probabilities, clients_per_round, selection, rng)


@dataclasses.dataclass(frozen=True)
class ADPFLLedgers:
  """A-DPFL's releases of a round in both ledgers: each client's DP-SGD steps at the
  round's sigma_t. Claimed: with subsampling amplification (the paper's analysis).
  Guaranteed: without it (shuffled batches are not Poisson-sampled), or `inf` for
  `dp_sgd='paper_order'` (`PAPER_ORDER_REASON`).

  Attributes:
    data: The clients' data (their sizes set the step counts).
    batching: The client work's batching.
    dp_sgd: `clip_then_noise` or `paper_order`.
  """
  data: FederatedData
  batching: ShuffleBatch
  dp_sgd: str

  def claimed(self, cohort, state):
    return common.dp_sgd_releases(cohort, self.data, self.batching,
                                  noise_multiplier_of(state), amplified=True)

  def guaranteed(self, cohort, state):
    if self.dp_sgd == 'paper_order':
      return [(cohort, None, PAPER_ORDER_REASON)]
    return common.dp_sgd_releases(cohort, self.data, self.batching,
                                  noise_multiplier_of(state), amplified=False)

  def executed(self, cohort, state, metrics):
    """`guaranteed` from the steps and sigma the clients state
    (`common.dp_sgd_executed`)."""
    if self.dp_sgd == 'paper_order':
      return [(cohort, None, PAPER_ORDER_REASON)]
    return common.dp_sgd_executed(self.data, self.batching)(cohort, state, metrics)


def build_a_dpfl(keras_builder, data: FederatedData, validation: tuple[np.ndarray, np.ndarray],
                 *, clients_per_round: int, learning_rate: float = 0.05,
                 batch_size: int = 20, noise_multiplier: float = 1.0,
                 clip_norm: float = 4.0, hp: Optional['ADPFLHparams'] = None,
                 local_epochs: int = 1, l_z: float = 1.0, seed: int = 0,
                 clients_per_slice: Optional[int] = None) -> common.Method:
  """Builds A-DPFL.

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    data: The clients' data (label histograms feed the selection).
    validation: Server-side validation split `(x uint8, y)`, for Alg. 4.
    clients_per_round: K.
    learning_rate: eta (Table 1: 0.05).
    batch_size: B (Table 1: 20).
    noise_multiplier: sigma_0 (Table 1: 1.0).
    clip_norm: C (Table 1: 4.0 MNIST, 7.0 CIFAR-10).
    hp: A-DPFL's own options (`ADPFLHparams`: the decay factor `k`, Alg. 4's `alpha`
      and `adjust_every`, `dp_sgd` and `selection`), validated on creation; None takes
      their defaults.
    local_epochs: Passes over the client's data per round (not given: 1).
    l_z: L_Z of eq. 12 (paper: 1).
    seed: Model-initialisation and selection seed.
    clients_per_slice: Run the cohort in slices of this many clients per TFF client
      computation (same results; see `dp_sgd.build_sliced_dp_sgd_client_work`).

  Returns:
    A `common.Method` whose process has the state described in the module docstring.

  Raises:
    ValueError: On invalid hyperparameters.
  """
  hp = ADPFLHparams() if hp is None else hp
  k, alpha, adjust_every, dp_sgd, selection = (hp.k, hp.alpha, hp.adjust_every, hp.dp_sgd,
                                               hp.selection)
  if not 1 <= clients_per_round <= data.num_clients:
    raise ValueError(f'clients_per_round must be in [1, {data.num_clients}]. '
                     f'Found {clients_per_round}.')
  data.add_server_split('validation', *validation)
  weights_type = common.weights_type_of(keras_builder)
  batching = ShuffleBatch(batch_size, local_epochs)
  client_work = dp_sgd_client_work(
      keras_builder, data, learning_rate=learning_rate, dp_sgd=dp_sgd,
      noise_multiplier=noise_multiplier, clip_norm=clip_norm, batching=batching,
      clients_per_slice=clients_per_slice, stated_steps=True)
  inner = common.compose_fedavg_style(keras_builder, client_work,
                                      tff.aggregators.MeanFactory(), seed)
  process = with_noise_adjustment(
      inner, _validation_accuracy_computation(keras_builder, data, weights_type), k=k,
      alpha=alpha, adjust_every=adjust_every)

  probs = selection_lib.selection_probabilities(
      selection_lib.wasserstein_distances(data.label_histograms), l_z)

  ledgers = ADPFLLedgers(data, batching, dp_sgd)
  run_round, round_computation = common.cohort_round(process, data, batching, clients_per_slice)
  return common.Method(
      name='a_dpfl', process=process, batching=batching, dp_unit=privacy.SAMPLE_LEVEL,
      run_round=run_round, round_computation=round_computation,
      accounting=common.Accounting(ledgers.claimed, ledgers.guaranteed, ledgers.executed,
                                   common.dp_sgd_step_check(data, batching),
                                   raise_noise=raise_noise),
      cohort_sampling=selection, adaptive_quantities=adaptive_quantities,
      round_metrics=round_metrics,
      select_cohort=functools.partial(select_cohort, probs, clients_per_round, selection,
                                      seed),
      clients_per_slice=clients_per_slice,
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           noise_multiplier=noise_multiplier, clip_norm=clip_norm, k=k,
                           alpha=alpha, adjust_every=adjust_every, local_epochs=local_epochs,
                           dp_sgd=dp_sgd, selection=selection, l_z=l_z,
                           clients_per_round=clients_per_round),
      notes=dict(NOTES))


# ----- registry ---------------------------------------------------------------------

_NOT_GIVEN = 'not given in the paper; chosen because '
NOTES = dict(
    alpha=_NOT_GIVEN + 'a 1-point accuracy gain is the smallest that a 5,000-example '
    'validation split measures reliably (its standard error is about 0.4 points)',
    adjust_every=_NOT_GIVEN + 'Alg. 4 reads as a per-round check',
    local_epochs=_NOT_GIVEN + 'one pass over the client data is the FedAvg default',
    clients_per_round=_NOT_GIVEN + '10% of N, the usual FedAvg cohort',
    l_z='eq. 12 constant; the top-K set does not depend on it')


@dataclasses.dataclass(frozen=True)
class ADPFLHparams(registry.MethodHparams):
  """A-DPFL's own options (Alg. 2 and 4; Table 1 where the paper gives them)."""
  k: float = registry.option(0.7, 'noise decay factor k of Alg. 4, in (0, 1] (Table 1: 0.7)')
  alpha: float = registry.option(
      0.01, 'validation-accuracy gain threshold alpha of Alg. 4',
      note=_NOT_GIVEN + 'a 1-point accuracy gain is the smallest that a 5,000-example '
      'validation split measures reliably (its standard error is about 0.4 points)')
  adjust_every: int = registry.option(
      1, 'rounds between the noise adjustments of Alg. 4',
      note=_NOT_GIVEN + 'Alg. 4 reads as a per-round check')
  selection: str = registry.option(
      'top_k', 'participant selection: top_k (Alg. 2), weighted_sample or uniform',
      choices=selection_lib.SELECTION_MODES)
  dp_sgd: str = registry.option(
      'clip_then_noise', 'clip_then_noise (Abadi et al.) or paper_order (Alg. 3 as '
      'printed: noise before clipping, epsilon_guaranteed = inf)',
      choices=DP_SGD_MODES[1:])

  def __post_init__(self):
    super().__post_init__()
    if not 0 < self.k <= 1:
      raise ValueError(f'k must be in (0, 1]. Found k={self.k!r}.')
    if self.adjust_every <= 0:
      raise ValueError(f'adjust_every must be positive. Found adjust_every={self.adjust_every!r}.')


def _build(ctx: registry.BuildContext, hp: ADPFLHparams) -> common.Method:
  c = ctx.config
  return build_a_dpfl(
      ctx.keras_builder, ctx.data, ctx.validation, clients_per_round=c.clients_per_round,
      learning_rate=c.learning_rate, batch_size=c.batch_size,
      noise_multiplier=c.noise_multiplier, clip_norm=c.clip_norm, hp=hp,
      local_epochs=c.local_epochs, seed=c.seed, clients_per_slice=c.clients_per_slice)


METHODS = (registry.MethodSpec(
    'a_dpfl', _build, ADPFLHparams,
    'A-DPFL (spec a_dpfl.md): Wasserstein top-K selection, DP-SGD clients, sigma decay',
    shared_meanings=dict(clip_norm='per-example clipping norm C',
                         noise_multiplier='initial sigma_0'),
    slices_of_one=True),)
