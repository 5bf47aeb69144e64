# syntax=docker/dockerfile:1
# The slim images, non-root, no model runtime (no torch):
#   --target gateway: the xDS control plane, rollout controller and admin API (`graystack kube-gateway`);
#                     also runs `helm test`.
#   --target probe:   the probe sidecar; reads the pod's checkpoint headers and bias tensors (safetensors,
#                     ml_dtypes, numpy: core dependencies).
#   --target loadtest: Locust (graystack[loadtest]) and /app/loadtests/locustfile.py, for the chart's
#                     in-cluster soak (loadtest.enabled).
# Build from the repository root, e.g.  docker build -f docker/slim.Dockerfile --target gateway .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY graystack graystack
COPY gateway gateway
COPY inference inference
COPY probes probes
COPY loadtests loadtests
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[loadtest]"

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HOME=/tmp
RUN useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin graystack
ENTRYPOINT ["graystack"]

FROM runtime AS gateway
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels graystack
USER 10001:10001
EXPOSE 18000 9000
CMD ["kube-gateway"]

FROM runtime AS probe
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels graystack
USER 10001:10001
EXPOSE 9100
CMD ["probe"]

FROM runtime AS loadtest
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels "graystack[loadtest]"
COPY --from=build /src/loadtests /app/loadtests
USER 10001:10001
EXPOSE 5557
ENTRYPOINT ["locust"]
CMD ["-f", "/app/loadtests/locustfile.py"]
