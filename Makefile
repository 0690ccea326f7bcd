# Everything a user or CI runs goes through these targets; the README names them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo dev test test-fast proto bench clean

# Create the virtual environment and install the project with its pinned dependencies.
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# CometBFT (the consensus engine of every network of several validators) into the venv's bin: the release is
# pinned once, in trolly.abci_app.cometbft. Skipped when that release is already there or a v0.38 `cometbft` is on
# PATH; without Go it says how to get CometBFT and succeeds (the built-in solo engine serves one validator).
setup: $(STAMP)
	$(PY) -m trolly.abci_app.cometbft install --gobin $(VENV)/bin

# The main job: a local network that trains and settles a real task.
demo: setup
	$(VENV)/bin/trolly-localnet demo

# A single-validator dev chain (solo engine) with a pre-funded dev account.
dev: setup
	$(VENV)/bin/trolly-node dev

# The whole test suite, slow end-to-end tests included. By scope: a class's tests (or a module's test
# functions) run in one worker, in order, so that tests sharing one network stay together.
test: setup
	$(PY) -m pytest -n 2 --dist loadscope -q

# Unit tests only (skips tests marked slow).
test-fast: setup
	$(PY) -m pytest -n 2 -q -m 'not slow'

# Benchmarks: each prints one JSON object as its last line (drop --quick for the full-size runs).
bench: setup
	$(PY) -m benchmarks.chain_throughput --quick

# Regenerate the protobuf modules (committed) from the .proto files.
# (CometBFT v0.38 ABCI protos under abci_app/proto/tendermint and chain/proto; imports rewritten to trolly.*)
proto: setup
	$(PY) -m trolly.abci_app.proto.regenerate

clean:
	rm -rf $(VENV) build *.egg-info
