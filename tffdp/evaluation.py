"""Server-side evaluation of the global model on held-out data (plain TensorFlow).

Evaluation reads centrally held data (the validation split and the test set), so it is
not a federated computation: it runs in-process on the global weights each round.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


class Evaluator:
  """Loss and accuracy of weights on fixed `(x, y)` sets.

  Each set is held as constant tensors cut into batches of `batch_size` (and one last
  smaller batch), which one `tf.function` loops over in order. Iterating a cached
  `tf.data` pipeline of the same batches inside the function took 2.6-4.8x longer on
  the small models (`python -m benchmarks.run --only eval`; benchmarks/README.md); the
  batches and their order are unchanged, the losses can differ from it at float32
  rounding (another kernel for a batch of static shape).

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    datasets: name -> `(x uint8 [n, h, w, c], y int [n])`.
    batch_size: Evaluation batch size.

  Raises:
    ValueError: If `batch_size` is not positive.
  """

  def __init__(self, keras_builder, datasets: dict, batch_size: int = 1000):
    if batch_size < 1:
      raise ValueError(f'batch_size must be positive. Found {batch_size!r}.')
    self.model = keras_builder()
    self._data = {}
    for name, (x, y) in datasets.items():
      x, y = np.asarray(x), np.asarray(y, np.int32)
      full = len(y) // batch_size * batch_size
      self._data[name] = (  # ([batches, batch_size, ...], [rest, ...]), likewise y
          tf.constant(x[:full].reshape(-1, batch_size, *x.shape[1:])),
          tf.constant(y[:full].reshape(-1, batch_size)),
          tf.constant(x[full:]), tf.constant(y[full:]))
    model = self.model

    def batch_sums(xb, yb):
      logits = model(tf.cast(xb, tf.float32) / 255.0, training=False)
      loss = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
          yb, logits, from_logits=True))
      correct = tf.reduce_sum(tf.cast(
          tf.equal(tf.argmax(logits, -1, output_type=tf.int32), yb), tf.int64))
      return loss, correct

    image = [None] * (len(next(iter(datasets.values()))[0].shape) - 1)

    @tf.function(input_signature=[
        tf.TensorSpec([None, batch_size, *image], tf.uint8),
        tf.TensorSpec([None, batch_size], tf.int32),
        tf.TensorSpec([None, *image], tf.uint8), tf.TensorSpec([None], tf.int32)])
    def evaluate(xs, ys, x_rest, y_rest):
      loss_sum = tf.constant(0.0)
      correct = tf.constant(0, tf.int64)
      for i in tf.range(tf.shape(ys)[0]):
        loss, right = batch_sums(xs[i], ys[i])
        loss_sum += loss
        correct += right
      if tf.shape(y_rest)[0] > 0:
        loss, right = batch_sums(x_rest, y_rest)
        loss_sum += loss
        correct += right
      n = tf.cast(tf.size(ys) + tf.size(y_rest), tf.float32)
      return loss_sum / n, tf.cast(correct, tf.float32) / n
    self._evaluate = evaluate

  def __call__(self, weights, names=None) -> dict:
    """Returns `{f'{name}_loss', f'{name}_accuracy'}` (floats; NaN for an empty set, e.g.
    a run without a validation split) for each named set.

    Args:
      weights: `tff.learning.models.ModelWeights` (or any object with `trainable` and
        `non_trainable` lists of arrays) of the model `keras_builder` returns.
      names: The sets to evaluate; None: all.
    """
    self.model.set_weights(list(weights.trainable) + list(weights.non_trainable))
    out = {}
    for name in names or self._data:
      loss, acc = self._evaluate(*self._data[name])
      out[f'{name}_loss'] = float(loss)
      out[f'{name}_accuracy'] = float(acc)
    return out
