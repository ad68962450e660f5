// An MCP host written with the official TypeScript SDK, calling Countersign's MCP front door over Streamable HTTP.
//
//   node scenarios.mjs URL SCENARIO [TITLE] [TURN]
//
// SCENARIO: list (tools/list), read (list_todos), accept | decline | cancel (create_todo, the form elicitation
// answered so), none (create_todo from a client that declares no elicitation: the card comes back, nothing runs),
// url (create_todo from a client that declares URL elicitation: it prints the page's URL as a JSON line, as a host
// would open it, and accepts; the call then waits until the approval reaches the inbox).
// Who the host acts for travels in the X-Countersign-* headers; the turn in _meta io.countersign/turn.
// Prints one JSON line: what the server answered, and what it asked the user.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, scenario, title = "a todo from the TypeScript SDK", turn = `ts-${Date.now()}`] = process.argv.slice(2);
if (!url || !scenario) {
  console.error("usage: node scenarios.mjs URL list|read|accept|decline|cancel|none|url [TITLE] [TURN]");
  process.exit(2);
}
const headers = {
  "X-Countersign-Tenant": process.env.CS_TENANT ?? "t1",
  "X-Countersign-Actor": process.env.CS_ACTOR ?? "alice",
  "X-Countersign-Subject": process.env.CS_SUBJECT ?? "alice",
  "X-Countersign-Session": process.env.CS_SESSION ?? "s-mcp",
  "X-Countersign-Role": process.env.CS_ROLE ?? "user",
  "X-Countersign-Locale": process.env.CS_LOCALE ?? "en",
};
const elicits = ["accept", "decline", "cancel", "url"].includes(scenario);
const modes = scenario === "url" ? { form: {}, url: {} } : { form: {} };
const client = new Client(
  { name: "countersign-ts-host", version: "0.1.0" },
  { capabilities: elicits ? { elicitation: modes } : {} },
);
const asked = [];
if (elicits) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const mode = request.params.mode ?? "form";
    asked.push({ mode, message: request.params.message, url: request.params.url ?? null });
    if (mode === "url") {
      // the host opens the approval page for the user; here: say where, for the test playing the user
      console.log(JSON.stringify({ open: request.params.url, elicitationId: request.params.elicitationId }));
      return { action: "accept" };
    }
    return scenario === "accept" || scenario === "url" ? { action: "accept", content: {} } : { action: scenario };
  });
}
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
try {
  await client.connect(transport);
  const out = { scenario, protocol: transport.protocolVersion ?? null, asked };
  if (scenario === "list") {
    const { tools } = await client.listTools();
    out.tools = tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema, annotations: t.annotations, meta: t._meta }));
  } else if (scenario === "read") {
    out.result = await client.callTool({ name: "list_todos", arguments: {} });
  } else {
    const progress = [];
    out.result = await client.callTool(
      { name: "create_todo", arguments: { title }, _meta: { "io.countersign/turn": turn } },
      undefined,
      { onprogress: (p) => progress.push(p.progress), timeout: 60000, resetTimeoutOnProgress: true },
    );
    out.progress = progress;
  }
  console.log(JSON.stringify(out));
  await transport.terminateSession().catch(() => {});
  await client.close();
} catch (err) {
  console.error(`${scenario}: ${err?.code ?? ""} ${err?.message ?? err}`);
  await client.close().catch(() => {});
  process.exit(1);
}
