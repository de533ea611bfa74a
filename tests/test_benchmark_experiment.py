"""The cross-method benchmark (`experiments.benchmark`, issue 41) at toy size, and the
protocol's pieces: entries per track, run names, tuning settings, seed verdicts."""

import argparse
import csv
import dataclasses
import json
import os

import numpy as np
import pytest

from experiments import benchmark
from experiments import common
from tffdp import calibration
from tffdp import config as config_lib


def test_every_registered_method_has_an_entry_in_its_track():
  methods = {e.method for e in benchmark.ENTRIES}
  assert methods == set(config_lib.methods())
  for e in benchmark.ENTRIES:
    assert e.knob in ('noise_multiplier', 'epsilon', 'claimed', 'none'), e
    assert not e.adaptive or e.knob in ('noise_multiplier', 'epsilon'), e
    assert e.baseline is None or e.baseline in {x.name for x in benchmark.ENTRIES}, e
  # The sample-level methods run in the sample-level track, the rest in the client one.
  sample = {e.method for e in benchmark.ENTRIES if e.track == 'sample'}
  assert sample == {'dpfl', 'dp_scaffold', 'a_dpfl', 'adap_dp_fl'}
  assert len({len(benchmark.grid(e)) for e in benchmark.ENTRIES}) == 1  # equal tuning


def test_trials_set_each_methods_own_clip():
  by = {e.name: e for e in benchmark.ENTRIES}
  assert benchmark.hyperparameters(by['dp_fedavg'], (0.1, 0.5), 'mnist') == dict(
      learning_rate=0.1, clip_norm=0.5)
  assert benchmark.hyperparameters(by['lapfed_l1_clip'], (0.1, 0.5), 'mnist') == dict(
      learning_rate=0.1, sensitivity=0.5, l1_clip=0.5)
  assert benchmark.hyperparameters(by['cosafed'], (0.1, 0.5), 'mnist') == dict(
      learning_rate=0.1, sensitivity=0.5)
  fmnist = benchmark.hyperparameters(by['adap_dp_fl'], (0.002, 0.5), 'fashion_mnist')
  assert fmnist['clipping_factor'] == pytest.approx(
      0.5 * config_lib.method_defaults('adap_dp_fl', 'fashion_mnist')['clipping_factor'])
  cfg = benchmark.base_config(by['dp_fedags_perturb_all'], 'mnist', 1, (0.1, 1.0), 'd',
                              quick=False)
  assert (cfg.clients, cfg.clients_per_round, cfg.cohort_sampling) == (1000, 50, 'uniform')
  assert cfg.method_options['perturb_all'] is True and cfg.seed == 1
  assert cfg.partition == 'dirichlet' and cfg.partition_options == {'alpha': 0.5}


def test_calibration_key_ignores_how_clients_are_sliced():
  by = {e.name: e for e in benchmark.ENTRIES}
  cfg = benchmark.base_config(by['aadp_fl_update_noise'], 'mnist', 0, (0.05, 0.5), 'd',
                              quick=False)
  assert cfg.clients_per_slice == 1  # the AADP-FL entries read clients by index tensors
  unsliced = dataclasses.replace(cfg, clients_per_slice=None)
  assert benchmark._cache_key(cfg, 4.0) == benchmark._cache_key(unsliced, 4.0)
  assert benchmark._cache_key(cfg, 4.0) != benchmark._cache_key(cfg, 1.0)
  assert benchmark._cache_key(cfg, 4.0) != benchmark._cache_key(
      dataclasses.replace(cfg, clip_norm=1.0), 4.0)


def test_a_dpfl_spends_its_budget_and_keeps_its_calibration_key(tmp_path, monkeypatch):
  entry = next(e for e in benchmark.ENTRIES if e.name == 'a_dpfl')
  keys = []

  def fake_calibrate(cfg, target, knob, rtol):
    keys.append(benchmark._cache_key(cfg, target))
    return calibration.Calibration(knob, 8.0, 0.99 * target, target, 1, True)
  monkeypatch.setattr(calibration, 'calibrate', fake_calibrate)
  base = benchmark.base_config(entry, 'mnist', 0, (0.05, 0.5), 'd', quick=False)
  assert base.budget_last_round == 'skip' and base.epsilon_budget is None
  base.validate()  # a config without a budget stays valid
  cfg = benchmark.Calibrations(str(tmp_path / 'c.json')).config_at(entry, base, 4.0)
  # Set with the budget: the run lands on the target (tests/test_runner.py).
  assert (cfg.epsilon_budget, cfg.budget_last_round) == (4.0, 'raise_noise')
  assert cfg.noise_multiplier == 8.0
  asked = dataclasses.replace(cfg, noise_multiplier=base.noise_multiplier)  # as calibrated
  skip = dataclasses.replace(asked, budget_last_round='skip')
  assert keys == [benchmark._cache_key(asked, 4.0)] == [benchmark._cache_key(skip, 4.0)]


