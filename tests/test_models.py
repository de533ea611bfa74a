import pytest

from tffdp import models

# Parameter counts follow from the layer lists in the specs.
COUNTS = {
    ('deep_mnist_cnn', (28, 28, 1)): 3_274_634,
    ('deep_mnist_cnn', (32, 32, 3)): 4_259_274,
    ('adap_dp_fl_cnn', (28, 28, 1)): 26_010,  # stated in the Adap DP-FL spec
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
