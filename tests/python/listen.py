"""The official MCP Python SDK against rho serve, over stdio or HTTP (run by tests/tests/http.rs):
the client waits for a tool list change, a plugin is installed into the watched directory, and the
change arrives; the next tools/list shows the new tool.

- `modern` (SDK 2.x `Client` in its default mode, auto: 2026-07-28 when the server speaks it):
  through `subscriptions/listen`;
- `legacy` (SDK 1.x `ClientSession`, initialize handshake): `notifications/tools/list_changed`.

Usage: listen.py modern|legacy stdio|http RHO_OR_URL PLUGINS NEW_PLUGIN. Prints one JSON line."""
import asyncio, sys, json, os, shutil, contextlib

def install(plugins, new_plugin):
    # As rho's tools install: a hidden file renamed into place.
    hidden = os.path.join(plugins, "." + os.path.basename(new_plugin) + ".tmp")
    shutil.copy(new_plugin, hidden)
    os.rename(hidden, os.path.join(plugins, os.path.basename(new_plugin)))

async def modern(transport, target, plugins, new_plugin):
    from mcp import Client, StdioServerParameters
    server = StdioServerParameters(command=target, args=["serve", "--plugins", plugins], env=dict(os.environ)) if transport == "stdio" else target
    async with Client(server) as client:
        version = client.session.protocol_version
        before = sorted(t.name for t in (await client.list_tools()).tools)
        async with client.listen(tools_list_changed=True) as changes:
            install(plugins, new_plugin)
            event = await asyncio.wait_for(changes.__anext__(), 15)
        after = sorted(t.name for t in (await client.list_tools()).tools)
        return {"version": str(version), "before": before, "after": after, "event": type(event).__name__}

async def legacy(transport, target, plugins, new_plugin):
    from mcp import ClientSession, StdioServerParameters, types
    changed = asyncio.Event()
    async def on_message(message):
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            changed.set()
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            from mcp.client.stdio import stdio_client
            streams = await stack.enter_async_context(stdio_client(StdioServerParameters(command=target, args=["serve", "--plugins", plugins], env=dict(os.environ))))
        else:
            from mcp.client.streamable_http import streamable_http_client
            streams = await stack.enter_async_context(streamable_http_client(target))
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1], message_handler=on_message))
        init = await session.initialize()
        before = sorted(t.name for t in (await session.list_tools()).tools)
        install(plugins, new_plugin)
        await asyncio.wait_for(changed.wait(), 15)
        after = sorted(t.name for t in (await session.list_tools()).tools)
        return {"version": str(init.protocolVersion), "before": before, "after": after, "event": "ToolListChangedNotification"}

mode, transport, target, plugins, new_plugin = sys.argv[1:6]
run = modern if mode == "modern" else legacy
print(json.dumps(asyncio.run(run(transport, target, plugins, new_plugin))))
