"""Transport security: TLS (and mTLS) on the gRPC listener, and TLS to the downstreams (docs/design.md §12).

The listener: --tls-cert/--tls-key, and with --tls-client-ca client certificates are required and verified (the
allow-list of their SANs, --tls-allowed-peers, is checked on every RPC: identity.py). A TLS handshake that fails
never reaches a handler.

The downstreams: https:// URLs and gRPC tools with ``tls: true`` trust --downstream-ca (else the system's CAs)
and present --downstream-cert/--downstream-key when given. A handshake that fails sends nothing: the adapters
classify it NOT_SENT (the card is READY again, docs/design.md §8).
"""

from __future__ import annotations

import ssl

import grpc

from countersign.errors import SettingsError
from countersign.sidecar.settings import Settings


def downstream_tls(settings: Settings) -> tuple[ssl.SSLContext | None, grpc.ChannelCredentials]:
    """How the adapters reach TLS downstreams: the CA bundle they trust (--downstream-ca, else the system's) and
    the client certificate they present (--downstream-cert/--downstream-key), for https:// URLs and gRPC tools
    with tls: true. A file that cannot be read stops the start."""
    try:
        ca = read(settings.downstream_ca) if settings.downstream_ca else None
        cert = read(settings.downstream_cert) if settings.downstream_cert else None
        key = read(settings.downstream_key) if settings.downstream_key else None
        context = None
        if ca is not None or cert is not None:
            context = ssl.create_default_context(cadata=ca.decode() if ca is not None else None)
            if ca is None:
                context.load_default_certs()
            if settings.downstream_cert:
                context.load_cert_chain(settings.downstream_cert, settings.downstream_key)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise SettingsError(f"--downstream-ca / --downstream-cert / --downstream-key: {exc}") from exc
    return context, grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS for the gRPC listener (--tls-cert, --tls-key); with --tls-client-ca, client certificates are required and
    verified against it (mTLS). None: plaintext (loopback, or --insecure-listen). Unreadable files stop the start."""
    if not settings.tls_cert:
        return None
    try:
        chain, key = read(settings.tls_cert), read(settings.tls_key)
        client_ca = read(settings.tls_client_ca) if settings.tls_client_ca else None
        # the ssl module names what is wrong (a key that does not fit its certificate, a PEM that is none);
        # grpc would only say that it cannot bind
        check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        check.load_cert_chain(settings.tls_cert, settings.tls_key)
        if client_ca is not None:
            check.load_verify_locations(cadata=client_ca.decode("ascii", "replace"))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise SettingsError(f"--tls-cert / --tls-key / --tls-client-ca: {exc}") from exc
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def add_port(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # grpc refuses a key that does not fit its certificate, a malformed PEM
        raise SettingsError(f"cannot listen on {address}: {exc}") from exc
