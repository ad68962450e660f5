"""From a Redis URL to a client, without a server: the mode a scheme names, and TLS where the URL asks for it
(tests/store/test_sentinel_tls.py proves the same against a real TLS Sentinel)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection
from redis.asyncio.sentinel import SentinelManagedSSLConnection
from redis.driver_info import DriverInfo
from redis.exceptions import DataError

from countersign.store.connect import connect, mode_of, packed_by_hiredis, parse_sentinel


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


def test_a_sentinel_url_names_its_nodes_master_db_and_password() -> None:
    """A node without a port is a Sentinel's default, 26379 (6379 is Redis itself, which answers no SENTINEL
    command); the password is what follows the last ':' before the last '@'."""
    parsed = parse_sentinel("redis+sentinel://:s3cr:et@s1,s2:26380,10.0.0.3:6000/mymaster/3")
    assert parsed.nodes == [("s1", 26379), ("s2", 26380), ("10.0.0.3", 6000)]
    assert (parsed.service, parsed.db, parsed.password, parsed.tls) == ("mymaster", 3, "s3cr:et", False)
    assert parse_sentinel("redis+sentinel://user:pw@s1:26379/m").password == "pw"
    assert parse_sentinel("redis+sentinel://:@s1:26379/m").password is None
    assert parse_sentinel("redis+sentinel://s1:26379/m").password is None
    assert parse_sentinel("redis+sentinel://s1:26379/m").db == 0
    # "://" again later in the URL (a TLS option's path) does not move where the scheme ends
    tls = parse_sentinel("rediss+sentinel://s1:26379/m?ssl_ca_certs=file://ca.pem")
    assert (tls.tls, tls.nodes, tls.ssl) == (True, [("s1", 26379)], {"ssl_ca_certs": "file://ca.pem"})


def test_a_cluster_node_without_a_port_is_redis_default() -> None:
    client = _connect("redis+cluster://n1,n2:7001")
    nodes = client.startup_nodes  # type: ignore[attr-defined]
    assert sorted((n.host, n.port) for n in nodes) == [("n1", 6379), ("n2", 7001)]


@pytest.mark.parametrize(
    ("value", "checked"), [("1", True), ("True", True), ("yes", True), ("YES", True), ("0", False), ("no", False)]
)
def test_a_sentinel_urls_hostname_check_is_a_boolean(value: str, checked: bool) -> None:
    parsed = parse_sentinel(f"rediss+sentinel://s1:26379/m?ssl_check_hostname={value}&ssl_ca_path=")
    assert parsed.ssl == {"ssl_check_hostname": checked, "ssl_ca_path": ""}  # a blank option is kept, as given


def test_a_sentinel_url_without_a_master_or_with_other_options_is_told_what_it_takes() -> None:
    with pytest.raises(ValueError) as info:
        parse_sentinel("redis+sentinel://s1:26379")
    assert str(info.value) == "a sentinel URL names the master: redis+sentinel://host:26379/mymaster"
    with pytest.raises(ValueError) as info:
        parse_sentinel("redis+sentinel://s1:26379/m?ssl_ca_certs=/ca.pem")
    assert str(info.value) == (
        "a sentinel URL takes only TLS options (ssl_ca_certs, ssl_ca_path, ssl_cert_reqs, ssl_certfile, "
        "ssl_check_hostname, ssl_keyfile), and only with rediss+sentinel://; not ssl_ca_certs"
    )


@pytest.mark.parametrize("url", ["redis://r:6379/0", "unix:///run/r.sock", "redis+sentinel://s:26379/m"])
def test_a_new_connection_does_not_read_the_package_metadata(url: str) -> None:
    """redis-py resolves its own version (importlib.metadata, a scan of site-packages: ~2.4 ms) for every connection
    it opens unless the client hands it one DriverInfo; the pool opens one per concurrent call (issue 17). CLIENT
    SETINFO still says redis-py and its version."""
    pool = _connect(url).connection_pool  # type: ignore[attr-defined]
    info = pool.connection_kwargs["driver_info"]
    assert isinstance(info, DriverInfo)
    assert (info.formatted_name, info.lib_version) == ("redis-py", redis.__version__)


ARGS = st.lists(
    st.text() | st.binary() | st.integers() | st.floats(allow_nan=False) | st.just(bytearray(b"ab")), max_size=8
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["EVALSHA", b"EVALSHA", "CONFIG GET", "SET"]), ARGS)
def test_a_command_packed_by_hiredis_is_the_bytes_redis_py_writes(name: Any, args: list[Any]) -> None:
    """The standalone and sentinel clients' connections pack commands with hiredis (store/connect.py); what reaches
    Redis is what redis-py's own packer writes, or redis-py's packer does it (floats, bytearrays, a split name)."""
    ours, theirs = packed_by_hiredis(Connection)(), Connection()
    try:
        expected = b"".join(bytes(chunk) for chunk in theirs.pack_command(name, *args))
    except (DataError, UnicodeEncodeError) as exc:
        with pytest.raises(type(exc)):
            ours.pack_command(name, *args)
        return
    assert b"".join(bytes(chunk) for chunk in ours.pack_command(name, *args)) == expected


def test_the_standalone_and_sentinel_clients_pack_with_hiredis() -> None:
    standalone = connect("unix:///tmp/none.sock", socket_timeout=1, connect_timeout=1, retries=0)
    sentinel = connect("redis+sentinel://127.0.0.1:1/mymaster", socket_timeout=1, connect_timeout=1, retries=0)
    for client in (standalone, sentinel):
        assert client.connection_pool.connection_class.__name__.startswith("HiredisPacked")
