"""tffdp's learning processes."""
from tffdp.algorithms.baselines import build_dp_fedavg, build_dpfl, build_fedavg
from tffdp.algorithms.common import Method
from tffdp.algorithms.dp_sgd import build_dp_sgd_client_work
