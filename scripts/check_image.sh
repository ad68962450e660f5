#!/usr/bin/env bash
# The container image's Python part without a Docker engine, done the way the Dockerfile does it:
#   0. hadolint the Dockerfile (its .hadolint.yaml requires the OCI labels and allows no others);
#   1. the build backend from requirements-build.lock (hashes checked), then the project's wheel (no deps);
#   2. a CLEAN venv made without pip: requirements.lock installed with --require-hashes --no-deps
#      --only-binary=:all: (every file checked against the lock, no compiler), then the wheel, then `pip check`,
#      then its bytecode (hash-checked, as the builder stage compiles it);
#   3. the SBOM of that venv (CycloneDX JSON, cyclonedx-py) checked to list grpcio, redis and countersign at the
#      locked versions; copied to $SBOM_OUT when set;
#   4. from another cwd: the installed `countersign --help` and `countersign serve --help`;
#   5. `countersign serve` with examples/registry.yaml and the embedded redis on 127.0.0.1:0, wait for the
#      "listening" line, check /metrics, check gRPC health SERVING with the image's probe script run by
#      the installed package's python, SIGTERM, expect exit 0.
# Usage: scripts/check_image.sh [SOURCE_DIR]   (default: this repository; PYTHON picks the interpreter, whose
#        directory also holds hadolint and cyclonedx-py: the dev venv's)
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
src="$(cd "${1:-$here}" && pwd)"
py="${PYTHON:-python3}"
tools="$(dirname "$(command -v "$py")")"
work="$(mktemp -d "${TMPDIR:-/tmp}/countersign-image.XXXXXX")"
pid=""
cleanup() {
  # serve runs in its own process group (setsid): this also ends the embedded redis-server it started,
  # even when serve itself died at start and left it behind.
  if [ -n "$pid" ]; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf 'check_image: %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

command -v redis-server >/dev/null || die "redis-server is needed for the embedded-redis run (apt-get install redis-server)"
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$py is older than 3.11"
for tool in hadolint cyclonedx-py; do
  [ -x "$tools/$tool" ] || die "$tools/$tool is missing (pip install -e '.[dev]')"
done

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV

# 0. hadolint, with the repository's .hadolint.yaml (found from the cwd).
(cd "$src" && "$tools/hadolint" --no-color Dockerfile) || die "hadolint Dockerfile"
say "hadolint: clean, OCI labels present"

# 1. The wheel, from a copy of exactly what the Dockerfile copies (so a file missing from package data fails here),
#    built by the locked backend without build isolation (nothing unhashed is fetched).
mkdir -p "$work/ctx" "$work/wheels"
cp "$src/pyproject.toml" "$src/README.md" "$src/requirements.lock" "$src/requirements-build.lock" "$work/ctx/"
cp -r "$src/countersign" "$work/ctx/"
find "$work/ctx" -name __pycache__ -prune -exec rm -rf {} +
"$py" -m venv "$work/build"
"$work/build/bin/python" -m pip install -q --require-hashes --no-deps --only-binary=:all: \
  -r "$work/ctx/requirements-build.lock" || die "the build backend does not install from requirements-build.lock"
say "building the wheel"
"$work/build/bin/python" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$work/wheels" "$work/ctx"
wheel="$(ls "$work"/wheels/countersign-*.whl)"

# 2. A clean venv without pip; the outer pip installs the lock into it (hashes checked), then the wheel.
"$py" -m venv --without-pip "$work/venv"
vpy="$work/venv/bin/python"
"$py" -m pip --python "$vpy" install -q --require-hashes --no-deps --only-binary=:all: -r "$work/ctx/requirements.lock" \
  || die "requirements.lock does not install with --require-hashes (run 'make lock' after changing pyproject.toml)"
"$py" -m pip --python "$vpy" install -q --no-deps --no-index "$wheel"
"$py" -m pip --python "$vpy" check || die "the locked dependencies do not satisfy the wheel's requirements"
"$vpy" -m compileall -q -f -j 0 --invalidation-mode checked-hash "$work/venv/lib" \
  || die "the venv does not compile to bytecode (the Dockerfile's builder does this)"
cs="$work/venv/bin/countersign"
cp "$here/deploy/docker/healthcheck.py" "$work/countersign-healthcheck"

# 3. The SBOM of exactly that venv.
"$tools/cyclonedx-py" environment --output-format JSON --output-file "$work/sbom.cdx.json" "$vpy" \
  || die "cyclonedx-py could not describe the venv"
"$vpy" - "$work/sbom.cdx.json" "$work/ctx/requirements.lock" <<'PY' || die "the SBOM does not list what the image runs"
import json, re, sys
sbom = json.load(open(sys.argv[1]))
found = {c["name"].lower(): c.get("version") for c in sbom.get("components", [])}
locked = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==([^ ;\\]+)", open(sys.argv[2]).read(), re.M))
for name in ("grpcio", "redis", "protobuf", "opentelemetry-sdk"):
    if found.get(name) != locked.get(name):
        sys.exit(f"SBOM: {name} {found.get(name)} (locked {locked.get(name)})")
root = sbom.get("metadata", {}).get("component") or {}
if "countersign" not in found and root.get("name") != "countersign":
    sys.exit("SBOM: countersign itself is missing")
print(f"check_image: SBOM lists {len(found)} components: grpcio {found['grpcio']}, redis {found['redis']}",
      file=sys.stderr)
PY
if [ -n "${SBOM_OUT:-}" ]; then mkdir -p "$(dirname "$SBOM_OUT")"; cp "$work/sbom.cdx.json" "$SBOM_OUT"; say "SBOM: $SBOM_OUT"; fi

mkdir -p "$work/run"
cd "$work/run"
where="$("$vpy" -c 'import countersign, pathlib; print(pathlib.Path(countersign.__file__).resolve().parent)')"
case "$where" in "$work/venv/"*) ;; *) die "countersign imported from $where, not from the clean venv" ;; esac
for f in store/lua/claim.lua store/lua/settle.lua v1/gateway_pb2.py v1/gateway_pb2_grpc.py; do
  [ -f "$where/$f" ] || die "the wheel lacks countersign/$f"
