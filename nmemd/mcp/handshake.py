"""What the daemon's MCP server answers to the legacy handshake, written down for the bridge.

Why: an MCP client offers a server's tools only once the handshake is answered, and Codex 0.169
waits for an optional server only about a second (`mcp_optional_startup_grace_ms`) before it
leaves the server out of the session; Claude Code 2.1.330 does not wait at all (its first
requests say the server is "still connecting"). The daemon answers only after its ~1 s `import
mcp` (seconds on a loaded machine, more when the bridge must start the daemon first), so the
stdlib bridge answers the handshake itself from `nmem_client/mcp_handshake.json`, which is this
module's output: `python -m nmemd.mcp.handshake > nmem_client/mcp_handshake.json`
(tests/unit/test_mcp_handshake.py keeps the file equal to it).

The answers are the server's own: each handshake version is played against the real server
object, in process, and each reply is serialized as the socket transport serializes it.
"""

import json
import sys
from typing import Any, Final

import anyio

from nmemd.mcp.server import get_server, lowlevel
from nmemd.mcp.transport import wire_line

STEP_S: Final = 30.0  # bound on one in-process reply


ENVELOPE: Final = "io.modelcontextprotocol/"  # the 2026-07-28 per-request `_meta` keys' prefix
# What a client asks before it offers a server's tools (Codex: the legacy two; Claude Code 2.1.330: the
# modern four), answered here in the order they are sent.
LEGACY: Final = ("initialize", "tools/list")
MODERN: Final = ("server/discover", "prompts/list", "resources/list", "tools/list")


async def _play(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's replies to `messages` (a request's reply before the next message is sent)."""
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    server = lowlevel(await get_server())
    read_tx, read_rx = anyio.create_memory_object_stream[SessionMessage | Exception](4)
    write_tx, write_rx = anyio.create_memory_object_stream[SessionMessage](4)
    replies: list[dict[str, Any]] = []
    async with read_tx, read_rx, write_tx, write_rx, anyio.create_task_group() as tg:
        tg.start_soon(server.run, read_rx, write_tx, server.create_initialization_options())
        with anyio.fail_after(STEP_S):
            for message in messages:
                await read_tx.send(SessionMessage(jsonrpc_message_adapter.validate_python(message)))
                if "id" in message:
                    replies.append(json.loads(wire_line(await write_rx.receive())))
        tg.cancel_scope.cancel()
    return replies


async def _legacy(version: str) -> dict[str, Any]:
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "nmem", "version": "0"}}
    replies = await _play([
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ])  # fmt: skip
    return dict(zip(LEGACY, (r["result"] for r in replies), strict=True))


async def _modern(version: str) -> dict[str, Any]:
    client = {"protocolVersion": version, "clientInfo": {"name": "nmem", "version": "0"}, "clientCapabilities": {}}
    meta = {ENVELOPE + key: value for key, value in client.items()}
    messages = [{"jsonrpc": "2.0", "id": n, "method": m, "params": {"_meta": meta}} for n, m in enumerate(MODERN)]
    return dict(zip(MODERN, (r["result"] for r in await _play(messages)), strict=True))


async def answers() -> dict[str, Any]:
    """The server's results: for the legacy handshake the same for every version but `protocolVersion`
    (the bridge puts in the one it negotiated), `versions` it serves, `latest` the one it gives an
    unknown one; for the 2026-07-28 protocol (`modern`), per version."""
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

    played = [await _legacy(version) for version in HANDSHAKE_PROTOCOL_VERSIONS]
    for results, version in zip(played, HANDSHAKE_PROTOCOL_VERSIONS, strict=True):
        if results["initialize"].pop("protocolVersion") != version:
            raise RuntimeError(f"the server did not answer {version} with {version}")
    if any(results != played[0] for results in played):
        raise RuntimeError("the server's answers differ by protocol version: write each version's down")
    modern = {version: await _modern(version) for version in MODERN_PROTOCOL_VERSIONS}
    return {"latest": LATEST_HANDSHAKE_VERSION, "versions": list(HANDSHAKE_PROTOCOL_VERSIONS), **played[0],
            "modern": modern}  # fmt: skip


def render() -> str:
    """The file's text: sorted keys, one stable layout, so a diff shows what changed."""
    return json.dumps(anyio.run(answers), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
