"""Test configuration: TFF execution context, data directory, worker clean-up."""

import os
import sys

import pytest

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from tffdp import runtime  # pylint: disable=g-import-not-at-top

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
  del config
  # Under pytest no __main__ sets a context: set TFF's standard local context here.
  runtime.use_local_context()


def pytest_unconfigure(config):
  del config
  runtime.shutdown_workers()


@pytest.fixture(scope='session')
def data_dir():
  """Directory with verified MNIST/Fashion-MNIST/CIFAR-10 copies (TFFDP_DATA_DIR)."""
  d = os.environ.get('TFFDP_DATA_DIR') or os.path.join(_HERE, '..', '..', 'shared', 'datasets')
  if not os.path.isdir(os.path.join(d, 'mnist')):
    pytest.skip(f'no MNIST copy in {d}: set TFFDP_DATA_DIR')
  return os.path.abspath(d)  # tests build file:// URLs from it


class Interrupted(KeyboardInterrupt):
  """Raised by the `interrupt_at` fixture's log: a Ctrl-C at a chosen round."""


@pytest.fixture(scope='session')
def interrupt_at():
  """`round -> log`: a `log` for `runner.run` that raises `Interrupted` (a
  KeyboardInterrupt, as Ctrl-C would) at the progress line of that round, so the run
  saves its checkpoint and stops. Catch it with `pytest.raises(KeyboardInterrupt)`."""
  def make(round_num: int):
    def log(line):
      if line.startswith(f'round {round_num}/'):
        raise Interrupted()
    return log
  return make


@pytest.fixture(scope='session')
def full_batch_delta():
  """`(model, weights, x uint8, y, lr) -> [initial - trained]` after one full-batch SGD step.

  The reference of the exact zero-noise round tests: a client whose batch holds all its
  examples takes one step of `lr` times the mean cross-entropy gradient.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def delta(model, weights, x, y, learning_rate):
    for v, w in zip(model.trainable_variables, weights):
      v.assign(w)
    xs = np.asarray(x).astype(np.float32) / 255.0
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
          y, model(xs), from_logits=True))
    return [learning_rate * g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
  return delta


@pytest.fixture(autouse=True)
def _command_line_globals():
  """After each test, `experiments.common`'s command-line globals (`JOBS`,
  `CLIENTS_PER_SLICE`, set by `ArgumentParser.parse_args`) back to their unparsed values,
  so a test that parsed a command line does not change how later tests' `run_all` runs."""
  yield
  module = sys.modules.get('experiments.common')
  if module is not None:
    module.JOBS, module.CLIENTS_PER_SLICE = 1, None
