"""The viewer's routes: each page asks the daemon what the CLI would (`control.read`), and each
change goes through the daemon's write methods after a confirmation page, never around it."""

from __future__ import annotations

import hmac
import json
import os
import sqlite3
import threading
from collections.abc import AsyncIterator
from html import escape
from typing import Any, Final

import anyio
import msgspec
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from nmemd.capture.project import project_root
from nmemd.config import Settings
from nmemd.control import control
from nmemd.daemon.status import DaemonFacts, Status
from nmemd.errors import DaemonUnavailable, NmemError, QueryError
from nmemd.recall.queries import ALL_PROJECTS, when
from nmemd.web import charts, pages
from nmemd.web.guard import Guard, form_token
from nmemd.web.insights import Insights
from nmemd.web.pages import when as when_text
from nmemd.wording import plural

FEED_ROWS: Final = 50  # a page of the feed
SESSION_ROWS: Final = 30  # a page of sessions
HOME_SESSIONS: Final = 6
FEED_POLL_S: Final = 0.5  # a hook's event shows within this (plus the daemon's commit)
WRITE_TIMEOUT_S: Final = 300.0  # a purge rebuilds the full-text index: large stores take a while
ACTIONS: Final = frozenset({"pin", "unpin", "forget", "purge"})


def create_app(settings: Settings, *, secret: str, key: str, port: int, max_age: int | None = None) -> Starlette:
    """The viewer for `settings`' store, answering only under `/<key>/` with `secret` on
    127.0.0.1:`port` (guard.py); `max_age`: the cookie outlives the browser (a viewer that stays)."""
    root = f"/{key}"
    token = form_token(secret)
    insights = Insights(settings.db, settings.spool)
    threading.Thread(target=insights.warm, name="nmem-ui-warm", daemon=True).start()

    async def in_thread(fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def shapes(rows: list[dict[str, Any]]) -> dict[str, str]:
        drawn = await in_thread(insights.shapes, [r["session_id"] for r in rows])
        return {sid: charts.shape(f"shape-{n}", points) for n, (sid, points) in enumerate(drawn.items())}

    async def home(request: Request) -> Response:
        try:
            recent = await read("sessions", {"project": ALL_PROJECTS, "limit": HOME_SESSIONS})
            projects = await in_thread(insights.projects)
            pinned = await in_thread(insights.pinned)
            act = await in_thread(insights.activity)
        except (NmemError, sqlite3.Error) as exc:
            return await html("Home", pages.error(str(exc)))
        picture = charts.bars("home-activity", "Observations per day, by project", act.days, act.by_project,
                              _short_names(act.by_project))  # fmt: skip
        return await html("Home", pages.home(projects, recent, await shapes(recent), pinned, picture))

    async def activity(request: Request) -> Response:
        try:
            act = await in_thread(insights.activity)
            total = await in_thread(insights.total)
        except (NmemError, sqlite3.Error) as exc:
            return await html("Activity", pages.error(str(exc)))
        body = pages.activity(
            charts.bars("by-project", "By project", act.days, act.by_project, _short_names(act.by_project)),
            charts.bars("by-agent", "By agent", act.days, act.by_agent, {}),
            charts.growth("growth", act.days, act.total, total),
        )
        return await html("Activity", body)

    async def read(method: str, params: dict[str, Any]) -> Any:
        return await anyio.to_thread.run_sync(control.read, settings, method, params)

    async def html(title: str, body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(pages.page(title, body, root), status_code=status)

    async def feed(request: Request) -> Response:
        before = _int(request.query_params.get("before"), 0) or None
        try:
            hits = await read("recent", {"project": ALL_PROJECTS, "limit": FEED_ROWS, "before": before})
        except NmemError as exc:
            return await html("Feed", pages.error(str(exc)))
        return await html("Feed", pages.feed(hits, live=before is None, full=len(hits) == FEED_ROWS))

    async def events(request: Request) -> EventSourceResponse:
        after = _int(request.query_params.get("after"), 0)

        async def stream() -> AsyncIterator[dict[str, str]]:
            nonlocal after
            while True:
                try:
                    hits = await read("recent", {"project": ALL_PROJECTS, "limit": FEED_ROWS})
                except NmemError:
                    hits = []
                for h in sorted((h for h in hits if int(h["id"]) > after), key=lambda h: int(h["id"])):
                    after = int(h["id"])
                    yield {"event": "observation", "id": str(after), "data": json.dumps({"html": pages.hit_row(h)})}
                await anyio.sleep(FEED_POLL_S)

        return EventSourceResponse(stream(), ping=15)

    async def search(request: Request) -> Response:
        q = dict(request.query_params)
        form = pages.search_form(q)
        if not q.get("q", "").strip():
            return await html("Search", form)
        try:
            params = await _search_params(read, q)
            hits = await read("search", params)
        except (NmemError, ValueError) as exc:
            return await html("Search", form + pages.error(str(exc)), 400)
        if not hits:
            return await html("Search", form + "<p>Nothing found.</p>")
        return await html("Search", form + pages.found(len(hits), params["limit"], q) + pages.hit_table(hits))

    async def sessions(request: Request) -> Response:
        project = request.query_params.get("project", "").strip()
        try:
            before = float(request.query_params["before"]) if request.query_params.get("before") else None
            scope = await _project(read, project) or ALL_PROJECTS
            rows = await read("sessions", {"project": scope, "limit": SESSION_ROWS, "before": before})
        except (NmemError, ValueError) as exc:
            return await html("Sessions", pages.error(str(exc)), 400)
        return await html("Sessions", pages.sessions(rows, project, await shapes(rows), full=len(rows) == SESSION_ROWS))

    async def observation(request: Request) -> Response:
        oid = int(request.path_params["oid"])
        try:
            found = await read("show", {"ids": [oid]})
            timeline = await read("timeline", {"id": oid, "before": 8, "after": 8}) if found else []
        except NmemError as exc:
            return await html(f"Observation {oid}", pages.error(str(exc)), 400)
        if not found:
            return await html(f"Observation {oid}", pages.error(f"no observation with id {oid}"), 404)
        return await html(f"Observation {oid}", pages.detail(found[0], timeline, token))

    async def context(request: Request) -> Response:
        project = request.query_params.get("project", "").strip()
        if not project:
            try:
                projects = await in_thread(insights.projects)
            except (NmemError, sqlite3.Error) as exc:
                return await html("Context", pages.error(str(exc)))
            return await html("Context", pages.context("", "", settings.context_budget, projects))
        try:
            reply = await read("context", {"project": await _project(read, project)})
        except NmemError as exc:
            return await html(
                "Context", pages.context(project, "", settings.context_budget, []) + pages.error(str(exc)), 400
            )
        return await html(
            f"Context of {reply['project']}", pages.context(project, reply["context"], settings.context_budget, [])
        )

    async def status(request: Request) -> Response:
        daemon = await in_thread(_daemon_facts, settings)
        try:
            counted, database = await in_thread(insights.database)
            act = await in_thread(insights.activity)
        except (NmemError, sqlite3.Error) as exc:
            return await html("Status", pages.error(str(exc)))
        growth = charts.growth("growth", act.days, act.total, database.observations)
        per_day = sum(act.total) / len(act.total) if act.total else 0.0
        facts = msgspec.to_builtins(Status(daemon=daemon, database=database))
        team = await in_thread(_team_links, settings)
        return await html("Status", pages.status(facts, growth, per_day, counted, team))

    async def confirm(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ACTIONS:
            return await html("Confirm", pages.error(f"unknown action {action!r}"), 404)
        q = dict(request.query_params)
        try:
            if action == "purge":
                params = await _search_params(read, q)
                flt = _purge_filter(params)
                counts = await anyio.to_thread.run_sync(_write, settings, "purge", {"filter": flt, "dry_run": True})
                what = (
                    f"<p>Purge will delete <b>{counts['observations']:,}</b> observations {escape(_describe(flt))},"
                    " pinned ones too, and every copy of their text.</p>"
                    + pages.purge_rows(counts.get("rows") or [], counts["observations"], counts.get("projects") or [])
                )
            else:
                ids = _ids(q.get("ids", ""))
                shown = await read("show", {"ids": ids})
                titles = "".join(f"<li>#{d['id']} {escape(d['title'])}</li>" for d in shown)
                verb = {
                    "pin": "Keep these when retention cleans up",
                    "unpin": "Let retention remove these again",
                    "forget": "Delete these for good, with every copy of their text",
                }[action]
                what = f"{verb}:<ul>{titles}</ul>"
        except (NmemError, ValueError) as exc:
            return await html("Confirm", pages.error(str(exc)), 400)
        return await html(f"Confirm: {action}", pages.confirm(action, what, q, token))

    async def do(request: Request) -> Response:
        action = request.path_params["action"]
        form = dict(await request.form())
        if action not in ACTIONS or not hmac.compare_digest(str(form.get("csrf", "")), token):
            return await html("Refused", pages.error("refused: not a confirmed change of this viewer"), 403)
        try:
            if action == "purge":
                params = await _search_params(read, {k: str(v) for k, v in form.items()})
                done = await anyio.to_thread.run_sync(_write, settings, "purge", {"filter": _purge_filter(params)})
                message = f"purged {plural(done['observations'], 'observation', grouped=True)}"
            else:
                ids = _ids(str(form.get("ids", "")))
                if action == "forget":
                    done = await anyio.to_thread.run_sync(_write, settings, "forget", {"ids": ids})
                    message = f"forgot {plural(done['observations'], 'observation', grouped=True)}"
                else:
                    await anyio.to_thread.run_sync(_write, settings, "pin", {"ids": ids, "unpin": action == "unpin"})
                    insights.invalidate()
                    return RedirectResponse(f"{root}/o/{ids[0]}", status_code=303)
        except (NmemError, ValueError) as exc:
            return await html("Failed", pages.error(str(exc)), 400)
        insights.invalidate()
        return await html("Done", f'<p id=done>{message}.</p><p><a class="btn" href="./">Home</a></p>')

    routes = [
        Route("/", home),
        Route("/feed", feed),
        Route("/activity", activity),
        Route("/events", events),
        Route("/search", search),
        Route("/sessions", sessions),
        Route("/o/{oid:int}", observation),
        Route("/context", context),
        Route("/status", status),
        Route("/confirm/{action}", confirm),
        Route("/do/{action}", do, methods=["POST"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, secret=secret, key=key, port=port, max_age=max_age)])


def _write(settings: Settings, method: str, params: dict[str, Any]) -> Any:
    """A change, through the daemon only (started when absent): it holds the write connection and
    answers after COMMIT."""
    try:
        return control.ask(method, params, timeout=WRITE_TIMEOUT_S)
    except DaemonUnavailable:
        control.start(settings, on_demand=True)
        return control.ask(method, params, timeout=WRITE_TIMEOUT_S)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def _ids(text: str) -> list[int]:
    ids = [int(part) for part in text.replace(",", " ").split() if part.isdigit()]
    if not ids:
        raise ValueError("no observation ids given")
    return ids


async def _project(read: Any, text: str) -> str | None:
    """A project as the CLI takes it: a path (its git top-level), `*` for all, or a name or suffix."""
    if not text or text == ALL_PROJECTS:
        return ALL_PROJECTS if text else None
    if os.path.isabs(text):
        return project_root(text) or text
    found: dict[str, str] = await read("project", {"name": text})
    return found["project"]


async def _search_params(read: Any, q: dict[str, str]) -> dict[str, Any]:
    params: dict[str, Any] = {
        "query": q.get("q", "").strip(),
        "limit": 50,
        "project": await _project(read, q.get("project", "").strip()) or ALL_PROJECTS,
    }
    types = [t.strip() for t in q.get("type", "").split(",") if t.strip()]
    if types:
        params["types"] = types
    for key, name in (("session", "session_id"), ("file", "file"), ("agent", "agent")):
        if q.get(key, "").strip():
            params[name] = q[key].strip()
    for key in ("since", "until"):
        if q.get(key, "").strip():
            try:
                params[key] = when(q[key].strip())
            except QueryError as exc:
                raise ValueError(f"{key}: {exc}") from None
    return params


def _purge_filter(params: dict[str, Any]) -> dict[str, Any]:
    """Every filter of the search, so a purge removes only what the search could have found."""
    keys = ("project", "types", "session_id", "file", "agent", "since", "until")
    flt = {k: v for k, v in params.items() if k in keys}
    if params.get("query") and params["query"] != "*":
        flt["query"] = params["query"]
    if flt.get("project") == ALL_PROJECTS:
        del flt["project"]
    return flt


def _short_names(series: dict[str, Any]) -> dict[str, str]:
    """A project's folder name where it is unique among the series (a path is too long for a legend)."""
    names = {p: os.path.basename(p.rstrip("/")) or p for p in series}
    taken = [n for n in names.values()]
    return {p: n if taken.count(n) == 1 else p for p, n in names.items()}


def _describe(flt: dict[str, Any]) -> str:
    """A purge's filter as a sentence ("matching 'okapi' in /src/app, file exporter.py")."""
    parts = []
    if flt.get("query"):
        parts.append(f"matching {flt['query']!r}")
    if flt.get("project"):
        parts.append(f"in {flt['project']}")
    for key, label in (("types", "of type"), ("file", "file"), ("agent", "by"), ("session_id", "of session")):
        if flt.get(key):
            value = flt[key]
            parts.append(f"{label} {', '.join(value) if isinstance(value, list) else value}")
    for key in ("since", "until"):
        if flt.get(key):
            parts.append(f"{key} {when_text(flt[key])}")
    return ", ".join(parts) or "of every project"


def _team_links(settings: Settings) -> list[dict[str, Any]]:
    """Team memory's links for the Status page ([] when no project is shared)."""
    from nmemd.control import team

    try:
        return team.statuses(settings)
    except NmemError as exc:
        return [{"team": "?", "error": str(exc)}]


def _daemon_facts(settings: Settings) -> DaemonFacts:
    """The daemon's own facts (a ping: no count of the store), or who holds its lock when none answers."""
    from nmemd.daemon.instance import lock_holder

    facts = control.ping()
    if facts is not None:
        return facts
    holder = lock_holder(settings.lock)
    return DaemonFacts(running=False, socket=settings.socket, pid=holder if holder and holder > 0 else None)
