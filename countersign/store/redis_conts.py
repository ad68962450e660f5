"""The store's continuations (docs/design.md §8): one state machine per action, under the action's hash tag
(cont_open / cont_claim / cont_settle / cont_release.lua). RedisStore inherits this (it imports redis through
RedisStore's client only)."""

from __future__ import annotations

from typing import Any

from countersign.store.keys import card_key, cont_key, run_key
from countersign.store.records import ContRecord, RunRecord, cont_state
from countersign.store.replies import raw, text
from countersign.store.results import (
    ContBusy,
    ContReleased,
    ContSettled,
    ContWon,
    LeaseLost,
    NotClaimed,
    NotReady,
    Refused,
)


class RedisConts:
    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError  # RedisStore's

    async def cont_open(
        self, action_id: str, binding: str, kid: str, snapshot: bytes, turn: str, mac: str, ttl_ms: int
    ) -> ContRecord | Refused:
        kind, f = await self._script(
            "cont_open",
            [cont_key(action_id), run_key(action_id), card_key(action_id)],
            [binding, kid, snapshot, turn, mac, ttl_ms],
        )
        if kind != "cont":
            return Refused(kind)  # type: ignore[arg-type]   # none | forbidden
        return ContRecord(
            cont_state(text(f["state"])), text(f["kid"]), raw(f["snapshot"]), text(f["turn"]), text(f["mac"])
        )

    async def cont_claim(
        self, action_id: str, binding: str, lease_ms: int, claim_id: str
    ) -> ContWon | ContRecord | ContBusy | NotReady | Refused:
        """ready -> running under claim_id (a lapsed lease is claimed again). ContWon for the winner, the settled
        ContRecord, ContBusy while another generator holds it, NotReady while the action has no receipt."""
        kind, f = await self._script(
            "cont_claim", [cont_key(action_id), run_key(action_id)], [binding, lease_ms, claim_id]
        )
        if kind == "won":
            cont = ContRecord("running", text(f["kid"]), raw(f["snapshot"]), text(f["turn"]), text(f["mac"]))
            run = RunRecord(
                "settled",
                text(f["run_kid"]),
                raw(f["out"]),
                text(f["omac"]),
                binding=text(f["run_binding"]),
                tool=text(f["run_tool"]),
                card=raw(f["run_card"]),
                cmac=text(f["run_cmac"]),
            )
            return ContWon(cont, run)
        if kind == "settled":
            return ContRecord(
                "settled",
                text(f["kid"]),
                raw(f["snapshot"]),
                text(f["turn"]),
                text(f["mac"]),
                raw(f["reply"]),
                text(f["rmac"]),
                raw(f["verdict"]),
            )
        if kind == "running":
            return ContBusy()
        if kind == "not_ready":
            return NotReady(text(f["run_state"]), text(f["reason"]))
        return Refused(kind)  # type: ignore[arg-type]   # none | forbidden

    async def cont_settle(
        self, action_id: str, binding: str, reply_text: bytes, rmac: str, verdict: bytes, claim_id: str
    ) -> ContSettled | LeaseLost | NotClaimed | Refused:
        """running -> settled by the holder of claim_id; ContSettled(replayed) when this holder settled it
        before."""
        kind, f = await self._script(
            "cont_settle", [cont_key(action_id)], [binding, reply_text, rmac, verdict, claim_id]
        )
        if kind == "ok":
            return ContSettled(reply_text, rmac, verdict, replayed=False)
        if kind == "settled":
            return ContSettled(raw(f["reply"]), text(f["rmac"]), raw(f["verdict"]), replayed=True)
        if kind == "lost":
            return LeaseLost(text(f["state"]))
        if kind == "not_running":
            return NotClaimed(text(f["state"]))
        return Refused(kind)  # type: ignore[arg-type]   # none | forbidden

    async def cont_release(
        self, action_id: str, binding: str, claim_id: str
    ) -> ContReleased | LeaseLost | NotClaimed | Refused:
        """running -> ready by the holder of claim_id."""
        kind, f = await self._script("cont_release", [cont_key(action_id)], [binding, claim_id])
        if kind == "ok":
            return ContReleased()
        if kind == "lost":
            return LeaseLost("running")
        if kind == "state":
            return NotClaimed(text(f["state"]))
        return Refused(kind)  # type: ignore[arg-type]   # none | forbidden
