"""A turn's read fact is RFC 8785 bytes whichever path writes them (path/turn.py's fact_entry)."""

from __future__ import annotations

import pytest
import rfc8785

from countersign.path.turn import fact_entry


@pytest.mark.parametrize(
    "summary",
    [
        "0 result(s)",
        "",
        '待办「买牛奶」 "quoted" \\ back',
        "ctl \x00\x01\x1f \b\f\n\r\t del \x7f",
        "astral 𝄞 é",
        "x" * 400,
    ],
)
def test_a_fact_is_the_rfc8785_encoding_of_its_fields(summary: str) -> None:
    expected = rfc8785.dumps({"k": "fact", "tool": "list_todos", "status": "succeeded", "summary": summary[:300]})
    assert fact_entry("list_todos", "succeeded", summary) == expected


def test_a_fact_with_a_lone_surrogate_is_refused_as_canonical_refuses_it() -> None:
    with pytest.raises(ValueError):
        fact_entry("list_todos", "succeeded", "x" + chr(0xD800))
