"""Who may use the viewer: this user's browser on this machine, during this run.

The server listens on 127.0.0.1 only. Every request needs the run's secret: `nmem ui` opens a URL
carrying it once, the viewer trades it for a cookie (HttpOnly, SameSite=Strict) and every later
request must bring that cookie back. Another local user can reach the port but never learns the
secret (it is printed to the terminal of the user who ran `nmem ui` and kept in their browser).
A Host header other than the address we listen on is refused (a DNS-rebinding page names its own
host), and a request that changes anything must come from our own origin (a cross-site form is
refused even before the cookie's SameSite would have held it back).
"""

from __future__ import annotations

import hmac
import secrets
from typing import Final
from urllib.parse import parse_qs, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

COOKIE: Final = "nmem_ui"
TOKEN_PARAM: Final = "token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


def new_secret() -> str:
    return secrets.token_urlsafe(32)


class Guard:
    """ASGI middleware: a request passes only with our Host, the secret, and (to change state) our Origin."""

    def __init__(self, app: ASGIApp, *, secret: str, port: int) -> None:
        self.app = app
        self.secret = secret
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host", "")
        if host not in self.hosts:
            await _refuse(send, f"refused: this viewer answers to 127.0.0.1 only, not to {host!r}")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get(TOKEN_PARAM, [""])[0]
        if given and scope["method"] in SAFE_METHODS:
            if not self._is_secret(given):
                await _refuse(send, "refused: wrong token (open the URL `nmem ui` printed)")
                return
            rest = {k: v for k, v in query.items() if k != TOKEN_PARAM}
            target = scope["path"] + ("?" + urlencode(rest, doseq=True) if rest else "")
            await _redirect(send, target, self.secret)
            return
        if not self._is_secret(_cookie(headers.get("cookie", ""))):
            await _refuse(send, "refused: no session (open the URL `nmem ui` printed)")
            return
        if scope["method"] not in SAFE_METHODS:
            origin = headers.get("origin", "")
            if origin not in {f"http://{h}" for h in self.hosts}:
                await _refuse(send, f"refused: a change must come from this viewer's own page, not {origin!r}")
                return
        await self.app(scope, receive, send)

    def _is_secret(self, value: str) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), self.secret.encode())


def _cookie(header: str) -> str:
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return ""


async def _refuse(send: Send, message: str) -> None:
    body = (message + "\n").encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, target: str, secret: str) -> None:
    cookie = f"{COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [
                (b"location", target.encode("latin-1")),
                (b"set-cookie", cookie.encode()),
                (b"content-length", b"0"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
