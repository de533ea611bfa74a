"""DP-SCAFFOLD (Noble, Bellet & Dieuleveut 2022, AISTATS, Alg. 1): SCAFFOLD's control
variates with DP-SGD clients. One of AADP-FL's baselines (spec
`../shared/specs/baselines.md`); sample-level DP.

Round `t` on cohort `S` of `N` clients, server model `x` and control `c`, client `i`'s
control `c_i` (client state kept between rounds, zero at the start: the paper's cold
start, not DP-SCAFFOLD-warm):

    y <- x;  K DP-SGD steps  y <- y - eta_l (g~(y) + c - c_i)
    c_i+ = c_i - c + (x - y) / (K eta_l)          (SCAFFOLD option II)
    upload  dy_i = y - x,  dc_i = c_i+ - c_i
    x <- x + eta_g mean_S(dy_i);   c <- c + (1 / N) sum_S(dc_i)

where `g~` is DP-SGD's release (`dp_sgd.build_client_update`, `clip_then_noise`: per-example
clip `C`, `N(0, sigma^2 C^2)` on the sum, divided by the batch size). `c` and `c_i` are
functions of earlier noisy releases only, so each round's privacy cost is that of its
DP-SGD steps, accounted exactly as DPFL (`common.dp_sgd_releases`): `epsilon_claimed`
with the usual amplification by sampling `q = B / n_i` per step, `epsilon_guaranteed`
one Gaussian release per shuffled epoch.

As TFF pieces: a `tff.templates.IterativeProcess` whose `next` is the round

    (server_state@SERVER, client_ids@CLIENTS, seeds@CLIENTS, controls@CLIENTS)
      -> <state@SERVER, controls@CLIENTS, metrics@SERVER>

with the cohort's controls coming in and going out as CLIENTS-placed values; the
runner's state is `{'server': ..., 'controls': [c_i for every client]}`, so a
checkpoint holds every client's control.
"""

from __future__ import annotations

import collections
import dataclasses
import typing

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import aggregators, canaries, privacy
from tffdp.algorithms import common, dp_sgd, registry
from tffdp.data.federated import FederatedData, ShuffleBatch


def build_client_update(keras_builder, learning_rate: float, insertion=None):
  """The per-client `tf.function` of DP-SCAFFOLD (see module doc).

  `client_update(x, c, c_i, batches, seed, noise_multiplier, clip_norm,
  canary_steps=None)` with `x`, `c`,
  `c_i` lists of float32 tensors shaped like the trainable weights returns
  `(dy, dc, c_i+, OrderedDict(loss_sum, num_examples, num_steps))`: DP-SGD's client
  update (`dp_sgd.build_client_update`, `clip_then_noise`) with the correction `c - c_i`
  on every step, then option II's control. A client with no batch (`K = 0`) keeps its
  control. With `insertion` (an audit's `canaries.Insertion`), `canary_steps` is the
  client's canary table: gradient canaries join its DP-SGD steps as its examples would
  (`dp_sgd.build_local_step`), and the metrics add its upload scored against each
  canary (`canaries.upload_projections`).
  """
  local = dp_sgd.build_client_update(keras_builder, learning_rate, 'clip_then_noise',
                                     insertion)
  lr = tf.constant(learning_rate, tf.float32)

  @tf.function
  def client_update(x, c, c_i, batches, seed, noise_multiplier, clip_norm,
                    canary_steps=None):
    correction = [a - b for a, b in zip(c, c_i)]
    update, _, metrics = local(x, batches, seed, noise_multiplier, clip_norm, correction,
                               canary_steps)
    if insertion is not None:
      metrics['canary_projections'], metrics['upload_norm'] = canaries.upload_projections(
          insertion, canary_steps, update)
    n_steps = metrics['num_steps']
    k_lr = tf.maximum(tf.cast(n_steps, tf.float32), 1.0) * lr
    # update = x - y, so c_i+ = c_i - c + update / (K eta_l) and dy = -update.
    new_c_i = [tf.where(n_steps > 0, ci - cc + u / k_lr, ci)
               for ci, cc, u in zip(c_i, c, update)]
    dy = [-u for u in update]
    dc = [a - b for a, b in zip(new_c_i, c_i)]
    return dy, dc, new_c_i, metrics

  return client_update