def test_calibrations_start_from_a_value_of_the_same_cell(tmp_path, monkeypatch):
  by = {e.name: e for e in benchmark.ENTRIES}
  starts = []

  def fake_calibrate(cfg, target, knob, rtol):
    starts.append(cfg.noise_multiplier)
    return calibration.Calibration(knob, 1.5 + len(starts), 0.99 * target, target, 1, True)
  monkeypatch.setattr(calibration, 'calibrate', fake_calibrate)
  cal = benchmark.Calibrations(str(tmp_path / 'calibrations.json'))
  cfg = lambda trial, seed=0, dataset='mnist': benchmark.base_config(
      by['dp_fedavg'], dataset, seed, trial, 'd', quick=True)
  first = cal.config_at(by['dp_fedavg'], cfg((0.1, 0.5)), 4.0, log=lambda s: None)
  assert first.noise_multiplier == 2.5 and starts == [cfg((0.1, 0.5)).noise_multiplier]
  # Another trial and another seed of the cell start from its value; other cells do not.
  cal.config_at(by['dp_fedavg'], cfg((0.2, 1.0)), 4.0, log=lambda s: None)
  cal.config_at(by['dp_fedavg'], cfg((0.1, 0.5), seed=1), 4.0, log=lambda s: None)
  cal.config_at(by['dp_fedavg'], cfg((0.1, 0.5)), 16.0, log=lambda s: None)
  cal.config_at(by['dp_fedavg'], cfg((0.1, 0.5), dataset='fashion_mnist'), 4.0,
                log=lambda s: None)
  assert starts[1:] == [2.5, 2.5, starts[0], starts[0]]
  # Kept with the cell, reused from the file by a new instance without calibrating.
  again = benchmark.Calibrations(cal.path)
  assert again.config_at(by['dp_fedavg'], cfg((0.2, 1.0)), 4.0).noise_multiplier == 3.5
  assert len(starts) == 5
  # Values kept where earlier versions kept them are read too; the file's own win.
  moved = benchmark.Calibrations(str(tmp_path / 'new.json'), also_read=[cal.path])
  assert moved.values == cal.values and not os.path.exists(moved.path)
  moved.save()
  assert benchmark.Calibrations(moved.path).values == cal.values
  # Saving never replaces a value the file holds (another process may have found it).
  key = next(iter(cal.values))
  stale = benchmark.Calibrations(moved.path)
  stale.values[key] = dict(stale.values[key], value=-1.0)
  stale.save()
  assert benchmark.Calibrations(moved.path).values == cal.values == stale.values


def test_one_seed_is_a_tie_and_inf_entries_get_no_verdict():
  row = lambda entry, acc, seed=0, target=4.0, table='main': dict(
      track='client', dataset='mnist', entry=entry, target_epsilon=target, seed=seed,
      final_test_accuracy=acc, stop_reason='', table=table)
  one = [row('ddgauss', 0.9), row('dp_fedavg', 0.5)]
  assert 'ties (1 seed: a tie until 3 separate)' in benchmark.what_the_numbers_say(one)[0]
  three = [row('ddgauss', 0.9 + s / 100, s) for s in range(3)] + [
      row('dp_fedavg', 0.5 + s / 100, s) for s in range(3)]
  assert '**ddgauss** wins against dp_fedavg' in benchmark.what_the_numbers_say(three)[0]
  inf = [row('cosafed', 0.8, target='', table='inf'), row('lapfed_l1_clip', 0.1)]
  assert 'no verdict' in benchmark.what_the_numbers_say(inf)[0]


def test_seed_ranges_decide_a_win():
  rows = lambda *accs: [dict(final_test_accuracy=a) for a in accs]
  assert benchmark.separates(rows(0.9, 0.91), rows(0.85, 0.89)) == 1
  assert benchmark.separates(rows(0.85, 0.89), rows(0.9, 0.91)) == -1
  assert benchmark.separates(rows(0.85, 0.92), rows(0.9, 0.91)) == 0


