"""The viewer's pictures, drawn on the server as SVG: no script, no chart library, no build.

Readable without colour: each series of a stacked chart has its own fill pattern as well as its
own colour (the legend shows both), a session's shape puts each type on its own labelled lane,
and every bar and mark carries a <title> with its exact numbers (what a pointer shows).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from html import escape
from typing import Final

TOP_SERIES: Final = 6  # series drawn on their own; the rest are "other"
INK: Final = "#1d232a"
# (colour, pattern body drawn over the colour's light tint) per series; the last one is "other".
FILLS: Final = (
    ("#2f6db5", ""),
    ("#c0621d", '<path d="M0,6 L6,0 M-1,1 L1,-1 M5,7 L7,5" stroke="{c}" stroke-width="1.6"/>'),
    ("#2e8b57", '<circle cx="3" cy="3" r="1.4" fill="{c}"/>'),
    ("#8b3fa8", '<path d="M0,3 H6" stroke="{c}" stroke-width="1.6"/>'),
    ("#b5952f", '<path d="M0,0 L6,6 M6,0 L0,6" stroke="{c}" stroke-width="1.2"/>'),
    ("#4a5a6a", '<path d="M3,0 V6" stroke="{c}" stroke-width="1.6"/>'),
    ("#9aa5b1", '<rect width="6" height="6" fill="#e8ecf0"/>'),
)


def _defs(chart: str, count: int) -> str:
    out = []
    for n in range(count):
        colour, body = FILLS[min(n, len(FILLS) - 1)]
        base = (
            f'<rect width="6" height="6" fill="{colour}"/>'
            if not body
            else f'<rect width="6" height="6" fill="{colour}33"/>'
        )
        out.append(
            f'<pattern id="{chart}-p{n}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f"{base}{body.format(c=colour)}</pattern>"
        )
    return "<defs>" + "".join(out) + "</defs>"


def _swatch(chart: str, n: int) -> str:
    return (
        f'<svg class="sw" width="14" height="14" aria-hidden="true">{_defs(chart + "-l" + str(n), n + 1)}'
        f'<rect width="14" height="14" fill="url(#{chart}-l{n}-p{n})" stroke="{INK}" stroke-width="0.6"/></svg>'
    )


def _top(series: dict[str, list[int]], days: int) -> list[tuple[str, list[int]]]:
    ranked = sorted(series.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    if len(ranked) <= TOP_SERIES:
        return ranked
    rest = [sum(v[d] for _, v in ranked[TOP_SERIES - 1 :]) for d in range(days)]
    return [*ranked[: TOP_SERIES - 1], (f"{len(ranked) - TOP_SERIES + 1} others", rest)]


def _label(day: dt.date) -> str:
    return f"{day:%b} {day.day}"


def bars(chart: str, title: str, days: Sequence[dt.date], series: dict[str, list[int]], short: dict[str, str]) -> str:
    """A stacked bar per day, one pattern per series (`short`: a series' name as the legend shows it)."""
    width, height, left, bottom, top, right = 600, 170, 34, 18, 8, 16
    drawn = _top(series, len(days))
    totals = [sum(v[d] for _, v in drawn) for d in range(len(days))]
    peak = max(totals, default=0) or 1
    step = (width - left - right) / max(len(days), 1)
    scale = (height - bottom - top) / peak
    parts = [
        f'<svg class="chart" id="{chart}" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{chart}-t">'
        f'<title id="{chart}-t">{escape(title)}</title>{_defs(chart, len(drawn))}',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="{INK}"/>',
        f'<text x="{left - 4}" y="{top + 8}" text-anchor="end" class="ax">{peak:,}</text>',
        f'<text x="{left - 4}" y="{height - bottom}" text-anchor="end" class="ax">0</text>',
    ]
    for d, day in enumerate(days):
        x = left + d * step
        y = float(height - bottom)
        for n, (name, values) in enumerate(drawn):
            if not values[d]:
                continue
            h = values[d] * scale
            y -= h
            parts.append(
                f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{step - 2:.1f}" height="{h:.1f}" fill="url(#{chart}-p{n})"'
                f' stroke="{INK}" stroke-width="0.4"><title>{day.isoformat()} · {escape(short.get(name, name))}:'
                f" {values[d]:,}</title></rect>"
            )
        if d % 7 == (len(days) - 1) % 7:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{height - 4}" text-anchor="middle" class="ax">{_label(day)}</text>'
            )
    parts.append("</svg>")
    legend = "".join(
        f'<li>{_swatch(chart, n)} {escape(short.get(name, name))} <span class="t">{sum(values):,}</span></li>'
        for n, (name, values) in enumerate(drawn)
    )
    caption = f'<figcaption><b>{escape(title)}</b><ul class="legend">{legend}</ul></figcaption>'
    return f'<figure class="fig">{"".join(parts)}{caption}</figure>'


def growth(chart: str, days: Sequence[dt.date], added: Sequence[int], total_now: int) -> str:
    """The store's size in observations at the end of each day (from today's count back), with
    what each day added under it."""
    width, height, left, bottom, top, right = 600, 150, 60, 18, 10, 24
    totals = []
    running = total_now
    for n in range(len(days) - 1, -1, -1):
        totals.append(running)
        running -= added[n]
    totals.reverse()
    low, high = min(totals, default=0), max(totals, default=0)
    span = (high - low) or 1
    step = (width - left - right) / max(len(days) - 1, 1)
    inner = height - bottom - top

    def y(v: int) -> float:
        return top + inner - (v - low) / span * inner

    points = " ".join(f"{left + n * step:.1f},{y(v):.1f}" for n, v in enumerate(totals))
    peak = max(added, default=0) or 1
    marks = "".join(
        f'<rect x="{left + n * step - 2:.1f}" y="{height - bottom - a / peak * 24:.1f}" width="4"'
        f' height="{a / peak * 24:.1f}" fill="#9aa5b1"><title>{day.isoformat()}: +{a:,}</title></rect>'
        for n, (day, a) in enumerate(zip(days, added, strict=True))
        if a
    )
    dots = "".join(
        f'<circle cx="{left + n * step:.1f}" cy="{y(v):.1f}" r="2.2" fill="{INK}"><title>{day.isoformat()}:'
        f" {v:,} observations</title></circle>"
        for n, (day, v) in enumerate(zip(days, totals, strict=True))
    )
    labels = "".join(
        f'<text x="{left + n * step:.1f}" y="{height - 4}" text-anchor="middle" class="ax">{_label(day)}</text>'
        for n, day in enumerate(days)
        if n % 7 == (len(days) - 1) % 7
    )
    title = f"Observations stored: {totals[0] if totals else 0:,} four weeks ago, {total_now:,} now"
    return (
        f'<figure class="fig"><svg class="chart" id="{chart}" viewBox="0 0 {width} {height}" role="img"'
        f' aria-labelledby="{chart}-t"><title id="{chart}-t">{escape(title)}</title>'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end" class="ax">{high:,}</text>'
        f'<text x="{left - 4}" y="{top + inner}" text-anchor="end" class="ax">{low:,}</text>'
        f'{marks}<polyline points="{points}" fill="none" stroke="{INK}" stroke-width="1.5"/>{dots}{labels}</svg>'
        f"<figcaption><b>{escape(title)}</b> (the line; the grey marks: what each day added)</figcaption></figure>"
    )


def shape(chart: str, points: Sequence[tuple[float, str]], width: int = 440) -> str:
    """A session's shape: one labelled lane per type, a tick per observation at its time."""
    if not points:
        return ""
    lanes: list[str] = []
    for _, kind in points:
        if kind not in lanes:
            lanes.append(kind)
    lanes = lanes[:8]
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    left, lane_h = 64, 11
    height = lane_h * len(lanes) + 4
    counts = {k: sum(1 for _, t in points if t == k) for k in lanes}
    minutes = max(1, round((t1 - t0) / 60))
    title = f"{len(points):,} observations over {minutes:,} min: " + ", ".join(f"{counts[k]} {k}" for k in lanes)
    rows = []
    for n, kind in enumerate(lanes):
        yy = 2 + n * lane_h
        ticks = "".join(
            f'<rect x="{left + (t - t0) / span * (width - left - 2):.1f}" y="{yy + 1}" width="2" height="{lane_h - 2}"'
            f' fill="{FILLS[n % (len(FILLS) - 1)][0]}"/>'
            for t, k in points
            if k == kind
        )
        rows.append(
            f'<text x="{left - 4}" y="{yy + lane_h - 2}" text-anchor="end" class="ax">{escape(kind)}</text>'
            f'<line x1="{left}" y1="{yy + lane_h / 2}" x2="{width}" y2="{yy + lane_h / 2}" stroke="#e3e6ea"/>{ticks}'
        )
    return (
        f'<svg class="shape" id="{chart}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img"'
        f' aria-label="{escape(title)}"><title>{escape(title)}</title>{"".join(rows)}</svg>'
    )
