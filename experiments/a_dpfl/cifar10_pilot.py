"""A-DPFL pilot on CIFAR-10: does the local work chosen on MNIST train the CIFAR-10 network
under DP-SGD?

    python -m experiments.a_dpfl.cifar10_pilot [--settings 5:0.1 5:0.05 1:0.1]
        [--rounds 10] [--data-dir DIR] [--runs-dir DIR] [--figures-dir DIR] [--quick]

Issue 11 chose E = 5, lr 0.1 from non-private FedAvg on MNIST, where a client holds about
52 examples: 15 DP-SGD steps a round at B = 20. A CIFAR-10 client holds 427, so the same
E is 110 steps, each with Gaussian noise of per-coordinate std `sigma C / B` (0.35 at
Table 1's sigma_0 = 1, C = 7) on the batch-mean gradient. This runs Fig. 4b's A-DPFL
configuration (non-IID label skew, Table 1's CIFAR-10 settings, top-K, `a_dpfl.common`)
paused after `--rounds` (`stop_after_round`; sigma and the accountant are those of the
50-round run) for each `E:lr` in `--settings`, beside the E = 1, lr 0.05 run of the first
regeneration (Fig. 4b, `fig4_cifar10/a_dpfl`, read from its committed copy).

Writes `cifar10_pilot.csv` (per setting and round: local DP-SGD steps of a client, the
mean training loss, validation and test accuracy, sigma, epsilon_guaranteed) and each
run's copy under `pilots/`; `a_dpfl.report` summarises it.
"""

from __future__ import annotations

import dataclasses
import math
import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.a_dpfl import common

SETTINGS = ('5:0.1', '5:0.05', '1:0.1')
# The first regeneration's Fig. 4b A-DPFL run (E = 1, lr 0.05), read from its copy.
REFERENCE = ('fig4_cifar10', 'a_dpfl')
COLUMNS = ('validation_accuracy', 'test_accuracy', 'train_loss', 'noise_multiplier',
           'epsilon_guaranteed')


def local_steps(examples: int, batch_size: int, epochs: int) -> int:
  """DP-SGD steps of one client in a round: `epochs * ceil(examples / batch_size)`."""
  return epochs * math.ceil(examples / batch_size)


def rows_of(setting: str, epochs: int, lr: float, examples: int, steps: int,
            metrics: list[dict], run: str) -> list[dict]:
  """The `cifar10_pilot.csv` rows of one run's `metrics.csv` rows (`examples`: a
  client's training examples; `steps`: its DP-SGD steps a round)."""
  return [dict(setting=setting, local_epochs=epochs, learning_rate=lr,
               client_examples=examples, local_steps=steps,
               round=int(float(r['round'])), **{c: r[c] for c in COLUMNS}, run=run)
          for r in metrics]


def _setting(text: str) -> tuple[int, float]:
  epochs, lr = text.split(':')
  return int(epochs), float(lr)


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.a_dpfl.cifar10_pilot', description=__doc__)
  common.add_common_flags(p, settings=False)
  p.add_argument('--settings', nargs='+', default=list(SETTINGS), type=str,
                 help='E:lr pairs (local epochs, client learning rate)')
  p.add_argument('--rounds', type=int, default=10, help='rounds of each pilot')
  args = p.parse_args(argv)
  try:
    settings = [_setting(s) for s in args.settings]
  except ValueError:
    p.error(f'--settings takes E:lr pairs such as 5:0.1, got {args.settings}')
  command = p.command(argv)
  # A client's examples: label skew deals 95% of the training split (`iid_overrides`).
  examples = common.iid_overrides('cifar10', args)['partition_options']['examples_per_client']
  table = []
  ref = common.read_rows(os.path.join(args.figures_dir, *REFERENCE, 'metrics.csv'))
  # Skipped when --settings runs its setting: one row set per setting.
  if not args.quick and (1, common.COMMON['learning_rate']) not in settings and ref:
    steps = local_steps(examples, common.COMMON['batch_size'], 1)
    table += rows_of(f"1:{common.COMMON['learning_rate']:g}", 1, common.COMMON['learning_rate'],
                     examples, steps, ref[:args.rounds], '/'.join(REFERENCE))
  items = []
  for epochs, lr in settings:
    args.local_epochs, args.learning_rate = epochs, lr
    cfg = common.method_config('a_dpfl', 'cifar10', args)
    cfg = dataclasses.replace(cfg, stop_after_round=min(args.rounds, cfg.rounds))
    items.append((cfg, common.run_dir(args, cfg, 'a_dpfl_noniid_pilot')))
  # `run_all`: a second copy of the command runs the next setting side by side.
  results = common.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'pilots'))
  for (epochs, lr), (cfg, out), metrics in zip(settings, items, results):
    name = os.path.basename(out)
    steps = local_steps(examples, cfg.batch_size, epochs)
    table += rows_of(f'{epochs}:{lr:g}', epochs, lr, examples, steps,
                     # a run resumed from a later checkpoint has more rows: cut them
                     [{c: r[c] for c in ('round', *COLUMNS)} for r in metrics][:args.rounds],
                     f'pilots/{name}')
  path = os.path.join(args.figures_dir, 'cifar10_pilot' + ('_quick' if args.quick else '')
                      + '.csv')
  common.write_table(path, table)
  print(f'wrote {path}')
  return 0


if __name__ == '__main__':
  common.entry(main)
