"""Test configuration: TFF execution context, data directory, worker clean-up."""

import os

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
