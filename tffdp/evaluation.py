"""Server-side evaluation of the global model on held-out data (plain TensorFlow).

Evaluation reads centrally held data (the validation split and the test set), so it is
not a federated computation: it runs in-process on the global weights each round.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


class Evaluator:
  """Loss and accuracy of weights on fixed `(x, y)` sets.

  Args:
    keras_builder: No-arg callable returning the model (logits out).
    datasets: name -> `(x uint8 [n, h, w, c], y int [n])`.
    batch_size: Evaluation batch size.
  """

  def __init__(self, keras_builder, datasets: dict, batch_size: int = 1000):
    self.model = keras_builder()
    self._data = {
        name: tf.data.Dataset.from_tensor_slices(
            (x, np.asarray(y, np.int32))).batch(batch_size).cache()
        for name, (x, y) in datasets.items()}
    model = self.model

    @tf.function
    def evaluate(ds):
      loss_sum = tf.constant(0.0)
      correct = tf.constant(0, tf.int64)
      n = tf.constant(0, tf.int64)
      for xb, yb in ds:
        logits = model(tf.cast(xb, tf.float32) / 255.0, training=False)
        loss_sum += tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
            yb, logits, from_logits=True))
        correct += tf.reduce_sum(tf.cast(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), yb), tf.int64))
        n += tf.cast(tf.shape(yb)[0], tf.int64)
      n = tf.cast(n, tf.float32)
      return loss_sum / n, tf.cast(correct, tf.float32) / n
    self._evaluate = evaluate

  def __call__(self, weights, names=None) -> dict:
    """Returns `{f'{name}_loss', f'{name}_accuracy'}` for each named set."""
    self.model.set_weights(list(weights.trainable) + list(weights.non_trainable))
    out = {}
    for name in names or self._data:
      loss, acc = self._evaluate(self._data[name])
      out[f'{name}_loss'] = float(loss)
      out[f'{name}_accuracy'] = float(acc)
    return out
