"""The approval digest (docs/approvals.md): the worked example pinned, and what changes it (and what does not)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from countersign.approvals.digest import approval_digest, digest_document, rfc3339_ms
from countersign.testing.processes import ROOT
from countersign.v1 import common_pb2

# the worked example of docs/approvals.md, byte for byte
TOOL = "create_todo"
ARGS = {"title": "Buy milk", "dueAt": "2026-12-02T18:00:00+08:00", "priority": 1}
PREVIEW: dict[str, Any] = {
    "title": "创建待办",
    "target": "Buy milk",
    "impact": "确认后将创建一条截止于 2026-12-02T18:00:00+08:00 的待办。",
    "details": [{"label": "Priority", "value": "1"}],
}
POLICY = "2026-11-29.1"
EXPIRES_MS = 1796117400250
CANONICAL = (
    '{"arguments":{"dueAt":"2026-12-02T18:00:00+08:00","priority":1,"title":"Buy milk"},'
    '"expires_at":"2026-12-01T09:30:00.250Z","policy_version":"2026-11-29.1",'
    '"preview":{"details":[{"label":"Priority","value":"1"}],'
    '"impact":"确认后将创建一条截止于 2026-12-02T18:00:00+08:00 的待办。","target":"Buy milk","title":"创建待办"},'
    '"tool":"create_todo","v":1}'
)
DIGEST = "sha256:uCawrYwtET_0dSQ9IJQkJhN-vrwB7taxdB5s9_TSiV4"


def test_the_worked_example_of_the_docs_gives_exactly_its_digest() -> None:
    assert approval_digest(TOOL, ARGS, PREVIEW, POLICY, EXPIRES_MS) == DIGEST


def test_the_digest_is_recomputable_without_our_code_from_the_documented_construction() -> None:
    # what an app backend in another language does: sorted keys, no spaces, UTF-8, SHA-256, base64url no padding
    # (plain sorted-key JSON equals RFC 8785 here: no floats, no escapes, keys in the BMP)
    document = {
        "v": 1,
        "tool": TOOL,
        "arguments": ARGS,
        "preview": PREVIEW,
        "policy_version": POLICY,
        "expires_at": "2026-12-01T09:30:00.250Z",
    }
    raw = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert raw.decode("utf-8") == CANONICAL
    assert "sha256:" + base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode() == DIGEST


def test_a_proto_preview_and_its_dict_give_the_same_digest() -> None:
    proto = common_pb2.Preview(title=PREVIEW["title"], target=PREVIEW["target"], impact=PREVIEW["impact"])
    proto.details.add(label="Priority", value="1")
    assert approval_digest(TOOL, ARGS, proto, POLICY, EXPIRES_MS) == DIGEST


def test_an_empty_preview_field_reads_as_empty_whether_omitted_or_given() -> None:
    # the card stores the preview as MessageToDict, which omits empty fields
    assert approval_digest(TOOL, ARGS, {"title": "t"}, POLICY, EXPIRES_MS) == approval_digest(
        TOOL, ARGS, {"title": "t", "target": "", "impact": "", "details": []}, POLICY, EXPIRES_MS
    )


@pytest.mark.parametrize(
    "change",
    [
        {"tool": "delete_todo"},
        {"args": {**ARGS, "title": "Buy oat milk"}},
        {"args": {**ARGS, "priority": 2}},
        {"args": {**ARGS, "extra": None}},
        {"preview": {**PREVIEW, "target": "Buy oat milk"}},
        {"preview": {**PREVIEW, "impact": ""}},
        {"preview": {**PREVIEW, "details": [{"label": "Priority", "value": "2"}]}},
        {"preview": {**PREVIEW, "details": []}},
        {"policy": "2026-11-29.2"},
        {"expires": EXPIRES_MS + 1},
    ],
    ids=lambda change: next(iter(change)) + ":" + json.dumps(next(iter(change.values())), ensure_ascii=False)[:40],
)
def test_anything_the_user_saw_changes_the_digest(change: dict[str, Any]) -> None:
    inputs = {"tool": TOOL, "args": ARGS, "preview": PREVIEW, "policy": POLICY, "expires": EXPIRES_MS, **change}
    other = approval_digest(inputs["tool"], inputs["args"], inputs["preview"], inputs["policy"], inputs["expires"])
    assert other != DIGEST


def test_the_order_of_argument_keys_does_not_change_the_digest() -> None:
    reordered = dict(reversed(list(ARGS.items())))
    assert approval_digest(TOOL, reordered, PREVIEW, POLICY, EXPIRES_MS) == DIGEST


def test_a_preview_field_the_construction_does_not_know_is_refused_rather_than_dropped() -> None:
    with pytest.raises(ValueError, match="unknown field"):
        approval_digest(TOOL, ARGS, {**PREVIEW, "footnote": "and also deletes everything"}, POLICY, EXPIRES_MS)


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "1970-01-01T00:00:00.000Z"), (1796117400250, "2026-12-01T09:30:00.250Z"), (999, "1970-01-01T00:00:00.999Z")],
)
def test_expiry_is_rfc3339_utc_with_milliseconds(ms: int, text: str) -> None:
    assert rfc3339_ms(ms) == text


def test_inputs_that_are_not_json_are_refused() -> None:
    with pytest.raises(ValueError):
        approval_digest(TOOL, {"n": float("nan")}, PREVIEW, POLICY, EXPIRES_MS)
    with pytest.raises(ValueError):
        approval_digest(TOOL, ARGS, PREVIEW, POLICY, -1)
    assert digest_document(TOOL, ARGS, PREVIEW, POLICY, EXPIRES_MS)["expires_at"] == "2026-12-01T09:30:00.250Z"


def test_the_javascript_of_the_docs_computes_the_same_digest(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "node is missing: install the Debian package 'nodejs' (make test-tools does)"
    docs = (ROOT / "docs" / "approvals.md").read_text(encoding="utf-8")
    block = docs.split("<!-- digest-js -->", 1)[1].split("```js\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "digest.mjs"
    script.write_text(block, encoding="utf-8")
    done = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == DIGEST


def test_the_docs_show_the_pinned_example() -> None:
    docs = (ROOT / "docs" / "approvals.md").read_text(encoding="utf-8")
    assert DIGEST in docs and CANONICAL in docs
