import gzip
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest

from tffdp.data import loaders


def test_mnist_from_data_dir(data_dir):
  ds = loaders.load_dataset('mnist', data_dir, download=False)
  assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_train.dtype == np.uint8
  assert ds.y_train.shape == (60000,) and ds.y_train.dtype == np.int32
  assert ds.x_test.shape == (10000, 28, 28, 1)
  np.testing.assert_array_equal(np.bincount(ds.y_test), [980, 1135, 1032, 1010, 982, 892,
                                                          958, 1028, 974, 1009])


def test_fashion_mnist_and_cifar10_npz(data_dir):
  ds = loaders.load_dataset('fashion_mnist', data_dir, download=False)
  assert np.all(np.bincount(ds.y_train) == 6000)
  if not os.path.exists(os.path.join(data_dir, 'cifar10', 'cifar10.npz')):
    pytest.skip('no cifar10.npz')
  ds = loaders.load_dataset('cifar10', data_dir, download=False)
  assert ds.x_train.shape == (50000, 32, 32, 3) and ds.y_test.shape == (10000,)
  assert np.all(np.bincount(ds.y_train) == 5000)


def test_missing_data_message(tmp_path):
  with pytest.raises(loaders.DataNotFoundError) as e:
    loaders.load_dataset('mnist', str(tmp_path), download=False)
  msg = str(e.value)
  assert 'train-images-idx3-ubyte.gz' in msg and str(tmp_path) in msg and '--data-dir' in msg


def test_checksum_mismatch_names_file(tmp_path, data_dir):
  shutil.copytree(os.path.join(data_dir, 'mnist'), tmp_path / 'mnist')
  bad = tmp_path / 'mnist' / 't10k-labels-idx1-ubyte.gz'
  os.chmod(bad, 0o644)
  with open(bad, 'ab') as f:
    f.write(b'x')
  with pytest.raises(loaders.ChecksumError, match='t10k-labels-idx1-ubyte.gz'):
    loaders.load_dataset('mnist', str(tmp_path), download=False)


def test_download_from_mirror(tmp_path, data_dir, monkeypatch):
  monkeypatch.setenv('TFFDP_DATA_URL_MNIST', 'file://' + os.path.join(data_dir, 'mnist'))
  ds = loaders.load_dataset('mnist', str(tmp_path / 'cache'), download=True)
  assert ds.x_train.shape[0] == 60000
  assert sorted(os.listdir(tmp_path / 'cache' / 'mnist')) == sorted(loaders._IDX_FILES)


def test_download_checksum_failure_leaves_nothing(tmp_path, data_dir, monkeypatch):
  mirror = tmp_path / 'mirror'
  shutil.copytree(os.path.join(data_dir, 'mnist'), mirror)
  os.chmod(mirror / 'train-labels-idx1-ubyte.gz', 0o644)
  with open(mirror / 'train-labels-idx1-ubyte.gz', 'ab') as f:
    f.write(b'tampered')
  monkeypatch.setenv('TFFDP_DATA_URL_MNIST', f'file://{mirror}')
  with pytest.raises(loaders.ChecksumError, match='train-labels'):
    loaders.load_dataset('mnist', str(tmp_path / 'cache'), download=True)
  assert not os.path.exists(tmp_path / 'cache' / 'mnist' / 'train-labels-idx1-ubyte.gz')


def _write_cifar(root, name, n_per_batch=6):
  """Writes small files in the official python-pickle layout."""
  rng = np.random.default_rng(0)
  sub, train, test, key = loaders._cifar_members(name)
  folder = root / sub
  folder.mkdir(parents=True)
  expected = {}
  for f in train + test:
    data = rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8)
    labels = list(rng.integers(0, 10 if name == 'cifar10' else 100, n_per_batch))
    with open(folder / f, 'wb') as fh:
      pickle.dump({b'data': data, key: labels}, fh)
    expected[f] = (data, labels)
  return folder, train, test, expected


