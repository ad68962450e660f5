"""The learned veto (issue 14): a claim the rules replaced passes when a small text model says it is no claim.

Per language with a lexicon (en, zh), a logistic regression on binary hashed features of the guard's normalised
sentence (char 1-4 grams, word 1-2 grams, crc32 into 2^bits buckets), trained offline by
``scripts/train_guard_veto.py`` on every labelled sentence of the repository but the untuned held-out sets
(notes/guard-veto2.md). Pure Python at run time: hash each n-gram, sum its weight, sigmoid.

The weights are ``data/veto_<lang>.bin`` beside the lexicons; ``data/veto.sha256`` names each file's SHA-256, and a
file whose bytes differ refuses the load (``VetoError``), so the guard never runs a model other than the one
measured. It is scored only for a claim the rules would replace with no receipt at all (NO_SUCCEEDED_RECEIPT),
and sets it aside only when its sentence and its claiming clause alone both score under the threshold; a reply
that contradicts a receipt stays rule-only (verdict.py).

File format (little-endian): ``CSVETO1\\n``, u8 bits, f64 bias, f64 threshold, u32 n, then n u32 bucket indices
(ascending) and n f32 weights.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import struct
import zlib
from array import array
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
DIGESTS = DATA / "veto.sha256"
MAGIC = b"CSVETO1\n"
_HEAD = struct.Struct("<8sBddI")
WORD = re.compile(r"\w+")
LANGS = ("en", "zh")


class VetoError(ValueError):
    """The veto's data file is missing, malformed or not the one whose digest is recorded."""


def grams(text: str) -> list[str]:
    """The features of one normalised sentence (as the trainer computes them)."""
    t = " " + " ".join(text.lower().split()) + " "
    out = [t[i : i + n] for n in (1, 2, 3, 4) for i in range(len(t) - n + 1)]
    words = WORD.findall(t)
    out += ["w:" + w for w in words]
    out += ["b:" + a + " " + b for a, b in itertools.pairwise(words)]
    return out


def buckets(text: str, bits: int) -> set[int]:
    mask = (1 << bits) - 1
    return {zlib.crc32(g.encode()) & mask for g in grams(text)}


@dataclass(frozen=True)
class Model:
    lang: str
    bits: int
    bias: float
    threshold: float
    weights: array[float]  # dense, one float32 per bucket (2^bits: 256 KB at 16 bits; a dict of the non-zero
    # ones took ~10 MB of heap for the two languages and ~0.5 s to build)
    digest: str

    def p(self, text: str) -> float:
        """p(claim) of one normalised sentence."""
        w = self.weights
        z = self.bias + sum(w[i] for i in buckets(text, self.bits))
        if z < -60:
            return 0.0
        return 1.0 / (1.0 + math.exp(-z))


def encode(bits: int, bias: float, threshold: float, weights: dict[int, float]) -> bytes:
    """The data file's bytes (the trainer writes these; deterministic: indices ascending)."""
    keys = sorted(weights)
    idx = array("I", keys)
    val = array("f", (weights[k] for k in keys))
    return _HEAD.pack(MAGIC, bits, bias, threshold, len(keys)) + idx.tobytes() + val.tobytes()


def decode(lang: str, raw: bytes, digest: str) -> Model:
    if len(raw) < _HEAD.size:
        raise VetoError(f"veto_{lang}.bin: too short ({len(raw)} bytes)")
    magic, bits, bias, threshold, n = _HEAD.unpack_from(raw)
    if magic != MAGIC or not 8 <= bits <= 24 or len(raw) != _HEAD.size + 8 * n:
        raise VetoError(f"veto_{lang}.bin: not a veto file (magic, bits or length wrong)")
    idx = array("I")
    idx.frombytes(raw[_HEAD.size : _HEAD.size + 4 * n])
    val = array("f")
    val.frombytes(raw[_HEAD.size + 4 * n :])
    if idx and idx[-1] >= 1 << bits:
        raise VetoError(f"veto_{lang}.bin: a bucket index past 2^{bits}")
    dense = array("f", bytes(4 << bits))
    for i, v in zip(idx, val, strict=True):
        dense[i] = v
    return Model(lang, bits, bias, threshold, dense, digest)


def recorded(path: Path = DIGESTS) -> dict[str, str]:
    """file name -> SHA-256 hex, as ``sha256sum`` writes it."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split()
            out[name.lstrip("*")] = digest
    return out


def check(folder: Path | None = None, digests: Path | None = None) -> dict[str, tuple[bytes, str]]:
    """Every language's data file and its SHA-256, each checked against ``veto.sha256`` (the sidecar's start runs
    this alone: the weights are decoded when the guard is first built)."""
    try:
        want = recorded(digests or (folder or DATA) / "veto.sha256")
    except (OSError, ValueError) as exc:
        raise VetoError(f"veto.sha256: cannot read the recorded digests ({exc})") from exc
    files = {}
    for lang in LANGS:
        name = f"veto_{lang}.bin"
        try:
            raw = ((folder or DATA) / name).read_bytes()
        except OSError as exc:
            raise VetoError(f"{name}: cannot read ({exc})") from exc
        got = hashlib.sha256(raw).hexdigest()
        if name not in want:
            raise VetoError(f"{name}: no digest recorded in veto.sha256")
        if got != want[name]:
            raise VetoError(
                f"{name}: SHA-256 {got} differs from the recorded {want[name]} (veto.sha256); "
                "the weights were changed after training: retrain with scripts/train_guard_veto.py"
            )
        files[lang] = (raw, got)
    return files


def load(folder: Path | None = None, digests: Path | None = None) -> dict[str, Model]:
    """Every language's model, each file's SHA-256 checked against ``veto.sha256``."""
    return {lang: decode(lang, raw, got) for lang, (raw, got) in check(folder, digests).items()}
