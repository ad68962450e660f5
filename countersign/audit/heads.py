"""Where each action's audit chain ends, as this process last saw it (its seq and head MAC): the writer's guess, so
an append chains right the first time (a wrong or missing guess costs one more round trip, never a wrong chain:
the script answers the real head).

Kept compact, because a pod keeps up to ``cap`` of them for as long as it runs: as an OrderedDict of str to
(int, str) an entry cost ~306 bytes (the id's str, the MAC's str, the tuple, the node), ~3 MB at the 10,000 a pod
reaches after 10,000 writes; here, in a plain dict, the id is its 16 bytes and seq + MAC one bytes object, ~170
bytes (tracemalloc), for ~21k instructions more per write's puts and gets (callgrind; notes/lean-mem2.md). An id
that is not 32 hex digits, a head that is not ASCII or a seq beyond 32 bits is kept as it came. Two ids that
differ only in the case of their hex digits share an entry: a guess, so at worst one round trip more (action ids
are lowercase: keyring.action_id, and tokens are checked against it).
"""

from __future__ import annotations

from itertools import islice

_SEQ_BYTES = 4
_SEQ_LIMIT = 1 << (8 * _SEQ_BYTES)

Head = tuple[int, str]  # (seq, head MAC) of a chain; (0, "") is no chain yet


def _key(action_id: str) -> bytes | str:
    if len(action_id) == 32:  # an action id's 32 hex digits (keyring.action_id)
        try:
            return bytes.fromhex(action_id)
        except ValueError:
            pass
    return action_id


def _pack(head: Head) -> bytes | Head:
    seq, mac = head
    if 0 <= seq < _SEQ_LIMIT and mac.isascii():
        return seq.to_bytes(_SEQ_BYTES) + mac.encode()
    return head


def _unpack(packed: bytes | Head) -> Head:
    if isinstance(packed, tuple):
        return packed
    return int.from_bytes(packed[:_SEQ_BYTES]), packed[_SEQ_BYTES:].decode()


class Heads:
    """At most ``cap`` heads; past it the sixteenth remembered longest ago is dropped, in one pass (``pop`` and
    ``put`` again makes an entry the newest, ``put`` over a kept one leaves its place). One at a time would walk
    the dict's deleted slots from its start at each put: 14-18 us a put at 10,000, against ~3 in one pass."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._heads: dict[bytes | str, bytes | Head] = {}

    def __len__(self) -> int:
        return len(self._heads)

    def put(self, action_id: str, head: Head) -> None:
        heads = self._heads
        heads[_key(action_id)] = _pack(head)
        if len(heads) > self.cap:
            for old in list(islice(heads, len(heads) - self.cap + self.cap // 16)):
                del heads[old]

    def get(self, action_id: str) -> Head | None:
        packed = self._heads.get(_key(action_id))
        return None if packed is None else _unpack(packed)

    def pop(self, action_id: str) -> Head | None:
        packed = self._heads.pop(_key(action_id), None)
        return None if packed is None else _unpack(packed)
