"""rho serve --http through the official MCP Python SDK's Streamable HTTP client (run by
tests/tests/http.rs): lists the tools, calls echo, an image tool and a tool that sends progress.
Usage: http_client.py URL [TOKEN]. Prints one JSON line."""
import asyncio, sys, json
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

async def main():
    url = sys.argv[1]
    token = sys.argv[2] if len(sys.argv) > 2 else None
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools = await session.list_tools()
                echo = await session.call_tool("echo", {"text": "over http"})
                image = await session.call_tool("checkerboard", {"size": 8})
                got = []
                async def on_progress(progress, total, message):
                    got.append(message)
                updates = await session.call_tool("updates", {"count": 5, "interval_ms": 0}, progress_callback=on_progress)
                print(json.dumps({
                    "protocol": str(getattr(init, "protocol_version", getattr(init, "protocolVersion", ""))),
                    "tools": sorted(t.name for t in tools.tools),
                    "echo": echo.content[0].text,
                    "image": [c.type for c in image.content],
                    "image_mime": next((c.mimeType if hasattr(c, "mimeType") else c.mime_type) for c in image.content if c.type == "image"),
                    "progress": got,
                    "updates": updates.content[0].text,
                }))

asyncio.run(main())
