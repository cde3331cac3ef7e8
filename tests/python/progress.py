"""rho serve through the official MCP Python SDK (run by tests/tests/serve_edges.rs):
50 back-to-back updates arrive as 50 progress notifications before each response, a 12 MB answer
is cut, and the session goes on. Prints one JSON line."""
import asyncio, sys, json
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    rho, plugins = sys.argv[1], sys.argv[2]
    params = StdioServerParameters(command=rho, args=["serve", "--plugins", plugins])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            runs = []
            for run in range(3):
                got = []
                async def on_progress(progress, total, message):
                    got.append(message)
                result = await session.call_tool("updates", {"count": 50, "interval_ms": 0}, progress_callback=on_progress)
                text = result.content[0].text
                runs.append({"progress": got, "text": text})
            big = await session.call_tool("big_output", {"bytes": 12000000})
            after = await session.call_tool("echo", {"text": "still here"})
            print(json.dumps({"runs": runs, "big_truncated": (big.meta or {}).get("rho/truncated"), "after": after.content[0].text}))

asyncio.run(main())
