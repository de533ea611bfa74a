import pytest

from tffdp import models

# Parameter counts follow from the layer lists in the specs.
COUNTS = {
    ('deep_mnist_cnn', (28, 28, 1)): 3_274_634,
    ('deep_mnist_cnn', (32, 32, 3)): 4_259_274,
    ('adap_dp_fl_cnn', (28, 28, 1)): 26_010,  # stated in the Adap DP-FL spec
    ('adap_dp_fl_cnn_torch', (28, 28, 1)): 26_010,  # pad 2: the same shapes after conv 1
    ('mlp', (28, 28, 1)): 159_010,
    ('mcmahan_cnn', (28, 28, 1)): 1_663_370,  # McMahan et al. 2017 CNN
    ('lenet_cnn', (32, 32, 3)): 62_006,
    ('fl_mnist_cnn', (28, 28, 1)): 21_840,  # CNNMnist: 260 + 5,020 + 16,050 + 510
    ('alexnet_cnn', (32, 32, 3)): 478_154,
    ('logistic_regression', (28, 28, 1)): 7_850,
    ('dp_fedags_cifar_cnn', (32, 32, 3)): 2_168_362,
}


@pytest.mark.parametrize('name,shape', list(COUNTS))
def test_parameter_counts(name, shape):
  assert models.count_params(name, shape, 10) == COUNTS[(name, shape)]


def test_every_model_pinned():
  assert {n for n, _ in COUNTS} == set(models.MODELS)


def test_tff_model_fn_and_unknown():
  model = models.make_model_fn('logistic_regression', (28, 28, 1), 10)()
  assert len(model.trainable_variables) == 2
  with pytest.raises(ValueError, match='mlp'):
    models.build_keras_model('resnet', (28, 28, 1), 10)


def test_the_torch_style_cnn_draws_pytorch_s_default_initialisation():
  import numpy as np  # pylint: disable=g-import-not-at-top
  model = models.build_keras_model('adap_dp_fl_cnn_torch', (28, 28, 1), 10, seed=0)
  for layer, fan_in in zip([l for l in model.layers if l.weights], (64, 256, 512, 32)):
    bound = fan_in ** -0.5
    for w in (layer.kernel.numpy(), layer.bias.numpy()):
      assert np.abs(w).max() <= bound
      if w.size >= 100:   # uniform on [-bound, bound]: std bound / sqrt(3)
        assert np.std(w) == pytest.approx(bound / 3 ** 0.5, rel=0.1)
    assert np.any(layer.bias.numpy() != 0)
  assert [l.output_shape[1:] for l in model.layers][:2] == [(32, 32, 1), (13, 13, 16)]
