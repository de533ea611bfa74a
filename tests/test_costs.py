"""The cost table (`benchmarks.costs`): which runs share a probe, the projection's
arithmetic, the tables read, and one real probe at toy size (timings are not tested)."""

import csv
import dataclasses
import json
import math
import os

import pytest

from benchmarks import costs
from tffdp import config as config_lib

TOY = dict(method='fedavg', dataset='synthetic', clients=4, clients_per_round=2,
           partition='iid', model='logistic_regression', batch_size=100,
           learning_rate=0.5, num_validation=500, rounds=20, eval_every=5)


def _config(**kw) -> dict:
  return dataclasses.asdict(config_lib.RunConfig(**dict(TOY, **kw)))


def test_probe_key_ignores_seed_privacy_level_length_and_cohort():
  base = costs.probe_key(_config())
  for kw in (dict(seed=3), dict(noise_multiplier=2.0), dict(rounds=500), dict(eval_every=1),
             dict(clients_per_round=3), dict(out='runs/x/y'), dict(learning_rate=0.1),
             dict(partition='label_skew', partition_options={'skew': 0.5})):
    assert costs.probe_key(_config(**kw)) == base, kw
  # An epsilon-like option and AADP-FL's q_user (scaled as a cohort) share the probe too.
  aadp = lambda **o: costs.probe_key(_config(method='aadp_fl', method_options={
      'epsilon': 4.0, 'q_user': 1.0, 'noise_scale': 'batch', **o}))
  assert aadp(epsilon=8.0, q_user=0.2) == aadp()


def test_probe_key_separates_what_changes_a_rounds_work():
  base = costs.probe_key(_config())
  # Shard partitions set how much data a client holds.
  shards = costs.probe_key(_config(partition='label_shards', partition_options={}))
  assert shards != base and shards != costs.probe_key(_config(
      partition='label_shards_equal', partition_options={}))
  for kw in (dict(model='mlp'), dict(local_epochs=5), dict(batch_size=10),
             dict(method='dpfl'), dict(dataset='mnist'), dict(num_validation=0),
             dict(partition_options={'examples_per_client': 52})):
    assert costs.probe_key(_config(**kw)) != base, kw
  aadp = lambda **o: costs.probe_key(_config(method='aadp_fl', method_options=o))
  assert aadp(noise_scale='batch') != aadp(noise_scale='none')


def test_expected_cohort_of_a_method_drawing_its_own():
  assert costs.expected_cohort(_config(clients_per_round=3)) == 3
  aadp = _config(method='aadp_fl', clients=20, clients_per_round=5,
                 method_options={'q_user': 0.25})
  assert costs.expected_cohort(aadp) == pytest.approx(5.0)  # N q_user, not K q_user


def test_evaluated_rounds_and_projection():
  assert costs.evaluated_rounds(25, 10) == 3  # 10, 20 and the last, 25
  assert costs.evaluated_rounds(20, 10) == 2
  assert costs.evaluated_rounds(7, 1) == 7
  config = _config(clients_per_round=6)
  probe = dict(setup_seconds=30.0, train_seconds=2.0, eval_seconds=4.0, expected_cohort=2)
  # Set-up + 25 rounds at 2 s x (6 / 2 clients) + 5 evaluations (every 5th) at 4 s.
  seconds = costs.projected_seconds(config, {'rounds_completed': 25}, probe)
  assert seconds == pytest.approx(30 + 25 * 6.0 + 5 * 4.0)
  # Without rounds_completed (older summaries) the configured rounds count.
  assert costs.projected_seconds(config, {}, probe) == pytest.approx(30 + 20 * 6 + 4 * 4)


def _publish(figs, name, config, wall, paper='toy'):
  folder = os.path.join(figs, 'runs', name)
  os.makedirs(folder)
  config = dict(config, out=f'runs/{paper}/{name}')
  with open(os.path.join(folder, 'config.json'), 'w') as f:
    json.dump(config, f)
  with open(os.path.join(folder, 'summary.json'), 'w') as f:
    json.dump({'rounds_completed': config['rounds'], 'wall_seconds': wall}, f)
  with open(os.path.join(folder, 'metrics.csv'), 'w') as f:
    f.write('round\n')
  return config


