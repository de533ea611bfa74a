"""AADP-FL: the paper's experiments, one module per figure or table.

Run one with `python -m experiments.aadp_fl.<module>` (`--help` for its flags);
`report` writes `figures/aadp_fl/README.md` from the committed runs, with the prose of
`report.md` beside it. Modules:

  cnn_pilot  pilot of the MNIST CNN panel (Fig. 6b)
  common     settings and helpers of these modules (Sec. 6 of the paper).
  fig3       Fig. 3, AlexNet-style panel: test loss per round on MNIST for every method.
  fig4       Fig. 4: accuracy under different non-IID percentages (MNIST MLP).
  fig5       Fig. 5: longitudinal clipping threshold S without noise (MNIST MLP).
  fig6       Fig. 6: accuracy against the privacy budget epsilon (MNIST MLP).
  fig7       Fig. 7: accuracy against the user sampling probability (MNIST MLP).
  report     Writes `figures/aadp_fl/README.md` from the committed results (no numbers typed).
  table2     Table 2: accuracy at epsilon = 4 against FedAvg and DP-FedAvg.
"""
