"""cosAFed: the paper's experiments, one module per figure or table.

Run one with `python -m experiments.cosafed.<module>` (`--help` for its flags);
`report` writes `figures/cosafed/README.md` from the committed runs, with the prose of
`report.md` beside it. Modules:

  calibrate  pilot and calibration of `Delta_f` (Amendments 3 and 7).
  common     settings and helpers of these modules (Sec. 5 of the paper).
  figs       Figs. 2-7: curves, best accuracy and budget traces over N x epsilon.
  report     Writes `figures/cosafed/README.md` from the committed results (no numbers typed).
  table3     Table 3: total privacy budget and best accuracy, paper vs tffdp.
"""
