#!/usr/bin/env node
// The countersignature from Node.js: the app backend's part, in Node, with node:crypto only (docs/approvals.md).
//
//   node approve.js jwks KEY_FILE
//       the backend's Ed25519 key (created, mode 0600, when KEY_FILE does not exist) as the JWKS the sidecar's
//       --approvals settings name; the kid is the key's RFC 7638 thumbprint.
//   node approve.js confirm ADDRESS KEY_FILE ISSUER POLICY_VERSION [TODO_TITLE]
//       against a sidecar whose create_todo is approval: signed and which trusts ISSUER with that JWKS:
//       [1] Invoke create_todo -> a card that needs the user's signed approval, with its approval_digest
//       [2] the agent's own Confirm -> PERMISSION_DENIED APPROVAL_REQUIRED, the card still READY
//       [3] the backend recomputes the digest from what the card shows (RFC 8785 + SHA-256) and compares
//       [4] an approval signed by a key the issuer does not list -> APPROVAL_INVALID (check key), still READY
//       [5] the user's approval, signed by the backend's key -> SUCCEEDED; the receipt names issuer, kid, jti
//       [6] a duplicate Confirm without the approval -> the same receipt, replayed
//
// The signed-in user is alice in tenant demo, session s-node-approve (a real backend takes them from its login
// session). Exits 0 when every step answered as expected, 1 on the first mismatch, 2 on bad usage.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const { grpc, v1, richStatus, errorInfo, expect, call, failure, short, run } = require('./contract');

const AUDIENCE = 'countersign';
const TTL_S = 120;

// -- the backend's key and its JWKS ---------------------------------------------------------------

