"""HTML of the viewer's pages: plain server-rendered markup, every stored string escaped.

No JavaScript build, no framework: a stylesheet, a table per list, and a few lines of script for
the live feed (server-sent events) and for the confirmation a change asks for.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlencode

from nmemd import registry
from nmemd.model import CLAUDE_CODE
from nmemd.printable import printable
from nmemd.recall import snippets
from nmemd.wording import ago

NAV: Final = (
    ("./", "Home"),
    ("feed", "Feed"),
    ("search", "Search"),
    ("sessions", "Sessions"),
    ("activity", "Activity"),
    ("context", "Context"),
    ("status", "Status"),
)

# Lists (class "l") keep their columns on the page: long words and `=====` lines wrap anywhere,
# fixed widths for the short columns; on a phone each row becomes a block.
STYLE: Final = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f7f8fa}
header{background:#1d232a;color:#fff;padding:.6em 1.2em;display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center}
header a{color:#cfe3ff;text-decoration:none} header b{color:#fff;margin-right:1em}
main{padding:1em 1.2em;max-width:1200px} table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e3e6ea;padding:.35em .5em;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#eef1f4;font-weight:600} .t{color:#5b6570} .k{font-family:monospace}
table.l{table-layout:fixed} table.l td,table.l th{overflow:hidden}
col.c-when{width:10.5em} col.c-type{width:6.5em} col.c-proj{width:14em} col.c-id{width:5.5em} col.c-n{width:8em}
.type{display:inline-block;padding:0 .4em;border-radius:3px;background:#e7eef8;font-size:12px}
mark{background:#ffe58a;outline:1px solid #b08900} .what a{font-weight:500}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fff;border:1px solid #e3e6ea;padding:.8em;max-width:100%}
form.f{display:flex;flex-wrap:wrap;gap:.4em;margin-bottom:.6em} form.f input{padding:.3em;min-width:0}
.warn{color:#9b2c00} .ok{color:#1e6b3a} .problems{border-left:4px solid #b3261e;background:#fff;padding:.4em 1em}
.btn{padding:.3em .8em;border:1px solid #8a96a3;background:#fff;border-radius:3px;cursor:pointer;color:inherit;
text-decoration:none;display:inline-block}
.danger{border-color:#b3261e;color:#b3261e} .new{animation:hl 2s} @keyframes hl{from{background:#fff6bf}}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,440px),1fr));gap:1em}
.card{background:#fff;border:1px solid #e3e6ea;padding:.6em .9em;min-width:0}
.fig{margin:0 0 1em} .chart{width:100%;height:auto;background:#fff;border:1px solid #e3e6ea}
.ax{font-size:10px;fill:#5b6570}
.legend{list-style:none;padding:0;margin:.3em 0;display:flex;flex-wrap:wrap;gap:.2em 1em}
.legend li{display:flex;align-items:center;gap:.3em} .sw{vertical-align:middle} svg.shape{max-width:100%;height:auto}
.handoff{margin:.2em 0 0;padding-left:1.1em} .handoff li{margin:.1em 0}
.facts th{width:14em} .facts td{overflow-wrap:anywhere}
@media (max-width:700px){
 main{padding:.6em} table.l,table.l tbody,table.l tr,table.l td{display:block;width:100%}
 table.l thead,table.l col{display:none}
 table.l tr{border-bottom:2px solid #e3e6ea;padding:.3em 0} table.l td{border:0;padding:.1em .3em}
 form.f input{flex:1 1 100%} .facts th{width:auto}
}
"""


def escape(text: str, quote: bool = True) -> str:
    """HTML-escaped, without control characters: every stored string (a teammate's too) is data."""
    return html.escape(printable(text), quote=quote)


def page(title: str, body: str, root: str) -> str:
    """A whole page; every link in it is relative to `root`, the viewer's secret path (guard.py)."""
    nav = "".join(f'<a href="{href}">{name}</a>' for href, name in NAV)
    return (
        f"<!doctype html><html><head><meta charset=utf-8><base href='{escape(root)}/'>"
        f"<title>{escape(title)} · nmem</title>"
        f"<style>{STYLE}</style></head><body><header><b>nmem</b>{nav}</header>"
        f"<main><h2>{escape(title)}</h2>{body}</main></body></html>"
    )


