"""The long runs of issue #5's fault-injection scenarios; prints the figures RELIABILITY.md records.

The scenarios are the functions of tests/daemon/test_reliability.py (and, for 1, 3, 11 and 12, the
pieces of test_killrecovery.py / test_faults.py): the same code CI runs at scale 1, run here at
a larger scale. For each: events sent, stored, lost, duplicated; how clients fared; client wall
time p50/p99/max against the client timeout; PASS or the criteria that failed.

    .venv/bin/python bench/bench_reliability.py                 # all twelve at their long scale
    .venv/bin/python bench/bench_reliability.py --scenario 4 --scenario 9
    .venv/bin/python bench/bench_reliability.py --scale 1       # the CI sizes
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "daemon"), str(REPO / "bench"), str(REPO)]

import test_reliability as R  # noqa: E402
from common import add_quiet_arg, print_machine, wait_quiet  # noqa: E402
from support.daemon import Daemon  # noqa: E402
from support.db import db_rows  # noqa: E402
from support.helpers import count, kill_all, new_id, payload, wait_until  # noqa: E402

from nmem_client import inbox, protocol  # noqa: E402
from nmem_client.hook import deliver  # noqa: E402

# The scale of each long run: CI sizes times this (see each scenario for what grows).
LONG_SCALE: dict[int, float] = {
    1: 20,  # 10 -> 200 kill -9 rounds of 20 clients x 50 events
    2: 33,  # 3 -> 100 kills between commit and reply
    3: 10,  # 1 -> 10 freezes inside a write transaction
    4: 5,  # 40 x 10 -> 200 clients x 50 events
    5: 5,  # 10 -> 50 refusals while full
    6: 5,  # 2,000 -> 10,000 idle connections, 40 -> 200 slow and stalled senders
    7: 20,  # 1 -> 20 rounds of 20 starters
    8: 10,  # 3 -> 30 connections from another uid
    9: 25,  # 4,000 -> 100,000 events under a long reader
    10: 5,  # 1 -> 5 rounds of planted secrets
    11: 10,  # 1 -> 10 SIGTERM rounds
    12: 1,  # every earlier schema version once
}


# --- 1. kill -9 at random points (test_killrecovery.Round, timed) -----------------------------


def scenario_1(daemon: Daemon, scale: float) -> R.Figures:
    import test_killrecovery as K

    rounds = R.scaled(10, scale)
    fig = R.Figures(
        1,
        f"kill -9 at random points during batch commits, {rounds} rounds of"
        f" {K.CLIENTS} clients x {K.EVENTS_PER_CLIENT} events",
        scale,
    )
    fig.timeout_s = K.TIMEOUT_MS / 1000

    class TimedRound(K.Round):  # the test's round; each send also timed
        def send_subprocess(self, marker: str) -> None:
            t0 = time.monotonic()
            super().send_subprocess(marker)
            fig.client_done("real", time.monotonic() - t0)

        def send_in_process(self, marker: str) -> None:
            t0 = time.monotonic()
            acked_before = self.acked
            super().send_in_process(marker)
            fig.client_done("acked" if self.acked > acked_before else "inbox", time.monotonic() - t0)

    seed = int(time.time())
    rng = random.Random(seed)
    daemon.start()
    errors: list[str] = []
    for number in range(rounds):
        rnd = TimedRound(number, daemon, rng)
        rnd.run()
        errors += rnd.client_errors + [f"refused {m}" for m, _ in rnd.refused]
        daemon.start()
        wait_until(lambda: R.backlog(daemon.home, daemon.db) == 0, 60, "inbox and spool drained")
        if number % 20 == 19:
            print(f"  ... {number + 1}/{rounds} rounds", flush=True)
    daemon.stop()
    expected = {
        f"kr{n:02d}-c{c:02d}-e{e:03d}"
        for n in range(rounds)
        for c in range(K.CLIENTS)
        for e in range(K.EVENTS_PER_CLIENT)
    }
    fig.check(not errors, f"client errors: {errors[:3]}")
    fig.notes["seed"] = seed
    fig.account(daemon.db, expected, "kr")
    return fig


# --- 3. frozen inside a write transaction (test_faults' pieces, repeated) -----------------------


def scenario_3(daemon: Daemon, scale: float) -> R.Figures:
    import test_faults as F

    cycles = R.scaled(1, scale)
    timeout_ms = F.FROZEN_TIMEOUT_MS
    fig = R.Figures(
        3,
        f"SIGSTOP inside a write transaction, {cycles} freezes, {F.FROZEN_CLIENTS} real clients each while frozen",
        scale,
    )
    fig.timeout_s = timeout_ms / 1000
    R.start_with_env(daemon, F.DRAIN_ENV)
    assert daemon.proc is not None
    pid = daemon.proc.pid
    markers: set[str] = set()
    lock = threading.Lock()
    stop = threading.Event()
    in_txn = 0

    def streamer(n: int) -> None:
        i = 0
        while not stop.is_set():
            marker = f"s3-s{n:02d}-{i:06d}"
            i += 1
            with lock:
                markers.add(marker)
            outcome, wall, _, code = R.send_in_process(marker, timeout_ms / 1000)
            fig.client_done(outcome, wall, code)

    with R.umask_kept(), ThreadPoolExecutor(4 + F.FROZEN_CLIENTS) as pool:
        streams = [pool.submit(streamer, n) for n in range(4)]
        for cycle in range(cycles):
            wait_until(lambda: R.backlog(daemon.home, daemon.db) == 0, 30, "backlog drained")
            for _ in range(200):
                os.kill(pid, signal.SIGSTOP)
                if F.daemon_holds_write_lock(daemon.db):
                    in_txn += 1
                    break
                os.kill(pid, signal.SIGCONT)
                time.sleep(0.003)  # let the stream go on before the next try
            try:

                def client(k: int, cycle: int = cycle) -> None:
                    marker = f"s3-c{cycle:03d}-{k:02d}"
                    with lock:
                        markers.add(marker)
                    done, wall = R.send_subprocess(
                        payload(marker), {"NMEM_AUTOSTART": "0", "NMEM_TIMEOUT_MS": str(timeout_ms)}
                    )
                    fig.client_done("real", wall)
                    fig.check(R.client_problem(done) is None, f"client: {R.client_problem(done)}")

                for f in [pool.submit(client, k) for k in range(F.FROZEN_CLIENTS)]:
                    f.result(timeout=60)
            finally:
                os.kill(pid, signal.SIGCONT)
        stop.set()
        for f in streams:
            f.result(timeout=60)
    wait_until(lambda: R.backlog(daemon.home, daemon.db) == 0, 60, "drained after SIGCONT")
    fig.notes["freezes inside a write transaction"] = f"{in_txn}/{cycles}"
    fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
    fig.account(daemon.db, markers, "s3-")
    return fig


# --- 11. SIGTERM during a batch, repeated --------------------------------------------------------


def scenario_11(daemon: Daemon, scale: float) -> R.Figures:
    import test_faults as F

    rounds = R.scaled(1, scale)
    fig = R.Figures(
        11, f"SIGTERM during a batch, {rounds} rounds of {F.TERM_SENDERS} senders x {F.TERM_EVENTS} events", scale
    )
    fig.timeout_s = 2.0
    rng = random.Random(11)
    expected: set[str] = set()
    for rnd in range(rounds):
        daemon.start()
        assert daemon.proc is not None
        lock = threading.Lock()
        acked: set[str] = set()
        sent = [0]

        def sender(
            c: int, rnd: int = rnd, acked: set[str] = acked, sent: list[int] = sent, lock: threading.Lock = lock
        ) -> None:
            for i in range(F.TERM_EVENTS):
                marker = f"s11-r{rnd:03d}-c{c:02d}-{i:03d}"
                event_id, body = new_id(), payload(marker)
                t0 = time.monotonic()
                try:
                    status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, fig.timeout_s)
                except OSError:
                    status, reply = b"", b""
                if status == b"OK":
                    outcome = "acked"
                    with lock:
                        acked.add(marker)
                else:
                    outcome = inbox.store(event_id, body)
                fig.client_done(
                    outcome, time.monotonic() - t0, reply.split(b" ", 1)[0].decode() if status == b"ERR" else ""
                )
                with lock:
                    sent[0] += 1

        total = F.TERM_SENDERS * F.TERM_EVENTS
        share = rng.uniform(0.2, 0.8)
        with R.umask_kept(), ThreadPoolExecutor(F.TERM_SENDERS) as pool:
            futures = [pool.submit(sender, c) for c in range(F.TERM_SENDERS)]
            threshold = total * share
            wait_until(lambda: sent[0] >= threshold, 60, "events sent")  # noqa: B023 - used in this iteration
            daemon.proc.send_signal(signal.SIGTERM)
            rc = daemon.stop(timeout=30)
            for f in futures:
                f.result(timeout=120)
        fig.check(rc == 0, f"round {rnd}: exit code {rc}")
        stored = {
            str(r[0])
            for r in db_rows(daemon.db, "SELECT session_id FROM events WHERE session_id LIKE ?", (f"s11-r{rnd:03d}-%",))
        }
        lost_acked = acked - stored
        fig.check(not lost_acked, f"round {rnd}: {len(lost_acked)} acknowledged events not stored at exit")
        expected |= {f"s11-r{rnd:03d}-c{c:02d}-{i:03d}" for c in range(F.TERM_SENDERS) for i in range(F.TERM_EVENTS)}
        daemon.start()
        wait_until(lambda: R.backlog(daemon.home, daemon.db) == 0, 60, "drained after restart")
        daemon.stop()
    fig.account(daemon.db, expected, "s11-")
    return fig


# --- 12. databases of every earlier schema version ------------------------------------------------


def scenario_12(make_daemon: Callable[[], Daemon], scale: float) -> R.Figures:
    from support.earlier_stores import EARLIER_VERSIONS

    fig = R.Figures(12, f"{len(EARLIER_VERSIONS)} earlier database versions open and migrate", scale)
    for name, build, _ in EARLIER_VERSIONS:
        daemon = make_daemon()
        try:
            markers = build(daemon.home)
        except Exception as exc:  # a builder that no longer builds its version (a new migration)
            fig.violations.append(f"{name}: builder failed: {exc!r}")
            continue
        daemon.start()
        db = daemon.db
        wait_until(lambda: count(db, "inbox") == 0, 30, f"{name}: inbox drained")  # noqa: B023
        daemon.stop()
        sub = R.Figures(12, name)
        sub.account(daemon.db, markers, "mg-")
        fig.sent += sub.sent
        fig.stored += sub.stored
        fig.lost += sub.lost
        fig.duplicated += sub.duplicated
        fig.violations += [f"{name}: {v}" for v in sub.violations]
        fig.notes[name] = f"{sub.stored}/{sub.sent} events after migrating"
    return fig


# --- driver --------------------------------------------------------------------------------------


class Env:
    """A fresh NMEM_HOME and short socket dir, set in os.environ (the in-process client reads it)."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="nmrel-")
        self.short = tempfile.mkdtemp(prefix="nm", dir="/tmp")
        self.env = {
            "NMEM_HOME": os.path.join(self.root, "home"),
            "NMEM_SOCKET": os.path.join(self.short, "run", "nmemd.sock"),
        }
        self.saved = {k: v for k, v in os.environ.items() if k.startswith("NMEM_") or k == "NOTIFY_SOCKET"}

    def __enter__(self) -> Env:
        for key in self.saved:
            del os.environ[key]
        os.environ.update(self.env)
        return self

    def daemon(self) -> Daemon:
        return Daemon(dict(self.env), self.short)

    def __exit__(self, *exc: object) -> None:
        kill_all(self.env["NMEM_HOME"])
        for key in self.env:
            os.environ.pop(key, None)
        os.environ.update(self.saved)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.short, ignore_errors=True)


