"""The fidelity sections of the AADP-FL, cosAFed and DP-FedAGS reports (issue 42)."""

import os
import shutil

import pytest
from scipy import stats

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _aadp_fl_folder(path, same_budgets: bool):
  """A Table 2 with MNIST and CIFAR-10 rows (no Fashion-MNIST, no figures) whose CIFAR-10
  AADP-FL runs at l = 1e-4 and 2e-4 used the same budgets when `same_budgets`."""
  from experiments import common
  from experiments.aadp_fl import common as aadp_fl_common  # pylint: disable=g-import-not-at-top
  schedules = {'cifar10_a': ['4.0', '4.44'],
               'cifar10_b': ['4.0', '4.44'] if same_budgets else ['4.0', '4.0']}
  for name, budgets in schedules.items():
    common.write_table(str(path / 'runs' / name / 'metrics.csv'),
                       [dict(round=i + 1, epsilon_budget_max=b) for i, b in enumerate(budgets)])
  accs = {'mnist': dict(fedavg=92.08, aadp_fl=94.1, nadam_control=96.76,
                        dp_fedavg_theorem1=91.01, ddgauss_theorem1=91.06,
                        dp_scaffold_theorem1=81.96),
          'cifar10': {'fedavg': 55.23, 'aadp_fl': 55.63, 'aadp_fl_l2e-4': 56.45,
                      'dp_fedavg_theorem1': 47.59, 'ddgauss_theorem1': 46.92,
                      'dp_scaffold_theorem1': 30.85}}
  runs = {('cifar10', 'aadp_fl'): 'x/cifar10_a', ('cifar10', 'aadp_fl_l2e-4'): 'x/cifar10_b'}
  common.write_table(str(path / 'table2.csv'), [
      dict(dataset=d, curve=aadp_fl_common.LABELS[k], final_test_accuracy=v, rounds=50,
           stop_reason='', run=runs.get((d, k), f'x/{d}_{k}'))
      for d, row in accs.items() for k, v in row.items()])


def _aadp_fl_section(path):
  from experiments.aadp_fl import report as aadp_fl_report  # pylint: disable=g-import-not-at-top
  from experiments.common import read_rows  # pylint: disable=g-import-not-at-top
  tables = {name: read_rows(os.path.join(str(path), f'{name}.csv'))
            for name in aadp_fl_report.COMMANDS}
  return aadp_fl_report._fidelity(str(path), tables)


def test_aadp_fl_fidelity_decides_orderings_beyond_the_measured_spread(tmp_path):
  _aadp_fl_folder(tmp_path, same_budgets=True)
  lines = _aadp_fl_section(tmp_path)
  # Claims: Table 2 (bound and baselines) per dataset, Fig. 4b, Fig. 5 twice, Fig. 6,
  # Fig. 7a and 7b twice each; MNIST's bound fails by more than the 0.82-point spread of
  # the CIFAR-10 pair, the other three run claims pass by more; the rest are not run.
  assert lines[0].startswith(
      '**0 of 0 paper numbers within tolerance under tffdp\'s default reading, 0 under the '
      'best reading run; 3 of 14 claims reproduced.**')
  mnist, = [l for l in lines if l.startswith('| Table 2, MNIST: AADP-FL within 1 point')]
  assert '| not reproduced | AADP-FL 94.1% vs FedAvg 92.08% (+2.02 points)' in mnist
  assert 'clipping and noise cost -2.66 points, beyond the 1-point bound as well.' in mnist
  assert sum('| not run |' in l for l in lines) == 10
  assert 'spread measured in this folder, 0.82 points' in lines[-1]


def test_aadp_fl_fidelity_is_a_tie_without_a_measured_spread(tmp_path):
  _aadp_fl_folder(tmp_path, same_budgets=False)  # the l = 2e-4 run used other budgets
  lines = _aadp_fl_section(tmp_path)
  assert '; 0 of 14 claims reproduced.**' in lines[0]
  assert sum('| tie |' in l for l in lines) == 4
  assert 'and none is measured here, so each is a tie' in lines[-1]


def test_cosafed_fidelity_on_the_committed_table3(tmp_path):
  from experiments.cosafed import report as cosafed_report  # pylint: disable=g-import-not-at-top
  for name in ('table3.csv', 'table3_runs.csv', 'calibration.csv'):
    shutil.copy(os.path.join(ROOT, 'figures', 'cosafed', name), tmp_path / name)
  lines = cosafed_report._fidelity(str(tmp_path))
  assert lines[0].startswith(
      '**11 of 16 paper numbers within tolerance under tffdp\'s default reading, 11 under '
      'the best reading run; 2 of 4 claims reproduced.**')
  assert lines[0].endswith('Misses without a controlled cause: 0.')
  cosfed, = [l for l in lines if l.startswith('| Table 3, Equal, cosFed, total budget')]
  assert '| no | cosFed (reconstructed), cosine of updates (seed 0) |' in cosfed
  assert 'consecutive global models 1.0071, consecutive global updates 2.0018' in cosfed
  lapfed, = [l for l in lines if l.startswith('| Table 3, Equal, LAPFed, best_acc')]
  assert '| Delta_f = 3 (calibration, seed 0) | 83.41 | yes |' in lapfed


