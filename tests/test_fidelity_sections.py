"""The fidelity sections of the A-DPFL and Adap DP-FL reports (issue 42)."""

import os

from experiments import common


def _section_rows(lines: list[str]) -> dict[str, list[str]]:
  """`{number or claim: its cells}` of the section's tables."""
  rows = {}
  for line in lines:
    if line.startswith('| ') and not line.startswith(('| number |', '| claim |')):
      cells = [c.strip() for c in line.strip('|').split('|')]
      rows[cells[0]] = cells[1:]
  return rows


def _a_dpfl_folder(path, ceiling: bool):
  """The sweep's choice (E = 5, lr = 0.1), its Table 2 MNIST rows, Fig. 4a and Fig. 5
  there, the first regeneration's Table 2 and Fig. 5, and, with `ceiling`, a
  non-private IID run below the paper's 98.9%."""
  common.write_table(str(path / 'local_epochs.csv'), [
      dict(dataset='mnist', local_epochs=1, learning_rate=0.05, final_test_accuracy=0.9275,
           chosen='False'),
      dict(dataset='mnist', local_epochs=5, learning_rate=0.1, final_test_accuracy=0.9672,
           chosen='True')])
  for sfx, rows in (('_E5_lr0.1', [('non-IID', 'top_k', 0.9301), ('IID', 'top_k', 0.9346),
                                   ('IID', 'weighted_sample', 0.9403)]),
                    ('', [('non-IID', 'top_k', 0.8144), ('IID', 'top_k', 0.8168)])):
    common.write_table(str(path / f'table2{sfx}.csv'), [
        dict(dataset='mnist', setting=s, selection=sel, tffdp_final_accuracy=a)
        for s, sel, a in rows])
  common.write_table(str(path / 'fig4_mnist_E5_lr0.1.csv'), [
      dict(method=m, final_test_accuracy=a) for m, a in (
          ('Non-private FL', 0.9672), ('DPFL', 0.8825), ('CL-FL', 0.959), ('A-DPFL', 0.9301))])
  for sfx, holds in (('_E5_lr0.1', (3, 6, 7, 2)), ('', (4, 4, 10, 2))):
    sigmas = [s for (s, n) in zip((1.0, 0.7, 0.49, 0.343), holds) for _ in range(n)]
    sigmas += [0.24] * (50 - len(sigmas))
    common.write_table(str(path / f'fig5_mnist{sfx}.csv'), [
        dict(round=i + 1, noise_multiplier=s) for i, s in enumerate(sigmas)])
  if ceiling:
    common.write_table(str(path / 'ceiling.csv'), [
        dict(dataset='mnist', partition='iid', local_epochs=5, learning_rate=0.1,
             final_test_accuracy=96.9, best_test_accuracy=96.9, gain_last_10pct=0.3,
             paper_private_iid=98.9, rounds=50, wall_seconds=1.0)])


def test_a_dpfl_fidelity_counts_readings_and_names_the_ceiling_as_cause(tmp_path):
  from experiments.a_dpfl import report as a_dpfl_report  # pylint: disable=g-import-not-at-top
  _a_dpfl_folder(tmp_path, ceiling=True)
  lines = a_dpfl_report._fidelity(str(tmp_path))
  # Within: MNIST non-IID (93.01 vs 94.2) by default; 0.7's 4-round hold at E = 1 only.
  assert lines[0].startswith(
      '**1 of 8 paper numbers within tolerance under tffdp\'s default reading, 2 under the '
      'best reading run; 0 of 5 claims reproduced.**')
  assert lines[0].endswith('Misses without a controlled cause: 3.')
  rows = _section_rows(lines)
  iid = rows['Table 2, MNIST, IID, A-DPFL final accuracy']
  assert iid[:6] == ['98.9', '93.46', 'no', 'E = 5, lr = 0.1, weighted_sample', '94.03', 'no']
  assert iid[6].startswith('non-private FedAvg on the same split reaches at most 96.90% in 50 '
                           'rounds (ceiling, iid, E = 5, lr = 0.1, `python -m '
                           'experiments.a_dpfl.ceiling`')
  assert rows['Fig. 5, MNIST, rounds sigma holds at 0.7'][:6] == [
      '4', '6', 'no', 'E = 1', '4', 'yes']
  assert rows['Fig. 4a (MNIST): A-DPFL > CL-FL > DPFL in final test accuracy'][0] == (
      'not reproduced')  # CL-FL 95.90 above A-DPFL 93.01 by more than a point
  assert rows['Table 2 (MNIST): IID above non-IID (paper +4.7 points)'][0] == 'tie'
  assert rows['Fig. 4b (CIFAR-10): A-DPFL > CL-FL > DPFL in final test accuracy'][0] == (
      'not run')
  # Without the ceiling run, nothing backs a cause of the IID miss.
  os.remove(tmp_path / 'ceiling.csv')
  lines = a_dpfl_report._fidelity(str(tmp_path))
  assert lines[0].endswith('Misses without a controlled cause: 4.')
  assert _section_rows(lines)['Table 2, MNIST, IID, A-DPFL final accuracy'][6] == (
      'no controlled cause yet')


