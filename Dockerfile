# syntax=docker/dockerfile:1
# The Countersign sidecar image. Build with BuildKit (docs/deploy.md "The image"):
#   docker buildx build -t registry.example.com/countersign:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)" --build-arg CREATED="$(git log -1 --format=%cI)" .
# Reproducible inputs: the base image is pinned by digest (how to refresh it: docs/deploy.md), every Python
# dependency comes from requirements.lock with its sha256 (uv pip compile --generate-hashes: `make lock`), the
# build backend from requirements-build.lock, wheels only (no compiler runs).
# Without a Docker engine, scripts/check_image.sh (make image-check) repeats the Python part and writes the SBOM.

# python:3.11.17-slim-bookworm, multi-architecture index digest.
ARG PYTHON_IMAGE=python:3.11.17-slim-bookworm@sha256:0a310eeecf4e1f5a0743f9a6520c90c88d089c903ca5fd283f501e3a805f5f89

# ---- builder: the venv with the locked dependencies and the project's wheel; nothing else of it ships ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY requirements.lock requirements-build.lock ./
# The venv has no pip; the base image's pip installs into it, each file checked against the lock's hashes.
RUN python -m venv --without-pip /opt/venv \
 && python -m pip install --require-hashes --no-deps --only-binary=:all: -r requirements-build.lock \
 && python -m pip --python /opt/venv/bin/python install --require-hashes --no-deps --only-binary=:all: \
      -r requirements.lock
# Only what the wheel needs: the package (generated stubs in countersign/v1 and the Lua scripts in
# countersign/store/lua are package data), its metadata and the README it names as long description.
COPY pyproject.toml README.md ./
COPY countersign ./countersign
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && python -m pip --python /opt/venv/bin/python install --no-deps --no-index /wheels/countersign-*.whl \
 && python -m pip --python /opt/venv/bin/python check \
 && /opt/venv/bin/python -m compileall -q -f -j 0 --invalidation-mode checked-hash /opt/venv/lib

# ---- runtime: the base + the venv, non-root, no pip in the venv, no build tools ----
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.title="countersign" \
      org.opencontainers.image.description="gRPC sidecar: an AI agent changes the world only with a countersigned, at-most-once, receipted action" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.17-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:0a310eeecf4e1f5a0743f9a6520c90c88d089c903ca5fd283f501e3a805f5f89"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
COPY --from=builder /opt/venv /opt/venv
# Bytecode for the standard library: the base image deletes its .pyc and the runtime user can write none
# (PYTHONDONTWRITEBYTECODE, read-only root), so without this every start compiles asyncio, email, json, ssl...
# from source again: ~0.7 s of exec -> listening on 2 cores, +13 MB on disk (notes/lean-mem.md). The venv's
# bytecode is compiled in the builder. Both hash-checked: independent of file times (a build that rewrites them
# for reproducibility leaves them valid) and never stale.
RUN python -m compileall -q -j 0 --invalidation-mode checked-hash \
      -x '/(site-packages|idlelib|tkinter|turtledemo|lib2to3|ensurepip|pydoc_data|test|tests)/' \
      "$(python -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')" \
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
