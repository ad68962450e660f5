"""Generate the reply guard's word tables from well-kept lexical resources (run by hand; the output is committed).

    .venv/bin/pip install lemminflect==0.2.3 opencc-python-reimplemented==0.1.7 confusable-homoglyphs==3.3.1
    pip download --no-deps jieba==0.42.1 && tar xzf jieba-0.42.1.tar.gz jieba-0.42.1/jieba/dict.txt
    .venv/bin/python scripts/gen_guard_tables.py --jieba-dict jieba-0.42.1/jieba/dict.txt

Writes into countersign/guard/data/:
  en_verbs.tsv     every English verb lemminflect knows (its infl_lu table, from the SPECIALIST lexicon):
                   lemma <TAB> past forms <TAB> past participles ('|'-separated, lower case)
  zh_verbs.txt     Chinese words of one or two characters that jieba's dictionary tags as a verb (v, vn)
                   with a corpus frequency of at least 5 (below 5 the entries are mostly free phrases such as
                   改大, 寄回, 没烧, which would swallow a complement or a negation)
  t2s.tsv          traditional -> simplified characters (OpenCC's TSCharacters, first candidate)
  confusables.tsv  letters of other scripts that Unicode's confusables table maps to one ASCII letter
                   (Cyrillic, Greek, Armenian ...), and Latin small capitals by their Unicode names (ᴅ -> d)
No network at run time: the sidecar reads these files only. tests/test_guard_normalise.py checks their shape.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import unicodedata
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "countersign" / "guard" / "data"


def english_verbs() -> list[str]:
    import lemminflect

    path = Path(lemminflect.__file__).parent / "resources" / "infl_lu.csv.gz"
    rows: dict[str, tuple[set[str], set[str]]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        lemma, pos, *forms = line.split(",")
        if pos != "verb" or not lemma.replace("-", "").isalpha():
            continue
        vbd, vbn = forms[0], forms[1] or forms[0]
        past, part = rows.setdefault(lemma.lower(), (set(), set()))
        past.update(f.lower() for f in vbd.split("/") if f.replace("-", "").isalpha())
        part.update(f.lower() for f in vbn.split("/") if f.replace("-", "").isalpha())
    return [f"{lemma}\t{'|'.join(sorted(p))}\t{'|'.join(sorted(q))}" for lemma, (p, q) in sorted(rows.items())]


# 50 until round 5: that left out thousands of real verbs of everyday replies (顺延 18, 续借 9, 代缴 5, 归置 9)
ZH_MIN_FREQ = 5


def chinese_verbs(dict_txt: Path) -> list[str]:
    out = set()
    for line in dict_txt.read_text(encoding="utf-8").splitlines():
        word, freq, tag = line.split()
        if tag in ("v", "vn") and int(freq) >= ZH_MIN_FREQ and len(word) <= 2:
            out.add(word)
    return sorted(out)


def t2s() -> list[str]:
    import opencc

    path = Path(opencc.__file__).parent / "dictionary" / "TSCharacters.txt"
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        trad, simp = line.split("\t")
        simp = simp.split(" ")[0]
        if len(trad) == 1 and len(simp) == 1 and trad != simp:
            rows.append(f"{trad}\t{simp}")
    return rows


def confusables() -> list[str]:
    import confusable_homoglyphs

    table = json.loads((Path(confusable_homoglyphs.__file__).parent / "confusables.json").read_text("utf-8"))
    rows = {}
    for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        for item in table.get(letter, []):
            ch = item["c"]
            if len(ch) != 1 or ch.isascii() or not ch.isalpha():
                continue
            if unicodedata.normalize("NFKC", ch).isascii():
                continue  # NFKC already folds it (full-width, mathematical letters)
            if not item["n"].startswith(("CYRILLIC", "GREEK", "ARMENIAN", "LATIN", "COPTIC", "CHEROKEE")):
                continue
            rows.setdefault(ch, letter.lower())
    # letters Unicode names after a Latin letter that NFKC keeps apart: small capitals (ᴅ), modifier letters
    small = re.compile(r"^LATIN (?:LETTER SMALL CAPITAL|SUBSCRIPT SMALL LETTER|SMALL LETTER DOTLESS) ([A-Z])$")
    for cp in range(0x80, 0x2000):
        ch = chr(cp)
        m = small.match(unicodedata.name(ch, ""))
        if m and not unicodedata.normalize("NFKC", ch).isascii():
            rows.setdefault(ch, m.group(1).lower())
    return [f"{ch}\t{plain}" for ch, plain in sorted(rows.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jieba-dict", type=Path, required=True)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("en_verbs.tsv", english_verbs()), ("zh_verbs.txt", chinese_verbs(args.jieba_dict)),
                       ("t2s.tsv", t2s()), ("confusables.tsv", confusables())):
        (OUT / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
        print(f"{name}: {len(rows)} rows, {os.path.getsize(OUT / name)} bytes")


if __name__ == "__main__":
    main()
