"""The errors of the approvals core; each names the check that failed.

    ApprovalError                 check: the failing check; reason: the suggested ErrorInfo reason
     ├── ApprovalRequired         APPROVAL_REQUIRED: no approval where one is needed
     ├── ApprovalInvalid          APPROVAL_INVALID: an approval (or grant) failed a check
     ├── ContextInvalid           CONTEXT_INVALID: a context assertion failed a check, or is missing
     │                             where the deployment requires one
     └── ContextMismatch          CONTEXT_MISMATCH: a CallContext field disagrees with the verified
                                   claims, or an admin context is not honoured

    ApprovalSettingsError         the approvals settings file or a JWKS it names cannot be used:
                                   the sidecar does not start

This package imports nothing from the sidecar; the sidecar maps these onto its own error tree
(PERMISSION_DENIED for all four, or UNAUTHENTICATED for ContextInvalid, as it prefers).
Messages never hold the token itself, only what was wrong with it.
"""

from __future__ import annotations


class ApprovalError(Exception):
    """Base class: ``check`` names the failing check (e.g. ``signature``, ``digest``, ``tenant_id``)."""

    reason = "APPROVAL_INVALID"

    def __init__(self, check: str, message: str, *, issuer: str | None = None) -> None:
        super().__init__(f"{check}: {message}")
        self.check = check
        self.message = message
        # The configured issuer the token named, once known (so a caller can refresh that issuer's keys).
        self.issuer = issuer


class ApprovalRequired(ApprovalError):
    """A tool needs a signed approval and none was given."""

    reason = "APPROVAL_REQUIRED"


class ApprovalInvalid(ApprovalError):
    """The approval (or grant) was refused; ``check`` says which check failed."""

    reason = "APPROVAL_INVALID"


class ContextInvalid(ApprovalError):
    """The context assertion was refused, or is missing where it is required."""

    reason = "CONTEXT_INVALID"


class ContextMismatch(ApprovalError):
    """A CallContext field disagrees with the verified claims, or an admin context is not honoured."""

    reason = "CONTEXT_MISMATCH"


class ApprovalSettingsError(Exception):
    """The approvals settings (or a JWKS they name) are invalid; the message names the file and the problem."""
