"""The web viewer (`nmem ui`): the real command serving a real daemon's store, spoken to over HTTP.

Security first (the secret, the Host, the Origin, the confirmation token), then what a person does
with it: watch a hook event arrive in the live feed, find it, forget it, and read the context the
next SessionStart will get.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from support.daemon import Daemon
from support.env import BIN
from support.helpers import wait_until
from support.web_viewer import PROJECT, Viewer, login, open_viewer, prompt

FEED_WAIT_S = 10.0


@pytest.fixture
def viewer(daemon: Daemon) -> Iterator[Viewer]:
    daemon.start()
    with open_viewer() as v:
        yield v


def test_only_the_secret_on_our_own_host_and_origin_gets_in(viewer: Viewer) -> None:
    assert viewer.get("/")[0] == 403  # no secret
    assert viewer.request("GET", "/?token=wrong")[0] == 403
    assert viewer.get("/", headers={"Cookie": "nmem_ui=wrong"})[0] == 403
    login(viewer)
    assert viewer.get("/")[0] == 200
    for page in ("/search", "/sessions", "/context", "/status", "/search?q=anything"):
        assert viewer.get(page)[0] == 200, page
    # DNS rebinding: a page of another host that resolves to 127.0.0.1 sends its own Host
    assert viewer.get("/", headers={"Host": f"evil.example:{viewer.port}"})[0] == 403
    assert viewer.request("GET", f"/?token={viewer.secret}", headers={"Host": "evil.example"})[0] == 403
    # a change: only from our own page (Origin) and with the page's token
    form = {"ids": "1", "csrf": viewer.token}
    assert viewer.post("/do/forget", form, origin="http://evil.example")[0] == 403
    assert viewer.post("/do/forget", form, origin=None)[0] == 403
    assert viewer.post("/do/forget", {"ids": "1", "csrf": "guess"})[0] == 403
    assert viewer.post("/do/forget", {"ids": "1", "csrf": viewer.secret})[0] == 403  # the cookie's value is no token
    assert viewer.post("/do/forget", form, origin="null")[0] == 403


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_another_user_on_this_machine_is_refused(viewer: Viewer) -> None:
    """Another uid reaches the port (it is 127.0.0.1) but is refused whatever it asks: the viewer
    answers its own user's connections only (issue #37, 5)."""
    code = (
        "import http.client, sys\n"
        "def get(path):\n"
        f"    c = http.client.HTTPConnection('127.0.0.1', {viewer.port}, timeout=10)\n"
        f"    c.request('GET', path, headers={{'Host': '127.0.0.1:{viewer.port}'}})\n"
        "    return c.getresponse().status\n"
        f"sys.exit(0 if (get('/'), get('{viewer.root}/')) == (403, 403) else 1)\n"
    )
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.skip("no system python3 that another user may run")
    done = subprocess.run([python, "-I", "-c", code], user=65534, cwd="/", timeout=30)
    assert done.returncode == 0


def _sse_until(viewer: Viewer, after: int, needle: str) -> str:
    """Read the live feed (server-sent events) until an event holds `needle`; bounded."""
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=FEED_WAIT_S)
    conn.request(
        "GET",
        f"{viewer.root}/events?after={after}",
        headers={"Host": f"127.0.0.1:{viewer.port}", "Cookie": viewer.cookie},
    )
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("content-type", "").startswith("text/event-stream")
    deadline = time.monotonic() + FEED_WAIT_S
    seen = ""
    try:
        while time.monotonic() < deadline:
            line = reply.fp.readline().decode()
            seen += line
            if needle in line:
                return seen
        raise AssertionError(f"the feed did not show {needle!r} within {FEED_WAIT_S} s: {seen[-500:]!r}")
    finally:
        conn.close()


