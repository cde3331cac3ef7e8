"""A plugin's tool asks the user, and answers blocks, through the official MCP Python SDK (run by
tests/tests/http.rs):

- `modern` (SDK 2.x `Client`, 2026-07-28: rho parks the call and asks by input-required rounds);
- `legacy` (SDK 1.x `ClientSession`, 2025-11-25: rho sends `elicitation/create` mid-call).

A client that can elicit accepts the first question (with a value) and declines the second; a
client that cannot is never asked, and the tool reads why. Then `blocks` answers text, audio,
resources, an image and a link in order.

Usage: tool_asks.py modern|legacy stdio|http RHO_OR_URL PLUGINS. Prints one JSON line."""
import asyncio, sys, json, os, contextlib

mode, transport, target, plugins = sys.argv[1:5]
asked, answers = [], [True, False]

def get(o, camel, snake):
    """A field of an SDK object: SDK 1.x names them in camelCase, 2.x in snake_case."""
    return getattr(o, camel) if hasattr(o, camel) else getattr(o, snake, None)

async def on_elicit(context, params):
    from mcp import types
    asked.append({"message": params.message, "schema": get(params, "requestedSchema", "requested_schema")})
    if answers.pop(0):
        return types.ElicitResult(action="accept", content={"confirm": True})
    return types.ElicitResult(action="decline")

def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)

def block(c):
    seen = {"type": c.type}
    if c.type == "text":
        seen["text"] = c.text
    elif c.type in ("image", "audio"):
        seen["mime"] = get(c, "mimeType", "mime_type")
        seen["data"] = c.data
    elif c.type == "resource":
        r = c.resource
        seen["uri"] = str(r.uri)
        seen["mime"] = get(r, "mimeType", "mime_type")
        seen["text"] = getattr(r, "text", None)
        seen["blob"] = getattr(r, "blob", None)
    elif c.type == "resource_link":
        seen["uri"] = str(c.uri)
        seen["name"] = c.name
        seen["description"] = c.description
    return seen

def stdio_params():
    from mcp import StdioServerParameters
    return StdioServerParameters(command=target, args=["serve", "--plugins", plugins], env=dict(os.environ))

async def modern():
    from mcp import Client
    server = stdio_params() if transport == "stdio" else target
    async with Client(server, elicitation_callback=on_elicit) as client:
        version = client.session.protocol_version
        first = await client.call_tool("ask", {"message": "Delete 3 files?"})
        second = await client.call_tool("ask", {"message": "And 3 more?"})
        blocks = await client.call_tool("blocks", {})
    async with Client(server) as client:
        unable = await client.call_tool("ask", {"message": "Anyone?"})
    return version, first, second, unable, blocks

async def legacy():
    from mcp import ClientSession
    async def session(stack, **kwargs):
        if transport == "stdio":
            from mcp.client.stdio import stdio_client
            streams = await stack.enter_async_context(stdio_client(stdio_params()))
        else:
            from mcp.client.streamable_http import streamable_http_client
            streams = await stack.enter_async_context(streamable_http_client(target))
        s = await stack.enter_async_context(ClientSession(streams[0], streams[1], **kwargs))
        return s, await s.initialize()
    async with contextlib.AsyncExitStack() as stack:
        s, init = await session(stack, elicitation_callback=on_elicit)
        first = await s.call_tool("ask", {"message": "Delete 3 files?"})
        second = await s.call_tool("ask", {"message": "And 3 more?"})
        blocks = await s.call_tool("blocks", {})
    async with contextlib.AsyncExitStack() as stack:
        s, _ = await session(stack)
        unable = await s.call_tool("ask", {"message": "Anyone?"})
    return init.protocolVersion, first, second, unable, blocks

version, first, second, unable, blocks = asyncio.run(modern() if mode == "modern" else legacy())
print(json.dumps({"version": str(version), "asked": asked,
    "first": json.loads(text(first)), "second": json.loads(text(second)),
    "unable": json.loads(text(unable)), "blocks": [block(c) for c in blocks.content]}))
