# graystack: the front door. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install prometheus demo up test unit integration lint bench clean soak

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,inference]'
	touch $(STAMP)

prometheus:  ## Debian's Prometheus 2.42 (the prometheus provider's tests); needs root and apt, silent when present
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

demo: install  ## the whole stack: traffic, shadow -> 5 -> 20 -> 100 %, a fault and the automatic rollback, live
	$(BIN)/graystack demo

up: install  ## the whole stack until Ctrl-C (graystack up); `graystack status|weight|...` find it
	$(BIN)/graystack up

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

# Locust soak/step run, headless, CSV + HTML + summary into SOAK_DIR; exits with the verdict (0 pass,
# 1 fail, 2 inconclusive). HOST=URL (and ADMIN_URL=URL to check the split) targets a running gateway;
# without HOST a local stack (real model servers, probes, gateway, Envoy) is started and stopped.
SOAK_DIR ?= runs/soak-$(shell date +%Y%m%d-%H%M%S)
export LOAD_SHAPE SOAK_USERS SOAK_RAMP SOAK_DURATION STEP_STAGES STEP_SPAWN_RATE
soak: install  ## e.g. make soak SOAK_DURATION=72h HOST=http://gw:8080 ADMIN_URL=http://gw-admin:9000
	$(BIN)/python -m loadtests.launch --run-dir $(SOAK_DIR) $(if $(HOST),--host $(HOST)) \
		$(if $(ADMIN_URL),--admin-url $(ADMIN_URL)) $(if $(FLIP_EVERY),--flip-every $(FLIP_EVERY)) $(LOCUST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