def test_a_hook_event_appears_in_the_feed_is_found_and_forgotten(viewer: Viewer, tmp_path: Path) -> None:
    login(viewer)
    prompt("set up the okapi exporter before the release")
    status, page = viewer.get("/feed")
    after = max(int(x) for x in re.findall(r'data-id="(\d+)"', page))
    from threading import Thread

    later = Thread(target=prompt, args=("the wallaby cache must be warmed after deploys",))
    later.start()  # sent while the page is open: the feed brings it
    try:
        event = _sse_until(viewer, after, "wallaby")
    finally:
        later.join(30)
    assert "event: observation" in event
    oid = int(re.findall(r'data-id=\\"(\d+)\\"', event)[-1])
    # search finds it, the matched word marked
    status, page = viewer.get("/search?" + urlencode({"q": "wallaby cache", "project": PROJECT}))
    assert status == 200 and f'href="o/{oid}"' in page and "<mark>wallaby</mark>" in page
    status, page = viewer.get(f"/o/{oid}")
    assert status == 200 and "the wallaby cache must be warmed" in page and "Its session around it" in page
    # forget asks first, showing what goes
    status, page = viewer.get(f"/confirm/forget?ids={oid}")
    assert status == 200 and f"#{oid} " in page and 'id="confirm"' in page
    status, page = viewer.post("/do/forget", {"ids": str(oid), "csrf": viewer.token})
    assert status == 200 and "forgot 1 observation" in page and "1 observations" not in page
    status, page = viewer.get("/search?" + urlencode({"q": "wallaby", "project": PROJECT}))
    assert status == 200 and f'href="o/{oid}"' not in page and "Nothing found" in page
    assert viewer.get(f"/o/{oid}")[0] == 404
    # the other one stays, and pinning goes through the daemon
    keep = int(re.search(r'href="o/(\d+)"', viewer.get("/search?q=okapi&project=*")[1]).group(1))  # type: ignore[union-attr]
    status, _, _ = viewer.request("POST", "/do/pin", body={"ids": str(keep), "csrf": viewer.token},
                                  headers={"Origin": f"http://127.0.0.1:{viewer.port}"})  # fmt: skip
    assert status == 303
    assert "<th>pinned</th><td class=k>True</td>" in viewer.get(f"/o/{keep}")[1]
    home = viewer.get("/")[1]  # the home page lists what is pinned
    pinned = re.search(r'<table class="l" id="pinned">.*?</table>', home, re.S)
    assert pinned is not None and f'href="o/{keep}"' in pinned.group(0) and "okapi" in pinned.group(0)


def test_the_context_preview_is_what_the_next_session_start_gets(viewer: Viewer) -> None:
    login(viewer)
    prompt("teach the parser about nested okapi blocks")
    done = subprocess.run([str(BIN / "nmem"), "context", "--project", PROJECT, "--json"], capture_output=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)["context"]
    assert expected, "nmem context printed nothing to compare with"
    status, page = viewer.get("/context?" + urlencode({"project": PROJECT}))
    assert status == 200
    shown = re.search(r'<pre id="context">(.*?)</pre>', page, re.S)
    assert shown is not None
    import html

    assert html.unescape(shown.group(1)) == expected
    assert f"{len(expected):,} characters of a 5,000-character budget" in page


def test_bad_input_gets_a_clear_answer(viewer: Viewer) -> None:
    login(viewer)
    prompt("anything at all")
    status, page = viewer.get("/search?q=x&since=yesterday-ish")
    assert status == 400 and "neither a span" in page and "Traceback" not in page
    status, page = viewer.get("/sessions?project=no-such-project-anywhere")
    assert status == 400 and "no project named" in page
    assert viewer.get("/o/999999")[0] == 404
    assert viewer.get("/confirm/explode?ids=1")[0] == 404
    status, page = viewer.get("/confirm/forget?ids=")
    assert status == 400 and "no observation ids" in page
    status, page = viewer.get("/search?" + urlencode({"q": '"'}))
    assert status == 400 and "nothing to search for" in page
    wait_until(lambda: viewer.proc.poll() is None, 1, "the viewer still runs")


def test_purge_by_filter_shows_what_it_removes_and_asks_first(viewer: Viewer) -> None:
    login(viewer)
    for text in ("retire the okapi exporter", "the okapi exporter is gone", "keep the wallaby cache"):
        prompt(text)
    status, page = viewer.get("/search?" + urlencode({"q": "okapi", "project": PROJECT}))
    link = re.search(r'id="purge" href="([^"]+)"', page)
    assert status == 200 and link is not None
    import html

    status, page = viewer.get("/" + html.unescape(link.group(1)))
    assert status == 200 and "Purge will delete <b>2</b> observations" in page
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page))
    assert fields["csrf"] == viewer.token and fields["q"] == "okapi" and viewer.secret not in page
    status, page = viewer.post("/do/purge", {k: html.unescape(v) for k, v in fields.items()})
    assert status == 200 and "purged 2 observations" in page
    assert "Nothing found" in viewer.get("/search?" + urlencode({"q": "okapi", "project": PROJECT}))[1]
    assert "<mark>wallaby</mark>" in viewer.get("/search?" + urlencode({"q": "wallaby", "project": PROJECT}))[1]


