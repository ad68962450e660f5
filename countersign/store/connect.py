"""From a Redis URL to a redis-py asyncio client, with tight timeouts (not redis-py's defaults): fail fast, fail
closed (I7).

    redis://, rediss://, unix://                    one server (rediss: TLS; ?ssl_ca_certs=... names a private CA)
    redis+sentinel://[:pw@]h1:26379,h2:26379/master[/db]   the master the Sentinels name
    rediss+sentinel://...                           the same over TLS, to the Sentinels and to the master
                                                    (?ssl_ca_certs=..., ?ssl_cert_reqs=... apply to both)
    redis+cluster://h1:7000,h2:7001                 Redis Cluster (or any node's URL with mode="cluster")

``mode="auto"`` reads the mode from the scheme.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Literal

import hiredis
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo

Mode = Literal["standalone", "sentinel", "cluster"]
MODES: dict[str, Mode] = {"redis+sentinel": "sentinel", "rediss+sentinel": "sentinel", "redis+cluster": "cluster"}
MAX_CONNECTIONS = 256
# What CLIENT SETINFO tells Redis (redis-py and its version), resolved once: left to redis-py, every new connection
# reads the package metadata (a scan of site-packages, ~2.4 ms) and the pool opens one per concurrent call.
DRIVER = DriverInfo(lib_version=redis.__version__)
SENTINEL_PORT = 26379  # a Sentinel node named without a port (6379 is Redis itself: it answers no SENTINEL command)
# the TLS settings a sentinel URL may carry in its query, as redis-py names them (the same as a rediss:// URL's)
SSL_OPTIONS = frozenset(
    {"ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname"}
)


_PACKABLE = frozenset({str, bytes, int})  # exact types: a bool, a float, a bytearray go redis-py's way


def packed_by_hiredis(cls: type[Any]) -> type[Any]:
    """A redis-py asyncio connection class whose commands are packed by hiredis (C) when every argument is a str,
    bytes or int, as the synchronous client does: redis-py's asyncio packer is Python, one encode and one
    buffer join per argument (~200k instructions for a settle's 23, 6 % of a Confirm; hiredis: ~33k). The bytes on
    the wire are the same (RESP: a bulk string per argument, an int in decimal as redis-py's repr writes it);
    anything else (a command name holding a space, which redis-py splits; a float) keeps redis-py's packer."""

    class Packed(cls):  # type: ignore[misc, valid-type]
        def pack_command(self, *args: Any) -> list[bytes]:
            name = args[0] if args else None
            one_word = (type(name) is str and " " not in name) or (type(name) is bytes and b" " not in name)
            if one_word and _PACKABLE.issuperset(map(type, args)):  # one C call, not a generator step an argument
                return [hiredis.pack_command(args)]
            return super().pack_command(*args)  # type: ignore[no-any-return]

    Packed.__name__ = Packed.__qualname__ = f"HiredisPacked{cls.__name__}"
    return Packed


def _pack_by_hiredis(client: Any) -> Any:
    """The client, its pool making hiredis-packing connections (see packed_by_hiredis)."""
    pool = client.connection_pool
    pool.connection_class = packed_by_hiredis(pool.connection_class)
    return client


@dataclass(frozen=True)
class SentinelURL:
    """What a sentinel URL says: the Sentinels, the master's name, the database, the password, TLS."""

    nodes: list[tuple[str, int]]
    service: str
    db: int = 0
    password: str | None = None
    tls: bool = False
    ssl: dict[str, Any] = field(default_factory=dict)


def host_port(node: str, default: int = 6379) -> tuple[str, int]:
    """``host:port``, or a bare ``host`` on the default port (was: int(host), a ValueError)."""
    host, colon, port = node.rpartition(":")
    return (host, int(port or default)) if colon else (node, default)


def parse_sentinel(url: str) -> SentinelURL:
    """redis+sentinel://[:password@]h1:26379,h2:26379/service[/db][?ssl_ca_certs=...] (rediss+sentinel: TLS)"""
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    password = None
    if "@" in rest:
        auth, rest = rest.rsplit("@", 1)
        password = auth.split(":", 1)[-1] or None
    hosts, _, path = rest.partition("/")
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValueError("a sentinel URL names the master: redis+sentinel://host:26379/mymaster")
    tls = scheme.lower() == "rediss+sentinel"
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - SSL_OPTIONS)
    if unknown or (options and not tls):
        raise ValueError(
            f"a sentinel URL takes only TLS options ({', '.join(sorted(SSL_OPTIONS))}), and only "
            f"with rediss+sentinel://; not {', '.join(unknown or sorted(options))}"
        )
    ssl: dict[str, Any] = {k: v for k, v in options.items() if k != "ssl_check_hostname"}
    if "ssl_check_hostname" in options:
        ssl["ssl_check_hostname"] = options["ssl_check_hostname"].lower() in ("1", "true", "yes")
    return SentinelURL(
        [host_port(h, SENTINEL_PORT) for h in hosts.split(",")],
        parts[0],
        int(parts[1]) if len(parts) > 1 else 0,
        password,
        tls,
        ssl,
    )


def mode_of(url: str, mode: str = "auto") -> Mode:
    """The mode a URL runs in: the one asked for, or (auto) the one its scheme names."""
    if mode == "auto":
        return MODES.get(url.split("://", 1)[0].lower(), "standalone")
    if mode not in ("standalone", "sentinel", "cluster"):
        raise ValueError(f"unknown redis mode {mode!r}: auto, standalone, sentinel or cluster")
    return mode  # type: ignore[return-value]


def connect(
    url: str, *, socket_timeout: float, connect_timeout: float, retries: int, mode: str = "auto", wait_replicas: int = 0
) -> Any:
    """A redis-py asyncio client for ``url`` (raises ValueError for a URL or mode it cannot use)."""
    common: dict[str, Any] = dict(
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), retries),
        decode_responses=False,
        driver_info=DRIVER,
    )
    scheme = url.split("://", 1)[0].lower()
    chosen = mode_of(url, mode)
    if chosen == "sentinel":
        parsed = parse_sentinel(url)
        tls = {"ssl": True, **parsed.ssl} if parsed.tls else {}
        sentinel = Sentinel(
            parsed.nodes,
            sentinel_kwargs={"socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout, **tls},
            **common,
            **tls,
        )  # type: ignore[no-untyped-call]
        return _pack_by_hiredis(
            sentinel.master_for(parsed.service, db=parsed.db, password=parsed.password, max_connections=MAX_CONNECTIONS)
        )
    if chosen == "cluster":
        if wait_replicas:
            raise ValueError("--redis-wait-replicas is not supported with Redis Cluster yet")
        plain = "redis://" + url.split("://", 1)[1] if scheme == "redis+cluster" else url
        first, _, _ = plain.partition(",")
        startup = [ClusterNode(*host_port(n)) for n in plain.split("://", 1)[1].split("/")[0].split(",")]
        if len(startup) > 1:
            return RedisCluster(
                startup_nodes=startup,
                max_connections=MAX_CONNECTIONS,
                cluster_error_retry_attempts=max(1, retries),
                **common,
            )
        return RedisCluster.from_url(first, max_connections=MAX_CONNECTIONS, **common)
    return _pack_by_hiredis(
        aioredis.Redis.from_url(
            url, retry_on_timeout=retries > 0, health_check_interval=0, max_connections=MAX_CONNECTIONS, **common
        )
    )
