"""The prose of a paper's report, kept in a markdown template beside the report's code.

A report's code reads the runs and computes numbers; its words, table layouts and page
order live in `experiments/<paper>/report.md`, beside the report's code, a markdown file
of named blocks:

    <!-- block calibration_note -->
    The paper's LAPFed reaches {paper_acc}. Closest: {run} (best {best:~4}%).

    <!-- block calibration_table -->
    | run | best acc (%) |
    |---|---|
    | {run} | {best_test_accuracy} |

A line `<!-- block NAME -->` starts block NAME; it runs to the next such line, blank
lines at either end dropped. A block is `str.format` text (`{{` and `}}` for literal
braces) with two extra format specs for a number or a CSV cell: `{value:~N}` writes it to
N significant digits, `-` where it is missing or empty (`experiments.common.dash`);
`{value:?N}` the same with nothing where it is missing (`experiments.common.fmt`).
`Template.text` fills a block, `Template.lines` gives it as report lines, and
`Template.table` repeats a table block's last line (its row line) once per row.
"""

from __future__ import annotations

import os
import re
import string
from typing import Iterable, Mapping, Optional

from experiments import common

EXPERIMENTS_DIR = os.path.dirname(os.path.abspath(__file__))
PAPERS = ('a_dpfl', 'aadp_fl', 'adap_dp_fl', 'cosafed', 'dp_fedags')  # the paper packages
_MARKER = re.compile(r'^<!-- block (\w+) -->$')
_SIGNIFICANT = re.compile(r'^([~?])(\d+)$')


class _Formatter(string.Formatter):
  """`str.format` plus the `~N` and `?N` specs (N significant digits; `-` or nothing when
  missing)."""

  def format_field(self, value, format_spec):
    m = _SIGNIFICANT.match(format_spec)
    if m:
      return common.fmt(value, int(m.group(2)), empty='-' if m.group(1) == '~' else '')
    return super().format_field(value, format_spec)


_FORMATTER = _Formatter()


class Template:
  """The named blocks of one report template.

  Args:
    name: The paper package (e.g. `cosafed`): reads `experiments/<name>/report.md`, or
      `<folder>/<name>.md` when `folder` is given.
    folder: Another folder of templates (tests).

  Raises:
    FileNotFoundError: If the file does not exist.
    ValueError: If the file has text before its first block or a block name twice.
  """

  def __init__(self, name: str, folder: Optional[str] = None):
    self.path = (os.path.join(folder, f'{name}.md') if folder else
                 os.path.join(EXPERIMENTS_DIR, name, 'report.md'))
    with open(self.path, encoding='utf-8') as f:
      text = f.read()
    self.blocks: dict[str, str] = {}
    current, lines = None, []
    for line in text.split('\n'):
      m = _MARKER.match(line)
      if m:
        self._close(current, lines)
        current, lines = m.group(1), []
      elif current is None and line.strip():
        raise ValueError(f'{self.path}: text before the first block marker: {line!r}')
      else:
        lines.append(line)
    self._close(current, lines)

  def _close(self, name, lines) -> None:
    if name is None:
      return
    if name in self.blocks:
      raise ValueError(f'{self.path}: block {name!r} appears twice')
    while lines and not lines[0].strip():
      lines.pop(0)
    while lines and not lines[-1].strip():
      lines.pop()
    self.blocks[name] = '\n'.join(lines)

  def _block(self, name: str) -> str:
    if name not in self.blocks:
      raise KeyError(f'{self.path} has no block {name!r}. Its blocks: '
                     f'{", ".join(self.blocks)}.')
    return self.blocks[name]

  def text(self, block: str, values: Mapping | None = None, **kwargs) -> str:
    """Block `block` filled from `values` and `kwargs` (kwargs win).

    Raises:
      KeyError: If the block does not exist or names a value not given (the message
        names the block and the value).
    """
    return self._fill(block, self._block(block), {**(values or {}), **kwargs})

  def lines(self, block: str, values: Mapping | None = None, **kwargs) -> list[str]:
    """`text(...)` as report lines."""
    return self.text(block, values, **kwargs).split('\n')

  def table(self, block: str, rows: Iterable[Mapping], **kwargs) -> list[str]:
    """A table block's header lines (filled from `kwargs`) and its last line filled
    once per row (from the row, then `kwargs`).

    Raises:
      KeyError: As `text`.
    """
    *header, row_line = self._block(block).split('\n')
    out = self._fill(block, '\n'.join(header), kwargs).split('\n') if header else []
    return out + [self._fill(block, row_line, {**kwargs, **row}) for row in rows]

  def _fill(self, block: str, text: str, fields: Mapping) -> str:
    try:
      return _FORMATTER.vformat(text, (), fields)
    except KeyError as e:
      raise KeyError(f'{self.path}, block {block!r}: no value for {e.args[0]!r}') from None
