"""The wiring root: settings -> keys, registry, store, every component built once (build), the gRPC server with each
servicer handed what it calls, metrics and probes; and shutdown."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from countersign import registry as registry_mod
from countersign.adapters.base import ANSWER_HEADROOM, MAX_ANSWER_BYTES, Adapter
from countersign.adapters.grpc import GrpcAdapter
from countersign.approvals import ContextMode, Verifier
from countersign.audit import Audit
from countersign.errors import SettingsError
from countersign.keyring import Keyring
from countersign.observability import logs, tracing
from countersign.observability.metrics import Metrics
from countersign.path.approval import Approvals
from countersign.path.claim import Claims
from countersign.path.execute import Executor
from countersign.path.grants import Grants
from countersign.path.pipeline import Pipeline
from countersign.path.quota import Quota
from countersign.path.settle import Settler, Timing
from countersign.recovery.compensate import Compensator
from countersign.recovery.reconcile import Reconciler
from countersign.registry import Registry
from countersign.reply.check import ReplyCheck
from countersign.reply.continuations import Continuations
from countersign.reply.guard_loader import GuardLoader
from countersign.sidecar.admission import Gate, Health, new_server
from countersign.sidecar.embedded_redis import EmbeddedRedis
from countersign.sidecar.front_doors import FrontDoors, open_front_doors
from countersign.sidecar.identity import Identity
from countersign.sidecar.probes import Probes, serve_probes
from countersign.sidecar.server import (
    SERVICES,
    ContinuationServicer,
    GatewayServicer,
    ReplyGuardServicer,
    add_health_and_reflection,
    register,
)
from countersign.sidecar.settings import GC_THRESHOLDS, LEASE_MARGIN, Settings
from countersign.sidecar.tls import add_port, downstream_tls, server_credentials
from countersign.sidecar.trust import check_id_key, load_approvals, load_guard, load_keys, warn_without_issuer
from countersign.store.redis_store import RedisStore
from countersign.v1 import continuation_pb2_grpc, gateway_pb2_grpc, guard_pb2_grpc

log = logging.getLogger("countersign")


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise SettingsError(f"{addr!r} is not host:port")
    return host.strip("[]"), int(port)


@dataclass
class Components:
    """Everything the sidecar built, each once: what the servicers call, and what shutdown waits for."""

    registry: Registry
    store: RedisStore
    adapters: dict[str, Adapter]
    metrics: Metrics
    audit: Audit
    quota: Quota
    settler: Settler
    executor: Executor
    pipeline: Pipeline
    reconciler: Reconciler
    compensator: Compensator
    continuations: Continuations
    checker: ReplyCheck
    grants: Grants


@dataclass
class Sidecar:
    settings: Settings
    parts: Components
    server: grpc.aio.Server
    health: HealthServicer
    address: str
    metrics_address: str = ""
    doors: FrontDoors | None = None  # the MCP endpoint and the approval inbox, over the same path
    probes: Probes | None = None
    embedded: EmbeddedRedis | None = None
    verifier: Verifier | None = None
    closers: list[Any] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING first, then let in-flight calls finish, then release everything."""
        if self.probes is not None:
            self.probes.state = "draining"
        await self.health.enter_graceful_shutdown()
        self.stopping.set()
        if self.doors is not None:
            await self.doors.stop(self.settings.grace if grace is None else grace)
        await self.server.stop(self.settings.grace if grace is None else grace)
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=self.settings.grace)
        parts = self.parts
        pending = [*parts.executor.background, *parts.settler.background]
        if pending:
            await asyncio.wait(pending, timeout=self.settings.grace)
        await parts.quota.drain(self.settings.grace)
        await parts.audit.drain(self.settings.grace)
        for adapter in parts.adapters.values():
            await adapter.close()
        await parts.store.close()
        if self.verifier is not None:
            await self.verifier.close()
        for close in self.closers:
            close()
        if self.embedded is not None:
            self.embedded.stop()