def test_cosafed_fidelity_names_the_seed_spread_only_where_a_seed_is_within(tmp_path):
  from experiments.cosafed import report as cosafed_report  # pylint: disable=g-import-not-at-top
  from experiments.common import read_rows, write_table  # pylint: disable=g-import-not-at-top
  for name in ('table3.csv', 'calibration.csv'):
    shutil.copy(os.path.join(ROOT, 'figures', 'cosafed', name), tmp_path / name)
  runs = read_rows(os.path.join(ROOT, 'figures', 'cosafed', 'table3_runs.csv'))
  write_table(str(tmp_path / 'table3_runs.csv'), runs)
  line, = [l for l in cosafed_report._fidelity(str(tmp_path))
           if l.startswith('| Table 3, Equal, cosAFed, best_acc')]
  assert 'within the seeds\' spread: seed 1 gives 79.85, within tolerance' in line
  # No seed within 1.5 points of the paper's 80.24: the miss has no controlled cause.
  for r in runs:
    if r['group'] == 'equal' and r['method'] == 'cosafed' and r['seed'] == '1':
      r['best_test_accuracy'] = '78.5'
  write_table(str(tmp_path / 'table3_runs.csv'), runs)
  lines = cosafed_report._fidelity(str(tmp_path))
  assert lines[0].endswith('Misses without a controlled cause: 1.')
  line, = [l for l in lines if l.startswith('| Table 3, Equal, cosAFed, best_acc')]
  assert line.endswith('| no controlled cause yet |')


def test_aadp_fl_fig4_claim_reads_the_aadp_fl_series_only(tmp_path):
  from experiments import common
  from experiments.aadp_fl import common as aadp_fl_common
  from experiments.aadp_fl import report as aadp_fl_report  # pylint: disable=g-import-not-at-top
  _aadp_fl_folder(tmp_path, same_budgets=True)
  rows = [dict(dataset='cifar10', series='AADP-FL', non_iid_percentage=p,
               final_test_accuracy=acc) for p, acc in ((0.0, 58.15), (0.5, 55.63), (1.0, 26.15))]
  # The controls at p = 0 and 1 (fig4's FedAvg and Nadam series) end above AADP-FL at p = 1.
  rows += [dict(dataset='cifar10', series=aadp_fl_common.LABELS[k], non_iid_percentage=p,
                final_test_accuracy=acc)
           for k in ('fedavg', 'nadam_control') for p, acc in ((0.0, 55.0), (1.0, 40.0))]
  common.write_table(str(tmp_path / 'fig4.csv'), rows)
  line, = [l for l in _aadp_fl_section(tmp_path) if l.startswith('| Fig. 4b')]
  assert line.startswith('| Fig. 4b, CIFAR-10: the larger the non-IID percentage p, the lower '
                         'the accuracy | reproduced | final test accuracy p = 0: 58.15%, '
                         'p = 0.5: 55.63%, p = 1: 26.15% (')
  verdict = aadp_fl_report._fig4_verdicts(rows)[2]
  assert verdict.startswith('- CIFAR-10: final accuracy falls at every step; p = 0 to p = 1: '
                            '58.15% -> 26.15%')


def test_dp_fedags_attack_accuracy_interval_and_the_sampling_cause():
  from experiments.dp_fedags import report as dp_fedags_report  # pylint: disable=g-import-not-at-top
  row = dict(dataset='mnist', method='DP-FedAGS', attack='White-box', accuracy='49.3',
             tpr='0.486', fpr='0.5', members='500')
  low, high = dp_fedags_report.attack_accuracy_interval(row)
  # 243 + 250 = 493 correct of 1,000: the binomial's Clopper-Pearson bounds, from the
  # beta quantiles directly.
  assert low == pytest.approx(100 * stats.beta.ppf(0.025, 493, 508), abs=1e-9)
  assert high == pytest.approx(100 * stats.beta.ppf(0.975, 494, 507), abs=1e-9)
  assert (49.3 - low, high - 49.3) == pytest.approx((3.15, 3.15), abs=0.05)  # ~ normal
  assert dp_fedags_report.attack_accuracy_interval(dict(row, tpr='')) is None
  assert dp_fedags_report.attack_accuracy_interval(dict(row, members='0')) is None
  cause = dp_fedags_report._mia_cause([], row, 50.86)  # pylint: disable=protected-access
  assert cause.startswith('within the sampling error') and '46.16-52.45%' in cause
  assert dp_fedags_report._mia_cause([], row, 53.0) == 'no controlled cause yet'  # pylint: disable=protected-access
  # Every example right: the interval reaches 100 and its lower end is not 100.
  low, high = dp_fedags_report.attack_accuracy_interval(dict(row, tpr='1', fpr='0',
                                                             accuracy='100'))
  assert high == 100 and 0 < 100 - low < 1


