"""The audit writer's remembered chain heads (audit/heads.py): what is put comes back as it was, the oldest go first
past the cap, and an entry stays small (a pod keeps 10,000 of them for as long as it runs)."""

from __future__ import annotations

import os
import tracemalloc

from hypothesis import example, given
from hypothesis import strategies as st

from countersign.audit.heads import Heads
from countersign.audit.writer import HEADS, Audit
from countersign.keyring import Keyring
from countersign.observability.metrics import Metrics


@given(
    action_id=st.one_of(st.binary(min_size=16, max_size=16).map(bytes.hex), st.text(max_size=40)),
    seq=st.integers(min_value=0, max_value=1 << 40),
    mac=st.text(max_size=60),
)
@example(action_id="AB" * 16, seq=(1 << 32) - 1, mac="x" * 43)
@example(action_id="g" * 32, seq=1 << 32, mac="é")
@example(action_id=" 0a" * 10 + "00", seq=0, mac="")
def test_a_head_comes_back_as_it_was_put(action_id: str, seq: int, mac: str) -> None:
    heads = Heads(4)
    heads.put(action_id, (seq, mac))
    assert heads.get(action_id) == (seq, mac)
    assert heads.pop(action_id) == (seq, mac)
    assert heads.get(action_id) is None and heads.pop(action_id) is None and len(heads) == 0


def test_past_the_cap_the_oldest_sixteenth_goes_and_a_head_popped_and_put_again_is_the_newest() -> None:
    heads = Heads(32)
    ids = [os.urandom(16).hex() for _ in range(33)]
    for n, action_id in enumerate(ids[:32]):
        heads.put(action_id, (n, f"mac{n}"))
    heads.put(ids[5], (50, "again"))  # over a kept one: keeps its place
    heads.put(ids[0], heads.pop(ids[0]) or (0, ""))  # popped and put again: the newest
    heads.put(ids[32], (32, "mac32"))  # one past the cap: it and a sixteenth of the cap (2) more go, oldest first
    assert len(heads) == 30
    assert [heads.get(action_id) for action_id in ids[1:4]] == [None] * 3
    assert heads.get(ids[0]) == (0, "mac0") and heads.get(ids[4]) == (4, "mac4")
    assert heads.get(ids[5]) == (50, "again") and heads.get(ids[32]) == (32, "mac32")


def test_the_writer_keeps_ten_thousand_heads_in_under_200_bytes_each() -> None:
    """An OrderedDict of the id's str to (seq, the MAC's str) took ~295 bytes an entry: ~3 MB at the cap, what the
    resident memory under load grew by in bench/write_path.py (notes/lean-mem2.md)."""
    keyring = Keyring.generate()
    audit = Audit(None, keyring, Metrics(frozenset()), 60_000)  # type: ignore[arg-type]  # remember needs no store
    tracemalloc.start()
    try:
        # the call's own strs, as a Confirm hands them over: nothing else keeps them once it returns
        calls = [(os.urandom(16).hex(), (3, keyring.mac(keyring.active, "audit", b"event"))) for _ in range(HEADS)]
        for action_id, head in calls:
            audit.remember(action_id, head)
        kept = audit.head(calls[-1][0])
        del calls
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used / HEADS < 200, f"{used / HEADS:.0f} bytes a head"
    assert kept[0] == 3 and len(kept[1]) == 43
