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

const path = require('node:path');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const HERE = __dirname;
const PROTO_ROOT = process.env.COUNTERSIGN_PROTO_ROOT || path.resolve(HERE, '..', '..', '..', 'proto');
const RPC_PROTOS = path.join(HERE, 'protos'); // google/rpc/{status,error_details}.proto, vendored
const DEADLINE_MS = 15000;

const address = process.argv[2] || process.env.COUNTERSIGN_ADDRESS || '127.0.0.1:50051';
const title = process.argv[3] || process.env.TODO_TITLE || '买牛奶';

// -- the contract ---------------------------------------------------------------------------------

const LOADER_OPTIONS = {
  keepCase: true, // field names as in the .proto: tool_name, arguments_json, ...
  longs: String,
  enums: String, // ACTION_STATE_SUCCEEDED rather than 3
  defaults: true,
  oneofs: true, // InvokeResponse.outcome names the field that is set
  includeDirs: [PROTO_ROOT, RPC_PROTOS],
};
const definition = protoLoader.loadSync(
  ['countersign/v1/gateway.proto', 'countersign/v1/continuation.proto', 'countersign/v1/guard.proto'],
  LOADER_OPTIONS,
);
const v1 = grpc.loadPackageDefinition(definition).countersign.v1;

// google.rpc.Status and its details, to read the grpc-status-details-bin trailer.
const rpcRoot = new protobuf.Root();
rpcRoot.resolvePath = (_origin, target) => {
  // google/protobuf/*.proto are built into protobufjs; google/rpc/*.proto are vendored here.
  return target.startsWith('google/rpc/') ? path.join(RPC_PROTOS, target) : target;
};
rpcRoot.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
const Status = rpcRoot.lookupType('google.rpc.Status');
const DETAIL_TYPES = {};
for (const name of ['ErrorInfo', 'BadRequest', 'RetryInfo', 'PreconditionFailure', 'ResourceInfo']) {
  DETAIL_TYPES[`type.googleapis.com/google.rpc.${name}`] = rpcRoot.lookupType(`google.rpc.${name}`);
}

/** The google.rpc.Status of a failed call: {code, message, details: [{type, ...fields}]}, or null. */
function richStatus(err) {
  const raw = err && err.metadata ? err.metadata.get('grpc-status-details-bin') : [];
  if (!raw || raw.length === 0) return null;
  const status = Status.toObject(Status.decode(raw[0]), { defaults: true });
  status.details = (status.details || []).map((any) => {
    const type = DETAIL_TYPES[any.type_url];
    if (!type) return { type: any.type_url };
    const body = type.toObject(type.decode(any.value), { defaults: true, arrays: true, objects: true });
    return { type: any.type_url.split('/').pop(), ...body };
  });
  return status;
}

// -- small helpers --------------------------------------------------------------------------------

class Mismatch extends Error {}

function expect(what, ok, got) {
  if (!ok) throw new Mismatch(`expected ${what}, got ${typeof got === 'string' ? got : JSON.stringify(got)}`);
}

function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + DEADLINE_MS }, (err, response) =>
      err ? reject(err) : resolve(response));
  });
}

/** The error of a call that must fail. */
async function failure(client, method, request) {
  try {
    const response = await call(client, method, request);
    throw new Mismatch(`expected ${method} to fail, it answered ${JSON.stringify(response)}`);
  } catch (err) {
    if (err instanceof Mismatch) throw err;
    return err;
  }
}

function short(action) {
  let text = action.state.replace('ACTION_STATE_', '') + (action.replayed ? ' (replayed)' : '');
  if (action.receipt && action.receipt.resource_id) {
    text += `, receipt «${action.receipt.summary}» resource ${action.receipt.resource_id}`;
  }
  if (action.error && action.error.reason) text += `, ${action.error.reason}: ${action.error.message}`;
  return text;
}

function sameReceipt(a, b) {
  return JSON.stringify(a.receipt) === JSON.stringify(b.receipt);
}

function errorInfo(status) {
  return status && status.details.find((d) => d.type === 'google.rpc.ErrorInfo');
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

main().then(
  () => process.exit(0),
  (err) => {
    if (err instanceof Mismatch) {
      console.error(`✗ ${err.message}`);
    } else if (err && typeof err.code === 'number') {
      const status = richStatus(err);
      console.error(`✗ unexpected gRPC ${grpc.status[err.code]}: ${err.details} ${JSON.stringify(status)}`);
    } else {
      console.error(`✗ ${err && err.stack ? err.stack : err}`);
    }
    process.exit(1);
  },
);
