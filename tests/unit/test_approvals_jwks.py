"""Key rotation by kid: a JWKS file re-read on change, a JWKS URL re-fetched on an unknown kid (rate-limited).

The URL is served by a real aiohttp server on loopback that counts the fetches it saw; the rate limit runs
on a fake monotonic clock, so nothing here sleeps to let time pass.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from countersign.approvals import ApprovalInvalid, ApprovalSettingsError, Verifier
from countersign.testing.approval_issuer import AUD, ISS, AppIssuer, claims, expected, make_issuer
from countersign.testing.approvals import SigningKey, jwks, sign, write_jwks, write_settings

OLD, NEW = SigningKey.generate("EdDSA", kid="2026-11"), SigningKey.generate("ES256", kid="2026-12")


def check_of(verifier: Verifier, key: SigningKey) -> str:
    """'ok', or the check that refused an approval signed by ``key`` (synchronously: no fetch)."""
    try:
        verifier.verify_approval(sign(claims(), key), expect=expected())
    except ApprovalInvalid as exc:
        return exc.check
    return "ok"


async def async_check_of(verifier: Verifier, key: SigningKey) -> str:
    try:
        await verifier.verify_approval_async(sign(claims(), key), expect=expected())
    except ApprovalInvalid as exc:
        return exc.check
    return "ok"


# a JWKS file -----------------------------------------------------------------------------------------------------


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[AppIssuer]:
    issuer = await make_issuer(tmp_path, OLD)
    yield issuer
    await issuer.verifier.close()


async def test_a_jwks_file_rotates_new_kid_added_then_old_kid_removed(app: AppIssuer) -> None:
    assert (check_of(app.verifier, OLD), check_of(app.verifier, NEW)) == ("ok", "key")
    write_jwks(app.jwks, OLD, NEW)  # the new key is published next to the old one
    assert (check_of(app.verifier, OLD), check_of(app.verifier, NEW)) == ("ok", "ok")
    write_jwks(app.jwks, NEW)  # the old one is withdrawn: its tokens stop working at once
    assert (check_of(app.verifier, OLD), check_of(app.verifier, NEW)) == ("key", "ok")


async def test_an_unchanged_jwks_file_is_not_read_again(app: AppIssuer) -> None:
    keys = app.verifier.issuers.get(ISS)
    assert keys is not None
    loads = keys.keys.loads  # type: ignore[union-attr]
    for _ in range(50):
        check_of(app.verifier, OLD)
    assert keys.keys.loads == loads  # type: ignore[union-attr]


async def test_a_broken_rewrite_of_the_jwks_file_keeps_the_last_good_keys(app: AppIssuer) -> None:
    app.jwks.write_text('{"keys": [')  # half written, in place
    assert check_of(app.verifier, OLD) == "ok"
    write_jwks(app.jwks, NEW)
    assert (check_of(app.verifier, OLD), check_of(app.verifier, NEW)) == ("key", "ok")


# a JWKS URL ------------------------------------------------------------------------------------------------------


@dataclass
class JwksServer:
    """A real HTTP server on loopback publishing a JWKS it can change; counts every fetch."""

    keys: list[SigningKey]
    fetches: int = 0
    status: int = 200
    delay: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.fetches += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status in (301, 302, 307, 308):
            raise web.HTTPFound("/other.json")
        if self.status == 200 and self.extra.get("oversize"):
            return web.Response(body=b" " * (300 * 1024) + json.dumps(jwks(*self.keys)).encode())
        return web.json_response(jwks(*self.keys), status=self.status)

    async def other(self, request: web.Request) -> web.Response:
        # where a redirect would lead: an attacker's set
        return web.json_response(jwks(SigningKey.generate("EdDSA", kid="attacker")))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def server() -> AsyncIterator[JwksServer]:
    published = JwksServer([OLD])
    web_app = web.Application()
    web_app.router.add_get("/jwks.json", published.handle)
    web_app.router.add_get("/other.json", published.other)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    published.url = f"http://127.0.0.1:{port}/jwks.json"
    yield published
    await runner.cleanup()


async def url_verifier(tmp_path: Path, server: JwksServer, clock: FakeClock, **issuer: Any) -> Verifier:
    entry = {"issuer": ISS, "audience": AUD, "jwks": server.url, "jwks_refetch_interval": 30, **issuer}
    return await Verifier.load(write_settings(tmp_path / f"approvals-{uuid.uuid4().hex}.json", [entry]), clock=clock)


async def test_a_jwks_url_is_refetched_on_a_new_kid_and_drops_a_removed_one(tmp_path: Path, server: JwksServer) -> None:
    clock = FakeClock()
    verifier = await url_verifier(tmp_path, server, clock)
    try:
        assert server.fetches == 1 and check_of(verifier, OLD) == "ok"
        server.keys = [OLD, NEW]
        assert check_of(verifier, NEW) == "key"  # the synchronous path never fetches
        assert server.fetches == 1
        clock.now += 31
        assert await async_check_of(verifier, NEW) == "ok"  # unknown kid: one fetch, then accepted
        assert server.fetches == 2 and await async_check_of(verifier, OLD) == "ok"
        server.keys = [NEW]
        clock.now += 31
        assert await async_check_of(verifier, OLD) == "ok"  # still cached: a known kid causes no fetch
        assert server.fetches == 2
        clock.now += 600  # the TTL passed: the next use refreshes in the background
        assert await async_check_of(verifier, OLD) == "ok"
        await asyncio.sleep(0.2)
        assert server.fetches == 3
        assert await async_check_of(verifier, OLD) == "key"  # removed; and no fetch within the interval
        assert (server.fetches, await async_check_of(verifier, NEW)) == (3, "ok")
    finally:
        await verifier.close()


async def test_random_kids_cannot_make_us_hammer_the_issuer(tmp_path: Path, server: JwksServer) -> None:
    clock = FakeClock()
    verifier = await url_verifier(tmp_path, server, clock)
    try:
        clock.now += 31
        for _ in range(3):  # three rounds of an attacker sending 100 tokens with random kids each
            results = await asyncio.gather(
                *(async_check_of(verifier, SigningKey.generate("EdDSA", kid=uuid.uuid4().hex)) for _ in range(100))
            )
            assert set(results) == {"key"}
            clock.now += 10
        assert server.fetches == 2  # the start, and one fetch for all 300 unknown kids within 30 s
        clock.now += 30
        await async_check_of(verifier, SigningKey.generate("EdDSA", kid="yet-another"))
        assert server.fetches == 3  # one more once the interval passed
    finally:
        await verifier.close()


async def test_concurrent_unknown_kids_share_one_fetch(tmp_path: Path, server: JwksServer) -> None:
    clock = FakeClock()
    verifier = await url_verifier(tmp_path, server, clock)
    try:
        server.keys, server.delay = [OLD, NEW], 0.2
        clock.now += 31
        results = await asyncio.gather(*(async_check_of(verifier, NEW) for _ in range(20)))
        assert results == ["ok"] * 20 and server.fetches == 2
    finally:
        await verifier.close()


async def test_an_issuer_that_stops_answering_keeps_its_last_keys(tmp_path: Path, server: JwksServer) -> None:
    clock = FakeClock()
    verifier = await url_verifier(tmp_path, server, clock)
    try:
        server.status = 503
        clock.now += 700
        assert await async_check_of(verifier, NEW) == "key"
        assert server.fetches == 2 and await async_check_of(verifier, OLD) == "ok"
    finally:
        await verifier.close()


@pytest.mark.parametrize(
    ("status", "extra", "message"),
    [
        (503, {}, "answered HTTP 503"),
        (302, {}, "answered HTTP 302"),  # a redirect is never followed: it could lead to another party's keys
        (200, {"oversize": True}, "larger than 262144 bytes"),
    ],
)
async def test_a_jwks_url_that_cannot_be_fetched_stops_the_start(
    tmp_path: Path, server: JwksServer, status: int, extra: dict[str, Any], message: str
) -> None:
    server.status, server.extra = status, extra
    with pytest.raises(ApprovalSettingsError, match=re.escape(f"issuer {ISS}: JWKS {server.url}: {message}")):
        await url_verifier(tmp_path, server, FakeClock())


async def test_a_jwks_url_nobody_listens_on_stops_the_start(tmp_path: Path, server: JwksServer) -> None:
    server.url = "http://127.0.0.1:9/jwks.json"
    with pytest.raises(ApprovalSettingsError, match=re.escape("JWKS http://127.0.0.1:9/jwks.json: ")):
        await url_verifier(tmp_path, server, FakeClock())