def _initial_server_state_computation(init_weights, noise_multiplier: float,
                                      clip_norm: float):
  """The server state at round 1: `<model, control (zeros), noise_multiplier float32,
  clip_norm float32>`."""
  @tff.tensorflow.computation
  def initial_server_state():
    weights = init_weights()
    return collections.OrderedDict(
        model=weights, control=[tf.zeros_like(w) for w in weights.trainable],
        noise_multiplier=tf.constant(noise_multiplier, tf.float32),
        clip_norm=tf.constant(clip_norm, tf.float32))
  return initial_server_state


def _client_computation(keras_builder, learning_rate: float, insertion, server_state_type,
                        control_type, data_type):
  """`(server state, c_i, client data) -> <dy, dc, control, train>` at a client:
  `build_client_update` on its data (with its canary table in an audit build)."""
  @tff.tensorflow.computation(server_state_type, control_type, data_type)
  def client_fn(state, c_i, client_data):
    client_update = build_client_update(keras_builder, learning_rate, insertion)
    table = None
    if insertion is not None:
      client_data, table = client_data['data'], client_data['canary_steps'].get_single_element()
    dy, dc, new_c_i, metrics = client_update(
        list(state['model'].trainable), list(state['control']), list(c_i),
        client_data['batches'], client_data['seed'].get_single_element(),
        state['noise_multiplier'], state['clip_norm'], table)
    stated = dp_sgd.stated_row(metrics, state['noise_multiplier'])
    return collections.OrderedDict(
        dy=dy, dc=dc, control=new_c_i, train=metrics,
        dp_event=collections.OrderedDict(rows=stated[tf.newaxis], active=tf.constant([True])))
  return client_fn


def _server_update_computation(server_state_type, control_type, server_learning_rate: float,
                               num_clients: int):
  """`(server state, mean dy, sum dc) -> server state`: `x + eta_g mean dy` and
  `c + sum dc / N`, N all clients (SCAFFOLD's server step, option II controls)."""
  @tff.tensorflow.computation(server_state_type, control_type, control_type)
  def server_update(state, mean_dy, sum_dc):
    trainable = [w + server_learning_rate * d
                 for w, d in zip(state['model'].trainable, mean_dy)]
    control = [c + d / num_clients for c, d in zip(state['control'], sum_dc)]
    return collections.OrderedDict(
        model=tff.learning.models.ModelWeights(
            trainable=trainable, non_trainable=list(state['model'].non_trainable)),
        control=control, noise_multiplier=state['noise_multiplier'],
        clip_norm=state['clip_norm'])
  return server_update


