"""A stable digest of the reply guard's full verdicts, for changes that must not change any verdict (CPU work).

    PYTHONPATH=$PWD .venv/bin/python scripts/guard_verdicts.py            # prints the digest and the count
    PYTHONPATH=$PWD .venv/bin/python scripts/guard_verdicts.py --dump F   # also writes every verdict to F (diffable)

What is read: every sentence of every ``tests/fixtures/guard_*.yaml`` corpus, alone and with the corpus filler
around it as the bench reads it; the same sentences joined ten at a time into one reply (by a line break and by
a space, so sentences are read beside others); and the bench's CPU replies (bench/guard.py ``cpu_cases``) with
each of their lines alone. For each: the verdict (replaced, reason, language), every claim (clause, rule, verb,
verb class, lexicon) and every candidate set aside (clause, rule, cue). Run it on the base and after each change:
the digest must be identical.

Each text is read twice, by ``ReplyGuard.load()`` (veto off) and ``ReplyGuard.load(use_veto=True)``, and each
verdict also records what the learned veto set aside (clause, rule, p, t); the bench's CPU replies are read once
more with the receipts the bench gives them. Only the digest and counts are printed: never a sentence (the
untuned held-out sets ``guard_heldout_dev1*.yaml`` are read here but must not be looked at).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from countersign.guard import ReplyGuard

ROOT = Path(__file__).resolve().parent.parent


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("guard_bench", ROOT / "bench" / "guard.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["guard_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


def texts() -> list[str]:
    """Every text the digest covers, in a fixed order."""
    out: list[str] = []
    for path in sorted((ROOT / "tests" / "fixtures").glob("guard_*.yaml")):
        doc: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        filler = str(doc.get("filler") or "")
        sentences = [str(item["text"]) for item in doc.get("sentences", []) if isinstance(item, dict)]
        out.extend(sentences)
        if filler:
            out.extend(filler + s + filler for s in sentences)
        for i in range(0, len(sentences), 10):
            out.append("\n".join(sentences[i : i + 10]))
            out.append(" ".join(sentences[i : i + 10]))
    bench = _bench()
    for _name, reply, _ev, _n in bench.cpu_cases(1):
        out.append(reply)
        out.extend(line for line in reply.splitlines() if line.strip())
    return out


def with_receipts() -> list[tuple[str, list[Any]]]:
    """The bench's CPU replies with the receipts the bench checks them with."""
    return [(reply, list(ev)) for _name, reply, ev, _n in _bench().cpu_cases(1) if ev]


def verdicts(guard: ReplyGuard) -> list[str]:
    lines = []
    for text, evidence in [(t, []) for t in texts()] + with_receipts():
        v = guard.check(text, "zh-CN", evidence)
        lines.append(
            json.dumps(
                {
                    "text": text,
                    "receipts": [e.action_id for e in evidence],
                    "replaced": v.replaced,
                    "reason": v.reason,
                    "language": v.language,
                    "claims": [[c.clause, c.rule, c.verb, c.verb_class, c.lexicon] for c in v.claims],
                    "matched": list(v.matched_claims),
                    "excluded": [list(e) for e in v.excluded],
                    "vetoed": [[c.clause, c.rule, c.verb_class, f"{p:.6f}", f"{t:.6f}"] for c, p, t in v.vetoed],
                },
                ensure_ascii=False,
                sort_keys=True,
            )
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", type=Path, help="write every verdict, one JSON line each, to this file")
    args = ap.parse_args()
    lines = [f"veto off {line}" for line in verdicts(ReplyGuard.load())]
    lines += [f"veto on {line}" for line in verdicts(ReplyGuard.load(use_veto=True))]
    body = "\n".join(lines) + "\n"
    if args.dump:
        args.dump.write_text(body, encoding="utf-8")
    counts = {key: sum(f'"{key}": []' not in line for line in lines) for key in ("claims", "excluded", "vetoed")}
    replaced = sum('"replaced": true' in line for line in lines)
    print(
        f"{hashlib.sha256(body.encode()).hexdigest()}  {len(lines)} verdicts (veto off and on), {replaced} replaced,"
        f" with claims {counts['claims']}, with exclusions {counts['excluded']}, with a veto {counts['vetoed']}"
        f"; guard from {Path(sys.modules[ReplyGuard.__module__].__file__ or '?').parent.parent.parent}"
    )


if __name__ == "__main__":
    main()
