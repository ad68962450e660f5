"""The store names every script's reply fields from the script's own header: the table in store/replies.py is
exactly what each Lua file's ``returns`` lines list, shape for shape, name for name."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from countersign.errors import StoreUnavailable
from countersign.store.records import CONT_STATES, RUN_STATES, CardRecord, RunRecord, cont_state, run_state
from countersign.store.replies import REPLIES, card_record, decode, raw, run_record, text

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


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ([b"lost"], "'lost' with 0 field(s)"),
        ([b"ok", b"extra", b"more"], "'ok' with 2 field(s)"),
        ([b"nonsense", b"x"], "'nonsense' with 1 field(s)"),
        ([], "'list' with -1 field(s)"),
        (b"OK", "'bytes' with 0 field(s)"),
        (None, "'NoneType' with 0 field(s)"),
    ],
)
def test_a_reply_of_no_shape_is_described_as_it_came(reply: object, said: str) -> None:
    """What the operator reads when a store ran another script than the one this sidecar shipped."""
    with pytest.raises(StoreUnavailable) as info:
        decode("settle", reply)
    assert str(info.value).endswith(f"the settle script answered a reply it does not have ({said})"), info.value


def test_a_run_reply_becomes_the_record_field_for_field() -> None:
    reply = [b"run", b"settled", b"k1", b"\x08\x01", b"omac", b"", b"bind", b"create_todo", b"{}", b"cmac"]
    kind, fields = decode("claim", reply)
    assert kind == "run"
    assert run_record(fields) == RunRecord(
        "settled", "k1", b"\x08\x01", "omac", "", "bind", "create_todo", b"{}", "cmac"
    )
    edited = run_record({**fields, "state": b"hacked"})
    assert edited.state == "unreadable"  # a word edited in by hand is never taken for a state


def test_a_card_reply_becomes_the_record_with_the_callers_tool_and_binding_where_the_script_has_none() -> None:
    _, fields = decode("issue", [b"card", b"k1", b"{}", b"mac"])
    assert card_record(fields, tool="create_todo", binding="bind") == CardRecord(
        "k1", "create_todo", b"{}", "mac", "bind"
    )
    _, fields = decode("peek", [b"card", b"k0", b"{}", b"mac", b"theirs", b"delete_todo"])
    assert card_record(fields, tool="create_todo", binding="bind") == CardRecord(
        "k0", "delete_todo", b"{}", "mac", "theirs"
    )


def test_a_number_in_a_reply_reads_as_its_text() -> None:
    assert (raw(7), text(7), raw(b"x"), text(b"x"), raw("x")) == (b"7", "7", b"x", "x", b"x")


@pytest.mark.parametrize(
    ("word", "read"), [*((w, w) for w in sorted(RUN_STATES)), ("READY", "unreadable"), ("", "unreadable")]
)
def test_a_run_state_is_one_of_its_words_or_unreadable(word: str, read: str) -> None:
    assert run_state(word) == read


@pytest.mark.parametrize(
    ("word", "read"), [*((w, w) for w in sorted(CONT_STATES)), ("Ready", "unreadable"), ("x", "unreadable")]
)
def test_a_continuation_state_is_one_of_its_words_or_unreadable(word: str, read: str) -> None:
    assert cont_state(word) == read
