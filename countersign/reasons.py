"""Every reason the sidecar gives: the ``google.rpc.ErrorInfo`` reason of a refused call, and the reason an
``Action`` carries when it did not succeed (``ActionError.reason``). One word per cause, the same in the status,
the action, the decision log, the metric label, the runbook and the docs. errors.py draws the tree of which
status carries which; tests/unit/test_reasons.py keeps the tree's docstring, the runbook and this enum in step.

A downstream's own refusal reason (a prepare or a read refused with, say, ``TODO_DUE_AT_SUSPICIOUS``) is passed
on to the caller as it is, but it is not one of ours: as a metric label it is ``OTHER`` (``label``), so a
downstream cannot grow the number of series.
"""

from __future__ import annotations

from enum import StrEnum, unique


@unique
class Reason(StrEnum):
    # -- the call is refused: INVALID_ARGUMENT
    ARGS_INVALID = "ARGS_INVALID"
    CONFIRMATION_TOKEN_INVALID = "CONFIRMATION_TOKEN_INVALID"
    CONTINUATION_TOKEN_INVALID = "CONTINUATION_TOKEN_INVALID"
    REQUEST_INVALID = "REQUEST_INVALID"
    REPLY_TOO_LARGE = "REPLY_TOO_LARGE"
    SNAPSHOT_TOO_LARGE = "SNAPSHOT_TOO_LARGE"
    # NOT_FOUND
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    CONFIRMATION_EXPIRED = "CONFIRMATION_EXPIRED"
    ACTION_NOT_FOUND = "ACTION_NOT_FOUND"
    CONTINUATION_NOT_FOUND = "CONTINUATION_NOT_FOUND"
    GRANT_NOT_FOUND = "GRANT_NOT_FOUND"
    # PERMISSION_DENIED
    ROLE_NOT_ALLOWED = "ROLE_NOT_ALLOWED"
    ADMIN_READONLY = "ADMIN_READONLY"
    SUBJECT_NOT_ALLOWED = "SUBJECT_NOT_ALLOWED"
    SESSION_MODE_FORBIDS = "SESSION_MODE_FORBIDS"
    CONFIRMATION_BINDING_MISMATCH = "CONFIRMATION_BINDING_MISMATCH"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"
    APPROVAL_INVALID = "APPROVAL_INVALID"
    CONTEXT_MISMATCH = "CONTEXT_MISMATCH"
    PEER_NOT_ALLOWED = "PEER_NOT_ALLOWED"
    # UNAUTHENTICATED
    CONTEXT_INVALID = "CONTEXT_INVALID"
    # FAILED_PRECONDITION
    TOOL_CONFIRMATION_REQUIRED = "TOOL_CONFIRMATION_REQUIRED"
    POLICY_CHANGED = "POLICY_CHANGED"
    PREPARED_ARGS_INVALID = "PREPARED_ARGS_INVALID"
    PREPARED_VERSION_INVALID = "PREPARED_VERSION_INVALID"
    NOT_COMPENSABLE = "NOT_COMPENSABLE"
    NO_COMPENSATION = "NO_COMPENSATION"
    CONTINUATION_NOT_READY = "CONTINUATION_NOT_READY"
    CONTINUATION_NOT_CLAIMED = "CONTINUATION_NOT_CLAIMED"
    CONTINUATION_LEASE_LOST = "CONTINUATION_LEASE_LOST"
    APPROVALS_NOT_CONFIGURED = "APPROVALS_NOT_CONFIGURED"
    GRANT_NOT_ALLOWED = "GRANT_NOT_ALLOWED"
    GRANT_REVOKED = "GRANT_REVOKED"
    # DATA_LOSS
    CONFIRMATION_TAMPERED = "CONFIRMATION_TAMPERED"
    RECORD_TAMPERED = "RECORD_TAMPERED"
    # UNAVAILABLE
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    DOWNSTREAM_UNAVAILABLE = "DOWNSTREAM_UNAVAILABLE"
    REPLICAS_NOT_ACKNOWLEDGED = "REPLICAS_NOT_ACKNOWLEDGED"
    DOWNSTREAM_NOT_SENT = "DOWNSTREAM_NOT_SENT"
    # RESOURCE_EXHAUSTED
    OVERLOADED = "OVERLOADED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"

    # -- what the adapters report of one downstream call (an action's reason; a read's refusal)
    NOT_SENT = "NOT_SENT"
    DOWNSTREAM_TIMEOUT = "DOWNSTREAM_TIMEOUT"
    DOWNSTREAM_CONNECTION_LOST = "DOWNSTREAM_CONNECTION_LOST"
    DOWNSTREAM_REDIRECT = "DOWNSTREAM_REDIRECT"
    DOWNSTREAM_ANSWER_INVALID = "DOWNSTREAM_ANSWER_INVALID"
    RECEIPT_INVALID = "RECEIPT_INVALID"
    RESOURCE_VERSION_CONFLICT = "RESOURCE_VERSION_CONFLICT"
    RESOURCE_VERSION_INVALID = "RESOURCE_VERSION_INVALID"
    URL_UNSAFE = "URL_UNSAFE"
    REQUEST_NOT_BUILDABLE = "REQUEST_NOT_BUILDABLE"
    MCP_TOOL_ERROR = "MCP_TOOL_ERROR"  # an MCP tool answered isError without a reason of its own
    MCP_REQUEST_REFUSED = "MCP_REQUEST_REFUSED"  # a JSON-RPC error raised before any tool ran (-32601, -32602)
    DOWNSTREAM_MCP_ERROR = "DOWNSTREAM_MCP_ERROR"  # any other JSON-RPC error: the call may have landed

    # -- what the sidecar, its reconciler or an operator settled an action with
    UNKNOWN = "UNKNOWN"
    LEASE_LAPSED = "LEASE_LAPSED"
    NOT_APPLIED = "NOT_APPLIED"
    NO_LOOKUP = "NO_LOOKUP"
    NOT_RESOLVED_IN_WINDOW = "NOT_RESOLVED_IN_WINDOW"
    KEY_NOT_IN_KEYS_FILE = "KEY_NOT_IN_KEYS_FILE"
    REJECTED = "REJECTED"
    RESOLVED_BY_OPERATOR = "RESOLVED_BY_OPERATOR"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"


# Reasons an alert fires on or a runbook entry concerns: someone may be paged for them, so docs/runbook.md names
# each (tests/unit/test_reasons.py).
PAGES = frozenset(
    {
        Reason.STORE_UNAVAILABLE,
        Reason.OVERLOADED,
        Reason.REPLICAS_NOT_ACKNOWLEDGED,
        Reason.DOWNSTREAM_NOT_SENT,
        Reason.RECORD_TAMPERED,
        Reason.CONFIRMATION_TAMPERED,
        Reason.LEASE_LAPSED,
        Reason.NO_LOOKUP,
        Reason.NOT_RESOLVED_IN_WINDOW,
        Reason.RECEIPT_INVALID,
        Reason.KEY_NOT_IN_KEYS_FILE,
        Reason.COMPENSATION_FAILED,
    }
)

OTHER = "OTHER"
_OURS = frozenset(Reason)


def label(reason: str) -> str:
    """A reason as a metric label value: one of ours, else OTHER (a downstream's own word)."""
    return reason if reason in _OURS else OTHER