def _adap_dp_fl_folder(path, controls: dict):
  """The committed Figs. 3-6 and seed numbers, and `controls` (`{curve: (accuracy,
  rounds)}`) as Fashion-MNIST's `controls.csv`."""
  fig4 = {'mnist': [('noise decay', 93.43, 15851), ('constant sigma = 3', 93.02, 8964),
                    ('constant sigma = 4', 93.53, 16439), ('constant sigma = 6', 93.63, 37800)],
          'fashion_mnist': [('noise decay', 72.08, 6571), ('constant sigma = 2', 71.18, 3628),
                            ('constant sigma = 3', 73.34, 8964),
                            ('constant sigma = 4', 74.77, 16439)]}
  common.write_table(str(path / 'fig4.csv'), [
      dict(dataset=d, curve=c, tffdp_test_accuracy=a, rounds=n)
      for d, rows in fig4.items() for c, a, n in rows])
  fig3 = {'mnist': (9.67, 84.12, 87.94), 'fashion_mnist': (8.94, 64.12, 58.81)}
  common.write_table(str(path / 'fig3.csv'), [
      dict(dataset=d, curve=c, tffdp_test_accuracy=a) for d, (g, k, u) in fig3.items()
      for c, a in (('adaptive clipping, budget on epsilon_guaranteed', g),
                   ('constant C = 1.0', k),
                   ('adaptive clipping, noisy mean of the unclipped norms, budget on the '
                    'paper\'s count', u))])
  fig5 = {'mnist': (36.68, 13375, 93.63, 92.97), 'fashion_mnist': (9.14, 7661, 74.77, 72.24)}
  common.write_table(str(path / 'fig5.csv'), [
      dict(dataset=d, curve=c, tffdp_test_accuracy=a, rounds=rounds)
      for d, (adap, rounds, base, u) in fig5.items()
      for c, a in (('Adap DP-FL, budget on epsilon_guaranteed', adap), ('DP-FL (C = 1.0)', base),
                   ('adaptive clipping, noisy mean of the unclipped norms, budget on the '
                    'paper\'s count', u))])
  common.write_table(str(path / 'fig6.csv'), [
      dict(dataset='mnist', run='noise decay (C = 1.0)', tffdp_final_sigma=2.9949),
      dict(dataset='fashion_mnist', run='noise decay (C = 1.0)', tffdp_final_sigma=2.0745)])
  common.write_table(str(path / 'seeds.csv'), [
      dict(seed=i, dataset=d, tffdp_test_accuracy=a) for d, accs in (
          ('mnist', (93.02, 93.52, 92.77)), ('fashion_mnist', (73.34, 72.1, 71.38)))
      for i, a in enumerate(accs)])
  common.write_table(str(path / 'controls.csv'), [
      dict(dataset='fashion_mnist', curve=c, tffdp_test_accuracy=a, rounds=n)
      for c, (a, n) in controls.items()])


