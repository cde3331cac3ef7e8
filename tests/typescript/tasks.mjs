// The official MCP Tasks extension client (@modelcontextprotocol/ext-tasks 0.2) over the
// official TypeScript client (2.4) against `rho serve --http`, 2026-07-28 (run by
// tests/tests/tasks.rs). The extension's client needs a raw request path for the 2026-07-28 task
// wire: here a plain HTTP POST per JSON-RPC request.
// Usage:
//   node tasks.mjs URL run                  create, poll, a question answered, a cancel
//   node tasks.mjs URL start                two tasks (one ends quickly, one runs 30 s): their
//                                           serialized references
//   node tasks.mjs URL resume REFERENCES    those tasks resumed on a new session: their outcomes
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

const [url, phase, references] = process.argv.slice(2);
const PROTOCOL = "2026-07-28";
const clientInfo = { name: "rho-tasks-tests", version: "0.1.0" };
const clientCapabilities = {
  elicitation: { form: {} },
  extensions: { "io.modelcontextprotocol/tasks": {} },
};

let nextId = 0;

/** One request (`method` and `params`) POSTed as a JSON-RPC request with the 2026-07-28
 * headers; its response, from JSON or from an SSE stream. */
async function rawDispatch(message) {
  const request = { jsonrpc: "2.0", id: `ts-${++nextId}`, ...message };
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": request.method,
  };
  // SEP-2243: the name a request acts on, in a header (a tool's, a task's id).
  const name = request.params?.name ?? request.params?.taskId;
  if (name !== undefined) headers["mcp-name"] = name;
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(request) });
  const body = await response.text();
  if ((response.headers.get("content-type") ?? "").includes("text/event-stream")) {
    for (const line of body.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const message = JSON.parse(line.slice(5));
      if (message.id === request.id) return message;
    }
    throw new Error(`no response to ${request.method} in the stream: ${body}`);
  }
  return JSON.parse(body);
}

const asked = [];
const client = new Client(clientInfo, {
  capabilities: clientCapabilities,
  versionNegotiation: { mode: "auto" },
});
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const session = createTaskSessionFromClient(client, {
  endpointId: "rho-tasks-tests",
  rawDispatch,
  v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo, clientCapabilities },
  onInputRequest: async (request) => {
    asked.push(request.params.message);
    return { action: "accept", content: { confirm: true } };
  },
});

const text = (result) => (result?.content ?? []).map((c) => c.text ?? "").join("");
const outcomeOf = async (execution) => {
  const { outcome } = await execution.settle();
  return {
    status: outcome.status,
    text: outcome.status === "completed" ? text(outcome.result) : undefined,
    error: outcome.status === "failed" ? outcome.error.message : undefined,
  };
};

let report;
if (phase === "run") {
  const slow = await session.callTool("slow_compute", { seconds: 0.5 });
  const slowKind = slow.kind;
  const slowOutcome = await outcomeOf(slow);
  const confirm = await session.callTool("confirm_delete", { path: "/srv/ts" });
  const confirmKind = confirm.kind;
  const confirmOutcome = await outcomeOf(confirm);
  const long = await session.callTool("slow_compute", { seconds: 30 });
  const longKind = long.kind;
  await new Promise((resolve) => setTimeout(resolve, 300));
  await long.cancel();
  const longOutcome = await outcomeOf(long);
  const quick = await session.callTool("greet", { name: "Ada" });
  report = {
    slow: { kind: slowKind, ...slowOutcome },
    confirm: { kind: confirmKind, ...confirmOutcome },
    cancelled: { kind: longKind, ...longOutcome },
    greet: { kind: quick.kind, ...(await outcomeOf(quick)) },
    asked,
  };
} else if (phase === "start") {
  const ended = await session.callTool("slow_compute", { seconds: 0.2 });
  const running = await session.callTool("slow_compute", { seconds: 30 });
  report = { ended: ended.serializeReference(), running: running.serializeReference() };
  await ended.detach();
  await running.detach();
} else if (phase === "resume") {
  const { ended, running } = JSON.parse(references);
  report = {
    ended: await outcomeOf(await session.resumeTask(ended)),
    running: await outcomeOf(await session.resumeTask(running)),
  };
} else {
  throw new Error(`no phase ${phase}`);
}
console.log(JSON.stringify(report));
await session.close();
await client.close();
process.exit(0);