def test_leaderboard_cells_give_the_seed_count_and_a_sample_sd():
  row = lambda entry, acc, seed=0, target=4.0: dict(
      track='client', dataset='mnist', entry=entry, target_epsilon=target, seed=seed,
      final_test_accuracy=acc, stop_reason='', table='main', within_2pct='yes',
      wall_seconds=10.0)
  assert benchmark.cell_text([row('dp_fedavg', 0.9)]) == '90.00 (1 seed)'
  three = [row('dp_fedavg', a, s) for s, a in enumerate((0.90, 0.92, 0.94))]
  assert benchmark.cell_text(three) == '92.00 +- 2.00 (3 seeds: 90.0, 92.0, 94.0)'
  lines = benchmark.leaderboard(three + [row('fedavg', 0.97, target='')], 'client',
                                'mnist', [4.0])
  assert '| dp_fedavg | 92.00 +- 2.00 (3 seeds: 90.0, 92.0, 94.0) | 1 | 10 |' in lines
  assert '| fedavg (non-private ceiling) | 97.00 (1 seed) | - | 10 |' in lines


def test_the_readme_projects_the_cost_from_the_pilot_runs(tmp_path):
  from experiments import common  # pylint: disable=g-import-not-at-top
  args = argparse.Namespace(track=['client', 'sample'], datasets=['mnist'],
                            epsilons=[1.0, 4.0, 16.0], seeds=[0, 1, 2], quick=False,
                            runs_dir=str(tmp_path))
  assert benchmark.pilot_lines(args) == []
  entry = next(e for e in benchmark.ENTRIES if e.name == 'dp_fedavg')
  spec = (entry, 'mnist', benchmark.TUNING_EPSILON, 0, benchmark.grid(entry)[0])
  out = tmp_path / (benchmark.run_name(*spec) + '_pilot')
  os.makedirs(out)
  common.write_table(str(out / 'metrics.csv'),  # the first round (compiling) is left out
                     [dict(round=r, round_seconds=s) for r, s in ((1, 9.0), (2, 0.5),
                                                                   (3, 0.7), (4, 0.6))])
  client = [e for e in benchmark.ENTRIES if e.track == 'client']
  runs = sum(benchmark.TRIALS + (1 if e.knob in ('none', 'claimed') else 3) * 3 - 1
             for e in client)
  hours = runs * benchmark.CLIENT['rounds'] * 0.6 / 3600
  line = (f'client track (dp_fedavg): median round 0.600 s; {runs} runs of 100 rounds would '
          f'take about {hours:.1f} h alone at that rate (Adap DP-FL trains every client every '
          'round: its runs cost more)')
  assert benchmark.pilot_lines(args) == [line]
  # On a fresh checkout the runs folder is empty: the copy under the figures is read.
  os.rename(out, tmp_path / 'figs')
  os.makedirs(tmp_path / 'figs_root' / 'runs')
  os.rename(tmp_path / 'figs', tmp_path / 'figs_root' / 'runs' / out.name)
  assert benchmark.pilot_lines(args) == []
  args.figures_dir = str(tmp_path / 'figs_root')
  assert benchmark.pilot_lines(args) == [line]


