#!/usr/bin/env node
// The Countersign write path from Node.js (@grpc/grpc-js + @grpc/proto-loader), against a running sidecar:
//
//   Invoke create_todo -> the confirmation card -> Confirm twice at once (one executes, one is replayed)
//   -> GetAction (the receipt) -> OpenContinuation / ClaimContinuation / SettleContinuation (the final reply)
//   -> CheckReply with a false claim (REPLACED) -> rich errors: a bad argument (ErrorInfo + BadRequest)
//   and a forged token (ErrorInfo CONFIRMATION_TOKEN_INVALID), decoded from grpc-status-details-bin.
//
// Usage: node walkthrough.js [ADDRESS] [TODO_TITLE]
//        (or COUNTERSIGN_ADDRESS / TODO_TITLE in the environment; default 127.0.0.1:50051 and 买牛奶)
// Exits 0 when every step answered as expected, 1 on the first mismatch, 2 on bad usage.
'use strict';

const crypto = require('node:crypto');
const { grpc, v1, richStatus, errorInfo, expect, call, failure, short, run } = require('./contract');

const address = process.argv[2] || process.env.COUNTERSIGN_ADDRESS || '127.0.0.1:50051';
const title = process.argv[3] || process.env.TODO_TITLE || '买牛奶';

function sameReceipt(a, b) {
  return JSON.stringify(a.receipt) === JSON.stringify(b.receipt);
}

// -- the walk -------------------------------------------------------------------------------------

