"""Speed benchmarks: prints measured ratios (not a test; targets are in the README).

    python -m benchmarks.run [--repeats 5]
        [--only tff|client|per_client|dpsgd|conv|adap|workers|kth|eval|aggregate|figures|
                confinement|papers|jobs|slices]
        [--data-dir DIR] [--figures fig3 fig6 fig7a] [--papers a_dpfl ...]
        [--probe-rounds 3] [--fresh] [--slices]

1. TFF round time vs the same client work as one plain TensorFlow function (the floor):
   (a) 10 clients x one 78-example lot, Adap DP-FL's CNN (26,010 parameters);
   (b) 100 clients x 60 examples, batch 20, A-DPFL's CNN (3.3M parameters).
   Both with per-example clipping + Gaussian noise (DPFL client work), example-weighted
   FedAvg. TFF: the method's `LearningProcess` under TFF's standard local C++ context,
   client datasets built inside TFF from client ids; one TFF client per client, and
   cohort slices of 10 clients per TFF client computation. Floor: the identical
   `client_update` `tf.function` called in-process per client, and the weighted mean.
2. One DP-SGD step (per-example clip + noise + SGD update) vs one non-private step on
   the same batch, plus the clip-only step to show where the time goes; and
   (`--only conv`) per-example Conv2D kernel gradients by each of
   `per_example.CONV_GRADIENT_PATHS`, and per-example norms + clipped sum against ghost
   clipping's, for every conv layer of the package's CNNs.
3. Adap DP-FL's round (10 clients x one Poisson lot of expected size 78 from 5,480
   examples each, its CNN, per-client Adam state in and out of TFF, validation loss on
   5,000 examples every round): the TFF process vs the same TensorFlow functions called
   in-process (the floor); and, with `--data-dir`, the whole runner (accounting, test
   evaluation every 50 rounds) on real MNIST in rounds per second (target >= 5).
1b. (`--only client`) FedAvg and client-level DP-FedAvg rounds vs the same client work as
   one plain-TF function (clip, sum, Gaussian noise for DP-FedAvg), one TFF client per
   client and one cohort slice (DP-FedAvg's updates clipped in the slice): 10 of 100
   clients x 600 examples, and the benchmark's client track, 50 of 1,000 x 55.
1c. (`--only per_client`) Where TFF's cost per client goes on that client track: rounds
   that only broadcast the weights and sum them back, that also build and read each
   client's dataset inside TFF, FedAvg's whole round, and the plain-TF floor, each at 10
   and 50 clients (the slope is the cost per client).
4. Rounds on TFF workers (`--workers`; `python -m benchmarks.run --only workers`): one
   A-DPFL-setting DPFL round (100 clients per round x 60 examples, batch 20, A-DPFL's CNN,
   3.3M parameters) under the local context, on one loopback worker and on two loopback
   workers (TFF's mergeable-computation context, one sub-round per worker); and the
   per-round cost of moving the model to a remote worker and back (a round whose client
   work is the identity on the broadcast weights, 2 clients).
5. DP-FedAGS's eq. 35 threshold on the 1,663,370 coordinates of the McMahan CNN:
   `dp_fedags.kth_smallest` (bisection over float32 bit patterns) vs `tf.sort` and
   indexing, both in a `tf.function`, and the two answers compared.
6. AADP-FL's aggregation alone (`--only aggregate`): longitudinal clip + per-client
   Gaussian noise + unweighted mean of 20 client updates, against the mean alone, for the
   MLP and AlexNet-style networks of Fig. 3 and Fig. 7a (the runner times the whole TFF
   round only).
7. (`--only figures --data-dir DIR`, minutes) AADP-FL's CNN figures (Fig. 3
   AlexNet-style and Fig. 6 McMahan CNN on MNIST; with `--figures fig7a`, Fig. 7a's
   AlexNet-style network on CIFAR-10): the first rounds of the figure's real
   configurations on real data, projected to the figure's wall time.
8. (`--only papers --data-dir DIR`, an hour or more; resumable) The cost table: for
   every paper artefact, the projected hours alone on this machine from short probes of
   its runs' real configurations (`benchmarks/costs.py`), beside the hours its runs
   recorded; written to `benchmarks/costs.md` and `benchmarks/costs.csv`. With
   `--slices`, also the runs as the experiment modules' `--clients-per-slice 1` runs them.
9. (`--only jobs --data-dir DIR`, minutes) How much `--jobs N` slows each run: copies of
   published runs (`costs.JOBS_CASES`) timed alone and 2 and 3 at once.
10. (`--only eval`) The runner's own work each evaluated round: `evaluation.Evaluator`
   on 10,000 examples against the cached `tf.data` pipeline it replaced, for logistic
   regression, the MLP and the 26k CNN; and reading the model weights from the process
   state in Python against the process's `get_model_weights` TFF call.
11. (`--only slices --data-dir DIR`, a minute) Published runs (`SLICE_CASES`: cosAFed's
   Equal split, N = 3) probed as recorded and in cohort slices of one client.
Synthetic uint8 images (speed does not depend on pixel values) except 3's runner, 7 and 8.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import os
import platform
import sys
import tempfile
import time
from typing import Optional

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import costs, steps  # pylint: disable=g-import-not-at-top
from tffdp import models, plotting, queries, runner, runtime  # pylint: disable=g-import-not-at-top
from tffdp.algorithms import aadp_fl, baselines, common, dp_fedags, per_example  # pylint: disable=g-import-not-at-top
from tffdp.algorithms.dp_sgd import build_local_step, gaussian_noise_like  # pylint: disable=g-import-not-at-top
from tffdp.data import FederatedData, ShuffleBatch  # pylint: disable=g-import-not-at-top


measure = steps.measure  # shared with the cost table's floor
Timing = steps.Timing


def timeit(fn, repeats: int) -> float:
  """Median seconds of `measure`."""
  return measure(fn, repeats).median


# The ratios `make bench` guards: name -> (target, guard). The target is the speed
# issue's goal; `guard` is where the check fails: the target where it is met, else the
# ratio last measured with the machine idle (benchmarks/README.md), so a regression
# fails while a known miss does not.
GUARDS = {
    # This machine (since 2026-12-06) measured 1.74x on 2026-12-07; 1.29x on the previous.
    'dpsgd/adap_dp_fl_cnn': (1.3, 1.75),
    'dpsgd/deep_mnist_cnn': (1.3, 1.3),
    'dpsgd/lenet_cnn': (1.3, 1.55),
    'dpsgd/alexnet_cnn': (1.3, 1.6),
    'dpsgd/mcmahan_cnn': (1.3, 1.3),
    'tff/adap_dp_fl_cnn/one_per_client': (1.2, 5.0),
    'tff/adap_dp_fl_cnn/slices_of_5': (1.2, 1.75),
    'tff/adap_dp_fl_cnn/slices_of_10': (1.2, 1.8),
    'tff/deep_mnist_cnn/one_per_client': (1.2, 2.0),
    'tff/deep_mnist_cnn/slices_of_10': (1.2, 1.2),
    'adap/round': (1.2, 1.65),
    # Measured idle 2026-11-28 over four invocations (largest ratio seen).
    'client_level/600_examples/fedavg': (1.2, 1.45),
    'client_level/600_examples/fedavg_one_slice': (1.2, 1.2),
    'client_level/600_examples/dp_fedavg': (1.2, 1.45),
    'client_level/600_examples/dp_fedavg_one_slice': (1.2, 1.25),
    'client_level/55_examples/fedavg': (1.2, 3.5),
    'client_level/55_examples/fedavg_one_slice': (1.2, 1.55),
    'client_level/55_examples/dp_fedavg': (1.2, 3.6),
    'client_level/55_examples/dp_fedavg_one_slice': (1.2, 1.7),
}
RESULTS: list[tuple[str, float, float]] = []  # (name, ratio, relative noise)


def record(name: str, ratio: float, noise: float) -> None:
  """Keeps a guarded ratio (`GUARDS`) and its noise for `guard_report`."""
  if name not in GUARDS:
    raise KeyError(f'no guard for {name!r}; add it to GUARDS')
  RESULTS.append((name, ratio, noise))


def guard_report(results=None, guards=None) -> tuple[list[str], int]:
  """Lines of the guard table and the exit code: 1 if a ratio exceeds its guard by
  more than its measured noise (`ratio > guard * (1 + noise)`), else 0."""
  results = RESULTS if results is None else results
  guards = GUARDS if guards is None else guards
  lines, code = [], 0
  for name, ratio, noise in results:
    target, guard = guards[name]
    if ratio > guard * (1 + noise):
      verdict, code = f'REGRESSED past the guard {guard:.2f}x', 1
    elif ratio <= target:
      verdict = 'target met'
    else:
      verdict = f'target not met (guard {guard:.2f}x)'
    lines.append(f'[guard] {name}: {ratio:.2f}x +- {100 * noise:.0f}% (target <= '
                 f'{target:.2f}x): {verdict}')
  return lines, code


def random_clients(model, clients, per_client, cache):
  """`(x, y, FederatedData, keras builder)`: `clients` of `per_client` random MNIST-shaped
  examples each, in order, and `model` for them."""
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (clients * per_client, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, clients * per_client)
  parts = [np.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
  data = FederatedData(x, y, parts, cache_dir=cache)
  return x, y, data, functools.partial(models.build_keras_model, model, (28, 28, 1), 10)


def train_client_in_tf(model, step, weights, xs, ys, c, steps, batch, seed,
                       noise_multiplier, clip_norm):
  """In a `tf.function`: client `c` of `xs, ys` ([clients, examples, ...]) trained from
  `weights` by `steps` calls of `step` (`build_local_step`) on batches of `batch`; returns
  its update `weights - trained` (the floors of the TFF-round benchmarks)."""
  for v, w in zip(model.trainable_variables, weights):
    v.assign(w)
  for s in tf.range(steps):
    lo = s * batch
    step(xs[c, lo:lo + batch], ys[c, lo:lo + batch], seed, s, noise_multiplier, clip_norm)
  return [w - v for w, v in zip(weights, model.trainable_variables)]


def bench_tff(label, model, clients, per_client, batch, repeats, cache, slices=(None,)):
  x, y, data, builder = random_clients(model, clients, per_client, cache)
  cohort = np.arange(clients)
  seeds = [np.array([1, i], np.int64) for i in range(clients)]
  processes = {}
  for per_slice in slices:
    method = baselines.build_dpfl(builder, data, learning_rate=0.05, batch_size=batch,
                                  noise_multiplier=1.0, clip_norm=4.0,
                                  clients_per_slice=per_slice)
    round_fn = runner.build_round_computation(method, data)
    args = ((runner.slice_inputs(cohort, seeds, per_slice),) if per_slice else
            ([str(i) for i in cohort], seeds))
    processes[per_slice] = (method, round_fn, args)
  method = processes[slices[0]][0]
  state = {'s': method.process.initialize()}

  # Floor: the same local step, all clients in one plain tf.function, data in memory.
  keras_model = builder()  # (`model` stays the name the guards are recorded under)
  step = build_local_step(keras_model, 0.05, 'clip_then_noise')
  weights = [tf.constant(w) for w in method.process.get_model_weights(state['s']).trainable]
  xs = tf.constant(x.reshape(clients, per_client, 28, 28, 1).astype(np.float32) / 255.0)
  ys = tf.constant(y.reshape(clients, per_client).astype(np.int32))
  steps = -(-per_client // batch)

  @tf.function
  def floor_fn():
    total = [tf.zeros_like(w) for w in weights]
    for c in tf.range(clients):
      update = train_client_in_tf(
          keras_model, step, weights, xs, ys, c, steps, batch,
          tf.stack([tf.constant(1, tf.int64), tf.cast(c, tf.int64)]), tf.constant(1.0),
          tf.constant(4.0))
      total = [t + float(per_client) * u for t, u in zip(total, update)]
    return [w - t / float(clients * per_client) for w, t in zip(weights, total)]

  floor_round = lambda: [t.numpy() for t in floor_fn()]

  floor = measure(floor_round, repeats)
  t_floor = floor.median
  out = {}
  for per_slice, (method, round_fn, args) in processes.items():
    state['s'] = method.process.initialize()

    def tff_round(round_fn=round_fn, args=args):
      state['s'] = round_fn(state['s'], *args).state
    tff_time = measure(tff_round, repeats)
    t_tff = tff_time.median
    how = (f'{per_slice} clients per TFF client' if per_slice else 'one TFF client per client')
    print(f'[tff] {label}, {how}: TFF {t_tff:.3f} s/round, plain-TF floor {t_floor:.3f} '
          f's/round, ratio {t_tff / t_floor:.2f}x (target <= 1.2x)', flush=True)
    record(f'tff/{model}/' + (f'slices_of_{per_slice}' if per_slice else 'one_per_client'),
           t_tff / t_floor, tff_time.spread + floor.spread)
    out[per_slice] = t_tff
  return out, t_floor


def client_level_floor(builder, x, y, cohort, per_client, batch, private,
                       noise_multiplier=1.0, clip_norm=1.0):
  """The plain-TF floor of a client-level round: a `tf.function` `weights -> new weights`
  that trains the first `cohort` clients of `x, y` (`per_client` examples each, in order)
  for one epoch of SGD at `batch` (lr 0.05) one after the other, then takes FedAvg's
  example-weighted mean of their updates, or (`private`) clips each to `clip_norm`, sums,
  adds `N(0, (z C)^2)` and divides by the cohort size."""
  keras_model = builder()
  step = build_local_step(keras_model, 0.05, 'none')
  xs = tf.constant(x[:cohort * per_client].reshape(cohort, per_client, 28, 28, 1)
                   .astype(np.float32) / 255.0)
  ys = tf.constant(y[:cohort * per_client].reshape(cohort, per_client).astype(np.int32))
  steps_per_client = -(-per_client // batch)

  @tf.function
  def fn(weights):
    total = [tf.zeros_like(w) for w in weights]
    for c in tf.range(cohort):
      delta = train_client_in_tf(keras_model, step, weights, xs, ys, c, steps_per_client,
                                 batch, tf.constant([1, 0], tf.int64), tf.constant(0.0),
                                 tf.constant(clip_norm))
      if private:
        delta, _ = tf.clip_by_global_norm(delta, clip_norm)
        total = [t + d for t, d in zip(total, delta)]
      else:
        total = [t + float(per_client) * d for t, d in zip(total, delta)]
    if private:
      noised = [t + tf.random.normal(tf.shape(t), stddev=noise_multiplier * clip_norm)
                for t in total]
      return [w - t / float(cohort) for w, t in zip(weights, noised)]
    return [w - t / float(cohort * per_client) for w, t in zip(weights, total)]
  return fn


def bench_tff_per_client(repeats, cache, clients=1000, per_client=55, batch=20,
                         model='adap_dp_fl_cnn', cohorts=(10, 50)):
  """Where TFF's cost per client goes on the benchmark's client track (50 of 1,000
  clients x 55 examples, the 26k CNN, batch 20): three TFF rounds of growing client work
  and the plain-TF floor, each at two cohort sizes, so that the slope between them is the
  cost per client and the intercept the fixed cost per round:

  - `dispatch`: broadcast the model's trainable weights, each client returns them as
    they came (a `tff.tensorflow.computation` on `(weights, client id)`), federated sum;
  - `data`: the same plus each client's dataset built inside TFF from its id and seed
    (`FederatedData.client_data_computation`, as every cohort round does) and read to
    the end (its examples counted);
  - `data_in_one`: the same dataset built and read inside the client's one computation
    (no dataset passed from one TFF computation to the next);
  - `fedavg`: FedAvg's whole round (`runner.build_round_computation`), one epoch of SGD;
  - `fedavg_slices_of_1`: the same round in cohort slices of one client each (each TFF
    client trains one client from its id and seed by index tensors, no `tf.data`
    pipeline: `dp_sgd.build_sliced_dp_sgd_client_work`);
  - `aadp_fl`, `aadp_fl_slices_of_1`: AADP-FL's round computation (longitudinal clipping
    and per-client Gaussian noise on each client's update), one TFF client per client and
    in cohort slices of one client;
  - `dp_fedavg_ags`, `dp_fedavg_ags_slices_of_1`: the DP-FedAGS family's round (here
    DP-FedAvg as its paper runs it: each client's accumulated gradient clipped and
    noised, `dp_fedags.SignificantGradientFactory`), one TFF client per client and in
    cohort slices of one client;
  - `floor`: the same clients trained in one plain-TF `tf.function` (`client_level_floor`).

  Interleaved, `repeats` calls each in turn, three times; prints ms per client and per
  round. Returns `{stage: (ms per client, ms per round fixed)}`."""
  x, y, data, builder = random_clients(model, clients, per_client, cache)
  trainable_type = common.weights_type_of(builder).trainable
  data_comp = data.client_data_computation(ShuffleBatch(batch, 1))

  @tff.tensorflow.computation(trainable_type, tff.TensorType(np.str_))
  def echo(weights, client_id):
    del client_id
    return weights

  def read(batches):
    return batches.reduce(np.int64(0), lambda n, b: n + tf.cast(tf.shape(b['y'])[0], tf.int64))

  @tff.tensorflow.computation(trainable_type, data_comp.type_signature.result)
  def echo_read(weights, client_data):
    return weights, read(client_data['batches'])

  @tff.tensorflow.computation(trainable_type, tff.TensorType(np.str_),
                              tff.TensorType(np.int64, [2]))
  def echo_build_read(weights, client_id, seed):
    return weights, read(data.client_batches(client_id, seed, ShuffleBatch(batch, 1)))

  server_weights = tff.FederatedType(trainable_type, tff.SERVER)
  client_ids = tff.FederatedType(np.str_, tff.CLIENTS)
  client_seeds = tff.FederatedType(tff.TensorType(np.int64, [2]), tff.CLIENTS)

  @tff.federated_computation(server_weights, client_ids)
  def dispatch(weights, ids):
    return tff.federated_sum(tff.federated_map(echo, (tff.federated_broadcast(weights), ids)))

  @tff.federated_computation(server_weights, client_ids, client_seeds)
  def with_data(weights, ids, seeds):
    datasets = tff.federated_map(data_comp, (ids, seeds))
    return tff.federated_sum(tff.federated_map(
        echo_read, (tff.federated_broadcast(weights), datasets)))

  @tff.federated_computation(server_weights, client_ids, client_seeds)
  def data_in_one(weights, ids, seeds):
    return tff.federated_sum(tff.federated_map(
        echo_build_read, (tff.federated_broadcast(weights), ids, seeds)))

  method = baselines.build_fedavg(builder, data, learning_rate=0.05, batch_size=batch)
  fedavg = runner.build_round_computation(method, data)
  sliced = baselines.build_fedavg(builder, data, learning_rate=0.05, batch_size=batch,
                                  clients_per_slice=1)
  fedavg_sliced = runner.build_round_computation(sliced, data)
  sliced_state = sliced.process.initialize()
  aadp = {per_slice: aadp_fl.build_aadp_fl(builder, data, rounds=100, batch_size=batch,
                                           learning_rate=0.05, clip_norm=0.5,
                                           clients_per_slice=per_slice)
          for per_slice in (None, 1)}
  aadp_states = {per_slice: m.initialize() for per_slice, m in aadp.items()}
  ags = {per_slice: dp_fedags.build_dp_fedags(
      builder, data, rounds=100, method='dp_fedavg_ags', batch_size=batch,
      learning_rate=0.05, clip_norm=0.5, clients_per_slice=per_slice)
      for per_slice in (None, 1)}
  ags_states = {per_slice: m.initialize() for per_slice, m in ags.items()}
  state = method.process.initialize()
  trainable = list(method.process.get_model_weights(state).trainable)
  cases = {}
  for k in cohorts:
    ids = [str(i) for i in range(k)]
    seeds = [np.array([1, i], np.int64) for i in range(k)]
    floor = client_level_floor(builder, x, y, k, per_client, batch, False)
    tf_weights = [tf.constant(w) for w in trainable]
    for stage in (with_data, data_in_one):
      count = int(stage(trainable, ids, seeds)[1])
      if count != k * per_client:  # every client's examples read, once
        raise RuntimeError(f'a data stage read {count} examples of {k * per_client}.')
    cases[k] = {
        'dispatch': lambda ids=ids: dispatch(trainable, ids),
        'data': lambda ids=ids, seeds=seeds: with_data(trainable, ids, seeds),
        'data_in_one': lambda ids=ids, seeds=seeds: data_in_one(trainable, ids, seeds),
        'fedavg': lambda ids=ids, seeds=seeds: fedavg(state, ids, seeds),
        'fedavg_slices_of_1': lambda k=k, ids=ids, seeds=seeds: fedavg_sliced(
            sliced_state, runner.slice_inputs(np.arange(k), seeds, 1)),
        'aadp_fl': lambda ids=ids, seeds=seeds: aadp[None].round_computation(
            aadp_states[None], ids, seeds),
        'aadp_fl_slices_of_1': lambda k=k, seeds=seeds: aadp[1].round_computation(
            aadp_states[1], runner.slice_inputs(np.arange(k), seeds, 1)),
        'dp_fedavg_ags': lambda ids=ids, seeds=seeds: ags[None].round_computation(
            ags_states[None], ids, seeds),
        'dp_fedavg_ags_slices_of_1': lambda k=k, seeds=seeds: ags[1].round_computation(
            ags_states[1], runner.slice_inputs(np.arange(k), seeds, 1)),
        'floor': lambda floor=floor, w=tf_weights: [t.numpy() for t in floor(w)]}
  times = {(k, name): [] for k in cohorts for name in cases[k]}
  for _ in range(3):
    for k in cohorts:
      for name, fn in cases[k].items():
        times[(k, name)].append(measure(fn, repeats).median)
  small, large = cohorts
  out = {}
  for name in cases[small]:
    t_small, t_large = (float(np.median(times[(k, name)])) for k in cohorts)
    per_client_ms = 1e3 * (t_large - t_small) / (large - small)
    fixed_ms = 1e3 * t_small - small * per_client_ms
    out[name] = (per_client_ms, fixed_ms)
    print(f'[tff-per-client] {name}: {1e3 * t_small:.1f} ms at {small} clients, '
          f'{1e3 * t_large:.1f} ms at {large}: {per_client_ms:.2f} ms per client, '
          f'{fixed_ms:.1f} ms per round fixed ({per_client} examples a client, batch '
          f'{batch}, {model})', flush=True)
  return out


def bench_client_level(repeats, cache, tag, clients=100, per_client=600, cohort=10,
                       batch=20, model='adap_dp_fl_cnn', noise_multiplier=1.0,
                       clip_norm=1.0):
  """FedAvg and client-level DP-FedAvg rounds (the speed issue's first workload) against
  the same client work as one plain-TF `tf.function`: `cohort` of `clients` clients x
  `per_client` examples, one epoch of SGD at `batch`, `model`. DP-FedAvg's floor clips
  each client's update to `clip_norm`, sums, adds `N(0, (z C)^2)` and divides by the
  cohort size (`seeded_gaussian_fixed`'s query); FedAvg's takes the example-weighted mean.
  Each also runs as one cohort slice (`clients_per_slice = cohort`: one TFF client
  computation trains the cohort; DP-FedAvg's updates clipped in the slice,
  `queries.PreclippedGaussianSumQuery`), which removes TFF's per-client cost. The TFF rounds and
  their floors are measured interleaved, `repeats` rounds each in turn, three times;
  the ratios are recorded as `client_level/<tag>/<name>`. Returns `{name: (tff s/round,
  floor s/round)}`."""
  x, y, data, builder = random_clients(model, clients, per_client, cache)
  ids = np.arange(cohort)
  seeds = [np.array([1, i], np.int64) for i in ids]
  methods = {
      'fedavg': baselines.build_fedavg(builder, data, learning_rate=0.05, batch_size=batch),
      'fedavg_one_slice': baselines.build_fedavg(builder, data, learning_rate=0.05,
                                                 batch_size=batch, clients_per_slice=cohort),
      **{name: baselines.build_dp_fedavg(
          builder, data, learning_rate=0.05, batch_size=batch,
          noise_multiplier=noise_multiplier, clip_norm=clip_norm, clients_per_round=cohort,
          clients_per_slice=per_slice)
         for name, per_slice in (('dp_fedavg', None), ('dp_fedavg_one_slice', cohort))}}
  floors = {private: client_level_floor(builder, x, y, cohort, per_client, batch, private,
                                        noise_multiplier, clip_norm)
            for private in (False, True)}  # one trace each
  cases = {}
  for name, method in methods.items():
    comp = runner.build_round_computation(method, data)
    args = ((runner.slice_inputs(ids, seeds, cohort),) if method.clients_per_slice else
            ([str(i) for i in ids], seeds))
    state = {'s': method.process.initialize()}
    weights = [tf.constant(w) for w in method.process.get_model_weights(state['s']).trainable]
    floor = floors[name.startswith('dp_fedavg')]

    def tff_round(comp=comp, state=state, args=args):
      state['s'] = comp(state['s'], *args).state

    def floor_round(floor=floor, weights=weights):
      return [t.numpy() for t in floor(weights)]
    cases[name] = (tff_round, floor_round)
  timings = {name: ([], []) for name in cases}
  for _ in range(3):  # interleaved: a slow spell of the machine hits every case
    for name, fns in cases.items():
      for fn, times in zip(fns, timings[name]):
        times.append(measure(fn, repeats))
  out = {}
  for name, (tff_times, floor_times) in timings.items():
    t_tff = float(np.median([t.median for t in tff_times]))
    t_floor = float(np.median([t.median for t in floor_times]))
    spread = lambda ts: (max(t.median for t in ts) - min(t.median for t in ts)) / 2 / (
        float(np.median([t.median for t in ts])))
    print(f'[client-level] {name}, {cohort} of {clients} clients x {per_client} examples, '
          f'batch {batch}, {model}: TFF {t_tff:.3f} s/round, plain-TF floor {t_floor:.3f} '
          f's/round, ratio {t_tff / t_floor:.2f}x (target <= 1.2x)', flush=True)
    record(f'client_level/{tag}/{name}', t_tff / t_floor,
           spread(tff_times) + spread(floor_times))
    out[name] = (t_tff, t_floor)
  ratio = lambda i: out['dp_fedavg'][i] / out['fedavg'][i]
  print(f'[client-level] DP-FedAvg / FedAvg under TFF: {ratio(0):.2f}x; in plain TF: '
        f'{ratio(1):.2f}x', flush=True)
  return out


# (label, model, batch, input shape): the paper models DP-SGD trains, at their batch.
DPSGD_CASES = (
    ('Adap DP-FL CNN, batch 78', 'adap_dp_fl_cnn', 78, (28, 28, 1)),
    ('A-DPFL CNN, batch 20', 'deep_mnist_cnn', 20, (28, 28, 1)),
    ('AADP-FL CIFAR-10 LeNet-5 style (DP-SCAFFOLD), batch 50', 'lenet_cnn', 50, (32, 32, 3)),
    ('AADP-FL AlexNet-style on MNIST (DP-SCAFFOLD), batch 32', 'alexnet_cnn', 32, (28, 28, 1)),
    ('AADP-FL Fig. 6 McMahan CNN (DP-SCAFFOLD), batch 32', 'mcmahan_cnn', 32, (28, 28, 1)),
)


def bench_dpsgd(label, model, batch, repeats, shape=(28, 28, 1)):
  fns = steps.train_steps(model, shape, batch)
  plain, clip_only, dp, noise_only = (fns[k] for k in ('plain', 'clip_only', 'dp', 'noise'))
  size = fns['size']
  run = lambda f: (lambda: [f() for _ in range(10)])
  timings = [measure(run(f), repeats) for f in (plain, clip_only, dp, noise_only)]
  t_plain, t_clip, t_dp, t_noise = (t.median / 10 for t in timings)
  ratio = t_dp / (t_plain + t_noise)
  print(f'[dpsgd] {label}: non-private {1e3 * t_plain:.1f} ms, clip only '
        f'{1e3 * t_clip:.1f} ms ({t_clip / t_plain:.2f}x), DP-SGD (clip + noise) '
        f'{1e3 * t_dp:.1f} ms ({t_dp / t_plain:.2f}x); one Gaussian draw of the model\'s '
        f'{int(size)} coordinates {1e3 * t_noise:.1f} ms, so DP-SGD is {ratio:.2f}x '
        f'non-private + that draw (target <= 1.3x)', flush=True)
  record(f'dpsgd/{model}', ratio, timings[0].spread + timings[2].spread + timings[3].spread)
  return t_plain, t_clip, t_dp


CONV_CASES = (  # (model, input shape, batch): the batches the experiments use
    ('adap_dp_fl_cnn', (28, 28, 1), 78), ('deep_mnist_cnn', (28, 28, 1), 20),
    ('fl_mnist_cnn', (28, 28, 1), 32), ('mcmahan_cnn', (28, 28, 1), 32),
    ('alexnet_cnn', (28, 28, 1), 32), ('lenet_cnn', (32, 32, 3), 50),
    ('dp_fedags_cifar_cnn', (32, 32, 3), 50))


def _ghost_norms_and_sum(a, d, layer, scale):
  """Ghost clipping's way (Li et al. 2022): per-example squared norms as
  `<P_i P_i^T, D_i D_i^T>` (no per-example gradient formed) and the clipped sum as one
  filter gradient of the scaled output gradients."""
  b, (oh, ow) = tf.shape(a)[0], d.shape[1:3]
  p = tf.image.extract_patches(a, [1, *layer.kernel_size, 1], [1, *layer.strides, 1],
                               [1, 1, 1, 1], layer.padding.upper())
  p = tf.reshape(p, [b, oh * ow, -1])
  dd = tf.reshape(d, [b, oh * ow, d.shape[-1]])
  sq = tf.reduce_sum(tf.matmul(p, p, transpose_b=True) * tf.matmul(dd, dd, transpose_b=True),
                     axis=[1, 2])
  kernel = tf.compat.v1.nn.conv2d_backprop_filter(
      a, layer.kernel.shape.as_list(), d * scale[:, None, None, None], [1, *layer.strides, 1],
      layer.padding.upper())
  return sq, kernel


def _per_example_norms_and_sum(a, d, layer, scale, path=None):
  """tffdp's way (`per_example._per_example_parts` and `clipped_gradient_sum`)."""
  g = per_example.conv_kernel_gradients(a, d, layer.kernel_size, layer.strides,
                                        layer.padding, path)
  return (tf.reduce_sum(tf.square(g), axis=[1, 2]),
          tf.reshape(tf.tensordot(scale, g, axes=1), layer.kernel.shape))


def bench_conv_grads(repeats):
  """Per-example Conv2D kernel gradients, every conv layer of the package's CNNs at the
  batch size its experiments use: each of `per_example.CONV_GRADIENT_PATHS` that applies
  (the one `conv_kernel_gradients` picks marked), and per-example squared norms plus the
  clipped sum the tffdp way (per-example gradients of the picked path) against ghost
  clipping's (Li et al. 2022: norms from `P_i P_i^T` and `D_i D_i^T`, the sum as one
  filter gradient). Returns `{path: total seconds}` (plus 'picked', 'ghost', 'tffdp')."""
  totals = collections.defaultdict(float)
  for name, shape, batch in CONV_CASES:
    m = models.build_keras_model(name, shape, 10, seed=0)
    h = tf.random.stateless_uniform([batch, *shape], seed=[1, 2])
    scale = tf.random.stateless_uniform([batch], seed=[5, 6])
    for layer in m.layers:
      if isinstance(layer, tf.keras.layers.Conv2D):
        z = layer(h)
        d = tf.random.stateless_normal(z.shape, seed=[3, 4])
        picked = per_example._conv_gradient_path(h.shape[-1], z.shape[-1],
                                                 z.shape[1] * z.shape[2], layer.strides)
        paths = [q for q in per_example.CONV_GRADIENT_PATHS
                 if tuple(layer.strides) == (1, 1) or q in ('depthwise', 'extract_patches')]
        ref = per_example.conv_kernel_gradients(h, d, layer.kernel_size, layer.strides,
                                                layer.padding, 'extract_patches')
        cells = []
        for q in paths:
          f = tf.function(lambda a=h, d=d, l=layer, q=q: per_example.conv_kernel_gradients(
              a, d, l.kernel_size, l.strides, l.padding, q))
          err = float(tf.reduce_max(tf.abs(f() - ref)) / tf.reduce_max(tf.abs(ref)))
          t = timeit(lambda f=f: [f() for _ in range(10)], repeats) / 10
          totals[q] += t
          if q == picked:
            totals['picked'] += t
          cells.append(f'{q}{"*" if q == picked else ""} {1e3 * t:.2f}'
                       f'{f" (rel. diff {err:.0e})" if err > 1e-5 else ""}')
        mine = tf.function(lambda a=h, d=d, l=layer: _per_example_norms_and_sum(a, d, l, scale))
        ghost = tf.function(lambda a=h, d=d, l=layer: _ghost_norms_and_sum(a, d, l, scale))
        (sq1, k1), (sq2, k2) = mine(), ghost()
        err = max(float(tf.reduce_max(tf.abs(sq1 - sq2)) / tf.reduce_max(sq1)),
                  float(tf.reduce_max(tf.abs(k1 - k2)) / tf.reduce_max(tf.abs(k1))))
        t_mine, t_ghost = (timeit(lambda f=f: [f() for _ in range(10)], repeats) / 10
                           for f in (mine, ghost))
        totals['tffdp'] += t_mine
        totals['ghost'] += t_ghost
        print(f'[conv_grads] {name} {layer.name} (in {tuple(h.shape[1:])}, kernel '
              f'{layer.kernel_size}, stride {layer.strides}, {z.shape[1] * z.shape[2]} '
              f'positions, c_in x c_out {h.shape[-1] * z.shape[-1]}, batch {batch}), ms: '
              f'{", ".join(cells)}; norms + clipped sum: tffdp {1e3 * t_mine:.2f}, ghost '
              f'clipping {1e3 * t_ghost:.2f} (max rel. difference {err:.0e})', flush=True)
      h = layer(h)
  print(f'[conv_grads] all {len(CONV_CASES)} models\' conv layers, ms: picked path '
        f'(* above) {1e3 * totals["picked"]:.1f}, extract_patches everywhere '
        f'{1e3 * totals["extract_patches"]:.1f}, depthwise everywhere '
        f'{1e3 * totals["depthwise"]:.1f}; norms + clipped sum: tffdp '
        f'{1e3 * totals["tffdp"]:.1f}, ghost clipping {1e3 * totals["ghost"]:.1f}',
        flush=True)
  return dict(totals)


def bench_dpsgd_profile(label, model, batch, repeats, shape=(28, 28, 1)):
  """Where a DP-SGD step's time goes, stage by stage, against a non-private step.

  Each stage is its own `tf.function` doing everything before it too, so the differences
  are the stages' costs: the forward pass and loss; the backward pass to every layer's
  pre-activation output (no weight gradients); the per-example factors and norms
  (`per_example._per_example_parts`: per-example Conv2D kernel gradients, squared
  norms); the clipped sum (`clipped_gradient_sum`); and the noise. The non-private step's
  own backward pass computes weight gradients where DP-SGD's does not.

  Returns:
    `{stage: seconds}` (cumulative), plus `'non-private'`.
  """
  fns = steps.train_steps(model, shape, batch)  # the model and batch `bench_dpsgd` times
  m, x, y, clip, seed = (fns[k] for k in ('model', 'x', 'y', 'clip', 'seed'))

  def loss_of(logits):
    return tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
        y, logits, from_logits=True))

  @tf.function
  def forward():
    return loss_of(per_example._forward(m, x, True)[0])  # pylint: disable=protected-access

  @tf.function
  def backward():
    with tf.GradientTape() as tape:
      logits, records = per_example._forward(m, x, True)  # pylint: disable=protected-access
      zs = [z for _, _, z in records]
      tape.watch(zs)
      total = loss_of(logits)
    return tape.gradient(total, zs)

  @tf.function
  def norms():
    return per_example._per_example_parts(m, x, y, True)[1]  # pylint: disable=protected-access

  @tf.function
  def clipped():
    return per_example.clipped_gradient_sum(m, x, y, clip)[0]

  @tf.function
  def noised():
    s = per_example.clipped_gradient_sum(m, x, y, clip)[0]
    return [g + z for g, z in zip(s, gaussian_noise_like(s, clip, seed))]

  @tf.function
  def plain():
    with tf.GradientTape() as tape:
      total = loss_of(m(x, training=True))
    return tape.gradient(total, m.trainable_variables)

  stages = {'forward + loss': forward, '+ backward to pre-activations': backward,
            '+ per-example factors and norms': norms, '+ clipped sum': clipped,
            '+ noise (= DP-SGD gradient)': noised, 'non-private gradient': plain}
  run = lambda f: (lambda: [f() for _ in range(10)])
  out = {name: timeit(run(f), repeats) / 10 for name, f in stages.items()}
  base = out['non-private gradient']
  parts = ', '.join(f'{name} {1e3 * t:.2f} ms ({t / base:.2f}x)' for name, t in out.items())
  print(f'[dpsgd profile] {label}: {parts}', flush=True)
  return out


