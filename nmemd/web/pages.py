"""HTML of the viewer's pages: plain server-rendered markup, every stored string escaped.

No JavaScript build, no framework: a stylesheet, a table per list, and a few lines of script for
the live feed (server-sent events) and for the confirmation a change asks for.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import urlencode

from nmemd.recall import snippets

NAV: Final = (
    ("./", "Feed"),
    ("search", "Search"),
    ("sessions", "Sessions"),
    ("context", "Context"),
    ("status", "Status"),
)

STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f7f8fa}
header{background:#1d232a;color:#fff;padding:.6em 1.2em;display:flex;gap:1.2em;align-items:center}
header a{color:#cfe3ff;text-decoration:none} header b{color:#fff;margin-right:1em}
main{padding:1em 1.2em;max-width:1200px} table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e3e6ea;padding:.35em .5em;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600} .t{color:#5b6570;white-space:nowrap} .k{font-family:monospace}
.type{display:inline-block;padding:0 .4em;border-radius:3px;background:#e7eef8;font-size:12px}
mark{background:#ffe58a} pre{white-space:pre-wrap;background:#fff;border:1px solid #e3e6ea;padding:.8em}
form.f input,form.f select{margin:0 .4em .4em 0;padding:.25em} .warn{color:#9b2c00}
.btn{padding:.3em .8em;border:1px solid #8a96a3;background:#fff;border-radius:3px;cursor:pointer}
.danger{border-color:#b3261e;color:#b3261e} .new{animation:hl 2s} @keyframes hl{from{background:#fff6bf}}
"""


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
        agent = h.get("agent") if h.get("agent") not in (None, "claude-code") else None
        more += f' <span class="t">by {escape(str(h["author"]))}{f" with {escape(str(agent))}" if agent else ""}</span>'
    snippet = f'<div class="t">{highlight(h.get("snippet"), h.get("spans") or ())}</div>' if h.get("snippet") else ""
    return (
        f'<tr data-id="{int(h["id"])}"><td class="t">{when(h.get("ts"))}</td>'
        f'<td><span class="type">{escape(str(h.get("type", "")))}</span></td>'
        f'<td><a href="o/{int(h["id"])}">{escape(str(h.get("title", "")))}</a>{more}{snippet}</td>'
        f'<td class="t">{escape(str(h.get("project") or ""))}</td><td class="k">#{int(h["id"])}</td></tr>'
    )


