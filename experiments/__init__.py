"""Runnable experiments: one package per paper, one module per paper artefact.

`python -m experiments.<paper>.<module>` runs one (`a_dpfl`, `aadp_fl`, `adap_dp_fl`,
`cosafed`, `dp_fedags`; each package's docstring lists its modules, and its `report`
writes `figures/<paper>/README.md`). Shared modules sit here: `common` (cached, resumable
runs), `benchmark` (every method at matched epsilon), `audit` (empirical privacy audit),
`demo` (the main job), `fidelity`, `report_template`, `check_reproduces`, `seed_checks`,
`park_runs`, `restore_runs`. The old flat names (`experiments.a_dpfl_fig4`) are aliases
for one release (`_renamed`).
"""