def _table(path, runs):
  with open(path, 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['curve', 'accuracy', 'run'])
    for i, run in enumerate(runs):
      w.writerow([f'c{i}', 0.5, run])


def test_cost_rows_from_recorded_probes_count_a_shared_run_once(tmp_path):
  figs = tmp_path / 'figures' / 'toy'
  a = _publish(str(figs), 'a', _config(seed=0), 100.0)
  _publish(str(figs), 'b', _config(seed=1, rounds=40), 300.0)
  _table(figs / 'fig1.csv', ['runs/toy/a', 'runs/toy/b'])
  _table(figs / 'fig2.csv', ['$RUNS_DIR/toy/a', 'runs/toy/gone'])
  (figs / 'notes.csv').write_text('x,y\n1,2\n')  # no run column: not an artefact
  probes = str(tmp_path / 'probes.csv')
  costs._append_probe(probes, dict(key=costs.probe_key(a), run='toy/a', setup_seconds=10,
                                   train_seconds=1.0, eval_seconds=2.0, expected_cohort=2,
                                   floor_round_seconds=0.5, floor_eval_seconds=1.0))
  rows = costs.cost_rows(['toy'], 'unused', str(tmp_path / 'figures'), probes_path=probes,
                         log=lambda s: pytest.fail(f'probed: {s}'))
  by = {r['artefact']: r for r in rows}
  run_a = (10 + 20 * 1.0 + 4 * 2.0) / 3600
  run_b = (10 + 40 * 1.0 + 8 * 2.0) / 3600
  assert set(by) == {'fig1', 'fig2', '(all, each run once)'}
  assert by['fig1']['projected_hours'] == pytest.approx(run_a + run_b)
  assert by['fig1']['recorded_hours'] == pytest.approx(400 / 3600)
  assert (by['fig2']['runs'], by['fig2']['missing_runs']) == (1, 1)
  total = by['(all, each run once)']
  assert total['runs'] == 2 and total['projected_hours'] == pytest.approx(run_a + run_b)
  # The floor: 20 and 40 rounds at 0.5 s, 4 and 8 evaluations at 1 s, no set-up.
  assert total['floor_hours'] == pytest.approx((20 * 0.5 + 4 + 40 * 0.5 + 8) / 3600)
  # The probe predates the server term: FedAvg's is 0, recorded without measuring.
  assert costs.read_probes(probes)[costs.probe_key(a)]['floor_server_seconds'] == '0.0'
  md = costs.write_table(rows, probes, str(tmp_path / 'costs.md'), str(tmp_path / 'c.csv'))
  assert '| toy | fig2 | 1 (1 not published) |' in md


