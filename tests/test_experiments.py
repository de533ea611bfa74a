"""Smoke runs of every experiment entry point at toy size (--quick)."""

import csv
import os

from experiments import demo


def test_demo_quick(tmp_path, data_dir, monkeypatch):
  monkeypatch.setenv('TFFDP_CACHE_DIR', str(tmp_path / 'clients'))
  figs = tmp_path / 'figs'
  code = demo.main(['--quick', '--data-dir', data_dir, '--runs-dir', str(tmp_path / 'runs'),
                    '--figures-dir', str(figs)])
  assert code == 0
  for f in ('test_accuracy.png', 'epsilon.png', 'results.csv'):
    assert (figs / f).stat().st_size > 0
  with open(figs / 'results.csv') as f:
    rows = list(csv.DictReader(f))
  assert [r['method'] for r in rows] == list(demo.METHODS)
  assert rows[0]['epsilon_guaranteed'] == 'inf'  # FedAvg is not private
  assert float(rows[1]['epsilon_claimed']) > 0
  for m in ('fedavg', 'dpfl', 'dp_fedavg'):
    assert os.path.exists(figs / m / 'summary.json')
