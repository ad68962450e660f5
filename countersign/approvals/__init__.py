"""The countersignature (docs/design.md §12, issue 13): approvals signed by a party the agent is not.

    digest.py    approval_digest(): the hash of what the user saw, which an approval's ``dig`` carries
    issuers.py   the approvals settings file: trusted issuers, their audiences, algorithms and limits
    jwks.py      each issuer's public keys: a JWKS file re-read on change, or a URL fetched and cached
    verify.py    Verifier: approvals, standing grants and context assertions, each refusal naming its check
    checks.py    the checks of a token's segments and claims that verify.py runs
    context.py   merge_context(): the CallContext merged with a verified assertion; the admin rules
    errors.py    the errors, each with the failing ``check``
(The test issuer, keys, JWKS files and tokens valid and hostile, is countersign/testing/approvals.py.)

Nothing here imports the sidecar: it wires these in (settings, Confirm, CreateGrant, the interceptor that
reads ``authorization: Bearer``) and maps the errors onto its own tree.
"""

from countersign.approvals.context import ContextFields, ContextMode, merge_context
from countersign.approvals.digest import approval_digest, digest_document
from countersign.approvals.errors import (
    ApprovalError,
    ApprovalInvalid,
    ApprovalRequired,
    ApprovalSettingsError,
    ContextInvalid,
    ContextMismatch,
)
from countersign.approvals.issuers import ApprovalSettings, Issuers, IssuerSettings, load_settings
from countersign.approvals.verify import (
    AdminClaim,
    ApprovalEvidence,
    Expected,
    GrantClaims,
    GrantExpected,
    VerifiedContext,
    Verifier,
    grant_covers,
    grant_id,
)

__all__ = [
    "AdminClaim",
    "ApprovalError",
    "ApprovalEvidence",
    "ApprovalInvalid",
    "ApprovalRequired",
    "ApprovalSettings",
    "ApprovalSettingsError",
    "ContextFields",
    "ContextInvalid",
    "ContextMismatch",
    "ContextMode",
    "Expected",
    "GrantClaims",
    "GrantExpected",
    "IssuerSettings",
    "Issuers",
    "VerifiedContext",
    "Verifier",
    "approval_digest",
    "digest_document",
    "grant_covers",
    "grant_id",
    "load_settings",
    "merge_context",
]
