"""Loaders for MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from a data directory.

Every loader returns a `Dataset` of NumPy arrays in the layout of
`tf.keras.datasets.*.load_data()` with labels squeezed: images `uint8` of shape
`[n, height, width, channels]`, labels `int32` of shape `[n]`. Scaling to `[0, 1]`
float32 happens when client datasets are built (`tffdp.data.federated`).

The data directory is resolved as: the `data_dir` argument, else the
`TFFDP_DATA_DIR` environment variable, else a user cache directory
(`$XDG_CACHE_HOME/tffdp/datasets`, default `~/.cache/tffdp/datasets`). Each dataset
lives in a sub-folder named after it (`mnist/`, `fashion_mnist/`, `cifar10/`,
`cifar100/`). Every official file is checked against its published MD5 before use.
When files are missing and `download=True`, the official files are downloaded into the
directory (checksummed); the mirror can be overridden with `TFFDP_DATA_URL_<NAME>`
(e.g. a `file://` URL in tests).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import os
import pickle
import shutil
import tarfile
import tempfile
import urllib.request
from typing import Callable, Optional

import numpy as np


class DataError(RuntimeError):
  """Raised when a dataset cannot be found, verified or parsed."""


class DataNotFoundError(DataError, FileNotFoundError):
  """Raised when a dataset's files are not in the data directory (and no download)."""