def test_the_readme_prices_the_runs_left_at_the_recorded_wall_times():
  args = argparse.Namespace(track=['client'], datasets=['mnist'], epsilons=[1.0, 4.0],
                            seeds=[0, 1], quick=False)
  client = [e for e in benchmark.ENTRIES if e.track == 'client']
  dp, ceiling = (next(e for e in client if e.name == n) for n in ('dp_fedavg', 'fedavg'))
  row = lambda e, w, eps='': dict(track='client', entry=e.name, dataset='mnist',
                                  target_epsilon=eps, wall_seconds=w)
  # dp_fedavg tuned (trials at 100 s, 300 s: median 200 s) with one main run of its 2 x 2
  # made; the no-knob ceiling tuned, none of its 2 seeds made; the rest untuned, priced at
  # the track's median (100, 150, 300, 500 s: 225 s).
  tuned = {('dp_fedavg', 'mnist'): ((0.1, 1.0), [row(dp, 100), row(dp, 300)]),
           ('fedavg', 'mnist'): ((0.1, 1.0), [row(ceiling, 150)])}
  rows = [row(dp, 500, 4.0)]
  others = [e for e in client if e.name not in ('dp_fedavg', 'fedavg')]
  tuning = sum(len(benchmark.grid(e)) for e in others)
  main = 3 + 2 + sum((1 if e.knob in ('none', 'claimed') else 2) * 2 for e in others)
  hours = (3 * 300 + 2 * 150 + sum(
      (len(benchmark.grid(e)) + (1 if e.knob in ('none', 'claimed') else 2) * 2) * 225
      for e in others)) / 3600
  # dp_fedavg's median is over its own three runs (100, 300, 500: 300 s).
  assert benchmark.remaining_line(args, tuned, rows).startswith(
      f'Still to run: {tuning} tuning and {main} main runs, about {hours:.1f} h at the wall '
      'time per run recorded so far')
  done = {(e.name, 'mnist'): ((0.1, 1.0), []) for e in client}
  made = [row(e, 10, eps) for e in client for eps in (
      [''] if e.knob in ('none', 'claimed') else [1.0, 4.0]) for _ in range(2)]
  assert benchmark.remaining_line(args, done, made) == 'Nothing left to run.'


