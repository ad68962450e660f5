"""What a test sends and reads: a CallContext, and the rich status details of a failed call."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.v1 import common_pb2


def ctx(**overrides: Any) -> common_pb2.CallContext:
    base = dict(
        tenant_id="t1",
        actor_id="alice",
        subject_id="alice",
        session_id="s1",
        request_id="r1",
        role="user",
        locale="zh-CN",
    )
    base.update(overrides)
    return common_pb2.CallContext(**base)


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The ErrorInfo of a failed call (asserts there is one)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"no rich status in {err}"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError(f"no ErrorInfo in {status}")


def bad_request(err: grpc.RpcError) -> error_details_pb2.BadRequest:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad
    raise AssertionError(f"no BadRequest in {status}")
