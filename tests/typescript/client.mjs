// The official MCP TypeScript client (2.4) against rho serve, over stdio or HTTP (run by
// tests/tests/http.rs). Negotiation `auto` (2026-07-28 when the server speaks it) or `legacy`
// (2025-11-25). It waits for a tool list change while a plugin is installed into the watched
// directory, then calls `echo` twice: rho's rules ask about it, the user approves the first
// call and declines the second.
// Usage: node client.mjs auto|legacy stdio|http RHO_OR_URL PLUGINS NEW_PLUGIN CONFIG
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { copyFileSync, renameSync } from "node:fs";
import { basename, join } from "node:path";

const [mode, transportKind, target, plugins, newPlugin, config] = process.argv.slice(2);
const asked = [];
const answers = [true, false];
let listChanged;
const changed = new Promise((resolve) => { listChanged = resolve; });

const client = new Client(
  { name: "rho-tests", version: "0.1.0" },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode } },
);
client.setRequestHandler("elicitation/create", async (request) => {
  asked.push(request.params.message);
  return answers.shift() ? { action: "accept", content: { approve: true } } : { action: "decline" };
});
client.setNotificationHandler("notifications/tools/list_changed", () => listChanged());

const transport = transportKind === "stdio"
  ? new StdioClientTransport({ command: target, args: ["--config", config, "serve", "--plugins", plugins], env: process.env })
  : new StreamableHTTPClientTransport(new URL(target));
await client.connect(transport);
const version = client.getNegotiatedProtocolVersion();
const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();
const before = await names();
let subscription;
if (version >= "2026-07-28") subscription = await client.listen({ toolsListChanged: true });
// As rho's tools install: a hidden file renamed into place.
const hidden = join(plugins, "." + basename(newPlugin) + ".tmp");
copyFileSync(newPlugin, hidden);
renameSync(hidden, join(plugins, basename(newPlugin)));
await Promise.race([changed, new Promise((_, fail) => setTimeout(() => fail(new Error("no list change")), 15000))]);
const after = await names();
if (subscription) await subscription.close();
const text = (result) => result.content.map((c) => c.text ?? "").join("");
const first = await client.callTool({ name: "echo", arguments: { text: "approved" } });
const second = await client.callTool({ name: "echo", arguments: { text: "declined" } });
console.log(JSON.stringify({
  version, before, after, asked,
  first: [text(first), Boolean(first.isError)],
  second: [text(second), Boolean(second.isError)],
}));
await client.close();
process.exit(0);