class ChecksumError(DataError):
  """Raised when a file's checksum differs from the official one."""


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A centrally held image-classification dataset.

  Attributes:
    name: Dataset name (`mnist`, `fashion_mnist`, `cifar10`, `cifar100`, `synthetic`).
    x_train: `uint8` array `[n_train, h, w, c]`.
    y_train: `int32` array `[n_train]`.
    x_test: `uint8` array `[n_test, h, w, c]`.
    y_test: `int32` array `[n_test]`.
    num_classes: Number of labels.
    source: Description of the files the arrays were read from.
  """
  name: str
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int
  source: str

  @property
  def input_shape(self) -> tuple[int, ...]:
    return tuple(self.x_train.shape[1:])


# Official MD5 checksums (as published by the dataset authors / keras.datasets).
_IDX_FILES = (
    'train-images-idx3-ubyte.gz',
    'train-labels-idx1-ubyte.gz',
    't10k-images-idx3-ubyte.gz',
    't10k-labels-idx1-ubyte.gz',
)
_MD5 = {
    'mnist': {
        'train-images-idx3-ubyte.gz': 'f68b3c2dcbeaaa9fbdd348bbdeb94873',
        'train-labels-idx1-ubyte.gz': 'd53e105ee54ea40749a09fcbcd1e9432',
        't10k-images-idx3-ubyte.gz': '9fb629c4189551a2d022fa330f9573f3',
        't10k-labels-idx1-ubyte.gz': 'ec29112dd5afa0611ce80d1b7f02629c',
    },
    'fashion_mnist': {
        'train-images-idx3-ubyte.gz': '8d4fb7e6c68d591d4c3dfef9ec88bf0d',
        'train-labels-idx1-ubyte.gz': '25c81989df183df01b3e8a0aad5dffbe',
        't10k-images-idx3-ubyte.gz': 'bef4ecab320f06d8554ea6380940ec79',
        't10k-labels-idx1-ubyte.gz': 'bb300cfdad3c16e7a12a480ee83cd310',
    },
    'cifar10': {
        'cifar-10-python.tar.gz': 'c58f30108f718f92721af3b95e74349a',
        # The keras.datasets layout (x_train, y_train, x_test, y_test) of the official
        # images, checked against the official per-class counts and channel statistics.
        'cifar10.npz': '5eb95f74495daa0b99e0b592d81f7db1',
    },
    'cifar100': {
        'cifar-100-python.tar.gz': 'eb9058c3a382ffc7106e4002c42a8d85',
    },
}
_DEFAULT_URLS = {
    'mnist': 'https://storage.googleapis.com/cvdf-datasets/mnist/',
    'fashion_mnist': 'https://fashion-mnist.s3-website.eu-central-1.amazonaws.com/',
    'cifar10': 'https://www.cs.toronto.edu/~kriz/',
    'cifar100': 'https://www.cs.toronto.edu/~kriz/',
}
_NUM_CLASSES = {'mnist': 10, 'fashion_mnist': 10, 'cifar10': 10, 'cifar100': 100,
                'synthetic': 10}
DATASETS = tuple(_NUM_CLASSES)


def synthetic_dataset(num_train: int = 6000, num_test: int = 1000, seed: int = 0) -> Dataset:
  """A generated MNIST-shaped dataset for tests and smoke runs (no files, no download).

  Each of the 10 classes has a fixed random 28x28 template; an example is its class's
  template (0-159) plus uniform noise (0-95), so within `[0, 254]`; a linear model learns it in a
  few rounds. Labels cycle through the classes (balanced).

  Args:
    num_train: Training examples.
    num_test: Test examples.
    seed: Seed of the templates and the noise.

  Returns:
    A `Dataset` named `synthetic`: uint8 images `[n, 28, 28, 1]`, int32 labels `[n]`.
  """
  rng = np.random.default_rng(seed)
  templates = rng.integers(0, 160, (10, 28, 28, 1))

  def draw(n):
    y = (np.arange(n) % 10).astype(np.int32)
    x = templates[y] + rng.integers(0, 96, (n, 28, 28, 1))
    return x.astype(np.uint8), y
  x_train, y_train = draw(num_train)
  x_test, y_test = draw(num_test)
  return Dataset('synthetic', x_train, y_train, x_test, y_test, 10,
                 source=f'generated (tffdp.data.loaders.synthetic_dataset, seed {seed})')


def default_data_dir() -> str:
  """Returns `TFFDP_DATA_DIR` if set, else the user cache directory."""
  env = os.environ.get('TFFDP_DATA_DIR')
  if env:
    return env
  cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(cache, 'tffdp', 'datasets')


def md5_of(path: str) -> str:
  h = hashlib.md5()
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      h.update(chunk)
  return h.hexdigest()


def verify_file(path: str, expected_md5: str) -> None:
  """Raises `ChecksumError` naming `path` if its MD5 is not `expected_md5`."""
  actual = md5_of(path)
  if actual != expected_md5:
    raise ChecksumError(
        f'Checksum mismatch for {path}: MD5 {actual}, expected the official '
        f'{expected_md5}. Delete the file (it will be downloaded again) or '
        'replace it with the official one.')


def _download(url: str, dest: str, expected_md5: str) -> None:
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), suffix='.part')
  os.close(fd)
  try:
    print(f'tffdp: downloading {url} -> {dest}', flush=True)
    with urllib.request.urlopen(url, timeout=60) as r, open(tmp, 'wb') as f:
      shutil.copyfileobj(r, f)
    actual = md5_of(tmp)
    if actual != expected_md5:
      raise ChecksumError(
          f'Checksum mismatch for {os.path.basename(dest)} downloaded from {url}: MD5 '
          f'{actual}, expected the official {expected_md5}. The file was not kept.')
    os.replace(tmp, dest)
  except Exception:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def _base_url(name: str) -> str:
  url = os.environ.get(f'TFFDP_DATA_URL_{name.upper()}', _DEFAULT_URLS[name])
  return url if url.endswith('/') else url + '/'


def _not_found(name: str, folder: str, files: list[str], reason: str = '') -> DataNotFoundError:
  return DataNotFoundError(
      f'{name}: expected {" , ".join(files)} in {folder}{reason}. Point tffdp at a '
      f'directory holding a `{name}/` folder with these files via --data-dir DIR '
      '(or the TFFDP_DATA_DIR environment variable), or allow downloading.')


def _fetch(name: str, folder: str, files: list[str], download: bool) -> None:
  """Makes sure `files` exist in `folder` (downloading if allowed) and verifies them."""
  missing = [f for f in files if not os.path.exists(os.path.join(folder, f))]
  if missing and not download:
    raise _not_found(name, folder, missing, ' (downloading disabled)')
  for f in missing:
    try:
      _download(_base_url(name) + f, os.path.join(folder, f), _MD5[name][f])
    except ChecksumError:
      raise
    except Exception as e:  # network errors: no internet, 404, ...
      raise _not_found(name, folder, missing,
                       f' and downloading {_base_url(name) + f} failed ({e})') from e
  for f in files:
    verify_file(os.path.join(folder, f), _MD5[name][f])


def _read_idx(path: str) -> np.ndarray:
  with gzip.open(path, 'rb') as f:
    data = f.read()
  magic = int.from_bytes(data[0:4], 'big')
  if magic >> 8 != 0x08:  # unsigned byte data
    raise DataError(f'{path} is not an IDX file of unsigned bytes (magic {magic:#x}).')
  ndim = magic & 0xFF
  shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim)]
  return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _load_idx_dataset(name: str, folder: str, download: bool) -> Dataset:
  _fetch(name, folder, list(_IDX_FILES), download)
  x_train, y_train, x_test, y_test = (_read_idx(os.path.join(folder, f))
                                      for f in _IDX_FILES)
  return Dataset(name, x_train[..., None], y_train.astype(np.int32),
                 x_test[..., None], y_test.astype(np.int32), 10,
                 source=f'IDX files in {folder}')


# What the official CIFAR python batches reference (NumPy arrays in dicts); a pickle
# naming anything else is refused before it can run (`_DataUnpickler`).
_PICKLE_GLOBALS = {('numpy.core.multiarray', '_reconstruct'), ('numpy', 'ndarray'),
                   ('numpy', 'dtype'), ('numpy.core.multiarray', 'scalar'),
                   ('_codecs', 'encode')}


class _DataUnpickler(pickle.Unpickler):
  """Loads only the NumPy arrays, dicts, lists and strings of a CIFAR batch file: an
  extracted folder has no official checksum, and a general unpickler would run any
  code a tampered batch file names."""

  def find_class(self, module, name):
    if (module, name) not in _PICKLE_GLOBALS:
      raise pickle.UnpicklingError(
          f'refusing {module}.{name}: a CIFAR batch file holds NumPy arrays only')
    return super().find_class(module, name)


def _unpickle(f) -> dict:
  return _DataUnpickler(f, encoding='bytes').load()


def _cifar_arrays(batches: list[dict], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
  x = np.concatenate([b[b'data'] for b in batches]).reshape(-1, 3, 32, 32)
  y = np.concatenate([np.asarray(b[label_key]) for b in batches])
  return x.transpose(0, 2, 3, 1).astype(np.uint8), y.astype(np.int32)


def _cifar_members(name: str) -> tuple[str, list[str], list[str], bytes]:
  if name == 'cifar10':
    return ('cifar-10-batches-py', [f'data_batch_{i}' for i in range(1, 6)],
            ['test_batch'], b'labels')
  return 'cifar-100-python', ['train'], ['test'], b'fine_labels'


def _load_cifar(name: str, folder: str, download: bool) -> Dataset:
  sub, train_files, test_files, label_key = _cifar_members(name)
  num_classes = _NUM_CLASSES[name]
  npz = os.path.join(folder, 'cifar10.npz')
  if name == 'cifar10' and os.path.exists(npz):
    verify_file(npz, _MD5[name]['cifar10.npz'])
    with np.load(npz) as d:
      return Dataset(name, d['x_train'].astype(np.uint8),
                     d['y_train'].reshape(-1).astype(np.int32),
                     d['x_test'].astype(np.uint8),
                     d['y_test'].reshape(-1).astype(np.int32), num_classes,
                     source=npz)
  extracted = os.path.join(folder, sub)
  if os.path.isdir(extracted):
    # The official checksum covers the tarball; an extracted folder is checked by
    # structure (the batches must parse to the official shapes).
    read = lambda f: _unpickle(open(os.path.join(extracted, f), 'rb'))
    missing = [f for f in train_files + test_files
               if not os.path.exists(os.path.join(extracted, f))]
    if missing:
      raise _not_found(name, extracted, missing)
    x_train, y_train = _cifar_arrays([read(f) for f in train_files], label_key)
    x_test, y_test = _cifar_arrays([read(f) for f in test_files], label_key)
    source = extracted
  else:
    tar_name = f'{"cifar-10" if name == "cifar10" else "cifar-100"}-python.tar.gz'
    try:
      _fetch(name, folder, [tar_name], download)
    except DataNotFoundError as e:
      alt = ' (or cifar10.npz in the keras.datasets layout)' if name == 'cifar10' else ''
      raise DataNotFoundError(f'{e} Also accepted: the extracted folder {sub}/{alt}.') from None
    tar_path = os.path.join(folder, tar_name)
    with tarfile.open(tar_path, 'r:gz') as tar:
      read = lambda f: _unpickle(tar.extractfile(f'{sub}/{f}'))
      x_train, y_train = _cifar_arrays([read(f) for f in train_files], label_key)
      x_test, y_test = _cifar_arrays([read(f) for f in test_files], label_key)
    source = tar_path
  return Dataset(name, x_train, y_train, x_test, y_test, num_classes, source=source)


def load_dataset(name: str, data_dir: Optional[str] = None,
                 download: bool = True) -> Dataset:
  """Loads one of `DATASETS` from `data_dir/<name>/`.

  Args:
    name: One of `mnist`, `fashion_mnist`, `cifar10`, `cifar100`, or `synthetic`
      (`synthetic_dataset()`: generated, for tests and smoke runs; no files).
    data_dir: Directory holding one folder per dataset; see the module docstring for
      the default.
    download: Whether missing official files may be downloaded.

  Returns:
    A `Dataset` (uint8 images `[n, h, w, c]`, int32 labels `[n]`).

  Raises:
    ValueError: If `name` is unknown (the message lists the valid names).
    DataNotFoundError: If the files are missing and cannot be downloaded; the message
      names the expected files, the directory searched and `--data-dir`.
    ChecksumError: If a file's MD5 differs from the official one (names the file).
  """
  if name not in _NUM_CLASSES:
    raise ValueError(f'Unknown dataset {name!r}. Valid datasets: {", ".join(DATASETS)}.')
  if name == 'synthetic':
    return synthetic_dataset()
  folder = os.path.join(data_dir or default_data_dir(), name)
  if name in ('mnist', 'fashion_mnist'):
    return _load_idx_dataset(name, folder, download)
  return _load_cifar(name, folder, download)


def train_validation_split(x: np.ndarray, y: np.ndarray, num_validation: int = 5000,
                           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Returns seeded `(train_indices, validation_indices)` of a training set.

  The validation indices form the server-side validation split (never given to
  clients); see `../shared/specs/README.md`, data conventions.

  Raises:
    ValueError: If `num_validation` is negative or not smaller than `len(y)`.
  """
  del x
  n = len(y)
  if not 0 <= num_validation < n:
    raise ValueError(f'num_validation must be in [0, {n}). Found {num_validation}.')
  perm = np.random.default_rng(seed).permutation(n)
  return np.sort(perm[num_validation:]), np.sort(perm[:num_validation])