def scaffold_process(keras_builder, data: FederatedData, batching: ShuffleBatch, *,
                     learning_rate: float, noise_multiplier: float, clip_norm: float,
                     server_learning_rate: float, seed: int):
  """DP-SCAFFOLD's round as a TFF `IterativeProcess` with CLIENTS-placed client controls.

  `next(server state, client ids@CLIENTS, seeds@CLIENTS, controls@CLIENTS[, canary
  tables@CLIENTS]) -> <server state, new controls@CLIENTS, metrics>`; the server state is
  `<model, control, noise_multiplier, clip_norm>@SERVER`. In an audit build
  (`canaries.inserting`) each client's canary table rides beside its data.

  Returns:
    `(process, control_spec, insertion)`: the process, the `tf.TensorSpec`s of a control
    (one per trainable variable), and the audit's `canaries.Insertion` (None outside one).
  """
  init_weights = common.initial_weights_computation(keras_builder, seed)
  control_spec = [tf.TensorSpec(t.shape, t.dtype)
                  for t in init_weights.type_signature.result.trainable]
  control_type = tff.types.tensorflow_to_type(control_spec)
  initial_server_state = _initial_server_state_computation(init_weights, noise_multiplier,
                                                           clip_norm)
  server_state_type = initial_server_state.type_signature.result
  client_data_comp = data.client_data_computation(batching)
  client_data_type = client_data_comp.type_signature.result
  # An audit build (`canaries.inserting`): gradient canaries in the DP-SGD steps, each
  # client's canary table beside its data.
  insertion = canaries.active()
  data_type = client_data_type
  if insertion is not None:
    insertion = insertion.take_gradients()
    insertion.took_round()
    data_type = canaries.with_table_type(client_data_type)

  client_fn = _client_computation(keras_builder, learning_rate, insertion, server_state_type,
                                  control_type, data_type)
  server_update = _server_update_computation(server_state_type, control_type,
                                             server_learning_rate, data.num_clients)
  gather = aggregators.gather_rows(data.num_clients, len(dp_sgd.STATED_ROW))

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_server_state, tff.SERVER)

  def round_body(state, client_data, controls):
    out = tff.federated_map(client_fn, (tff.federated_broadcast(state), controls,
                                        client_data))
    new_state = tff.federated_map(server_update, (
        state, tff.federated_mean(out.dy), tff.federated_sum(out.dc)))
    metrics = tff.federated_zip(collections.OrderedDict(client_work=tff.federated_zip(
        collections.OrderedDict(train=tff.federated_sum(out.train),
                                dp_event=gather(out.dp_event)))))
    return new_state, out.control, metrics

  round_types = (tff.FederatedType(server_state_type, tff.SERVER),
                 tff.FederatedType(np.str_, tff.CLIENTS),
                 tff.FederatedType(tff.TensorType(np.int64, [2]), tff.CLIENTS),
                 tff.FederatedType(control_type, tff.CLIENTS))
  if insertion is None:
    @tff.federated_computation(*round_types)
    def round_fn(state, client_ids, client_seeds, controls):
      return round_body(state, tff.federated_map(client_data_comp, (client_ids, client_seeds)),
                        controls)
  else:  # each client's canary table too
    value = canaries.table_value(client_data_comp)

    @tff.federated_computation(*round_types,
                               tff.FederatedType(canaries.CANARY_TABLE, tff.CLIENTS))
    def round_fn(state, client_ids, client_seeds, controls, tables):
      return round_body(state, tff.federated_map(value, (client_ids, client_seeds, tables)),
                        controls)

  return tff.templates.IterativeProcess(init_fn, round_fn), control_spec, insertion


