#!/usr/bin/env bash
# Generate the Python stubs in countersign/v1 from proto/. Never edit the output by hand;
# `make proto-check` fails when the committed stubs differ from what this produces.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-"$root/.venv/bin/python"}
out=${1:-"$root"}
mkdir -p "$out/countersign/v1"
"$py" -m grpc_tools.protoc -I"$root/proto" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$root"/proto/countersign/v1/*.proto
touch "$out/countersign/v1/__init__.py"