def run(number: int, scale: float) -> R.Figures:
    with Env() as env:
        daemon = env.daemon()
        try:
            if number == 12:
                counter = iter(range(1000))

                def fresh() -> Daemon:
                    home = Path(env.env["NMEM_HOME"]).parent / f"home{next(counter)}"
                    os.environ["NMEM_HOME"] = str(home)
                    return Daemon({**env.env, "NMEM_HOME": str(home)}, env.short)

                return scenario_12(fresh, scale)
            scenarios: dict[int, Callable[..., R.Figures]] = {
                1: scenario_1,
                2: R.scenario_2,
                3: scenario_3,
                4: R.scenario_4,
                5: R.scenario_5,
                6: R.scenario_6,
                7: R.scenario_7,
                9: R.scenario_9,
                10: R.scenario_10,
                11: scenario_11,
            }
            if number == 8:
                return R.scenario_8(daemon, env.short, scale)
            return scenarios[number](daemon, scale)
        finally:
            if daemon.proc is not None and daemon.proc.poll() is None:
                daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scenario",
        type=int,
        action="append",
        choices=range(1, 13),
        metavar="N",
        help="run only this scenario (repeatable; default: all twelve)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="scale for every scenario (1 = the CI sizes; default: each one's long scale,"
        " or NMEM_RELIABILITY_SCALE when set)",
    )
    add_quiet_arg(parser)
    args = parser.parse_args()
    wait_quiet(args.wait_quiet)
    print_machine()
    env_scale = os.environ.get(R.SCALE_ENV)
    failed = []
    for number in args.scenario or sorted(LONG_SCALE):
        scale = args.scale if args.scale is not None else (R.scale_from_env() if env_scale else LONG_SCALE[number])
        started = time.monotonic()
        try:
            fig = run(number, scale)
        except Exception:
            traceback.print_exc()
            print(f"scenario {number}: ERROR (scale {scale:g})")
            failed.append(number)
            continue
        fig.notes["run took"] = f"{time.monotonic() - started:.0f} s"
        print("\n".join(fig.lines()), flush=True)
        if fig.violations:
            failed.append(number)
    print(f"\n{'all scenarios passed' if not failed else f'FAILED: scenarios {failed}'}")


if __name__ == "__main__":
    main()
