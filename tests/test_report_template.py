"""Tests of `experiments.report_template`: the reports' prose templates."""

import os

import pytest

from experiments import report_template


def _template(tmp_path, text):
  (tmp_path / 'paper.md').write_text(text)
  return report_template.Template('paper', folder=str(tmp_path))


def test_blocks_fill_with_the_significant_digits_spec(tmp_path):
  t = _template(tmp_path, '<!-- block note -->\n\nBest {acc:~4}%, {missing:~3} and {n:d}; '
                          '{{literal}}.\n\n\n<!-- block two -->\nline 1\n\nline 2\n'
                          '<!-- block blank -->\n[{missing:?3}] [{acc:?2}] [{text:?2}]\n')
  assert t.text('note', acc='80.8249', missing='', n=3) == 'Best 80.82%, - and 3; {literal}.'
  assert t.text('blank', acc=80.8249, missing=None, text='abc') == '[] [81] [abc]'
  assert t.lines('two') == ['line 1', '', 'line 2']
  assert t.text('note', dict(acc=1 / 3, missing=None, n=1), n=2) == 'Best 0.3333%, - and 2; {literal}.'


def test_table_repeats_its_last_line_per_row(tmp_path):
  t = _template(tmp_path, '<!-- block t -->\n| run | acc ({unit}) |\n|---|---|\n'
                          '| {run} | {acc:~3} |\n')
  rows = [dict(run='a', acc='91.234'), dict(run='b', acc=float('inf'))]
  assert t.table('t', rows, unit='%') == ['| run | acc (%) |', '|---|---|', '| a | 91.2 |',
                                          '| b | inf |']
  assert t.table('t', [], unit='%') == ['| run | acc (%) |', '|---|---|']


def test_errors_name_the_block_and_the_value(tmp_path):
  t = _template(tmp_path, '<!-- block note -->\nvalue {x}\n')
  with pytest.raises(KeyError, match="block 'note': no value for 'x'"):
    t.text('note')
  with pytest.raises(KeyError, match="no block 'other'. Its blocks: note"):
    t.text('other')
  with pytest.raises(ValueError, match='before the first block'):
    _template(tmp_path, 'stray\n<!-- block a -->\n')
  with pytest.raises(ValueError, match="block 'a' appears twice"):
    _template(tmp_path, '<!-- block a -->\nx\n<!-- block a -->\ny\n')


@pytest.mark.parametrize('name', report_template.PAPERS)
def test_committed_templates_parse(name):
  assert report_template.Template(name).blocks


def test_every_paper_package_has_its_template():
  papers = sorted(d for d in os.listdir(report_template.EXPERIMENTS_DIR)
                  if os.path.exists(os.path.join(report_template.EXPERIMENTS_DIR, d, 'report.py')))
  assert tuple(papers) == report_template.PAPERS


@pytest.mark.parametrize('margins,spread,verdict', [
    ([2.0, 1.5], 1.0, 'reproduced'), ([2.0, 0.5], 1.0, 'tie'), ([2.0, -1.5], 1.0, 'not reproduced'),
    ([5.0], None, 'tie'), ([-5.0], None, 'tie'), ([1.0], 1.0, 'tie')])
def test_margin_verdict_settles_only_beyond_the_spread(margins, spread, verdict):
  from experiments import fidelity  # pylint: disable=g-import-not-at-top
  assert fidelity.margin_verdict(margins, spread) == verdict


def test_renamed_modules_are_their_new_modules():
  import importlib  # pylint: disable=g-import-not-at-top
  from experiments import _renamed  # pylint: disable=g-import-not-at-top
  flat = sorted(f[:-3] for f in os.listdir(report_template.EXPERIMENTS_DIR)
                if f.endswith('.py') and f.startswith(tuple(p + '_' for p in
                                                            report_template.PAPERS)))
  assert flat == sorted(_renamed.RENAMED)  # one alias file per rename, no stray module
  for old, new in _renamed.RENAMED.items():
    assert importlib.import_module(f'experiments.{old}') is importlib.import_module(
        f'experiments.{new}')


def test_renamed_module_runs_the_new_one_as_main():
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(report_template.EXPERIMENTS_DIR)
  out = subprocess.run([sys.executable, '-m', 'experiments.cosafed_table3', '--help'],
                       capture_output=True, text=True, cwd=root, timeout=300, check=False)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith('usage: python -m experiments.cosafed.table3')
  assert 'experiments.cosafed_table3 is now experiments.cosafed.table3' in out.stderr
