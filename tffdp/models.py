"""The networks the five method papers name, as Keras builders and TFF `model_fn`s.

Every builder maps `(input_shape, num_classes)` to an uncompiled `tf.keras.Model` whose
output is logits (`float32 [batch, num_classes]`); inputs are `float32
[batch, *input_shape]` in `[0, 1]`.

| name | source | layers |
|---|---|---|
| `deep_mnist_cnn` | A-DPFL Sec. 6.1 (spec reading: TF "Deep MNIST") | conv5x5x32 same, pool2, conv5x5x64 same, pool2, dense 1024, dense C |
| `adap_dp_fl_cnn` | Adap DP-FL Sec. V-A (Opacus MNIST CNN) | conv16 k8 s2 pad3, pool2 s1, conv32 k4 s2, pool2 s1, dense 32, dense C (26,010 params) |
| `adap_dp_fl_cnn_torch` | the same CNN as the Adap DP-FL author's public PyTorch code writes it (`JeffffffFu/Awesome-Differential-Privacy-and-Meachine-Learning`, `model/CNN.py`) | as `adap_dp_fl_cnn` with pad 2, and PyTorch's default initialisation (weights and biases `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`) |
| `mlp` | AADP-FL Sec. 6 | dense 200, dense C |
| `mcmahan_cnn` | AADP-FL, DP-FedAGS MNIST (McMahan et al. 2017) | conv5x5x32 same, pool2, conv5x5x64 same, pool2, dense 512, dense C |
| `fl_mnist_cnn` | AADP-FL MNIST CNN (the `CNNMnist` of the PyTorch FL code whose MLP, MNIST CNN and CIFAR CNN match the paper's three descriptions) | conv5x5x10, pool2, conv5x5x20, pool2, dense 50, dense C (21,840 params; its dropout omitted) |
| `lenet_cnn` | AADP-FL CIFAR-10 (LeNet-5 style) | conv5x5x6, pool2, conv5x5x16, pool2, dense 120, 84, C |
| `alexnet_cnn` | AADP-FL (AlexNet-style, widths not given) | conv3x3 32, pool, conv3x3 64, pool, conv3x3 96, 96, 64, pool, dense 256, dense C |
| `logistic_regression` | cosAFed Sec. 5 | dense C on flattened input |
| `dp_fedags_cifar_cnn` | DP-FedAGS CIFAR (spec reading) | conv3x3 32, 32, pool2, conv3x3 64, 64, pool2, dense 512, dense C |
"""

from __future__ import annotations

import collections
from typing import Callable

import tensorflow as tf
import tensorflow_federated as tff

layers = tf.keras.layers


def _seq(input_shape, body) -> tf.keras.Model:
  return tf.keras.Sequential([tf.keras.Input(shape=input_shape)] + body)


