"""`countersign serve | demo | actions | audit | registry check | keys generate`: argument parsing and wiring only."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from countersign.errors import CountersignError, RegistryError, SettingsError
from countersign.sidecar import settings as settings_mod


def _logging(level: str) -> None:
    from countersign.observability import logs

    logs.configure(level)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="countersign", description="The Countersign sidecar.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the sidecar",
        description=(
            "Run the sidecar. Every setting is a flag and a COUNTERSIGN_* environment variable; durations "
            "take 250ms, 5s, 5m or 24h."
        ),
    )
    settings_mod.add_arguments(serve)
    stdio = sub.add_parser(
        "mcp-stdio",
        help="run the sidecar as an MCP server on stdin/stdout, for a local MCP host",
        description=(
            "The sidecar with its MCP front door on stdin/stdout (the gRPC endpoint runs beside it). Who the host "
            "acts for: COUNTERSIGN_MCP_TENANT, _ACTOR, _SUBJECT, _SESSION, _ROLE, _LOCALE. Logs go to stderr."
        ),
    )
    settings_mod.add_arguments(stdio)
    actions = sub.add_parser("actions", help="list, show and resolve actions (read-only unless you resolve)")
    actions_sub = actions.add_subparsers(dest="verb", required=True)
    listing = actions_sub.add_parser("list", help="actions in a state")
    listing.add_argument(
        "--state", required=True, choices=["unknown", "needs-manual-review", "compensation-failed", "running"]
    )
    showing = actions_sub.add_parser("show", help="one action: its record, receipt and audit history")
    showing.add_argument("action_id")
    resolving = actions_sub.add_parser("resolve", help="settle an unknown / needs-manual-review action by hand")
    resolving.add_argument("action_id")
    resolving.add_argument("--outcome", required=True, choices=["succeeded", "failed"])
    resolving.add_argument("--reason", required=True, help="why, in words a colleague can check later")
    resolving.add_argument("--operator", required=True, help="who decided (recorded in the audit chain)")
    resolving.add_argument("--resource-id", default="", help="the downstream's resource id, when succeeded")
    resolving.add_argument(
        "--replay-ttl",
        type=settings_mod.duration,
        default=os.environ.get("COUNTERSIGN_REPLAY_TTL", "24h"),
        help="how long the resolved outcome is replayed: the sidecars' --replay-ttl "
        "[env COUNTERSIGN_REPLAY_TTL, default 24h]",
    )
    resolving.add_argument(
        "--force",
        action="store_true",
        help="resolve inside the reconcile window although "
        "the downstream could not prove the outcome (the audit records it as forced)",
    )
    resolving.add_argument(
        "--registry",
        default=os.environ.get("COUNTERSIGN_REGISTRY", ""),
        help="the sidecars' registry, to ask the downstream first [env COUNTERSIGN_REGISTRY]",
    )
    resolving.add_argument(
        "--reconcile-window",
        default=os.environ.get("COUNTERSIGN_RECONCILE_WINDOW", "600s"),
        help="the sidecars' --reconcile-window: within it a request may still land "
        "[env COUNTERSIGN_RECONCILE_WINDOW; default 600s]",
    )
    resolving.add_argument(
        "--downstream-deadline",
        default=os.environ.get("COUNTERSIGN_DOWNSTREAM_DEADLINE", "5s"),
        help="deadline of the fence or lookup [env COUNTERSIGN_DOWNSTREAM_DEADLINE; default 5s]",
    )
    audit = sub.add_parser("audit", help="verify or export the tamper-evident audit chains")
    audit_sub = audit.add_subparsers(dest="verb", required=True)
    verifying = audit_sub.add_parser(
        "verify",
        help="walk every chain and cross-check every action record against "
        "it; report what is broken, missing or reordered",
    )
    exporting = audit_sub.add_parser("export", help="write the events as JSON lines")
    exporting.add_argument("--out", default="-", help="a file, or - for standard output")
    for p in (showing, verifying):
        p.add_argument(
            "--event-grace",
            default="5s",
            metavar="DURATION",
            help="audit writes are asynchronous: what looks wrong is looked at again after this long, "
            "and reported only if it still is [default 5s]",
        )
    for p in (listing, showing, resolving, verifying, exporting):
        p.add_argument(
            "--redis-url",
            default=os.environ.get("COUNTERSIGN_REDIS_URL", ""),
            help="the sidecars' Redis [env COUNTERSIGN_REDIS_URL]",
        )
        p.add_argument(
            "--keys-file",
            default=os.environ.get("COUNTERSIGN_KEYS_FILE", ""),
            help="the sidecars' HMAC keys [env COUNTERSIGN_KEYS_FILE]",
        )
        if p is not exporting:
            p.add_argument("--json", action="store_true", help="machine-readable output")
    registry = sub.add_parser("registry", help="check registry files (for CI, before a deploy)")
    registry_sub = registry.add_subparsers(dest="verb", required=True)
    checking = registry_sub.add_parser(
        "check",
        help="the rules a sidecar applies at start; exit 1 naming the first broken rule",
        description=(
            "Check each FILE with the rules the sidecar applies at start. A FILE is a registry, or Kubernetes "
            "manifests (helm template ... | countersign registry check -) whose ConfigMaps with registry.yaml are "
            "checked. Exit 0: all pass; 1: a rule fails (<file>: tool '<name>': <rule>: <detail>); 2: a FILE holds "
            "no registry."
        ),
    )
    checking.add_argument("files", nargs="+", metavar="FILE", help="a registry or manifests file; - for stdin")
    checking.add_argument(
        "--approvals",
        default=os.environ.get("COUNTERSIGN_APPROVALS", ""),
        metavar="FILE",
        help="the sidecars' approvals settings: with an issuer, approval defaults to signed for confirmation: "
        "always and high risk, and approval: signed is allowed [env COUNTERSIGN_APPROVALS]",
    )
    keys = sub.add_parser("keys", help="make the HMAC keys file the sidecars and the operator CLI share")
    keys_sub = keys.add_subparsers(dest="verb", required=True)
    generating = keys_sub.add_parser("generate", help='a new keys file {"active": kid, "keys": {kid: hex}}')
    generating.add_argument("--kid", default="", help="the key id (default k<UTC timestamp>)")
    generating.add_argument(
        "--from",
        dest="previous",
        default="",
        metavar="FILE",
        help="keep this file's keys and id key, and make the new one active (a rotation)",
    )
    generating.add_argument(
        "--out", default="-", help="a new file (written 0600, never overwritten), or - for standard output"
    )
    demo = sub.add_parser(
        "demo", help="the walkthrough: embedded Redis, the example todo and approval services, a scripted agent"
    )
    demo.add_argument("--verbose", action="store_true", help="also show the sidecar's and service's logs")
    args = parser.parse_args(argv)

    if args.command in ("serve", "mcp-stdio"):
        # the server's collector thresholds from here on, not only once it listens (app.tune_gc): its ~700 modules
        # then load with ~9 collections instead of ~140 walking ever more objects (-30 to -50 ms of CPU at start,
        # the same memory; notes/lean-start2.md)
        gc.set_threshold(*settings_mod.GC_THRESHOLDS)
        try:
            settings = settings_mod.from_args(args)
        except SettingsError as exc:
            print(f"countersign: {exc}", file=sys.stderr)
            return 2
        from countersign.sidecar import arenas

        arenas.cap(settings.malloc_arena_max)  # before gRPC, the probes server or a guard build start a thread
        _logging(settings.log_level)
        from countersign.sidecar import app

        try:
            asyncio.run(app.serve(settings) if args.command == "serve" else _serve_stdio(settings))
        except (SettingsError, RegistryError) as exc:
            print(f"countersign: {exc}", file=sys.stderr)
            return 2
        return 0

    try:
        if args.command in ("actions", "audit"):
            return asyncio.run(_operate(args))
        if args.command == "registry":
            from countersign.sidecar import registry_check

            return registry_check.check(args.files, approvals=args.approvals)
        if args.command == "keys":
            return _keys(args)
    except BrokenPipeError:  # `countersign actions show A | head`, `keys generate | head`: the reader has enough
        # Python's own recipe: point stdout at /dev/null so the flush at exit does not fail a second time
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell tool stopped by a closed pipe reports

    root = Path.cwd()
    if not (root / "examples" / "walkthrough.py").exists():
        print(
            "countersign demo runs from a source checkout (it needs examples/); cd to the repository", file=sys.stderr
        )
        return 2
    import runpy

    walkthrough = runpy.run_path(str(root / "examples" / "walkthrough.py"), run_name="countersign_demo")
    return int(walkthrough["main"](verbose=args.verbose))


async def _serve_stdio(settings: settings_mod.Settings) -> None:
    """The MCP front door on stdin/stdout until the host closes it (stdout carries only MCP messages)."""
    from countersign.sidecar import app
    from countersign.sidecar.mcp_front import StdioIdentity

    sidecar = await app.start(settings)
    assert sidecar.doors is not None
    sidecar.doors.front.identity = StdioIdentity.from_env(os.environ)
    app.tune_gc()
    try:
        await sidecar.doors.front.run_stdio()
    finally:
        await sidecar.stop()


def _keys(args: argparse.Namespace) -> int:
    from countersign.sidecar import keyfile

    try:
        doc = keyfile.generate(args.kid, args.previous)
        if args.out == "-":
            print(json.dumps(doc, indent=2))
        else:
            keyfile.write(doc, args.out)
            print(
                f"wrote {args.out}: active key {doc['active']!r}; share it with every sidecar (a Secret) and "
                "the operator CLI (--keys-file)",
                file=sys.stderr,
            )
    except SettingsError as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    return 0


async def _operate(args: argparse.Namespace) -> int:
    from countersign.keyring import Keyring
    from countersign.recovery import operator
    from countersign.store.redis_store import RedisStore

    if not args.redis_url or not args.keys_file:
        print(
            "countersign: --redis-url and --keys-file (or COUNTERSIGN_REDIS_URL / COUNTERSIGN_KEYS_FILE) are required",
            file=sys.stderr,
        )
        return 2
    try:
        grace = settings_mod.duration(args.event_grace) if hasattr(args, "event_grace") else 0.0
        keyring = Keyring.from_file(args.keys_file)
        store = RedisStore.from_url(args.redis_url, socket_timeout=5, connect_timeout=2, retries=1)
    except (SettingsError, ValueError) as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "audit" and args.verb == "verify":
            return await operator.verify(store, keyring, grace=grace)
        if args.command == "audit":
            if args.out == "-":
                return await operator.export(store, sys.stdout)
            with open(args.out, "w", encoding="utf-8") as fh:  # noqa: ASYNC230 - a CLI, nothing else runs
                return await operator.export(store, fh)
        if args.verb == "list":
            return await operator.list_actions(store, keyring, args.state, args.json)
        if args.verb == "show":
            return await operator.show(store, keyring, args.action_id, args.json, grace=grace)
        return await _resolve(args, store, keyring)
    except CountersignError as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()


async def _resolve(args: argparse.Namespace, store: Any, keyring: Any) -> int:
    from countersign import registry as registry_mod
    from countersign.adapters.base import Adapter
    from countersign.adapters.grpc import GrpcAdapter
    from countersign.adapters.http import HttpAdapter
    from countersign.recovery import operator

    try:
        window = settings_mod.duration(args.reconcile_window)
        deadline = settings_mod.duration(args.downstream_deadline)
        registry = registry_mod.load(args.registry) if args.registry else None
    except (ValueError, RegistryError) as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    adapters: dict[str, Adapter] = {"http": HttpAdapter(), "grpc": GrpcAdapter()}
    if registry is not None and any(tool.adapter.kind == "mcp" for tool in registry.tools.values()):
        from countersign.adapters.mcp import McpAdapter  # the SDK is slow to import: only when named

        adapters["mcp"] = McpAdapter()
    try:
        return await operator.resolve(
            store,
            keyring,
            args.action_id,
            args.outcome,
            args.reason,
            args.operator,
            args.resource_id,
            force=args.force,
            reconcile_window_ms=int(window * 1000),
            downstream=operator.Downstream(registry, adapters, deadline),
            replay_ttl_ms=int(args.replay_ttl * 1000),
        )
    finally:
        for adapter in adapters.values():
            await adapter.close()


if __name__ == "__main__":
    sys.exit(main())
