"""Two principals' sessions of the official MCP Python SDK (1.x ClientSession, Streamable HTTP)
against one `rho serve --http` under a policy file (run by tests/tests/policy.rs): each lists its
tools; the policy file is replaced; the session whose list the new policy changes gets
`notifications/tools/list_changed`, the other none within a grace period; each lists again.

Usage: policy_sessions.py URL TOKEN_A TOKEN_B POLICY_FILE NEW_POLICY_FILE. Prints one JSON line:
{"a": {"before": [...], "after": [...], "told": bool}, "b": {...}}."""
import asyncio, contextlib, json, os, sys


async def main(url, token_a, token_b, policy, new_policy):
    import httpx
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamable_http_client

    told = {"a": asyncio.Event(), "b": asyncio.Event()}

    def handler(name):
        async def on_message(message):
            root = getattr(message, "root", message)
            if isinstance(root, types.ToolListChangedNotification):
                told[name].set()
        return on_message

    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        for name, token in (("a", token_a), ("b", token_b)):
            client = await stack.enter_async_context(
                httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30))
            streams = await stack.enter_async_context(streamable_http_client(url, http_client=client))
            session = await stack.enter_async_context(
                ClientSession(streams[0], streams[1], message_handler=handler(name)))
            await session.initialize()
            sessions[name] = session
        report = {}
        for name, session in sessions.items():
            report[name] = {"before": sorted(t.name for t in (await session.list_tools()).tools)}
        # As an editor saves: a new file renamed over the old one.
        staged = policy + ".new"
        with open(new_policy) as src, open(staged, "w") as dst:
            dst.write(src.read())
        os.rename(staged, policy)
        # The changed session hears within the reload bound; the other then gets a grace period.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.wait([asyncio.ensure_future(e.wait()) for e in told.values()],
                             return_when=asyncio.FIRST_COMPLETED), 15)
        await asyncio.sleep(2)
        for name, session in sessions.items():
            report[name]["after"] = sorted(t.name for t in (await session.list_tools()).tools)
            report[name]["told"] = told[name].is_set()
        return report


print(json.dumps(asyncio.run(main(*sys.argv[1:6]))))
