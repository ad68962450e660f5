"""A thin Python client of the Countersign sidecar (see clients/python/README.md).

    from countersign_client import Client, call_context
    with Client() as cs:                      # $COUNTERSIGN_ADDRESS, else 127.0.0.1:50051
        done = cs.write(call_context(tenant_id="t1", actor_id="alice", session_id="s1", request_id="turn-1"),
                        "create_todo", {"title": "买牛奶"}, approve=ask_the_user, compose=write_reply)

The generated stubs are in countersign_client.v1 (the same messages as proto/countersign/v1).
"""

from countersign_client.client import Backoff, Client, Written, call_context
from countersign_client.errors import (
    CountersignError,
    DataLoss,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    from_rpc_error,
)

__all__ = [
    "Backoff",
    "Client",
    "CountersignError",
    "DataLoss",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unavailable",
    "Written",
    "call_context",
    "from_rpc_error",
]
