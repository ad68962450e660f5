"""Coverage-guided fuzzing (atheris / libFuzzer) of the argument normaliser: ``policy.authorize`` -> ``normalise``.

For every tool of examples/registry.yaml (and a planned, a forbidden and an unknown name), random bytes are decoded
as the model's arguments_json and run through the policy. Property: the policy returns an Allowed (whose canonical
bytes decode back to the same arguments, which the tool's closed schema accepts) or a refusal, or raises a
CountersignError with an UPPER_SNAKE reason and a message. Any other exception is a crash that libFuzzer reports.

    .venv/bin/python fuzz/fuzz_arguments.py -max_total_time=60 [CORPUS_DIR]

Any libFuzzer flag works (-runs=N, -max_len=N, -artifact_prefix=DIR/); tests/test_fuzz.py runs it for a bounded time.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent

with atheris.instrument_imports():
    from countersign import registry
    from countersign.errors import CountersignError
    from countersign.path import policy
    from countersign.v1 import common_pb2

REGISTRY = registry.load(str(ROOT / "examples" / "registry.yaml"))
TOOLS = sorted(REGISTRY.tools) + sorted(REGISTRY.refusals) + ["no_such_tool"]
KEYS = sorted({k for tool in REGISTRY.tools.values() for k in (*tool.aliases, *tool.schema.get("properties", {}))})
CONTEXT = common_pb2.CallContext(
    tenant_id="t1", actor_id="alice", subject_id="alice", session_id="s1", request_id="r1", role="user", locale="zh-CN"
)
REASON = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")


def arguments_text(fdp: atheris.FuzzedDataProvider) -> str:
    """The fuzzer's bytes as JSON text: whole, or as the value of a known key (to reach the schema quickly)."""
    mode = fdp.ConsumeIntInRange(0, 3)
    if mode == 0:
        return fdp.ConsumeBytes(fdp.remaining_bytes()).decode("utf-8", "replace")
    if mode == 1:  # any code unit, lone surrogates included (the normaliser must refuse them itself)
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        if fdp.ConsumeBool() or len(raw) < 2:
            return raw.decode("latin-1")
        return raw[: len(raw) // 2 * 2].decode("utf-16-le", "surrogatepass")
    key = fdp.PickValueInList(KEYS)
    if mode == 2:  # {"<known key>": <fuzz>}
        return f'{{"{key}": {fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())}}}'
    other = fdp.PickValueInList(KEYS)
    return f'{{"{key}": "x", "{other}": {fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())}}}'


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    name = fdp.PickValueInList(TOOLS)
    text = arguments_text(fdp)
    try:
        out = policy.authorize(REGISTRY, CONTEXT, name, text, policy.Phase.INVOKE)
    except CountersignError as exc:
        if not REASON.match(exc.reason) or not exc.message:
            raise AssertionError(f"unclear error: {exc.reason!r} {exc.message!r}") from exc
        return
    if isinstance(out, policy.Allowed):
        again = json.loads(out.canonical_args)
        if again != out.arguments:
            raise AssertionError(f"canonical bytes {out.canonical_args!r} do not decode to {out.arguments!r}")
        if not out.tool.validator.is_valid(again):
            raise AssertionError(f"allowed arguments the schema refuses: {again!r}")


def main() -> None:
    argv = list(sys.argv)
    if not any(a.startswith("-dict=") for a in argv):
        argv.append(f"-dict={Path(__file__).resolve().parent / 'arguments.dict'}")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
