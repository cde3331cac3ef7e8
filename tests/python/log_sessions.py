"""Two sessions of one `rho serve --http` through the official MCP Python SDK (run by
tests/tests/http.rs): the first sets its level to debug, the second sets none. Each calls
log_levels; each hears what its own level says. Usage: log_sessions.py URL. Prints one JSON line."""
import asyncio, sys, json
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

async def session(url, level, ready, go):
    heard = []
    async def on_log(params):
        heard.append(f"{params.level}:{params.data}")
    async with streamablehttp_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, logging_callback=on_log) as s:
            init = await s.initialize()
            if level:
                await s.set_logging_level(level)
            ready.set()
            await go.wait()
            result = await s.call_tool("log_levels", {})
            return {"heard": heard, "text": result.content[0].text,
                    "protocol": str(init.protocolVersion)}

async def main():
    url = sys.argv[1]
    first_ready, go = asyncio.Event(), asyncio.Event()
    second_ready = asyncio.Event()
    a = asyncio.create_task(session(url, "debug", first_ready, go))
    await first_ready.wait()
    b = asyncio.create_task(session(url, None, second_ready, go))
    await second_ready.wait()
    go.set()
    print(json.dumps({"debug": await a, "unset": await b}))

asyncio.run(main())