done
"$vpy" -m pip --version >/dev/null 2>&1 && die "the venv has pip; the image's must not"

# 4. The installed entry point.
"$cs" --help >/dev/null || die "countersign --help"
"$cs" serve --help | grep -q -- '--registry' || die "countersign serve --help"

# 5. Serve, probe, stop: on TCP loopback, then on a unix socket the way the chart's listen.unixSocket runs it.
cp "$here/examples/registry.yaml" "$work/registry.yaml"

wait_listening() {  # after starting serve in the background as $pid: wait for the listening line into $line
  local deadline=$((SECONDS + 30))
  until grep -q '"event": "listening"' "$work/stdout" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/stderr" >&2; die "countersign serve exited before listening"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$work/stderr" >&2; die "no listening line within 30 s"; }
    sleep 0.2
  done
  line="$(grep -m1 '"event": "listening"' "$work/stdout")"
  say "listening: $line"
}

stop() {  # SIGTERM, expect exit 0 and the stopped line
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  local group="$pid"
  pid=""
  [ "$rc" -eq 0 ] || { cat "$work/stderr" >&2; die "countersign serve exited $rc after SIGTERM (want 0)"; }
  pgrep -g "$group" >/dev/null && die "processes of serve's group outlived it: $(pgrep -a -g "$group")"
  grep -q '"event": "stopped"' "$work/stderr" || die "no stopped line after SIGTERM"
}

setsid "$cs" serve --registry "$work/registry.yaml" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  >"$work/stdout" 2>"$work/stderr" &
pid=$!
wait_listening
grpc_addr="$("$vpy" -c 'import json, sys; print(json.loads(sys.argv[1])["grpc"])' "$line")"
metrics_addr="$("$vpy" -c 'import json, sys; print(json.loads(sys.argv[1])["metrics"])' "$line")"
"$vpy" - "$metrics_addr" <<'PY' || die "/metrics does not serve the countersign families"
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
sys.exit(0 if "countersign_executions" in body and "countersign_stage_duration_seconds" in body else 1)
PY
"$vpy" "$work/countersign-healthcheck" --address "$grpc_addr" || die "gRPC health is not SERVING"
"$vpy" "$work/countersign-healthcheck" --address "$grpc_addr" --service countersign.v1.ToolGatewayService \
  || die "gRPC health of countersign.v1.ToolGatewayService is not SERVING"
COUNTERSIGN_LISTEN="$grpc_addr" "$vpy" "$work/countersign-healthcheck" || die "health via COUNTERSIGN_LISTEN"
say "health SERVING on $grpc_addr"
stop
if "$vpy" "$work/countersign-healthcheck" --address "$grpc_addr" --timeout 1 2>/dev/null; then
  die "health still answers after the sidecar stopped"
fi

# The chart's unix-socket mode: `umask 0007 && exec countersign serve`, the socket group-writable.
mkdir -p "$work/sock"
export COUNTERSIGN_LISTEN="unix:$work/sock/countersign.sock"
: >"$work/stdout"
setsid sh -c 'umask 0007 && exec "$0" serve --registry "$1" --metrics-listen ""' "$cs" "$work/registry.yaml" \
  >"$work/stdout" 2>"$work/stderr" &
pid=$!
wait_listening
mode="$(stat -c %A "$work/sock/countersign.sock")"
[ "$mode" = "srwxrwx---" ] || die "socket mode $mode, want srwxrwx---"
"$vpy" "$work/countersign-healthcheck" || die "gRPC health on $COUNTERSIGN_LISTEN is not SERVING"
say "health SERVING on $COUNTERSIGN_LISTEN"
stop
unset COUNTERSIGN_LISTEN

say "OK: hadolint clean, the lock installs with hashes, the SBOM lists it, the wheel serves on TCP and on a unix socket, reports SERVING, stops on SIGTERM with 0"
