"""The one error tree of the sidecar: each error carries a stable reason (countersign/reasons.py) and a gRPC
status. The reason is also the metric label and the google.rpc.ErrorInfo reason, domain "countersign".

    CountersignError
     ├── InvalidArgument                INVALID_ARGUMENT: ARGS_INVALID (with field violations),
     │                                   CONFIRMATION_TOKEN_INVALID, CONTINUATION_TOKEN_INVALID, REQUEST_INVALID,
     │                                   REPLY_TOO_LARGE, SNAPSHOT_TOO_LARGE
     ├── NotFound                       NOT_FOUND: TOOL_NOT_FOUND, CONFIRMATION_EXPIRED, ACTION_NOT_FOUND,
     │                                   CONTINUATION_NOT_FOUND, GRANT_NOT_FOUND
     ├── PermissionDenied               PERMISSION_DENIED: ROLE_NOT_ALLOWED, ADMIN_READONLY,
     │                                   SUBJECT_NOT_ALLOWED, SESSION_MODE_FORBIDS,
     │                                   CONFIRMATION_BINDING_MISMATCH, APPROVAL_REQUIRED, APPROVAL_INVALID
     │                                   (ErrorInfo metadata ``check`` names the failing check; nothing was
     │                                   claimed, the card is READY), CONTEXT_MISMATCH (``check``: the field or
     │                                   admin rule), PEER_NOT_ALLOWED (a client certificate off the allow-list);
     │                                   for a grant's approval (CreateGrant) the same two reasons
     ├── Unauthenticated                UNAUTHENTICATED: CONTEXT_INVALID (the context assertion is missing
     │                                   where --verified-context requires one, or fails a check: ``check``)
     ├── FailedPrecondition             FAILED_PRECONDITION: TOOL_CONFIRMATION_REQUIRED, POLICY_CHANGED (also
     │                                   when the registry in force requires an approval the card was issued
     │                                   without: then nothing was claimed and the card is READY),
     │                                   PREPARED_ARGS_INVALID, PREPARED_VERSION_INVALID, NOT_COMPENSABLE,
     │                                   NO_COMPENSATION, CONTINUATION_NOT_READY, CONTINUATION_NOT_CLAIMED,
     │                                   CONTINUATION_LEASE_LOST, APPROVALS_NOT_CONFIGURED, GRANT_NOT_ALLOWED,
     │                                   GRANT_REVOKED,
     │                                   a prepare's or a read's refusal: the downstream's own reason (e.g.
     │                                   TODO_DUE_AT_SUSPICIOUS; counted as OTHER in metrics), or what the
     │                                   adapter found: DOWNSTREAM_REDIRECT, DOWNSTREAM_ANSWER_INVALID, URL_UNSAFE,
     │                                   RESOURCE_VERSION_CONFLICT, RESOURCE_VERSION_INVALID, REQUEST_NOT_BUILDABLE,
     │                                   MCP_TOOL_ERROR, MCP_REQUEST_REFUSED
     ├── DataLoss                       DATA_LOSS: CONFIRMATION_TAMPERED, RECORD_TAMPERED (a record
     │                                   disagrees with what was sealed: binding, key id, tool, state)
     ├── Unavailable                    UNAVAILABLE: STORE_UNAVAILABLE, DOWNSTREAM_UNAVAILABLE,
     │                                   REPLICAS_NOT_ACKNOWLEDGED, DOWNSTREAM_NOT_SENT (the last two
     │                                   with a RetryInfo: the card is READY again, the same token may retry)
     └── ResourceExhausted              RESOURCE_EXHAUSTED: OVERLOADED (more calls in flight than allowed,
                                         and the caller holds more than its share), QUOTA_EXCEEDED (the
                                         tenant keeps as many records in Redis as --tenant-quota allows, or
                                         an owner as many live grants as one may hold)

Not a status: the reason an Action carries when it did not succeed (ActionError.reason), from

    the adapter (one downstream call)  NOT_SENT (never left: the card is given back), DOWNSTREAM_TIMEOUT,
                                       DOWNSTREAM_CONNECTION_LOST, DOWNSTREAM_REDIRECT, RECEIPT_INVALID,
                                       RESOURCE_VERSION_CONFLICT, RESOURCE_VERSION_INVALID, URL_UNSAFE,
                                       REQUEST_NOT_BUILDABLE, MCP_TOOL_ERROR (an MCP tool's isError without
                                       a reason), MCP_REQUEST_REFUSED (a JSON-RPC error before any tool ran),
                                       DOWNSTREAM_MCP_ERROR (any other JSON-RPC error: UNKNOWN), or the
                                       downstream's own refusal
    the sidecar                        UNKNOWN, LEASE_LAPSED (the executor's lease lapsed before it recorded
                                       an answer), REJECTED, POLICY_CHANGED, CONFIRMATION_TAMPERED,
                                       RECORD_TAMPERED, COMPENSATION_FAILED
    its reconciler                     NOT_APPLIED (the fence proved it never landed), NO_LOOKUP,
                                       NOT_RESOLVED_IN_WINDOW, RECEIPT_INVALID, KEY_NOT_IN_KEYS_FILE
    an operator                        RESOLVED_BY_OPERATOR

Stages raise these; only the server turns them into a status. Nothing else is allowed to
reach a caller as INTERNAL for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from countersign.reasons import Reason

DOMAIN = "countersign"


@dataclass(frozen=True)
class FieldViolation:
    """One problem with one argument, for google.rpc.BadRequest."""

    field: str
    description: str


class CountersignError(Exception):
    """Base of every error a caller may see."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retry_after = 0.0  # seconds; when set, the status carries a google.rpc.RetryInfo

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        violations: tuple[FieldViolation, ...] = (),
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.violations = violations
        self.metadata = metadata or {}

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class InvalidArgument(CountersignError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(CountersignError):
    code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(CountersignError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(CountersignError):
    code = grpc.StatusCode.UNAUTHENTICATED


class FailedPrecondition(CountersignError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class DataLoss(CountersignError):
    code = grpc.StatusCode.DATA_LOSS


class Unavailable(CountersignError):
    code = grpc.StatusCode.UNAVAILABLE

    def __init__(
        self, reason: str, message: str, *, metadata: dict[str, str] | None = None, retry_after: float = 0.0
    ) -> None:
        super().__init__(reason, message, metadata=metadata)
        self.retry_after = retry_after


class ResourceExhausted(CountersignError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(
        self, reason: str, message: str, *, metadata: dict[str, str] | None = None, retry_after: float = 0.0
    ) -> None:
        super().__init__(reason, message, metadata=metadata)
        self.retry_after = retry_after


class StoreUnavailable(Unavailable):
    """Redis could not be reached or did not answer in time: fail closed (I7)."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.STORE_UNAVAILABLE, message)


class RegistryError(Exception):
    """The registry file breaks a registration rule; the sidecar does not start."""

    def __init__(self, path: str, tool: str, rule: str, detail: str) -> None:
        self.path, self.tool, self.rule, self.detail = path, tool, rule, detail
        super().__init__(f"{path}: tool {tool!r}: {rule}: {detail}")


class SettingsError(Exception):
    """A setting (flag, environment variable or keys file) is invalid; the sidecar does not start."""