function loadOrCreateKey(file) {
  if (!fs.existsSync(file)) {
    const { privateKey } = crypto.generateKeyPairSync('ed25519');
    fs.writeFileSync(file, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  }
  return crypto.createPrivateKey(fs.readFileSync(file));
}

/** The public JWK of an Ed25519 key, with its RFC 7638 thumbprint as kid. */
function publicJwk(privateKey) {
  const { crv, kty, x } = crypto.createPublicKey(privateKey).export({ format: 'jwk' });
  const kid = crypto.createHash('sha256').update(JSON.stringify({ crv, kty, x })).digest('base64url');
  return { kty, crv, x, kid, alg: 'EdDSA', use: 'sig' };
}

// -- the approval digest (docs/approvals.md, "The approval digest") -------------------------------

// RFC 8785 for I-JSON values: JSON.stringify writes strings and numbers as ECMAScript does (which is what the
// RFC specifies) and sort() orders keys by UTF-16 code units.
const jcs = (v) => (Array.isArray(v) ? `[${v.map(jcs).join(',')}]`
  : v !== null && typeof v === 'object'
    ? `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${jcs(v[k])}`).join(',')}}`
    : JSON.stringify(v));

/** The digest of what the card shows the user: recomputed by the backend, never taken from the card. */
function approvalDigest(card, policyVersion) {
  const expiresMs = Number(card.expires_at.seconds) * 1000 + Math.floor(card.expires_at.nanos / 1e6);
  const document = {
    v: 1,
    tool: card.tool_name,
    arguments: JSON.parse(card.prepared_arguments_json),
    preview: {
      title: card.preview.title,
      target: card.preview.target,
      impact: card.preview.impact,
      details: card.preview.details.map((d) => ({ label: d.label, value: d.value })),
    },
    policy_version: policyVersion,
    expires_at: new Date(expiresMs).toISOString(), // RFC 3339 UTC, 3 fraction digits, "Z"
  };
  return `sha256:${crypto.createHash('sha256').update(jcs(document), 'utf8').digest('base64url')}`;
}

// -- the approval: a compact JWS, EdDSA -----------------------------------------------------------

function signApproval(privateKey, kid, claims) {
  const b64 = (o) => Buffer.from(JSON.stringify(o), 'utf8').toString('base64url');
  const input = `${b64({ alg: 'EdDSA', typ: 'JWT', kid })}.${b64(claims)}`;
  return `${input}.${crypto.sign(null, Buffer.from(input, 'ascii'), privateKey).toString('base64url')}`;
}

function approvalClaims(issuer, context, card, digest) {
  const now = Math.floor(Date.now() / 1000);
  return {
    iss: issuer, aud: AUDIENCE, sub: context.actor_id, tid: context.tenant_id, sid: context.session_id,
    act: card.action_id, dig: digest, iat: now, exp: now + TTL_S, jti: crypto.randomUUID(),
    acr: 'urn:countersign:demo:acr:pwd', amr: ['pwd'],
  };
}

// -- the walk -------------------------------------------------------------------------------------

async function confirmWalk(address, keyFile, issuer, policyVersion, title) {
  const key = loadOrCreateKey(keyFile);
  const { kid } = publicJwk(key);
  const gateway = new v1.ToolGatewayService(address, grpc.credentials.createInsecure());
  const context = {
    tenant_id: 'demo', actor_id: 'alice', subject_id: 'alice', session_id: 's-node-approve',
    request_id: `node-${crypto.randomBytes(8).toString('hex')}`, role: 'user', locale: 'zh-CN',
  };
  const state = async (card) =>
    (await call(gateway, 'GetAction', { context, action_id: card.action_id })).action.state;
  console.log(`sidecar ${address}, issuer ${issuer}, kid ${kid}`);

  // [1] The agent proposes: a card that needs the user's signed approval.
  const invoked = await call(gateway, 'Invoke', {
    context, tool_name: 'create_todo', arguments_json: JSON.stringify({ title }),
  });
  expect('a confirmation card', invoked.outcome === 'confirmation', invoked.outcome);
  const card = invoked.confirmation;
  console.log(`[1] Invoke create_todo → card ${card.action_id}, ${card.approval}`);
  console.log(`    ${card.preview.title}「${card.preview.target}」 approval_digest ${card.approval_digest}`);
  expect('APPROVAL_REQUIREMENT_SIGNED', card.approval === 'APPROVAL_REQUIREMENT_SIGNED', card.approval);

  // [2] The agent alone cannot approve: refused, nothing claimed.
  const alone = await failure(gateway, 'Confirm', { context, token: card.token });
  const aloneInfo = errorInfo(richStatus(alone));
  console.log(`[2] the agent's own Confirm → ${grpc.status[alone.code]} ${aloneInfo && aloneInfo.reason}; `
    + `card ${await state(card)}`);
  expect('PERMISSION_DENIED APPROVAL_REQUIRED', alone.code === grpc.status.PERMISSION_DENIED
    && aloneInfo && aloneInfo.reason === 'APPROVAL_REQUIRED', richStatus(alone));
  expect('the card still READY', (await state(card)) === 'ACTION_STATE_READY', card.action_id);

  // [3] The backend renders the card to the signed-in user and hashes what it shows.
  const digest = approvalDigest(card, policyVersion);
  console.log(`[3] digest recomputed from what the card shows: ${digest}`);
  expect(`the card's approval_digest ${card.approval_digest}`, digest === card.approval_digest, digest);

  // [4] An approval from a key the issuer does not list (what an agent could forge): refused, still READY.
  const { privateKey: stranger } = crypto.generateKeyPairSync('ed25519');
  const forged = signApproval(stranger, publicJwk(stranger).kid, approvalClaims(issuer, context, card, digest));
  const bad = await failure(gateway, 'Confirm', { context, token: card.token, approval: forged });
  const badInfo = errorInfo(richStatus(bad));
  console.log(`[4] Confirm with a forged approval → ${grpc.status[bad.code]} ${badInfo && badInfo.reason} `
    + `(check ${badInfo && badInfo.metadata.check}); card ${await state(card)}`);
  expect('APPROVAL_INVALID, check key', badInfo && badInfo.reason === 'APPROVAL_INVALID'
    && badInfo.metadata.check === 'key', richStatus(bad));
  expect('the card still READY', (await state(card)) === 'ACTION_STATE_READY', card.action_id);

  // [5] The user approves: the backend signs, the card runs once.
  const approval = signApproval(key, kid, approvalClaims(issuer, context, card, digest));
  const done = (await call(gateway, 'Confirm', { context, token: card.token, approval })).action;
  const evidence = done.receipt.approval;
  console.log(`[5] Confirm with the user's approval → ${short(done)}`);
  console.log(`    receipt approval: issuer ${evidence.issuer}, kid ${evidence.kid}, jti ${evidence.jti}`);
  expect('SUCCEEDED', done.state === 'ACTION_STATE_SUCCEEDED' && !done.replayed, short(done));
  expect('the receipt naming our issuer and key', evidence.issuer === issuer && evidence.kid === kid, evidence);

  // [6] A duplicate Confirm replays the outcome (the approval is not needed to read it again).
  const again = (await call(gateway, 'Confirm', { context, token: card.token })).action;
  console.log(`[6] Confirm again → ${short(again)}`);
  expect('the same receipt, replayed',
    again.replayed && JSON.stringify(again.receipt) === JSON.stringify(done.receipt), short(again));

  gateway.close();
  console.log('node approve: all 6 steps behaved');
}

function usage() {
  console.error('usage: node approve.js jwks KEY_FILE\n'
    + '       node approve.js confirm ADDRESS KEY_FILE ISSUER POLICY_VERSION [TODO_TITLE]');
  process.exit(2);
}

const [verb, ...rest] = process.argv.slice(2);
if (verb === 'jwks' && rest.length === 1) {
  console.log(JSON.stringify({ keys: [publicJwk(loadOrCreateKey(rest[0]))] }));
} else if (verb === 'confirm' && (rest.length === 4 || rest.length === 5)) {
  const [address, keyFile, issuer, policyVersion, title = '签过字的待办'] = rest;
  run(() => confirmWalk(address, keyFile, issuer, policyVersion, title));
} else {
  usage();
}