def test_adap_dp_fl_fidelity_cites_a_control_only_where_its_numbers_explain_the_gap(tmp_path):
  from experiments.adap_dp_fl import report as adap_dp_fl_report  # pylint: disable=g-import-not-at-top
  controls = {'constant sigma = 2 (Fig. 4)': (71.18, 3628),
              'no noise, clipped (C = 1)': (75.0, 3628),
              'no noise, no clipping': (80.0, 3628),
              'no validation hold-out': (72.5, 4400),
              'lr x 2 (0.002)': (76.5, 3628)}
  _adap_dp_fl_folder(tmp_path, controls)
  lines = adap_dp_fl_report._fidelity(str(tmp_path))
  assert lines[0].startswith(
      '**7 of 12 paper numbers within tolerance under tffdp\'s default reading, 8 under the '
      'best reading run; 0 of 6 claims reproduced.**')
  assert lines[0].endswith('Misses without a controlled cause: 3.')
  rows = _section_rows(lines)
  sigma2 = rows['Fig. 4, Fashion-MNIST, constant sigma = 2']
  assert sigma2[:6] == ['77.28', '71.18', 'no', 'no validation hold-out (controls)', '72.50', 'no']
  # Unclipped without noise (80%) clears the paper; clipped at C = 1 (75%) does not.
  assert sigma2[6].startswith('without noise, at the same clip C = 1, the setup reaches only '
                              '75.00% in 3628 rounds')
  # The control made 3628 rounds: it bounds neither the longer decay run nor sigma 3's.
  assert rows['Fig. 4, Fashion-MNIST, noise decay'][6] == 'no controlled cause yet'
  assert rows['Fig. 5, MNIST, Adap DP-FL'][5] == 'yes'  # unclipped norms: 92.97 vs 94.15
  assert rows['Fig. 4 (Fashion-MNIST): noise decay above every constant sigma (paper 78.48% '
              'vs 77.28 / 77.03 / 75.14%)'][0] == 'not reproduced'  # sigma 4 by 2.69 > 1.96
  assert rows['Fig. 4 (MNIST): noise decay above every constant sigma (paper 93.56% vs '
              '92.87 / 92.86 / 92.34%)'][0] == 'tie'  # every gap within the 0.75 spread
  # Noise-free controls above the paper: twice the learning rate (76.5, within 1.5 points)
  # is then the cause; one that stays short of the paper is not.
  for lr2, cause in ((76.5, 'at twice the paper\'s learning rate the same run reaches 76.50%'),
                     (74.0, 'no controlled cause yet')):
    controls.update({'no noise, clipped (C = 1)': (78.0, 3628), 'lr x 2 (0.002)': (lr2, 3628)})
    _adap_dp_fl_folder(tmp_path, controls)
    rows = _section_rows(adap_dp_fl_report._fidelity(str(tmp_path)))
    assert rows['Fig. 4, Fashion-MNIST, constant sigma = 2'][6].startswith(cause)


def test_adap_dp_fl_no_stop_controls_of_other_curves_give_their_cells_a_cause():
  from experiments.adap_dp_fl import report as adap_dp_fl_report  # pylint: disable=g-import-not-at-top
  row = lambda curve, rounds, at='', there='': dict(
      curve=curve, rounds=rounds, tffdp_test_accuracy=75.2, epsilon_guaranteed=4.9,
      first_round_within_tolerance=at, epsilon_guaranteed_there=there)
  ctrl = [row('no budget stop (4x the rounds)', 14512, 12150, 3.9),
          row('no budget stop, sigma = 3 (4x the rounds)', 35856, 20000, 3.1),
          row('no budget stop, noise decay (4x the rounds)', 26284)]
  cause = adap_dp_fl_report._control_cause  # pylint: disable=protected-access
  # sigma_min's own control, then sigma 3's (reaching the paper past its 8964 rounds).
  assert 'round 12150' in cause(ctrl, 77.28, 3628, True)
  text = cause(ctrl, 77.03, 8964, False, 'sigma = 3')
  assert text.startswith('the budget stops the run while it still learns') and (
      'round 20000, where its epsilon_guaranteed is 3.1 (`python -m '
      'experiments.adap_dp_fl.controls --no-stop 3`, "no budget stop, sigma = 3') in text
  # The decay control never comes within tolerance in 4x its rounds: out of reach.
  assert cause(ctrl, 78.48, 6571, False, 'noise decay').startswith(
      'the paper\'s 78.48% is out of reach of this setup at this noise: without the budget '
      'stop the same run stays below its tolerance for 26284 rounds, ending at 75.2% with '
      'epsilon_guaranteed 4.9 (`python -m experiments.adap_dp_fl.controls --no-stop decay`')
  # No control of the cell (sigma 4), or one no longer than the cell's run: no cause.
  assert cause(ctrl, 75.14, 16439, False, 'sigma = 4') == 'no controlled cause yet'
  assert cause(ctrl, 78.48, 26284, False, 'noise decay') == 'no controlled cause yet'


