"""Checkpoints are data: what they hold round-trips exactly, nothing else is written or
read, and a pickled checkpoint runs no code unless the user says it may."""

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from tffdp import checkpoints
from tffdp import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _roundtrip(obj, tmp_path):
  path = tmp_path / 'c.npz'
  path.write_bytes(checkpoints.dumps(obj))
  return checkpoints.load(str(path))


def test_nested_data_round_trips_with_types_and_dtypes(tmp_path):
  obj = dict(
      state=[np.arange(6, dtype=np.float32).reshape(2, 3), np.int64(7), np.float32(0.5),
             np.array([1, -1], np.int64), np.array(True)],
      rows=[{'round': 1, 'test_accuracy': 0.25, 'note': '', 'eps': float('inf')},
            {'round': 2, 'test_accuracy': float('nan'), 'eps': -float('inf')}],
      reasons={3: 'noise multiplier is 0', 0: ''}, pair=(1, 'a', None), flag=False,
      names=[b'dp_accounting.dp_event', b'\x00\xff'],
      config={'method': 'dpfl', 'partition_options': {'alpha': 0.5}, 'seed': 0,
              '__odd': 1})
  back = _roundtrip(obj, tmp_path)
  assert back.keys() == obj.keys()
  for a, b in zip(obj['state'], back['state']):
    assert type(a) is type(b) and np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(a, b)
  assert back['rows'][0] == obj['rows'][0]
  assert np.isnan(back['rows'][1]['test_accuracy']) and back['rows'][1]['eps'] == -np.inf
  assert back['reasons'] == {3: 'noise multiplier is 0', 0: ''}
  assert back['pair'] == (1, 'a', None) and back['flag'] is False
  assert back['names'] == [b'dp_accounting.dp_event', b'\x00\xff']
  assert back['config'] == obj['config']


def test_a_long_history_is_stored_compressed_and_files_of_the_old_layout_still_load(
    tmp_path):
  # 20,000 rounds of metrics rows: the JSON part of a long Adap DP-FL checkpoint.
  rows = [{'round': r, 'test_accuracy': 0.5 + r * 1e-6, 'noise_multiplier': 1.1,
           'epsilon_guaranteed': r * 1e-4} for r in range(20000)]
  obj = {'rows': rows, 'weights': [np.ones((3, 3), np.float32)]}
  data = checkpoints.dumps(obj)
  text = json.dumps({'format': 'tffdp-checkpoint-1', 'value': {'rows': rows}})
  assert len(data) < len(text) / 4  # the JSON alone, at one byte a character
  assert _roundtrip(obj, tmp_path)['rows'] == rows
  # The layout before 2026-12-07: the JSON as a unicode array under `structure`.
  legacy = tmp_path / 'legacy.npz'
  np.savez(legacy, structure=np.array(json.dumps(
      {'format': 'tffdp-checkpoint-1', 'value': {'rows': rows[:3], 'w': {'__array__': 0,
                                                                        'scalar': False}}})),
           a0=np.arange(4, dtype=np.float32))
  back = checkpoints.load(str(legacy))
  assert back['rows'] == rows[:3]
  np.testing.assert_array_equal(back['w'], np.arange(4, dtype=np.float32))


class _NotData:
  pass


@pytest.mark.parametrize('bad', [_NotData(), [len], {'x': np.array([None], object)},
                                 {1, 2}, np.zeros(2, dtype=[('a', 'f4'), ('b', 'O')])])
def test_anything_but_data_is_refused_on_save(bad):
  with pytest.raises(checkpoints.CheckpointError, match='data'):
    checkpoints.dumps({'a': bad})


def test_files_that_are_not_tffdp_checkpoints_are_refused(tmp_path):
  other = tmp_path / 'other.npz'
  np.savez(other, structure=np.array('{"format": "x"}'))
  with pytest.raises(checkpoints.CheckpointError, match='not a tffdp checkpoint'):
    checkpoints.load(str(other))
  # An object array inside an .npz would need a pickle: refused, nothing loaded.
  objs = tmp_path / 'objs.npz'
  np.savez(objs, structure=np.array('{"format": "tffdp-checkpoint-1", "value": '
                                    '{"__array__": 0}}'), a0=np.array([{'x': 1}], object))
  with pytest.raises(checkpoints.CheckpointError):
    checkpoints.load(str(objs))
  junk = tmp_path / 'junk.npz'
  junk.write_bytes(b'not a zip')
  with pytest.raises(checkpoints.CheckpointError, match='cannot be read'):
    checkpoints.load(str(junk))
  npy = tmp_path / 'array.npz'  # a plain .npy under the checkpoint's name
  with open(npy, 'wb') as f:
    np.save(f, np.arange(3))
  with pytest.raises(checkpoints.CheckpointError, match='cannot be read'):
    checkpoints.load(str(npy))