async def start(settings: Settings) -> Sidecar:
    """Build and start everything; raise SettingsError / RegistryError before listening if anything is wrong."""
    if settings.telemetry == "on":
        tracing.setup()
    keyring = load_keys(settings)
    verifier = await load_approvals(settings)
    embedded = None
    try:
        registry = registry_mod.load(settings.registry, issuers=verifier is not None)
        registry_mod.check_deadlines(registry, settings.lease, settings.downstream_deadline, LEASE_MARGIN)
        url = settings.redis_url
        if not url:
            embedded = EmbeddedRedis().start()
            url = embedded.url
        sidecar = await _start(settings, keyring, registry, url, embedded, verifier)
    except BaseException:
        if embedded is not None:
            embedded.stop()
        if verifier is not None:
            await verifier.close()
        raise
    if verifier is None:
        warn_without_issuer()
    return sidecar


def build(
    settings: Settings,
    keyring: Keyring,
    registry: Registry,
    store: RedisStore,
    guard: GuardLoader,
    verifier: Verifier | None = None,
) -> Components:
    """The one place components are made: each once, each handed what it calls."""
    metrics = Metrics(
        frozenset(registry.tools),
        enabled=settings.telemetry == "on",
        reads=frozenset(name for name, tool in registry.tools.items() if not tool.is_write),
    )
    store.observe = metrics.redis_observer()
    # an answer the sidecar reads must fit in the reply it sends (a read's result, a receipt's evidence)
    cap = max(min(MAX_ANSWER_BYTES, settings.max_message_bytes - ANSWER_HEADROOM), 1024)
    tls, credentials = downstream_tls(settings)
    kinds = {tool.adapter.kind for tool in registry.tools.values()}
    adapters: dict[str, Adapter] = {"grpc": GrpcAdapter(max_answer_bytes=cap, credentials=credentials)}
    # aiohttp (~10 MB, ~0.1 s; notes/lean-start2.md) and the MCP SDK (~1 s to import) only for a registry naming them
    if "http" in kinds:
        from countersign.adapters.http import HttpAdapter

        adapters["http"] = HttpAdapter(max_answer_bytes=cap, ssl_context=tls)
    if "mcp" in kinds:
        from countersign.adapters.mcp import McpAdapter

        adapters["mcp"] = McpAdapter(max_answer_bytes=cap)
    timing = Timing(
        lease_ms=int(settings.lease * 1000),
        replay_ttl_ms=int(settings.replay_ttl * 1000),
        downstream_deadline=settings.downstream_deadline,
    )
    audit = Audit(store, keyring, metrics, int(settings.audit_ttl * 1000))
    quota = Quota(store, settings.tenant_quota, timing.replay_ttl_ms)
    settler = Settler(store, keyring, audit, metrics, timing)
    executor = Executor(store, keyring, adapters, settler, timing, metrics, audit)
    claims = Claims(
        store, keyring, metrics, lease_ms=timing.lease_ms, max_wait=settings.max_wait, approvals=Approvals(verifier)
    )
    grants = Grants(store, keyring, registry, verifier, audit, metrics)
    pipeline = Pipeline(
        registry=registry,
        store=store,
        keyring=keyring,
        adapters=adapters,
        quota=quota,
        claims=claims,
        executor=executor,
        audit=audit,
        metrics=metrics,
        timing=timing,
        confirm_ttl_ms=int(settings.confirm_ttl * 1000),
        grants=grants,
    )
    reconciler = Reconciler(
        store=store,
        keyring=keyring,
        adapters=adapters,
        settler=settler,
        registry=registry,
        metrics=metrics,
        audit=audit,
        lease_ms=timing.lease_ms,
        reconcile_window_ms=int(settings.reconcile_window * 1000),
        downstream_deadline=timing.downstream_deadline,
    )
    compensator = Compensator(
        store=store,
        keyring=keyring,
        registry=registry,
        metrics=metrics,
        audit=audit,
        confirm_ttl_ms=int(settings.confirm_ttl * 1000),
    )
    continuations = Continuations(
        store=store,
        keyring=keyring,
        registry=registry,
        guard=guard,
        audit=audit,
        metrics=metrics,
        continuation_lease_ms=int(settings.continuation_lease * 1000),
        replay_ttl_ms=timing.replay_ttl_ms,
    )
    checker = ReplyCheck(store=store, keyring=keyring, registry=registry, guard=guard, audit=audit, metrics=metrics)
    return Components(
        registry,
        store,
        adapters,
        metrics,
        audit,
        quota,
        settler,
        executor,
        pipeline,
        reconciler,
        compensator,
        continuations,
        checker,
        grants,
    )


