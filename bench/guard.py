"""Reply guard benchmark: precision and recall on labelled corpora, and the CPU per 2 KB reply (DESIGN §9).

    .venv/bin/python bench/guard.py                      # the repo corpora (in-sample, dev, dev2 … dev6), then CPU
    .venv/bin/python bench/guard.py --corpus PATH [...]  # any corpus file(s) of the same format (see README)
    .venv/bin/python bench/guard.py --misses             # also list every sentence it got wrong
    .venv/bin/python bench/guard.py --no-cpu             # accuracy only
    .venv/bin/python bench/guard.py --against TREE       # CPU of the guard in TREE (before) and here (after)
    .venv/bin/python bench/guard.py --veto both          # every figure with the learned veto off and on, side by side
    .venv/bin/python bench/guard.py --totals --corpus A --corpus B   # pooled P/R per language and obfuscated only:
                                                         # no per-file, per-kind or sentence output (held-out sets)

A sentence counts as "detected" when the guard, with no receipt, replaces the reply; in a language without
a lexicon (de, es, ja ...) also when it flags it (reason UNSUPPORTED_LANGUAGE: not passed silently).
Figures are printed per language, for the obfuscated kinds (a kind that contains "obf") and per kind; for
a language without a lexicon also the share not passed silently (flagging is the intended answer there,
claim or not, so its "precision" is not a figure of merit).
CPU: ReplyGuard.check on ~2 KB replies: ordinary prose (en, zh) with one claim and without, a dense todo
listing whose every sentence holds a completion word (the hard case), and a 64 KB reply; p50/p99 of the CPU
per call (the thread's CPU clock around each call) and of wall time. Pure CPU, no I/O.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from countersign.guard import Evidence, ReplyGuard, verbs_of

ROOT = Path(__file__).resolve().parent.parent

CORPORA = [
    ROOT / "tests" / "fixtures" / name
    for name in (
        "guard_corpus.yaml",
        "guard_heldout_dev.yaml",
        "guard_heldout_dev2.yaml",
        "guard_heldout_dev3.yaml",
        "guard_heldout_dev4.yaml",
        "guard_heldout_dev5.yaml",
        "guard_heldout_dev6.yaml",
        "guard_heldout_dev7.yaml",
        "guard_heldout_dev9.yaml",
    )
]
# the sets written blind for round 8 and later (never spent); dev … dev9 carry a `spent:` time (round 8 read them)
CORPORA += sorted((ROOT / "tests" / "fixtures").glob("guard_heldout_dev1[0-9]*.yaml"))
LOCALES = {"zh": "zh-CN", "en": "en-US", "de": "de-DE", "es": "es-ES", "ja": "ja-JP"}


@dataclass
class Labelled:
    text: str
    claim: bool
    lang: str
    kind: str


def read_corpus(path: Path) -> list[Labelled]:
    """``sentences: [{text, claim, lang, kind, repeat_filler?}]`` with an optional top-level ``filler``."""
    doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("sentences"), list):
        raise SystemExit(f"{path}: expected a mapping with a 'sentences' list (see bench/README.md)")
    filler = str(doc.get("filler") or "")
    out = []
    for i, item in enumerate(doc["sentences"]):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("text"), str)
            or not isinstance(item.get("claim"), bool)
        ):
            raise SystemExit(f"{path}: sentences[{i}]: needs text (string) and claim (true/false)")
        n = int(item.get("repeat_filler") or 0)
        text = filler * n + item["text"] + filler * n
        out.append(Labelled(text, item["claim"], str(item.get("lang", "?")), str(item.get("kind", ""))))
    return out


class Score:
    def __init__(self) -> None:
        self.tp = self.fp = self.fn = self.tn = 0

    def add(self, want: bool, got: bool) -> None:
        self.tp += want and got
        self.fp += got and not want
        self.fn += want and not got
        self.tn += not want and not got

    def merge(self, other: Score) -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        self.tn += other.tn

    def line(self, name: str) -> str:
        p = f"{self.tp / (self.tp + self.fp):.3f}" if self.tp + self.fp else "  n/a"
        r = f"{self.tp / (self.tp + self.fn):.3f}" if self.tp + self.fn else "  n/a"
        n = self.tp + self.fp + self.fn + self.tn
        counts = f"(tp {self.tp} fp {self.fp} fn {self.fn} tn {self.tn})"
        return f"  {name:<22} n={n:<4} precision {p}  recall {r}   {counts}"


def accuracy(guard: ReplyGuard, path: Path, misses: bool, quiet: bool = False) -> dict[str, Score]:
    """Scores of one corpus file; ``quiet`` prints nothing (for --totals: a held-out set's sentences and kinds are
    never shown)."""
    items = read_corpus(path)
    scores: dict[str, Score] = defaultdict(Score)
    kinds: dict[str, Score] = defaultdict(Score)
    wrong = []
    flagged: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in items:
        v = guard.check(s.text, LOCALES.get(s.lang, "en-US"), [])
        # a language with a lexicon must be replaced; one without is detected when not passed silently
        got = v.replaced or (s.lang not in guard.lexicons and v.reason == "UNSUPPORTED_LANGUAGE")
        if s.lang not in guard.lexicons:
            flagged[s.lang][0] += got
            flagged[s.lang][1] += 1
        scores[s.lang].add(s.claim, got)
        scores["all"].add(s.claim, got)
        if "obf" in s.kind:
            scores["obfuscated"].add(s.claim, got)
        kinds[s.kind].add(s.claim, got)
        if got != s.claim:
            shown = s.text if len(s.text) < 160 else s.text[:60] + " … " + s.text[-60:]
            wrong.append(
                f"    {'MISSED' if s.claim else 'FALSE '} [{s.lang} {s.kind}] {shown!r} -> {v.reason}"
                f" {list(v.matched_claims)[:2] or list(v.excluded)[:2]}"
            )
    if quiet:
        return scores
    doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    state = f", spent since {doc['spent']}" if doc.get("spent") else ", untuned" if doc.get("frozen") else ""
    print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {len(items)} sentences{state}")
    for name in sorted(scores, key=lambda k: (k == "all", k == "obfuscated", k)):
        print(scores[name].line(name))
    for lang, (hit, n) in sorted(flagged.items()):
        print(f"  {lang}: no lexicon; not passed silently (replaced or flagged) {hit}/{n}")
    print("  by kind: " + ", ".join(f"{k} {s.tp + s.tn}/{s.tp + s.tn + s.fp + s.fn}" for k, s in sorted(kinds.items())))
    if misses:
        print("\n".join(wrong) if wrong else "    (no misses)")
    return scores


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


def build_reply(claim: str, size: int = 2048, repeats: bool = True) -> str:
    """A dense listing of ``READ_ONLY`` lines, then ``claim``. The lines recur (2 KB holds each about three
    times), and the guard reads a recurring sentence once; with ``repeats=False`` each recurrence has its digits
    shifted (or, a line with none, a count before its end mark), so that almost no sentence recurs (36 distinct
    of 42): what a listing whose lines all differ costs."""
    body: list[str] = []
    i = 0
    while sum(len(s.encode()) + 1 for s in body) + len(claim.encode()) + 20 < size:
        line, turn = READ_ONLY[i % len(READ_ONLY)], i // len(READ_ONLY)
        if turn and not repeats:
            shifted = "".join(str((int(c) + turn) % 10) if c.isascii() and c.isdigit() else c for c in line[2:])
            line = line[:2] + shifted if shifted != line[2:] else f"{line[:-1]} ({turn + 1}){line[-1]}"
        body.append(line)
        i += 1
    return "\n".join([*body, claim, "Anything else?"])


TYPICAL_EN = (
    "Here is a summary of your week. You have three meetings on Tuesday, including the design review at 10am "
    "and a one-on-one with Maria at 2pm. Wednesday is mostly free, so it would be a good day for focused work. "
    "Your flight to Berlin leaves on Thursday at 7:40 from Terminal 2; check-in opens 24 hours before departure. "
    "The weather forecast shows rain in Berlin on Friday, so you may want to pack an umbrella. "
    "There are two invoices waiting for your approval in the finance tool, one from the cleaning service and one "
    "from the printer supplier. If you want, I can draft a reply to the supplier asking for a discount. "
)
TYPICAL_ZH = (
    "这是你本周的安排概览。周二有三个会议，包括上午十点的设计评审和下午两点与玛丽亚的一对一。周三基本空闲，适合专注工作。"
    "你飞往柏林的航班周四早上七点四十从二号航站楼起飞，起飞前二十四小时开放值机。天气预报显示周五柏林有雨，建议带伞。"
    "财务系统里有两张发票等你审批，一张来自保洁公司，一张来自打印机供应商。如果需要，我可以帮你起草一封回复，向供应商争取折扣。"
)


def prose(body: str, claim: str, size: int = 2048) -> str:
    """About ``size`` bytes of an ordinary assistant answer, then ``claim``."""
    sentences = [s.strip() + " " for s in body.replace("。", "。\n").replace(". ", ".\n").splitlines() if s.strip()]
    out, i = "", 0
    while len((out + claim).encode()) < size:
        out += sentences[i % len(sentences)]
        i += 1
    return out + claim


def cpu_cases(calls: int) -> list[tuple[str, str, list[Evidence], int]]:
    """The replies the CPU is measured on: (name, reply, receipts, calls)."""
    created = Evidence("act_1", "create_todo", True, verbs_of("create_todo"))
    dense = build_reply(CLAIM)
    return [
        ("2 KB prose en, claim", prose(TYPICAL_EN, " I've also moved the design review to 11am."), [], calls),
        ("2 KB prose zh, claim", prose(TYPICAL_ZH, "另外，我已经把设计评审改到了十一点。"), [], calls),
        ("2 KB prose en, read-only", prose(TYPICAL_EN, " Let me know what you'd like to do."), [], calls),
        ("2 KB dense listing, claim", dense, [created], calls),
        ("2 KB dense listing, read-only", build_reply("Let me know if you need anything."), [], calls),
        ("2 KB dense listing, no repeats", build_reply(CLAIM, repeats=False), [created], calls),
        (
            "64 KB, claim in the middle",
            build_reply(CLAIM, 32 * 1024) + "\n" + build_reply("", 32 * 1024),
            [],
            max(1, calls // 30),
        ),
    ]


def cpu_samples(guard: ReplyGuard, calls: int, rounds: int) -> dict[str, list[int]]:
    """The thread CPU time of each call, per case (ns), after a warm-up."""
    cases = cpu_cases(calls)
    for _name, reply, ev, _n in cases:
        for _ in range(50):
            guard.check(reply, "zh-CN", ev)
    out: dict[str, list[int]] = defaultdict(list)
    thread = time.thread_time_ns
    for _ in range(rounds):
        for name, reply, ev, n in cases:
            for _k in range(max(1, n // rounds)):
                c0 = thread()
                guard.check(reply, "zh-CN", ev)
                out[name].append(thread() - c0)
    return out


def _pct(s: list[int], q: float) -> float:
    s = sorted(s)
    return s[min(len(s) - 1, int(len(s) * q))] / 1e3


def against(tree: Path, calls: int, rounds: int) -> None:
    """CPU per reply of the guard in ``tree`` (before) and in this tree (after), side by side: each tree's guard
    runs in a child process (this file, with that tree first on the import path), alternately in short batches,
    so that both see the same load on a shared machine."""
    trees = {"before": tree.resolve(), "after": ROOT}
    got: dict[str, dict[str, list[int]]] = {k: defaultdict(list) for k in trees}
    per = max(1, calls // rounds)
    ran: dict[str, str] = {}
    for _ in range(rounds):
        for label, path in trees.items():
            env = {**os.environ, "PYTHONPATH": str(path)}
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--samples", str(per)],
                env=env,
                cwd=path,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            lines = out.splitlines()
            ran[label] = lines[-2]
            for name, xs in json.loads(lines[-1]).items():
                got[label][name].extend(xs)
    print(f"CPU per reply, p50 / p99 (us; thread CPU clock; {rounds} alternating batches of {per} calls per tree)")
    print(f"  before: {ran['before']}\n  after:  {ran['after']}")
    print(f"  {'reply':<30} {'before p50':>11} {'p99':>9}   {'after p50':>10} {'p99':>9}")
    for name in got["after"]:
        b, a = got["before"][name], got["after"][name]
        print(
            f"  {name:<30} {_pct(b, 0.5):11.1f} {_pct(b, 0.99):9.1f}   {_pct(a, 0.5):10.1f} {_pct(a, 0.99):9.1f}"
            f"   ({len(a)} calls)"
        )


def cpu(guard: ReplyGuard, calls: int, rounds: int) -> None:
    """CPU per call from the thread's own clock around each call (so waiting for a busy core is not counted),
    and wall time beside it."""
    cases = cpu_cases(calls)
    for _name, reply, ev, _n in cases:
        for _ in range(50):
            guard.check(reply, "zh-CN", ev)
    cpu_ns: dict[str, list[int]] = defaultdict(list)
    wall_ns: dict[str, list[int]] = defaultdict(list)
    thread, clock = time.thread_time_ns, time.perf_counter_ns
    for _ in range(rounds):
        for name, reply, ev, n in cases:
            for _k in range(max(1, n // rounds)):
                c0, w0 = thread(), clock()
                guard.check(reply, "zh-CN", ev)
                cpu_ns[name].append(thread() - c0)
                wall_ns[name].append(clock() - w0)

    def p(s: list[int], q: float) -> float:
        return s[min(len(s) - 1, int(len(s) * q))] / 1e3

    print(f"CPU per reply (python {platform.python_version()} on {platform.machine()}; thread CPU clock per call):")
    for name, reply, ev, _n in cases:
        xs, ws = sorted(cpu_ns[name]), sorted(wall_ns[name])
        v = guard.check(reply, "zh-CN", ev)
        print(
            f"  {name:<30} {len(reply.encode()):>6} B {len(xs):>6} calls  cpu p50 {p(xs, 0.5):7.1f} us  "
            f"p99 {p(xs, 0.99):7.1f} us   wall p50 {p(ws, 0.5):7.1f} us  p99 {p(ws, 0.99):7.1f} us  -> {v.reason}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, action="append", help="a corpus file (repeatable); default: the repo's")
    ap.add_argument("--lexicon", default=None, help="a lexicon folder (default: the packaged one)")
    ap.add_argument("--misses", action="store_true", help="list every sentence the guard got wrong")
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--against", type=Path, help="another tree (e.g. a worktree of main): its CPU beside this one's")
    ap.add_argument("--samples", type=int, help=argparse.SUPPRESS)  # a child of --against: print samples as JSON
    ap.add_argument("--veto", choices=("off", "on", "both"), default="both", help="the learned veto (--guard-veto)")
    ap.add_argument("--totals", action="store_true", help="pooled totals only (no per-file, kind or sentence lines)")
    args = ap.parse_args()
    if args.totals and args.misses:
        raise SystemExit("--totals never prints sentences: drop --misses")
    if args.samples:
        samples = cpu_samples(ReplyGuard.load(), args.samples, 1)
        print(sys.modules[ReplyGuard.__module__].__file__)  # which tree's guard ran
        print(json.dumps(samples))
        return
    if args.against:
        against(args.against, args.calls, args.rounds)
        return
    yardstick = []
    for _ in range(20):
        c0 = time.process_time()
        total = 0
        for i in range(10_000):
            total += i
        yardstick.append(time.process_time() - c0)
    print(f"yardstick: a 10k-iteration Python loop takes {min(yardstick) * 1e6:.0f} us of CPU here")
    modes = ("off", "on") if args.veto == "both" else (args.veto,)
    guards = {}
    for mode in modes:
        t0 = time.perf_counter()
        guards[mode] = ReplyGuard.load(args.lexicon, use_veto=mode == "on")
        took = (time.perf_counter() - t0) * 1000
        names = ", ".join(guards[mode].lexicons)
        print(f"veto {mode}: lexicons {names} loaded in {took:.0f} ms; {guards[mode].veto_digest}")
    pooled: dict[str, dict[str, Score]] = {m: defaultdict(Score) for m in modes}
    for path in args.corpus or CORPORA:
        for mode in modes:
            if len(modes) > 1 and not args.totals:
                print(f"-- veto {mode}")
            for name, sc in accuracy(guards[mode], path, args.misses, args.totals).items():
                pooled[mode][name].merge(sc)
    if args.totals or len(modes) > 1:
        print(f"pooled over {len(args.corpus or CORPORA)} file(s):")
        for mode in modes:
            for name in sorted(pooled[mode], key=lambda k: (k == "all", k == "obfuscated", k)):
                print(pooled[mode][name].line(f"veto {mode} {name}"))
    if not args.no_cpu:
        for mode in modes:
            print(f"-- veto {mode}")
            cpu(guards[mode], args.calls, args.rounds)


if __name__ == "__main__":
    main()