def when(ts: float | None) -> str:
    if not ts:
        return ""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def highlight(snippet: str | None, spans: Iterable[Sequence[int]] = ()) -> str:
    """A search snippet (plain text) with its matched words, given as spans, in <mark>; the rest escaped."""
    if not snippet:
        return ""
    return "".join(
        f"<mark>{escape(piece, quote=False)}</mark>" if matched else escape(piece, quote=False)
        for piece, matched in snippets.parts(snippet, spans)
    )


def hit_row(h: Mapping[str, Any]) -> str:
    more = f' <span class="t">(+{h["similar"]} alike)</span>' if h.get("similar") else ""
    if h.get("author"):  # a teammate's (team memory)
        agent = h.get("agent") if h.get("agent") not in (None, CLAUDE_CODE) else None
        more += f' <span class="t">by {escape(str(h["author"]))}{f" with {escape(str(agent))}" if agent else ""}</span>'
    snippet = f'<div class="t">{highlight(h.get("snippet"), h.get("spans") or ())}</div>' if h.get("snippet") else ""
    return (
        f'<tr data-id="{int(h["id"])}"><td class="t">{when(h.get("ts"))}</td>'
        f'<td><span class="type">{escape(str(h.get("type", "")))}</span></td>'
        f'<td class="what"><a href="o/{int(h["id"])}">{escape(str(h.get("title", "")))}</a>{more}{snippet}</td>'
        f'<td class="t">{escape(str(h.get("project") or ""))}</td><td class="k">#{int(h["id"])}</td></tr>'
    )


HIT_COLS: Final = (
    '<colgroup><col class="c-when"><col class="c-type"><col><col class="c-proj"><col class="c-id"></colgroup>'
)


