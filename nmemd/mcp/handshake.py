"""What the daemon's MCP server answers to the legacy handshake, written down for the bridge.

Why: an MCP client waits for `initialize` and `tools/list` before it offers a server's tools, and
Codex 0.169 waits for an optional server only about a second (`mcp_optional_startup_grace_ms`)
before it leaves the server out of the session. The daemon answers only after its ~1 s `import
mcp` (seconds on a loaded machine, more when the bridge must start the daemon first), so the
stdlib bridge answers these two itself from `nmem_client/mcp_handshake.json`, which is this
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


async def _play(version: str) -> dict[str, Any]:
    """The server's `initialize` and `tools/list` results for a client asking for `version`."""
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    server = lowlevel(await get_server())
    read_tx, read_rx = anyio.create_memory_object_stream[SessionMessage | Exception](4)
    write_tx, write_rx = anyio.create_memory_object_stream[SessionMessage](4)
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "nmem", "version": "0"}}
    messages = (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
    results: dict[str, Any] = {}
    async with read_tx, read_rx, write_tx, write_rx, anyio.create_task_group() as tg:
        tg.start_soon(server.run, read_rx, write_tx, server.create_initialization_options())
        with anyio.fail_after(STEP_S):
            for message in messages:
                await read_tx.send(SessionMessage(jsonrpc_message_adapter.validate_python(message)))
                if "id" in message:
                    reply = json.loads(wire_line(await write_rx.receive()))
                    results["initialize" if message["id"] == 1 else "tools/list"] = reply["result"]
        tg.cancel_scope.cancel()
    return results


async def answers() -> dict[str, Any]:
    """The server's results, the same for every handshake version but `protocolVersion` (the bridge
    puts in the one it negotiated); `versions` it serves, `latest` the one it gives an unknown one."""
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    played = [await _play(version) for version in HANDSHAKE_PROTOCOL_VERSIONS]
    for results, version in zip(played, HANDSHAKE_PROTOCOL_VERSIONS, strict=True):
        if results["initialize"].pop("protocolVersion") != version:
            raise RuntimeError(f"the server did not answer {version} with {version}")
    if any(results != played[0] for results in played):
        raise RuntimeError("the server's answers differ by protocol version: write each version's down")
    return {"latest": LATEST_HANDSHAKE_VERSION, "versions": list(HANDSHAKE_PROTOCOL_VERSIONS), **played[0]}


def render() -> str:
    """The file's text: sorted keys, one stable layout, so a diff shows what changed."""
    return json.dumps(anyio.run(answers), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
