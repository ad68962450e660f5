"""The store names every script's reply fields from the script's own header: the table in store/replies.py is
exactly what each Lua file's ``returns`` lines list, shape for shape, name for name."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from countersign.errors import StoreUnavailable
from countersign.store.replies import REPLIES, decode

SHAPE = re.compile(r'\{"(\w+)"((?:,\s*\w+)*)\}')


def header_shapes(script: str) -> dict[str, tuple[str, ...]]:
    """The reply shapes a script's header lists after ``returns`` (the comment block at its top)."""
    text = resources.files("countersign.store").joinpath("lua", f"{script}.lua").read_text(encoding="utf-8")
    header = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    block = "\n".join(header)
    block = block[block.index("-- returns") :]
    return {m.group(1): tuple(n.strip() for n in m.group(2).split(",") if n.strip()) for m in SHAPE.finditer(block)}


def test_every_script_has_a_name_table_and_every_table_a_script() -> None:
    lua = {
        p.name.removesuffix(".lua")
        for p in resources.files("countersign.store").joinpath("lua").iterdir()
        if p.name.endswith(".lua")
    }
    assert set(REPLIES) == lua


@pytest.mark.parametrize("script", sorted(REPLIES))
def test_the_name_table_is_the_scripts_header(script: str) -> None:
    assert REPLIES[script] == header_shapes(script)


def test_a_reply_that_fits_no_shape_is_refused_not_guessed() -> None:
    assert decode("settle", [b"lost", b"running"]) == ("lost", {"state": b"running"})
    for reply in ([b"lost"], [b"won", b"k1"], [b"nonsense"], [], b"ok"):
        with pytest.raises(StoreUnavailable, match="answered a reply it does not have"):
            decode("settle", reply)
