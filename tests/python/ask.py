"""The `ask` gate through the official MCP Python SDK's elicitation (run by tests/tests/http.rs):
rho serve's rules ask about `echo`; the user approves the first call and declines the second.

- `modern` (SDK 2.x `Client`, default mode: 2026-07-28, where rho asks by an InputRequiredResult
  round trip);
- `legacy` (SDK 1.x `ClientSession`, 2025-11-25, where rho sends `elicitation/create`).

Usage: ask.py modern|legacy stdio|http RHO_OR_URL PLUGINS CONFIG. Prints one JSON line."""
import asyncio, sys, json, os, contextlib

mode, transport, target, plugins, config = sys.argv[1:6]
asked, answers = [], [True, False]

async def on_elicit(context, params):
    from mcp import types
    asked.append(params.message)
    if answers.pop(0):
        return types.ElicitResult(action="accept", content={"approve": True})
    return types.ElicitResult(action="decline")

def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)

def stdio_params():
    from mcp import StdioServerParameters
    return StdioServerParameters(command=target, args=["--config", config, "serve", "--plugins", plugins], env=dict(os.environ))

async def modern():
    from mcp import Client
    server = stdio_params() if transport == "stdio" else target
    async with Client(server, elicitation_callback=on_elicit) as client:
        version = client.session.protocol_version
        first = await client.call_tool("echo", {"text": "approved"})
        second = await client.call_tool("echo", {"text": "declined"})
        return version, first, second

async def legacy():
    from mcp import ClientSession
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            from mcp.client.stdio import stdio_client
            streams = await stack.enter_async_context(stdio_client(stdio_params()))
        else:
            from mcp.client.streamable_http import streamable_http_client
            streams = await stack.enter_async_context(streamable_http_client(target))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1], elicitation_callback=on_elicit))
        init = await session.initialize()
        first = await session.call_tool("echo", {"text": "approved"})
        second = await session.call_tool("echo", {"text": "declined"})
        return init.protocolVersion, first, second

version, first, second = asyncio.run(modern() if mode == "modern" else legacy())
print(json.dumps({"version": str(version), "asked": asked,
    "first": [text(first), bool(first.isError if hasattr(first, "isError") else first.is_error)],
    "second": [text(second), bool(second.isError if hasattr(second, "isError") else second.is_error)]}))
