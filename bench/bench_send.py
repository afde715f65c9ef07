"""Hook client cost: `python -I -S send.py` against a bare `python -I -S -c pass`.

(a) daemon up: the event goes over the socket and is acked after COMMIT (target ratio <= 1.6);
(b) daemon absent (NMEM_AUTOSTART=0, nothing at the socket path): the client writes the
    SQLite inbox (target ratio <= 3);
(c) the pip console script `nmem-send`, daemon up, for information.
Runs alternate baseline and subject so drift hits both alike. Afterwards the db is checked:
every event sent is stored exactly once (events, or inbox rows for (b), then drained).

    .venv/bin/python bench/bench_send.py [--runs 50]
"""

from __future__ import annotations

import argparse
import os
import time

import common
from common import PYTHON, SEND_PY, Daemon, Home, median, ms, p90, verdict

BASELINE = [PYTHON, "-I", "-S", "-c", "pass"]
CLIENT = [PYTHON, "-I", "-S", SEND_PY]
CONSOLE = [common.NMEM_SEND]
TARGET_UP = 1.6
TARGET_FALLBACK = 3.0
TOOL = "Read"  # PostToolUse Read: ~2.3 KB, the typical size


def alternate(
    subject: list[str], env: dict[str, str], runs: int, tag: str, warmup: int = 3
) -> tuple[list[int], list[int]]:
    """Time baseline and subject alternately; each subject run gets its own varied payload."""
    event = common.template(TOOL)
    base: list[int] = []
    subj: list[int] = []
    for i in range(warmup):  # page cache, .pyc files; not stored in the results but stored in the db
        common.timed_spawn(BASELINE, b"", env)
        common.timed_spawn(subject, common.vary(event, tag + "w", i), env)
    for i in range(runs):
        payload = common.vary(event, tag, i)
        if i % 2:  # swap the order every other pair
            subj.append(common.timed_spawn(subject, payload, env))
            base.append(common.timed_spawn(BASELINE, payload, env))
        else:
            base.append(common.timed_spawn(BASELINE, payload, env))
            subj.append(common.timed_spawn(subject, payload, env))
    return base, subj


def report(label: str, base: list[int], subj: list[int], target: float | None) -> float:
    ratio = median(subj) / median(base)
    print(
        f"{label}: baseline median {ms(median(base)):.2f} ms p90 {ms(p90(base)):.2f} ms | "
        f"client median {ms(median(subj)):.2f} ms p90 {ms(p90(subj)):.2f} ms | "
        f"ratio {ratio:.2f}" + (f" (target <= {target}: {verdict(ratio <= target)})" if target else "")
    )
    print(f"  added by the client: median {ms(median(subj) - median(base)):.2f} ms")
    return ratio


def check_events(home: Home, expected: int, label: str) -> bool:
    counts = common.db_counts(home.db)
    ok = counts["events"] == expected and counts["sessions"] == expected and counts["inbox"] == 0
    print(
        f"  db check ({label}): events={counts['events']} distinct sessions={counts['sessions']} "
        f"inbox={counts['inbox']} expected {expected}: {'OK' if ok else 'MISMATCH'}"
    )
    return ok


def bench_daemon_up(runs: int, console: bool) -> bool:
    with Home() as home:
        daemon = Daemon(home)
        try:
            daemon.start()
            env = home.env()
            base, subj = alternate(CLIENT, env, runs, "up")
            report(f"(a) daemon up, python -I -S send.py, {runs} runs", base, subj, TARGET_UP)
            sent = runs + 3
            if console:
                cbase, csubj = alternate(CONSOLE, env, runs, "cs")
                report(f"(c) daemon up, console script nmem-send, {runs} runs (info)", cbase, csubj, None)
                sent += runs + 3
            print(f"  daemon RSS after the runs: {common.rss_kb(daemon.pid) / 1024:.1f} MB")
        finally:
            daemon.stop()
        return check_events(home, sent, "daemon up")


def bench_fallback(runs: int) -> bool:
    with Home() as home:
        seed = Daemon(home)  # a daemon ran here before: the db exists with its schema, the socket is gone
        try:
            seed.start()
            common.ping(home.socket)  # serving for real before the SIGTERM
        finally:
            seed.stop()
        assert not os.path.exists(home.socket)
        env = home.env(NMEM_AUTOSTART="0")
        base, subj = alternate(CLIENT, env, runs, "fb")
        report(f"(b) daemon absent, inbox fallback, {runs} runs", base, subj, TARGET_FALLBACK)
        sent = runs + 3
        counts = common.db_counts(home.db)
        ok = counts["inbox"] == sent and counts["events"] == 0
        print(
            f"  db check (absent): inbox={counts['inbox']} events={counts['events']} expected inbox {sent}: "
            f"{'OK' if ok else 'MISMATCH'}"
        )
        drainer = Daemon(home)  # the next daemon drains the inbox at start
        try:
            drainer.start()
            deadline = time.monotonic() + 15
            while common.db_counts(home.db)["inbox"] and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            drainer.stop()
        return check_events(home, sent, "after drain") and ok


def bench_breakdown(runs: int) -> None:
    """Where the client's extra time goes: interpreter imports, then the socket round trip.

    Interleaves five commands per round, with the daemon at its default batch delay and,
    for comparison, at 2 ms (the default before it became 0).
    """
    from nmemd.capture.ingest import BATCH_MAX_DELAY_MS as default_delay

    event = common.template(TOOL)
    steps = [
        ("python -I -S -c pass", BASELINE, False),
        ("+ import os (reference: send.py avoids it)", [PYTHON, "-I", "-S", "-c", "import os"], False),
        ("+ import posix, _socket, time", [PYTHON, "-I", "-S", "-c", "import posix, _socket, time"], False),
        ("send.py, empty stdin (imports only)", CLIENT, False),
        ("send.py, 2.3 KB event acked", CLIENT, True),
    ]
    for delay in (None, "2"):
        with Home() as home:
            daemon = Daemon(home, env={"NMEM_TUNE_BATCH_MAX_DELAY_MS": delay} if delay else None)
            try:
                daemon.start()
                env = home.env()
                times: list[list[int]] = [[] for _ in steps]
                for i in range(runs):
                    for k, (_, argv, with_payload) in enumerate(steps):
                        body = common.vary(event, "bd", i) if with_payload else b""
                        times[k].append(common.timed_spawn(argv, body, env))
            finally:
                daemon.stop()
            stored = common.db_counts(home.db)["events"]
        base = median(times[0])
        label = f"NMEM_TUNE_BATCH_MAX_DELAY_MS={delay}" if delay else f"default batch delay ({default_delay:g} ms)"
        print(f"breakdown, daemon up, {label}, {runs} rounds (db events {stored}, expected {runs}):")
        for (name, _, _), t in zip(steps, times, strict=True):
            print(
                f"  {name:42s} median {ms(median(t)):6.2f} ms  (+{ms(median(t) - base):5.2f} ms, "
                f"ratio {median(t) / base:.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="timed runs of each command (>= 30)")
    parser.add_argument("--no-console", action="store_true", help="skip (c), the console-script form")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also split the client's cost: imports vs round trip, batch delay default and 2 ms",
    )
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    if args.runs < 30:
        parser.error("--runs must be >= 30")
    common.wait_quiet(args.wait_quiet)
    common.print_machine()
    ok = bench_daemon_up(args.runs, not args.no_console)
    ok = bench_fallback(args.runs) and ok
    if args.breakdown:
        bench_breakdown(args.runs)
    if not ok:
        raise SystemExit("db check failed: some event was lost or stored twice")


if __name__ == "__main__":
    main()