def hit_table(hits: Iterable[Mapping[str, Any]], table_id: str = "hits") -> str:
    rows = "".join(hit_row(h) for h in hits)
    return (
        f'<table id="{table_id}"><thead><tr><th>when</th><th>type</th><th>what</th><th>project</th>'
        f"<th>id</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def older(href: str) -> str:
    return f'<p><a class="btn" id="older" href="{escape(href)}">Older →</a></p>'


def feed(hits: list[Mapping[str, Any]], *, live: bool = True, full: bool = False) -> str:
    """The newest observations, and (`live`) the script that prepends new ones as they are stored."""
    pager = older(f"?before={min(int(h['id']) for h in hits)}") if full else ""
    if not live:
        return '<p class="t">Older observations, newest first. <a href="./">Back to the live feed</a></p>' + (
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
    ("q", "words, a question, an identifier or a path", 40),
    ("project", "project (path or name; * = all)", 24),
    ("type", "types, comma-separated", 14),
    ("agent", "agent name (claude-code, codex, ...)", 14),
    ("session", "session id", 14),
    ("file", "file", 14),
    ("since", "since (2h, 7d, 2026-11-01)", 14),
    ("until", "until", 10),
)


def search_form(values: Mapping[str, str]) -> str:
    inputs = "".join(
        f'<input name="{name}" placeholder="{escape(hint)}" size="{size}" value="{escape(values.get(name, ""))}">'
        for name, hint, size in SEARCH_FIELDS
    )
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
    fields = (
        "type", "agent", "project", "session_id", "hook_event", "tool_name", "file_path", "command", "count", "pinned",
    )  # fmt: skip
    rows = "".join(
        f"<tr><th>{k}</th><td class=k>{escape(str(d.get(k)))}</td></tr>" for k in fields if d.get(k) not in (None, "")
    )
    rows += f"<tr><th>first seen</th><td>{when(d.get('ts'))}</td></tr>"
    rows += f"<tr><th>last seen</th><td>{when(d.get('last_ts'))}</td></tr>"
    oid = int(d["id"])
    pin = ("unpin", "Unpin") if d.get("pinned") else ("pin", "Pin")
    actions = (
        f'<p><a class="btn" href="confirm/{pin[0]}?ids={oid}">{pin[1]}</a> '
        f'<a class="btn danger" href="confirm/forget?ids={oid}">Forget</a></p>'
    )
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


def sessions(rows: list[Mapping[str, Any]], project: str, *, full: bool = False) -> str:
    form = (
        '<form class="f" action="sessions">'
        f'<input name="project" size="40" placeholder="project (path or name; * = all)"'
        f' value="{escape(project)}"><button class="btn">Show</button></form>'
    )
    items = []
    for s in rows:
        summary = escape(s.get("summary") or "") or '<span class="t">no summary yet</span>'
        search = "search?" + urlencode({"q": "*", "session": s["session_id"], "project": "*"})
        items.append(
            f'<tr><td class="t">{when(s.get("last_event_at"))}</td><td class="k"><a href="{escape(search)}">'
            f"{escape(s['session_id'][:12])}</a></td><td>{escape(s.get('project') or '')}</td>"
            f"<td><b>{escape(s.get('first_prompt') or '')}</b><pre>{summary}</pre></td>"
            f'<td class="t">{int(s.get("event_count") or 0)} events<br>{escape(s.get("agent") or "")}</td></tr>'
        )
    pager = ""
    if full:
        pager = older("sessions?" + urlencode({"project": project, "before": repr(rows[-1]["last_event_at"])}))
    return form + "<table><tbody>" + "".join(items) + "</tbody></table>" + pager


def context(project: str, text: str, budget: int) -> str:
    form = (
        f'<form class="f" action="context"><input name="project" size="50" placeholder="project path or name"'
        f' value="{escape(project)}"><button class="btn">Show</button></form>'
    )
    if not project:
        return form
    size = f"<p>{len(text):,} characters of a {budget:,}-character budget.</p>"
    body = (
        f'<pre id="context">{escape(text)}</pre>'
        if text
        else "<p>No context: nothing recorded for this project yet.</p>"
    )
    return form + size + body


def _value(key: str, v: Any) -> str:
    """A fact as a person reads it: times as dates, sizes in MB, lists one per line."""
    if isinstance(v, dict):
        return status(v)
    if isinstance(v, bool) or v is None:
        return escape(json.dumps(v))
    if isinstance(v, int | float) and key.endswith(("_at", "_ts", "_run")):
        return when(v)
    if isinstance(v, int) and key.endswith("_bytes"):
        return f"{v / 1e6:,.1f} MB" if v >= 100_000 else f"{v:,} bytes"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list):
        return "<br>".join(_value(key, x) for x in v) or "none"
    return escape(str(v))


def status(facts: Mapping[str, Any]) -> str:
    """Nested facts (the daemon's, the database's) as nested tables."""
    rows = "".join(f"<tr><th>{escape(str(k))}</th><td class=k>{_value(str(k), v)}</td></tr>" for k, v in facts.items())
    return f"<table>{rows}</table>"


def confirm(action: str, what: str, fields: Mapping[str, str], token: str) -> str:
    hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in fields.items())
    return (
        f'<form method="post" action="do/{escape(action)}"><p>{what}</p>{hidden}'
        f'<input type="hidden" name="csrf" value="{escape(token)}">'
        f'<button class="btn danger" id="confirm">Yes, {escape(action)}</button>'
        ' <a class="btn" href="./">Cancel</a></form>'
    )


def error(message: str) -> str:
    return f'<p class="warn">{escape(message)}</p>'
