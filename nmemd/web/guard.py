"""Who may use the viewer: this user's browser on this machine, during this run.

The server listens on 127.0.0.1 only and serves nothing outside a secret path, `/<key>/`. Every
request needs the run's secret too: the first visit brings it once in the URL (`?token=`, from the
0600 file `nmem ui` opens, see cli/web.py), the viewer trades it for a cookie (HttpOnly,
SameSite=Strict) whose Path is the secret path, and every later request must bring that cookie back.

Why the path: a browser sends a cookie to every port of its host (cookies ignore ports), so a
cookie scoped to `/` would reach any other server on 127.0.0.1 the user opens, another user's
included. Scoped to `/<key>/`, it goes only where that path is named, and the path is known only
to this user's browser, terminal and 0600 files: it never appears on a command line, in a Referer
(Referrer-Policy: same-origin) or in a page of another origin.

And every connection must be this user's own (`peer_uid`, Linux): the viewer that stays keeps one
address, and while it is down (a reboot, `--stop`) another local user may listen on its port and
receive what a bookmark sends, the secret path and the cookie (issue #37, 5). Whoever copies them
still connects as their own uid, and is refused: the key and the cookie open the viewer only to
this user's browser. Where no /proc tells a socket's owner (macOS), the secret alone guards it.

A Host header other than the address we listen on is refused (a DNS-rebinding page names its own
host), a request that changes anything must come from our own origin, and no page may be framed
(a page on another port of 127.0.0.1 is "same-site" and could otherwise frame it).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import os
import secrets
from typing import Final
from urllib.parse import parse_qs, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE: Final = "nmem_ui"
TOKEN_PARAM: Final = "token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
# Sent with every answer, refusals too: no framing, no Referer to other origins, no sniffing, no
# copy of a page of memory in the browser's disk cache.
HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline';"
        b" img-src 'self' data:; frame-ancestors 'none'; base-uri 'self'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def form_token(secret: str) -> str:
    """The token a confirmation form carries: bound to the secret, but not the secret itself, so
    that a page's markup never holds what the cookie holds."""
    return hmac.new(secret.encode(), b"nmem-ui form", hashlib.sha256).hexdigest()


def new_key() -> str:
    """The secret path's name: 128 bits, URL-safe."""
    return secrets.token_urlsafe(16)


class Guard:
    """ASGI middleware: a request passes only on our Host, under our path, with the secret, and
    (to change state) from our Origin."""

    def __init__(self, app: ASGIApp, *, secret: str, key: str, port: int, max_age: int | None = None) -> None:
        self.app = app
        self.secret = secret
        self.root = f"/{key}"
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.max_age = max_age

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        uid = peer_uid(scope)
        if uid is not None and uid != os.getuid():
            await _answer(guarded_send, 403, "refused: this viewer serves its own user only")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if host not in self.hosts:
            await _answer(guarded_send, 403, f"refused: this viewer answers to 127.0.0.1 only, not to {host!r}")
            return
        path: str = scope["path"]
        if path == self.root:
            await _answer(guarded_send, 308, "", location=self.root + "/" + _query(scope))
            return
        if not path.startswith(self.root + "/"):
            await _answer(guarded_send, 404, "not found (open the address `nmem ui` printed)")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get(TOKEN_PARAM, [""])[0]
        if given and scope["method"] in SAFE_METHODS:
            if not self._is_secret(given):
                await _answer(guarded_send, 403, "refused: wrong token (open the address `nmem ui` printed)")
                return
            rest = {k: v for k, v in query.items() if k != TOKEN_PARAM}
            # Our own path, percent-encoded: never another site (`//host`), never a byte latin-1 lacks.
            target = quote(path, safe="/:@!$&'()*+,;=-._~") + ("?" + urlencode(rest, doseq=True) if rest else "")
            await _signed_in(guarded_send, target, self._cookie())
            return
        if not self._is_secret(_cookie(headers.get("cookie", ""))):
            await _answer(guarded_send, 403, "refused: no session (open the address `nmem ui` printed)")
            return
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin", "")
            if origin not in {f"http://{h}" for h in self.hosts}:
                await _answer(
                    guarded_send, 403, f"refused: a change must come from this viewer's own page, not {origin!r}"
                )
                return
        await self.app({**scope, "root_path": scope.get("root_path", "") + self.root}, receive, guarded_send)

    def _is_secret(self, value: str) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), self.secret.encode())

    def _cookie(self) -> str:
        """The secret, sent back only to our secret path (a cookie holds no port)."""
        age = f"; Max-Age={self.max_age}" if self.max_age else ""
        return f"{COOKIE}={self.secret}; HttpOnly; SameSite=Strict; Path={self.root}/{age}"


def peer_uid(scope: Scope) -> int | None:
    """The uid owning the client's end of this TCP connection to 127.0.0.1, from /proc/net/tcp (its
    row whose local address is the client's and remote address ours); None where that cannot be told
    (no /proc, the row gone)."""
    client, server = scope.get("client"), scope.get("server")
    if not client or not server:
        return None
    try:
        local = f"{_hex_ip(client[0])}:{int(client[1]):04X}"
        remote = f"{_hex_ip(server[0])}:{int(server[1]):04X}"
        with open("/proc/net/tcp", encoding="ascii") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def _hex_ip(address: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the 32-bit value in host (little-endian) order."""
    return "".join(f"{int(octet):02X}" for octet in reversed(address.split(".")))


async def _signed_in(send: Send, target: str, cookie: str) -> None:
    """The cookie, and a page that moves on to `target`: a redirect would not do, since a browser
    sent here by the file `nmem ui` opens (another site) holds a SameSite=Strict cookie back for
    the whole redirect chain; this page's own navigation is same-site."""
    url = html.escape(target)
    body = (
        f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={url}">'
        f'<title>nmem</title><p><a href="{url}">Open the nmem viewer</a></p>\n'
    ).encode()
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"set-cookie", cookie.encode("ascii")),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _query(scope: Scope) -> str:
    raw: bytes = scope.get("query_string", b"")
    return "?" + quote(raw.decode("latin-1"), safe="=&;%+/:@!$'()*,-._~?") if raw else ""


def _cookie(header: str) -> str:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return ""


async def _answer(send: Send, status: int, message: str, *, location: str = "", cookie: str = "") -> None:
    body = (message + "\n").encode() if message else b""
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if location:
        headers.append((b"location", location.encode("ascii")))
    if cookie:
        headers.append((b"set-cookie", cookie.encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
