"""The MCP server inside the daemon, one session per `NMEM1 mcp` connection.

Imported on the first MCP connection only (never on the hook path); nothing in
this package imports mcp/pydantic at its top level (see `server.get_server`).

- `session`: per connection: check the request, answer OK, run the server on it.
- `server`: the daemon's one MCPServer (built and cached on first use), the six
  tools registered on it, the caller's project in a ContextVar.
- `tools`: the tools' logic over a SQLite connection: the text the model reads, nothing else.
- `transport`: JSON-RPC lines on the socket <-> the memory streams `Server.run` consumes.

This package is `nmemd.mcp`; every import of the mcp SDK here is absolute
(`from mcp.server ...`), so it always means the third-party package.
"""

from nmemd.mcp.server import build_server, get_server, lowlevel
from nmemd.mcp.session import serve_connection

__all__ = ["build_server", "get_server", "lowlevel", "serve_connection"]