def test_a_real_probe_and_a_failed_one(tmp_path):
  figs = tmp_path / 'figures' / 'toy'
  _publish(str(figs), 'ok', _config(rounds=6), 50.0)
  _publish(str(figs), 'bad', _config(model='no_such_model'), 50.0)
  _table(figs / 'fig.csv', ['runs/toy/ok', 'runs/toy/bad'])
  probes = str(tmp_path / 'probes.csv')
  logs = []
  rows = costs.cost_rows(['toy'], str(tmp_path), str(tmp_path / 'figures'),
                         probe_rounds=2, probes_path=probes, log=logs.append)
  assert [line.split(': ', 1)[1] for line in logs] == [
      'probing toy/ok (0 probes so far)', 'plain-TF floor of toy/ok',
      'probing toy/bad (1 probes so far)']
  recorded = costs.read_probes(probes)
  ok = recorded[costs.probe_key(_config(rounds=6))]
  assert not ok['error'] and float(ok['train_seconds']) > 0
  assert float(ok['eval_seconds']) > 0  # the last probe round evaluates
  assert float(ok['floor_round_seconds']) > 0 and float(ok['floor_eval_seconds']) > 0
  assert float(ok['floor_server_seconds']) == 0  # FedAvg scores no model at the server
  assert recorded[costs.probe_key(_config(model='no_such_model'))]['error']
  assert math.isnan(rows[0]['projected_hours'])
  md = costs.write_table(rows, probes, str(tmp_path / 'costs.md'), str(tmp_path / 'c.csv'))
  assert 'not measured' in md and 'Probes that failed' in md
  # A second call reuses both probes.
  costs.cost_rows(['toy'], str(tmp_path), str(tmp_path / 'figures'), probes_path=probes,
                  log=lambda s: pytest.fail(f'probed again: {s}'))
  assert math.isnan(rows[0]['sliced_hours'])   # no probe in slices of one yet
  # `slices`: each run probed again as `--clients-per-slice 1` runs it, its floor copied.
  logs.clear()
  rows = costs.cost_rows(['toy'], str(tmp_path), str(tmp_path / 'figures'),
                         probe_rounds=2, probes_path=probes, log=logs.append, slices=True)
  assert [line.split(': ', 1)[1] for line in logs] == [
      'probing toy/ok in slices of one client (2 probes so far)',
      'probing toy/bad in slices of one client (3 probes so far)']
  recorded = costs.read_probes(probes)
  sliced = recorded[costs.probe_key(_config(rounds=6, clients_per_slice=1))]
  assert sliced['clients_per_slice'] == '1' and float(sliced['train_seconds']) > 0
  assert sliced['floor_round_seconds'] == ok['floor_round_seconds']
  assert len(recorded) == 4 and math.isnan(rows[0]['sliced_hours'])  # the bad run's
  # Kept by the next call, whose re-keying tells the two probes of `ok` apart.
  costs.cost_rows(['toy'], str(tmp_path), str(tmp_path / 'figures'), probes_path=probes,
                  log=lambda s: pytest.fail(f'probed again: {s}'), slices=True)
  assert len(costs.read_probes(probes)) == 4


def test_the_sliced_column_projects_the_runs_as_clients_per_slice_one_runs_them(tmp_path):
  figs = tmp_path / 'figures' / 'toy'
  a = _publish(str(figs), 'a', _config(), 100.0)   # FedAvg: runs in slices of one
  s = _publish(str(figs), 's', _config(method='dp_scaffold'), 100.0)  # does not
  _table(figs / 'fig.csv', ['runs/toy/a', 'runs/toy/s'])
  probes = str(tmp_path / 'probes.csv')
  floor = dict(floor_round_seconds=0.5, floor_eval_seconds=1.0, floor_server_seconds=0.0)
  for config, run, train, per_slice in ((a, 'toy/a', 1.0, ''), (s, 'toy/s', 3.0, ''),
                                        (dict(a, clients_per_slice=1), 'toy/a', 0.25, 1)):
    costs._append_probe(probes, dict(floor, key=costs.probe_key(config), run=run,
                                     clients_per_slice=per_slice, setup_seconds=10,
                                     train_seconds=train, eval_seconds=2.0,
                                     expected_cohort=2))
  assert costs.in_slices_of_one(s) is None
  assert costs.in_slices_of_one(dict(a, clients_per_slice=10)) is None
  assert costs.in_slices_of_one(dict(a, audit_canaries=8)) is None
  rows = costs.cost_rows(['toy'], 'unused', str(tmp_path / 'figures'), probes_path=probes,
                         log=lambda line: pytest.fail(f'probed: {line}'))
  total = rows[-1]
  assert total['projected_hours'] == pytest.approx((10 + 20 + 8 + 10 + 60 + 8) / 3600)
  # `a` at its probe in slices of one, `s` as published.
  assert total['sliced_hours'] == pytest.approx((10 + 5 + 8 + 10 + 60 + 8) / 3600)
  md = costs.write_table(rows, probes, str(tmp_path / 'costs.md'), str(tmp_path / 'c.csv'))
  assert '| toy | fig | 2 | 0.06 | 0.03 | 0.01 | 4.14x | 0.03 | 3.61x |' in md  # floor 2 x 14 s