def test_long_lists_come_a_page_at_a_time(viewer: Viewer) -> None:
    login(viewer)
    for n in range(52):
        prompt(f"numbered prompt {n}", session=f"paged-{n:02}")
    first = viewer.get("/feed")[1]
    older = re.search(r'id="older" href="(feed\?before=\d+)"', first)
    assert older is not None and "EventSource" in first
    second = viewer.get("/" + older.group(1))[1]
    assert "EventSource" not in second  # an older page is not live
    ids = [re.findall(r'data-id="(\d+)"', page) for page in (first, second)]
    assert len(ids[0]) == 50 and not set(ids[0]) & set(ids[1]) and len(ids[0]) + len(ids[1]) == 52
    import html

    sessions = viewer.get("/sessions")[1]
    more = re.search(r'id="older" href="([^"]+)"', sessions)
    assert more is not None and sessions.count(">paged-") == 30
    rest = viewer.get("/" + html.unescape(more.group(1)))[1]
    assert rest.count(">paged-") == 22 and ">paged-00<" in rest and ">paged-00<" not in sessions
    assert viewer.get("/sessions?before=soon")[0] == 400
    # a purge's confirmation names its first 50 rows and how many more
    status, page = viewer.get("/confirm/purge?" + urlencode({"q": "numbered prompt", "project": "*"}))
    doomed = re.search(r'<table class="l" id="doomed">.*?</table>', page, re.S)
    assert status == 200 and doomed is not None and doomed.group(0).count("<tr><td") == 50
    assert "Purge will delete <b>52</b> observations" in page and "… and 2 more." in page


def test_search_and_sessions_tell_the_agents_apart(viewer: Viewer) -> None:
    login(viewer)
    prompt("tune the okapi exporter for codex", session="web-cx", agent="codex")
    prompt("tune the okapi exporter for claude", session="web-cc")
    status, page = viewer.get("/search?" + urlencode({"q": "okapi exporter", "project": PROJECT, "agent": "codex"}))
    assert status == 200 and "for codex" in page and "for claude" not in page
    status, page = viewer.get("/search?" + urlencode({"q": "okapi", "project": PROJECT, "agent": "claude-code"}))
    assert status == 200 and "for claude" in page and "for codex" not in page
    status, page = viewer.get("/search?" + urlencode({"q": "okapi", "agent": "gemini-ish"}))
    assert status == 400 and "unknown agent" in page
    assert "codex" in viewer.get("/sessions")[1]


def _raw_request(viewer: Viewer, target: bytes) -> tuple[int, bytes]:
    """A request line sent byte for byte (http.client would refuse a non-ASCII target)."""
    import socket

    with socket.create_connection(("127.0.0.1", viewer.port), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % viewer.port)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return int(reply.split(b" ", 2)[1]), reply


def test_every_answer_forbids_framing_and_no_address_leads_off_site(viewer: Viewer) -> None:
    """Issue #28: findings 2 (framing) and 12 (an open redirect, a 500 on an odd path)."""
    for path, raw in (("/", False), ("/", True), ("/?token=wrong", False), ("/status", False)):
        status, headers, _ = viewer.request("GET", path, raw=raw)
        assert status in (403, 404), (path, status)
        assert "frame-ancestors 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "same-origin"
    login(viewer)
    status, headers, _ = viewer.request("GET", "/status")
    assert status == 200 and headers["x-frame-options"] == "DENY"
    root, secret = viewer.root.encode(), viewer.secret.encode()
    for target in (b"//evil.example/?token=" + secret, root + b"//evil.example/?token=" + secret,
                   b"/%E2%82%AC?token=" + secret, root + b"/%E2%82%AC?token=" + secret,
                   "/€?token=".encode() + secret, root + "/€?token=".encode() + secret):  # fmt: skip
        status, reply = _raw_request(viewer, target)
        assert status < 500, (target, reply)
        # where the answer sends the browser (a redirect, or the page that signs it in): our path only
        for to in re.findall(rb"(?im)^location: *(\S+)|content=\"0;url=([^\"]*)\"", reply):
            assert (to[0] or to[1]).startswith(root + b"/"), (target, reply)
    wait_until(lambda: viewer.proc.poll() is None, 1, "the viewer still runs")