async def _start(
    settings: Settings,
    keyring: Keyring,
    registry: Registry,
    url: str,
    embedded: EmbeddedRedis | None,
    verifier: Verifier | None,
) -> Sidecar:
    try:
        store = RedisStore.from_url(
            url,
            socket_timeout=settings.redis_timeout,
            connect_timeout=settings.redis_connect_timeout,
            retries=settings.redis_retries,
            mode=settings.redis_mode,
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=int(settings.redis_wait_timeout * 1000),
        )
    except ValueError as exc:
        raise SettingsError(f"--redis-url: {exc}") from exc
    try:
        await check_id_key(store, keyring)
        guard = load_guard(settings)
    except SettingsError:
        await store.close()
        raise
    try:
        parts = build(settings, keyring, registry, store, guard, verifier)
    except SettingsError:
        await store.close()
        raise
    metrics = parts.metrics
    identity = Identity(verifier, ContextMode(settings.verified_context), settings.allowed_peers)

    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server, open_calls = new_server(options)
    gate = Gate(settings.max_in_flight, open_calls)
    metrics.watch_admission(lambda: gate.holding, settings.max_in_flight)
    register(
        gateway_pb2_grpc.add_ToolGatewayServiceServicer_to_server,
        GatewayServicer(parts.pipeline, parts.compensator, parts.reconciler, parts.grants, metrics, gate, identity),
        server,
    )
    register(
        continuation_pb2_grpc.add_ContinuationServiceServicer_to_server,
        ContinuationServicer(parts.continuations, metrics, gate, identity),
        server,
    )
    register(
        guard_pb2_grpc.add_ReplyGuardServiceServicer_to_server,
        ReplyGuardServicer(parts.checker, metrics, gate, identity),
        server,
    )
    health = Health(gate)
    add_health_and_reflection(server, health)

    credentials = server_credentials(settings)
    if settings.listen.startswith("unix:"):
        add_port(server, settings.listen, credentials)
        address = settings.listen
    else:
        host, port = split_addr(settings.listen)
        bound = add_port(server, f"{host}:{port}", credentials)
        if bound == 0:
            raise SettingsError(f"cannot listen on {settings.listen}")
        address = f"{host}:{bound}"
    sidecar = Sidecar(settings, parts, server, health, address, embedded=embedded, verifier=verifier)
    sidecar.doors = await open_front_doors(settings, parts.pipeline, store, metrics, gate, identity)
    if settings.metrics_listen:
        host, port = split_addr(settings.metrics_listen)
        sidecar.probes = Probes(
            asyncio.get_running_loop(),
            store.ping,
            policy_version=registry.policy_version,
            redis_wait=settings.redis_connect_timeout + settings.redis_timeout,
        )
        httpd = serve_probes(host, port, sidecar.probes.app(metrics.registry))
        sidecar.metrics_address = f"{host}:{httpd.server_address[1]}"
        sidecar.closers.append(httpd.shutdown)
    await server.start()
    sidecar.tasks.append(
        asyncio.ensure_future(parts.reconciler.run_forever(settings.reconcile_interval, sidecar.stopping))
    )
    for name in ("", *SERVICES):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    if sidecar.probes is not None:
        sidecar.probes.state = "serving"
    return sidecar


def tune_gc() -> None:
    """Keep the collector off the hot path of a long-running server.

    Everything loaded at start (modules, registry, clients) is frozen out of collection, and the young
    generation is collected every 10,000 allocations instead of 700. Measured under Confirm load with spans
    exported: 636 ms of collection in a 20 s run (about 3 % of the CPU, mostly full collections walking
    the start-up objects) against 93 ms after. Cycles are still collected, a little later.

    No full collection before the freeze: at this point it found 24 unreachable objects and took 80-350 ms of the
    start (notes/lean.md); freezing them costs nothing worth that. The CLI sets the thresholds before its imports.
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(settings: Settings) -> None:
    """Run until SIGTERM/SIGINT; print one JSON line with the bound addresses once listening."""
    sidecar = await start(settings)
    tune_gc()
    print(
        json.dumps(
            {
                "event": "listening",
                "grpc": sidecar.address,
                "metrics": sidecar.metrics_address,
                **(sidecar.doors.addresses() if sidecar.doors is not None else {}),
                "redis": "embedded" if sidecar.embedded else "external",
                "policy_version": sidecar.parts.registry.policy_version,
            }
        ),
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping", extra={"event": "stopping", "grace_seconds": settings.grace})
    await sidecar.stop()
    logs.always("stopped")