def test_fresh_probes_the_named_papers_again_and_keeps_the_other_papers_probes(tmp_path):
  figs = tmp_path / 'figures' / 'toy'
  bad = _publish(str(figs), 'bad', _config(model='no_such_model'), 50.0)  # fails fast
  _table(figs / 'fig.csv', ['runs/toy/bad'])
  probes = str(tmp_path / 'probes.csv')
  measured = dict(setup_seconds=1, train_seconds=1.0, eval_seconds=1.0, expected_cohort=2,
                  floor_round_seconds=0.5, floor_eval_seconds=1.0)
  costs._append_probe(probes, dict(measured, key=costs.probe_key(bad), run='toy/bad'))
  costs._append_probe(probes, dict(measured, key='other0', run='other/x'))
  logs = []
  costs.cost_rows(['toy'], str(tmp_path), str(tmp_path / 'figures'), fresh=True,
                  probes_path=probes, log=logs.append)
  assert [line.split(': ', 1)[1] for line in logs] == ['probing toy/bad (1 probes so far)']
  recorded = costs.read_probes(probes)
  assert set(recorded) == {costs.probe_key(bad), 'other0'}
  assert recorded[costs.probe_key(bad)]['error']
  assert recorded['other0']['train_seconds'] == '1.0'


def test_papers_not_measured_are_costed_from_the_probes_recorded(tmp_path):
  # `--only papers --papers toy` writes every paper's rows: `other`'s from its recorded
  # probe, `third`'s "not measured" (its probe missing, and not measured now).
  figures = tmp_path / 'figures'
  bad = _publish(str(figures / 'toy'), 'bad', _config(model='no_such_model'), 50.0)
  _table(figures / 'toy' / 'fig.csv', ['runs/toy/bad'])
  x = _publish(str(figures / 'other'), 'x', _config(), 100.0, 'other')
  _table(figures / 'other' / 'fig.csv', ['runs/other/x'])
  y = _publish(str(figures / 'third'), 'y', _config(batch_size=10), 100.0, 'third')
  _table(figures / 'third' / 'fig.csv', ['runs/third/y'])
  probes = str(tmp_path / 'probes.csv')
  costs._append_probe(probes, dict(key=costs.probe_key(x), run='other/x', setup_seconds=10,
                                   train_seconds=1.0, eval_seconds=2.0, expected_cohort=2,
                                   floor_round_seconds=0.5, floor_eval_seconds=1.0,
                                   floor_server_seconds=0.0))
  logs = []
  rows = costs.cost_rows(['toy', 'other', 'third'], str(tmp_path), str(figures),
                         probes_path=probes, log=logs.append, measure=['toy'])
  assert [line.split(': ', 1)[1] for line in logs] == ['probing toy/bad (1 probes so far)']
  total = {r['paper']: r for r in rows if r['artefact'].startswith('(')}
  assert total['other']['projected_hours'] > 0 and total['other']['recorded_hours'] == \
      pytest.approx(100 / 3600)
  assert math.isnan(total['third']['projected_hours'])
  assert total['third']['recorded_hours'] == pytest.approx(100 / 3600)
  assert costs.probe_key(y) != costs.probe_key(x)
  assert set(costs.read_probes(probes)) == {costs.probe_key(bad), costs.probe_key(x)}
  md = costs.write_table(rows, probes, str(tmp_path / 'costs.md'), str(tmp_path / 'c.csv'))
  assert '| third | fig | 1 | 0.03 | not measured |' in md
  assert 'Probes measured' not in md   # one date (here none): nothing to compare
  costs._append_probe(probes, dict(key='k1', run='other/z', measured='2026-01-01'))
  costs._append_probe(probes, dict(key='k2', run='toy/z', measured='2026-01-02'))
  md = costs.write_table(rows, probes, str(tmp_path / 'costs.md'), str(tmp_path / 'c.csv'))
  assert 'Probes measured: other 2026-01-01; toy 2026-01-02, ' in md  # and toy/bad's: today


def test_packed_copies_each_report_their_round(tmp_path):
  seconds = costs.packed_round_seconds(_config(rounds=4), str(tmp_path), jobs=2, rounds=2)
  assert len(seconds) == 2 and min(seconds) > 0


def test_find_published_names_what_is_missing(tmp_path):
  figs = tmp_path / 'figures' / 'toy'
  _publish(str(figs), 'a', _config(), 1.0)
  assert costs.find_published('toy/a', str(tmp_path / 'figures'))['out'] == 'runs/toy/a'
  with pytest.raises(FileNotFoundError, match='toy/b'):
    costs.find_published('toy/b', str(tmp_path / 'figures'))


