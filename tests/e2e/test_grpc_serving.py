"""How the gRPC server serves its methods: every service through its generic handler, none as a registered method
(grpc.aio keeps a request pending per registered method and waits on all of them again for every call that
arrives: sidecar/server.py GenericOnly), and every kind of call still answered: unary, server streaming, the
reflection stream, an unknown method."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from countersign.sidecar import app, settings
from countersign.sidecar.server import SERVICES
from countersign.testing.calls import ctx
from countersign.testing.stack import Stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, guard_pb2, guard_pb2_grpc

HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name


@pytest.fixture
async def sidecar(stack: Stack) -> AsyncIterator[app.Sidecar]:
    """The sidecar in this process (so its event loop's tasks can be looked at), on the stack's Redis and todo
    service."""
    s = settings.Settings(
        registry=str(stack.registry),
        listen="127.0.0.1:0",
        redis_url=stack.redis.info["url"],
        keys_file=str(stack.keys),
    ).validate()
    running = await app.start(s)
    yield running
    await running.stop(grace=1)


def _request_tasks() -> list[str]:
    """The tasks of grpc.aio's serving loop that wait for the next call: one per registered method, one generic."""
    names = [repr(task) for task in asyncio.all_tasks()]
    return [name for name in names if "_request_registered_call" in name or "_request_call" in name]


async def test_no_method_is_registered_one_generic_request_waits_and_every_kind_of_call_is_answered(
    sidecar: app.Sidecar,
) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))  # serving
        pending = _request_tasks()
        assert [n for n in pending if "_request_registered_call" in n] == [], pending
        assert len(pending) == 1, pending  # the generic request, re-armed after each call

        checked = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=SERVICES[0]))
        assert checked.status == health_pb2.HealthCheckResponse.SERVING
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING  # server streaming
        watch.cancel()

        stream = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        listed = [s.name async for answer in stream for s in answer.list_services_response.service]
        assert sorted(listed) == sorted([*SERVICES, HEALTH, REFLECTION])

        gateway = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
        card = await gateway.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex),
                tool_name="create_todo",
                arguments_json=json.dumps({"title": "served"}),
            )
        )
        confirmed = await gateway.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=card.confirmation.token))
        assert confirmed.action.state == common_pb2.ACTION_STATE_SUCCEEDED
        checked_reply = await guard_pb2_grpc.ReplyGuardServiceStub(channel).CheckReply(
            guard_pb2.CheckReplyRequest(context=ctx(), reply_text="hello")
        )
        assert checked_reply is not None

        unknown = channel.unary_unary(f"/{SERVICES[0]}/NoSuchMethod")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await unknown(b"")
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED

        # a bad request body is still answered by the sidecar's own decoding (REQUEST_INVALID, not UNKNOWN)
        raw = channel.unary_unary(f"/{SERVICES[0]}/Confirm")
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await raw(b"\x0a\x03\xff\xfe\xfd")
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(_request_tasks()) == 1
