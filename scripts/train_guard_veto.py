"""Train the reply guard's learned veto (countersign/guard/veto.py), offline. Needs scikit-learn (dev only):

    .venv/bin/python -m pip install scikit-learn
    .venv/bin/python scripts/train_guard_veto.py            # writes countersign/guard/data/veto_{en,zh}.bin,
                                                             # veto.sha256 and tests/fixtures/guard_veto_sample.json

Data: every labelled sentence of the repository (tests/fixtures/guard_corpus.yaml, guard_heldout_dev*.yaml,
notes/guard*-probes/*.yaml) **except** the untuned held-out sets (a `frozen:` and no `spent:` time: dev10*, dev11* ...).
Per language (en, zh): logistic regression (liblinear, C = 1, not tuned) on binary hashed features of the guard's
normalised text (veto.grams: char 1-4 grams, word 1-2 grams), 2^16 buckets.
Threshold, on the training data only: out-of-fold p (4 group folds; a fixture file or a probe folder is one
writer; the in-sample corpus always trains), the largest t <= 0.5 (steps of 0.01) at which at most --max-lost
(2 %) of the true claims the rules replace have p < t. Same input -> same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from countersign.guard import veto  # noqa: E402

IN_SAMPLE = "tests/fixtures/guard_corpus.yaml"
LOCALES = {"zh": "zh-CN", "en": "en-US"}
BITS = 16
SAMPLE = ROOT / "tests" / "fixtures" / "guard_veto_sample.json"


def untuned(name: str) -> bool:
    """A held-out set frozen and never spent (dev10*, dev11* ...): measured, never trained on."""
    import yaml

    doc = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))
    return bool(doc.get("frozen")) and not doc.get("spent")


def training_files() -> list[str]:
    fixtures = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests/fixtures").glob("guard_heldout_dev*.yaml"))
    probes = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notes").glob("guard*-probes/*.yaml"))
    return [IN_SAMPLE, *(f for f in fixtures if not untuned(f)), *probes]


def writer(name: str) -> str:
    return name if "fixtures" in name else str(Path(name).parent)


def rows_of(files: list[str]) -> list[dict[str, Any]]:
    import yaml

    from countersign.guard import ReplyGuard

    guard = ReplyGuard.load()
    rows = []
    for name in files:
        if untuned(name) or name.startswith("/work/blind"):
            raise SystemExit(f"refusing to train on {name}")
        doc = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))
        filler = str(doc.get("filler") or "")
        for item in doc["sentences"]:
            if item["lang"] not in LOCALES:
                continue
            n = int(item.get("repeat_filler") or 0)
            text = filler * n + item["text"] + filler * n
            v = guard.check(text, LOCALES[item["lang"]], [])
            norm = guard.normaliser.normalise(text, frozenset())
            rows.append(
                {"file": name, "lang": item["lang"], "claim": bool(item["claim"]), "text": norm, "replaced": v.replaced}
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-lost", type=float, default=0.02)
    ap.add_argument("--out", type=Path, default=veto.DATA)
    args = ap.parse_args()
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    def matrix(rows: list[dict[str, Any]]) -> Any:
        indptr, indices = [0], []
        for r in rows:
            indices += sorted(veto.buckets(r["text"], BITS))
            indptr.append(len(indices))
        data = np.ones(len(indices), dtype=np.float64)
        return csr_matrix((data, np.array(indices), np.array(indptr)), shape=(len(rows), 1 << BITS))

    def fit(x: Any, y: Any) -> Any:
        return LogisticRegression(C=1.0, solver="liblinear", max_iter=200, random_state=0).fit(x, y)

    files = training_files()
    rows = rows_of(files)
    print(f"{len(rows)} en/zh sentences from {len(files)} files (untuned held-out sets left out)")
    digests, sample, report = [], {}, {}
    for lang in veto.LANGS:
        sub = [r for r in rows if r["lang"] == lang]
        x, y = matrix(sub), np.array([r["claim"] for r in sub])
        groups = [writer(r["file"]) for r in sub]
        names = sorted({g for g in groups if g != IN_SAMPLE})
        p: dict[int, float] = {}
        for k in range(4):
            held = set(names[k::4])
            tr = [i for i, g in enumerate(groups) if g not in held]
            te = [i for i, g in enumerate(groups) if g in held]
            if te:
                p |= dict(zip(te, fit(x[tr], y[tr]).predict_proba(x[te])[:, 1], strict=True))
        caught = sorted(p[i] for i in p if sub[i]["replaced"] and sub[i]["claim"])
        allowed = int(args.max_lost * len(caught))
        t = 0.0
        for step in range(1, 51):
            if sum(q < step / 100 for q in caught) <= allowed:
                t = step / 100
        fp_oof = [i for i in p if sub[i]["replaced"] and not sub[i]["claim"]]
        cut = sum(p[i] < t for i in fp_oof)
        model = fit(x, y)
        coef = model.coef_[0]
        weights = {int(i): float(np.float32(coef[i])) for i in np.flatnonzero(coef)}
        raw = veto.encode(BITS, float(model.intercept_[0]), t, weights)
        (args.out / f"veto_{lang}.bin").write_bytes(raw)
        digests.append(f"{hashlib.sha256(raw).hexdigest()}  veto_{lang}.bin")
        probs = model.predict_proba(x)[:, 1]
        sample[lang] = [
            {"text": sub[i]["text"], "p": round(float(probs[i]), 9)} for i in range(0, len(sub), max(1, len(sub) // 60))
        ]
        report[lang] = {
            "sentences": len(sub),
            "writers": len(names) + 1,
            "threshold": t,
            "oof_caught_claims": len(caught),
            "oof_caught_claims_below_t": int(sum(q < t for q in caught)),
            "oof_rule_fp": len(fp_oof),
            "oof_rule_fp_below_t": int(cut),
            "nonzero_weights": len(weights),
            "bytes": len(raw),
        }
        print(lang, json.dumps(report[lang]))
    (args.out / "veto.sha256").write_text("\n".join(digests) + "\n", encoding="utf-8")
    if args.out == veto.DATA:
        SAMPLE.write_text(json.dumps(sample, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
