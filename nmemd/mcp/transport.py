"""Transport: socket bytes <-> the memory streams `Server.run()` consumes.

One JSON-RPC message per line each way, exactly like mcp's stdio transport
(the bridge is a byte pump). mcp is imported inside the function only: this
module is imported with the package, before the (slow) mcp import has run.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from nmemd.jsonsafe import scrub

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

MAX_LINE: Final = 8 * 1024 * 1024  # one JSON-RPC message; far above anything a client sends
WRITER_FLUSH_S: Final = 5.0
DRAIN_S: Final = 30.0  # after the client half-closes, how long its pending requests may take
# Requests answered only when their stream ends (2026-07-28: the client's channel for change
# notifications): after the client's EOF nobody is left to listen, so they are not waited for.
OPEN_ENDED: Final = frozenset({"subscriptions/listen"})
PARSE_ERROR: Final = -32700  # JSON-RPC 2.0: not JSON; the reply's id is null
INVALID_REQUEST: Final = -32600  # JSON, but not a request, response or notification
ID_MIN: Final = -(2**63)  # ids must fit a signed 64-bit integer (pydantic and SQLite-bound code assume it)
ID_MAX: Final = 2**63 - 1


def refusal(raw: bytes) -> tuple[dict[str, object] | None, bytes | None]:
    """A line's message as Python values, or the JSON-RPC error line that answers it instead."""
    try:
        obj = json.loads(raw)
    except ValueError:  # not UTF-8 or not JSON
        return None, _error_line(None, PARSE_ERROR, "Parse error: the line is not JSON")
    obj = scrub(obj)
    if not isinstance(obj, dict):
        return None, _error_line(None, INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, int | str | None):
        return None, _error_line(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    if isinstance(rid, int) and not ID_MIN <= rid <= ID_MAX:
        return None, _error_line(rid, INVALID_REQUEST, "Invalid Request: id is outside the signed 64-bit range")
    return obj, None


def wire_line(sm: "SessionMessage") -> bytes:
    """A message as one line on the socket (nmemd.mcp.handshake writes down the same bytes)."""
    return sm.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def _error_line(rid: object, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return json.dumps(body).encode() + b"\n"


@asynccontextmanager
async def line_transport(
    stream: anyio.abc.ByteStream, buffered: BufferedByteReceiveStream
) -> AsyncIterator[
    tuple["MemoryObjectReceiveStream[SessionMessage | Exception]", "MemoryObjectSendStream[SessionMessage]"]
]:
    """One JSON-RPC message per line each way, exactly like the stdio transport (the bridge is a byte pump).

    When the client half-closes (the bridge's stdin reached EOF), requests it
    already sent are answered before the session ends: the SDK would otherwise
    cancel them with "Connection closed" the moment the read side closes.
    """
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, jsonrpc_message_adapter

    read_tx, read_rx = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_tx, write_rx = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    send_lock = anyio.Lock()  # the writer's replies and the reader's refusals never interleave on the socket
    settled = anyio.Event()  # after EOF: every request answered (or the writer gave up)
    in_flight: set[object] = set()
    eof = False

    def answered(request_id: object) -> None:
        in_flight.discard(request_id)
        if eof and not in_flight:
            settled.set()

    async def reader() -> None:
        nonlocal eof
        async with read_tx:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", MAX_LINE)
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    eof = True  # the client is done sending; let the answers it waits for go out first
                    if in_flight and not writer_done.is_set():
                        with anyio.move_on_after(DRAIN_S):
                            await settled.wait()
                    return  # closing read_tx ends Server.run()
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    return  # the peer vanished: nobody is left to answer
                except anyio.DelimiterNotFound as exc:
                    await read_tx.send(exc)
                    return
                if not line.strip():
                    continue
                obj, refused = refusal(line)
                if obj is None or refused is not None:
                    await send_raw(refused or b"")
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_python(obj, by_name=False)
                except Exception:  # valid JSON, not a JSON-RPC message (e.g. an id without a method)
                    rid = obj.get("id")
                    await send_raw(_error_line(rid, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message"))
                    continue
                if isinstance(message, JSONRPCRequest) and message.method not in OPEN_ENDED:
                    in_flight.add(message.id)
                elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                    answered((message.params or {}).get("requestId"))  # a cancelled request gets no answer
                await read_tx.send(SessionMessage(message))

    async def send_raw(data: bytes) -> None:
        try:
            async with send_lock:
                await stream.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the peer went away; the reader sees it next

    async def writer() -> None:
        try:
            async with write_rx:
                async for sm in write_rx:
                    async with send_lock:
                        await stream.send(wire_line(sm))
                    if isinstance(sm.message, JSONRPCResponse | JSONRPCError):
                        answered(sm.message.id)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the peer went away
        finally:
            writer_done.set()
            settled.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_rx, write_tx
        finally:
            await write_tx.aclose()  # Server.run() closes it too; closing twice is fine
            with anyio.move_on_after(WRITER_FLUSH_S, shield=True):
                await writer_done.wait()  # the last replies reach the socket before we close it
            tg.cancel_scope.cancel()  # reader() may still wait for bytes that will never come
