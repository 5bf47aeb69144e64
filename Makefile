# graystack: the front door. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install prometheus demo test unit integration lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,inference]'
	touch $(STAMP)

prometheus:  ## Debian's Prometheus 2.42 (the prometheus provider's tests); needs root and apt, silent when present
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

demo: install  ## Envoy + the gateway + stand-in upstreams: flips, a header rule, a failing variant
	$(BIN)/graystack demo

test: install  ## everything CI runs
	$(BIN)/pytest -q

unit: install
	$(BIN)/pytest -q tests/unit

integration: install
	$(BIN)/pytest -q tests/integration

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

.PHONY: dashboards
dashboards: install  ## regenerate the Grafana dashboards and alert rules under charts/graystack/files/
	$(BIN)/python -m graystack.observability

bench: install  ## writes JSON under bench/results/, quoted in BENCHMARKS.md
	$(BIN)/python -m bench.flip_latency
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.gateway_hop
	$(BIN)/python -m bench.inference_ttft
	$(BIN)/python -m bench.inference_throughput
	$(BIN)/python -m bench.rollback_time
	$(BIN)/python -m bench.kernel_gpu  # says "no CUDA device: skipped" without a GPU

.PHONY: weights quality
WEIGHTS := runs/weights
weights: install $(WEIGHTS)/zero-layer-erased.safetensors  ## train the demo weights on the stdlib's source (CPU, ~5 min), cached in runs/weights/

$(WEIGHTS)/zero-layer-erased.safetensors:  # the last file the pipeline writes
	$(BIN)/graystack weights train --out-dir $(WEIGHTS)

quality: weights  ## held-out bits/byte and agreement of every form: bench/results/quality.json, quoted in BENCHMARKS.md
	$(BIN)/graystack eval --weights-dir $(WEIGHTS) --out bench/results/quality.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
