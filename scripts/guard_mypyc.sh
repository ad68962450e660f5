#!/usr/bin/env bash
# A copy of a commit's tree with the reply guard (countersign/guard/*.py but __init__) compiled by mypyc, for
# measuring only: nothing ships compiled (the image builds from wheels, no compiler runs; notes/guard-cpu9.md).
#   scripts/guard_mypyc.sh OUT [COMMIT]      (default COMMIT: HEAD; OUT must not exist)
# then, from this tree:
#   .venv/bin/python bench/guard.py --against OUT --calls 1000 --rounds 6     # compiled (before) vs this tree
#   PYTHONPATH=OUT .venv/bin/python scripts/guard_verdicts.py                 # the compiled guard's verdicts
# Python imports an extension module before the .py of the same name, so OUT first on the import path runs the
# compiled modules. Needs a C compiler and the dev venv's mypy (mypyc).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: scripts/guard_mypyc.sh OUT [COMMIT]}"
commit="${2:-HEAD}"
if [[ -e "$out" ]]; then
  echo "$out exists: give a new folder" >&2
  exit 2
fi
mkdir -p "$out"
git -C "$here" archive "$commit" | tar -x -C "$out"
cd "$out"
mapfile -t modules < <(ls countersign/guard/*.py | grep -v '__init__\.py$')
"$here/.venv/bin/mypyc" "${modules[@]}" >"$out/mypyc.log" 2>&1 || {
  tail -20 "$out/mypyc.log" >&2
  exit 1
}
echo "compiled ${#modules[@]} modules of $commit into $out (log: $out/mypyc.log)"
