"""A downstream's free text never becomes a metric label, seen through the real sidecar (issue 11, the small ones;
docs/design.md §10): the caller hears the downstream's reason, the label is OTHER."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest

from countersign.observability import metrics
from countersign.testing.calls import ctx, error_info
from countersign.testing.downstreams import Raw, answer, registry_doc, sidecar_over
from countersign.v1 import gateway_pb2, gateway_pb2_grpc


def _labels(scrape: str, name: str, label: str) -> set[str]:
    return {m.group(1) for m in re.finditer(rf'^{name}\{{[^}}]*{label}="([^"]*)"', scrape, re.M)}


async def test_a_hundred_downstream_reasons_make_one_label_value(tmp_path: Path) -> None:
    raw = await Raw(
        lambda s: answer(422, {"reason": f"SECRET_REASON_{s.target.split('=')[-1]}", "message": "no"})
    ).start()
    try:
        # prepare refuses too, with the same hundred reasons (its URL carries the number)
        doc = registry_doc(
            raw.url,
            set_thing={
                "adapter": {
                    "kind": "http",
                    "execute": {"method": "POST", "url": f"{raw.url}/things/{{id}}/status"},
                    "prepare": {"url": f"{raw.url}/things/prepare?n={{status}}"},
                }
            },
        )
        async with sidecar_over(tmp_path, doc) as sidecar, grpc.aio.insecure_channel(sidecar.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            for i in range(100):
                tool, args = ("read_things", {"q": str(i)}) if i % 2 else ("set_thing", {"id": "t_1", "status": str(i)})
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Invoke(
                        gateway_pb2.InvokeRequest(
                            context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=json.dumps(args)
                        )
                    )
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
    assert re.search(
        r'^countersign_refusals_total\{reason="OTHER",rpc="Invoke"\} 100\.0$|'
        r'^countersign_refusals_total\{rpc="Invoke",reason="OTHER"\} 100\.0$',
        scrape,
        re.M,
    ), scrape
