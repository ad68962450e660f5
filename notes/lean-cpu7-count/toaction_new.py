from google.protobuf import timestamp_pb2
from countersign.registry.templates import render
from countersign.path.receipts import _ACTION_STATES, unknown_message
def to_action2(action_id, tool, card, outcome, now_ms):
    kind = outcome.kind
    if kind is Kind.UNKNOWN:
        action = common_pb2.Action(action_id=action_id, state=_ACTION_STATES[kind], tool_name=tool.name)
        action.error.reason = outcome.reason
        action.error.message = unknown_message(outcome.message or outcome.reason)
        action.error.retryable = outcome.retryable
        return action
    if kind is Kind.SUCCEEDED:
        values = {**card.arguments, "action_id": action_id, "idempotency_key": action_id,
                  "receipt.resource_id": outcome.resource_id, "receipt.resource_version": outcome.resource_version}
        summary = render(tool.receipt.summary, values)
        status = common_pb2.RECEIPT_STATUS_SUCCEEDED
    else:
        summary = outcome.message
        status = common_pb2.RECEIPT_STATUS_FAILED
    seconds, millis = divmod(now_ms, 1000)
    receipt = common_pb2.Receipt(action_id=action_id, tool_name=tool.name, grant_id=card.grant, status=status,
        resource_id=outcome.resource_id, resource_version=outcome.resource_version, summary=summary,
        evidence_json=evidence(outcome), settled_at=timestamp_pb2.Timestamp(seconds=seconds, nanos=millis * 1_000_000))
    action = common_pb2.Action(action_id=action_id, state=_ACTION_STATES[kind], tool_name=tool.name, receipt=receipt)
    if kind is not Kind.SUCCEEDED:
        action.error.reason = outcome.reason
        action.error.message = outcome.message
        action.error.retryable = outcome.retryable
    return action
