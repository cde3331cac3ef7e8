"""rho serve --http as an OAuth 2.1 resource server, through the official MCP Python SDK (1.x)
and its client-credentials provider (run by tests/tests/oauth.rs). The client starts with no
token: rho's 401 names its RFC 9728 metadata, which names the issuer, whose metadata names the
token endpoint; the token asked for rho's URL (RFC 8707) is then sent with every request.
Usage: oauth_client.py URL ISSUER CLIENT_ID SECRET SCOPES TOOL [TOOL...]: lists the tools and
calls each TOOL ({"text": "over oauth"} for echo, {"size": 8} for checkerboard); a call refused
is reported, not raised. Prints one JSON line: the tools, each call's first text or error, and
the requests the client made (method and path) in order."""
import asyncio, json, sys

import httpx
from mcp import ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class Memory:
    """Token storage in memory: the client starts with none."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


ARGUMENTS = {"echo": {"text": "over oauth"}, "checkerboard": {"size": 8}}


async def main():
    url, issuer, client_id, secret, scopes, *tools = sys.argv[1:]
    seen = []

    async def log(request: httpx.Request):
        seen.append(f"{request.method} {request.url.path}")

    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=Memory(),
        client_id=client_id,
        client_secret=secret,
        scopes=scopes,
        issuer=issuer,
    )
    calls = {}
    async with httpx.AsyncClient(auth=auth, event_hooks={"request": [log]}, timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                for tool in tools:
                    try:
                        result = await session.call_tool(tool, ARGUMENTS.get(tool, {}))
                        calls[tool] = result.content[0].text if result.content[0].type == "text" else result.content[0].type
                    except Exception as e:  # a refusal (403) ends the request with an error
                        calls[tool] = f"refused: {type(e).__name__}: {e}"
    print(json.dumps({"tools": sorted(t.name for t in listed.tools), "calls": calls, "requests": seen}))


asyncio.run(main())
