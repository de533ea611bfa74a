"""A-DPFL: the paper's experiments, one module per figure or table.

Run one with `python -m experiments.a_dpfl.<module>` (`--help` for its flags);
`report` writes `figures/a_dpfl/README.md` from the committed runs, with the prose of
`report.md` beside it. Modules:

  ceiling        non-private FedAvg on the IID split, the ceiling of Table 2's IID cell.
  cifar10_pilot  pilot on CIFAR-10: does the local work chosen on MNIST train its network?
  common         settings and helpers of these modules (Table 1 of the paper).
  fig4           Fig. 4a (MNIST) / 4b (CIFAR-10): test accuracy vs round, 50 rounds, non-IID.
  fig5           Fig. 5: the noise multiplier sigma vs round on MNIST (A-DPFL, non-IID).
  fig6           Fig. 6: final test accuracy vs the decay factor k on MNIST (A-DPFL, non-IID).
  local_epochs   shared setup: a sweep of the local epochs for non-private FedAvg (issue 11).
  report         Writes `figures/a_dpfl/README.md` from the committed results (no numbers typed).
  table2         Table 2: A-DPFL test accuracy, non-IID vs IID (MNIST, CIFAR-10).
"""
