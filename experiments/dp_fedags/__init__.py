"""DP-FedAGS: the paper's experiments, one module per figure or table.

Run one with `python -m experiments.dp_fedags.<module>` (`--help` for its flags);
`report` writes `figures/dp_fedags/README.md` from the committed runs, with the prose of
`report.md` beside it. Modules:

  calibrate  calibration of the sensitivity `Delta_S` between the two readings.
  common     settings and helpers of these modules (Sec. V-A of the paper).
  mia        Tables II-III: membership-inference attacks on Table IV's final models.
  pilot      pilot: the sensitivity reading that decides whether anything trains.
  reference  non-private FedAvg at the paper's settings, the reference for Table IV.
  report     Writes `figures/dp_fedags/README.md` from the committed results (no numbers typed).
  table4     Table IV and Fig. 3: test accuracy per method and budget.
"""
