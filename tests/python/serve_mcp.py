"""`rho serve --mcp COMMAND` through the official MCP Python SDK (run by tests/tests/mcp_source.rs):
one list holds a plugin's tools and the MCP server's, and both are callable; the server's
list_changed reaches the client as rho's own. Prints one JSON line.

Usage: serve_mcp.py RHO PLUGINS MCP_COMMAND [FLAGS...] (FLAGS go to `rho serve` as they are)"""
import asyncio, sys, json, os
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

async def main():
    rho, plugins, command = sys.argv[1:4]
    flags = sys.argv[4:]
    params = StdioServerParameters(command=rho, args=["serve", "--plugins", plugins, "--mcp", command, *flags], env=dict(os.environ))
    changed = asyncio.Event()
    async def on_message(message):
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ToolListChangedNotification):
            changed.set()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            tools = await session.list_tools()
            echo = await session.call_tool("echo", {"text": "from the plugin"})
            big = await session.call_tool("big", {"bytes": 5})
            await session.call_tool("grow", {})
            await asyncio.wait_for(changed.wait(), 20)
            grown = await session.call_tool("grown", {})
            print(json.dumps({
                "grown": (grown.structuredContent or {}).get("result"),
                "tools": sorted(t.name for t in tools.tools),
                "echo": echo.content[0].text,
                "big": big.structuredContent,
                "big_outcome": (big.meta or {}).get("rho/outcome"),
            }))

asyncio.run(main())