class _Payload:
  """A pickle that, when loaded, creates a file: stands for arbitrary code."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (open, (self.marker, 'w'))


_TOY_CLI = ['--method', 'fedavg', '--dataset', 'synthetic', '--rounds', '2', '--clients',
            '4', '--clients-per-round', '2', '--partition', 'iid', '--model',
            'logistic_regression', '--num-validation', '100']


def test_a_crafted_pickle_in_a_run_folder_runs_nothing_on_resume(tmp_path):
  out = tmp_path / 'shared_run'
  out.mkdir()
  marker = tmp_path / 'pwned'
  (out / config_lib.LEGACY_CHECKPOINT).write_bytes(pickle.dumps(_Payload(str(marker))))
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', *_TOY_CLI, '--out', str(out),
                      '--resume'], capture_output=True, text=True, cwd=ROOT, timeout=600,
                     env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert r.returncode == 2, r.stderr
  assert 'pickled checkpoint' in r.stderr and '--trust-pickle' in r.stderr
  assert 'Traceback' not in r.stderr
  assert not marker.exists()
  assert sorted(os.listdir(out)) == [config_lib.LEGACY_CHECKPOINT]  # nothing written
  # Nor without --resume: the folder holds a checkpoint, so a new run is refused.
  r = subprocess.run([sys.executable, '-m', 'tffdp.run', *_TOY_CLI, '--out', str(out)],
                     capture_output=True, text=True, cwd=ROOT, timeout=600,
                     env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert r.returncode == 2 and 'already holds a checkpoint' in r.stderr
  assert not marker.exists()


def test_a_trusted_legacy_pickle_resumes_and_is_replaced_and_convert_works(tmp_path):
  from tffdp import runner  # pylint: disable=g-import-not-at-top
  kw = dict(method='dpfl', dataset='synthetic', clients=4, clients_per_round=2,
            partition='iid', model='logistic_regression', batch_size=100,
            learning_rate=0.5, num_validation=500, noise_multiplier=0.7, rounds=3)
  whole = runner.run(config_lib.RunConfig.create(out=str(tmp_path / 'whole'), **kw),
                     log=lambda s: None)
  part = tmp_path / 'part'
  runner.run(config_lib.RunConfig.create(out=str(part), stop_after_round=2, **kw),
             log=lambda s: None)
  # As tffdp before 2026-11-26 wrote it: the same dict, pickled.
  ckpt = checkpoints.load(str(part / config_lib.CHECKPOINT))
  os.remove(part / config_lib.CHECKPOINT)
  (part / config_lib.LEGACY_CHECKPOINT).write_bytes(pickle.dumps(ckpt))
  with pytest.raises(runner.ResumeError, match='checkpoints convert'):
    runner.run(config_lib.RunConfig.create(out=str(part), **kw), resume=True,
               log=lambda s: None)
  done = runner.run(config_lib.RunConfig.create(out=str(part), **kw), resume=True,
                    trust_pickle=True, log=lambda s: None)
  assert done['final_test_accuracy'] == whole['final_test_accuracy']
  assert done['epsilon_guaranteed'] == whole['epsilon_guaranteed']
  assert not (part / config_lib.LEGACY_CHECKPOINT).exists()
  assert (part / config_lib.CHECKPOINT).exists()
  # The one-off conversion of a folder one trusts.
  legacy = tmp_path / 'legacy'
  legacy.mkdir()
  (legacy / config_lib.LEGACY_CHECKPOINT).write_bytes(pickle.dumps(ckpt))
  r = subprocess.run([sys.executable, '-m', 'tffdp.checkpoints', 'convert', str(legacy),
                      str(tmp_path / 'none')], capture_output=True, text=True, cwd=ROOT,
                     timeout=120)
  assert r.returncode == 2 and 'holds no checkpoint.pkl' in r.stderr
  assert os.listdir(legacy) == [config_lib.CHECKPOINT]
  back = checkpoints.load(str(legacy / config_lib.CHECKPOINT))
  assert back['round'] == ckpt['round'] == 2 and back['rows'] == ckpt['rows']
