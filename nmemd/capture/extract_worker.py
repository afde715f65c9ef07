"""The extraction worker: a child process of nmemd that turns hook payloads into `Extracted`.

Extraction (JSON decode, parsing, redaction) is most of the event loop's work per event,
and under CPython's GIL the loop and the SQLite writer thread share one core: a daemon
that extracts in its own process reached the same throughput pinned to one core as on
two. Here the second core does the extraction while the loop only moves bytes.

Wire format, both ways over the child's stdin/stdout, little-endian:
request `<IQ` (body length, sequence number) + the payload bytes; reply `<IQB`
(length, sequence number, status) + a msgpack `Extracted` (status OK) or an error text.
Replies come in request order, many per write. The worker exits when its stdin closes.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from typing import Final

import msgspec

from nmemd.capture.extract import extract_event
from nmemd.errors import InvalidEvent

REQUEST: Final = struct.Struct("<IQ")
REPLY: Final = struct.Struct("<IQB")
OK: Final = 0
INVALID: Final = 1  # the payload is refused (bad JSON, ...): the text says why
FAILED: Final = 2  # a bug in extraction: the daemon extracts this one itself
READ_CHUNK: Final = 1 << 20


def serve(skip_tools: frozenset[str], stdin: int = 0, stdout: int = 1) -> None:
    """Answer requests until stdin closes."""
    encode = msgspec.msgpack.Encoder().encode
    buf = bytearray()
    os.write(stdout, REPLY.pack(0, 0, OK))  # hello: imports are done
    while True:
        chunk = os.read(stdin, READ_CHUNK)
        if not chunk:
            return
        buf += chunk
        out: list[bytes] = []
        pos = 0
        while len(buf) - pos >= REQUEST.size:
            length, seq = REQUEST.unpack_from(buf, pos)
            end = pos + REQUEST.size + length
            if len(buf) < end:
                break
            body = bytes(buf[pos + REQUEST.size : end])
            pos = end
            try:
                status, reply = OK, encode(extract_event(body, skip_tools))
            except InvalidEvent as exc:
                status, reply = INVALID, str(exc).encode()
            except Exception as exc:  # noqa: BLE001 - reported, and the daemon extracts it itself
                status, reply = FAILED, repr(exc).encode()
            out.append(REPLY.pack(len(reply), seq, status))
            out.append(reply)
        del buf[:pos]
        if out:
            data = memoryview(b"".join(out))
            while data:
                data = data[os.write(stdout, data) :]


def main() -> None:
    # Ctrl-C in nmemd's terminal and systemd's SIGTERM to the whole unit reach this process too:
    # the daemon decides when it ends (EOF on stdin), so that it answers what it holds first.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    serve(frozenset(sys.argv[1:]))


if __name__ == "__main__":
    main()
