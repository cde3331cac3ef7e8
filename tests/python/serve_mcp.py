"""`rho serve --mcp COMMAND` through the official MCP Python SDK (run by tests/tests/mcp_source.rs):
one list holds a plugin's tools and the MCP server's, and both are callable. Prints one JSON line.

Usage: serve_mcp.py RHO PLUGINS MCP_COMMAND [FLAGS...] (FLAGS go to `rho serve` as they are)"""
import asyncio, sys, json, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    rho, plugins, command = sys.argv[1:4]
    flags = sys.argv[4:]
    params = StdioServerParameters(command=rho, args=["serve", "--plugins", plugins, "--mcp", command, *flags], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            echo = await session.call_tool("echo", {"text": "from the plugin"})
            big = await session.call_tool("big", {"bytes": 5})
            print(json.dumps({
                "tools": sorted(t.name for t in tools.tools),
                "echo": echo.content[0].text,
                "big": big.structuredContent,
                "big_outcome": (big.meta or {}).get("rho/outcome"),
            }))

asyncio.run(main())