def test_benchmark_quick_end_to_end(tmp_path, data_dir, monkeypatch):
  figs = tmp_path / 'figs'
  argv = ['--quick', '--datasets', 'mnist', '--epsilons', '4', '--seeds', '0',
          '--data-dir', data_dir, '--runs-dir', str(tmp_path / 'runs'),
          '--figures-dir', str(figs)]
  assert benchmark.main(argv) == 0
  with open(figs / 'results.csv') as f:
    rows = list(csv.DictReader(f))
  assert {r['entry'] for r in rows} == {e.name for e in benchmark.ENTRIES}
  adaptive = {e.name for e in benchmark.ENTRIES if e.adaptive}
  for r in rows:
    if r['knob'] in ('noise_multiplier', 'epsilon'):  # calibrated dry, read from the run
      assert float(r['epsilon_guaranteed']) <= 4, r  # the budget stops the adaptive ones
      if r['entry'] not in adaptive:
        assert float(r['epsilon_guaranteed']) >= 4 * 0.98 and r['within_2pct'] == 'yes', r
    if r['knob'] == 'claimed' and r['method'] != 'aadp_fl':
      assert r['epsilon_guaranteed'] == 'inf', r
    if r['knob'] == 'claimed' and r['method'] == 'aadp_fl':  # far above its claim
      assert float(r['epsilon_guaranteed']) > 100 * float(r['epsilon_claimed']), r
  with open(figs / 'tuning.csv') as f:
    assert len(list(csv.DictReader(f))) == len(benchmark.ENTRIES)  # one trial each (quick)
  readme = (figs / 'README.md').read_text()
  assert '## client-level track, mnist' in readme and '## What the numbers say' in readme
  # The controls run each entry at the other's calibrated noise multiplier.
  with open(figs / 'controls.csv') as f:
    controls = {(r['entry'], r['noise_of']): r for r in csv.DictReader(f)}
  z = {r['entry']: float(r['noise_multiplier']) for r in rows if r['noise_multiplier']}
  assert {(c.entry, c.noise_of) for c in benchmark.CONTROLS} == set(controls)
  for c in benchmark.CONTROLS:
    control = controls[(c.entry, c.noise_of)]
    if c.noise == 'calibrated':  # another reading at its own epsilon 4, the same DP event
      assert '_eps4_bounded_' in control['run'] and control['reading'] == c.reading
      assert 0 < float(control['epsilon_guaranteed']) <= 4
      own = next(r for r in rows if r['entry'] == c.entry)
      assert float(control['noise_multiplier']) == pytest.approx(
          float(own['noise_multiplier']), rel=0.02)
      config = json.loads(open(os.path.join(control['run'], 'config.json')).read())
      assert config['method_options']['clip_statistic'] == 'bounded'
      continue
    assert f'_noiseof_{c.noise_of}_' in control['run']
    if c.noise == 'multiplier':
      assert float(control['noise_multiplier']) == z[c.noise_of]
    elif c.noise == 'none':  # noiseless: no guarantee
      assert float(control['noise_multiplier']) == 0.0 and control['source_noise'] == 'no noise'
      assert control['epsilon_guaranteed'] == 'inf'
    else:  # the per-client noise its run states, carried to the cohort mean
      source = next(r for r in rows if r['entry'] == c.noise_of)
      metrics = common.read_rows(os.path.join(source['run'], 'metrics.csv'))
      if metrics[0].get('noise_multiplier_rms'):  # AADP-FL: its clients' rms sigma
        z_k, what = np.mean([float(m['noise_multiplier_rms']) for m in metrics]), 'rms z_k'
      else:  # DP-FedAvg-AGS: the cohort's mean noise std over the clip
        z_k = np.mean([float(m['noise_std']) for m in metrics]) / float(source['clip'])
        what = 'z_k'
      cohort = np.mean([float(m['cohort_size']) for m in metrics])
      assert float(control['noise_multiplier']) == pytest.approx(z_k * np.sqrt(cohort))
      assert control['source_noise'].startswith(f'{what} {common.fmt(z_k, 3)} per client')
  assert '## Controls' in readme and benchmark.CONTROLS[0].question in readme
  assert os.path.exists(figs / 'client_mnist.png') and os.path.exists(figs / 'sample_mnist.png')
  assert all(name.endswith('_quick') for name in os.listdir(tmp_path / 'runs')
             if name != 'calibrations.json')  # never the full-size runs' folders
  # Every run (tuning ones included) is copied beside the results, with the calibrated
  # values: a fresh checkout (empty runs folder) restores and reuses them.
  copies = {p.parent.name for p in (figs / 'runs').glob('*/summary.json')}
  assert copies == {p.parent.name for p in (tmp_path / 'runs').glob('*/summary.json')}
  calibrated = json.loads((figs / 'calibrations.json').read_text())
  assert copies and len(calibrated) == sum(
      r['knob'] in ('noise_multiplier', 'epsilon') for r in rows) + sum(
          c.noise == 'calibrated' for c in benchmark.CONTROLS)
  assert not (tmp_path / 'runs' / 'calibrations.json').exists()
  # A second call reuses every run and calibration: no dry run, no run trained again.
  summaries = {p: os.path.getmtime(p) for p in (tmp_path / 'runs').glob('*/summary.json')}

  def no_dry_run(*a, **k):
    raise AssertionError('calibrated again')
  monkeypatch.setattr(calibration, 'DryRun', no_dry_run)
  assert benchmark.main(argv) == 0
  assert {p: os.path.getmtime(p) for p in summaries} == summaries
  # --stage report writes the same tables from the finished runs alone, and says how far
  # the grid is when a run has not finished (its entry is then not tuned yet).
  results = (figs / 'results.csv').read_text()
  assert benchmark.main(argv + ['--stage', 'report']) == 0
  assert (figs / 'results.csv').read_text() == results
  assert 'Complete: every planned run has finished.' in (figs / 'README.md').read_text()
  n = len(benchmark.ENTRIES)
  os.remove(sorted(summaries)[0])
  assert benchmark.main(argv + ['--stage', 'report']) == 0
  assert (f'**In progress**: {n - 1} of {n} tuning runs and {n - 1} of {n - 1} main runs '
          f'(of the {n - 1} entry-dataset pairs tuned so far)') in (figs / 'README.md').read_text()
  assert {p: os.path.getmtime(p) for p in summaries if os.path.exists(p)} == {
      p: t for p, t in summaries.items() if os.path.exists(p)}


def test_quick_needs_its_own_figures_folder(tmp_path):
  with pytest.raises(SystemExit):
    benchmark.main(['--quick', '--runs-dir', str(tmp_path)])
  with pytest.raises(SystemExit):  # the same folder spelt another way
    benchmark.main(['--quick', '--runs-dir', str(tmp_path), '--figures-dir',
                    os.path.abspath(os.path.join('figures', 'benchmark', ''))])


