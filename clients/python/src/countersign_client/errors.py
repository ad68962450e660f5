"""Typed errors of the Countersign sidecar, read from the google.rpc.Status in the grpc-status-details-bin trailer.

    CountersignError            .code (grpc.StatusCode), .reason (ErrorInfo.reason, stable UPPER_SNAKE: branch
     │                           on it, never on .message), .metadata, .violations (BadRequest), .retry_after
     ├── InvalidArgument        INVALID_ARGUMENT: ARGS_INVALID (with .violations), CONFIRMATION_TOKEN_INVALID, ...
     ├── NotFound               NOT_FOUND: TOOL_NOT_FOUND, CONFIRMATION_EXPIRED, ACTION_NOT_FOUND
     ├── PermissionDenied       PERMISSION_DENIED: ROLE_NOT_ALLOWED, CONFIRMATION_BINDING_MISMATCH, ...
     ├── FailedPrecondition     FAILED_PRECONDITION: POLICY_CHANGED, CONTINUATION_NOT_READY, a downstream's own reason
     ├── DataLoss               DATA_LOSS: CONFIRMATION_TAMPERED, RECORD_TAMPERED
     ├── Unavailable            UNAVAILABLE: STORE_UNAVAILABLE, DOWNSTREAM_UNAVAILABLE, DOWNSTREAM_NOT_SENT and
     │                           REPLICAS_NOT_ACKNOWLEDGED (the card is READY again; .retry_after), or no sidecar
     │                           at all (retryable: every sidecar RPC is safe to repeat)
     └── ResourceExhausted      RESOURCE_EXHAUSTED: OVERLOADED, with .retry_after from google.rpc.RetryInfo
                                 (retryable); a message over the size limit has reason "" and is not retryable

Any other code (DEADLINE_EXCEEDED, CANCELLED, INTERNAL, ...) is a plain CountersignError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

DOMAIN = "countersign"
_DETAILS = "grpc-status-details-bin"


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class CountersignError(Exception):
    """A failed sidecar call, with what its status details said."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        domain: str = "",
        metadata: dict[str, str] | None = None,
        violations: tuple[FieldViolation, ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{code.name} {reason or '-'}: {message}")
        self.code, self.message, self.reason, self.domain = code, message, reason, domain
        self.metadata = metadata or {}
        self.violations = violations
        self.retry_after = retry_after  # seconds, from google.rpc.RetryInfo

    @property
    def retryable(self) -> bool:
        """Worth repeating after a backoff: the sidecar was overloaded or could not reach its store/downstream."""
        if self.code == grpc.StatusCode.UNAVAILABLE:
            return True
        return self.code == grpc.StatusCode.RESOURCE_EXHAUSTED and self.reason == "OVERLOADED"


class InvalidArgument(CountersignError):
    pass


class NotFound(CountersignError):
    pass


class PermissionDenied(CountersignError):
    pass


class FailedPrecondition(CountersignError):
    pass


class DataLoss(CountersignError):
    pass


class Unavailable(CountersignError):
    pass


class ResourceExhausted(CountersignError):
    pass


_BY_CODE: dict[grpc.StatusCode, type[CountersignError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def from_rpc_error(error: grpc.RpcError) -> CountersignError:
    """The typed error of a failed call (grpc.RpcError raised by a stub)."""
    code: grpc.StatusCode = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message: str = (error.details() if hasattr(error, "details") else "") or ""
    reason = domain = ""
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_after: float | None = None
    trailers: Any = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    raw = next((value for key, value in (trailers or ()) if key == _DETAILS), None)
    if isinstance(raw, bytes):
        status = status_pb2.Status()
        try:
            status.ParseFromString(raw)
        except Exception:  # a malformed trailer must not hide the error itself
            status = status_pb2.Status()
        message = status.message or message
        for detail in status.details:
            info, retry, bad = (
                error_details_pb2.ErrorInfo(),
                error_details_pb2.RetryInfo(),
                error_details_pb2.BadRequest(),
            )
            if detail.Unpack(info):
                reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
            elif detail.Unpack(retry):
                retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
            elif detail.Unpack(bad):
                violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
    return _BY_CODE.get(code, CountersignError)(
        code,
        message,
        reason=reason,
        domain=domain,
        metadata=metadata,
        violations=tuple(violations),
        retry_after=retry_after,
    )
