"""The MCP server inside the daemon, one session per `NMEM1 mcp` connection.

`import mcp` costs ~0.8 s, so this module is imported on the first MCP
connection only, never on the hook path. Filled by the recall work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from nmem_client import protocol

if TYPE_CHECKING:
    from nmemd.server import Daemon


async def serve_connection(
    daemon: Daemon, stream: anyio.abc.SocketStream, buffered: BufferedByteReceiveStream, body: bytes
) -> None:
    """Answer OK, then speak MCP (JSON-RPC lines) on `stream` until the peer leaves."""
    await stream.send(protocol.encode_error(protocol.ERR_INVALID, "MCP is not served yet"))
