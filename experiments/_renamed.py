"""The experiment modules' old paths, kept as aliases for one release.

The experiments moved into one package per paper (`experiments/<paper>/`): for example
`experiments.a_dpfl_fig4` is now `experiments.a_dpfl.fig4`. Each old module is a two-line
file that calls `alias`, so the commands committed beside older runs (their
`config.json`'s `command`) and scripts written against the old paths keep working. README,
"Renamed modules", lists the renames; the aliases go in the next release.
"""
import importlib
import runpy
import sys

# Old module name (under `experiments.`) -> its new name (under `experiments.`).
RENAMED = {
    'a_dpfl_ceiling': 'a_dpfl.ceiling',
    'a_dpfl_cifar10_pilot': 'a_dpfl.cifar10_pilot',
    'a_dpfl_common': 'a_dpfl.common',
    'a_dpfl_fig4': 'a_dpfl.fig4',
    'a_dpfl_fig5': 'a_dpfl.fig5',
    'a_dpfl_fig6': 'a_dpfl.fig6',
    'a_dpfl_local_epochs': 'a_dpfl.local_epochs',
    'a_dpfl_report': 'a_dpfl.report',
    'a_dpfl_table2': 'a_dpfl.table2',
    'aadp_fl_cnn_pilot': 'aadp_fl.cnn_pilot',
    'aadp_fl_common': 'aadp_fl.common',
    'aadp_fl_fig3': 'aadp_fl.fig3',
    'aadp_fl_fig4': 'aadp_fl.fig4',
    'aadp_fl_fig5': 'aadp_fl.fig5',
    'aadp_fl_fig6': 'aadp_fl.fig6',
    'aadp_fl_fig7': 'aadp_fl.fig7',
    'aadp_fl_report': 'aadp_fl.report',
    'aadp_fl_table2': 'aadp_fl.table2',
    'adap_dp_fl_common': 'adap_dp_fl.common',
    'adap_dp_fl_controls': 'adap_dp_fl.controls',
    'adap_dp_fl_fig3': 'adap_dp_fl.fig3',
    'adap_dp_fl_fig4': 'adap_dp_fl.fig4',
    'adap_dp_fl_fig5': 'adap_dp_fl.fig5',
    'adap_dp_fl_fig6': 'adap_dp_fl.fig6',
    'adap_dp_fl_report': 'adap_dp_fl.report',
    'adap_dp_fl_runs': 'adap_dp_fl.runs',
    'adap_dp_fl_seeds': 'adap_dp_fl.seeds',
    'cosafed_calibrate': 'cosafed.calibrate',
    'cosafed_common': 'cosafed.common',
    'cosafed_figs': 'cosafed.figs',
    'cosafed_report': 'cosafed.report',
    'cosafed_table3': 'cosafed.table3',
    'dp_fedags_calibrate': 'dp_fedags.calibrate',
    'dp_fedags_common': 'dp_fedags.common',
    'dp_fedags_mia': 'dp_fedags.mia',
    'dp_fedags_pilot': 'dp_fedags.pilot',
    'dp_fedags_reference': 'dp_fedags.reference',
    'dp_fedags_report': 'dp_fedags.report',
    'dp_fedags_table4': 'dp_fedags.table4',
}


def alias(module_name: str, spec_name: str) -> None:
  """Makes the old module the new one, or runs the new one as `__main__`.

  Args:
    module_name: The calling module's `__name__` (`'__main__'` under `python -m`).
    spec_name: The calling module's `__spec__.name`, `experiments.<old name>`.

  Raises:
    KeyError: If `spec_name` is not an old name in `RENAMED`.
  """
  new = 'experiments.' + RENAMED[spec_name.rpartition('.')[2]]
  if module_name == '__main__':
    print(f'note: {spec_name} is now {new} (README, "Renamed modules"); this alias goes '
          'in the next release', file=sys.stderr)
    runpy.run_module(new, run_name='__main__', alter_sys=True)
  else:
    sys.modules[module_name] = importlib.import_module(new)
