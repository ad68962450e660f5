"""Approval verification benchmark: Verifier.verify_approval per call, Ed25519 / ES256 / RS256 (issue 13).

    .venv/bin/python bench/approval_verify.py [--calls N] [--warmup N] [--rounds R]

What a Confirm of a ``signed`` tool pays on top of today's Confirm: the approval digest of the card
(``approval_digest``) and the verification of the approval JWS against an issuer whose keys are cached
(a JWKS file: one stat per call). Each series also shows the bare signature check (PyJWT's algorithm
``verify`` on the same bytes) so the part that is ours can be told from the cryptography. Series are
interleaved in ``--rounds`` rounds so a noisy neighbour slows them all alike; p50/p99 wall time per call
(perf_counter_ns) and CPU per call (process_time). Pure CPU: no I/O but the stat, no threads.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jwt import PyJWK

from countersign.approvals import Expected, Verifier, approval_digest
from countersign.testing.approvals import (
    SigningKey,
    approval_claims,
    sign,
    write_jwks,
    write_settings,
)

ROOT = Path(__file__).resolve().parent.parent

ISS = "https://app.example"
ACTION = "0123456789abcdef0123456789abcdef"
ARGS = {"title": "Buy milk", "dueAt": "2026-12-02T18:00:00+08:00", "priority": 1}
PREVIEW = {
    "title": "创建待办",
    "target": "Buy milk",
    "impact": "确认后将创建一条截止于 2026-12-02T18:00:00+08:00 的待办。",
    "details": [{"label": "Priority", "value": "1"}],
}


@dataclass
class Series:
    name: str
    call: Callable[[], object]
    calls: int
    samples: list[int] = field(default_factory=list)
    cpu: float = 0.0

    def report(self) -> dict[str, Any]:
        samples = sorted(self.samples)
        n = len(samples)
        return {
            "series": self.name,
            "calls": n,
            "p50_us": samples[n // 2] / 1000,
            "p99_us": samples[min(n - 1, int(n * 0.99))] / 1000,
            "mean_us": statistics.fmean(samples) / 1000,
            "cpu_per_call_us": self.cpu / n * 1e6,
        }


def run(series: list[Series], warmup: int, rounds: int) -> None:
    for s in series:
        for _ in range(warmup):
            s.call()
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for s in series:
            n = s.calls // rounds
            buf = [0] * n
            call = s.call
            cpu0 = time.process_time()
            for k in range(n):
                t0 = clock()
                call()
                buf[k] = clock() - t0
            s.cpu += time.process_time() - cpu0
            s.samples.extend(buf)


def verifying(verifier: Verifier, token: str, expect: Expected) -> Callable[[], object]:
    return lambda: verifier.verify_approval(token, expect=expect)


def signature_only(jwk: PyJWK, token: str) -> Callable[[], object]:
    """PyJWT's algorithm verify on the token's bytes: the cryptography's share of a verification."""
    signing_input, _, signature = token.rpartition(".")
    message, raw = signing_input.encode(), base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    algorithm, key = jwk.Algorithm, jwk.Algorithm.prepare_key(jwk.key)
    return lambda: algorithm.verify(message, key, raw)


def yardstick() -> float:
    best = []
    for _ in range(20):
        c0 = time.process_time()
        total = 0
        for i in range(10_000):
            total += i
        best.append(time.process_time() - c0)
    return min(best) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    print(f"yardstick: a 10k-iteration Python loop takes {yardstick():.0f} us of CPU here")
    print(f"python {platform.python_version()} on {platform.machine()}; {args.calls} calls per series")

    work = Path(tempfile.mkdtemp(prefix="approval-bench-"))
    keys = {alg: SigningKey.generate(alg, kid=f"{alg.lower()}-1") for alg in ("EdDSA", "ES256", "RS256")}
    write_jwks(work / "app.jwks.json", *keys.values())
    settings = write_settings(
        work / "approvals.json", [{"issuer": ISS, "audience": "countersign", "jwks": "app.jwks.json"}]
    )
    verifier = asyncio.run(Verifier.load(settings))

    now = time.time()
    expires_ms = int(now * 1000) + 300_000
    digest = approval_digest("create_todo", ARGS, PREVIEW, "2026-11-29.1", expires_ms)
    expect = Expected(actor_id="alice", tenant_id="t1", session_id="s1", action_id=ACTION, digest=digest, now=now)
    series = [
        Series(
            "approval_digest (card)",
            lambda: approval_digest("create_todo", ARGS, PREVIEW, "2026-11-29.1", expires_ms),
            args.calls,
        )
    ]
    for alg, key in keys.items():
        claims = approval_claims(
            issuer=ISS,
            actor_id="alice",
            tenant_id="t1",
            session_id="s1",
            action_id=ACTION,
            digest=digest,
            now=now,
            ttl=290,
        )
        token = sign(claims, key)
        verifier.verify_approval(token, expect=expect)  # it must verify, or the figure means nothing
        issuer = verifier.issuers.get(ISS)
        assert issuer is not None
        jwk = issuer.keys.current().find(key.kid, alg)
        assert not isinstance(jwk, str)
        series.append(Series(f"verify_approval {alg}", verifying(verifier, token, expect), args.calls))
        series.append(Series(f"  signature only {alg}", signature_only(jwk, token), args.calls))
    run(series, args.warmup, args.rounds)
    asyncio.run(verifier.close())

    rows = [s.report() for s in series]
    for r in rows:
        print(
            f"{r['series']:<28} {r['calls']:>6} calls  p50 {r['p50_us']:8.1f} us  p99 {r['p99_us']:8.1f} us  "
            f"mean {r['mean_us']:8.1f} us  cpu/call {r['cpu_per_call_us']:8.1f} us"
        )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = ROOT / "bench" / "results" / f"approval_verify-{stamp}.json"
    out.write_text(
        json.dumps({"head": head, "args": vars(args), "python": platform.python_version(), "rows": rows}, indent=2)
    )
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
