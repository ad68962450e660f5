"""From a Redis URL to a client, without a server: the mode a scheme names, and TLS where the URL asks for it
(tests/store/test_sentinel_tls.py proves the same against a real TLS Sentinel)."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelManagedSSLConnection

from countersign.store.connect import connect, mode_of, parse_sentinel


def _connect(url: str, mode: str = "auto") -> object:
    return connect(url, socket_timeout=1, connect_timeout=1, retries=0, mode=mode)


@pytest.mark.parametrize(
    ("url", "mode"),
    [
        ("redis://r:6379/0", "standalone"),
        ("rediss://r:6380/0", "standalone"),
        ("unix:///run/r.sock", "standalone"),
        ("redis+sentinel://s:26379/m", "sentinel"),
        ("rediss+sentinel://s:26379/m/2", "sentinel"),
        ("redis+cluster://n1:7000,n2:7001", "cluster"),
    ],
)
def test_auto_mode_reads_the_scheme(url: str, mode: str) -> None:
    assert mode_of(url) == mode


def test_a_rediss_sentinel_url_makes_tls_connections_to_the_sentinels_and_the_master() -> None:
    client = _connect("rediss+sentinel://s1:26379,s2:26379/mymaster/2?ssl_ca_certs=/etc/ca.pem")
    pool = client.connection_pool  # type: ignore[attr-defined]
    assert issubclass(pool.connection_class, SentinelManagedSSLConnection)
    assert pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem" and pool.connection_kwargs["db"] == 2
    for sentinel in pool.sentinel_manager.sentinels:
        assert issubclass(sentinel.connection_pool.connection_class, SSLConnection)
        assert sentinel.connection_pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"


def test_a_redis_sentinel_url_stays_plaintext() -> None:
    pool = _connect("redis+sentinel://s1:26379/mymaster").connection_pool  # type: ignore[attr-defined]
    assert not issubclass(pool.connection_class, SSLConnection)
    assert not any(
        issubclass(s.connection_pool.connection_class, SSLConnection) for s in pool.sentinel_manager.sentinels
    )


def test_a_sentinel_url_takes_only_tls_options_and_only_with_tls() -> None:
    assert parse_sentinel("rediss+sentinel://:pw@s:26379/m?ssl_cert_reqs=none").ssl == {"ssl_cert_reqs": "none"}
    with pytest.raises(ValueError, match="only TLS options"):
        parse_sentinel("rediss+sentinel://s:26379/m?foo=1")
    with pytest.raises(ValueError, match="only with rediss"):
        parse_sentinel("redis+sentinel://s:26379/m?ssl_ca_certs=/ca.pem")
    with pytest.raises(ValueError, match="names the master"):
        parse_sentinel("redis+sentinel://s:26379")
