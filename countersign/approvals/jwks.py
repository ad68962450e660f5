"""An issuer's public keys (a JWKS), from a file re-read on change or a URL fetched and cached.

Verifying never does network I/O while the token's key is known: ``current()`` is synchronous. A URL's
set is re-fetched in the background once its TTL has passed, and on an unknown ``kid`` through
``refresh_for_unknown_kid()``, at most once per ``refetch_interval`` (so tokens naming random kids cannot
make us hammer the issuer). A set that becomes unreadable keeps the last good keys and logs a warning;
at start it stops the start.

Only keys are taken from the JWKS, never from a token: the ``jku``/``x5u``/``jwk``/``x5c`` headers are
refused by the verifier. Private key material in a JWKS is refused (a public set must not hold it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:  # PyJWT and cryptography (~9 MB resident) are imported when a key is loaded (_verifiers), so a
    import aiohttp  # sidecar without --approvals never imports them (notes/lean.md); aiohttp (~12 MB) when a JWKS
    import jwt  # URL is fetched: a sidecar with neither HTTP tools nor a JWKS URL never does (notes/lean-start2.md)

log = logging.getLogger("countersign.approvals")

# alg -> (kty, the curves it takes or None): a key is used only with algorithms its type fits
ALGORITHMS: dict[str, tuple[str, frozenset[str] | None]] = {
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "RS256": ("RSA", None),
    "RS384": ("RSA", None),
    "RS512": ("RSA", None),
    "PS256": ("RSA", None),
    "PS384": ("RSA", None),
    "PS512": ("RSA", None),
    "HS256": ("oct", None),
    "HS384": ("oct", None),
    "HS512": ("oct", None),
}
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
MAX_JWKS_BYTES = 256 * 1024
MAX_KEYS = 100
FETCH_TIMEOUT_S = 5.0
_PRIVATE_PARTS = ("d", "p", "q", "dp", "dq", "qi", "oth")

Clock = Callable[[], float]
Found: TypeAlias = 'jwt.PyJWK | Literal["unknown", "algorithm"]'


@dataclass(frozen=True)
class Keys:
    """One parsed JWKS: for each key, a verifier per algorithm the issuer allows and the key's type fits."""

    by_kid: dict[str, dict[str, jwt.PyJWK]] = field(default_factory=dict)
    unnamed: tuple[dict[str, jwt.PyJWK], ...] = ()

    def find(self, kid: str | None, alg: str) -> Found:
        """The key a token names, for its algorithm: ``unknown`` (no such kid), ``algorithm`` (the key does not fit)."""
        if kid is not None:
            per_alg = self.by_kid.get(kid)
            if per_alg is None:
                return "unknown"
            return per_alg.get(alg, "algorithm")
        # no kid: only unambiguous when exactly one key of the set fits the algorithm
        fitting = [k[alg] for k in (*self.by_kid.values(), *self.unnamed) if alg in k]
        return fitting[0] if len(fitting) == 1 else "unknown"

    @property
    def kids(self) -> list[str]:
        return sorted(self.by_kid)