def test_adap_dp_fl_fig5_miss_takes_the_no_stop_control_of_its_closest_reading(tmp_path):
  from experiments.adap_dp_fl import report as adap_dp_fl_report  # pylint: disable=g-import-not-at-top
  run = lambda name, curve, rounds, acc: dict(
      dataset='fashion_mnist', curve=curve, rounds=rounds, tffdp_test_accuracy=acc,
      run=f'$RUNS_DIR/adap_dp_fl/fashion_mnist_{name}_seed0')
  default = run('adap_dp_fl', 'Adap DP-FL, budget on epsilon_guaranteed', 7661, 9.14)
  fig5 = [default, run('adap_dp_fl_unclipped_paper_count', 'adaptive clipping, unclipped',
                       6454, 72.24)]
  copy = tmp_path / 'runs' / 'fashion_mnist_adap_dp_fl_seed0'
  copy.mkdir(parents=True)
  (copy / 'metrics_evaluated.csv').write_text('round,clip_norm\n7650,0.00012\n')
  no_stop = lambda at, there='inf', claimed='', rounds=25816: dict(
      curve="no budget stop, Fig. 5's Adap DP-FL, unclipped norms (4x the rounds)",
      rounds=rounds, tffdp_test_accuracy=79.1, epsilon_guaranteed='inf',
      first_round_within_tolerance=at, epsilon_guaranteed_there=there,
      epsilon_claimed_there=claimed)
  cause = adap_dp_fl_report._fig5_cause  # pylint: disable=protected-access
  # Within the tolerance at round 20000, past the reading's 6454 rounds: the budget cause,
  # with the epsilon on the paper's count there and the default run's collapse.
  text = cause(str(tmp_path), [no_stop(20000, claimed='3.7')], 79.56, default, fig5)
  assert text.startswith('the budget stops the run while it still learns') and (
      'at round 20000, where its epsilon_guaranteed is inf and its epsilon on the paper\'s '
      'count 3.7 (`python -m experiments.adap_dp_fl.controls --no-stop fig5_unclipped`') in (
          text) and 'ends it at round 6454' in text and text.endswith(
              'a final mean C of 0.00012')
  # Within it before the budget's round, or no such control: no cause.
  assert cause(str(tmp_path), [no_stop(5000, claimed='1.5')], 79.56, default, fig5) == (
      'no controlled cause yet')
  assert cause(str(tmp_path), [], 79.56, default, fig5) == 'no controlled cause yet'
  # Never within it in 4x the rounds: out of reach at this noise.
  assert cause(str(tmp_path), [no_stop('')], 79.56, default, fig5).startswith(
      "the paper's 79.56% is out of reach of this setup at this noise")


def test_a_dpfl_ceiling_within_tolerance_of_the_paper_is_not_a_cause(tmp_path):
  from experiments.a_dpfl import report as a_dpfl_report  # pylint: disable=g-import-not-at-top
  _a_dpfl_folder(tmp_path, ceiling=True)
  rows = common.read_rows(str(tmp_path / 'ceiling.csv'))
  rows[0]['final_test_accuracy'] = 97.9   # 1.0 below the paper's 98.9: within tolerance
  common.write_table(str(tmp_path / 'ceiling.csv'), rows)
  text = '\n'.join(a_dpfl_report._fidelity(str(tmp_path)))  # pylint: disable=protected-access
  assert 'reaches at most 97.90%' not in text
  section = '\n'.join(a_dpfl_report._ceiling_section(str(tmp_path)))  # pylint: disable=protected-access
  assert 'the setup allows the IID cell' in section
