"""Figures from run results (`metrics.csv`): pure `plot(...) -> Figure` functions."""

from __future__ import annotations

import csv
import math
import os

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top


def read_metrics(run_dir: str, filename: str = 'metrics.csv') -> list[dict]:
  """Rows of `run_dir/<filename>` with numeric fields as floats (empty -> None)."""
  with open(os.path.join(run_dir, filename)) as f:
    rows = list(csv.DictReader(f))
  def num(v):
    if v in ('', None):
      return None
    try:
      return float(v)
    except ValueError:
      return v
  return [{k: num(v) for k, v in r.items()} for r in rows]


# More legend entries than this go beside the axes, where they hide no curve.
LEGEND_INSIDE_MAX = 6


def _finish(fig, ax, xlabel: str, ylabel: str, title: str):
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3)
  if len(ax.get_legend_handles_labels()[1]) > LEGEND_INSIDE_MAX:
    width, height = fig.get_size_inches()
    fig.set_size_inches(width + 2.5, height)
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
  else:
    ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def plot_curves(runs: dict[str, list[dict]], y: str, ylabel: str, title: str = '',
                x: str = 'round', xlabel: str = 'round', logy: bool = False,
                styles: dict[str, dict] | None = None):
  """One line per run of column `y` against column `x`; skips missing/inf values.

  Args:
    runs: Legend label -> the run's rows (`read_metrics`).
    y: The plotted column.
    ylabel: Its axis label.
    title: The plot title.
    x: The abscissa column.
    xlabel: Its axis label.
    logy: Log-scaled y axis.
    styles: Legend label -> keyword arguments of that run's `Axes.plot` (`color`,
      `linestyle`, ...); runs not named keep matplotlib's colour cycle. More than
      `LEGEND_INSIDE_MAX` runs put the legend beside the axes.

  Returns:
    The `matplotlib.figure.Figure`.
  """
  fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
  for name, rows in runs.items():
    style = dict((styles or {}).get(name, {}))
    pts = [(r[x], r[y]) for r in rows
           if isinstance(r.get(y), float) and math.isfinite(r[y]) and r.get(x) is not None]
    if pts:
      style.setdefault('marker', '.' if len(pts) < 60 else None)
      ax.plot(*zip(*pts), label=name, **style)
    else:
      ax.plot([], [], label=f'{name} (no finite {y})', **style)
  if logy:
    ax.set_yscale('log')
  return _finish(fig, ax, xlabel, ylabel, title)


def save(fig, path: str) -> None:
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  fig.savefig(path)
  plt.close(fig)


def plot_epsilon(runs: dict[str, list[dict]], title: str = '', delta: float | None = None):
  """`epsilon_claimed` (solid) and `epsilon_guaranteed` (dashed) per run vs round.

  Runs without any finite epsilon (non-private) are named in the legend as such.
  """
  fig, ax = plt.subplots(figsize=(5.5, 3.8), dpi=120)
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for i, (name, rows) in enumerate(runs.items()):
    color = colors[i % len(colors)]
    drawn = False
    for col, style, tag in (('epsilon_claimed', '-', 'claimed'),
                            ('epsilon_guaranteed', '--', 'guaranteed')):
      pts = [(r['round'], r[col]) for r in rows
             if isinstance(r.get(col), float) and math.isfinite(r[col])]
      if pts:
        ax.plot(*zip(*pts), style, color=color, label=f'{name}: {tag}')
        drawn = True
    if not drawn:
      ax.plot([], [], color=color, label=f'{name}: epsilon = inf (no DP)')
  return _finish(fig, ax, 'round',
                 'epsilon (max over clients' + (f', delta {delta:g})' if delta else ')'), title)
