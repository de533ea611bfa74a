"""Checkpoints as data: arrays in an `.npz`, their structure as JSON, never a pickle.

A pickle runs code when it is loaded, so a run folder someone shared (or a committed
`figures/*/interrupted/` copy) could run anything on `--resume`. A checkpoint here is
one NumPy `.npz` file, read with `allow_pickle=False`: each array of the checkpoint is
an entry `a<i>` (any NumPy dtype but `object`), and the entry `structure_zlib` is a
JSON document (UTF-8, zlib-compressed, as a uint8 array) of the nested containers that
hold them. The JSON carries every Python number of the checkpoint (a long run's
per-round history), so it is compressed: stored as a unicode array, as files written
before 2026-12-07 have it in their entry `structure` (still read), it took 4 bytes a
character. What JSON
cannot tell apart is tagged: `{"__array__": i, "scalar": bool}` (a NumPy array or
scalar), `{"__bytes__": base64}`, `{"__tuple__": [...]}`,
`{"__items__": [[key, value], ...]}` (a dict with keys other than strings),
`{"__float__": "nan" | "inf" | "-inf"}`. Other types (class instances, functions,
sets) are refused when saving, so loading can only ever make dicts, lists, tuples,
strings, bytes, numbers, booleans, None and NumPy arrays.

`python -m tffdp.checkpoints convert RUN_DIR [RUN_DIR ...]` converts a pickled
`checkpoint.pkl` written by tffdp before 2026-11-26 into `checkpoint.npz` (it unpickles
it: convert only files you trust, e.g. your own runs).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import zlib
import os
import sys
from typing import Any

import numpy as np

FILE = 'checkpoint.npz'
LEGACY_PICKLE = 'checkpoint.pkl'
_STRUCTURE = 'structure_zlib'
_LEGACY_STRUCTURE = 'structure'  # a unicode array: files written before 2026-12-07
_FORMAT = 'tffdp-checkpoint-1'


class CheckpointError(ValueError):
  """A checkpoint that cannot be read (corrupt, another format) or written (a type
  that is not data)."""


def _encode(obj: Any, arrays: list[np.ndarray]) -> Any:
  if obj is None or isinstance(obj, (bool, str)):
    return obj
  if isinstance(obj, bytes):  # e.g. the class names of a TFF DP aggregator's event
    return {'__bytes__': base64.b64encode(obj).decode('ascii')}
  if isinstance(obj, (np.ndarray, np.generic)):
    arr = np.asarray(obj)
    if arr.dtype.hasobject:
      raise CheckpointError('object arrays are not data: they would need a pickle.')
    arrays.append(arr)
    return {'__array__': len(arrays) - 1, 'scalar': isinstance(obj, np.generic)}
  if isinstance(obj, int):
    return obj
  if isinstance(obj, float):
    return obj if math.isfinite(obj) else {'__float__': repr(obj)}
  if isinstance(obj, tuple) and not hasattr(obj, '_fields'):
    return {'__tuple__': [_encode(v, arrays) for v in obj]}
  if isinstance(obj, list):
    return [_encode(v, arrays) for v in obj]
  if type(obj) is dict or type(obj).__name__ == 'OrderedDict':  # pylint: disable=unidiomatic-typecheck
    if all(isinstance(k, str) for k in obj) and not any(k.startswith('__') for k in obj):
      return {k: _encode(v, arrays) for k, v in obj.items()}
    return {'__items__': [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]}
  raise CheckpointError(f'a checkpoint holds data only; found {type(obj).__name__} '
                        '(flatten structures first, e.g. with tf.nest.flatten).')


def _decode(doc: Any, arrays) -> Any:
  if isinstance(doc, list):
    return [_decode(v, arrays) for v in doc]
  if not isinstance(doc, dict):
    return doc
  if '__array__' in doc:
    arr = arrays[f'a{int(doc["__array__"])}']
    return arr[()] if doc.get('scalar') else arr
  if '__bytes__' in doc:
    return base64.b64decode(doc['__bytes__'])
  if '__float__' in doc:
    return float(doc['__float__'])
  if '__tuple__' in doc:
    return tuple(_decode(v, arrays) for v in doc['__tuple__'])
  if '__items__' in doc:
    return {_hashable(_decode(k, arrays)): _decode(v, arrays) for k, v in doc['__items__']}
  return {k: _decode(v, arrays) for k, v in doc.items()}


def _hashable(key):
  return key.item() if isinstance(key, (np.ndarray, np.generic)) else key


def dumps(obj: Any) -> bytes:
  """The `.npz` bytes of `obj` (nested dicts, lists, tuples, scalars, NumPy arrays).

  Raises:
    CheckpointError: If `obj` holds anything else (a class instance, a function, an
      object array).
  """
  arrays: list[np.ndarray] = []
  structure = json.dumps({'format': _FORMAT, 'value': _encode(obj, arrays)},
                         allow_nan=False)
  buf = io.BytesIO()
  packed = np.frombuffer(zlib.compress(structure.encode('utf-8'), 1), np.uint8)
  np.savez(buf, **{_STRUCTURE: packed},
           **{f'a{i}': a for i, a in enumerate(arrays)})
  return buf.getvalue()


def load(path: str) -> Any:
  """The object `dumps` wrote to `path`; loads no code (`allow_pickle=False`).

  Raises:
    CheckpointError: If the file is not a tffdp checkpoint or is corrupt.
  """
  try:
    with np.load(path, allow_pickle=False) as arrays:
      if _STRUCTURE in arrays.files:
        doc = json.loads(zlib.decompress(arrays[_STRUCTURE].tobytes()).decode('utf-8'))
      else:
        doc = json.loads(str(arrays[_LEGACY_STRUCTURE]))
      if not isinstance(doc, dict) or doc.get('format') != _FORMAT:
        raise CheckpointError(f'{path} is not a tffdp checkpoint ({_FORMAT}).')
      return _decode(doc['value'], arrays)
  except CheckpointError:
    raise
  except Exception as e:  # pylint: disable=broad-except  # any malformed file
    raise CheckpointError(f'{path} cannot be read as a tffdp checkpoint: '
                          f'{type(e).__name__}: {e}') from e


def load_trusted_pickle(path: str) -> Any:
  """Unpickles a legacy `checkpoint.pkl`. Runs whatever code the file holds: only for
  files the caller trusts (`--trust-pickle`, `convert`)."""
  import pickle  # pylint: disable=g-import-not-at-top
  with open(path, 'rb') as f:
    return pickle.load(f)


def convert(run_dir: str) -> str:
  """Writes `run_dir/checkpoint.npz` from its legacy `checkpoint.pkl` and removes the pickle.

  Unpickles the file: convert only files you trust.

  Returns:
    The path written.

  Raises:
    FileNotFoundError: If `run_dir` holds no `checkpoint.pkl`.
    CheckpointError: If the pickle holds something other than data.
  """
  src = os.path.join(run_dir, LEGACY_PICKLE)
  if not os.path.exists(src):
    raise FileNotFoundError(f'{run_dir} holds no {LEGACY_PICKLE}.')
  data = dumps(load_trusted_pickle(src))
  dest = os.path.join(run_dir, FILE)
  tmp = dest + '.tmp'
  with open(tmp, 'wb') as f:
    f.write(data)
  os.replace(tmp, dest)
  os.remove(src)
  return dest


def main(argv=None) -> int:
  p = argparse.ArgumentParser(
      prog='python -m tffdp.checkpoints',
      description='Convert pickled checkpoints (checkpoint.pkl, tffdp before 2026-11-26) '
      'to data-only checkpoints (checkpoint.npz). This unpickles each file, which runs '
      'any code it holds: convert only your own runs or files you trust.')
  sub = p.add_subparsers(dest='command', required=True)
  c = sub.add_parser('convert', help='convert RUN_DIR/checkpoint.pkl to checkpoint.npz')
  c.add_argument('run_dirs', nargs='+', metavar='RUN_DIR')
  args = p.parse_args(argv)
  status = 0
  for d in args.run_dirs:
    try:
      print(f'{d}: wrote {convert(d)}')
    except (FileNotFoundError, CheckpointError) as e:
      print(f'{d}: error: {e}', file=sys.stderr)
      status = 2
  return status


if __name__ == '__main__':
  sys.exit(main())
