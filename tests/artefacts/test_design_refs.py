"""The design is in the repository: every ``docs/design.md §N`` (or the older ``DESIGN §N``) the code and the docs
cite is a section of docs/design.md, and every invariant they name (I1-I8) is in its table."""

from __future__ import annotations

import re
import subprocess

from countersign.testing.processes import ROOT

DESIGN = ROOT / "docs" / "design.md"
CITE = re.compile(r"(?:docs/design\.md|DESIGN) (§\s?\d+(?:\.\d+)*(?:\s?[-–,]\s?§?\s?\d+(?:\.\d+)*)*)")
INVARIANT = re.compile(r"\bI([1-9]\d*)\b")
TEXT = (".py", ".lua", ".md", ".yaml", ".pml", ".proto", ".sh", ".toml", ".ts", ".js")


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in listed.split() if f.endswith(TEXT) and not f.startswith(("notes/", "bench/results/"))]


def _sections() -> set[str]:
    return set(re.findall(r"^## (\d+)\. ", DESIGN.read_text(encoding="utf-8"), re.M))


def test_the_design_has_its_numbered_sections_and_invariants() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    assert _sections() == {str(n) for n in range(1, 14)}
    assert set(re.findall(r"^\| I(\d) \|", text, re.M)) == {str(n) for n in range(1, 9)}


def test_every_cited_section_exists() -> None:
    sections, missing, cited = _sections(), [], 0
    for name in _tracked():
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for cite in CITE.finditer(line):
                for section in re.findall(r"(?:§\s?|[-–,]\s?§?\s?)(\d+)", cite.group(1)):  # §7.2 cites §7
                    cited += 1
                    if section not in sections:
                        missing.append(f"{name}:{number}: §{section}")
    assert cited > 20, "the scan finds the code's citations"
    assert not missing, missing


def test_every_named_invariant_exists() -> None:
    """An invariant is named as I<n> next to a citation of the design, or in the code's comments and docstrings."""
    text = DESIGN.read_text(encoding="utf-8")
    known = set(re.findall(r"^\| I(\d) \|", text, re.M))
    missing = []
    for name in _tracked():
        if not name.endswith((".py", ".lua", ".md", ".pml")):
            continue
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if "I" not in line or not re.search(r"\(I\d|\bI\d\)|invariant|§|\| I\d \|", line):
                continue
            missing += [f"{name}:{number}: I{n}" for n in INVARIANT.findall(line) if n not in known]
    assert not missing, missing
