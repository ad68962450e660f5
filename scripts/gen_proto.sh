#!/usr/bin/env bash
# Generate the Python stubs from proto/: the sidecar's own (countersign/v1) and the client package's
# (clients/python/src/countersign_client/v1). Never edit the output by hand; `make proto-check` fails when the
# committed stubs differ from what this produces.
#
# The client's copy is the same protoc output with its imports moved to countersign_client.v1, so the client
# package installs alone (it needs no `countersign` package). The serialized descriptors inside keep their file
# names (countersign/v1/*.proto), so the two copies may also be imported in one process: the descriptor pool
# takes the identical files once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-"$root/.venv/bin/python"}
out=${1:-"$root"}
mkdir -p "$out/countersign/v1"
"$py" -m grpc_tools.protoc -I"$root/proto" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$root"/proto/countersign/v1/*.proto
touch "$out/countersign/v1/__init__.py"

client="$out/clients/python/src/countersign_client/v1"
mkdir -p "$client"
for f in "$out"/countersign/v1/*_pb2.py "$out"/countersign/v1/*_pb2.pyi "$out"/countersign/v1/*_pb2_grpc.py; do
  sed -e 's/^from countersign\.v1 import /from countersign_client.v1 import /' "$f" >"$client/$(basename "$f")"
done
printf '"""Generated from proto/countersign/v1 by scripts/gen_proto.sh (make proto); do not edit."""\n' \
  >"$client/__init__.py"