def test_local_steps_per_method():
  sizes = costs.np.array([100, 101, 0])
  steps, batch = costs.local_steps(_config(batch_size=10, local_epochs=2), sizes)
  assert batch == 10 and list(steps) == [20, 22, 0]  # a last partial batch counts as one
  adap = _config(method='adap_dp_fl', method_options={'lot_size': 78.0})
  steps, batch = costs.local_steps(adap, sizes)
  assert batch == 78 and list(steps) == [1, 1, 1]  # one Poisson lot a round


def test_the_floor_counts_a_methods_own_server_forward_passes_once_a_round():
  assert costs.server_forward_examples(_config()) == 0  # FedAvg
  for method in ('a_dpfl', 'cosafed', 'lapfed', 'adpfl', 'cosfed'):
    assert costs.server_forward_examples(dict(_config(), method=method)) == 500
  adap = lambda schedule, n=500: dict(_config(num_validation=n), method='adap_dp_fl',
                                      method_options={'noise_schedule': schedule})
  assert costs.server_forward_examples(adap('decay')) == 500
  assert costs.server_forward_examples(adap('constant')) == 0  # no validation loss read
  assert costs.server_forward_examples(adap('decay', 0)) == 0  # no validation split
  # 20 rounds: the clients' floor scaled from the probe's 2 clients to 6, the server's
  # 0.25 s not; 4 evaluations at 1 s.
  config = _config(clients_per_round=6)
  row = dict(expected_cohort=2, floor_round_seconds=0.5, floor_eval_seconds=1.0,
             floor_server_seconds=0.25)
  assert costs.floor_projected_seconds(config, {'rounds_completed': 20}, row) == (
      pytest.approx(20 * (0.5 * 3 + 0.25) + 4 * 1.0))
  assert math.isnan(costs.floor_projected_seconds(
      config, {}, dict(row, floor_server_seconds='')))


def test_probes_are_rekeyed_from_their_runs_when_the_key_changes(tmp_path):
  # A probe measured under an older key (another RunConfig layout) is found again from the
  # run it probed, so the table does not probe that work a second time.
  figs = tmp_path / 'figures' / 'toy'
  a = _publish(str(figs), 'a', _config(seed=0), 100.0)
  _table(figs / 'fig1.csv', ['runs/toy/a'])
  probes = str(tmp_path / 'probes.csv')
  row = dict(run='toy/a', method='fedavg', dataset='synthetic', model='logistic_regression',
             setup_seconds=10, train_seconds=1.0, eval_seconds=2.0, expected_cohort=2,
             floor_round_seconds=0.5, floor_eval_seconds=1.0, floor_server_seconds=0.0)
  costs._append_probe(probes, dict(row, key='0ld0ld0ld0ld'))
  costs._append_probe(probes, dict(row, key='0therrun0000', run='toy/gone'))
  rows = costs.cost_rows(['toy'], 'unused', str(tmp_path / 'figures'), probes_path=probes,
                         log=lambda s: pytest.fail(f'probed: {s}'))
  assert rows[0]['projected_hours'] == pytest.approx((10 + 20 * 1.0 + 4 * 2.0) / 3600)
  # The file now holds the row under its run's key; the row of a run not published keeps
  # its own.
  assert sorted(costs.read_probes(probes)) == sorted([costs.probe_key(a), '0therrun0000'])
  # A row whose run was since rerun as another model keeps its key (not its probe).
  moved = costs.rekeyed({'k': dict(row, key='k', model='mlp')},
                        {'toy/a': (a, {})})
  assert list(moved) == ['k']


def test_probes_of_an_older_layout_are_rewritten_not_misaligned(tmp_path):
  path = str(tmp_path / 'probes.csv')
  with open(path, 'w') as f:
    f.write('key,run,train_seconds\nk1,toy/a,2.5\n')
  costs._append_probe(path, dict(key='k2', run='toy/b', train_seconds=1.0,
                                 floor_round_seconds=0.1))
  rows = costs.read_probes(path)
  assert rows['k1']['train_seconds'] == '2.5' and rows['k1']['floor_round_seconds'] == ''
  assert rows['k2']['floor_round_seconds'] == '0.1'