def test_a_control_splits_the_gap_into_noise_and_the_rest():
  row = lambda entry, acc, z: dict(entry=entry, dataset='mnist', seed='0',
                                   target_epsilon='4.0', final_test_accuracy=str(acc),
                                   noise_multiplier=str(z))
  own, source = row('ddgauss', 0.25, 4.0), row('dp_fedavg', 0.95, 1.0)
  control = dict(row('ddgauss', 0.9, 1.0), noise_of='dp_fedavg', question='why?',
                 source_noise='z 1', noise_carried='multiplier',
                 epsilon_guaranteed='15.0', stop_reason='')
  line = benchmark.control_split(control, own, source)
  # gap -70 = (25 - 90) from the noise + (90 - 95) from the rest
  assert ('ddgauss 25.00% vs dp_fedavg 95.00% (-70.00 points). Of that gap, -65.00 come '
          'from the noise multiplier (4 vs 1') in line
  assert '-5.00 from the rest of the mechanism at equal noise' in line
  section = '\n'.join(benchmark.controls_section([own, source], [control]))
  assert '| mnist | ddgauss at dp_fedavg\'s noise | 1 | 15 | 90.00 | 25.00 (z 4) | 95.00 (z 1) |' in section
  assert line in section and '- why?' in section
  assert benchmark.controls_section([own, source], []) == []
  # A control whose source run states no noise it can carry: listed with the reason.
  waiting = dict(entry='dp_fedavg', dataset='mnist', noise_of='aadp_fl', question='how?',
                 not_run='the run r states no positive noise_std')
  section = '\n'.join(benchmark.controls_section([own, source], [control, waiting]))
  assert '- how?\n\n- mnist: not run: the run r states no positive noise_std' in section
  assert section.count('| dataset | run |') == 1  # no table for a control not run
  # A noiseless control: no source run, so no split of the gap.
  noiseless = dict(row('ddgauss', 0.97, 0.0), noise_of='none', question='at all?',
                   source_noise='no noise', noise_carried='none', epsilon_guaranteed='inf',
                   stop_reason='')
  section = '\n'.join(benchmark.controls_section([own, source], [noiseless]))
  assert '| mnist | ddgauss without noise | 0 | inf | 97.00 | 25.00 (z 4) | - |' in section
  assert 'Of that gap' not in section and 'threshold' not in section


def test_a_reading_control_is_set_beside_the_entrys_own_run(tmp_path):
  runs = {}
  for name, clips in (('own', [0.5, 0.0]), ('ctrl', [0.4, 0.02, ''])):
    runs[name] = tmp_path / name
    os.makedirs(runs[name])
    common.write_table(str(runs[name] / 'metrics.csv'),
                       [dict(round=i + 1, clip_norm=c) for i, c in enumerate(clips)])
  own = dict(entry='adap_dp_fl', dataset='mnist', seed='0', target_epsilon='4.0',
             final_test_accuracy='0.1', noise_multiplier='6.5', epsilon_guaranteed='3.95',
             run=str(runs['own']))
  control = dict(own, final_test_accuracy='0.6', noise_of='adap_dp_fl', question='why?',
                 source_noise='calibrated to epsilon 4', noise_carried='calibrated',
                 reading='another reading', epsilon_guaranteed='3.97', stop_reason='budget',
                 run=str(runs['ctrl']))
  line = benchmark.reading_split(control, own)
  assert line == ('mnist: at epsilon_guaranteed 3.95 and 3.97 (target 4) adap_dp_fl 10.00% as '
                  'the entry runs vs 60.00% with another reading (+50.00 points). Final mean '
                  'clipping threshold C: 0 as the entry runs, 0.02 in the control. One seed '
                  'each: a difference within the seeds\' spread is not a verdict yet.')
  section = '\n'.join(benchmark.controls_section([own], [control]))
  assert ('| mnist | adap_dp_fl, another reading | 6.5 | 3.97 | 60.00 | 10.00 (z 6.5) | - | '
          'budget |') in section and line in section and 'Of that gap' not in section
  assert benchmark.final_metric(str(runs['ctrl']), 'clip_norm') == 0.02  # last finite
  noiseless = dict(control, noise_carried='none', noise_of='none', source_noise='no noise')
  assert ('- mnist: adap_dp_fl without noise 60.00%, its final mean clipping threshold C '
          '0.02.') in benchmark.controls_section([own], [noiseless])
  assert benchmark.final_metric(str(runs['ctrl']), 'noise') is None
  os.remove(runs['own'] / 'metrics.csv')  # no threshold logged: no threshold sentence
  assert 'threshold' not in benchmark.reading_split(control, own)


