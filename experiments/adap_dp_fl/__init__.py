"""Adap DP-FL: the paper's experiments, one module per figure or table.

Run one with `python -m experiments.adap_dp_fl.<module>` (`--help` for its flags);
`report` writes `figures/adap_dp_fl/README.md` from the committed runs, with the prose of
`report.md` beside it. Modules:

  common    settings and helpers of these modules (Sec. V-A of the paper).
  controls  controls of Fig. 4's constant-sigma gap (fidelity pass 2, item 3).
  fig3      Fig. 3: adaptive vs constant clipping (constant sigma 1.1).
  fig4      Fig. 4: noise decay vs constant sigma (constant C = 1.0).
  fig5      Fig. 5: Adap DP-FL vs DP-FL at epsilon = 2.
  fig6      Fig. 6: the noise multiplier sigma vs the epsilon spent (noise decay runs).
  report    Writes `figures/adap_dp_fl/README.md` from the committed results (no numbers typed).
  runs      Runs every paper-scale Adap DP-FL run (the curves of Figs. 3-6) on a pool of processes.
  seeds     the seed spread of the cheapest Fig. 4 curve (issue 11, point 7).
"""