@pytest.mark.parametrize('name', ['cifar10', 'cifar100'])
def test_cifar_extracted_folder_and_tarball(tmp_path, name, monkeypatch):
  ddir = tmp_path / 'data'
  folder, train, test, expected = _write_cifar(ddir / name, name)
  ds = loaders.load_dataset(name, str(ddir), download=False)
  assert ds.x_train.shape == (6 * len(train), 32, 32, 3)
  first = expected[train[0]][0][0].reshape(3, 32, 32).transpose(1, 2, 0)
  np.testing.assert_array_equal(ds.x_train[0], first)
  assert list(ds.y_test) == [int(v) for v in expected[test[0]][1]]
  # The same files as the official tarball (checksum patched for the test file).
  tar_name = 'cifar-10-python.tar.gz' if name == 'cifar10' else 'cifar-100-python.tar.gz'
  tdir = tmp_path / 'tar' / name
  tdir.mkdir(parents=True)
  with tarfile.open(tdir / tar_name, 'w:gz') as tar:
    tar.add(folder, arcname=folder.name)
  monkeypatch.setitem(loaders._MD5[name], tar_name, loaders.md5_of(str(tdir / tar_name)))
  ds2 = loaders.load_dataset(name, str(tmp_path / 'tar'), download=False)
  np.testing.assert_array_equal(ds.x_train, ds2.x_train)
  np.testing.assert_array_equal(ds.y_test, ds2.y_test)
  monkeypatch.setitem(loaders._MD5[name], tar_name, '0' * 32)
  with pytest.raises(loaders.ChecksumError, match=tar_name):
    loaders.load_dataset(name, str(tmp_path / 'tar'), download=False)


def test_unknown_dataset_and_validation_split():
  with pytest.raises(ValueError, match='fashion_mnist'):
    loaders.load_dataset('svhn')
  y = np.arange(100)
  tr, va = loaders.train_validation_split(None, y, 10, seed=1)
  assert len(va) == 10 and len(tr) == 90 and not set(tr) & set(va)
  tr2, va2 = loaders.train_validation_split(None, y, 10, seed=1)
  np.testing.assert_array_equal(va, va2)
  with pytest.raises(ValueError, match='num_validation'):
    loaders.train_validation_split(None, y, 100)


def test_synthetic_dataset_is_generated_deterministic_and_learnable():
  from tffdp.data.loaders import load_dataset, synthetic_dataset  # pylint: disable=g-import-not-at-top
  ds = load_dataset('synthetic', data_dir='/nonexistent')  # no files read
  assert ds.x_train.shape == (6000, 28, 28, 1) and ds.x_train.dtype == np.uint8
  assert ds.x_test.shape == (1000, 28, 28, 1) and ds.num_classes == 10
  np.testing.assert_array_equal(np.bincount(ds.y_train), [600] * 10)
  np.testing.assert_array_equal(ds.x_train, synthetic_dataset().x_train)
  # Nearest class mean (from the training set) classifies the test set almost perfectly.
  means = np.stack([ds.x_train[ds.y_train == c].reshape(-1, 784).mean(0) for c in range(10)])
  d = ((ds.x_test.reshape(-1, 1, 784).astype(float) - means[None]) ** 2).sum(-1)
  assert np.mean(np.argmin(d, 1) == ds.y_test) > 0.95


def test_two_writers_of_one_client_cache_both_succeed(tmp_path):
  """Two runs of one partition started together write the same client files side by side
  (each through a temporary file of its own), and both read the same examples."""
  import threading  # pylint: disable=g-import-not-at-top
  from tffdp.data.federated import FederatedData  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.integers(0, 256, size=(4000, 8, 8, 1), dtype=np.uint8)
  y = rng.integers(0, 10, size=4000)
  parts = np.array_split(rng.permutation(4000), 40)
  built, errors = [], []

  def build():
    try:
      built.append(FederatedData(x, y, parts, cache_dir=str(tmp_path)))
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)
  threads = [threading.Thread(target=build) for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors and len(built) == 4
  directory = built[0].directory
  assert not [f for f in os.listdir(directory) if f.endswith('.tmp')]
  for cid, idx in zip(built[0].client_ids, parts):
    with open(os.path.join(directory, f'{cid}.x'), 'rb') as f:
      assert f.read() == np.ascontiguousarray(x[idx]).tobytes()


def test_cifar_batches_are_unpickled_as_data_only(tmp_path):
  batch = {b'data': np.arange(12, dtype=np.uint8).reshape(1, 12), b'labels': [3],
           b'batch_label': b'x'}
  for protocol in (2, 4):
    path = tmp_path / f'b{protocol}'
    path.write_bytes(pickle.dumps(batch, protocol=protocol))
    with open(path, 'rb') as f:
      back = loaders._unpickle(f)  # pylint: disable=protected-access
    np.testing.assert_array_equal(back[b'data'], batch[b'data'])
    assert back[b'labels'] == [3]

  class Payload:
    def __reduce__(self):
      return (os.system, ('touch ' + str(tmp_path / 'pwned'),))
  path = tmp_path / 'evil'
  path.write_bytes(pickle.dumps({b'data': Payload()}))
  with open(path, 'rb') as f, pytest.raises(pickle.UnpicklingError, match='refusing'):
    loaders._unpickle(f)  # pylint: disable=protected-access
  assert not (tmp_path / 'pwned').exists()