def bench_noise(repeats, num=3_274_634):
  """Gaussian noise for `num` coordinates (default: the A-DPFL CNN's parameter count):
  TF's per-element sampler against `tffdp.queries.standard_normal` (whole-tensor
  Box-Muller on the same Philox uniforms)."""
  seed = tf.constant([5, 6], tf.int64)
  n = tf.constant(num)
  tf_normal = tf.function(lambda: tf.random.stateless_normal([num], seed=seed))
  box_muller = tf.function(lambda: queries.standard_normal(n, seed))
  run = lambda f: (lambda: [f() for _ in range(10)])
  t_tf, t_bm = (timeit(run(f), repeats) / 10 for f in (tf_normal, box_muller))
  print(f'[dpsgd] Gaussian noise, {num} coordinates: tf.random.stateless_normal '
        f'{1e3 * t_tf:.1f} ms, queries.standard_normal {1e3 * t_bm:.1f} ms '
        f'({t_tf / t_bm:.2f}x faster)', flush=True)
  return t_tf, t_bm


def bench_adap_dp_fl(repeats, cache):
  """Adap DP-FL round: TFF process vs in-process floor (synthetic MNIST-sized data)."""
  import collections  # pylint: disable=g-import-not-at-top
  from tffdp.algorithms import adap_dp_fl  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  clients, per_client = 10, 5480
  x = rng.integers(0, 256, (clients * per_client, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, clients * per_client)
  parts = [np.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
  data = FederatedData(x, y, parts, cache_dir=cache)
  val = (rng.integers(0, 256, (5000, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, 5000))
  builder = functools.partial(models.build_keras_model, 'adap_dp_fl_cnn', (28, 28, 1), 10)
  method = adap_dp_fl.build_adap_dp_fl(builder, data, val, noise_multiplier=6.0)
  state = {'s': method.initialize(), 'r': 0}
  everyone = np.arange(clients)

  def tff_round():
    state['s'], _ = method.run_round(state['s'], everyone, state['r'], 0)
    state['r'] += 1

  # Floor: the same lots, slice update and validation loss as tf.functions in-process.
  update = adap_dp_fl._build_slice_update(  # pylint: disable=protected-access
      builder, clients, 78.0, 0.002, 1.0, 'adaptive', 'keep',
      dict(beta_1=0.9, beta_2=0.999, epsilon=1e-8))
  model = builder()
  ids = tf.constant(data.client_ids)
  client_state = [tf.nest.map_structure(tf.constant, state['s']['clients'][0])]
  trainable = [tf.constant(w) for w in state['s']['server']['model'].trainable]

  @tf.function
  def floor_fn(trainable, client_state, seeds):
    xl, yl, splits, sizes = data.poisson_lots(ids, seeds, 78.0)
    d = collections.OrderedDict(x=xl, y=yl, row_splits=splits, seeds=seeds,
                                active=tf.ones([clients], tf.bool), dataset_size=sizes)
    upd, wsum, new_state, _, _, _ = update(trainable, tf.constant(6.0), client_state, d)
    new_w = [w - u / wsum for w, u in zip(trainable, upd)]
    for v, w in zip(model.trainable_variables, new_w):
      v.assign(w)
    xv, yv = data.server_examples('validation')
    loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        yv, model(xv), from_logits=True))
    return new_w, new_state, loss

  seeds = tf.constant(np.stack([[1, i] for i in range(clients)]).astype(np.int64))
  floor_round = lambda: floor_fn(trainable, client_state[0], seeds)[2].numpy()
  tff_time, floor = measure(tff_round, 6 * repeats), measure(floor_round, 6 * repeats)
  t_tff, t_floor = tff_time.median, floor.median
  print(f'[adap_dp_fl] 10 clients x 78-example lot + validation loss: TFF {t_tff:.3f} s/round '
        f'({1 / t_tff:.1f} rounds/s), in-process floor {t_floor:.3f} s/round, ratio '
        f'{t_tff / t_floor:.2f}x (target <= 1.2x)', flush=True)
  record('adap/round', t_tff / t_floor, tff_time.spread + floor.spread)
  _adap_dp_fl_breakdown(method, state['s'], np.array(data.client_ids), t_tff, t_floor,
                        repeats)
  return t_tff, t_floor


def interleaved(fns, repeats: int) -> list[Timing]:
  """`measure` for several functions called in turn (`fns[0]`, `fns[1]`, ..., `repeats`
  times over), so a drift of the machine's speed reaches each alike."""
  for fn in fns:
    fn()
    fn()
  times = [[] for _ in fns]
  for _ in range(repeats):
    for fn, ts in zip(fns, times):
      t = time.perf_counter()
      fn()
      ts.append(time.perf_counter() - t)
  return [steps.timing_of(ts) for ts in times]


def _adap_dp_fl_breakdown(method, s, client_ids, t_tff, t_floor, repeats):
  """Where Adap DP-FL's TFF round spends its time beyond the floor.

  TFF 0.87's local context runs every computation in its `worker_binary` process, so each
  call sends its arguments there and its results back over gRPC. Measured beside the
  round: the same server and client states sent through a computation that returns them
  unchanged (the state's round trip alone, which any call with them pays), and two rounds
  composed in one TFF call against two calls (what running rounds in chunks would save).

  Args:
    method: An Adap DP-FL `common.Method` (`adap_dp_fl.build_adap_dp_fl`).
    s: Its runner state, `{'server': ..., 'clients': ...}`.
    client_ids: str `[N]`, the clients' ids in slice order.
    t_tff: Seconds a round through TFF (printed beside the breakdown).
    t_floor: Seconds of its in-process floor.
    repeats: Timing repeats (x 6 for the round trip, x 4 interleaved for the calls).

  Returns:
    `{'round_trip', 'one_round', 'two_rounds'}` `Timing`s (seconds) and
    `'client_state_bytes'`.
  """
  import collections  # pylint: disable=g-import-not-at-top
  process = method.process
  server_type, clients_type = process.next.type_signature.parameter[:2]
  inputs_type = process.client_data.type_signature.parameter

  @tff.federated_computation(server_type, clients_type)
  def round_trip(server, client_states):
    return server, client_states

  @tff.federated_computation(server_type, clients_type, inputs_type)
  def one_round(server, client_states, inputs):
    out = process.next(server, client_states, process.client_data(inputs))
    return out['state'], out['client_states']

  @tff.federated_computation(server_type, clients_type, inputs_type, inputs_type)
  def two_rounds(server, client_states, inputs_1, inputs_2):
    out = process.next(server, client_states, process.client_data(inputs_1))
    out = process.next(out['state'], out['client_states'], process.client_data(inputs_2))
    return out['state'], out['client_states']

  clients = len(client_ids)
  inputs = lambda r: [collections.OrderedDict(
      client_ids=client_ids, seeds=np.stack([[r, i] for i in range(clients)]).astype(np.int64),
      active=np.ones(clients, bool))]
  trip = measure(lambda: round_trip(s['server'], s['clients']), 6 * repeats)
  one_call = lambda: one_round(s['server'], s['clients'], inputs(1))
  two_call = lambda: two_rounds(s['server'], s['clients'], inputs(1), inputs(2))
  one, two = interleaved((one_call, two_call), 4 * repeats)
  size = sum(np.asarray(v).nbytes for v in tf.nest.flatten(s['clients']))
  print(f'[adap_dp_fl] beyond the floor: {1e3 * (t_tff - t_floor):.1f} ms a round, of which '
        f'the state\'s round trip through TFF\'s worker process (the server state, and the '
        f'clients\' Adam moments and clip norms: {size / 1e6:.2f} MB) takes '
        f'{1e3 * trip.median:.1f} ms (+-{100 * trip.spread:.0f}%); two rounds in one TFF '
        f'call {two.median:.3f} s against one {one.median:.3f} s '
        f'({1e3 * (2 * one.median - two.median) / 2:.1f} ms a round saved)', flush=True)
  return dict(round_trip=trip, one_round=one, two_rounds=two, client_state_bytes=size)


def bench_adap_dp_fl_runner(data_dir, cache, rounds=300):
  """The whole runner on real MNIST (Fig. 4's decay configuration) for `rounds` rounds."""
  from experiments.adap_dp_fl import common as adap_dp_fl_common  # pylint: disable=g-import-not-at-top
  args = argparse.Namespace(data_dir=data_dir, seed=0, runs_dir=cache, quick=False)
  cfg, out = adap_dp_fl_common.config('mnist', args, 'bench', clipping='adaptive',
                                      noise_schedule='decay', noise_multiplier=6.0)
  cfg.rounds, cfg.log_every, cfg.client_cache_dir = rounds, rounds, cache
  cfg.out = out
  summary = runner.run(cfg, log=lambda s: None)
  rows = plotting.read_metrics(out)
  steady = [r['round_seconds'] for r in rows[10:]]
  median = float(np.median(steady))
  mean = float(np.mean(steady))
  profile = {k: float(np.median([r[k] for r in rows[10:]]))
             for k in ('train_seconds', 'accounting_seconds', 'eval_seconds')}
  print(f'[adap_dp_fl runner] real MNIST, {rounds} rounds: {1 / mean:.2f} rounds/s (mean, '
        f'test evaluation every 50 rounds included; median round {median:.3f} s; '
        f'profile median: TFF round {profile["train_seconds"]:.3f} s, accounting '
        f'{profile["accounting_seconds"]:.4f} s) (target >= 5 rounds/s); '
        f'wall {summary["wall_seconds"]:.0f} s', flush=True)
  return 1 / mean


# name: (figure module, dataset, --model, --eval-every, every curve measured). Curves of
# one method cost the same per round in Fig. 3 and 6 (only their epsilon differs): one
# each is measured. Fig. 7a's curves differ in cohort size (q_user): each is measured.
FIGURE_CASES = {
    'fig3': ('aadp_fl.fig3', 'mnist', 'alexnet_cnn', 1, False),
    'fig6': ('aadp_fl.fig6', 'mnist', 'mcmahan_cnn', 1, False),
    'fig7a': ('aadp_fl.fig7', 'cifar10', 'alexnet_cnn', 10, True),
}


# A run's expected cohort and projected time from its first rounds: the cost table's.
expected_cohort, project_run = costs.expected_cohort, costs.project_run


def bench_figure_cost(data_dir, cache, figures=('fig3', 'fig6'), rounds=3):
  """Projected wall time of AADP-FL's CNN figures, from a few rounds of their runs.

  Each measured curve (`FIGURE_CASES`) runs its real configuration (T, sigma calibrated for
  T) through the runner, paused after `rounds` rounds (`stop_after_round`; the last of
  them evaluates, whatever `eval_every`); the projection is `project_run` at the run's
  expected cohort size, summed over the figure's curves. Issue 12's target: under 3 h per MNIST figure.
  """
  import importlib  # pylint: disable=g-import-not-at-top
  for name in figures:
    module_name, dataset, model, eval_every, each = FIGURE_CASES[name]
    module = importlib.import_module(f'experiments.{module_name}')
    args = argparse.Namespace(data_dir=data_dir, seed=0, runs_dir=cache, quick=False,
                              model=model, clip_norm=None, eval_every=eval_every,
                              curves=list(getattr(module, 'CURVES', ())))
    curves = module.curves(dataset, args)
    measured = curves if each else [next(c for c in curves if c[1].method == m)
                                    for m in dict.fromkeys(c[1].method for c in curves)]
    total, parts = 0.0, []
    for label, cfg, out, _ in measured:
      count = 1 if each else sum(c[1].method == cfg.method for c in curves)
      cfg.stop_after_round, cfg.log_every, cfg.out = rounds, rounds, out
      runner.run(cfg, log=lambda s: None)
      measured_rows = plotting.read_metrics(out)
      cohorts = ', '.join(f'{r["cohort_size"]:g}' for r in measured_rows[1:])
      cohort = expected_cohort(dataclasses.asdict(cfg))
      seconds, train = project_run(measured_rows, cfg.rounds, eval_every, cohort)
      total += count * seconds
      parts.append(f'{label if each else cfg.method} x{count}: {train:.1f} s/round')
      print(f'[figure_cost] {name} ({module_name} --datasets {dataset} --model {model}): '
            f'{label}: median round {train:.1f} s without evaluation (rounds 2-{rounds}, '
            f'cohorts {cohorts} scaled to the expected {cohort:g}), '
            f'projected {seconds / 3600:.2f} h with evaluation every {eval_every}',
            flush=True)
    print(f'[figure_cost] {name}: projected {total / 3600:.2f} h for its {len(curves)} runs '
          f'of {cfg.rounds} rounds ({"; ".join(parts)})'
          f'{" (target < 3 h)" if dataset != "cifar10" else ""}', flush=True)


def bench_jobs(data_dir, figures_dir, rounds, most=(1, 2, 3)):
  """How much running runs at once (`--jobs N`) slows each, on `costs.JOBS_CASES`.

  For each case, `N` copies of the published run (each in its own process, as the
  `--jobs` pool runs them) for `rounds` rounds; the slowdown is the mean over copies of
  their median round against one copy alone, and the throughput `N / slowdown` runs'
  worth of rounds per unit time.

  Returns:
    `{case: {N: slowdown}}`.
  """
  out = {}
  for case in costs.JOBS_CASES:
    config = costs.find_published(case, figures_dir)
    alone = float(np.mean(costs.packed_round_seconds(config, data_dir, 1, rounds)))
    out[case] = {1: 1.0}
    for n in most[1:]:
      slowdown = float(np.mean(costs.packed_round_seconds(config, data_dir, n, rounds))) / alone
      out[case][n] = slowdown
      print(f'[jobs] {case}: {n} at once, each round {slowdown:.2f}x its time alone '
            f'({alone:.3f} s), throughput {n / slowdown:.2f}x one job', flush=True)
  return out


def bench_workers(repeats, cache, clients=100, per_client=60, batch=20):
  """Local context vs one and two loopback TFF workers on the A-DPFL MNIST setting."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (clients * per_client, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, clients * per_client)
  data = FederatedData(x, y, [np.arange(i * per_client, (i + 1) * per_client)
                              for i in range(clients)], cache_dir=cache)
  builder = functools.partial(models.build_keras_model, 'deep_mnist_cnn', (28, 28, 1), 10)
  method = baselines.build_dpfl(builder, data, learning_rate=0.05, batch_size=batch,
                                noise_multiplier=1.0, clip_norm=4.0)
  round_fn = runner.build_round_computation(method, data)
  args = ([str(i) for i in range(clients)], [np.array([1, i], np.int64) for i in range(clients)])
  weights_type = method.process.initialize.type_signature.result.member.global_model_weights

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def transfer_fn(weights, ids):
    """The model to the clients and back, nothing else: the cost of moving it."""
    back = tff.federated_map(tff.tensorflow.computation(lambda w, i: w),
                             (tff.federated_broadcast(weights), ids))
    return tff.federated_mean(back)

  weights = method.process.get_model_weights(method.process.initialize())
  state = {'s': method.process.initialize()}

  def timed(run):
    state['s'] = method.process.initialize()

    def one():
      state['s'] = run(round_fn, state['s'], *args).state
    t_round = timeit(one, repeats)
    t_move = timeit(lambda: run(transfer_fn, weights, [0, 1]), repeats)
    return t_round, t_move

  local = timed(lambda comp, *a: comp(*a))
  times = {}
  for n in (1, 2):
    with runtime.loopback_workers(n) as (addresses, _, tls):
      with runtime.RemoteContext(addresses, tls=tls) as remote:
        times[n] = timed(remote.run)
  params = sum(int(np.prod(w.shape)) for w in weights.trainable)
  print(f'[workers] DPFL round, {clients} clients x {per_client} examples, batch {batch}, '
        f'A-DPFL CNN ({params:,} parameters): local context {local[0]:.2f} s/round, '
        f'1 loopback worker {times[1][0]:.2f} s/round ({times[1][0] / local[0]:.2f}x local), '
        f'2 loopback workers {times[2][0]:.2f} s/round: speed-up of the second worker '
        f'{times[1][0] / times[2][0]:.2f}x ({os.cpu_count()} CPUs)', flush=True)
  print(f'[workers] moving the model ({4 * params / 1e6:.1f} MB of float32) to 2 clients and '
        f'the mean back: local context {1e3 * local[1]:.0f} ms, 1 remote worker '
        f'{1e3 * times[1][1]:.0f} ms, 2 remote workers {1e3 * times[2][1]:.0f} ms per round',
        flush=True)
  return local, times


def bench_kth_smallest(repeats, n=1_663_370):
  """Eq. 35's k-th smallest |g'_j|: bisection vs a full sort (DP-FedAGS, 1.6M coordinates)."""
  from tffdp.algorithms import dp_fedags  # pylint: disable=g-import-not-at-top
  x = tf.abs(tf.random.stateless_normal([n], seed=[7, 8]))
  rank = tf.constant((9 * n + 9) // 10, tf.int32)  # ceil(9 |W| / 10), eq. 35's cap
  bisect = tf.function(dp_fedags.kth_smallest)
  by_sort = tf.function(lambda v, k: tf.sort(v)[k - 1])
  t_bisect = timeit(lambda: bisect(x, rank).numpy(), repeats)
  t_sort = timeit(lambda: by_sort(x, rank).numpy(), repeats)
  same = float(bisect(x, rank)) == float(by_sort(x, rank))
  print(f'[kth] eq. 35 threshold over {n:,} coordinates: bisection {1e3 * t_bisect:.1f} ms, '
        f'tf.sort {1e3 * t_sort:.1f} ms ({t_sort / t_bisect:.1f}x faster); same value: '
        f'{same}', flush=True)
  return t_bisect, t_sort


EVAL_MODELS = ('logistic_regression', 'mlp', 'adap_dp_fl_cnn')
WEIGHTS_METHODS = ('fedavg', 'dp_fedavg', 'a_dpfl', 'cosafed')


def bench_evaluation(repeats, cache, n=10_000, models_=EVAL_MODELS,
                     methods=WEIGHTS_METHODS):
  """The runner's own work each evaluated round, beside the round's TFF call.

  1. `evaluation.Evaluator` on `n` MNIST-shaped examples (batches of 1,000) against the
     cached `tf.data` pipeline of the same batches iterated in one `tf.function` (its
     implementation before 2026-12-07).
  2. Reading the global model's weights from the process state: `Method.model_weights`
     (Python, `common.state_model_weights`) against the process's `get_model_weights`
     (a TFF computation), for methods of the three state layouts on synthetic data.
  """
  from tffdp import config as config_lib  # pylint: disable=g-import-not-at-top
  from tffdp import evaluation  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n).astype(np.int32)
  out = {}
  for name in models_:
    builder = functools.partial(models.build_keras_model, name, (28, 28, 1), 10)
    ev = evaluation.Evaluator(builder, {'test': (x, y)})
    model = ev.model
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(1000).cache()

    @tf.function
    def by_dataset(ds, model=model):
      loss_sum, correct = tf.constant(0.0), tf.constant(0, tf.int64)
      for xb, yb in ds:
        logits = model(tf.cast(xb, tf.float32) / 255.0, training=False)
        loss_sum += tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
            yb, logits, from_logits=True))
        correct += tf.reduce_sum(tf.cast(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), yb), tf.int64))
      return loss_sum, correct
    weights = collections.namedtuple('W', 'trainable non_trainable')(
        [w.numpy() for w in model.trainable_weights],
        [w.numpy() for w in model.non_trainable_weights])
    ev(weights)
    by_dataset(ds)
    t_new = timeit(lambda: ev(weights), repeats)
    t_old = timeit(lambda: by_dataset(ds)[0].numpy(), repeats)
    out[name] = (t_new, t_old)
    print(f'[eval] {name}, {n:,} examples: Evaluator {1e3 * t_new:.1f} ms, cached tf.data '
          f'pipeline {1e3 * t_old:.1f} ms ({t_old / t_new:.1f}x)', flush=True)
  for method in methods:
    cfg = config_lib.RunConfig(method=method, dataset='synthetic', rounds=2, clients=20,
                               clients_per_round=5, model='logistic_regression',
                               num_validation=100, out=os.path.join(cache, method),
                               client_cache_dir=os.path.join(cache, 'clients'))
    m = runner.build_experiment(cfg, log=lambda s: None).method
    state = m.initialize()
    t_python = timeit(lambda: m.model_weights(state), repeats)
    t_tff = timeit(lambda: m.process.get_model_weights(state), repeats)
    out[method] = (t_python, t_tff)
    print(f'[eval] {method}: model weights read in Python {1e3 * t_python:.3f} ms, by '
          f'get_model_weights (TFF) {1e3 * t_tff:.1f} ms', flush=True)
  return out


SLICE_CASES = ('cosafed/equal_cosafed_N3_eps100_seed0',)


def bench_slices_on_published(data_dir, figures_dir, rounds, runs=SLICE_CASES):
  """A published run's round as recorded (one TFF client per client, each client's
  batches a `tf.data` pipeline) against the same configuration in cohort slices of one
  client (`--clients-per-slice 1`, batches read by index tensors): the median round
  without evaluation of a `rounds`-round probe of each (`costs.probe`)."""
  out = {}
  for run in runs:
    config = costs.find_published(run, figures_dir)
    times = []
    for clients_per_slice in (None, 1):
      with tempfile.TemporaryDirectory() as cache:
        times.append(costs.probe(dict(config, clients_per_slice=clients_per_slice),
                                 data_dir, cache, rounds)['train_seconds'])
    out[run] = tuple(times)
    print(f'[slices] {run}: round {1e3 * times[0]:.1f} ms as recorded, '
          f'{1e3 * times[1]:.1f} ms in slices of one client ({times[0] / times[1]:.2f}x)',
          flush=True)
  return out


AGGREGATION_CASES = (('MLP, MNIST (Fig. 3)', 'mlp', (28, 28, 1)),
                     ('AlexNet-style, MNIST (Fig. 3)', 'alexnet_cnn', (28, 28, 1)),
                     ('AlexNet-style, CIFAR-10 (Fig. 7a)', 'alexnet_cnn', (32, 32, 3)))


def bench_aadp_fl_aggregation(repeats, clients=20, clip_norm=0.3, batch_size=32,
                              cases=AGGREGATION_CASES):
  """AADP-FL's server-side aggregation alone, one round of `clients` updates: longitudinal
  clip (sort, cumulative sum, mask), per-client Gaussian noise (sigma 1, `S / B` per
  coordinate) and the unweighted mean, against the unweighted mean alone.

  In a training round these run inside the one TFF call with the client work, so the
  runner cannot time them apart. Here each is one TFF computation whose client updates are
  drawn inside TFF (a seed per client: no update crosses from Python) and whose only
  output is the norm of the mean (no model-sized value back to Python); the difference is
  what longitudinal clipping and per-client noise add to a round. Models: the MLP and
  AlexNet-style network of Fig. 3 (MNIST) and the AlexNet-style network of Fig. 7a
  (CIFAR-10).
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tffdp import aggregators  # pylint: disable=g-import-not-at-top
  seeds = list(range(clients))
  out = {}
  for label, name, shape in cases:
    shapes = [tuple(w.shape) for w in
              models.build_keras_model(name, shape, 10).trainable_weights]
    value_type = tff.types.StructWithPythonType(
        [tff.types.TensorType(np.float32, s) for s in shapes], list)
    weight = 100.0  # the one key of the sigma table

    @tff.tensorflow.computation(np.int32)
    def draw(seed):  # traced here: the loop's shapes
      return [0.01 * tf.random.stateless_normal(s, seed=tf.stack([seed, i]))
              for i, s in enumerate(shapes)]

    @tff.tensorflow.computation(np.int32)
    def weight_of(seed):
      del seed
      return tf.constant(weight, tf.float32)

    @tff.tensorflow.computation(value_type)
    def norm(values):
      return tf.linalg.global_norm(values)

    aadp = aggregators.longitudinal_clipping_factory(
        aggregators.norm_recording_constant(clip_norm),
        aggregators.PerClientGaussianFactory(
            [weight], [1.0], clip_norm / batch_size,
            tff.aggregators.UnweightedMeanFactory())).create(
                value_type, tff.types.TensorType(np.float32))
    mean = tff.aggregators.UnweightedMeanFactory().create(value_type)
    client_seeds = tff.FederatedType(np.int32, tff.CLIENTS)

    @tff.federated_computation(aadp.next.type_signature.parameter[0], client_seeds)
    def aadp_round(state, seeds):
      values = tff.federated_map(draw, seeds)
      result = aadp.next(state, values, tff.federated_map(weight_of, seeds)).result
      return tff.federated_map(norm, result)

    @tff.federated_computation(mean.next.type_signature.parameter[0], client_seeds)
    def mean_round(state, seeds):
      return tff.federated_map(norm, mean.next(state, tff.federated_map(draw, seeds)).result)

    aadp_state, mean_state = aadp.initialize(), mean.initialize()
    t_aadp = timeit(lambda: aadp_round(aadp_state, seeds), repeats)
    t_mean = timeit(lambda: mean_round(mean_state, seeds), repeats)
    # One client's clip in plain TensorFlow, and the sort inside it.
    update = [0.01 * tf.random.stateless_normal(s, seed=[1, i]) for i, s in enumerate(shapes)]
    norm_s = tf.constant(clip_norm)
    clip = tf.function(lambda v: aggregators.longitudinal_clip(v, norm_s)[0])
    order = tf.function(lambda v: tf.argsort(
        -tf.square(tf.concat([tf.reshape(x, [-1]) for x in v], 0)), stable=True))
    t_clip = timeit(lambda: [x.numpy() for x in clip(update)], repeats)
    t_sort = timeit(lambda: order(update).numpy(), repeats)
    params = sum(int(np.prod(s)) for s in shapes)
    print(f'[aggregate] AADP-FL aggregation, {label}, {params:,} parameters, {clients} '
          f'clients: clip + noise + mean {t_aadp:.3f} s, mean alone {t_mean:.3f} s '
          f'(both with drawing the updates): longitudinal clipping and per-client noise add '
          f'{t_aadp - t_mean:.3f} s a round; one client\'s longitudinal clip '
          f'{1e3 * t_clip:.1f} ms, of which the stable argsort {1e3 * t_sort:.1f} ms',
          flush=True)
    out[label] = (t_aadp, t_mean, t_clip, t_sort)
  return out


