"""A host binary of an embedder's own that serves MCP over stdio (`rho_mcp::serve_stdio`),
through the official MCP Python SDK (run by tests/tests/embedder.rs): it lists the plugin's tools
and calls `echo`. Prints one JSON line.

Usage: embedded_mcp.py BINARY CWD [ARGS...]"""
import asyncio, sys, json
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    binary, cwd = sys.argv[1:3]
    params = StdioServerParameters(command=binary, args=sys.argv[3:], cwd=cwd,
                                   env={"PATH": "/usr/bin:/bin", "HOME": cwd})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            echo = await session.call_tool("echo", {"text": "hi over MCP"})
            print(json.dumps({
                "tools": sorted(t.name for t in tools.tools),
                "echo": echo.content[0].text,
                "is_error": echo.isError,
                "outcome": (echo.meta or {}).get("rho/outcome"),
            }))

asyncio.run(main())
