"""tffdp's import layers: no module imports one from a higher layer.

From the bottom: the building blocks (data, privacy, models, aggregators, runtime, ...),
then the methods (`tffdp.algorithms`, and `tffdp.mia`, which reads their per-example
losses), then `config`, then `runner`, then the entry points and what builds on the runner
(`tffdp.calibration`).
"""
import ast
import pathlib

import tffdp

LAYERS = {
    0: ('tffdp', 'tffdp.aggregators', 'tffdp.audit', 'tffdp.canaries', 'tffdp.checkpoints',
        'tffdp.confined_worker', 'tffdp.data', 'tffdp.evaluation', 'tffdp.models',
        'tffdp.optimizers', 'tffdp.plotting', 'tffdp.privacy', 'tffdp.queries',
        'tffdp.runtime', 'tffdp.seeds', 'tffdp.timing', 'tffdp.tls'),
    1: ('tffdp.algorithms', 'tffdp.mia'),
    2: ('tffdp.config',),
    3: ('tffdp.runner',),
    # The entry points, and what is built on the runner (dry-run calibration).
    4: ('tffdp.run', 'tffdp.cli', 'tffdp.worker', 'tffdp.calibration'),
}


def _layer(module: str) -> int:
  """The layer of `module`: that of its longest listed prefix (KeyError if none)."""
  best = None
  for layer, names in LAYERS.items():
    for name in names:
      if (module == name or module.startswith(name + '.')) and (
          best is None or len(name) > len(best[1])):
        best = (layer, name)
  if best is None:
    raise KeyError(f'{module} has no layer: add it to LAYERS')
  return best[0]


def _imports(path: pathlib.Path, package: str) -> set[str]:
  """The tffdp modules `path` imports (`from tffdp.x import y` counts `tffdp.x.y` when
  that is a module, else `tffdp.x`)."""
  root = pathlib.Path(tffdp.__file__).parent
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    names = []
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      for a in node.names:
        sub = f'{node.module}.{a.name}'
        rel = pathlib.Path(*sub.split('.')[1:])
        is_module = (root / rel).with_suffix('.py').exists() or (root / rel).is_dir()
        names.append(sub if is_module else node.module)
    out.update(n for n in names if n == package or n.startswith(package + '.'))
  return out


def test_every_module_has_a_layer_and_imports_none_above_it():
  root = pathlib.Path(tffdp.__file__).parent
  upward = []
  for path in sorted(root.rglob('*.py')):
    parts = path.relative_to(root.parent).with_suffix('').parts
    module = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
    for target in _imports(path, 'tffdp'):
      if _layer(target) > _layer(module):
        upward.append(f'{module} -> {target}')
  assert not upward, upward


def test_the_layer_check_sees_an_upward_import(tmp_path):
  bad = tmp_path / 'bad.py'
  bad.write_text('from tffdp import config as config_lib\nimport tffdp.runner\n')
  assert _imports(bad, 'tffdp') == {'tffdp.config', 'tffdp.runner'}
  assert _layer('tffdp.runtime') < _layer('tffdp.config') < _layer('tffdp.runner')
  assert _layer('tffdp.algorithms.ddgauss') == 1 and _layer('tffdp.data.loaders') == 0
