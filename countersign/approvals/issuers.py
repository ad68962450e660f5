"""The approvals settings: which parties may countersign, with which keys and algorithms.

The file (YAML, or JSON when it ends in ``.json``)::

    issuers:
      - issuer: https://app.example          # the iss claim, compared exactly
        audience: countersign                # the aud an approval or grant must carry
        context_audience: countersign        # optional: the aud of a context assertion (default: audience)
        jwks: keys/app.jwks.json             # a file (relative to this file) or an https URL
        algorithms: [EdDSA, ES256, RS256]    # optional, this is the default; never none
        max_ttl: 300                         # optional: an approval's exp at most this far after iat and now
        max_grant_ttl: 604800                # optional: the same for a grant
        jwks_ttl: 600                        # optional, URL only: re-fetch the set this often
        jwks_refetch_interval: 30            # optional, URL only: at most one fetch per this many seconds
    step_up:                                 # optional: risk -> acr values an approval must carry
      high: [urn:example:acr:mfa]
      irreversible: [urn:example:acr:mfa]
    leeway: 30                               # optional: clock skew allowed on exp, nbf and iat

Every problem raises ApprovalSettingsError naming the file and the field; a JWKS that cannot be read or
holds a key that cannot be loaded stops the start. HMAC (HS256/384/512) is used only when an issuer lists
it, and then only with a JWKS file (an ``oct`` key is the shared secret; a secret is never fetched from a
URL). The keys themselves live in keys.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from countersign.approvals.errors import ApprovalSettingsError
from countersign.approvals.jwks import ALGORITHMS, HMAC_ALGORITHMS, Clock, FileKeySet, UrlKeySet

if TYPE_CHECKING:  # imported when a JWKS URL is first fetched (_session): ~12 MB a sidecar may never need
    import aiohttp

DEFAULT_ALGORITHMS = ("EdDSA", "ES256", "RS256")
RISKS = ("low", "medium", "high", "irreversible")
LOCAL_HTTP_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

_Fail = Callable[[str, str], ApprovalSettingsError]
_TOP_KEYS = frozenset({"issuers", "step_up", "leeway"})
_ISSUER_KEYS = frozenset(
    {
        "issuer",
        "audience",
        "context_audience",
        "jwks",
        "algorithms",
        "max_ttl",
        "max_grant_ttl",
        "jwks_ttl",
        "jwks_refetch_interval",
    }
)


@dataclass(frozen=True)
class IssuerSettings:
    """One trusted issuer (a party the agent is not): its name, audiences, key source and limits."""

    issuer: str
    audience: str
    jwks: str  # an absolute file path, or an http(s) URL
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    context_audience: str = ""
    max_ttl: int = 300
    max_grant_ttl: int = 7 * 24 * 3600
    jwks_ttl: float = 600.0
    jwks_refetch_interval: float = 30.0

    @property
    def jwks_is_url(self) -> bool:
        return self.jwks.startswith(("https://", "http://"))

    @property
    def context_aud(self) -> str:
        return self.context_audience or self.audience


@dataclass(frozen=True)
class ApprovalSettings:
    """The whole approvals settings file, validated."""

    path: Path
    issuers: tuple[IssuerSettings, ...]
    step_up: Mapping[str, frozenset[str]] = field(default_factory=dict)
    leeway: int = 30


def load_settings(path: str | Path) -> ApprovalSettings:
    """Read and validate the approvals settings file (the keys are loaded later, by Issuers.start)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ApprovalSettingsError(f"approvals settings {path}: cannot be read: {exc}") from exc
    try:
        data = _parse_json(text) if path.suffix.lower() == ".json" else yaml.load(text, Loader=_StrictLoader)
    except (ValueError, yaml.YAMLError) as exc:
        raise ApprovalSettingsError(f"approvals settings {path}: not valid: {' '.join(str(exc).split())}") from exc
    return parse_settings(data, path)


def parse_settings(data: Any, path: Path) -> ApprovalSettings:
    """Validate already-parsed settings; ``path`` names the file in messages and anchors relative JWKS paths."""

    def fail(where: str, problem: str) -> ApprovalSettingsError:
        return ApprovalSettingsError(f"approvals settings {path}: {where}: {problem}")

    if not isinstance(data, dict):
        raise fail("-", "must be a mapping with an 'issuers' list")
    _known(data, _TOP_KEYS, "-", fail)
    raw_issuers = data.get("issuers")
    if not isinstance(raw_issuers, list) or not raw_issuers:
        raise fail("issuers", "must be a non-empty list of issuers")
    issuers: list[IssuerSettings] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_issuers):
        issuer = _issuer(raw, f"issuers[{i}]", path, fail)
        if issuer.issuer in seen:
            raise fail(f"issuers[{i}]", f"issuer {issuer.issuer!r} is listed twice")
        seen.add(issuer.issuer)
        issuers.append(issuer)
    leeway = data.get("leeway", 30)
    if isinstance(leeway, bool) or not isinstance(leeway, int) or not 0 <= leeway <= 300:
        raise fail("leeway", "must be a whole number of seconds from 0 to 300")
    return ApprovalSettings(
        path=path, issuers=tuple(issuers), step_up=_step_up(data.get("step_up"), fail), leeway=leeway
    )


