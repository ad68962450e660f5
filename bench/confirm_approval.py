"""Confirm with the user's approval vs without, side by side in one run (issue 13: the cost of the countersignature).

    .venv/bin/python bench/confirm_approval.py [--seconds N] [--rounds R] [--warmup S] [--quick]

Two sidecars on one redis-server and one example todo service, both started with the same ``--approvals``
(a test issuer, Ed25519, its JWKS in a file): ``plain`` serves create_todo with ``approval: none``,
``approved`` the same tool with ``approval: signed``. The same closed-loop client confirms cards Invoked before
the timed window: ``plain`` with the token alone, ``approved`` with the token and the user's approval (signed
before the window, so the client's signing is not in it). The two series are interleaved slice by slice at
concurrency 1 and 16. Per series: calls/s, p50/p99 and the sidecar's CPU per Confirm (from /proc), whose
difference is what verifying an approval costs (the JWS check before Redis, and claim.lua's digest and step-up
comparison). On a busy machine that end-to-end difference is noisy (a Confirm's CPU varies by more than the
approval costs), so the same run also times, in this process, the step Confirm adds before Redis
(``path.approval.Approvals.check``: the JWS verified against the same settings file) and sets it against the plain
Confirm's CPU. Writes ``bench/results/confirm_approval-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import yaml

from countersign.approvals import Verifier
from countersign.path.approval import Approvals
from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERIES = ("plain", "approved")
CONCURRENCY = (1, 16)
TARGET_PCT = 10.0  # issue 13: verifying an approval under 10 % of a Confirm's CPU


@dataclass
class Cell:
    calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0  # the sidecar's CPU over the timed windows
    latencies_ns: list[int] = field(default_factory=list)
    first_error: str = ""

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies_ns)
        return lat[max(0, math.ceil(q * len(lat)) - 1)] / 1e6 if lat else math.nan

    @property
    def cpu_us_per_call(self) -> float:
        return 1e6 * self.cpu_s / self.calls if self.calls else math.nan

    def summary(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "errors": self.errors,
            "throughput_per_s": round(self.calls / self.seconds, 1) if self.seconds else 0.0,
            "p50_ms": round(self.pct(0.5), 3),
            "p99_ms": round(self.pct(0.99), 3),
            "sidecar_cpu_us_per_call": round(self.cpu_us_per_call, 1),
            "first_error": self.first_error,
        }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Side:
    """One sidecar and the READY cards the client prepared for it: (token, approval or "")."""

    def __init__(self, name: str, address: str, pid: int, issuer: CardIssuer | None) -> None:
        self.name, self.pid, self.issuer = name, pid, issuer
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = gateway_pb2_grpc.ToolGatewayServiceStub(self.channel)
        self.cards: deque[tuple[str, str]] = deque()
        self.session = "bench-" + uuid.uuid4().hex[:8]

    def context(self) -> common_pb2.CallContext:
        return common_pb2.CallContext(
            tenant_id="t1",
            actor_id="alice",
            subject_id="alice",
            session_id=self.session,
            request_id=uuid.uuid4().hex,
            role="user",
            locale="en",
        )

    async def top_up(self, want: int) -> None:
        """Untimed: Invoke (and, for the approved side, sign the user's approval) until ``want`` cards are ready."""

        async def worker() -> None:
            while len(self.cards) < want:
                reply = await self.stub.Invoke(
                    gateway_pb2.InvokeRequest(
                        context=self.context(),
                        tool_name="create_todo",
                        arguments_json=json.dumps({"title": "bench " + uuid.uuid4().hex}),
                    )
                )
                card = reply.confirmation
                ctx = self.context()
                approval = self.issuer.approve(card, ctx, ttl=240) if self.issuer else ""
                self.cards.append((card.token, approval))

        await asyncio.gather(*(worker() for _ in range(16)))

    async def confirm(self) -> None:
        token, approval = self.cards.popleft()
        reply = await self.stub.Confirm(
            gateway_pb2.ConfirmRequest(context=self.context(), token=token, approval=approval)
        )
        action = reply.action
        if action.state != common_pb2.ACTION_STATE_SUCCEEDED or action.replayed:
            raise RuntimeError(f"Confirm answered {common_pb2.ActionState.Name(action.state)} {action.error.reason}")
        if self.issuer is not None and not action.receipt.approval.jti:
            raise RuntimeError("the approved Confirm's receipt names no approval")


async def window(side: Side, concurrency: int, seconds: float, cell: Cell | None) -> None:
    """Closed loop: ``concurrency`` workers confirming back to back until the deadline (or the cards run out)."""
    lat: list[int] = []
    errors, first = 0, ""
    start = time.perf_counter()
    deadline = start + seconds
    cpu0 = cpu_seconds(side.pid)

    async def worker() -> None:
        nonlocal errors, first
        while time.perf_counter() < deadline and side.cards:
            t0 = time.perf_counter_ns()
            try:
                await side.confirm()
            except Exception as exc:  # counted, the first one reported
                errors += 1
                first = first or f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            lat.append(time.perf_counter_ns() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if cell is not None:
        cell.cpu_s += cpu_seconds(side.pid) - cpu0
        cell.seconds += time.perf_counter() - start
        cell.calls += len(lat)
        cell.errors += errors
        cell.latencies_ns.extend(lat)
        cell.first_error = cell.first_error or first


async def run(args: argparse.Namespace, sides: dict[str, Side]) -> dict[tuple[str, int], Cell]:
    cells = {(s, c): Cell() for s in SERIES for c in CONCURRENCY}
    slice_s = args.seconds / args.rounds
    rate = {s: 400.0 for s in SERIES}  # Confirms per second, re-measured in each warm-up
    for rnd in range(args.rounds):
        for c in CONCURRENCY:
            for name in SERIES:
                side = sides[name]
                await side.top_up(int(rate[name] * (args.warmup + slice_s) * 1.5) + 8 * c + 32)
                before, t0 = len(side.cards), time.perf_counter()
                await window(side, c, args.warmup, None)
                rate[name] = max(50.0, (before - len(side.cards)) / (time.perf_counter() - t0))
                await side.top_up(int(rate[name] * slice_s * 1.5) + 8 * c + 32)
                await window(side, c, slice_s, cells[(name, c)])
                done = cells[(name, c)]
                print(
                    f"  round {rnd + 1}/{args.rounds} c={c:<2} {name:<8} {done.calls / done.seconds:8.1f}/s "
                    f"sidecar {done.cpu_us_per_call:7.1f} us CPU/call (errors {done.errors})",
                    flush=True,
                )
    return cells


def compare(cells: dict[tuple[str, int], Cell]) -> list[dict[str, Any]]:
    out = []
    for c in CONCURRENCY:
        plain, approved = cells[("plain", c)], cells[("approved", c)]
        added = approved.cpu_us_per_call - plain.cpu_us_per_call
        out.append(
            {
                "concurrency": c,
                "cpu_us_per_call_plain": round(plain.cpu_us_per_call, 1),
                "cpu_us_per_call_approved": round(approved.cpu_us_per_call, 1),
                "cpu_ratio_approved_over_plain": round(approved.cpu_us_per_call / plain.cpu_us_per_call, 3),
                "added_cpu_us_per_confirm": round(added, 1),
                "added_pct_of_plain_confirm": round(100 * added / plain.cpu_us_per_call, 1),
                "p50_ratio": round(approved.pct(0.5) / plain.pct(0.5), 3),
                "throughput_ratio": round((approved.calls / approved.seconds) / (plain.calls / plain.seconds), 3),
            }
        )
    return out


async def check_cost(issuer: CardIssuer, calls: int) -> dict[str, float]:
    """CPU per call of Approvals.check, the step Confirm adds before Redis, on fresh approvals (one per call)."""
    verifier = await Verifier.load(issuer.settings)
    try:
        approvals = Approvals(verifier)
        ctx = common_pb2.CallContext(tenant_id="t1", actor_id="alice", subject_id="alice", session_id="s1")
        cards = [
            argparse.Namespace(action_id=uuid.uuid4().hex, approval_digest="sha256:" + "A" * 43) for _ in range(calls)
        ]
        tokens = [issuer.approve(card, ctx) for card in cards]
        for card, token in zip(cards[:50], tokens[:50], strict=True):  # warm-up
            await approvals.check(",", ctx, card.action_id, token)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for card, token in zip(cards, tokens, strict=True):
            checked = await approvals.check(",", ctx, card.action_id, token)
            if checked.evidence is None:
                raise RuntimeError(f"the approval was refused: {checked.refused}")
        return {
            "calls": calls,
            "cpu_us_per_call": round(1e6 * (time.process_time() - cpu0) / calls, 1),
            "wall_us_per_call": round(1e6 * (time.perf_counter() - wall0) / calls, 1),
        }
    finally:
        await verifier.close()


def registry_with(base: Path, approval: str, out: Path) -> Path:
    doc = yaml.safe_load(base.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = approval
    out.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per cell (default 6; --quick 2)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved slices per cell (default 3; quick 1)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds before each slice (default 0.5)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (2.0 if args.quick else 6.0)
    args.rounds = max(1, args.rounds if args.rounds is not None else (1 if args.quick else 3))
    args.warmup = args.warmup if args.warmup is not None else 0.5

    started = datetime.now(UTC)
    load_start = list(os.getloadavg())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    print(f"confirm_approval: {args.seconds:g} s per cell in {args.rounds} slice(s); loadavg {load_start}", flush=True)
    work = processes.workdir("countersign-bench-approval-")
    procs: list[processes.Proc] = []
    try:
        redis, todo, registry, keys = processes.start_backends(work)
        procs += [redis, todo]
        issuer = start_issuer(work)
        flags = ["--log-level", "warning", "--approvals", str(issuer.settings)]
        started_sides = {}
        for name, approval in (("plain", "none"), ("approved", "signed")):
            reg = registry_with(registry, approval, work / f"{name}.yaml")
            proc = processes.start_sidecar(work, reg, redis_url=redis.info["url"], keys=keys, flags=flags)
            procs.append(proc)
            started_sides[name] = proc

        async def go() -> dict[tuple[str, int], Cell]:
            sides = {
                "plain": Side("plain", started_sides["plain"].info["grpc"], started_sides["plain"].pid, None),
                "approved": Side(
                    "approved", started_sides["approved"].info["grpc"], started_sides["approved"].pid, issuer
                ),
            }
            try:
                return await run(args, sides)
            finally:
                for side in sides.values():
                    await side.channel.close(None)

        cells = asyncio.run(go())
        check = asyncio.run(check_cost(issuer, 3000))
    finally:
        for proc in reversed(procs):
            proc.stop()

    load_end = list(os.getloadavg())
    rows = compare(cells)
    print()
    print(
        f"{'series':<9} {'c':>3} {'calls':>7} {'err':>4} {'calls/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU us/call':>12}"
    )
    for c in CONCURRENCY:
        for name in SERIES:
            s = cells[(name, c)].summary()
            print(
                f"{name:<9} {c:>3} {s['calls']:>7} {s['errors']:>4} {s['throughput_per_s']:>8} {s['p50_ms']:>7} "
                f"{s['p99_ms']:>7} {s['sidecar_cpu_us_per_call']:>12}"
            )
    print()
    for r in rows:
        ok = r["added_pct_of_plain_confirm"] < TARGET_PCT
        print(
            f"c={r['concurrency']:<2} approved/plain sidecar CPU per Confirm {r['cpu_ratio_approved_over_plain']:.3f} "
            f"(+{r['added_cpu_us_per_confirm']} us, +{r['added_pct_of_plain_confirm']} %; target < {TARGET_PCT:g} %: "
            f"{'OK' if ok else 'MISSED'}); p50 ratio {r['p50_ratio']:.3f}; throughput ratio {r['throughput_ratio']:.3f}"
        )
    plain_cpu = min(cells[("plain", c)].cpu_us_per_call for c in CONCURRENCY)
    check_pct = round(100 * check["cpu_us_per_call"] / plain_cpu, 1)
    print(
        f"\nApprovals.check (before Redis), in-process: {check['cpu_us_per_call']} us CPU per call, "
        f"{check_pct} % of the plain Confirm's sidecar CPU ({plain_cpu:.1f} us, the lower of c=1 and c=16); "
        f"target < {TARGET_PCT:g} %: {'OK' if check_pct < TARGET_PCT else 'MISSED'}"
    )
    print(f"loadavg at start {load_start}, at end {load_end}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"confirm_approval-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(
        json.dumps(
            {
                "started_utc": started.isoformat(),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "head": head.strip(),
                "settings": {"seconds": args.seconds, "rounds": args.rounds, "warmup": args.warmup},
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "loadavg_start": load_start,
                    "loadavg_end": load_end,
                },
                "cells": {f"{name}:{c}": cells[(name, c)].summary() for name in SERIES for c in CONCURRENCY},
                "compare": rows,
                "approvals_check": {**check, "pct_of_plain_confirm_cpu": check_pct},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