def hit_table(hits: Iterable[Mapping[str, Any]], table_id: str = "hits") -> str:
    rows = "".join(hit_row(h) for h in hits)
    return (
        f'<table class="l" id="{table_id}">{HIT_COLS}<thead><tr><th>when</th><th>type</th><th>what</th>'
        f"<th>project</th><th>id</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def older(href: str) -> str:
    return f'<p><a class="btn" id="older" href="{escape(href)}">Older →</a></p>'


def feed(hits: list[Mapping[str, Any]], *, live: bool = True, full: bool = False) -> str:
    """The newest observations, and (`live`) the script that prepends new ones as they are stored."""
    pager = older(f"feed?before={min(int(h['id']) for h in hits)}") if full else ""
    if not live:
        return '<p class="t">Older observations, newest first. <a href="feed">Back to the live feed</a></p>' + (
            hit_table(hits, "feed") + pager
        )
    after = max((int(h["id"]) for h in hits), default=0)
    script = (
        """<script>
const body = document.querySelector('#feed tbody');
const source = new EventSource('events?after="""
        + str(after)
        + """');
source.addEventListener('observation', (e) => {
  const row = document.createElement('tbody'); row.innerHTML = JSON.parse(e.data).html;
  const tr = row.firstElementChild; tr.classList.add('new'); body.prepend(tr);
  while (body.children.length > 200) body.lastElementChild.remove();
});
</script>"""
    )
    return (
        '<p class="t">Newest first; new observations appear as they are stored.</p>'
        + hit_table(hits, "feed")
        + pager
        + script
    )


SEARCH_FIELDS: Final = (
    ("q", "words, a question, an identifier or a path"),
    ("project", "project (path or name; * = all)"),
    ("type", "types (edit, error, …)"),
    ("agent", f"agent ({', '.join(registry.names()[:2])}, …)"),
    ("session", "session id"),
    ("file", "file"),
    ("since", "since (2h, 7d, a date)"),
    ("until", "until"),
)


def _input(name: str, hint: str, value: str, extra: str = "") -> str:
    """A text field as wide as its placeholder (plus room for the caret), never cut."""
    size = max(len(hint), 8) + 3
    return (
        f'<input name="{name}" placeholder="{escape(hint)}" title="{escape(hint)}" size="{size}"'
        f' style="width:{size}ch" value="{escape(value)}"{extra}>'
    )


def search_form(values: Mapping[str, str]) -> str:
    inputs = "".join(_input(name, hint, values.get(name, "")) for name, hint in SEARCH_FIELDS)
    return f'<form class="f" action="search">{inputs}<button class="btn">Search</button></form>'


def found(count: int, limit: int, query: Mapping[str, str]) -> str:
    """How many hits, and the way to purge everything the search's filters match (asks first)."""
    more = f" (the best {limit}; narrow the search for others)" if count >= limit else ""
    purge = "confirm/purge?" + urlencode({k: v for k, v in query.items() if v})
    return (
        f'<p class="t">{count} results{more} · '
        f'<a class="danger" id="purge" href="{escape(purge)}">purge everything that matches…</a></p>'
    )


def detail(d: Mapping[str, Any], timeline: list[Mapping[str, Any]], token: str) -> str:
    teammate = d.get("author") is not None  # a teammate's row (team memory): theirs, pulled from the server
    fields = (
        "type", "author", "machine", "agent", "project", "session_id", *(() if teammate else ("hook_event",)),
        "tool_name", "file_path", "command", "count", "pinned",
    )  # fmt: skip
    rows = "".join(
        f"<tr><th>{k}</th><td class=k>{escape(str(d.get(k)))}</td></tr>" for k in fields if d.get(k) not in (None, "")
    )
    rows += f"<tr><th>first seen</th><td>{when(d.get('ts'))}</td></tr>"
    rows += f"<tr><th>last seen</th><td>{when(d.get('last_ts'))}</td></tr>"
    oid = int(d["id"])
    pin = ("unpin", "Unpin") if d.get("pinned") else ("pin", "Pin")
    forget = (  # a teammate's row: forgetting it here hides it on this machine (its author or an admin deletes it)
        f'<a class="btn danger" href="confirm/forget?ids={oid}">Hide on this machine</a>'
        f' <span class="t">written by {escape(str(d.get("author")))}:'
        " only they or a team admin delete it for the team</span>"
        if teammate
        else f'<a class="btn danger" href="confirm/forget?ids={oid}">Forget</a>'
    )
    actions = f'<p><a class="btn" href="confirm/{pin[0]}?ids={oid}">{pin[1]}</a> {forget}</p>'
    tl = "".join(
        ("<tr style='background:#fff6bf'>" if int(h["id"]) == oid else "<tr>")
        + hit_row(h)[len(f'<tr data-id="{int(h["id"])}">') :]
        for h in timeline
    )
    return (
        f"{actions}<table>{rows}</table><h3>{escape(str(d.get('title', '')))}</h3>"
        f"<pre>{escape(str(d.get('content', '')))}</pre>"
        f"<h3>Its session around it</h3><table><tbody>{tl}</tbody></table>"
    )


def handoff(lines: Sequence[Mapping[str, Any]], first_prompt: str | None = None) -> str:
    """A session's handoff: each line's label and text, its observations linked."""
    from nmemd.recall.handoff import LABELS

    if not lines:
        return f"<b>{escape(first_prompt or '')}</b>" if first_prompt else '<span class="t">nothing to hand on</span>'
    items = "".join(
        f"<li><b>{escape(LABELS.get(str(line.get('kind')), str(line.get('kind', '')).capitalize()))}:</b>"
        f" {escape(str(line.get('text', '')))}{_refs(line.get('ids') or [])}</li>"
        for line in lines
    )
    return f'<ul class="handoff">{items}</ul>'


def _refs(ids: Sequence[int]) -> str:
    shown = list(ids)[:3]
    return "".join(f' <a class="k t" href="o/{int(i)}">#{int(i)}</a>' for i in shown) + (" …" if len(ids) > 3 else "")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _session_row(s: Mapping[str, Any], shape_svg: str) -> str:
    search = "search?" + urlencode({"q": "*", "session": s["session_id"], "project": "*"})
    return (
        f'<tr data-session="{escape(s["session_id"])}"><td class="t">{when(s.get("last_event_at"))}<br>'
        f'<a class="k" href="{escape(search)}">{escape(s["session_id"][:12])}</a></td>'
        f"<td>{escape(s.get('project') or '')}<br><span class=t>{escape(s.get('agent') or '')} ·"
        f" {_plural(int(s.get('event_count') or 0), 'event')}</span></td>"
        f'<td class="what">{handoff(s.get("handoff") or [], s.get("first_prompt"))}{shape_svg}</td></tr>'
    )


SESSION_COLS: Final = '<colgroup><col class="c-when"><col class="c-proj"><col></colgroup>'


def session_table(rows: Sequence[Mapping[str, Any]], shapes: Mapping[str, str], table_id: str = "sessions") -> str:
    body = "".join(_session_row(s, shapes.get(s["session_id"], "")) for s in rows)
    return (
        f'<table class="l" id="{table_id}">{SESSION_COLS}<thead><tr><th>last active</th><th>project</th>'
        f"<th>handoff, and its shape (each type on a lane, over time)</th></tr></thead><tbody>{body}</tbody></table>"
    )


def sessions(rows: list[Mapping[str, Any]], project: str, shapes: Mapping[str, str], *, full: bool = False) -> str:
    form = (
        '<form class="f" action="sessions">'
        + _input("project", "project (path or name; * = all)", project)
        + '<button class="btn">Show</button></form>'
    )
    pager = ""
    if full:
        pager = older("sessions?" + urlencode({"project": project, "before": repr(rows[-1]["last_event_at"])}))
    return form + session_table(rows, shapes) + pager


def project_list(projects: Sequence[Any], link: str, table_id: str = "projects") -> str:
    """The projects with their sessions and last activity, each a link (`link`: the page it opens)."""
    rows = "".join(
        f'<tr><td class="what"><a href="{escape(link + "?" + urlencode({"project": p.project}))}">'
        f"{escape(p.project)}</a></td><td class=t>{_plural(p.sessions, 'session')}</td>"
        f'<td class="t">{ago(p.last_ts, unknown="never")}<br>{when(p.last_ts)}</td></tr>'
        for p in projects
    )
    if not rows:
        return '<p class="t">No project recorded yet.</p>'
    return (
        f'<table class="l" id="{table_id}"><colgroup><col><col class="c-n"><col class="c-when"></colgroup>'
        f"<thead><tr><th>project</th><th>sessions</th><th>last activity</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def context(project: str, text: str, budget: int, projects: Sequence[Any]) -> str:
    form = (
        '<form class="f" action="context">'
        + _input("project", "project path or name", project)
        + '<button class="btn">Show</button></form>'
    )
    if not project:
        return form + "<p>Choose a project:</p>" + project_list(projects, "context")
    size = f"<p>{len(text):,} characters of a {budget:,}-character budget.</p>"
    body = (
        f'<pre id="context">{escape(text)}</pre>'
        if text
        else "<p>No context: nothing recorded for this project yet.</p>"
    )
    return form + size + body


def home(projects: Sequence[Any], recent: Sequence[Mapping[str, Any]], shapes: Mapping[str, str],
         pinned: Sequence[Mapping[str, Any]], activity_svg: str) -> str:  # fmt: skip
    """Where to start: the projects, the latest sessions' handoffs, the pinned rows, the last weeks."""
    pins = (
        hit_table(pinned, "pinned")
        if pinned
        else '<p class="t">Nothing pinned (an observation\'s Pin button keeps it from retention).</p>'
    )
    return (
        f'<div class="grid"><section class="card"><h3>Projects</h3>{project_list(projects[:12], "sessions")}</section>'
        f'<section class="card"><h3>The last four weeks</h3>{activity_svg}</section></div>'
        f"<h3>Latest sessions</h3>{session_table(recent, shapes, 'latest')}"
        f'<p><a href="sessions">All sessions →</a></p><h3>Pinned</h3>{pins}'
    )


def activity(by_project: str, by_agent: str, growth: str) -> str:
    return (
        '<p class="t">Observations stored per day over the last four weeks; each series has its own'
        " pattern, and every bar names its day and count.</p>"
        f'<div class="grid"><div>{by_project}</div><div>{by_agent}</div></div>{growth}'
    )


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n / 1e3:,.0f} kB" if n >= 1000 else f"{n:,} bytes"


def team_section(links: Sequence[Mapping[str, Any]]) -> str:
    """Status's team memory: each (server, team) link, its transport, sync state and outbox."""
    if not links:
        return ""
    rows = "".join(
        f"<tr><td>{escape(str(st.get('team') or '?'))}<br><span class=t>{escape(str(st.get('server') or ''))}"
        f" as {escape(str(st.get('member') or '?'))}</span></td>"
        f"<td>{escape(', '.join(str(p) for p in st.get('projects') or []))}</td>"
        f"<td>{escape(str(st.get('transport') or '?'))}</td>"
        f"<td class={'warn' if st.get('error') else 'ok'}>{escape(str(st.get('error') or st.get('state') or ''))}</td>"
        f"<td class=t>outbox {int(st.get('outbox') or 0):,}<br>push {ago(st.get('last_push_at'), unknown='never')},"
        f" pull {ago(st.get('last_pull_at'), unknown='never')}</td></tr>"
        for st in links
    )
    return (
        '<h3>Team memory</h3><table class="l" id="team"><thead><tr><th>team</th><th>projects</th><th>transport</th>'
        f"<th>state</th><th>sync</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def status(
    facts: Mapping[str, Any], growth_svg: str, per_day: float, counted: float, team: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The daemon and the store as a person asks about them: what is wrong first, then since when it
    runs, how big the store is and how fast it grows, what waits, and each job's last run."""
    d, db = facts.get("daemon") or {}, facts.get("database") or {}
    problems = []
    if not d.get("running"):
        problems.append(
            "The daemon is not running: hooks fall back to the inbox until one starts (`nmem daemon start`)."
        )
    if d.get("last_error"):
        problems.append(f"The daemon's last error: {d['last_error']}")
    waiting = int(db.get("inbox_backlog") or 0) + int(db.get("spool_backlog") or 0)
    if waiting:
        problems.append(f"{waiting:,} events wait to be stored (inbox {db.get('inbox_backlog', 0):,},"
                        f" spool {db.get('spool_backlog', 0):,}).")  # fmt: skip
    failed = [j for j in db.get("jobs") or [] if str(j.get("outcome") or "").startswith("failed")]
    for j in failed:
        problems.append(
            f"Job {j['name']} failed {ago(j.get('last_run'), unknown='never')}:"
            f" {str(j['outcome']).removeprefix('failed: ')}"
        )
    for st in team:
        if st.get("error"):
            problems.append(f"Team {st.get('team')} on {st.get('server')}: {st['error']}")
    if int(db.get("wal_bytes") or 0) > 256 * 1024 * 1024:
        problems.append(f"The write-ahead log is {_size(int(db['wal_bytes']))}: a reader may hold it open.")
    head = (
        '<div class="problems" id="problems"><b>Needs a look</b><ul>'
        + "".join(f"<li>{escape(p)}</li>" for p in problems)
        + "</ul></div>"
        if problems
        else '<p class="ok" id="problems">Nothing needs a look.</p>'
    )
    up = (
        f"Running since {when(d.get('started_at'))} ({ago(d.get('started_at'), unknown='never').removesuffix(' ago')}),"
        f" pid {d.get('pid')}, version {escape(str(d.get('version') or '?'))}."
        if d.get("running")
        else "Not running."
    )
    last = f" The last event came {ago(db.get('last_event_at'), unknown='never')}." if db.get("last_event_at") else ""
    store = (
        f"{_size(int(db.get('size_bytes') or 0))} on disk (and {_size(int(db.get('wal_bytes') or 0))} of log):"
        f" {int(db.get('observations') or 0):,} observations in {int(db.get('sessions') or 0):,} sessions;"
        f" {round(per_day * 28):,} of them stored in the last four weeks (about {per_day:,.1f} a day).{last}"
    )
    queue = [
        ("events received, not yet committed", int(d.get("queued") or 0)),
        ("events in the inbox (stored when the daemon drains it)", int(db.get("inbox_backlog") or 0)),
        ("events in the spool folder", int(db.get("spool_backlog") or 0)),
        ("summaries still being written", int(d.get("post_commit_pending") or 0)),
    ]
    waits = "".join(f"<li>{n:,} {escape(what)}</li>" for what, n in queue if n) or "<li>Nothing waits.</li>"
    jobs = (
        "".join(
            f"<tr><td>{escape(str(j.get('name')))}</td>"
            f"<td class=t>{ago(j.get('last_run'), unknown='never')}<br>{when(j.get('last_run'))}</td>"
            f"<td class={'warn' if str(j.get('outcome') or '').startswith('failed') else 'ok'}>"
            f"{escape(str(j.get('outcome') or ''))}</td></tr>"
            for j in db.get("jobs") or []
        )
        or '<tr><td colspan=3 class="t">No job has run yet (the daemon runs them when it is idle).</td></tr>'
    )
    kinds = ", ".join(f"{n:,} {escape(str(k))}" for k, n in (db.get("by_type") or {}).items())
    return (
        f"{head}<h3>The daemon</h3><p id=up>{up}</p><h3>The store</h3><p id=store>{store}</p>"
        f'<p class="t">Counted {ago(counted, unknown="never")} ({when(counted)}).</p>'
        f'<p class="t">{kinds}</p>{growth_svg}<h3>What waits</h3><ul id=waits>{waits}</ul>'
        f'<h3>Maintenance jobs</h3><table class="l" id="jobs"><colgroup><col class="c-n"><col class="c-when"><col>'
        f"</colgroup><thead><tr><th>job</th><th>last run</th><th>outcome</th></tr></thead><tbody>{jobs}</tbody></table>"
        f"{team_section(team)}<details><summary>Every fact</summary>{facts_table(facts)}</details>"
    )


def _value(key: str, v: Any) -> str:
    """A fact as a person reads it: times as dates, sizes in MB, lists one per line."""
    if isinstance(v, dict):
        return facts_table(v)
    if isinstance(v, bool) or v is None:
        return "yes" if v else "no" if v is False else "—"
    if isinstance(v, int | float) and key.endswith(("_at", "_ts", "_run")):
        return when(v)
    if isinstance(v, int) and key.endswith("_bytes"):
        return _size(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        return "<br>".join(_value(key, x) for x in v) or "none"
    return escape(str(v))


def facts_table(facts: Mapping[str, Any]) -> str:
    """Nested facts (the daemon's, the database's) as nested tables."""
    rows = "".join(
        f"<tr><th>{escape(str(k).replace('_', ' '))}</th><td class=k>{_value(str(k), v)}</td></tr>"
        for k, v in facts.items()
    )
    return f'<table class="facts">{rows}</table>'


def purge_rows(rows: Sequence[Mapping[str, Any]], count: int, projects: Sequence[str]) -> str:
    """What a purge deletes: the projects it touches, and its first rows (project, type, title)."""
    touched = "".join(f"<li>{escape(p or '(no project)')}</li>" for p in projects)
    more = f'<p class="t">… and {count - len(rows):,} more.</p>' if count > len(rows) else ""
    body = "".join(
        f'<tr><td class="t">{escape(str(r.get("project") or ""))}</td><td><span class="type">'
        f'{escape(str(r.get("type", "")))}</span></td><td class="what"><a href="o/{int(r["id"])}">'
        f"{escape(str(r.get('title', '')))}</a></td><td class=k>#{int(r['id'])}</td></tr>"
        for r in rows
    )
    return (
        f"<p>Projects it touches:</p><ul id=touched>{touched or '<li>none</li>'}</ul>"
        '<table class="l" id="doomed"><colgroup><col class="c-proj"><col class="c-type"><col>'
        '<col class="c-id"></colgroup>'
        f"<thead><tr><th>project</th><th>type</th><th>title</th><th>id</th></tr></thead><tbody>{body}</tbody></table>"
        f"{more}"
    )


def confirm(action: str, what: str, fields: Mapping[str, str], token: str) -> str:
    hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in fields.items())
    return (
        f'<form method="post" action="do/{escape(action)}"><div>{what}</div>{hidden}'
        f'<input type="hidden" name="csrf" value="{escape(token)}">'
        f'<p><button class="btn danger" id="confirm">Yes, {escape(action)}</button>'
        ' <a class="btn" href="./">Cancel</a></p></form>'
    )


def error(message: str) -> str:
    return f'<p class="warn">{escape(message)}</p>'