def parse_jwks(data: Any, algorithms: tuple[str, ...]) -> Keys:
    """Build Keys from a JWKS document; ValueError names the key and the problem."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError('a JWKS must be a JSON object with a "keys" list')
    if len(data["keys"]) > MAX_KEYS:
        raise ValueError(f"a JWKS of more than {MAX_KEYS} keys is refused")
    by_kid: dict[str, dict[str, jwt.PyJWK]] = {}
    unnamed: list[dict[str, jwt.PyJWK]] = []
    for i, jwk in enumerate(data["keys"]):
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kty"), str):
            raise ValueError(f"keys[{i}] must be a JSON object with a kty")
        kid = jwk.get("kid")
        name = f"keys[{i}]" + (f" (kid {kid!r})" if kid is not None else "")
        if kid is not None and not isinstance(kid, str):
            raise ValueError(f"{name}: kid must be a string")
        if jwk.get("use", "sig") != "sig":
            continue  # an encryption key of the same issuer: not ours to use
        if jwk["kty"] != "oct" and any(part in jwk for part in _PRIVATE_PARTS):
            raise ValueError(f"{name} holds a private key: a JWKS must hold public keys only")
        per_alg = _verifiers(jwk, algorithms, name)
        if not per_alg:
            log.info("approvals: %s fits none of the algorithms %s; not used", name, ", ".join(algorithms))
            continue
        if kid is None:
            unnamed.append(per_alg)
        elif kid in by_kid:
            raise ValueError(f"{name}: kid is listed twice")
        else:
            by_kid[kid] = per_alg
    if not by_kid and not unnamed:
        raise ValueError(f"no key in the JWKS fits the algorithms {', '.join(algorithms)}")
    return Keys(by_kid, tuple(unnamed))


def _verifiers(jwk: dict[str, Any], algorithms: tuple[str, ...], name: str) -> dict[str, jwt.PyJWK]:
    import jwt

    out: dict[str, jwt.PyJWK] = {}
    for alg in algorithms:
        kty, curves = ALGORITHMS[alg]
        if jwk["kty"] != kty or (curves is not None and jwk.get("crv") not in curves):
            continue
        if "alg" in jwk and jwk["alg"] != alg:
            continue  # a key pinned to one algorithm is used with that one only
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{name} cannot be loaded as a {alg} key: {exc}") from exc
        weak = key.Algorithm.check_key_length(key.key)
        if weak:
            raise ValueError(f"{name} is too weak for {alg}: {weak}")
        out[alg] = key
    return out


def _decode(raw: bytes) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key[:40]!r}")
            out[key] = value
        return out

    try:
        return json.loads(raw, object_pairs_hook=no_duplicates)
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


class FileKeySet:
    """A JWKS file, re-read when its mtime, size or inode changes (replace it atomically: write, then rename)."""

    def __init__(self, path: str | Path, algorithms: tuple[str, ...]) -> None:
        self.path = Path(path)
        self.algorithms = algorithms
        self.loads = 0  # how many times the file was read and parsed
        self._keys = Keys()
        self._seen: tuple[int, int, int] | None = None

    def load(self) -> None:
        """Read the file now; ValueError (with the file's name) when it cannot be used."""
        stat = self.path.stat() if self.path.exists() else None
        if stat is None:
            raise ValueError(f"JWKS file {self.path} does not exist")
        self._keys = self._read()
        self._seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def _read(self) -> Keys:
        self.loads += 1
        try:
            raw = self.path.read_bytes()
            if len(raw) > MAX_JWKS_BYTES:
                raise ValueError(f"larger than {MAX_JWKS_BYTES} bytes")
            return parse_jwks(_decode(raw), self.algorithms)
        except (OSError, ValueError) as exc:
            raise ValueError(f"JWKS file {self.path}: {exc}") from exc

    def current(self) -> Keys:
        try:
            stat = os.stat(self.path)
        except OSError:
            return self._keys  # gone for a moment (being replaced): keep the last good keys
        seen = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if seen != self._seen:
            self._seen = seen  # a broken file is read once per change, not on every call
            try:
                self._keys = self._read()
                log.info("approvals: JWKS file %s re-read: kids %s", self.path, ", ".join(self._keys.kids))
            except ValueError as exc:
                log.warning("approvals: %s; keeping the keys read before", exc)
        return self._keys

    async def refresh_for_unknown_kid(self) -> bool:
        return False  # current() already re-reads a changed file

    async def close(self) -> None:
        return None


class UrlKeySet:
    """A JWKS URL: fetched at start, cached for ``ttl``, re-fetched on an unknown kid at most once per interval."""

    def __init__(
        self,
        url: str,
        algorithms: tuple[str, ...],
        *,
        ttl: float,
        refetch_interval: float,
        clock: Clock = time.monotonic,
        session: Callable[[], aiohttp.ClientSession],
    ) -> None:
        self.url = url
        self.algorithms = algorithms
        self.ttl = ttl
        self.refetch_interval = refetch_interval
        self.fetches = 0  # how many fetches were started
        self._clock = clock
        self._session = session
        self._keys = Keys()
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        """Fetch now; ValueError (with the URL) when the set cannot be fetched or used."""
        self._attempted_at = self._clock()
        self.fetches += 1
        self._keys = await self._download()
        self._fetched_at = self._clock()

    def current(self) -> Keys:
        now = self._clock()
        if (
            now - self._fetched_at >= self.ttl
            and now - self._attempted_at >= self.refetch_interval
            and self._task is None
        ):
            self._start_fetch(wait=False)
        return self._keys

    async def refresh_for_unknown_kid(self) -> bool:
        """Re-fetch (or join the fetch in flight) unless one started within the interval; True if one ran."""
        task = self._task
        if task is None:
            if self._clock() - self._attempted_at < self.refetch_interval:
                return False
            task = self._start_fetch(wait=True)
            if task is None:
                return False
        await asyncio.shield(task)
        return True

    def _start_fetch(self, *, wait: bool) -> asyncio.Task[None] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None  # called outside an event loop (a script): keep what we have
        self._attempted_at = self._clock()
        self.fetches += 1
        self._task = loop.create_task(self._refetch())
        return self._task

    async def _refetch(self) -> None:
        try:
            keys = await self._download()
        except ValueError as exc:
            log.warning("approvals: %s; keeping the keys fetched before", exc)
        else:
            self._keys, self._fetched_at = keys, self._clock()
            log.info("approvals: JWKS %s fetched: kids %s", self.url, ", ".join(keys.kids))
        finally:
            self._task = None

    async def _download(self) -> Keys:
        import aiohttp

        try:
            async with self._session().get(
                self.url,
                allow_redirects=False,  # a redirect could hand us another party's keys
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
                headers={"Accept": "application/json, application/jwk-set+json"},
            ) as response:
                if response.status != 200:
                    raise ValueError(f"answered HTTP {response.status}")
                if (response.content_length or 0) > MAX_JWKS_BYTES:
                    raise ValueError(f"larger than {MAX_JWKS_BYTES} bytes")
                body = bytearray()
                while chunk := await response.content.read(64 * 1024):
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise ValueError(f"larger than {MAX_JWKS_BYTES} bytes")
            return parse_jwks(_decode(bytes(body)), self.algorithms)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ValueError(f"JWKS {self.url}: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
