"""`countersign actions` and `countersign audit`: what an SRE needs when evidence is not enough.

Read-only unless asked: list and show only read records (no lease transition is applied);
`resolve` writes, and records the operator's name and reason in the action's audit chain. Inside the
reconcile window it first asks the downstream (the fence, or the lookup), as reconciliation would: a request
that may still land is not resolved without --force (issue 11).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from google.protobuf import json_format

from countersign.adapters.base import Adapter, CallMeta, Kind, LookupKind, Outcome
from countersign.audit import Audit
from countersign.audit import verify as audit_mod
from countersign.audit.chain import unknown_key
from countersign.errors import DataLoss
from countersign.keyring import Keyring, is_action_id
from countersign.observability import tracing
from countersign.observability.metrics import Metrics
from countersign.path.cards import open_card
from countersign.path.receipts import seal_action
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.store import CardRecord, states
from countersign.store.protocols import OperatorStore
from countersign.v1 import common_pb2

STATES = {"unknown": "unknown", "needs-manual-review": "review", "compensation-failed": "settled", "running": "running"}


def _action(keyring: Keyring, action_id: str, record: dict[str, bytes]) -> common_pb2.Action | None:
    out = record.get("out", b"")
    if not out:
        return None
    kid = record.get("kid", b"").decode()
    if kid not in keyring.keys:
        return common_pb2.Action(
            action_id=action_id,
            error=common_pb2.ActionError(reason=Reason.KEY_NOT_IN_KEYS_FILE, message=unknown_key(kid)),
        )
    if not keyring.verify(kid, "outcome:" + action_id, out, record.get("omac", b"").decode()):
        return common_pb2.Action(
            action_id=action_id,
            error=common_pb2.ActionError(reason=Reason.RECORD_TAMPERED, message="the stored outcome does not verify"),
        )
    return common_pb2.Action.FromString(out)


def _row(keyring: Keyring, action_id: str, record: dict[str, bytes]) -> dict[str, Any]:
    action = _action(keyring, action_id, record)
    card = json.loads(record.get("card", b"{}") or b"{}")
    ms = int(record.get("settled_at", b"0") or 0) or int(record.get("claimed_at", b"0") or 0)
    return {
        "action_id": action_id,
        "record_state": record.get("st", b"").decode(),
        "state": states.name(action.state) if action else record.get("st", b"").decode().upper(),
        "tool": record.get("tool", b"").decode(),
        "kid": record.get("kid", b"").decode(),
        "reason": (action.error.reason if action else "") or record.get("reason", b"").decode(),
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000)) if ms else "",
        "compensates": card.get("compensates", ""),
    }


async def list_actions(
    store: OperatorStore, keyring: Keyring, state: str, as_json: bool, out: TextIO = sys.stdout
) -> int:
    wanted = STATES[state]
    rows = []
    cursor = 0
    while True:
        cursor, ids = await store.scan_runs(cursor, 1000)
        for action_id in ids:
            record = await store.record(action_id)
            if record.get("st", b"").decode() != wanted:
                continue
            row = _row(keyring, action_id, record)
            if state == "compensation-failed" and not (row["compensates"] and row["state"] == "FAILED"):
                continue
            rows.append(row)
        if cursor == 0:
            break
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2), file=out)
    else:
        print(f"{len(rows)} action(s) {state}", file=out)
        for r in rows:
            extra = f"  compensates {r['compensates']}" if r["compensates"] else ""
            print(
                f"  {r['action_id']}  {r['state']:<20} {r['tool']:<18} {r['reason']:<26} {r['since']}{extra}", file=out
            )
    return 0


async def show(
    store: OperatorStore, keyring: Keyring, action_id: str, as_json: bool, out: TextIO = sys.stdout, grace: float = 5.0
) -> int:
    if not is_action_id(action_id):
        print(f"not an action id: {action_id!r}", file=sys.stderr)
        return 2
    evidence, problem = await audit_mod.check_one(store, keyring, action_id, grace)
    record = evidence.run
    history = [json.loads(raw) for _, raw in evidence.events]
    action = _action(keyring, action_id, record)
    if record:
        row = _row(keyring, action_id, record)
    elif evidence.card:
        row = {"action_id": action_id, "state": "READY", "tool": evidence.card.get("tool", b"").decode()}
    else:
        row = {"action_id": action_id, "state": "NOT_FOUND"}
    # "verified" only when the chain is intact AND every record has the event it is owed
    verdict = str(problem) if problem else "verified" if history else "no audit chain"
    doc = {
        **row,
        "action": json_format.MessageToDict(action, preserving_proto_field_name=True) if action else None,
        "history": history,
        "audit": verdict,
    }
    if as_json:
        print(json.dumps(doc, ensure_ascii=False, indent=2), file=out)
        return 0
    print(f"action {action_id}: {doc['state']} ({doc.get('tool', '')}) {doc.get('reason', '')}", file=out)
    if action is not None and action.HasField("receipt"):
        print(f"  receipt: {action.receipt.summary or '-'} resource {action.receipt.resource_id or '-'}", file=out)
    print(f"  audit chain: {doc['audit']}", file=out)
    for event in history:
        when = time.strftime("%H:%M:%S", time.gmtime(event["at"] / 1000))
        fields = " ".join(f"{k}={v}" for k, v in event.get("f", {}).items() if v not in ("", None))
        print(f"  {event['seq']:>3} {when} {event['t']:<22} {fields}", file=out)
    return 0


@dataclass(frozen=True)
class Downstream:
    """What resolve needs to ask the downstream about an action: the registry in force and the adapters."""

    registry: Registry | None
    adapters: dict[str, Adapter]
    deadline: float


def unresolved_since_ms(record: dict[str, bytes]) -> int:
    """When the action became unresolved: first looked at by a reconciler, else settled UNKNOWN by its executor,
    else its lease lapsing."""
    for name in ("since", "settled_at", "lease", "claimed_at"):
        value = int(record.get(name, b"0") or 0)
        if value:
            return value
    return 0


async def _evidence(
    keyring: Keyring, action_id: str, record: dict[str, bytes], downstream: Downstream
) -> tuple[str, str, Outcome | None]:
    """Ask the downstream, as reconciliation does (the fence when the tool has one): (verdict, why, outcome);
    verdict is applied, fenced or unproven."""
    tool_name = record.get("tool", b"").decode()
    if downstream.registry is None:
        return "unproven", "resolve was given no --registry, so it could not ask the downstream", None
    tool = downstream.registry.tools.get(tool_name)
    if tool is None or not tool.adapter.can_lookup:
        return "unproven", f"{tool_name!r} declares no lookup, so nothing can tell whether it landed", None
    try:
        card = open_card(
            keyring,
            action_id,
            CardRecord(
                record.get("kid", b"").decode(), tool_name, record.get("card", b""), record.get("cmac", b"").decode()
            ),
        )
    except DataLoss:
        return "unproven", "the stored card does not verify", None
    fence = tool.adapter.can_fence
    meta = CallMeta(
        idempotency_key=action_id,
        attempt=int(record.get("ratt", b"0") or 0) + 1,
        policy_version=card.policy_version,
        trace_headers=tracing.outgoing_headers,
    )
    found = await downstream.adapters[tool.adapter.kind].lookup(tool, meta, fence, downstream.deadline)
    asked = "the fence" if fence else "the lookup"
    if found.kind is LookupKind.APPLIED:
        return "applied", f"{asked} says the downstream applied it", found.outcome
    if found.kind is LookupKind.ABSENT_FENCED:
        return "fenced", "the fence says the downstream never applied it and now refuses its key", None
    if found.kind is LookupKind.ABSENT_UNFENCED:
        return "unproven", "the lookup found nothing, which proves nothing without a fence", None
    return "unproven", f"the downstream did not answer {asked} ({found.message or 'no answer'})", None


async def resolve(
    store: OperatorStore,
    keyring: Keyring,
    action_id: str,
    outcome: str,
    reason: str,
    operator: str,
    resource_id: str,
    *,
    downstream: Downstream,
    reconcile_window_ms: int,
    force: bool = False,
    out: TextIO = sys.stdout,
    replay_ttl_ms: int = 86_400_000,
) -> int:
    """Settle an unknown / needs-manual-review action by hand. Inside the reconcile window the request may still
    land, so the downstream is asked first (the fence, or the lookup): an outcome it contradicts is refused
    always, one it cannot prove is refused unless forced, and a forced one is recorded as forced, with why.
    The resolved outcome is replayed for ``replay_ttl_ms`` (the sidecars' --replay-ttl), then expires."""
    if not is_action_id(action_id) or not reason.strip() or not operator.strip():
        print("resolve needs an action id, --reason and --operator", file=sys.stderr)
        return 2
    record = await store.record(action_id)
    if not record:
        print(f"no record of action {action_id}", file=sys.stderr)
        return 1
    kid = record.get("kid", b"").decode() or keyring.active
    if kid not in keyring.keys:  # first: without its key nothing in the record can be checked, its state neither
        print(
            f"action {action_id}: {unknown_key(kid)}; resolve it with the keys file of the sidecars that wrote it",
            file=sys.stderr,
        )
        return 1
    state = record.get("st", b"").decode()
    if state not in ("unknown", "review"):
        print(
            f"action {action_id} is {state}: only unknown or needs-manual-review actions are resolved by hand",
            file=sys.stderr,
        )
        return 1
    tool = record.get("tool", b"").decode()
    age_ms = int(time.time() * 1000) - unresolved_since_ms(record)
    verdict, why, evidence = "outside_window", "", None
    if age_ms < reconcile_window_ms:
        verdict, why, evidence = await _evidence(keyring, action_id, record, downstream)
        left = (reconcile_window_ms - age_ms) // 1000
        if verdict == "applied" and outcome == "failed":
            print(
                f"refused: {why}; it is not FAILED. Resolve it --outcome succeeded, or let reconciliation record "
                "it (Reconcile, or the sidecars' background reconciler)",
                file=sys.stderr,
            )
            return 1
        if verdict == "fenced" and outcome == "succeeded":
            print(f"refused: {why}; it is not SUCCEEDED. Resolve it --outcome failed", file=sys.stderr)
            return 1
        if verdict == "unproven" and not force:
            print(
                f"refused: the action became unresolved {age_ms // 1000} s ago, inside the reconcile window "
                f"({reconcile_window_ms // 1000} s), so its request may still land at the downstream; {why}. Wait "
                f"{left} s for the window to pass (or for the fence to answer), or pass --force to record "
                f"{outcome.upper()} anyway (the audit marks it forced)",
                file=sys.stderr,
            )
            return 1
    action = common_pb2.Action(action_id=action_id, tool_name=tool)
    receipt = action.receipt
    receipt.action_id, receipt.tool_name, receipt.resource_id = action_id, tool, resource_id
    if evidence is not None and evidence.kind is Kind.SUCCEEDED:
        receipt.resource_id = resource_id or evidence.resource_id
        receipt.resource_version = evidence.resource_version
    receipt.summary = f"resolved by {operator}: {reason}"
    receipt.evidence_json = json.dumps(
        {"operator": operator, "reason": reason, "evidence": verdict}, ensure_ascii=False
    )
    receipt.settled_at.FromMilliseconds(int(time.time() * 1000))
    if outcome == "succeeded":
        action.state, receipt.status = common_pb2.ACTION_STATE_SUCCEEDED, common_pb2.RECEIPT_STATUS_SUCCEEDED
    else:
        action.state, receipt.status = common_pb2.ACTION_STATE_FAILED, common_pb2.RECEIPT_STATUS_FAILED
        action.error.reason, action.error.message = Reason.RESOLVED_BY_OPERATOR, reason
    blob, omac = seal_action(keyring, kid, action)
    result = await store.resolve(
        action_id, blob, omac, action.error.reason, "SUCCEEDED" if outcome == "succeeded" else "", replay_ttl_ms
    )
    if not result.ok:
        print(
            f"action {action_id} is {result.state}: only unknown or needs-manual-review actions are resolved by hand",
            file=sys.stderr,
        )
        return 1
    forced = verdict == "unproven"
    trail = Audit(store, keyring, Metrics(), 30 * 86_400_000)
    trail.event(
        action_id,
        "resolved",
        operator=operator,
        outcome=outcome,
        reason=reason,
        outcome_hmac=keyring.digest("outcome", blob),
        evidence=verdict,
        forced=forced,
        unproven=why if forced else "",
    )
    await trail.drain(10)
    note = f" (forced: {why})" if forced else f" ({why})" if why else ""
    print(f"action {action_id} resolved {outcome.upper()} by {operator}{note}", file=out)
    return 0


async def verify(store: OperatorStore, keyring: Keyring, out: TextIO = sys.stdout, grace: float = 5.0) -> int:
    def waiting(count: int) -> None:
        print(
            f"{count} action(s) look wrong; looking at them again in {grace:g}s (audit events are written "
            "asynchronously and may still be on their way)",
            file=sys.stderr,
            flush=True,
        )

    report = await audit_mod.verify(store, keyring, grace, waiting=waiting)
    problems = report.problems
    if problems:
        what = "UNVERIFIABLE (keys missing)" if all("is not in the keys file" in p.what for p in problems) else "BROKEN"
        print(f"audit chain {what}: {len(problems)} of {report.actions} action(s); first: {problems[0]}", file=out)
        for problem in problems[1:20]:
            print(f"  also: {problem}", file=out)
        if len(problems) > 20:
            print(f"  and {len(problems) - 20} more", file=out)
        return 1
    again = (
        (f"; {report.looked_again} action(s) looked at again after {grace:g}s (their events were still on their way)")
        if report.looked_again
        else ""
    )
    print(
        f"audit verified: {report.actions} action(s), {report.events} event(s), every chain intact and every "
        f"record has its events{again}",
        file=out,
    )
    return 0


async def export(store: OperatorStore, out: TextIO) -> int:
    count = 0
    async for event in audit_mod.export(store):
        out.write(json.dumps(event, ensure_ascii=False) + "\n")
        count += 1
    print(f"exported {count} event(s)", file=sys.stderr)
    return 0
