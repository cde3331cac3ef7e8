"""rho serve through the official MCP Python SDK (run by tests/tests/serve_edges.rs): a plugin's
log lines reach the client as notifications/message, in order and before the answer, at the level
the client set with logging/setLevel (none before it sets one). Prints one JSON line."""
import asyncio, sys, json
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    rho, plugins, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    params = StdioServerParameters(command=rho, args=["serve", "--plugins", plugins] + extra)
    heard = []
    async def on_log(params):
        heard.append({"level": params.level, "data": params.data, "logger": params.logger})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            init = await session.initialize()
            runs = {}
            for level in [None, "warning", "debug", "error"]:
                if level is not None:
                    await session.set_logging_level(level)
                heard.clear()
                result = await session.call_tool("log_levels", {})
                # Notifications are sent before the answer: nothing arrives later.
                runs[level or "unset"] = {"heard": list(heard), "text": result.content[0].text}
            caps = init.capabilities
            print(json.dumps({"runs": runs, "logging": caps.logging is not None}))

asyncio.run(main())
