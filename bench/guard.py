"""Reply guard benchmark: ReplyGuard.check on a 2 KB reply (DESIGN §9; target < 0.2 ms of CPU per call).

    /work/main/.venv/bin/python bench/guard.py [--calls N] [--warmup N]

The reply is mixed Chinese/English read-only text (a todo listing whose every sentence holds a word such as
完成, completed, set or saved, so the prefilter wakes claim regexes all over it: a hard case) and one success
claim near the end. Each scenario runs ``--calls`` calls (the 16 KB one a tenth) after ``--warmup`` calls,
interleaved with the others in ``--rounds`` rounds, and prints p50/p99 wall time per call (perf_counter_ns
around each call) and the CPU time per call (time.process_time over its loops / calls). Pure CPU: no I/O, no
threads. The first line prints a yardstick (a 10k-iteration Python loop) to compare machines.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from countersign.sidecar.reply_guard import Evidence, ReplyGuard, verbs_of  # noqa: E402

READ_ONLY = [
    "你有 3 条待办：",
    "1. 买牛奶（明天到期，已经逾期提醒过一次）；",
    "2. 准备周会材料，优先级高，截止时间是周五下午三点；",
    "3. 给房东打电话确认维修时间。",
    "You have 3 open todos and 12 completed ones this month.",
    "The oldest open item was set on March 3 and is tagged 'home'.",
    "上周你一共完成了 5 条待办，其中 2 条是工作相关的，其余是家里的事情。",
    "Your notes folder holds 41 notes; the last one was saved yesterday at 21:40 and is titled 'Trip ideas'.",
    "最近的笔记是《旅行计划》，内容包括机票、酒店和签证材料清单。",
    "If you want, I can sort the list by due date or by priority.",
    "提醒：周五之前还有两条高优先级的待办没有完成。",
]
CLAIM = "好的，已经帮你创建好了「周报」待办，截止时间是本周五。"
TARGET_CHARS = 2048


def build_reply(claim: str = CLAIM) -> str:
    """About 2 KB of read-only text followed by ``claim`` and one closing read-only sentence."""
    body: list[str] = []
    i = 0
    closing = "Anything else?"
    while sum(len(s) + 1 for s in body) + len(claim) + len(closing) + 2 < TARGET_CHARS:
        body.append(READ_ONLY[i % len(READ_ONLY)])
        i += 1
    text = "\n".join([*body, claim, closing])
    return text + " " * max(0, TARGET_CHARS - len(text))


@dataclass
class Scenario:
    name: str
    reply: str
    evidence: list[Evidence]
    calls: int
    samples: list[int] = field(default_factory=list)
    cpu: float = 0.0


def run(guard: ReplyGuard, scenarios: list[Scenario], warmup: int, rounds: int) -> None:
    """Interleave the scenarios in ``rounds`` rounds, so that a noisy neighbour slows them all alike."""
    for sc in scenarios:
        for _ in range(warmup):
            guard.check(sc.reply, "zh-CN", sc.evidence)
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for sc in scenarios:
            n = sc.calls // rounds
            buf = [0] * n
            cpu0 = time.process_time()
            for k in range(n):
                t0 = clock()
                guard.check(sc.reply, "zh-CN", sc.evidence)
                buf[k] = clock() - t0
            sc.cpu += time.process_time() - cpu0
            sc.samples.extend(buf)
    for sc in scenarios:
        samples = sorted(sc.samples)
        calls = len(samples)
        verdict = guard.check(sc.reply, "zh-CN", sc.evidence)
        p50 = samples[calls // 2] / 1000
        p99 = samples[min(calls - 1, int(calls * 0.99))] / 1000
        mean = statistics.fmean(samples) / 1000
        print(f"{sc.name:<28} {len(sc.reply):>5} chars {len(sc.reply.encode()):>5} B  {calls:>6} calls  "
              f"p50 {p50:7.1f} us  p99 {p99:7.1f} us  mean {mean:7.1f} us  cpu/call {sc.cpu / calls * 1e6:7.1f} us"
              f"  -> {verdict.reason}{' (replaced)' if verdict.replaced else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    # a yardstick for the machine: CPU time of a 10k-iteration pure-Python loop (best of 20)
    yardstick = []
    for _ in range(20):
        c0 = time.process_time()
        total = 0
        for i in range(10_000):
            total += i
        yardstick.append(time.process_time() - c0)
    print(f"yardstick: a 10k-iteration Python loop takes {min(yardstick) * 1e6:.0f} us of CPU here")

    t0 = time.perf_counter()
    guard = ReplyGuard.load()
    load_ms = (time.perf_counter() - t0) * 1000
    print(f"python {platform.python_version()} on {platform.machine()}; lexicons {', '.join(guard.lexicons)}, "
          f"{guard.pattern_count} claim regexes, loaded in {load_ms:.0f} ms; {args.calls} calls after "
          f"{args.warmup} warm-up calls")
    created = Evidence("act_1", "create_todo", True, verbs_of("create_todo"))
    reply = build_reply()
    scenarios = [
        Scenario("claim, succeeded receipt", reply, [created], args.calls),
        Scenario("claim, no receipt", reply, [], args.calls),
        Scenario("read-only, no claim", build_reply("Let me know if you need anything."), [], args.calls),
        Scenario("16 KB mixed, claim at end", (reply * 8)[-16 * 1024:], [created], args.calls // 10),
    ]
    run(guard, scenarios, args.warmup, args.rounds)


if __name__ == "__main__":
    main()
