"""Who is calling, decided in the server's decode step before any handler runs (docs/design.md §12).

    the transport   with --tls-allowed-peers, the client certificate (already verified against
                    --tls-client-ca by the TLS handshake) must carry one of the listed SANs or SPIFFE ids:
                    else PERMISSION_DENIED PEER_NOT_ALLOWED (on every RPC, and on every request to the HTTP
                    front doors: mcp_http.AllowedPeers, HTTP 403)
    the context     with --verified-context optional|required, the request's CallContext is merged with the
                    context assertion of ``authorization: Bearer <JWS>`` (signed by an --approvals issuer):
                    the verified claims win, a field that disagrees is PERMISSION_DENIED CONTEXT_MISMATCH, a
                    missing (required) or invalid assertion UNAUTHENTICATED CONTEXT_INVALID; the failing check
                    is ErrorInfo metadata ``check``

The admin rules (an admin context only with role admin, only inside its own tenant) hold in every mode, off
included: policy.check_context applies them at every entry of the path, so they hold for any front door.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from countersign.approvals import (
    ApprovalError,
    ContextFields,
    ContextInvalid,
    ContextMode,
    Verifier,
    merge_context,
)
from countersign.errors import PermissionDenied
from countersign.path.policy import context_error
from countersign.reasons import Reason
from countersign.v1 import common_pb2

SAN = "x509_subject_alternative_name"


class Identity:
    def __init__(
        self,
        verifier: Verifier | None,
        mode: ContextMode,
        allowed_peers: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.verifier, self.mode, self.allowed_peers, self.clock = verifier, mode, allowed_peers, clock

    async def admit(self, request: Any, grpc_context: Any) -> None:
        """Refuse a peer off the allow-list; replace the request's CallContext with the verified one."""
        if self.allowed_peers:
            self.check_peer(grpc_context.auth_context())
        if self.mode is ContextMode.OFF:
            return
        call = getattr(request, "context", None)
        if not isinstance(call, common_pb2.CallContext):
            return
        request.context.CopyFrom(await self.context(call, grpc_context.invocation_metadata() or ()))

    def check_peer(self, auth: dict[str, Sequence[bytes]]) -> None:
        self.check_names({value.decode("utf-8", "replace") for value in auth.get(SAN, ())})

    def check_names(self, names: set[str]) -> None:
        """The peer's SANs (gRPC's auth context, or the HTTP front doors' client certificate) against the list."""
        if not names & self.allowed_peers:
            raise PermissionDenied(
                Reason.PEER_NOT_ALLOWED,
                "the client certificate names none of the peers this sidecar admits (--tls-allowed-peers)",
            )

    async def context(self, sent: common_pb2.CallContext, metadata: Sequence[Any]) -> common_pb2.CallContext:
        """The CallContext to act on: merged with the verified assertion (docs/approvals.md, "Context assertions")."""
        try:
            token = _bearer(metadata)
            verified = None
            if token is not None:
                assert self.verifier is not None  # settings: --verified-context needs --approvals
                verified = await self.verifier.verify_context_async(token, now=self.clock())
            merged = merge_context(ContextFields.from_proto(sent), verified, self.mode)
        except ApprovalError as exc:
            raise context_error(exc) from exc
        return merged.to_proto(sent)


def certificate_names(pem: str) -> set[str]:
    """The SANs of a client certificate (PEM) as gRPC's auth context spells them: DNS names, URIs (SPIFFE ids),
    e-mail addresses and IP addresses; never the common name. (cryptography's X.509 is imported here: only the HTTP
    front doors with --tls-allowed-peers read a certificate, and the import is ~8 MB resident.)"""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(pem.encode("ascii"))
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names: set[str] = set()
    for kind in (x509.DNSName, x509.UniformResourceIdentifier, x509.RFC822Name):
        names.update(san.get_values_for_type(kind))
    names.update(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    return names


def _bearer(metadata: Sequence[Any]) -> str | None:
    """The JWS of ``authorization: Bearer <JWS>``; None when there is no such header."""
    values = [str(value) for key, value in metadata if key == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise ContextInvalid("malformed", "more than one authorization header")
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ContextInvalid("malformed", "the authorization header is not 'Bearer <JWS>'")
    return token.strip()
