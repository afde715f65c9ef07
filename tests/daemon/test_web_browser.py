"""The web viewer in a real browser: headless Chromium (Debian's) driven by Playwright.

What a person does: open the URL `nmem ui` prints, watch a hook event arrive in the live feed,
search for it, forget it, and read the context the next SessionStart gets. Each page is
photographed on the way (`NMEM_SCREENSHOTS=docs` writes the README's pictures).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.env import BIN
from support.helpers import wait_until
from support.web_viewer import PROJECT, Viewer, open_viewer, prompt

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium per test: about 20 s of the README command
WAIT_MS = 10_000  # bound on every wait for the page; the feed polls every 0.5 s
CHROMIUM_FLAGS = [  # no background traffic: this machine has no network beyond 127.0.0.1
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium_or_skip() -> str:
    """The Chromium to drive, with playwright to drive it; the test is skipped, with the reason, without them."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]' installs it)")
    chromium = os.environ.get("NMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium; .ci/run installs it)")
    return chromium


@pytest.fixture
def browser_page() -> Iterator[Any]:
    chromium = _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


def _shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("NMEM_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def _send(payload: dict[str, Any]) -> None:
    done = run_send(json.dumps({"cwd": PROJECT, **payload}).encode())
    assert done.returncode == 0 and done.stderr == b""


def _a_morning_of_work() -> None:
    """A short real-looking session, so the pages show what they are for."""
    s = "browser-1"
    prompt("the okapi exporter drops rows when the batch is empty; find out why", s)
    _send({"session_id": s, "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
           "tool_input": {"command": "pytest -q tests/test_exporter.py"},
           "error": "Exit code 1\nFAILED tests/test_exporter.py::test_empty_batch - AssertionError: 0 != 3"},
          )  # fmt: skip
    _send({"session_id": s, "hook_event_name": "PostToolUse", "tool_name": "Edit",
           "tool_input": {"file_path": f"{PROJECT}/okapi/exporter.py", "old_string": "if not batch:\n    return",
                          "new_string": "if not batch:\n    return self.flush()"},
           "tool_response": {"filePath": f"{PROJECT}/okapi/exporter.py"}})  # fmt: skip
    _send({"session_id": s, "hook_event_name": "PostToolUse", "tool_name": "Bash",
           "tool_input": {"command": "pytest -q tests/test_exporter.py"},
           "tool_response": {"stdout": "12 passed in 0.41s", "stderr": "", "interrupted": False}})  # fmt: skip
    _send({"session_id": s, "hook_event_name": "Stop"})


def test_the_viewer_in_a_browser(daemon: Daemon, browser_page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page = browser_page
    shots = _shots(tmp_path)
    daemon.start()
    _a_morning_of_work()
    with open_viewer() as v:
        page.goto(v.url(f"/feed?token={v.secret}"))  # the secret buys the cookie
        expect(page.locator("#feed tbody tr").first).to_be_visible()
        # the live feed: an event sent after the page loaded appears in it
        prompt("warm the wallaby cache after every deploy", "browser-2")
        expect(page.locator("#feed tbody tr.new", has_text="wallaby")).to_be_visible()
        page.screenshot(path=str(shots / "ui-feed.png"), full_page=True)
        # search finds it, the words marked
        page.goto(v.url("/search"))
        page.fill("input[name=q]", "wallaby cache")
        page.fill("input[name=project]", PROJECT)
        page.click("form.f button")
        hit = page.locator("#hits tbody tr", has_text="wallaby")
        expect(hit.locator("mark").first).to_have_text("wallaby")
        page.fill("input[name=q]", "why does the exporter fail on an empty batch")
        page.click("form.f button")
        expect(page.locator("#hits tbody tr").first).to_be_visible()
        page.screenshot(path=str(shots / "ui-search.png"), full_page=True)
        # an observation, its session around it
        page.locator("#hits tbody tr a", has_text="FAILED").first.click()
        expect(page.locator("h3", has_text="Its session around it")).to_be_visible()
        page.screenshot(path=str(shots / "ui-observation.png"), full_page=True)
        # forget asks first, then the search no longer finds it
        page.goto(v.url(f"/search?q=wallaby&project={PROJECT}"))
        page.locator("#hits tbody tr a", has_text="wallaby").first.click()
        page.click("a.danger")
        expect(page.locator("#confirm")).to_be_visible()
        page.screenshot(path=str(shots / "ui-confirm.png"), full_page=True)
        page.click("#confirm")
        expect(page.locator("#done")).to_contain_text("forgot 1 observation")
        page.goto(v.url(f"/search?q=wallaby&project={PROJECT}"))
        expect(page.locator("main")).to_contain_text("Nothing found")
        # the context preview is what `nmem context` prints
        done = subprocess.run([str(BIN / "nmem"), "context", "--project", PROJECT, "--json"],
                              capture_output=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        page.goto(v.url("/context"))
        page.fill("input[name=project]", PROJECT)
        page.click("form.f button")
        expect(page.locator("#context")).to_be_visible()
        assert page.locator("#context").inner_text() == json.loads(done.stdout)["context"]
        page.screenshot(path=str(shots / "ui-context.png"), full_page=True)
        for name in ("sessions", "status"):
            page.goto(v.url(f"/{name}"))
            page.screenshot(path=str(shots / f"ui-{name}.png"), full_page=True)
        # another site's page in the same browser: its form posts carry its own Origin: refused
        assert _foreign_post_status(page, v) == 403


def _foreign_post_status(page: Any, v: Viewer) -> int:
    """A form post the way a page of another origin would send it (this browser's cookie and all)."""
    reply = page.request.post(v.url("/do/forget"), form={"ids": "1", "csrf": "unknown"},
                              headers={"Origin": "http://evil.example"}, fail_on_status_code=False)  # fmt: skip
    return int(reply.status)


class _Neighbour:
    """Another server on 127.0.0.1, another user's say: records the Cookie header of every request
    a browser sends it, and serves a page that frames `frame_src` (issue #28, finding 2)."""

    def __init__(self, frame_src: str) -> None:
        import http.server
        import threading

        seen: list[str] = []
        self.cookies = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                seen.append(self.headers.get("Cookie") or "")
                body = f'<!doctype html><iframe id=f src="{frame_src}" onload="document.title=\'loaded\'"></iframe>'
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_secret_reaches_no_other_server_on_this_host_and_no_page_frames_the_viewer(
    daemon: Daemon, browser_page: Any
) -> None:
    """A signed-in browser that follows links to another port of 127.0.0.1 (cookies ignore ports)
    sends it no secret, and that port's page (same-site) cannot frame the viewer."""
    from playwright.sync_api import expect

    page = browser_page
    daemon.start()
    prompt("the okapi exporter keeps its secrets")
    with open_viewer() as v:
        page.goto(v.url(f"/feed?token={v.secret}"))
        expect(page.locator("#feed tbody tr").first).to_be_visible()
        neighbour = _Neighbour(v.url("/"))
        try:
            for path in ("/", f"/{v.key}x/", "/nmem/"):
                page.goto(f"http://127.0.0.1:{neighbour.port}{path}")
                expect(page).to_have_title("loaded")  # the frame's load ended, whatever it showed
                for frame in page.frames[1:]:
                    assert "okapi" not in frame.content(), "the viewer was shown inside another site's frame"
            assert len(neighbour.cookies) >= 3, neighbour.cookies  # the pages (and a favicon or two)
            assert not any(v.secret in c for c in neighbour.cookies), neighbour.cookies
        finally:
            neighbour.close()
        # and the viewer itself still has its session
        page.goto(v.url("/feed"))
        expect(page.locator("#feed tbody tr", has_text="okapi")).to_be_visible()


def test_nmem_ui_opens_the_browser_without_the_secret_on_its_command_line(
    daemon: Daemon, browser_page: Any, tmp_path: Path
) -> None:
    """`nmem ui` starts the browser with a 0600 file that forwards it (`ps` shows every user a
    command line); that file, opened by a real Chromium, signs it in (issue #28, finding 3)."""
    from playwright.sync_api import expect

    argv_file = tmp_path / "argv"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\n')
    browser.chmod(0o755)
    daemon.start()
    prompt("the okapi exporter opens in a browser")
    with open_viewer(env={"BROWSER": f"{browser} %s"}, browser=True) as v:
        argv = wait_until(lambda: argv_file.exists() and argv_file.read_text(), 20, "the browser to be started")
        assert v.secret not in argv and v.key not in argv, argv
        (target,) = argv.split()
        assert target.startswith("file:///")
        opener = Path(unquote(target[len("file://") :]))
        assert opener.stat().st_mode & 0o777 == 0o600 and opener.parent.stat().st_mode & 0o777 == 0o700
        assert v.secret in opener.read_text()
        browser_page.goto(target)
        expect(browser_page.locator("#latest")).to_contain_text("okapi")  # the home page
        assert v.secret not in browser_page.url  # the address bar and the history keep no token
    assert not opener.exists()  # gone with the viewer


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nmem_ui(*args: str) -> str:
    done = subprocess.run([str(BIN / "nmem"), "ui", "--no-open", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_bookmark_of_the_viewer_that_stays_works_after_the_browser_and_the_viewer_restart(
    daemon: Daemon, tmp_path: Path
) -> None:
    """Issue #32: `nmem ui --background` keeps an address; the first visit's cookie outlives the
    browser (a real Chromium profile, closed and opened again); `nmem ui` opens the running one."""
    chromium = _chromium_or_skip()
    import re

    from playwright.sync_api import expect, sync_playwright

    daemon.start()
    prompt("the okapi exporter keeps a bookmark")
    port = _free_port()
    first = _nmem_ui("--background", "--port", str(port))
    try:
        m = re.fullmatch(rf"nmem ui: (http://127\.0\.0\.1:{port}/[\w-]+/)\?token=(\S+)\n", first)
        assert m, first
        bookmark = m.group(1)
        state = daemon.home / "ui" / "viewer.json"
        assert state.stat().st_mode & 0o777 == 0o600 and state.parent.stat().st_mode & 0o777 == 0o700
        assert _nmem_ui() == first  # `nmem ui` opens the running one (same address), starts none
        profile = tmp_path / "profile"
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(str(profile), executable_path=chromium,
                                                           args=CHROMIUM_FLAGS)  # fmt: skip
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(first.removeprefix("nmem ui: ").strip())
            expect(page.locator("#latest")).to_contain_text("okapi")
            assert page.url == bookmark  # what the address bar shows, and a bookmark keeps
            context.close()  # the browser exits
            _nmem_ui("--stop")
            assert _nmem_ui("--background") == first  # the same address, the same secret
            context = p.chromium.launch_persistent_context(str(profile), executable_path=chromium,
                                                           args=CHROMIUM_FLAGS)  # fmt: skip
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(bookmark)
            expect(page.locator("#latest")).to_contain_text("okapi")
            context.close()
    finally:
        _nmem_ui("--stop")


OTHER = "/tmp/nmem-web-test-other"
HOSTILE = ("<script>window.__pwned = 1</script>", "stray </mark> tag", "collected 12 items [100%]")
WIDTHS = (1000, 390)  # a laptop's narrow window, a phone


def _fits(page: Any) -> list[str]:
    """What does not fit the window: the page wider than it, or a field its placeholder overflows."""
    return list(
        page.evaluate("""() => {
      const bad = [];
      if (document.documentElement.scrollWidth > window.innerWidth + 1)
        bad.push('page ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
      const ctx = document.createElement('canvas').getContext('2d');
      for (const el of document.querySelectorAll('input[placeholder]')) {
        const st = getComputedStyle(el); ctx.font = st.font;
        const room = el.clientWidth - parseFloat(st.paddingLeft) - parseFloat(st.paddingRight);
        if (ctx.measureText(el.placeholder).width > room + 1) bad.push('placeholder ' + el.placeholder);
      }
      for (const td of document.querySelectorAll('td')) {
        const r = td.getBoundingClientRect();
        if (r.width > 0 && r.right > window.innerWidth + 1) bad.push('cell off the page: ' + td.innerText.slice(0, 40));
      }
      return bad;
    }""")
    )


def test_every_page_at_two_widths_with_pictures_of_the_stored_data(
    daemon: Daemon, browser_page: Any, tmp_path: Path
) -> None:
    """Issue #32: each page at 1,000 px and at a phone's width (nothing off the page, placeholders
    whole), a chart that counts what is stored, the purge confirmation naming its rows and projects,
    and stored markup shown as text everywhere."""
    from playwright.sync_api import expect

    page = browser_page
    shots = _shots(tmp_path)
    daemon.start()
    _a_morning_of_work()
    for n in range(3):
        _send({"session_id": "other-1", "hook_event_name": "UserPromptSubmit", "cwd": OTHER,
               "prompt": f"okapi step {n} in the other project"})  # fmt: skip
    prompt("the okapi exporter for codex", "codex-1", agent="codex")
    for text in HOSTILE:
        prompt(f"okapi note {text}", "hostile-1")
    wide = "=" * 400 + " okapi " + "_" * 400  # a line that must not push the columns off the page
    _send({"session_id": "hostile-1", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "toolu_w",
           "tool_input": {"command": "pytest -q"},
           "tool_response": {"stdout": wide, "stderr": "", "interrupted": False}})  # fmt: skip
    today = db_rows(daemon.db, "SELECT count(*) FROM observations WHERE project = ?", (OTHER,))[0][0]
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with open_viewer() as v:
        page.goto(v.url(f"/?token={v.secret}"))
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for name, path in (("home", "/"), ("feed", "/feed"), ("search", f"/search?q=okapi&project={PROJECT}"),
                               ("sessions", "/sessions"), ("activity", "/activity"), ("context", "/context"),
                               ("status", "/status"),
                               ("purge", "/confirm/purge?q=okapi&project=*")):  # fmt: skip
                page.goto(v.url(path))
                expect(page.locator("main h2")).to_be_visible()
                assert _fits(page) == [], (width, name, _fits(page))
                assert v.secret not in page.content(), name  # forms carry a token derived from it
                if width == WIDTHS[0] and name in ("home", "sessions", "activity", "status", "purge"):
                    page.screenshot(path=str(shots / f"ui-{name}.png"), full_page=True)
                elif name == "home":
                    page.screenshot(path=str(shots / "ui-phone.png"), full_page=True)
        # the chart counts what is stored: today's bar of the other project
        page.goto(v.url("/activity"))
        label = f"{dt.date.today().isoformat()} · nmem-web-test-other: {today}"
        assert page.locator("#by-project rect title", has_text=label).count() == 1
        assert page.locator("#by-agent rect title", has_text="codex: 1").count() == 1
        # the context page lists the projects to choose from
        page.goto(v.url("/context"))
        page.locator("#projects a", has_text=OTHER).click()
        expect(page.locator("#context")).to_contain_text("okapi step")
        # the purge confirmation names its rows (project, type, title) and the projects it touches
        page.goto(v.url("/confirm/purge?q=okapi&project=*"))
        expect(page.locator("#touched")).to_contain_text(OTHER)
        expect(page.locator("#touched")).to_contain_text(PROJECT)
        rows = page.locator("#doomed tbody tr")
        count = int(re.search(r"delete (\d+) observations", page.locator("main").inner_text()).group(1))  # type: ignore[union-attr]
        assert rows.count() == min(count, 50) and count >= 8
        expect(rows.filter(has_text="okapi step 0")).to_contain_text(OTHER)
        # stored markup is text on every page that shows it, and no script of it ran
        for path, shown in (("/feed", HOSTILE), ("/search?q=okapi+note&project=*", HOSTILE),
                            ("/confirm/purge?q=okapi&project=*", HOSTILE), ("/sessions", HOSTILE[:1]),
                            ("/", HOSTILE[:1])):  # fmt: skip
            page.goto(v.url(path))
            for text in shown:
                expect(page.locator("main")).to_contain_text(text)
            assert page.locator("main mark", has_text="100%").count() == 0, path
        for (oid,) in db_rows(
            daemon.db, "SELECT id FROM observations WHERE session_id = 'hostile-1' AND type = 'prompt'"
        ):
            page.goto(v.url(f"/o/{oid}"))
            expect(page.locator("main pre")).to_contain_text("okapi note")
            assert any(text in page.locator("main pre").inner_text() for text in HOSTILE)
        assert page.evaluate("() => window.__pwned") is None and dialogs == []
