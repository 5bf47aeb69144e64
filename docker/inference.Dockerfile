# syntax=docker/dockerfile:1
# The model server (`graystack serve`) on a GPU node: CUDA runtime base, PyTorch's CUDA build, Triton.
# Non-root; the Triton/compile caches go to the per-model-version volume the chart mounts.
# Build from the repository root:  docker build -f docker/inference.Dockerfile -t graystack-inference .
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

FROM ${CUDA_IMAGE}
ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ENV DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    HOME=/tmp VIRTUAL_ENV=/opt/graystack PATH=/opt/graystack/bin:$PATH
# Triton compiles its kernels at run time: it needs a C compiler and Python's headers.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/graystack
WORKDIR /src
COPY pyproject.toml README.md ./
COPY graystack graystack
COPY gateway gateway
COPY inference inference
COPY probes probes
# torch from PyTorch's CUDA index (the same version the project pins for CPU installs).
RUN pip install --index-url ${TORCH_INDEX} "torch==2.13.0" \
    && pip install ".[inference]" \
    && rm -rf /src \
    && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin graystack
WORKDIR /
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["graystack"]
CMD ["serve", "--help"]