def test_dp_fedags_noise_control_cause_reads_the_measured_noise_std(tmp_path):
  from experiments import common  # pylint: disable=g-import-not-at-top
  from experiments.dp_fedags import common as dc  # pylint: disable=g-import-not-at-top
  from experiments.dp_fedags import report as dp_fedags_report  # pylint: disable=g-import-not-at-top
  kappa = float(dc.DELTA_S_SCALE)
  cell = ('mnist', 0.1, 'cpSGD')
  # Two seeds measuring per-round stds 0.7 / 0.8 and 0.74 / 0.76: mean 0.75. A kappa-1 run
  # of the same cell does not count.
  for seed, stds, scale in ((0, (0.7, 0.8), kappa), (1, (0.74, 0.76), kappa), (2, (9, 9), 1.0)):
    run = f'runs/dp_fedags/mnist_cpsgd_{seed}_{scale:g}'
    common.write_table(str(tmp_path / 'runs' / os.path.basename(run) / 'metrics.csv'),
                       [dict(round=i + 1, noise_std=v) for i, v in enumerate(stds)])
    with open(tmp_path / 'table4.csv', 'a') as f:
      if seed == 0:
        f.write('dataset,delta_s_scale,seed,epsilon,method,mean_accuracy,run\n')
      f.write(f'mnist,{scale},{seed},0.1,cpSGD,12.0,{run}\n')
  assert dp_fedags_report._noise_std(str(tmp_path), cell) == pytest.approx(0.75)  # pylint: disable=protected-access

  def calibration(std, acc):
    common.write_table(str(tmp_path / 'calibration.csv'), [
        dict(delta_s_scale=0.0, noise_std=0, mean_accuracy=90.3),
        dict(delta_s_scale=50.0, noise_std=0.159, mean_accuracy=89.3),
        dict(delta_s_scale=240.0, noise_std=std, mean_accuracy=acc)])
    return dp_fedags_report._noise_control(str(tmp_path), cell, 85.53)  # pylint: disable=protected-access

  cause = calibration(0.763, 11.5)
  assert cause.startswith('the reconstructed DP-FedAvg run at the same noise std per '
                          'coordinate reaches a mean of 11.50% (kappa 240, std 0.763; '
                          'cpSGD\'s runs at epsilon 0.1 measure 0.75;')
  assert calibration(0.9, 11.5) is None      # the std differs by more than 10%
  assert calibration(0.763, 84.5) is None    # the control is within tolerance of the paper
  assert calibration(0.763, 88.0) is None    # ... or above it: the noise does not explain
  assert dp_fedags_report._noise_control(str(tmp_path), ('mnist', 0.2, 'cpSGD'), 85.0) is None  # pylint: disable=protected-access


def test_summary_counts_every_papers_verdicts_and_lists_the_uncaused_misses(tmp_path,
                                                                             monkeypatch):
  from experiments import fidelity  # pylint: disable=g-import-not-at-top
  from experiments import summary  # pylint: disable=g-import-not-at-top
  # Every report's fidelity items read an empty folder without error.
  for paper in summary.PAPERS:
    (tmp_path / paper).mkdir()
    numbers, claims = summary.items(paper, str(tmp_path / paper))
    assert all(n.default is None and n.best is None for n in numbers)
    assert all(c.verdict == 'not run' for c in claims)
  fake = {
      'a_dpfl': ([fidelity.PaperNumber('x', 'accuracy', 90.0, 80.0, 85.123, 'kappa 3'),
                  fidelity.PaperNumber('y', 'accuracy', 90.0, 80.0, cause='a control'),
                  fidelity.PaperNumber('z', 'sigma', 2.0, 2.05)],
                 [fidelity.Claim('c1', 'not reproduced', ''), fidelity.Claim('c2', 'tie', '')]),
      'cosafed': ([fidelity.PaperNumber('w', 'budget', 4.0, None)],
                  [fidelity.Claim('c3', 'reproduced', ''), fidelity.Claim('c4', 'not run', '')])}
  monkeypatch.setattr(summary, 'items', lambda paper, figs: fake[paper])
  text = summary.build(str(tmp_path), papers=('a_dpfl', 'cosafed'))
  assert '| A-DPFL | 3 | 1 | 1 | 2 | 0 | 1 | 1 | 0 | 1 |' in text
  assert '| cosAFed | 1 | 0 | 0 | 2 | 1 | 0 | 0 | 1 | 0 |' in text
  assert '| **all** | 4 | 1 | 1 | 4 | 1 | 1 | 1 | 1 | 1 |' in text
  # Only the miss without a cause is listed (y has one; w is not run), accuracies to 2
  # decimals; the not-reproduced claim is listed.
  misses = text.split('## Misses without a controlled cause')[1].split('##')[0]
  assert misses.strip() == ('- A-DPFL: x: paper 90, default reading 80.00, best reading run '
                            '85.12 (kappa 3)')
  assert '- A-DPFL: c1' in text and 'c2' not in text
