"""tffdp: adaptive differentially private federated learning on TensorFlow Federated.

Subpackages: `tffdp.data` (datasets, partitions, federated client data), `tffdp.models`,
`tffdp.privacy` (per-client ledger over dp_accounting), `tffdp.algorithms` (learning
processes), `tffdp.runner` / `python -m tffdp.run` (experiments).
"""

__version__ = '0.1.0'
