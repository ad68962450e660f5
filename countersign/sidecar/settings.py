"""One typed settings class: every setting has a flag, a COUNTERSIGN_* variable, a default and a why.

Precedence: flag, then environment variable, then default. Validated once, at start.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any

from countersign.errors import SettingsError as SettingsError  # the settings refuse with it (re-exported)

# What a claim's lease must hold besides the downstream call: the claim, the policy re-check, the settle.
# Every write tool's deadline plus this must fit within --lease (checked at start).
LEASE_MARGIN = 0.5
# The collector's thresholds for the sidecar's whole life (app.tune_gc), set from its first import on (cli.main)
GC_THRESHOLDS = (10_000, 20, 20)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """Seconds from '250ms', '5s', '5m', '24h' or a plain number of seconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 250ms, 5s, 5m, 24h)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _setting(default: Any, why: str, *, kind: str = "str") -> Any:
    return field(default=default, metadata={"why": why, "kind": kind})


@dataclass(frozen=True)
class Settings:
    registry: str = _setting("", "the capability registry YAML (required)")
    listen: str = _setting("127.0.0.1:50051", "gRPC address: host:port or unix:/path (loopback by default)")
    redis_url: str = _setting("", "redis://, rediss:// or unix:// URL; empty: start a private redis-server")
    redis_mode: str = _setting("auto", "auto (from the URL scheme), standalone, sentinel or cluster")
    redis_wait_replicas: int = _setting(
        0,
        "claim and settle wait for this many replicas (WAIT) before the sidecar acts; not met: UNAVAILABLE",
        kind="count",
    )
    redis_wait_timeout: float = _setting(0.1, "how long claim/settle wait for the replicas", kind="duration")
    mcp_listen: str = _setting("", "MCP endpoint (Streamable HTTP at /mcp): host:port, loopback by default; empty: off")
    approval_url: str = _setting(
        "", "the approval page an MCP URL elicitation sends the user to, with {action_id}; empty: no URL elicitation"
    )
    approval_inbox_listen: str = _setting(
        "", "the approval inbox (POST /approvals/{action_id} a signed approval): host:port; empty: off"
    )
    approval_wait: float = _setting(
        120.0, "how long an MCP call waits for the user: the elicitation's answer, then the approval", kind="duration"
    )
    metrics_listen: str = _setting("127.0.0.1:9464", "Prometheus /metrics address (host:port); empty: off")
    keys_file: str = _setting("", 'HMAC keys JSON {"active": kid, "keys": {kid: hex}}; empty: generated')
    confirm_ttl: float = _setting(300.0, "how long a card waits for the user", kind="duration")
    replay_ttl: float = _setting(86400.0, "how long a settled outcome is replayed to duplicates", kind="duration")
    lease: float = _setting(30.0, "how long a claim may run before it is reported UNKNOWN", kind="duration")
    continuation_lease: float = _setting(60.0, "how long one reply generation may hold a continuation", kind="duration")
    downstream_deadline: float = _setting(
        5.0, "deadline of one downstream call (prepare, execute, read)", kind="duration"
    )
    redis_timeout: float = _setting(0.5, "Redis socket timeout: fail closed fast", kind="duration")
    redis_connect_timeout: float = _setting(0.5, "Redis connect timeout", kind="duration")
    redis_retries: int = _setting(1, "Redis retries after a connection error or timeout", kind="int")
    reconcile_interval: float = _setting(
        5.0, "how often the background reconciler sweeps for UNKNOWN actions", kind="duration"
    )
    reconcile_window: float = _setting(
        600.0,
        "how long a lookup may keep finding nothing before an action goes to NEEDS_MANUAL_REVIEW",
        kind="duration",
    )
    audit_ttl: float = _setting(
        30 * 86400.0,
        "how long a settled action's audit chain is kept in Redis, at "
        "least --replay-ttl (export it for longer; an unresolved one is kept until it "
        "settles)",
        kind="duration",
    )
    max_wait: float = _setting(10.0, "upper bound of a Confirm's wait_ms", kind="duration")
    grace: float = _setting(10.0, "on SIGTERM: how long in-flight calls may finish", kind="duration")
    max_in_flight: int = _setting(
        64,
        "calls the sidecar holds at once, running or waiting inside gRPC; beyond it "
        "callers get RESOURCE_EXHAUSTED with a RetryInfo at once (shed, not queued "
        "until every caller times out). Raise it for a slow downstream",
        kind="int",
    )
    tenant_quota: int = _setting(
        100_000,
        "records one tenant may keep in Redis: actions (card, run record, "
        "continuation) and turns (read facts), each counted for --replay-ttl; beyond "
        "it Invoke gets RESOURCE_EXHAUSTED QUOTA_EXCEEDED",
        kind="int",
    )
    max_message_bytes: int = _setting(1 << 20, "largest gRPC message accepted", kind="int")
    telemetry: str = _setting("on", "on: traces and metrics; off: neither (to measure what they cost)")
    guard_lexicon: str = _setting(
        "", "a folder of reply-guard lexicon files (zh.yaml, en.yaml, ...); empty: the packaged ones"
    )
    guard_unsupported: str = _setting(
        "flag",
        "a reply in a language the guard has no lexicon for (de, ja, ...): "
        "flag (pass it with reason UNSUPPORTED_LANGUAGE, counted) or replace "
        "(replace it unless a receipt succeeded)",
    )
    guard_veto: str = _setting(
        "on",
        "on: a claim the reply-guard rules replace with no receipt passes when the learned veto's p(claim) is "
        "under its threshold (countersign/guard/veto.py, notes/guard-veto2.md); off: the rules alone",
    )
    log_level: str = _setting("info", "debug, info, warning or error")
    malloc_arena_max: int = _setting(
        0,
        "glibc malloc arenas the process may use (mallopt M_ARENA_MAX, set at start before any thread): 1 or 2 "
        "keep gRPC's threads' arenas out of resident memory; 0: glibc's own limit (8 per core, or MALLOC_ARENA_MAX)",
        kind="count",
    )
    approvals: str = _setting(
        "",
        "the approval issuers (YAML, or JSON: issuers, their JWKS, step_up; docs/approvals.md): parties the agent "
        "is not, whose signed approval Confirm needs for a tool with approval: signed, and who sign standing "
        "grants (CreateGrant). Empty: none, no grants, and every write is confirmable by the token alone (a loud "
        "warning at start)",
    )
    verified_context: str = _setting(
        "off",
        "off | optional | required: take tenant, actor, subject, session, role and admin context from a context "
        "assertion (gRPC metadata authorization: Bearer <JWS> from an --approvals issuer); required refuses a call "
        "without one (UNAUTHENTICATED CONTEXT_INVALID), a CallContext field that disagrees is CONTEXT_MISMATCH",
    )
    tls_cert: str = _setting("", "the server certificate chain (PEM) for gRPC over TLS; with --tls-key")
    tls_key: str = _setting("", "the server's private key (PEM)")
    tls_client_ca: str = _setting(
        "", "CA bundle (PEM): client certificates are then required and must be signed by it (mTLS)"
    )
    tls_allowed_peers: str = _setting(
        "",
        "comma-separated SANs (DNS names, URIs such as SPIFFE ids spiffe://..., e-mail, IP) a client certificate "
        "must carry one of, checked on every RPC and every request to --mcp-listen / --approval-inbox-listen; "
        "empty: any certificate the client CA signed",
    )
    insecure_listen: str = _setting(
        "",
        "yes: acknowledge plaintext gRPC on an address beyond loopback (without it the sidecar refuses to start "
        "there unless --tls-cert is given): e.g. a pod-wide address for kubelet's gRPC probe, behind a NetworkPolicy",
    )
    downstream_ca: str = _setting(
        "", "CA bundle (PEM) trusted for https:// downstreams and gRPC tools with tls: true; empty: the system's"
    )
    downstream_cert: str = _setting("", "client certificate (PEM) presented to TLS downstreams; with --downstream-key")
    downstream_key: str = _setting("", "its private key (PEM)")

    def validate(self) -> Settings:
        if not self.registry:
            raise SettingsError("--registry (COUNTERSIGN_REGISTRY) is required")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["kind"] in ("duration", "int") and value <= 0 and f.name != "redis_retries":
                raise SettingsError(f"--{_flag(f.name)} must be positive, not {value}")
        for name in ("redis_retries", "redis_wait_replicas", "malloc_arena_max"):
            if getattr(self, name) < 0:
                raise SettingsError(f"--{_flag(name)} must be 0 or more, not {getattr(self, name)}")
        if self.redis_wait_replicas and self.redis_wait_timeout >= self.redis_timeout:
            raise SettingsError(
                f"--redis-wait-timeout ({self.redis_wait_timeout:g} s) must be shorter than --redis-timeout "
                f"({self.redis_timeout:g} s): the WAIT runs on the script's connection, and one that outlasts the "
                "socket timeout fails the write as STORE_UNAVAILABLE instead of refusing it with the card put back"
            )
        if self.redis_mode not in ("auto", "standalone", "sentinel", "cluster"):
            raise SettingsError("--redis-mode must be auto, standalone, sentinel or cluster")
        if self.lease < self.downstream_deadline + LEASE_MARGIN:
            raise SettingsError(
                f"--lease must be longer than --downstream-deadline by at least "
                f"{LEASE_MARGIN * 1000:g} ms, or a live call would be reported UNKNOWN while it "
                "still runs"
            )
        if self.audit_ttl < max(self.replay_ttl, self.confirm_ttl):
            raise SettingsError(
                "--audit-ttl must be at least --replay-ttl and --confirm-ttl: audit verify reports a "
                "card or settled record whose chain expired before it"
            )
        if self.guard_unsupported not in ("flag", "replace"):
            raise SettingsError("--guard-unsupported must be flag or replace")
        if self.guard_veto not in ("on", "off"):
            raise SettingsError("--guard-veto must be on or off")
        if self.telemetry not in ("on", "off"):
            raise SettingsError("--telemetry must be on or off")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise SettingsError("--log-level must be debug, info, warning or error")
        self._validate_identity()
        self._validate_mcp()
        return self

    def _validate_mcp(self) -> None:
        if self.approval_url and (
            "{action_id}" not in self.approval_url or not self.approval_url.startswith(("https://", "http://"))
        ):
            raise SettingsError("--approval-url must be an http(s) URL with {action_id} in it")

    def _validate_identity(self) -> None:
        """Approvals, verified context and transport identity (docs/design.md §12)."""
        if self.verified_context not in ("off", "optional", "required"):
            raise SettingsError("--verified-context must be off, optional or required")
        if self.verified_context != "off" and not self.approvals:
            raise SettingsError("--verified-context needs --approvals: its issuers sign the context assertions")
        for first, second in (("tls_cert", "tls_key"), ("downstream_cert", "downstream_key")):
            if bool(getattr(self, first)) != bool(getattr(self, second)):
                raise SettingsError(f"--{_flag(first)} and --{_flag(second)} go together")
        if self.tls_client_ca and not self.tls_cert:
            raise SettingsError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS first)")
        if self.tls_allowed_peers and not self.tls_client_ca:
            raise SettingsError(
                "--tls-allowed-peers needs --tls-client-ca: only a verified client certificate names a peer"
            )
        if self.insecure_listen not in ("", "yes", "no"):
            raise SettingsError("--insecure-listen must be yes (or empty)")
        if not self.tls_cert and self.insecure_listen != "yes" and not loopback(self.listen):
            raise SettingsError(
                f"--listen {self.listen} is beyond loopback and has no TLS: anyone who reaches it could call every "
                "RPC. Give --tls-cert and --tls-key (and --tls-client-ca to require client certificates), or "
                "acknowledge a plaintext listener with --insecure-listen yes (e.g. inside a pod behind a NetworkPolicy)"
            )

    @property
    def allowed_peers(self) -> frozenset[str]:
        return frozenset(p.strip() for p in self.tls_allowed_peers.split(",") if p.strip())


def loopback(listen: str) -> bool:
    """A unix socket, or a host:port whose host is a loopback name or address."""
    if listen.startswith("unix:"):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(name: str) -> str:
    return name.replace("_", "-")


def env_name(name: str) -> str:
    return "COUNTERSIGN_" + name.upper()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; the help line names the variable and the default."""
    for f in dataclasses.fields(Settings):
        default = f.default
        shown = f"{default}s" if f.metadata["kind"] == "duration" else repr(default)
        parser.add_argument(
            f"--{_flag(f.name)}",
            dest=f.name,
            default=None,
            metavar=f.metadata["kind"].upper(),
            help=f"{f.metadata['why']} [env {env_name(f.name)}; default {shown}]",
        )


def from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        raw = getattr(args, f.name, None)
        if raw is None:
            raw = environ.get(env_name(f.name))
        if raw is None:
            continue
        try:
            kind = f.metadata["kind"]
            values[f.name] = duration(raw) if kind == "duration" else int(raw) if kind in ("int", "count") else str(raw)
        except ValueError as exc:
            raise SettingsError(f"--{_flag(f.name)} / {env_name(f.name)}: {exc}") from exc
    return Settings(**values).validate()
