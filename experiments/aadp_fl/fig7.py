"""AADP-FL Fig. 7: accuracy against the user sampling probability, vs DP-FedAvg (MNIST MLP).

    python -m experiments.aadp_fl.fig7 [--datasets mnist] [--data-dir DIR] [--quick]

q_user in {0.2, 0.4, 0.6, 0.8, 1.0}, S = 0.3 for both methods (Amendment 5: Fig. 7b).
DP-FedAvg samples each client with the same probability (Poisson cohort, rate q) at the
sigma of AADP-FL's Theorem 1 (Amendment 6). Fig. 7a (CIFAR-10, AlexNet-style) is
`--datasets cifar10 --model alexnet_cnn` (10 runs of 300 rounds); the figure reads final
accuracies only, so the report's command adds `--eval-every 10`. On CIFAR-10 a DP-FedAvg
run stops once `STALL_ROUNDS` rounds in a row had their aggregated update rejected as
non-finite (`RunConfig.stop_after_rejected`): at the Theorem 1 sigma with a small cohort
its noise drives the model to weights from which every client's training gives NaN, the
model never moves again, and the remaining rounds of 300 would only be accounted; the
final model is evaluated where the run stops.
Writes `fig7.csv`, `fig7_<dataset>.png` and `fig7_<dataset>_sweep.png` (with `--model M`,
`fig7_M...`).
"""

from __future__ import annotations

from experiments.aadp_fl import common

Q_USER = (0.2, 0.4, 0.6, 0.8, 1.0)
CLIP = 0.3
# Fig. 7a's DP-FedAvg runs stop after this many rejected rounds in a row (docstring).
STALL_ROUNDS = 10


def curves(dataset: str, args):
  out = []
  clients = 4 if args.quick else 20
  for q in common.sweep_values(Q_USER, args):
    out.append((f'AADP-FL, q = {q:g}',
                *common.config(dataset, args, f'aadp_fl_S0.3_q{q:g}', clip_norm=CLIP,
                               q_user=q), dict(q_user=q, series='AADP-FL')))
    stall = {}
    if dataset == 'cifar10':
      stall = dict(stop_after_rejected=STALL_ROUNDS)
    cfg, out_dir = common.config(dataset, args, f'dp_fedavg_theorem1_S0.3_q{q:g}',
                                 'dp_fedavg_theorem1', clip_norm=CLIP,
                                 clients_per_round=max(1, round(q * clients)), **stall)
    if stall:
      cfg.notes['stop_after_rejected'] = (
          f'tffdp\'s: stop after {STALL_ROUNDS} rounds in a row whose update TFF rejected '
          '(every client diverged from an unchanged model), not to spend 300 rounds on a '
          'model that no longer moves; the paper runs every round')
    out.append((f'DP-FedAvg, q = {q:g}', cfg, out_dir,
                dict(q_user=q, series='DP-FedAvg (Theorem 1 sigma)')))
  return out


def main(argv=None) -> int:
  return common.run_figure('fig7', __doc__, curves, argv, title='Fig. 7 (q_user)',
                           plots=(('test_accuracy', 'test accuracy', ''),),
                           sweep=('q_user', 'user sampling probability q'))


if __name__ == '__main__':
  common.entry(main)
