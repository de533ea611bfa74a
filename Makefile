# One command runs the main job, one runs the tests; each creates the environment first.
#   make demo   DP-FedAvg (client-level) and DPFL (sample-level) beside FedAvg on real MNIST,
#               about 5 min on 2 cores (writes figures/demo/, README included)
#   make test   the test suite (TEST_JOBS=2 processes; TEST_JOBS=1 runs it in one)
#   make bench  the speed benchmarks (prints measured ratios)
#   make a_dpfl_figures      A-DPFL Fig. 4-6, Table 2 + report at paper scale (about 5 h
#               on 2 cores at A_DPFL_E=1; finished runs in RUNS_DIR are reused, interrupted
#               ones resumed); A_DPFL_E=<E> A_DPFL_LR=<lr> reruns them with E local
#               epochs and client lr (_E<E>_lr<lr> names; lr named unless 0.05)
#   make a_dpfl_local_epochs the FedAvg sweep that chooses A_DPFL_E, A_DPFL_LR (hours)
#   make adap_dp_fl_figures  Adap DP-FL Fig. 3-6 + report at paper scale (hours; rerun
#               to resume; RUNS_DIR holds the runs and their checkpoints)
#   make cosafed_figures     cosAFed calibration, Table 3, Figs. 2-7 + report (about 1.5 h)
#   make aadp_fl_figures     AADP-FL Table 2 / Fig. 3-7 (MNIST, Fashion-MNIST), the MNIST
#               CNN pilot and CNN panels (Fig. 5, Fig. 6 with fl_mnist_cnn) + report
#               (hours on 2 cores; finished runs in RUNS_DIR are reused, interrupted
#               ones resumed)
#   make dp_fedags_figures   DP-FedAGS pilot, Table IV / Fig. 3 (MNIST), Tables II-III
#               (membership inference) + report (about 3 h on 2 cores; resumable)
#   make seed_checks         seeds 1 and 2 of the cheapest cell of each claim the reports
#               call a tie on one seed, then the three reports (about 27 h of runs; see
#               python -m experiments.seed_checks --list)
# Data: DATA_DIR (default $TFFDP_DATA_DIR, else ~/.cache/tffdp/datasets with download).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= $(TFFDP_DATA_DIR)
DATA_FLAG := $(if $(DATA_DIR),--data-dir $(DATA_DIR),)

.PHONY: venv demo test bench clean a_dpfl_figures adap_dp_fl_figures aadp_fl_figures \
	cosafed_figures dp_fedags_figures a_dpfl_local_epochs seed_checks

RUNS_DIR ?= runs
# Test processes (pytest-xdist): the suite takes about 26 min at 2 on 2 idle cores, about
# 70 min at 1.
TEST_JOBS ?= 2
A_DPFL_E ?= 1
A_DPFL_LR ?= 0.05
A_DPFL_FLAGS := $(DATA_FLAG) --runs-dir $(RUNS_DIR)/a_dpfl --local-epochs $(A_DPFL_E) \
    --learning-rate $(A_DPFL_LR)

venv: $(VENV)/.installed

# TFF 0.87.0 pins jaxlib==0.4.14, which PyPI no longer serves: install TFF's pinned
# dependencies (requirements.txt, jaxlib 0.4.13) and then TFF itself without deps.
$(VENV)/.installed: requirements.txt setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps tensorflow-federated==0.87.0
	$(PY) -m pip install --quiet --no-deps tensorflow-empirical-privacy==0.1.0
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -c "import tensorflow_federated, tffdp, tffdp.mia"
	touch $@

demo: venv
	$(PY) -m experiments.demo $(DATA_FLAG)

