"""Experiment: variants of the read's GET inside a bare grpc.aio server (tool_name picks the variant)."""
import asyncio, json, os, signal, sys, time
import aiohttp, grpc, yarl
sys.path[:0] = ["/work/wt/lean-read"]
from countersign.v1 import gateway_pb2
from countersign.adapters.http import HttpAdapter
from countersign.adapters.base import CallMeta
from countersign.registry.load import load as regload_fn
from countersign.observability import tracing

REG = sys.argv[1]; TODO = sys.argv[2].rstrip("/")
registry = regload_fn(REG)
tool = registry.tools["list_todos"]
session = None
adapter = HttpAdapter()
url = TODO + "/todos"

def sidecar_headers():
    h = dict(tracing.outgoing_headers())
    h.update({"X-Countersign-Attempt": "1", "X-Countersign-Policy-Version": registry.policy_version,
              "X-Countersign-Tenant": "bench-tenant", "X-Countersign-Actor": "bench-reader", "X-Countersign-Subject": "bench-reader"})
    return h

async def read(request, context):
    v = request.tool_name
    if v in ("bare", "bare2"):
        async with session.get(url, params={"status": "done"}, headers={"X-Countersign-Subject": "bench-reader"}) as r:
            body = await r.read()
    elif v == "headers":
        async with session.get(url, params={"status": "done"}, headers=sidecar_headers()) as r:
            body = await r.read()
    elif v == "timeout":
        async with session.get(url, params={"status": "done"}, headers={"X-Countersign-Subject": "bench-reader"}, timeout=aiohttp.ClientTimeout(total=5)) as r:
            body = await r.read()
    elif v == "yarl":
        u = yarl.URL(url + "?status=done", encoded=True)
        async with session.request("GET", u, headers={"X-Countersign-Subject": "bench-reader"}, allow_redirects=False) as r:
            body = await r.read()
    elif v == "adapter_session":
        async with adapter._client().get(url, params={"status": "done"}, headers={"X-Countersign-Subject": "bench-reader"}) as r:
            body = await r.read()
    elif v == "adapter":
        meta = CallMeta(policy_version=registry.policy_version, tenant_id="bench-tenant", actor_id="bench-reader",
                        subject_id="bench-reader", locale="en", trace_headers=tracing.outgoing_headers)
        out = await adapter.execute(tool, {"status": "done"}, meta, 5.0)
        body = json.dumps(out.body).encode()
    else:
        raise ValueError(v)
    return gateway_pb2.InvokeResponse(result=gateway_pb2.ToolResult(tool_name=v, result_json=body.decode()))

async def main():
    global session
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128, keepalive_timeout=30))
    h = grpc.unary_unary_rpc_method_handler(read, request_deserializer=gateway_pb2.InvokeRequest.FromString,
                                            response_serializer=gateway_pb2.InvokeResponse.SerializeToString)
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("x.E", {"Read": h}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"event": "listening", "grpc": f"127.0.0.1:{port}"}), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
asyncio.run(main())
