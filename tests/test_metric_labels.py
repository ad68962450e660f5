"""A downstream's free text never becomes a metric label (issue 11, the small ones; DESIGN §10).

A downstream's refusal reason is passed on to the caller (its ErrorInfo says what the service said), but a
label value is one of a fixed set of the sidecar's own reasons, or OTHER: a downstream answering a hundred
different reasons adds one series, not a hundred.
"""

from __future__ import annotations

import ast
import json
import re
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
from conftest import ROOT, ctx, error_info
from downstreams import Raw, answer, registry_doc, sidecar_over

from countersign.observability import metrics
from countersign.v1 import gateway_pb2, gateway_pb2_grpc


def _labels(scrape: str, name: str, label: str) -> set[str]:
    return {m.group(1) for m in re.finditer(rf'^{name}\{{[^}}]*{label}="([^"]*)"', scrape, re.M)}


async def test_a_hundred_downstream_reasons_make_one_label_value(tmp_path: Path) -> None:
    raw = await Raw(lambda s: answer(422, {"reason": f"SECRET_REASON_{s.target.split('=')[-1]}",
                                           "message": "no"})).start()
    try:
        # prepare refuses too, with the same hundred reasons (its URL carries the number)
        doc = registry_doc(raw.url, set_thing={"adapter": {
            "kind": "http", "execute": {"method": "POST", "url": f"{raw.url}/things/{{id}}/status"},
            "prepare": {"url": f"{raw.url}/things/prepare?n={{status}}"}}})
        async with sidecar_over(tmp_path, doc) as sidecar, grpc.aio.insecure_channel(sidecar.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            for i in range(100):
                tool, args = (("read_things", {"q": str(i)}) if i % 2 else
                              ("set_thing", {"id": "t_1", "status": str(i)}))
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Invoke(gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex),
                                                                tool_name=tool, arguments_json=json.dumps(args)))
                assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert error_info(info.value).reason == f"SECRET_REASON_{i}", "the caller still hears the reason"
            with urllib.request.urlopen(f"http://{sidecar.metrics_address}/metrics", timeout=10) as resp:
                scrape = resp.read().decode()
    finally:
        await raw.stop()
    assert len(raw.seen) == 100
    assert "SECRET_REASON" not in scrape
    # the sidecar creates OVERLOADED and STORE_UNAVAILABLE at 0 for every RPC (alerts see their first event);
    # apart from those the hundred reasons add one label value
    assert _labels(scrape, "countersign_refusals_total", "reason") == {"OTHER", *metrics.PRECREATED_REASONS}
    assert re.search(r'^countersign_refusals_total\{reason="OTHER",rpc="Invoke"\} 100\.0$|'
                     r'^countersign_refusals_total\{rpc="Invoke",reason="OTHER"\} 100\.0$', scrape, re.M), scrape


ERRORS = {"InvalidArgument", "NotFound", "PermissionDenied", "FailedPrecondition", "DataLoss", "Unavailable",
          "ResourceExhausted", "CountersignError", "PrepareRefused", "NotSendable"}


def _raised_reasons() -> set[str]:
    """Every reason literal the sidecar raises itself (the first argument of an error of the tree), and every
    literal reason of a FAILED outcome (which a read passes on as its refusal)."""
    found: set[str] = set()
    for path in (ROOT / "countersign").rglob("*.py"):
        if "/v1/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            args = node.args[1:] if name == "Outcome" else node.args
            if (name in ERRORS or name == "Outcome") and args and isinstance(args[0], ast.Constant) \
                    and isinstance(args[0].value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", args[0].value):
                found.add(args[0].value)
    return found


def test_every_reason_the_sidecar_raises_is_a_known_label() -> None:
    raised = _raised_reasons()
    assert {"ARGS_INVALID", "OVERLOADED", "DOWNSTREAM_REDIRECT", "NOT_SENT"} <= raised, "the scan finds reasons"
    missing = raised - metrics.REASONS
    assert not missing, f"add these to metrics.REASONS (or they are counted as OTHER): {sorted(missing)}"
    assert metrics.Metrics().reason("SOMETHING_A_DOWNSTREAM_SAID") == "OTHER"
    assert metrics.Metrics().reason("ARGS_INVALID") == "ARGS_INVALID"
    assert "STORE_UNAVAILABLE" in metrics.REASONS   # raised through super().__init__, which the scan skips