def _two_conv_cnn(input_shape, num_classes, dense_units) -> tf.keras.Model:
  """conv5x5x32 same, pool2, conv5x5x64 same, pool2, dense `dense_units`, dense C."""
  return _seq(input_shape, [
      layers.Conv2D(32, 5, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(64, 5, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Flatten(),
      layers.Dense(dense_units, activation='relu'),
      layers.Dense(num_classes),
  ])


def deep_mnist_cnn(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  return _two_conv_cnn(input_shape, num_classes, 1024)


def adap_dp_fl_cnn(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  return _seq(input_shape, [
      layers.ZeroPadding2D(3),
      layers.Conv2D(16, 8, strides=2, activation='relu'),
      layers.MaxPool2D(2, strides=1),
      layers.Conv2D(32, 4, strides=2, activation='relu'),
      layers.MaxPool2D(2, strides=1),
      layers.Flatten(),
      layers.Dense(32, activation='relu'),
      layers.Dense(num_classes),
  ])


def _torch_init(fan_in: int) -> dict:
  """PyTorch's default `Conv2d` / `Linear` initialisation: kernel (kaiming uniform, a =
  sqrt(5)) and bias both `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`."""
  bound = fan_in ** -0.5
  return dict(kernel_initializer=tf.keras.initializers.VarianceScaling(
                  1.0 / 3.0, 'fan_in', 'uniform'),
              bias_initializer=tf.keras.initializers.RandomUniform(-bound, bound))


def adap_dp_fl_cnn_torch(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  """`adap_dp_fl_cnn` as the author's PyTorch code builds it: `Conv2d(1, 16, 8, 2,
  padding=2)` (the same output shapes and 26,010 weights) and PyTorch's initialisation."""
  channels = input_shape[-1]
  return _seq(input_shape, [
      layers.ZeroPadding2D(2),
      layers.Conv2D(16, 8, strides=2, activation='relu', **_torch_init(channels * 64)),
      layers.MaxPool2D(2, strides=1),
      layers.Conv2D(32, 4, strides=2, activation='relu', **_torch_init(16 * 16)),
      layers.MaxPool2D(2, strides=1),
      layers.Flatten(),
      layers.Dense(32, activation='relu', **_torch_init(32 * 4 * 4)),
      layers.Dense(num_classes, **_torch_init(32)),
  ])


def mlp(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  return _seq(input_shape, [
      layers.Flatten(),
      layers.Dense(200, activation='relu'),
      layers.Dense(num_classes),
  ])


def mcmahan_cnn(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  return _two_conv_cnn(input_shape, num_classes, 512)


def fl_mnist_cnn(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  """Two 5x5 conv + two dense layers (10, 20 filters; 50 units): 21,840 parameters on MNIST.

  AADP-FL Sec. 6 describes its MNIST CNN as "two convolutional layers and two fully
  connected layers (each filter size is 5x5)", its MLP as two dense layers and its CIFAR-10
  CNN as having three dense layers, with no widths. Those three descriptions match the
  `MLP` (200 hidden), `CNNMnist` and `CNNCifar` of the widely used PyTorch FL code
  (github.com/shaoxiongji/federated-learning, `models/Nets.py`); `lenet_cnn` is its
  `CNNCifar` and this is its `CNNMnist`, without the dropout (tffdp's `mlp` omits it too).
  ReLU after each pooling (as there; max-pooling and ReLU commute).
  """
  return _seq(input_shape, [
      layers.Conv2D(10, 5),
      layers.MaxPool2D(2),
      layers.ReLU(),
      layers.Conv2D(20, 5),
      layers.MaxPool2D(2),
      layers.ReLU(),
      layers.Flatten(),
      layers.Dense(50, activation='relu'),
      layers.Dense(num_classes),
  ])


def lenet_cnn(input_shape=(32, 32, 3), num_classes=10) -> tf.keras.Model:
  return _seq(input_shape, [
      layers.Conv2D(6, 5, activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(16, 5, activation='relu'),
      layers.MaxPool2D(2),
      layers.Flatten(),
      layers.Dense(120, activation='relu'),
      layers.Dense(84, activation='relu'),
      layers.Dense(num_classes),
  ])


def alexnet_cnn(input_shape=(32, 32, 3), num_classes=10) -> tf.keras.Model:
  """AlexNet-style: 5 conv + 2 dense, widths chosen by tffdp (the paper gives none)."""
  return _seq(input_shape, [
      layers.Conv2D(32, 3, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(64, 3, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(96, 3, padding='same', activation='relu'),
      layers.Conv2D(96, 3, padding='same', activation='relu'),
      layers.Conv2D(64, 3, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Flatten(),
      layers.Dense(256, activation='relu'),
      layers.Dense(num_classes),
  ])


def logistic_regression(input_shape=(28, 28, 1), num_classes=10) -> tf.keras.Model:
  return _seq(input_shape, [layers.Flatten(), layers.Dense(num_classes)])


def dp_fedags_cifar_cnn(input_shape=(32, 32, 3), num_classes=10) -> tf.keras.Model:
  return _seq(input_shape, [
      layers.Conv2D(32, 3, padding='same', activation='relu'),
      layers.Conv2D(32, 3, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Conv2D(64, 3, padding='same', activation='relu'),
      layers.Conv2D(64, 3, padding='same', activation='relu'),
      layers.MaxPool2D(2),
      layers.Flatten(),
      layers.Dense(512, activation='relu'),
      layers.Dense(num_classes),
  ])


MODELS: dict[str, Callable[..., tf.keras.Model]] = {
    'deep_mnist_cnn': deep_mnist_cnn,
    'adap_dp_fl_cnn': adap_dp_fl_cnn,
    'adap_dp_fl_cnn_torch': adap_dp_fl_cnn_torch,
    'mlp': mlp,
    'mcmahan_cnn': mcmahan_cnn,
    'lenet_cnn': lenet_cnn,
    'fl_mnist_cnn': fl_mnist_cnn,
    'alexnet_cnn': alexnet_cnn,
    'logistic_regression': logistic_regression,
    'dp_fedags_cifar_cnn': dp_fedags_cifar_cnn,
}


def build_keras_model(name: str, input_shape, num_classes: int,
                      seed: int | None = None) -> tf.keras.Model:
  """Builds `MODELS[name]`; with `seed`, the initial weights are deterministic.

  Raises:
    ValueError: If `name` is unknown (the message lists the valid names).
  """
  if name not in MODELS:
    raise ValueError(f'Unknown model {name!r}. Valid models: {", ".join(MODELS)}.')
  if seed is not None:
    tf.keras.utils.set_random_seed(seed)
  return MODELS[name](tuple(input_shape), num_classes)


def count_params(name: str, input_shape, num_classes: int) -> int:
  return int(build_keras_model(name, input_shape, num_classes).count_params())


def input_spec(input_shape) -> collections.OrderedDict:
  """Element spec of a batched client dataset: `x` float32, `y` int32."""
  return collections.OrderedDict(
      x=tf.TensorSpec([None, *input_shape], tf.float32),
      y=tf.TensorSpec([None], tf.int32))


def make_model_fn(name: str, input_shape, num_classes: int
                  ) -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF `model_fn`: no-arg callable returning a `tff.learning.models.VariableModel`.

  The model's loss is sparse categorical cross-entropy on logits, metric accuracy.
  """
  def model_fn():
    return tff.learning.models.from_keras_model(
        build_keras_model(name, input_shape, num_classes),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec(input_shape),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  return model_fn
