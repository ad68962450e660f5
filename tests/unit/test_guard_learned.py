"""The pure-Python parts of the learned-veto experiment (bench/guard_learned.py): what a shipped veto would run
(n-grams, hashed buckets, the score) and how the experiment picks its threshold and counts. No scikit-learn needed."""

from __future__ import annotations

import importlib.util
import math
import sys
import zlib
from array import array
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guard_learned", ROOT / "bench" / "guard_learned.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("guard_learned", module)
    spec.loader.exec_module(module)
    return module


gl = _bench()


def test_grams_are_char_1_to_4_words_bigrams_and_the_fired_rules() -> None:
    got = gl.grams("Done  It", ["rule:x"])
    assert " " in got and "d" in got and " do" in got and "done" in got and "it " in got
    assert "w:done" in got and "w:it" in got and "b:done it" in got and "rule:x" in got
    assert "e  i" not in got  # whitespace is collapsed before the grams are cut
    assert len([g for g in got if len(g) == 4 and ":" not in g]) == len(" done it ") - 3


def test_buckets_are_stable_crc32_not_pythons_salted_hash() -> None:
    mask = (1 << 10) - 1
    assert gl.buckets("ab", [], mask) == {zlib.crc32(g.encode()) & mask for g in gl.grams("ab")}


def test_score_is_the_sigmoid_of_the_bias_plus_each_bucket_once() -> None:
    mask = (1 << 8) - 1
    weights = array("f", [0.0] * 256)
    for b in gl.buckets("aa", [], mask):
        weights[b] = 0.5
    n = len(gl.buckets("aa", [], mask))  # "a" occurs twice in the text but its bucket counts once
    assert math.isclose(gl.score(weights, -1.0, "aa", [], mask), 1 / (1 + math.exp(1.0 - 0.5 * n)), rel_tol=1e-6)


def test_threshold_is_the_largest_that_loses_at_most_the_allowed_share_of_caught_claims() -> None:
    rows = [{"replaced": True, "claim": True}] * 200 + [
        {"replaced": True, "claim": False},
        {"replaced": False, "claim": True},
    ]
    p = {i: 0.9 for i in range(200)} | {0: 0.05, 1: 0.2, 200: 0.01, 201: 0.0}
    assert gl.threshold(p, rows, 0.005) == 0.2  # one of 200 may be lost: t up to 0.20 loses only the 0.05 one
    assert gl.threshold(p, rows, 0.0) == 0.05  # none may be lost: the 0.05 claim must stay at or above t
    assert gl.threshold(p, rows, 0.01) == 0.5  # two may be lost; the grid stops at 0.5


def test_counts_pools_precision_and_recall() -> None:
    got = gl.counts([(True, True), (True, False), (False, True), (False, False), (True, True)])
    assert (got["tp"], got["fp"], got["fn"], got["tn"]) == (2, 1, 1, 1)
    assert math.isclose(got["precision"], 2 / 3) and math.isclose(got["recall"], 2 / 3)
    assert gl.counts([])["precision"] is None