def test_purge_from_a_search_keeps_every_filter_of_the_search(viewer: Viewer) -> None:
    """Issue #28, finding 7: the file filter (and the agent) went missing between the search and
    its purge, which then offered to delete every row holding the words."""
    import html

    from support.daemon import run_send

    login(viewer)
    for n, name in enumerate(("okapi/exporter.py", "okapi/reader.py")):
        payload = {"session_id": "web-f", "hook_event_name": "PostToolUse", "tool_name": "Edit", "cwd": PROJECT,
                   "tool_use_id": f"toolu_{n}", "tool_input": {"file_path": f"{PROJECT}/{name}",
                   "old_string": "a", "new_string": "the okapi rows"}}  # fmt: skip
        assert run_send(json.dumps(payload).encode()).returncode == 0
    prompt("why does the okapi exporter drop rows", session="web-f")
    prompt("the okapi exporter for codex", session="web-g", agent="codex")
    query = {"q": "okapi", "project": PROJECT, "file": "exporter.py"}
    status, page = viewer.get("/search?" + urlencode(query))
    assert status == 200 and page.count('href="o/') == 1
    link = re.search(r'id="purge" href="([^"]+)"', page)
    assert link is not None
    status, page = viewer.get("/" + html.unescape(link.group(1)))
    assert status == 200 and "Purge will delete <b>1</b> observations" in page, page
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page))
    status, page = viewer.post("/do/purge", {k: html.unescape(v) for k, v in fields.items()})
    assert status == 200 and "purged 1 observation" in page and "1 observations" not in page
    status, page = viewer.get("/search?" + urlencode({"q": "okapi", "project": PROJECT}))
    assert page.count('href="o/') == 3, page  # the other file's edit and both prompts stay
    # the agent too: a purge of codex's okapi rows leaves Claude Code's
    status, page = viewer.get("/confirm/purge?" + urlencode({"q": "okapi", "project": PROJECT, "agent": "codex"}))
    assert status == 200 and "Purge will delete <b>1</b> observations" in page, page


@pytest.mark.slow
def test_half_open_connections_neither_stall_the_viewer_nor_flood_its_stderr(daemon: Daemon) -> None:
    """Issue #28, finding 9 (slow-loris by any local user): 400 connections that send half a request
    head, against a viewer whose file limit is 256. The page still answers, the oldest half-open
    connections are closed, a head that never ends is closed after its deadline, stderr stays small."""
    import socket

    daemon.start()
    held: list[socket.socket] = []
    with open_viewer(max_files=256) as v:
        try:
            for _ in range(400):
                s = socket.create_connection(("127.0.0.1", v.port), timeout=10)
                s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Slow: " % v.port)
                held.append(s)
            login(v)
            assert v.get("/status")[0] == 200
            # the first ones were closed to make room (EOF), the head that never ends is closed late
            held[0].settimeout(30)
            assert held[0].recv(100) == b""
            late = socket.create_connection(("127.0.0.1", v.port), timeout=30)
            held.append(late)
            late.sendall(b"GET / HTTP/1.1\r\n")
            assert late.recv(100) == b""  # bounded by the socket's timeout (the deadline is 10 s)
            assert v.get("/status")[0] == 200
        finally:
            for s in held:
                s.close()
        v.proc.terminate()
        v.proc.wait(10)
        assert v.proc.stderr is not None
        err = v.proc.stderr.read()
    assert len(err) < 4000 and b"Traceback" not in err, err[-2000:]


def test_the_activity_pictures_count_what_is_stored_after_they_were_first_drawn(viewer: Viewer) -> None:
    """The tally is counted once, then kept up to date from the rows stored since (issue #32)."""
    import datetime as dt

    login(viewer)
    prompt("the okapi exporter, counted once")
    today = dt.date.today().isoformat()

    def shown() -> int:
        status, page = viewer.get("/activity")
        assert status == 200
        m = re.search(rf"<title>{today} · nmem-web-test-project: (\d+)</title>", page)
        return int(m.group(1)) if m else 0

    before = shown()
    assert before >= 1
    prompt("the okapi exporter, counted again", session="web-2")
    prompt("the okapi exporter, and again", session="web-2", agent="codex")
    assert shown() == before + 2
    status, page = viewer.get("/activity")
    assert f"<title>{today} · codex: 1</title>" in page


def test_the_viewer_that_stays_trusts_only_a_private_state_file_of_its_own(tmp_path: Path) -> None:
    """Its secret lives in $NMEM_HOME/ui/viewer.json: a copy others may read (or a link) is no secret;
    a new one is made, private from its first byte."""
    from nmemd.web import service

    home = str(tmp_path / "home")
    first = service.for_port(home, 47001)
    service.save(home, first)
    state = tmp_path / "home" / "ui" / "viewer.json"
    assert state.stat().st_mode & 0o777 == 0o600 and service.load(home) == first
    assert service.for_port(home, 47002).secret == first.secret  # the bookmark's secret is kept
    state.chmod(0o644)
    assert service.load(home) is None and service.for_port(home, 47001).secret != first.secret
    state.unlink()
    (tmp_path / "elsewhere.json").write_bytes(b'{"port": 1, "key": "k", "secret": "s"}')
    state.symlink_to(tmp_path / "elsewhere.json")
    assert service.load(home) is None
    assert service.running(home) is None
