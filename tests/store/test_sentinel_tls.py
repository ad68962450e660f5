"""A ``rediss+sentinel://`` URL speaks TLS to the Sentinels and to the master (p-deploy found it plaintext, and
``auto`` mode did not know the scheme). Against a real TLS-only redis-server watched by a TLS-only Sentinel, with
a private CA made here: the store works over TLS, and the plaintext URL cannot reach the same servers."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from countersign.errors import StoreUnavailable
from countersign.store.redis_store import RedisStore
from countersign.testing import processes
from countersign.testing.topologies import HOST, SERVICE, free_port


def _certificates(work: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 that it signed: (ca.pem, server.pem, server.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "countersign test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (work / "ca.pem", work / "server.pem", work / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def _start(work: Path, name: str, args: list[str]) -> processes.Proc:
    log = work / f"{name}.log"
    out = open(log, "wb")  # noqa: SIM115 - lives with the process
    popen = subprocess.Popen(
        [processes.require("redis-server", "redis-server"), *args], stdout=out, stderr=subprocess.STDOUT
    )
    return processes.Proc(popen, {"name": name}, log)


@pytest.fixture(scope="module")
def tls_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A TLS-only primary and a TLS-only Sentinel watching it: (the Sentinel's port, the CA file)."""
    work = tmp_path_factory.mktemp("tls")
    ca, cert, key = _certificates(work)
    tls = [
        "--tls-cert-file",
        str(cert),
        "--tls-key-file",
        str(key),
        "--tls-ca-cert-file",
        str(ca),
        "--tls-auth-clients",
        "no",
    ]
    primary_port, sentinel_port = free_port(), free_port()
    procs = [
        _start(
            work,
            "primary",
            [
                "--port",
                "0",
                "--tls-port",
                str(primary_port),
                "--bind",
                HOST,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(work),
                *tls,
            ],
        )
    ]
    conf = work / "sentinel.conf"
    conf.write_text(
        "\n".join(
            [
                "port 0",
                f"tls-port {sentinel_port}",
                f"bind {HOST}",
                f"dir {work}",
                "tls-replication yes",
                f"tls-cert-file {cert}",
                f"tls-key-file {key}",
                f"tls-ca-cert-file {ca}",
                "tls-auth-clients no",
                f"sentinel monitor {SERVICE} {HOST} {primary_port} 1",
                "",
            ]
        )
    )
    procs.append(_start(work, "sentinel", [str(conf), "--sentinel"]))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(p.alive() for p in procs) and "+monitor" in procs[1].log():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the TLS sentinel did not start: " + procs[1].log()[-1500:] + procs[0].log()[-1500:])
        yield sentinel_port, ca
    finally:
        for proc in procs:
            proc.stop()


async def test_a_rediss_sentinel_url_reaches_the_master_over_tls(tls_sentinel: tuple[int, Path]) -> None:
    port, ca = tls_sentinel
    store = RedisStore.from_url(
        f"rediss+sentinel://{HOST}:{port}/{SERVICE}?ssl_ca_certs={ca}", socket_timeout=2, connect_timeout=2, retries=0
    )  # mode auto: the scheme says sentinel
    try:
        await store.ping()
        await store.remember("turn-over-tls", b"entry", 60_000)
        assert await store.recall("turn-over-tls") == [b"entry"]
    finally:
        await store.close()


async def test_the_plaintext_sentinel_url_cannot_reach_the_tls_servers(tls_sentinel: tuple[int, Path]) -> None:
    port, _ = tls_sentinel
    store = RedisStore.from_url(
        f"redis+sentinel://{HOST}:{port}/{SERVICE}", socket_timeout=1, connect_timeout=1, retries=0
    )
    try:
        with pytest.raises(StoreUnavailable):
            await store.ping()
    finally:
        await store.close()