def build_dp_scaffold(keras_builder, data: FederatedData, *, learning_rate: float,
                      batch_size: int, noise_multiplier: float, clip_norm: float,
                      local_epochs: int = 1, hp: typing.Optional['DPScaffoldHparams'] = None,
                      seed: int = 0, cohort_sampling: str = 'uniform') -> common.Method:
  """DP-SCAFFOLD (see module doc).

  Args:
    keras_builder: No-arg callable returning a fresh `tf.keras.Model` (logits out).
    data: The federated data.
    learning_rate: Local learning rate `eta_l` (`> 0`).
    batch_size: DP-SGD batch size `B` (shuffled batches, `local_epochs` passes).
    noise_multiplier: DP-SGD sigma (`>= 0`; 0: no noise, no finite guarantee).
    clip_norm: Per-example clip `C` (`> 0`).
    local_epochs: Passes over the client data per round (`K = E ceil(n_i / B)` steps).
    hp: DP-SCAFFOLD's own options (`DPScaffoldHparams`: the global step
      `server_learning_rate` `eta_g`), validated on creation; None takes their defaults.
    seed: Initial-model seed.
    cohort_sampling: The runner's cohort draw (`uniform` or `poisson`).

  Returns:
    A `common.Method`.

  Raises:
    ValueError: On a non-positive learning rate, `clip_norm`, or a negative sigma.
  """
  server_learning_rate = (DPScaffoldHparams() if hp is None else hp).server_learning_rate
  for name, value in (('learning_rate', learning_rate), ('clip_norm', clip_norm)):
    if value <= 0:
      raise ValueError(f'{name} must be positive. Found {value}.')
  if noise_multiplier < 0:
    raise ValueError(f'noise_multiplier must be >= 0. Found {noise_multiplier}.')
  batching = ShuffleBatch(batch_size, local_epochs)
  process, control_spec, insertion = scaffold_process(
      keras_builder, data, batching, learning_rate=learning_rate,
      noise_multiplier=noise_multiplier, clip_norm=clip_norm,
      server_learning_rate=server_learning_rate, seed=seed)
  num_clients = data.num_clients
  init_fn = process.initialize
  zeros = [np.zeros(s.shape, s.dtype.as_numpy_dtype) for s in control_spec]

  def initialize() -> dict:
    return {'server': init_fn(), 'controls': [list(zeros) for _ in range(num_clients)]}

  def run_round(state: dict, cohort: np.ndarray, round_num: int, run_seed: int):
    seeds = common.client_seeds(run_seed, round_num, cohort)
    args = [state['server'], [str(c) for c in cohort], seeds,
            [state['controls'][c] for c in cohort]]
    if insertion is not None:
      args.append(insertion.tables(round_num, cohort))
    server, controls, metrics = process.next(*args)
    new_controls = list(state['controls'])
    for c, ci in zip(cohort, controls):
      new_controls[c] = [np.asarray(t) for t in ci]
    return {'server': server, 'controls': new_controls}, metrics

  executed_sigma = float(np.float32(noise_multiplier))

  def control_norm(state) -> float:
    return float(np.sqrt(sum(np.sum(np.square(t)) for t in state['server']['control'])))

  return common.Method(
      name='dp_scaffold', process=process, batching=batching, dp_unit=privacy.SAMPLE_LEVEL,
      cohort_sampling=cohort_sampling, initialize=initialize, run_round=run_round,
      round_computation=process.next, model_weights=lambda state: state['server']['model'],
      accounting=common.dp_sgd_accounting(data, batching, executed_sigma),
      adaptive_quantities=lambda state: {'noise_multiplier': noise_multiplier,
                                         'clip_norm': clip_norm,
                                         'server_control_norm': control_norm(state)},
      hyperparameters=dict(learning_rate=learning_rate, batch_size=batch_size,
                           local_epochs=local_epochs, noise_multiplier=noise_multiplier,
                           clip_norm=clip_norm, server_learning_rate=server_learning_rate),
      notes=dict(control_variates='SCAFFOLD option II; client controls start at 0 (cold '
                 'start, not DP-SCAFFOLD-warm)'))


# ----- registry ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DPScaffoldHparams(registry.MethodHparams):
  """DP-SCAFFOLD's own options."""
  default_cohort_sampling: typing.ClassVar[str] = 'uniform'
  cohort_sampling_note: typing.ClassVar[str] = 'uniform (fixed K) as in SCAFFOLD'

  server_learning_rate: float = registry.option(
      1.0, 'global step size eta_g of SCAFFOLD (Karimireddy et al. 2020 use 1)')

  def __post_init__(self):
    super().__post_init__()
    if self.server_learning_rate <= 0:
      raise ValueError('server_learning_rate must be positive. Found '
                       f'server_learning_rate={self.server_learning_rate!r}.')

  def check_run(self, config) -> None:
    if config.clients_per_slice is not None:
      raise ValueError('dp_scaffold runs one TFF client per client (each with its own '
                       'control variate): unset clients_per_slice.')


def _build(ctx: registry.BuildContext, hp: DPScaffoldHparams) -> common.Method:
  c = ctx.config
  return build_dp_scaffold(
      ctx.keras_builder, ctx.data, learning_rate=c.learning_rate, batch_size=c.batch_size,
      noise_multiplier=c.noise_multiplier, clip_norm=c.clip_norm,
      local_epochs=c.local_epochs, hp=hp,
      seed=c.seed, cohort_sampling=c.cohort_sampling)


METHODS = (registry.MethodSpec(
    'dp_scaffold', _build, DPScaffoldHparams,
    'DP-SCAFFOLD (Noble et al. 2022): SCAFFOLD control variates with DP-SGD clients, '
    'sample-level',
    shared_meanings=dict(clip_norm='per-example clipping norm C',
                         noise_multiplier='DP-SGD sigma',
                         learning_rate='local learning rate eta_l')),)
