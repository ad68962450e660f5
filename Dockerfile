# syntax=docker/dockerfile:1
# The Countersign sidecar image. Build: docker build -t countersign:0.1.0 .
# Without a Docker engine, scripts/check_image.sh repeats the Python part (wheel → clean venv → serve → health).

# ---- builder: the project's wheel and every dependency's wheel; nothing of this stage ships ----
FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Only what the wheel needs: the package (generated stubs in countersign/v1 and the Lua scripts in
# countersign/lua are package data), its metadata and the README it names as long description.
COPY pyproject.toml README.md ./
COPY countersign ./countersign
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels /wheels/countersign-*.whl

# ---- runtime: python:3.11-slim + a venv without pip, non-root, no build tools ----
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# The venv is made without pip; the base image's pip installs into it and the wheels come from the
# builder through a bind mount, so neither pip's cache nor the wheels end up in a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/venv \
 && python -m pip --python /opt/venv/bin/python install --no-index --find-links /wheels /wheels/countersign-*.whl \
 && groupadd --system --gid 10001 countersign \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin countersign \
 && mkdir -p /etc/countersign /run/countersign \
 && chown 10001:10001 /run/countersign

COPY --chmod=0755 deploy/docker/healthcheck.py /usr/local/bin/countersign-healthcheck

# Defaults (every one a flag too; see `countersign serve --help`):
# - gRPC on a unix socket: nothing on the network unless COUNTERSIGN_LISTEN says host:port (the agent
#   in the same pod is the only client; mount /run/countersign as a volume shared with it);
# - /metrics on 0.0.0.0:9464 so that Prometheus can scrape the pod (no arguments or ids in metrics);
# - no COUNTERSIGN_REDIS_URL: the image carries no redis-server, so set it (redis://, rediss://, unix://);
# - no COUNTERSIGN_KEYS_FILE: mount the keys JSON and point it there (without it a key is generated).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    COUNTERSIGN_LISTEN=unix:/run/countersign/countersign.sock \
    COUNTERSIGN_METRICS_LISTEN=0.0.0.0:9464 \
    COUNTERSIGN_REGISTRY=/etc/countersign/registry.yaml

USER 10001:10001
WORKDIR /tmp
# 50051: gRPC when COUNTERSIGN_LISTEN is host:port; 9464: Prometheus /metrics.
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 CMD ["countersign-healthcheck"]
ENTRYPOINT ["countersign", "serve"]
