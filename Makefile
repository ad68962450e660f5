# The few targets a newcomer needs. `make demo` and `make test` install what is missing first.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-unit mutate lint format proto proto-check bench bench-tools deps redis test-tools clean image-check lock

# the sidecar and its dev tools, and the Python client package (its tests import it installed, no path edits)
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e clients/python
	touch $(STAMP)

deps: $(STAMP) redis

# System tools, installed through apt-get when we are root, else a clear message naming the package.
# `make demo` needs only redis-server; `make test` also needs promtool (prometheus), spin, node/npm (the Node and
# TypeScript clients) and protoc with the Go plugins (buf generate of the Go and Java stubs).
DEMO_TOOLS := redis-server:redis-server
TEST_TOOLS := $(DEMO_TOOLS) promtool:prometheus spin:spin node:nodejs npm:npm protoc:protobuf-compiler \
              protoc-gen-go:protoc-gen-go protoc-gen-go-grpc:protoc-gen-go-grpc
define install_tools
	@for pair in $(1); do tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg >/dev/null || exit 1; \
	  else echo "$$tool is missing: install the Debian/Ubuntu package '$$pkg'"; exit 1; fi; done
endef
redis:
	$(call install_tools,$(DEMO_TOOLS))
test-tools:
	$(call install_tools,$(TEST_TOOLS))
bench-tools:
	$(call install_tools,valgrind:valgrind callgrind_control:valgrind)

## the walkthrough: the sidecar with its embedded Redis, the example todo service, a scripted agent
demo: $(STAMP) redis
	$(BIN)/countersign demo

## everything CI runs: stubs match the proto, lint, types, layering, the whole suite (tests/unit, store, e2e, artefacts)
test: deps test-tools proto-check lint
	$(BIN)/python -m pytest -q

## the unit tier: no redis-server, no process of ours; seconds
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

## mutation testing of the core modules (policy, cards, keyring, the store's Python side) against tests/unit and
## tests/store: a fixed 60 % sample of the mutants, fails below 90 % of the non-equivalent ones killed. Minutes, not
## seconds: not part of `make test` (notes/mutate.md has the last score; tests/mutation_equivalents.txt the
## equivalent mutants). `--sample all` for every mutant: $(BIN)/python -m countersign.testing.mutation run --sample all
mutate: deps
	$(BIN)/python -m countersign.testing.mutation run

lint: $(STAMP)
	cd proto && ../$(BIN)/buf lint
	@# breaking changes against the last landed contract (main); a session's edits are compared before they land
	@if git rev-parse --verify -q refs/heads/main >/dev/null; then \
	  cd proto && ../$(BIN)/buf breaking --against '../.git#branch=main,subdir=proto' && echo "buf breaking: OK"; \
	else echo "buf breaking: no local main branch to compare against"; fi
	$(BIN)/ruff check countersign examples tests bench fuzz clients
	$(BIN)/ruff format --check countersign examples tests bench fuzz clients
	$(BIN)/mypy
	$(BIN)/lint-imports

## format the code (ruff format; `make lint` checks it)
format: $(STAMP)
	$(BIN)/ruff format countersign examples tests bench fuzz clients

## regenerate the Python stubs from proto/ (never edit countersign/v1 or the client package's v1 by hand)
proto: $(STAMP)
	scripts/gen_proto.sh

proto-check: $(STAMP)
	@tmp=$$(mktemp -d); PYTHON=$(BIN)/python scripts/gen_proto.sh $$tmp; status=0; \
	for dir in countersign/v1 clients/python/src/countersign_client/v1; do \
	  if ! diff -r -q -x __pycache__ $$tmp/$$dir $$dir >/dev/null; then \
	    echo "$$dir differs from what proto/ generates: run 'make proto' and commit"; \
	    diff -r -x __pycache__ $$tmp/$$dir $$dir | head -20; status=1; fi; done; \
	rm -rf $$tmp; [ $$status = 0 ] && echo "stubs match proto/ (server and client package)"

## build the container image's Python part the way the Dockerfile does (no Docker engine needed): hadolint,
## the lock installed with hashes, the SBOM (build/countersign-sbom.cdx.json), serve, health, stop
image-check: $(STAMP)
	PYTHON=$(BIN)/python SBOM_OUT=build/countersign-sbom.cdx.json scripts/check_image.sh

## re-resolve the image's dependencies into requirements.lock (and the build backend into requirements-build.lock),
## every file with its sha256; commit both. Python 3.11 (the image's), every platform (--universal).
LOCK := $(BIN)/uv pip compile --universal --python-version 3.11 --generate-hashes --custom-compile-command "make lock" -q
lock: $(STAMP)
	$(LOCK) pyproject.toml -o requirements.lock
	printf 'setuptools>=68\nwheel\n' | $(LOCK) - -o requirements-build.lock

## the write-path and telemetry benchmarks (~20 minutes): every target of issue 17 with OK/MISSED, from one run each;
## telemetry and CPU per Confirm vs the reference counted in instructions under valgrind (deterministic on a noisy
## machine; the wall-clock telemetry run: bench/telemetry.py --seconds 2 --rounds 4)
bench: deps bench-tools
	$(BIN)/python bench/write_path.py --seconds 4 --rounds 2
	$(BIN)/python bench/telemetry.py --instructions --confirms 200 --rounds 2
	$(BIN)/python bench/confirm_ir.py --confirms 200 --rounds 2

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