async function main() {
  const credentials = grpc.credentials.createInsecure();
  const gateway = new v1.ToolGatewayService(address, credentials);
  const continuations = new v1.ContinuationService(address, credentials);
  const guard = new v1.ReplyGuardService(address, credentials);
  const turn = `node-${crypto.randomBytes(8).toString('hex')}`;
  const context = {
    tenant_id: 'demo', actor_id: 'alice', subject_id: 'alice', session_id: 's-node',
    request_id: turn, role: 'user', locale: 'zh-CN',
  };
  console.log(`sidecar ${address}, turn ${turn}`);

  // [1] Invoke: a write becomes a card, nothing is executed yet.
  const invoked = await call(gateway, 'Invoke', {
    context, tool_name: 'create_todo', arguments_json: JSON.stringify({ taskTitle: title }),
  });
  expect('a confirmation card', invoked.outcome === 'confirmation', invoked.outcome);
  const card = invoked.confirmation;
  const prepared = JSON.parse(card.prepared_arguments_json);
  console.log(`[1] Invoke create_todo → card ${card.action_id}`);
  console.log(`    ${card.preview.title}「${card.preview.target}」 ${card.preview.impact}`);
  console.log(`    prepared ${card.prepared_arguments_json}, risk ${card.risk}, token ${card.token.slice(0, 12)}…`);
  expect(`prepared title ${title}`, prepared.title === title, prepared);
  expect('a cs1 token', card.token.startsWith('cs1.'), card.token);

  // [2] Confirm twice at once: one claim wins and executes, the other is replayed.
  const both = await Promise.all([0, 1].map(() => call(gateway, 'Confirm', { context, token: card.token })));
  const actions = both.map((r) => r.action);
  const originals = actions.filter((a) => !a.replayed);
  const replays = actions.filter((a) => a.replayed);
  expect('one original and one replayed answer', originals.length === 1 && replays.length === 1,
    actions.map(short));
  const first = originals[0];
  let other = replays[0];
  console.log(`[2] Confirm ×2 at once → ${short(first)} | ${short(other)}`);
  expect('the original SUCCEEDED', first.state === 'ACTION_STATE_SUCCEEDED', short(first));
  if (other.state === 'ACTION_STATE_RUNNING') {
    other = (await call(gateway, 'Confirm', { context, token: card.token, wait_ms: 5000 })).action;
    console.log(`    the duplicate saw RUNNING; with wait_ms → ${short(other)}`);
  }
  expect('the replayed receipt equal to the original', other.replayed && sameReceipt(first, other), short(other));
  console.log(`    replayed: ${replays.length}, same receipt: yes`);

  // [3] GetAction: where the action stands, with its receipt.
  const got = (await call(gateway, 'GetAction', { context, action_id: card.action_id })).action;
  console.log(`[3] GetAction → ${short(got)}`);
  expect('SUCCEEDED with the same receipt', got.state === 'ACTION_STATE_SUCCEEDED' && sameReceipt(first, got),
    short(got));
  expect('a succeeded receipt', got.receipt.status === 'RECEIPT_STATUS_SUCCEEDED', got.receipt.status);

  // [4] The continuation: the final reply, described from the receipt, never doing the write again.
  const snapshot = { question: `帮我建一个待办：${title}`, locale: 'zh-CN', lead_in: '好的，' };
  const opened = (await call(continuations, 'OpenContinuation', { context, action_id: card.action_id, snapshot }))
    .continuation;
  console.log(`[4] OpenContinuation → ${opened.state} ${opened.continuation_id}`);
  expect('READY (opened after the success)', opened.state === 'CONTINUATION_STATE_READY', opened.state);
  const claimed = (await call(continuations, 'ClaimContinuation', { context, token: opened.token })).continuation;
  console.log(`    ClaimContinuation → ${claimed.state}, receipt «${claimed.receipt.summary}»`);
  expect('RUNNING with the receipt', claimed.state === 'CONTINUATION_STATE_RUNNING'
    && claimed.receipt.action_id === card.action_id, claimed.state);
  const reply = `好的，待办「${title}」已经帮你创建好了。`;
  // the claim's lease: only the generator that won the claim may settle (or release) it
  const settled = (await call(continuations, 'SettleContinuation',
    { context, token: opened.token, reply_text: reply, claim_id: claimed.claim_id })).continuation;
  console.log(`    SettleContinuation → ${settled.state}: ${settled.reply_text}`);
  expect('SETTLED', settled.state === 'CONTINUATION_STATE_SETTLED', settled.state);

  // [5] The reply guard: a success claim the receipts do not back is replaced.
  const falseClaim = '已经帮你删除了';
  const verdict = await call(guard, 'CheckReply', { context, reply_text: falseClaim, action_ids: [card.action_id] });
  console.log(`[5] CheckReply «${falseClaim}» → ${verdict.verdict}: ${verdict.reply_text} (${verdict.reason})`);
  expect('GUARD_VERDICT_REPLACED', verdict.verdict === 'GUARD_VERDICT_REPLACED', verdict.verdict);
  expect('a replacement text', verdict.reply_text && verdict.reply_text !== falseClaim, verdict.reply_text);

  // [6] Rich errors: an argument the schema does not know.
  const badArgs = await failure(gateway, 'Invoke', {
    context, tool_name: 'create_todo', arguments_json: JSON.stringify({ title, owner: 'mallory' }),
  });
  const badStatus = richStatus(badArgs);
  const badInfo = errorInfo(badStatus);
  const badRequest = badStatus && badStatus.details.find((d) => d.type === 'google.rpc.BadRequest');
  console.log(`[6] Invoke with an unknown argument → ${grpc.status[badArgs.code]}, `
    + `ErrorInfo ${badInfo && badInfo.reason} (domain ${badInfo && badInfo.domain})`);
  expect('INVALID_ARGUMENT', badArgs.code === grpc.status.INVALID_ARGUMENT, grpc.status[badArgs.code]);
  expect('ErrorInfo ARGS_INVALID', badInfo && badInfo.reason === 'ARGS_INVALID', badStatus);
  expect('a BadRequest field violation naming owner', badRequest
    && badRequest.field_violations.some((v) => v.description.includes('owner')), badStatus);
  for (const v of badRequest.field_violations) console.log(`    BadRequest ${v.field || '(root)'}: ${v.description}`);

  // [7] A forged token: INVALID_ARGUMENT with ErrorInfo CONFIRMATION_TOKEN_INVALID.
  const forged = card.token.slice(0, -1) + (card.token.endsWith('A') ? 'B' : 'A');
  const err = await failure(gateway, 'Confirm', { context, token: forged });
  const status = richStatus(err);
  const info = errorInfo(status);
  console.log(`[7] Confirm with a forged token → ${grpc.status[err.code]}: ${err.details}`);
  console.log(`    google.rpc.Status code ${status && status.code}, ErrorInfo reason ${info && info.reason}, `
    + `domain ${info && info.domain}`);
  expect('INVALID_ARGUMENT', err.code === grpc.status.INVALID_ARGUMENT, grpc.status[err.code]);
  expect('ErrorInfo CONFIRMATION_TOKEN_INVALID in domain countersign',
    info && info.reason === 'CONFIRMATION_TOKEN_INVALID' && info.domain === 'countersign', status);

  for (const client of [gateway, continuations, guard]) client.close();
  console.log('node walkthrough: all 7 steps behaved');
}

run(main);
