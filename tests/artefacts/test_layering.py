"""Imports run one way (docs/architecture.md): the import-linter contracts of pyproject.toml hold, and no module
is longer than a reader takes in one sitting."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from countersign.testing.processes import ROOT

LONGEST = 400  # lines


def test_no_package_imports_upward_and_only_the_store_imports_redis() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "lint-imports is missing: pip install -e '.[dev]' (make deps)"
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout


def test_no_module_is_longer_than_one_sitting() -> None:
    too_long = {}
    for path in (ROOT / "countersign").rglob("*.py"):
        if "v1" in path.parts:  # generated
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > LONGEST:
            too_long[str(path.relative_to(ROOT))] = lines
    assert not too_long, too_long
