"""AADP-FL pilot of the MNIST CNN panel (Fig. 6b): does longitudinal clipping leave a CNN
anything to learn from?

    python -m experiments.aadp_fl.cnn_pilot [--models mcmahan_cnn fl_mnist_cnn [alexnet_cnn]]
        [--readings literal noiseless noise_on_kept] [--rounds 6] [--data-dir DIR]
        [--runs-dir DIR] [--figures-dir DIR] [--quick]

Fig. 6's settings (MNIST, 20 clients, T = 50 paused after `--rounds` (`stop_after_round`:
sigma is Theorem 1's for T = 50, as in the figure), B = 32, S = 0.25, the smallest budget
epsilon = 1) for each CNN in `--models` and three readings of step 4:
`literal` (tffdp's default: noise `sigma_i S / B` on every coordinate), `noiseless`
(`noise_scale=none`, Fig. 5's clipping without noise: what the clip alone leaves) and
`noise_on_kept` (noise only on the coordinates the clip keeps; leaks the support,
`epsilon_guaranteed = inf`). The paper gives no CNN widths (Amendment 5): `mcmahan_cnn`
(1,663,370 weights) is the standard FL MNIST CNN, `fl_mnist_cnn` (21,840 weights) the
`CNNMnist` of the PyTorch FL code whose three networks match the paper's descriptions
(`tffdp.models`).

Writes `cnn_pilot.csv`: per run and round the test accuracy, the mean fraction of
coordinates longitudinal clipping keeps and that many coordinates, the mean client update
norm before clipping, the clients clipped, sigma, and the per-coordinate noise std
(`sigma S / B`; 0 for `noiseless`). `aadp_fl.report` summarises it.
"""

from __future__ import annotations

import os

from experiments.common import ArgumentParser  # pylint: disable=g-import-not-at-top
from experiments.aadp_fl import common

EPSILON = 1.0
READINGS = {'literal': {}, 'noiseless': dict(noise_scale='none'),
            'noise_on_kept': dict(noise_on='kept')}
MODELS = ('mcmahan_cnn', 'fl_mnist_cnn')
# Also accepted: Fig. 3's AlexNet-style network (its `noiseless` reading asks the same
# question of that panel; the budget does not enter it).
OTHER_MODELS = ('alexnet_cnn',)


def rows_of(model: str, reading: str, dim: int, metrics: list[dict], out: str,
            clip_norm: float, noise_std_per_sigma: float) -> list[dict]:
  """The `cnn_pilot.csv` rows of one run (`noise_std_per_sigma`: `S / B`, 0 without
  noise)."""
  rows = []
  for r in metrics:
    kept = float(r['nonzero_fraction_after_clip'])
    sigma = float(r['noise_multiplier_max'])
    rows.append(dict(
        model=model, reading=reading, parameters=dim, clip_norm=clip_norm,
        round=int(float(r['round'])),
        test_accuracy=r['test_accuracy'], kept_fraction=kept,
        kept_coordinates=round(kept * dim, 1), update_norm=r['update_norm'],
        clipped_clients=int(float(r['clipped_clients'])),
        clients=int(float(r['cohort_size'])),
        noise_multiplier=sigma, noise_std=sigma * noise_std_per_sigma,
        run=common.portable(out, os.path.dirname(out))))
  return rows


def main(argv=None) -> int:
  p = ArgumentParser(module='experiments.aadp_fl.cnn_pilot', description=__doc__)
  common.add_common_flags(p)
  p.add_argument('--models', nargs='+', default=list(MODELS), choices=MODELS + OTHER_MODELS)
  p.add_argument('--readings', nargs='+', default=list(READINGS), choices=list(READINGS))
  p.add_argument('--rounds', type=int, default=6)
  args = p.parse_args(argv)
  if args.datasets != ['mnist']:
    p.error('the CNN panel is MNIST only (--datasets mnist)')
  command = p.command(argv)
  path = os.path.join(args.figures_dir, 'cnn_pilot.csv')
  done = {(m, r) for m in args.models for r in args.readings}
  table = [r for r in common.read_rows(path) or [] if (r['model'], r['reading']) not in done]
  plan, items = [], []
  for model in args.models:
    args.model = model
    for reading in args.readings:
      # The first `--rounds` of Fig. 6's T-round run (paused there): sigma is calibrated
      # for T, as in the figure.
      plan.append((model, reading))
      items.append(common.config('mnist', args, f'aadp_fl_eps{EPSILON:g}_pilot_{reading}',
                                 epsilon=EPSILON, stop_after_round=1 if args.quick else
                                 args.rounds, **READINGS[reading]))
  # `run_all`: a second copy of the command runs the next configuration side by side.
  results = common.run_all(items, command, publish_to=os.path.join(args.figures_dir, 'runs'))
  for (model, reading), (cfg, out), metrics in zip(plan, items, results):
    dim = common.model_dim('mnist', model)
    per_sigma = 0.0 if reading == 'noiseless' else cfg.clip_norm / cfg.batch_size
    table += rows_of(model, reading, dim, metrics, out, cfg.clip_norm, per_sigma)
    last = table[-1]
    print(f"{model} {reading}: test accuracy {float(last['test_accuracy']):.4f} after "
          f"round {last['round']}, {last['kept_coordinates']} of {dim} coordinates kept")
  common.write_table(path, table)
  return 0


if __name__ == '__main__':
  common.entry(main)
