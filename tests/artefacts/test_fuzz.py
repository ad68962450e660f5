"""The coverage-guided fuzzers (atheris) over the token parser and the argument normaliser, for a bounded time.

Each fuzzer runs in its own process for COUNTERSIGN_FUZZ_SECONDS (default 20) with a fresh corpus; a crash (an
exception other than the allowed ones, or a broken property) makes libFuzzer exit non-zero and leave the input in
the test's temporary folder, whose path and base64 the failure message shows. Without atheris the tests fail and
say how to install it: they never skip.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from countersign.testing.processes import ROOT

SECONDS = int(os.environ.get("COUNTERSIGN_FUZZ_SECONDS", "20"))


def _atheris() -> None:
    if importlib.util.find_spec("atheris") is None:
        pytest.fail(
            f"atheris is not installed in {sys.executable}: `{sys.executable} -m pip install atheris` "
            "(a dev dependency; it ships manylinux wheels for CPython 3.11 on x86_64; elsewhere it builds "
            "from source and needs clang with libFuzzer)"
        )


@pytest.mark.parametrize("fuzzer", ["fuzz_tokens", "fuzz_arguments"])
def test_fuzzer_runs_clean_for_a_bounded_time(fuzzer: str, tmp_path: Path) -> None:
    _atheris()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fuzz" / f"{fuzzer}.py"),
            f"-max_total_time={SECONDS}",
            "-timeout=10",
            "-rss_limit_mb=2048",
            f"-artifact_prefix={tmp_path}/",
            "-print_final_stats=1",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=SECONDS + 90,
        cwd=tmp_path,
        env=env,
    )
    log = done.stderr
    crashes = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-")))
    assert done.returncode == 0, (
        f"{fuzzer} found a problem (exit {done.returncode}); inputs in {tmp_path}: {crashes}\n{log[-4000:]}"
    )
    runs = re.search(r"Done (\d+) runs in (\d+) second", log)
    assert runs is not None, f"{fuzzer} did not finish its run:\n{log[-2000:]}"
    assert int(runs.group(1)) > 1000, f"{fuzzer} ran only {runs.group(1)} inputs"
    instrumented = {"fuzz_tokens": "countersign.keyring", "fuzz_arguments": "countersign.path.policy"}[fuzzer]
    assert f"INFO: Instrumenting {instrumented}" in log, "the sidecar's modules were not instrumented"
    assert not crashes
