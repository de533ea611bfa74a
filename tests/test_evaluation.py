"""Tests of `tffdp.evaluation.Evaluator` against a NumPy reference."""

import numpy as np
import pytest
import tensorflow as tf

from tffdp import evaluation, models


def _builder():
  return models.build_keras_model('mlp', (28, 28, 1), 10)


def _reference(model, x, y):
  logits = model(tf.cast(x, tf.float32) / 255.0, training=False).numpy().astype(np.float64)
  logz = np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1)) + logits.max(-1)
  loss = np.mean(logz - logits[np.arange(len(y)), y])
  return loss, np.mean(np.argmax(logits, -1) == y)


class _Weights:

  def __init__(self, model):
    self.trainable = [w.numpy() for w in model.trainable_weights]
    self.non_trainable = [w.numpy() for w in model.non_trainable_weights]


@pytest.mark.parametrize('n', [2503, 2000, 7])
def test_loss_and_accuracy_match_numpy_over_full_and_partial_batches(n):
  rng = np.random.default_rng(n)
  x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, n)
  source = _builder()
  ev = evaluation.Evaluator(_builder, {'test': (x, y), 'small': (x[:3], y[:3])},
                            batch_size=1000)
  out = ev(_Weights(source))
  for name, (xs, ys) in (('test', (x, y)), ('small', (x[:3], y[:3]))):
    loss, acc = _reference(source, xs, ys)
    assert out[f'{name}_loss'] == pytest.approx(loss, rel=1e-5)
    assert out[f'{name}_accuracy'] == pytest.approx(acc, abs=1e-7)
  assert ev(_Weights(source), names=['small']).keys() == {'small_loss', 'small_accuracy'}


def test_new_weights_are_loaded_each_call():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, (50, 28, 28, 1), dtype=np.uint8)
  y = rng.integers(0, 10, 50)
  ev = evaluation.Evaluator(_builder, {'test': (x, y)}, batch_size=16)
  a, b = _builder(), _builder()
  assert ev(_Weights(a))['test_loss'] == pytest.approx(_reference(a, x, y)[0], rel=1e-5)
  assert ev(_Weights(b))['test_loss'] == pytest.approx(_reference(b, x, y)[0], rel=1e-5)


def test_a_non_positive_batch_size_raises():
  x = np.zeros((5, 28, 28, 1), np.uint8)
  with pytest.raises(ValueError, match='batch_size must be positive'):
    evaluation.Evaluator(_builder, {'test': (x, np.zeros(5, int))}, batch_size=0)


def test_an_empty_set_gives_nan():  # a run without a validation split (num_validation 0)
  x = np.zeros((5, 28, 28, 1), np.uint8)
  ev = evaluation.Evaluator(_builder, {'test': (x, np.zeros(5, int)),
                                      'validation': (x[:0], np.zeros(0, int))})
  out = ev(_Weights(_builder()))
  assert np.isnan(out['validation_loss']) and np.isnan(out['validation_accuracy'])
  assert np.isfinite(out['test_loss']) and out['test_accuracy'] >= 0
