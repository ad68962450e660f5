// The Countersign contract for the Node examples (walkthrough.js, approve.js): the services loaded from
// proto/ with @grpc/proto-loader (no codegen), the rich error details of grpc-status-details-bin decoded,
// and small promise helpers.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_ROOT = process.env.COUNTERSIGN_PROTO_ROOT || path.resolve(__dirname, '..', '..', '..', 'proto');
const RPC_PROTOS = path.join(__dirname, 'protos'); // google/rpc/{status,error_details}.proto, vendored
const DEADLINE_MS = 15000;

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

function errorInfo(status) {
  return status && status.details.find((d) => d.type === 'google.rpc.ErrorInfo');
}

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

/** Exit 0 when main resolves; 1 with the reason (a Mismatch, or the gRPC status decoded) when it rejects. */
function run(main) {
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
}

module.exports = { grpc, v1, richStatus, errorInfo, Mismatch, expect, call, failure, short, run };
