"""One MCP session per `NMEM1 mcp` connection: check the request, answer OK, then speak MCP."""

import logging
import os
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from nmem_client import protocol
from nmemd.capture.project import project_root
from nmemd.errors import ToolInputError
from nmemd.mcp.server import Caller, caller_var, get_server, lowlevel
from nmemd.mcp.transport import line_transport

if TYPE_CHECKING:
    from nmemd.capture.host import Host

LOG = logging.getLogger("nmemd.mcp")


def _parse_body(body: bytes) -> str | None:
    """`{"project": "/abs/path" | null}` -> the project root (hooks map cwd the same way), or None."""
    try:
        request = msgspec.json.decode(body) if body.strip() else {}
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise ToolInputError("the mcp request body is not JSON") from None
    if not isinstance(request, dict):
        raise ToolInputError('expected {"project": "/abs/path" | null}')
    project = request.get("project")
    if project is None or project == "":
        return None
    if not isinstance(project, str) or not os.path.isabs(project) or "\0" in project:
        raise ToolInputError("project must be an absolute path or null")
    return project_root(project)


async def _reply(stream: anyio.abc.ByteStream, data: bytes) -> bool:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return False
    return True


async def serve_connection(
    daemon: "Host", stream: anyio.abc.SocketStream, buffered: BufferedByteReceiveStream, body: bytes
) -> None:
    """Answer OK, then speak MCP (JSON-RPC lines) on `stream` until the peer leaves."""
    try:
        project = _parse_body(body)
    except ToolInputError as exc:
        LOG.warning("refused an MCP connection: %s", exc)
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, str(exc)))
        return
    try:
        app = await get_server()
    except Exception:
        LOG.exception("cannot start the MCP server")
        await _reply(stream, protocol.encode_error(protocol.ERR_INTERNAL, "the MCP server is unavailable"))
        return
    if not await _reply(stream, protocol.encode_ok(b"")):
        return
    server = lowlevel(app)
    token = caller_var.set(Caller(daemon=daemon, project=project))
    LOG.info("MCP session opened (project %s)", project or "unknown")
    try:
        async with anyio.create_task_group() as session:

            async def end_when_daemon_stops() -> None:
                await daemon.stopping.wait()  # an open MCP session must not hold up a shutdown
                session.cancel_scope.cancel()

            session.start_soon(end_when_daemon_stops)
            async with line_transport(stream, buffered) as (read_rx, write_tx):
                await server.run(read_rx, write_tx, server.create_initialization_options())
            session.cancel_scope.cancel()
    except Exception:  # one broken session must never take the daemon with it
        LOG.exception("MCP session failed")
    finally:
        caller_var.reset(token)
        LOG.info("MCP session closed")
