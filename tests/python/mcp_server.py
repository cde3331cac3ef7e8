"""An MCP server of rho's own tests, written with the official Python SDK (FastMCP), that
misbehaves on request (run as a tool source by tests/tests/mcp_source.rs).

Usage: mcp_server.py [exit_at_start]. Its tools: echo, slow (progress), image, crash (exits 7),
hang (blocks its event loop: no answer, no ping), garbage (writes what is not MCP on stdout),
flood_stderr, big, spawn (children that call setsid and sleep), ask (elicitation), log, count
(how many calls of it this process has served), grow (adds the tool `grown` and says the list
changed)."""
import asyncio, os, sys, time

if sys.argv[1:] == ["exit_at_start"]:
    sys.stderr.write("refusing to start\n")
    sys.exit(3)

from mcp.server.fastmcp import FastMCP, Context, Image
from pydantic import BaseModel

mcp = FastMCP("misbehaving")

@mcp.tool()
def echo(text: str) -> str:
    """Answers its text."""
    return text

@mcp.tool()
async def slow(ms: int, ctx: Context) -> str:
    """Reports progress 3 times over ms milliseconds."""
    for step in range(3):
        await ctx.report_progress(step + 1, 3, f"step {step + 1}")
        await asyncio.sleep(ms / 3000)
    return f"slept {ms} ms"

@mcp.tool()
def image() -> Image:
    """A tiny PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\nfake", format="png")

calls_counted = 0

@mcp.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `grown` and tells the client its tool list changed."""
    def grown() -> str:
        """A tool added while the server runs."""
        return "grown"
    mcp.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grew"

@mcp.tool()
def count() -> int:
    """Answers how many calls of it this server process has served, this one included."""
    global calls_counted
    calls_counted += 1
    return calls_counted

@mcp.tool()
def crash() -> str:
    """Exits the server with status 7."""
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(7)

@mcp.tool()
def hang() -> str:
    """Blocks the server's event loop for good."""
    while True:
        time.sleep(3600)

@mcp.tool()
def garbage() -> str:
    """Writes a line that is not MCP on stdout."""
    os.write(1, b"this is not json-rpc\n")
    return "wrote garbage"

@mcp.tool()
def flood_stderr(lines: int) -> str:
    """Writes that many long lines on stderr."""
    for n in range(lines):
        sys.stderr.write(f"line {n} " + "x" * 4000 + "\n")
    sys.stderr.flush()
    return f"wrote {lines} lines"

@mcp.tool()
def big(bytes: int) -> str:
    """Answers that many bytes of text."""
    return "b" * bytes

@mcp.tool()
def fill_home(mib: int) -> str:
    """Writes that many MiB into $HOME/fill; answers how many went in, and how it stopped."""
    path = os.path.join(os.environ["HOME"], "fill")
    written = 0
    try:
        with open(path, "ab") as f:
            chunk = b"h" * (1 << 20)
            for _ in range(mib):
                f.write(chunk)
                f.flush()
                written += 1
        return f"wrote {written} MiB into {os.environ['HOME']}"
    except OSError as e:
        return f"stopped after {written} MiB: {e.strerror} (errno {e.errno})"

@mcp.tool()
def spawn(count: int) -> str:
    """Forks children that call setsid and sleep; answers their pids."""
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(3600)
            os._exit(0)
        pids.append(str(pid))
    return " ".join(pids)

class Confirm(BaseModel):
    confirm: bool

@mcp.tool()
async def ask(message: str, ctx: Context) -> str:
    """Asks the user to confirm."""
    result = await ctx.elicit(message=message, schema=Confirm)
    if result.action == "accept":
        return f"accepted: {result.data.confirm}"
    return result.action

@mcp.tool()
def traceparent(ctx: Context) -> str:
    """Answers the traceparent of its request's _meta ("none" without one)."""
    meta = ctx.request_context.meta
    extra = (meta.model_extra or {}) if meta else {}
    return extra.get("traceparent", "none")

@mcp.tool()
async def log(ctx: Context) -> str:
    """Logs at info and warning."""
    await ctx.info("an info line")
    await ctx.warning("a warning line")
    return "logged"

mcp.run()
