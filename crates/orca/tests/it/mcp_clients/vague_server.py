"""A control for mcp_clients.rs: a server whose one tool takes an argument of any type, the
kind of schema the Inspector's `--strict` check flags."""

from typing import Any

from mcp.server import MCPServer

server = MCPServer("vague")


@server.tool()
def echo(value: Any, note: str | None = None) -> str:
    """Echo anything."""
    return str(value)


server.run()