def bench_confinement(repeats, cache, rounds=5):
  """Seconds per TFF round with the local worker confined (`tffdp.confined_worker`:
  own network namespace, a Unix-socket relay) and with TFF's own worker, interleaved.

  Two models: the 26k-parameter CNN (10 clients x 78 examples) and the 3.3M-parameter
  A-DPFL CNN (10 clients x 60), whose weights cross the relay several times a round.
  """
  out = {}
  for label, model, per_client, batch in (('Adap DP-FL CNN (26k), 10 x 78', 'adap_dp_fl_cnn',
                                           78, 78),
                                          ('A-DPFL CNN (3.3M), 10 x 60', 'deep_mnist_cnn',
                                           60, 20)):
    clients = 10
    _, _, data, builder = random_clients(model, clients, per_client, cache)
    method = baselines.build_dpfl(builder, data, learning_rate=0.05, batch_size=batch,
                                  noise_multiplier=1.0, clip_norm=4.0)
    round_fn = runner.build_round_computation(method, data)
    args = ([str(i) for i in range(clients)], [np.array([1, i], np.int64)
                                               for i in range(clients)])
    times = {'confined': [], 'open': []}
    for _ in range(repeats):
      for mode in times:
        runtime._set_default_context(  # pylint: disable=protected-access
            runtime._local_context_with(True) if mode == 'confined'  # pylint: disable=protected-access
            else tff.backends.test.create_sync_test_cpp_execution_context())
        state = method.process.initialize()
        state = round_fn(state, *args).state  # warm-up: worker start, tracing
        t = time.perf_counter()
        for _ in range(rounds):
          state = round_fn(state, *args).state
        times[mode].append((time.perf_counter() - t) / rounds)
    med = {k: float(np.median(v)) for k, v in times.items()}
    spread = {k: (min(v), max(v)) for k, v in times.items()}
    print(f'[confinement] {label}: confined {med["confined"]:.3f} s/round '
          f'(range {spread["confined"][0]:.3f}-{spread["confined"][1]:.3f}), TFF\'s own '
          f'worker {med["open"]:.3f} (range {spread["open"][0]:.3f}-{spread["open"][1]:.3f}),'
          f' ratio {med["confined"] / med["open"]:.3f}x ({repeats} interleaved repeats of '
          f'{rounds} rounds)', flush=True)
    out[label] = med
  runtime._set_default_context(  # pylint: disable=protected-access
      tff.backends.test.create_sync_test_cpp_execution_context())
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='python -m benchmarks.run', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--repeats', type=int, default=5)
  p.add_argument('--only', choices=('tff', 'client', 'per_client', 'dpsgd', 'conv', 'adap', 'workers',
                                      'kth', 'eval', 'aggregate', 'figures', 'confinement', 'papers',
                                      'jobs', 'slices'))
  p.add_argument('--data-dir', help='real MNIST (and CIFAR-10 for --figures fig7a) for '
                 'the Adap DP-FL runner and figure benchmarks (the others use synthetic '
                 'data)')
  p.add_argument('--figures', nargs='+', choices=sorted(FIGURE_CASES),
                 default=['fig3', 'fig6'], help='with --only figures: the figures to '
                 'project (default fig3 fig6)')
  p.add_argument('--papers', nargs='+', choices=costs.PAPERS, default=list(costs.PAPERS),
                 help='with --only papers: the papers whose missing probes (with '
                 '--fresh: all their probes) are measured (default all); the table '
                 'always covers every paper, the others from benchmarks/probes.csv')
  p.add_argument('--probe-rounds', type=int, default=3,
                 help='with --only papers or jobs: rounds per probe (>= 2; round 1 '
                 'traces)')
  p.add_argument('--fresh', action='store_true',
                 help='with --only papers: measure the probes of --papers again, keeping '
                 'the other papers\' (default: reuse benchmarks/probes.csv and measure '
                 'only what it lacks)')
  p.add_argument('--slices', action='store_true',
                 help='with --only papers: also probe the runs as --clients-per-slice 1 '
                 'runs them (cohort slices of one client where the method allows it), for '
                 'the table\'s last two columns (default: only the probes.csv has)')
  p.add_argument('--figures-dir', default='figures',
                 help='with --only papers or jobs: the published figures to cost')
  args = p.parse_args(argv)
  if args.probe_rounds < 2:
    p.error(f'--probe-rounds must be at least 2 (round 1 traces); got {args.probe_rounds}')
  print(f'machine: {platform.platform()}, {os.cpu_count()} CPUs; tensorflow {tf.__version__}')
  runtime.use_local_context()
  if args.only in (None, 'dpsgd'):
    for name, model, batch, shape in DPSGD_CASES:
      bench_dpsgd(name, model, batch, args.repeats, shape)
    bench_noise(args.repeats)
    for name, model, batch, shape in DPSGD_CASES:
      bench_dpsgd_profile(name, model, batch, args.repeats, shape)
  if args.only in (None, 'conv'):
    bench_conv_grads(args.repeats)
  if args.only in (None, 'kth'):
    bench_kth_smallest(args.repeats)
  if args.only in (None, 'eval'):
    with tempfile.TemporaryDirectory() as cache:
      bench_evaluation(args.repeats, cache)
  if args.only in (None, 'aggregate'):
    bench_aadp_fl_aggregation(args.repeats)
  if args.only in (None, 'tff'):
    with tempfile.TemporaryDirectory() as cache:
      bench_tff('10 clients x 78-example lot, Adap DP-FL CNN', 'adap_dp_fl_cnn', 10, 78, 78,
                args.repeats, cache, slices=(None, 5, 10))
      bench_tff('100 clients x 60 examples, batch 20, A-DPFL CNN', 'deep_mnist_cnn', 100, 60,
                20, max(2, args.repeats // 2), cache, slices=(None, 10))
  if args.only in (None, 'client'):
    with tempfile.TemporaryDirectory() as cache:
      bench_client_level(args.repeats, cache, '600_examples')  # the speed issue's
      # the benchmark's client-level track (experiments.benchmark.CLIENT): 50 of 1,000
      # clients with 55 examples each (3 steps)
      bench_client_level(args.repeats, cache, '55_examples', clients=1000, per_client=55,
                         cohort=50)
  if args.only in (None, 'per_client'):
    with tempfile.TemporaryDirectory() as cache:
      bench_tff_per_client(args.repeats, cache)
  if args.only in (None, 'workers'):
    with tempfile.TemporaryDirectory() as cache:
      bench_workers(max(2, args.repeats // 2), cache)
  if args.only in (None, 'confinement'):
    with tempfile.TemporaryDirectory() as cache:
      bench_confinement(max(3, args.repeats // 2), cache)
  if args.only in (None, 'adap'):
    with tempfile.TemporaryDirectory() as cache:
      bench_adap_dp_fl(args.repeats, cache)
      if args.data_dir:
        bench_adap_dp_fl_runner(args.data_dir, cache)
  if args.only == 'figures':  # minutes per figure: only when asked for
    if not args.data_dir:
      p.error('--only figures needs --data-dir (real MNIST)')
    with tempfile.TemporaryDirectory() as cache:
      bench_figure_cost(args.data_dir, cache, args.figures)
  lines, code = guard_report()
  for line in lines:
    print(line, flush=True)
  if args.only == 'jobs':  # minutes: only when asked for
    if not args.data_dir:
      p.error('--only jobs needs --data-dir (real MNIST)')
    bench_jobs(args.data_dir, args.figures_dir, args.probe_rounds)
  if args.only == 'slices':  # a minute: only when asked for
    if not args.data_dir:
      p.error('--only slices needs --data-dir (the published runs\' datasets)')
    bench_slices_on_published(args.data_dir, args.figures_dir, max(args.probe_rounds, 10))
  if args.only == 'papers':  # an hour or more: only when asked for
    if not args.data_dir:
      p.error('--only papers needs --data-dir (the papers\' datasets)')
    # The table covers every paper; only --papers' missing (or, --fresh, all) probes are
    # measured, the others' rows come from the probes recorded.
    rows = costs.cost_rows(costs.PAPERS, args.data_dir, args.figures_dir, args.probe_rounds,
                           fresh=args.fresh, slices=args.slices, measure=args.papers)
    print(costs.write_table(rows), flush=True)
  return code


if __name__ == '__main__':
  code = main()
  runtime.shutdown_workers()
  sys.exit(code)