def _issuer(raw: Any, where: str, path: Path, fail: _Fail) -> IssuerSettings:
    if not isinstance(raw, dict):
        raise fail(where, "must be a mapping with issuer, audience and jwks")
    _known(raw, _ISSUER_KEYS, where, fail)
    for key in ("issuer", "audience", "jwks"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise fail(f"{where}.{key}", "is required and must be a non-empty string")
    name = raw["issuer"]
    where = f"{where} ({name})"
    algorithms = raw.get("algorithms", list(DEFAULT_ALGORITHMS))
    if not isinstance(algorithms, list) or not algorithms or not all(isinstance(a, str) for a in algorithms):
        raise fail(f"{where}.algorithms", "must be a non-empty list of algorithm names")
    for alg in algorithms:
        if alg.lower() == "none":
            raise fail(f"{where}.algorithms", "'none' is never accepted: an approval must be signed")
        if alg not in ALGORITHMS:
            raise fail(f"{where}.algorithms", f"unknown algorithm {alg!r} (one of {', '.join(ALGORITHMS)})")
    jwks = raw["jwks"].strip()
    if jwks.startswith(("https://", "http://")):
        _check_url(jwks, f"{where}.jwks", fail)
        if HMAC_ALGORITHMS & set(algorithms):
            raise fail(
                f"{where}.algorithms", "HMAC needs a shared secret, which is never fetched from a URL: use a JWKS file"
            )
    elif "://" in jwks:
        raise fail(f"{where}.jwks", "must be a file path or an https URL")
    else:
        file = Path(jwks)
        jwks = str(file if file.is_absolute() else (path.parent / file).resolve())
    context_audience = raw.get("context_audience", "")
    if not isinstance(context_audience, str):
        raise fail(f"{where}.context_audience", "must be a string")
    return IssuerSettings(
        issuer=name,
        audience=raw["audience"],
        jwks=jwks,
        algorithms=tuple(dict.fromkeys(algorithms)),
        context_audience=context_audience,
        max_ttl=_whole_seconds(raw, "max_ttl", 300, 1, 24 * 3600, where, fail),
        max_grant_ttl=_whole_seconds(raw, "max_grant_ttl", 7 * 24 * 3600, 1, 366 * 24 * 3600, where, fail),
        jwks_ttl=_seconds(raw, "jwks_ttl", 600, 1, 7 * 24 * 3600, where, fail),
        jwks_refetch_interval=_seconds(raw, "jwks_refetch_interval", 30, 0, 24 * 3600, where, fail),
    )


def _check_url(url: str, where: str, fail: _Fail) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as exc:
        raise fail(where, f"not a valid URL: {exc}") from exc
    if not host:
        raise fail(where, "the URL names no host")
    if parts.scheme == "http" and host not in LOCAL_HTTP_HOSTS:
        raise fail(where, "must be https (plain http only for 127.0.0.1 or localhost)")


def _seconds(raw: dict[str, Any], key: str, default: float, low: float, high: float, where: str, fail: _Fail) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise fail(f"{where}.{key}", f"must be a number of seconds from {low:g} to {high:g}")
    return float(value)


def _whole_seconds(raw: dict[str, Any], key: str, default: int, low: int, high: int, where: str, fail: _Fail) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(f"{where}.{key}", f"must be a whole number of seconds from {low} to {high}")
    return value


def _step_up(raw: Any, fail: _Fail) -> dict[str, frozenset[str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise fail("step_up", f"must map a risk ({', '.join(RISKS)}) to a list of acr values")
    out: dict[str, frozenset[str]] = {}
    for risk, values in raw.items():
        if risk not in RISKS:
            raise fail("step_up", f"unknown risk {risk!r} (one of {', '.join(RISKS)})")
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise fail(f"step_up.{risk}", "must be a non-empty list of acr values")
        out[risk] = frozenset(values)
    return out


def _known(raw: dict[Any, Any], known: frozenset[str], where: str, fail: _Fail) -> None:
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:  # a misspelt key (algorithm for algorithms) must not silently fall back to a default
        raise fail(where, f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")


def _parse_json(text: str) -> Any:
    return json.loads(text, object_pairs_hook=no_duplicates)


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A json object_pairs_hook that refuses a repeated key (two readers could pick different values)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated key."""


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@dataclass(frozen=True)
class Issuer:
    """One trusted issuer with its live key set."""

    settings: IssuerSettings
    keys: FileKeySet | UrlKeySet


class Issuers:
    """The trusted issuers by ``iss``, each with its keys; built once at start by ``Issuers.start``."""

    def __init__(self, settings: ApprovalSettings, *, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        self._http: aiohttp.ClientSession | None = None
        self._by_name: dict[str, Issuer] = {}
        for issuer in settings.issuers:
            keys: FileKeySet | UrlKeySet
            if issuer.jwks_is_url:
                keys = UrlKeySet(
                    issuer.jwks,
                    issuer.algorithms,
                    ttl=issuer.jwks_ttl,
                    refetch_interval=issuer.jwks_refetch_interval,
                    clock=clock,
                    session=self._session,
                )
            else:
                keys = FileKeySet(issuer.jwks, issuer.algorithms)
            self._by_name[issuer.issuer] = Issuer(issuer, keys)

    @classmethod
    async def start(cls, settings: ApprovalSettings, *, clock: Clock = time.monotonic) -> Issuers:
        """Load every issuer's keys now; ApprovalSettingsError (naming the file and issuer) stops the start."""
        issuers = cls(settings, clock=clock)
        try:
            for issuer in issuers._by_name.values():
                try:
                    if isinstance(issuer.keys, UrlKeySet):
                        await issuer.keys.load()
                    else:
                        issuer.keys.load()
                except ValueError as exc:
                    raise ApprovalSettingsError(
                        f"approvals settings {settings.path}: issuer {issuer.settings.issuer}: {exc}"
                    ) from exc
        except BaseException:
            await issuers.close()
            raise
        return issuers

    def get(self, iss: str) -> Issuer | None:
        return self._by_name.get(iss)

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        return self._http

    async def close(self) -> None:
        for issuer in self._by_name.values():
            await issuer.keys.close()
        if self._http is not None:
            await self._http.close()
            self._http = None