test: venv
	TFFDP_DATA_DIR=$(DATA_DIR) $(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal tests

bench: venv
	$(PY) -m benchmarks.run $(DATA_FLAG)

# Each module reuses the runs it shares with another (Fig. 5 and Table 2 reuse Fig. 4a's
# A-DPFL run, Fig. 6's k = 0.7 too).
a_dpfl_figures: venv
	for d in mnist cifar10; do $(PY) -m experiments.a_dpfl.fig4 --dataset $$d \
	    $(A_DPFL_FLAGS) || exit 1; done
	$(PY) -m experiments.a_dpfl.fig5 $(A_DPFL_FLAGS)
	$(PY) -m experiments.a_dpfl.fig6 $(A_DPFL_FLAGS)
	$(PY) -m experiments.a_dpfl.table2 $(A_DPFL_FLAGS)
	$(PY) -m experiments.a_dpfl.ceiling --learning-rates 0.1 $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/a_dpfl
	$(PY) -m experiments.a_dpfl.report

a_dpfl_local_epochs: venv
	$(PY) -m experiments.a_dpfl.local_epochs --datasets mnist $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/a_dpfl
	$(PY) -m experiments.a_dpfl.report

# The runs first (two processes, resumable, checkpoints in RUNS_DIR), then each figure
# from the cached runs.
adap_dp_fl_figures: venv
	$(PY) -m experiments.adap_dp_fl.runs --jobs 2 $(DATA_FLAG) --runs-dir $(RUNS_DIR)/adap_dp_fl
	for f in 3 4 5 6; do $(PY) -m experiments.adap_dp_fl.fig$$f $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/adap_dp_fl || exit 1; done
	$(PY) -m experiments.adap_dp_fl.seeds $(DATA_FLAG) --runs-dir $(RUNS_DIR)/adap_dp_fl
	$(PY) -m experiments.adap_dp_fl.controls $(DATA_FLAG) --runs-dir $(RUNS_DIR)/adap_dp_fl
	$(PY) -m experiments.adap_dp_fl.report

clean:
	rm -rf $(VENV) runs .pytest_cache

# Table 2 first: Fig. 4 and Fig. 6 reuse its AADP-FL and FedAvg runs.
aadp_fl_figures: venv
	$(PY) -m experiments.aadp_fl.table2 --datasets mnist fashion_mnist $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/aadp_fl
	for f in 4 5 6 7 3; do $(PY) -m experiments.aadp_fl.fig$$f $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/aadp_fl || exit 1; done
	$(PY) -m experiments.aadp_fl.cnn_pilot $(DATA_FLAG) --runs-dir $(RUNS_DIR)/aadp_fl
	$(PY) -m experiments.aadp_fl.fig5 --model fl_mnist_cnn --clips 0.3 0.5 0.75 1.0 \
	    $(DATA_FLAG) --runs-dir $(RUNS_DIR)/aadp_fl
	$(PY) -m experiments.aadp_fl.fig6 --model fl_mnist_cnn $(DATA_FLAG) \
	    --runs-dir $(RUNS_DIR)/aadp_fl
	$(PY) -m experiments.aadp_fl.report

# Figs. 2-7 reuse Table 3's seed-0 cosAFed runs (N = 3, epsilon 100).
cosafed_figures: venv
	$(PY) -m experiments.cosafed.calibrate $(DATA_FLAG) --runs-dir $(RUNS_DIR)/cosafed
	$(PY) -m experiments.cosafed.table3 $(DATA_FLAG) --runs-dir $(RUNS_DIR)/cosafed
	$(PY) -m experiments.cosafed.figs $(DATA_FLAG) --runs-dir $(RUNS_DIR)/cosafed
	$(PY) -m experiments.cosafed.report

dp_fedags_figures: venv
	$(PY) -m experiments.dp_fedags.table4 --datasets mnist $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.pilot $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.reference $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.mia --datasets mnist $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.calibrate $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.table4 --datasets mnist --delta-s-scale calibrated \
	    --seeds 0 1 2 $(DATA_FLAG) --runs-dir $(RUNS_DIR)/dp_fedags
	$(PY) -m experiments.dp_fedags.report

seed_checks: venv
	$(PY) -m experiments.seed_checks $(DATA_FLAG) --runs-dir $(RUNS_DIR)
	$(PY) -m experiments.a_dpfl.report
	$(PY) -m experiments.aadp_fl.report
	$(PY) -m experiments.adap_dp_fl.report
