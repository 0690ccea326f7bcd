# Everything a user or CI runs goes through these targets; the README names them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

CONSOLE_WEB := console/web
ICS23_NODE := tests/ics23_node

.PHONY: setup demo dev test test-fast proto bench clean browser wasm

# Create the virtual environment and install the project with its pinned dependencies.
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# CometBFT (the consensus engine of every network of several validators) into the venv's bin: the release is
# pinned once, in trolly.abci_app.cometbft. Skipped when that release is already there or a v0.38 `cometbft` is on
# PATH; without Go it says how to get CometBFT and succeeds (the built-in solo engine serves one validator).
setup: $(STAMP) $(CONSOLE_WEB)/dist/app.js $(ICS23_NODE)/node_modules/.package-lock.json wasm
	$(PY) -m trolly.abci_app.cometbft install --gobin $(VENV)/bin

# The wasm32 training kernel (compute/wasm/kernel.c, committed built as kernel.wasm): Debian's clang and lld are
# installed with apt when missing and this is root; then the source is built and checked to be byte for byte the
# committed .wasm (under the pinned clang; fails if not). Without a compiler the committed .wasm is used as it is.
wasm: $(STAMP)
	@{ command -v clang >/dev/null && command -v wasm-ld >/dev/null; } || [ "$$(id -u)" != 0 ] || \
		! command -v apt-get >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang lld >/dev/null; } || \
		echo "clang and lld could not be installed: the committed kernel.wasm is used without a rebuild"
	$(PY) -m trolly.compute.wasm.build

# The console's front end (trolly-console serves it): npm packages exactly as the lockfile pins them, then the
# esbuild bundles in console/web/dist (the console's pages; dist/worker: the browser worker's page, its Web Worker
# and the kernel's .wasm). Rebuilt when the lockfile or a source file changes.
$(CONSOLE_WEB)/dist/app.js: $(CONSOLE_WEB)/package-lock.json $(CONSOLE_WEB)/index.html $(wildcard $(CONSOLE_WEB)/src/*.* $(CONSOLE_WEB)/src/pages/* $(CONSOLE_WEB)/src/browser_worker/*) compute/wasm/kernel.wasm
	cd $(CONSOLE_WEB) && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build

# @confio/ics23 exactly as the lockfile pins it: the test that checks Trolly's query proofs with no Trolly code.
$(ICS23_NODE)/node_modules/.package-lock.json: $(ICS23_NODE)/package-lock.json
	cd $(ICS23_NODE) && npm ci --no-audit --no-fund --loglevel=error

# Debian's Chromium for the console's browser tests: installed with apt when missing and this is root; otherwise
# the browser tests skip and say why.
browser:
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		echo "chromium could not be installed: the console's browser tests will skip"

# The main job: a local network that trains and settles a real task.
demo: setup
	$(VENV)/bin/trolly-localnet demo

# A single-validator dev chain (solo engine) with a pre-funded dev account.
dev: setup
	$(VENV)/bin/trolly-node dev

# The whole test suite, slow end-to-end tests included. By scope: a class's tests (or a module's test
# functions) run in one worker, in order, so that tests sharing one network stay together.
test: setup browser
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