def test_the_claimed_budget_table_reads_the_audited_epsilon(tmp_path):
  audit = [dict(run='dp_fedags', every_round_lower_bound='4.094',
                final_model_lower_bound='0.8247', every_round_estimate='173.5')]
  assert benchmark.audited('dp_fedags', audit) == '4.094 / 0.8247 (estimate 173.5)'
  assert benchmark.audited('cosfed', audit) == 'not audited yet'
  path = tmp_path / 'audit.csv'
  common.write_table(str(path), audit)
  row = dict(track='client', dataset='mnist', entry='dp_fedags', method='dp_fedags',
             table='inf', knob='claimed', target_epsilon='', seed='0', epsilon_claimed='0.5',
             epsilon_guaranteed='inf', final_test_accuracy='0.9', stop_reason='',
             wall_seconds='10', learning_rate='0.1', clip='0.5', within_2pct='')
  args = argparse.Namespace(quick=False, epsilons=[4.0], seeds=[0], datasets=['mnist'],
                            track=['client'], runs_dir=str(tmp_path), audit_results=str(path))
  progress = {'tuning': (0, 1), 'main': (1, 1)}
  text = benchmark.readme([row], {}, ['cmd'], args, {}, progress)
  assert '| 0.5 | inf | 90 | 4.094 / 0.8247 (estimate 173.5) |' in text
  args.audit_results = str(tmp_path / 'none.csv')  # no audit yet
  assert '| 0.5 | inf | 90 | not audited yet |' in benchmark.readme([row], {}, ['cmd'], args,
                                                                    {}, progress)


def test_a_control_carries_per_client_noise_to_the_cohort_mean(tmp_path):
  run = tmp_path / 'run'
  os.makedirs(run)
  common.write_table(str(run / 'metrics.csv'), [  # z_k 8 and 12 (C 0.5), K 49 and 51
      dict(round=1, noise_std=4.0, cohort_size=49), dict(round=2, noise_std=6.0,
                                                         cohort_size=51)])
  source = dict(run=str(run), clip='0.5', noise_multiplier='1.0')
  per_client = benchmark.Control('dp_fedavg', 'dp_fedavg_ags', 'why?',
                                 noise='per_client_on_mean')
  z, text = benchmark.carried_noise(per_client, source)
  assert z == pytest.approx(10.0 * np.sqrt(50.0))  # the noise of a 50-client mean
  assert text == 'z_k 10 per client, K 50: 70.7 on the mean'
  assert benchmark.carried_noise(benchmark.Control('a', 'b', 'why?'), source) == (1.0, 'z 1')
  common.write_table(str(run / 'metrics.csv'), [dict(round=1, noise_std='', cohort_size=50)])
  with pytest.raises(ValueError, match='no positive noise_multiplier_rms or noise_std'):
    benchmark.carried_noise(per_client, source)
  # A run that states its clients' rms multiplier (AADP-FL) is read by it.
  common.write_table(str(run / 'metrics.csv'), [
      dict(round=1, noise_multiplier_rms=3.0, cohort_size=16),
      dict(round=2, noise_multiplier_rms=5.0, cohort_size=16)])
  assert benchmark.carried_noise(per_client, source) == (16.0, 'rms z_k 4 per client, K 16: '
                                                         '16 on the mean')
  with pytest.raises(ValueError, match='noise must be one of'):
    benchmark.Control('a', 'b', 'why?', noise='sum')
  with pytest.raises(ValueError, match='exactly when noise is calibrated'):
    benchmark.Control('a', 'a', 'why?', noise='calibrated')
  with pytest.raises(ValueError, match='exactly when noise is calibrated'):
    benchmark.Control('a', 'b', 'why?', options=dict(x=1), reading='r', tag='t')
  with pytest.raises(ValueError, match="noise_of must be 'a'"):
    benchmark.Control('a', 'b', 'why?', noise='calibrated', options=dict(x=1), reading='r',
                      tag='t')


def test_a_control_whose_run_has_not_finished_is_listed_as_pending(tmp_path, monkeypatch):
  control = benchmark.CONTROLS[0]
  monkeypatch.setattr(benchmark, 'control_specs', lambda args, tuned, rows: (
      [(control, 'mnist', (0.1, 0.5), 1.0, 'z 1')], []))
  args = argparse.Namespace(runs_dir=str(tmp_path / 'runs'),
                            figures_dir=str(tmp_path / 'figs'), data_dir='d', quick=True)
  rows = benchmark.control_rows(args, {}, [])
  assert rows == [dict(entry=control.entry, dataset='mnist', noise_of=control.noise_of,
                       question=control.question, not_run=benchmark.PENDING)]
  lines = benchmark.controls_section([], rows)
  assert f'- {control.question}' in lines
  assert f'- mnist: not run: {benchmark.PENDING}' in lines
