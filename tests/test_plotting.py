"""Tests of `tffdp.plotting` and the swept figures' curve styles."""

import math

from tffdp import plotting


def _rows(values):
  return [dict(round=float(i + 1), test_accuracy=v) for i, v in enumerate(values)]


def test_plot_curves_draws_each_finite_point_with_the_given_style():
  fig = plotting.plot_curves(
      {'a': _rows([0.1, math.inf, 0.3]), 'b': _rows([None, None])}, 'test_accuracy',
      'test accuracy', styles={'a': dict(color='red', linestyle='--')})
  ax = fig.axes[0]
  a, b = ax.get_lines()
  assert list(a.get_xdata()) == [1.0, 3.0] and list(a.get_ydata()) == [0.1, 0.3]
  assert a.get_color() == 'red' and a.get_linestyle() == '--'
  assert b.get_label() == 'b (no finite test_accuracy)' and len(b.get_xdata()) == 0
  # Few runs: the legend stays inside the axes and the figure keeps its size.
  assert ax.get_legend().get_bbox_to_anchor().bounds == ax.bbox.bounds
  assert tuple(fig.get_size_inches()) == (5.5, 3.8)
  plotting.plt.close(fig)


def test_plot_curves_puts_a_long_legend_beside_the_axes():
  runs = {f'run {i}': _rows([0.1 * i]) for i in range(plotting.LEGEND_INSIDE_MAX + 1)}
  fig = plotting.plot_curves(runs, 'test_accuracy', 'test accuracy')
  legend = fig.axes[0].get_legend()
  assert len(legend.get_texts()) == plotting.LEGEND_INSIDE_MAX + 1
  assert legend.get_bbox_to_anchor().x0 > fig.axes[0].bbox.x1  # right of the axes
  assert tuple(fig.get_size_inches()) == (8.0, 3.8)
  plotting.plt.close(fig)


def test_sweep_styles_pair_colour_by_setting_and_line_style_by_series():
  from experiments.aadp_fl import common as aadp_fl_common  # pylint: disable=g-import-not-at-top
  items = [(f'{s}, q = {q}', None, '', dict(q_user=q, series=s))
           for q in (0.2, 1.0) for s in ('AADP-FL', 'DP-FedAvg')]
  styles = aadp_fl_common._sweep_styles(items, 'q_user')
  assert styles['AADP-FL, q = 0.2']['color'] == styles['DP-FedAvg, q = 0.2']['color']
  assert styles['AADP-FL, q = 0.2']['color'] != styles['AADP-FL, q = 1.0']['color']
  assert {styles[f'AADP-FL, q = {q}']['linestyle'] for q in (0.2, 1.0)} == {'-'}
  assert {styles[f'DP-FedAvg, q = {q}']['linestyle'] for q in (0.2, 1.0)} == {'--'}
  # A reference without the swept setting comes first: black, and the method stays solid.
  reference = ('FedAvg', None, '', dict(epsilon='', series='FedAvg'))
  styles = aadp_fl_common._sweep_styles(
      [reference] + [(f'eps {e}', None, '', dict(epsilon=e, series='AADP-FL'))
                     for e in (1, 2)], 'epsilon')
  assert styles['FedAvg'] == dict(color='black', linestyle='-')
  assert styles['eps 1']['linestyle'] == styles['eps 2']['linestyle'] == '-'
  assert styles['eps 1']['color'] != styles['eps 2']['color'] != 'black'
