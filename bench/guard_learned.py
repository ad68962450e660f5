"""Experiment (issue 14): does a small learned veto on the reply guard generalise across writers?

    .venv/bin/python bench/guard_learned.py                   # leave-one-file-out, rules of this tree
    .venv/bin/python bench/guard_learned.py --rules-tree DIR  # the rule verdicts of another tree (its countersign/)
        [--bits 18] [--c 1.0] [--test-only dev7,guard6-probes]  # hash size, 1/regularisation, left-out file prefixes
        [--by folder] [--in-sample OLD_CORPUS.yaml]              # a probe folder as one writer; an older corpus

Needs scikit-learn in the venv (`.venv/bin/python -m pip install scikit-learn`; not a project dependency).
Each corpus file is one writer. For each language (zh, en) and each file holding that language but the in-sample
corpus, train on every other file (the in-sample corpus always among them), test on the left-out one:
  rules      the rule guard alone: detected = ReplyGuard.check(text, locale, []).replaced
  model      logistic regression alone on hashed char 1-4 grams and word 1-2 grams of the normalised text (p >= 0.5)
  veto-text  rules, but a "replaced" becomes "passed" when the model (text features) says p(claim) < t
  veto-rule  the same with the rules that fired (grammar rule, verb class, exclusion rules, reason) as features
  veto-cond  veto-rule's features, trained only on the sentences the rules replaced (p(claim | rules fired))
t is chosen on the training files alone: out-of-fold probabilities over them (4 group folds by file), the
largest t (<= 0.5) below which at most --max-lost (default 0.5 %) of the true claims the rules replaced there fall.
--by folder takes each probe folder (notes/guard6-probes/ ...: one round's helper wrote all its batches) as one
writer instead of each file. Results (pooled per language over the left-out files, and per file or folder) go to
bench/results/guard-learned-*.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import zlib
from array import array
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IN_SAMPLE = "tests/fixtures/guard_corpus.yaml"
LANGS = ("zh", "en")
LOCALES = {"zh": "zh-CN", "en": "en-US"}  # as bench/guard.py
METHODS = ("rules", "model", "veto-text", "veto-rule", "veto-cond")


def corpus_files() -> list[str]:
    files = [IN_SAMPLE, *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/fixtures").glob("guard_heldout_dev*"))]
    return files + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notes").glob("guard*-probes/*.yaml"))


def dump_rules(files: Sequence[str], in_sample: str | None) -> list[dict[str, Any]]:
    """Every zh/en sentence with the rule verdict and what fired; runs with whichever countersign is imported."""
    import yaml

    from countersign.guard import ReplyGuard

    guard = ReplyGuard.load()
    rows = []
    for name in files:
        path = Path(in_sample) if in_sample and name == IN_SAMPLE else ROOT / name
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))  # the format of bench/guard.py's read_corpus
        filler = str(doc.get("filler") or "")
        for item in doc["sentences"]:
            n = int(item.get("repeat_filler") or 0)
            s = argparse.Namespace(text=filler * n + item["text"] + filler * n, claim=item["claim"], lang=item["lang"])
            s.kind = str(item.get("kind", ""))
            if s.lang not in LANGS:
                continue
            v = guard.check(s.text, LOCALES[s.lang], [])
            fired = [f"reason:{v.reason}"]
            fired += [f"rule:{c.rule}" for c in v.claims] + [f"class:{c.verb_class}" for c in v.claims]
            fired += [f"excl:{rule}" for _, rule, _ in v.excluded]
            norm = guard.normaliser.normalise(s.text, frozenset())
            rows.append(
                {"file": name, "lang": s.lang, "claim": s.claim, "kind": s.kind, "text": norm}
                | {"replaced": v.replaced, "fired": sorted(set(fired))}
            )
    return rows


# -- features: what a shipped version would run (pure Python: hash each n-gram, sum the weights) -----------------

WORD = re.compile(r"\w+")


def grams(text: str, fired: Iterable[str] = ()) -> list[str]:
    t = " " + " ".join(text.lower().split()) + " "
    out = [t[i : i + n] for n in (1, 2, 3, 4) for i in range(len(t) - n + 1)]
    words = WORD.findall(t)
    out += ["w:" + w for w in words] + ["b:" + a + " " + b for a, b in itertools.pairwise(words)]
    return out + list(fired)


def buckets(text: str, fired: Iterable[str], mask: int) -> set[int]:
    return {zlib.crc32(g.encode()) & mask for g in grams(text, fired)}


def score(weights: array[float], bias: float, text: str, fired: Iterable[str], mask: int) -> float:
    """p(claim): the inference a shipped veto would run (the weights as a flat float32 array)."""
    z = bias + sum(weights[i] for i in buckets(text, fired, mask))
    return 1.0 / (1.0 + math.exp(-z))


# -- training and evaluation ------------------------------------------------------------------------------------


def learn() -> tuple[Any, Any, Any]:
    try:
        import numpy as np  # type: ignore[import-not-found,unused-ignore]
        from scipy.sparse import csr_matrix  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from sklearn.linear_model import LogisticRegression  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise SystemExit("needs scikit-learn in the venv: .venv/bin/python -m pip install scikit-learn") from None
    return np, csr_matrix, LogisticRegression


def matrix(rows: list[dict[str, Any]], with_rules: bool, bits: int) -> Any:
    np, csr_matrix, _ = learn()
    mask = (1 << bits) - 1
    indptr, indices = [0], []
    for r in rows:
        b = sorted(buckets(r["text"], r["fired"] if with_rules else (), mask))
        indices += b
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float32)
    return csr_matrix((data, np.array(indices), np.array(indptr)), shape=(len(rows), 1 << bits))


def fit(x: Any, y: Any, c: float) -> Any:
    _, _, LogisticRegression = learn()
    return LogisticRegression(C=c, solver="liblinear", max_iter=200).fit(x, y)


def oof(x: Any, y: Any, groups: list[str], idx: list[int], c: float, folds: int = 4) -> dict[int, float]:
    """Out-of-fold p(claim) for the rows of ``idx`` not from the in-sample corpus (group folds by file)."""
    names = sorted({groups[i] for i in idx if groups[i] != IN_SAMPLE})
    out: dict[int, float] = {}
    for k in range(folds):
        held = set(names[k::folds])
        if not held:
            continue
        tr = [i for i in idx if groups[i] not in held]
        te = [i for i in idx if groups[i] in held]
        m = fit(x[tr], y[tr], c)
        out |= dict(zip(te, m.predict_proba(x[te])[:, 1], strict=True))
    return out


def threshold(p: dict[int, float], rows: list[dict[str, Any]], max_lost: float) -> float:
    """The largest t at which at most ``max_lost`` of the true claims the rules replaced have p(claim) < t.
    (Not "the largest FP cut": the rules are tuned on every training file, so they leave almost no FP there.)"""
    caught = sorted(p[i] for i in p if rows[i]["replaced"] and rows[i]["claim"])
    allowed = int(max_lost * len(caught))
    best = 0.0
    for t in [i / 100 for i in range(1, 51)]:
        if sum(q < t for q in caught) <= allowed:
            best = t
    return best


def counts(pairs: Iterable[tuple[bool, bool]]) -> dict[str, Any]:
    tp = fp = fn = tn = 0
    for want, got in pairs:
        tp += want and got
        fp += got and not want
        fn += want and not got
        tn += not want and not got
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    return {"precision": p, "recall": r, "tp": tp, "fp": fp, "fn": fn, "tn": tn}


def run_lang(rows: list[dict[str, Any]], lang: str, args: argparse.Namespace) -> dict[str, Any]:
    np, _, _ = learn()
    rows = [r for r in rows if r["lang"] == lang]
    y = np.array([r["claim"] for r in rows])
    groups = [r["file"] if args.by == "file" or "fixtures" in r["file"] else str(Path(r["file"]).parent) for r in rows]
    x_text, x_rule = matrix(rows, False, args.bits), matrix(rows, True, args.bits)
    tests = [
        f
        for f in dict.fromkeys(groups)
        if f != IN_SAMPLE and (not args.test_only or any(short(f).startswith(t) for t in args.test_only))
    ]
    got: dict[str, dict[int, bool]] = {m: {} for m in METHODS}
    thresholds: dict[str, dict[str, float]] = {}
    for f in tests:
        tr = [i for i, g in enumerate(groups) if g != f]
        te = [i for i, g in enumerate(groups) if g == f]
        tr_rep = [i for i in tr if rows[i]["replaced"]]
        ts = thresholds[short(f)] = {}
        for i in te:
            got["rules"][i] = rows[i]["replaced"]
        for name, x, train in (("veto-text", x_text, tr), ("veto-rule", x_rule, tr), ("veto-cond", x_rule, tr_rep)):
            t = ts[name] = threshold(oof(x, y, groups, train, args.c), rows, args.max_lost)
            model = fit(x[train], y[train], args.c)
            p = model.predict_proba(x[te])[:, 1]
            for i, q in zip(te, p, strict=True):
                got[name][i] = bool(rows[i]["replaced"] and q >= t)
                if name == "veto-text":
                    got["model"][i] = bool(q >= 0.5)
        print(f"  {lang} {short(f):<28} n={len(te):<4} thresholds " + " ".join(f"{k} {v:.2f}" for k, v in ts.items()))
    pooled = {m: counts((rows[i]["claim"], g) for i, g in got[m].items()) for m in METHODS}
    per_file = {
        short(f): {m: counts((rows[i]["claim"], g) for i, g in got[m].items() if groups[i] == f) for m in METHODS}
        for f in tests
    }
    return {"pooled": pooled, "per_file": per_file, "thresholds": thresholds}


def short(name: str) -> str:
    if "fixtures" in name:
        return Path(name).stem.replace("guard_heldout_", "")
    return "/".join(Path(name).parts[-2:]) if name.endswith(".yaml") else Path(name).name


# -- the weights a shipped version would carry, and its CPU per sentence ---------------------------------------


def inference_cost(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Train veto-rule on every file of one language, export float32 weights, time the pure-Python score."""
    np, _, _ = learn()
    out: dict[str, Any] = {}
    mask = (1 << args.bits) - 1
    for lang in LANGS:
        sub = [r for r in rows if r["lang"] == lang]
        model = fit(matrix(sub, True, args.bits), np.array([r["claim"] for r in sub]), args.c)
        weights = array("f", model.coef_[0].astype(np.float32).tobytes())
        bias = float(model.intercept_[0])
        sample = [r for r in sub if len(r["text"]) <= 300][:1000]
        cpu = []
        for r in sample * 3:
            t0 = time.thread_time_ns()
            score(weights, bias, r["text"], r["fired"], mask)
            cpu.append(time.thread_time_ns() - t0)
        cpu.sort()
        agree = sum(
            (score(weights, bias, r["text"], r["fired"], mask) >= 0.5)
            == bool(model.predict(matrix([r], True, args.bits))[0])
            for r in sample[:200]
        )
        out[lang] = {
            "buckets": 1 << args.bits,
            "nonzero_weights": int(np.count_nonzero(model.coef_[0])),
            "float32_bytes": len(weights) * 4,
            "sparse_int16_bytes_estimate": int(np.count_nonzero(model.coef_[0])) * (4 + 2),
            "sentences_timed": len(cpu),
            "mean_chars": sum(len(r["text"]) for r in sample) / len(sample),
            "cpu_us_p50": cpu[len(cpu) // 2] / 1000,
            "cpu_us_p99": cpu[int(len(cpu) * 0.99)] / 1000,
            "pure_python_agrees_with_sklearn": f"{agree}/{min(200, len(sample))}",
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rules-tree", help="take the rule verdicts from this tree's countersign/ (a child process)")
    ap.add_argument("--dump-rules", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bits", type=int, default=18)
    ap.add_argument("--c", type=float, default=1.0)
    ap.add_argument("--max-lost", type=float, default=0.005)
    ap.add_argument("--in-sample", help="read the in-sample corpus from this file (e.g. an older version of it)")
    ap.add_argument("--by", choices=("file", "folder"), default="file", help="folder: a probe folder is one writer")
    ap.add_argument("--test-only", type=lambda s: set(s.split(",")), default=set())
    ap.add_argument("--out", help="results file (default bench/results/guard-learned-<time>.json)")
    args = ap.parse_args()
    if args.dump_rules:
        json.dump(dump_rules(corpus_files(), args.in_sample), sys.stdout)
        return
    tree = Path(args.rules_tree).resolve() if args.rules_tree else ROOT
    env = os.environ | {"PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dump-rules"]
    cmd += ["--in-sample", str(Path(args.in_sample).resolve())] if args.in_sample else []
    rows: list[dict[str, Any]] = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True).stdout)
    print(f"{len(rows)} zh/en sentences in {len({r['file'] for r in rows})} files; rules from {tree}")
    result: dict[str, Any] = {"rules_tree": str(tree), "bits": args.bits, "c": args.c, "max_lost": args.max_lost}
    result |= {"by": args.by, "test_only": sorted(args.test_only), "in_sample": args.in_sample or IN_SAMPLE}
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    result["rules_commit"] = rev.stdout.strip() or "(not a git tree)"
    for lang in LANGS:
        result[lang] = run_lang(rows, lang, args)
        for m, s in result[lang]["pooled"].items():
            pr = f"P {s['precision']:.3f} R {s['recall']:.3f}"
            print(f"  {lang} pooled {m:<10} {pr}  (tp {s['tp']} fp {s['fp']} fn {s['fn']})")
    result["inference"] = inference_cost(rows, args)
    print(json.dumps(result["inference"], indent=1))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"guard-learned-{stamp}.json"
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
