"""Nadam as a TFF optimizer, against tf.keras.optimizers.Nadam."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tffdp import optimizers


def test_nadam_matches_keras_on_the_same_pseudo_gradients():
  rng = np.random.default_rng(0)
  w0 = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=4).astype(np.float32)]
  grads = [[rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=4).astype(np.float32)]
           for _ in range(6)]
  keras_vars = [tf.Variable(w) for w in w0]
  keras_opt = tf.keras.optimizers.Nadam(learning_rate=0.01, beta_1=0.9, beta_2=0.999)
  opt = optimizers.build_nadam(0.01)
  state = opt.initialize([tf.TensorSpec(w.shape, tf.float32) for w in w0])
  weights = [tf.constant(w) for w in w0]
  for g in grads:
    keras_opt.apply_gradients(zip([tf.constant(x) for x in g], keras_vars))
    state, weights = opt.next(state, weights, [tf.constant(x) for x in g])
    for ours, theirs in zip(weights, keras_vars):
      np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
  assert int(state['step']) == 6
  assert not np.allclose(weights[0].numpy(), w0[0])  # it moved


def test_nadam_inside_a_tff_finalizer():
  weights_type = tff.types.tensorflow_to_type(tff.learning.models.ModelWeights(
      trainable=[tf.TensorSpec([2], tf.float32)], non_trainable=[]))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      optimizers.build_nadam(0.1), weights_type)
  state = finalizer.initialize()
  weights = tff.learning.models.ModelWeights(trainable=[np.array([1.0, -1.0], np.float32)],
                                             non_trainable=[])
  out = finalizer.next(state, weights, [np.array([1.0, 1.0], np.float32)])
  new = out.result.trainable[0]
  # Nadam's first step moves each coordinate by about lr against the pseudo-gradient's sign.
  np.testing.assert_allclose(new, [1.0 - 0.1, -1.0 - 0.1], atol=0.02)


@pytest.mark.parametrize('kw,name', [(dict(learning_rate=-1.0), 'learning_rate'),
                                     (dict(learning_rate=0.1, beta_1=1.5), 'beta_1'),
                                     (dict(learning_rate=0.1, epsilon=-1e-3), 'epsilon')])
def test_bad_hyperparameters_are_named(kw, name):
  with pytest.raises(ValueError, match=name):
    optimizers.build_nadam(**kw)


def test_hparams_round_trip():
  opt = optimizers.build_nadam(0.01)
  state = opt.initialize([tf.TensorSpec([1], tf.float32)])
  state = opt.set_hparams(state, collections.OrderedDict(learning_rate=0.5))
  assert opt.get_hparams(state)['learning_rate'] == 0.5
  assert set(opt.get_hparams(state)) == {'learning_rate', 'beta_1', 'beta_2', 'epsilon'}
