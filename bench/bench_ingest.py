"""Ingest throughput: many persistent connections, one frame in flight each, acked after COMMIT.

The load generator (asyncio, this process: a bare protocol per connection, ~8 us of CPU
per event; `--compare-generator` runs the older asyncio-streams one beside it, ~12 us)
and nmemd (a child process) run side by side on the same cores; payloads are the
fixture's PostToolUse events, made unique per event (session, command, paths) so the
daemon's dedup does not collapse them (`--payload repeat` sends identical payloads per
session instead). After each run the db must hold exactly the events sent. Then a sweep
over group commit's constants (nmemd.capture.ingest's BATCH_MAX_DELAY_MS and a small
BATCH_MAX_EVENTS, changed for the bench through NMEM_TUNE_BATCH_MAX_DELAY_MS and
NMEM_TUNE_BATCH_MAX_EVENTS: not settings) with 32 and 1 connections, plus the idle
single-event latency (a new connection per event, like the hook client), to justify them.

    .venv/bin/python bench/bench_ingest.py                      # 32 connections, 20,000 events, then the sweep
    .venv/bin/python bench/bench_ingest.py --connections 1 --events 2000 --no-sweep
    .venv/bin/python bench/bench_ingest.py --no-sweep --payload unique --compare-worker 7 --compare-generator 7
    git worktree add /tmp/base c091739 && .venv/bin/python bench/bench_ingest.py --no-sweep --payload unique \
        --compare-tree /tmp/base                                  # this checkout vs that commit, alternating
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import cast

import common
from common import Daemon, Home, median, ms, p99, verdict

TARGET_EPS = 10_000
RUN_TIMEOUT_S = 90.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    events: int
    connections: int
    elapsed_ns: int
    latencies_ns: list[int]
    daemon_cpu_s: float
    loop_cpu_s: float  # the daemon's main thread (the event loop); the rest ran on its other threads
    worker_cpu_s: float  # the daemon's children: the extraction worker (nmemd.capture.extract_worker)
    gen_cpu_s: float
    batches: int
    db_events: int

    @property
    def eps(self) -> float:
        return self.events / (self.elapsed_ns / 1e9)


def make_bodies(n: int, mode: str, tag: str) -> list[bytes]:
    templates = common.load_fixture("PostToolUse")
    if mode == "repeat":  # the same 8 payloads over and over in 64 sessions: dedup merges most
        return [common.repeat(templates[i % len(templates)], tag, i % 64, i) for i in range(n)]
    return [common.vary(templates[i % len(templates)], tag, i, sessions=64) for i in range(n)]


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (or of one of its threads), from /proc/<pid>[/task/<tid>]/stat."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def _load_streams(sock_path: str, frames: list[bytes], connections: int) -> tuple[int, list[int]]:
    """Open the connections, then send every frame; return (elapsed ns, per-frame latencies)."""
    conns = [await asyncio.open_unix_connection(sock_path) for _ in range(connections)]
    latencies: list[int] = []
    clock = time.perf_counter_ns

    async def worker(k: int) -> None:
        reader, writer = conns[k]
        for data in frames[k::connections]:
            t0 = clock()
            writer.write(data)
            await writer.drain()
            head = await reader.readuntil(b"\n")
            if head[:3] != b"OK ":
                raise RuntimeError(f"daemon refused an event: {head!r}")
            size = int(head[3:])
            if size:
                await reader.readexactly(size)
            latencies.append(clock() - t0)

    start = clock()
    try:
        await asyncio.gather(*(worker(k) for k in range(connections)))
        elapsed = clock() - start
    finally:
        for _, writer in conns:
            writer.close()
    return elapsed, latencies


class _Sender(asyncio.Protocol):
    """One connection of the load: sends its frames one at a time, the next once the ack is whole.

    A bare protocol rather than asyncio streams: the load generator shares the two cores with
    the daemon, and streams cost it ~3x the CPU per event (a coroutine resumed per read).
    """

    def __init__(self, frames: list[bytes], latencies: list[int], finished: asyncio.Future[None]):
        self.frames, self.latencies, self.finished = frames, latencies, finished
        self.next = 0
        self.buf = b""
        self.sent_at = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send_next(self) -> None:
        if self.next == len(self.frames):
            if not self.finished.done():
                self.finished.set_result(None)
            return
        self.sent_at = time.perf_counter_ns()
        cast(asyncio.Transport, self.transport).write(self.frames[self.next])
        self.next += 1

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        nl = buf.find(b"\n")
        if nl < 0:
            self.buf = buf
            return
        if buf[:3] != b"OK ":
            self._fail(RuntimeError(f"daemon refused an event: {buf[:nl]!r}"))
            return
        end = nl + 1 + int(buf[3:nl])
        if len(buf) < end:
            self.buf = buf
            return
        self.latencies.append(time.perf_counter_ns() - self.sent_at)
        self.buf = buf[end:]
        self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.next < len(self.frames) or self.buf:
            self._fail(exc or RuntimeError("the daemon closed a connection mid-run"))

    def _fail(self, exc: BaseException) -> None:
        if not self.finished.done():
            self.finished.set_exception(exc)


async def _load_protocol(sock_path: str, frames: list[bytes], connections: int) -> tuple[int, list[int]]:
    loop = asyncio.get_running_loop()
    latencies: list[int] = []
    senders: list[_Sender] = []
    for k in range(connections):
        sender = _Sender(frames[k::connections], latencies, loop.create_future())
        await loop.create_unix_connection(lambda s=sender: s, sock_path)  # type: ignore[misc]
        senders.append(sender)
    start = time.perf_counter_ns()
    try:
        for sender in senders:
            sender.send_next()
        await asyncio.gather(*(s.finished for s in senders))
        elapsed = time.perf_counter_ns() - start
    finally:
        for sender in senders:
            if sender.transport is not None:
                sender.transport.close()
    return elapsed, latencies


async def load(sock_path: str, frames: list[bytes], connections: int, protocol: bool = True) -> tuple[int, list[int]]:
    async with asyncio.timeout(RUN_TIMEOUT_S):
        return await (_load_protocol if protocol else _load_streams)(sock_path, frames, connections)


def run_once(
    events: int, connections: int, mode: str, env: dict[str, str] | None = None, protocol: bool = True
) -> Result:
    """A fresh daemon in a temp home, one load run, the db checked; the daemon stopped and removed."""
    tag = os.urandom(3).hex()
    frames = [common.frame(body) for body in make_bodies(events, mode, tag)]
    with Home() as home:
        daemon = Daemon(home, env=env)
        try:
            daemon.start()
            common.ping(home.socket)
            cpu0, loop0, gen0 = cpu_seconds(daemon.pid), cpu_seconds(daemon.pid, daemon.pid), time.process_time()
            kids0 = {kid: cpu_seconds(kid) for kid in common.child_pids(daemon.pid)}
            elapsed, latencies = asyncio.run(load(home.socket, frames, connections, protocol))
            cpu1, loop1, gen1 = cpu_seconds(daemon.pid), cpu_seconds(daemon.pid, daemon.pid), time.process_time()
            worker = sum(cpu_seconds(kid) - kids0.get(kid, 0.0) for kid in common.child_pids(daemon.pid))
            batches = int(common.ping_facts(home.socket).get("batches", 0))
        finally:
            daemon.stop()
        db_events = common.db_counts(home.db)["events"]
    return Result(
        events, connections, elapsed, latencies, cpu1 - cpu0, loop1 - loop0, worker, gen1 - gen0, batches, db_events
    )


def print_result(label: str, r: Result, mode: str, mean_bytes: float) -> bool:
    ok = r.db_events == r.events
    print(f"{label}: {r.events} events ({mode} payloads, mean {mean_bytes:.0f} B), {r.connections} connections")
    print(
        f"  throughput {r.eps:,.0f} events/s in {r.elapsed_ns / 1e9:.2f} s"
        + (f" (target >= {TARGET_EPS:,}: {verdict(r.eps >= TARGET_EPS)})" if r.connections >= 32 else "")
    )
    print(f"  ack latency median {ms(median(r.latencies_ns)):.2f} ms, p99 {ms(p99(r.latencies_ns)):.2f} ms")
    print(
        f"  batches {r.batches} (mean {r.events / max(r.batches, 1):.1f} events); daemon CPU "
        f"{r.daemon_cpu_s:.2f} s ({r.daemon_cpu_s / (r.elapsed_ns / 1e9):.0%} of a core, "
        f"{r.daemon_cpu_s / r.events * 1e6:.0f} us/event); load generator CPU {r.gen_cpu_s:.2f} s"
    )
    print(
        f"  daemon CPU per event by thread: event loop {r.loop_cpu_s / r.events * 1e6:.0f} us, "
        f"other threads (aiosqlite's) {(r.daemon_cpu_s - r.loop_cpu_s) / r.events * 1e6:.0f} us, "
        f"extraction worker {r.worker_cpu_s / r.events * 1e6:.0f} us (a process of its own)"
    )
    print(f"  db check: events={r.db_events} expected {r.events}: {'OK' if ok else 'MISMATCH'}")
    return ok


def idle_latency(env: dict[str, str], count: int, gap_s: float) -> list[int]:
    """Single events on an idle daemon, a new connection each (the hook client's pattern)."""
    templates = common.load_fixture("PostToolUse")
    tag = os.urandom(3).hex()
    bodies = [common.vary(templates[i % len(templates)], tag, i) for i in range(count)]
    out: list[int] = []
    with Home() as home:
        daemon = Daemon(home, env=env)
        try:
            daemon.start()
            common.ping(home.socket)
            for body in bodies:
                time.sleep(gap_s)
                t0 = time.perf_counter_ns()
                head = common.send_one(home.socket, body)
                out.append(time.perf_counter_ns() - t0)
                if not head.startswith(b"OK"):
                    raise RuntimeError(f"daemon refused an event: {head!r}")
        finally:
            daemon.stop()
        stored = common.db_counts(home.db)["events"]
    if stored != count:
        raise RuntimeError(f"idle run stored {stored} events, expected {count}")
    return out


def _pooled(results: list[Result]) -> tuple[float, list[int], float, float]:
    """Median throughput over rounds, pooled latencies, mean batch size, daemon CPU us/event (worker included)."""
    eps = median([r.eps for r in results])
    lat = [x for r in results for x in r.latencies_ns]
    events = sum(r.events for r in results)
    batch = events / max(sum(r.batches for r in results), 1)
    cpu = sum(r.daemon_cpu_s + r.worker_cpu_s for r in results) / events * 1e6
    return eps, lat, batch, cpu


def compare(
    title: str, variants: dict[str, tuple[dict[str, str], bool]], rounds: int, events: int, connections: int
) -> bool:
    """Runs of each variant (daemon env, bare-protocol generator?) in turn, so that the machine's drifts hit all alike.

    The first variant is the one held to the target; the last line is its ratio to the second.
    """
    runs: dict[str, list[Result]] = {label: [] for label in variants}
    for _ in range(rounds):
        for label, (env, protocol) in variants.items():
            runs[label].append(run_once(events, connections, "unique", env, protocol))
    print(f"\n{title}, {rounds} alternating rounds of {connections} conns x {events} unique events")
    width = max(map(len, variants))
    for i, (label, results) in enumerate(runs.items()):
        eps = [r.eps for r in results]
        cpu = sum(r.daemon_cpu_s + r.worker_cpu_s for r in results) / sum(r.events for r in results) * 1e6
        gen = sum(r.gen_cpu_s for r in results) / sum(r.events for r in results) * 1e6
        print(
            f"  {label:<{width}}: median {median(eps):,.0f} events/s (runs {', '.join(f'{x:,.0f}' for x in eps)});"
            f" daemon CPU {cpu:.0f} us/event, worker included; load generator {gen:.1f} us/event"
            + (
                f" (target >= {TARGET_EPS:,}: {verdict(median(eps) >= TARGET_EPS)})"
                if i == 0 and connections >= 32
                else ""
            )
        )
    first, second = (median([r.eps for r in results]) for results in list(runs.values())[:2])
    print(f"  {' / '.join(list(runs)[:2])}: {first / second:.2f}")
    return all(r.db_events == r.events for results in runs.values() for r in results)


def sweep(events: int, single_events: int, idle_count: int, rounds: int) -> bool:
    """Batch settings against throughput (32 and 1 connections) and idle latency.

    Rounds go over every setting in turn, so bursts of other work on the machine hit
    all settings alike; the table shows the median throughput and pooled latencies.
    """
    configs = [("0", "512"), ("1", "512"), ("2", "512"), ("5", "512"), ("2", "16")]
    r32s: dict[tuple[str, str], list[Result]] = {c: [] for c in configs}
    r1s: dict[tuple[str, str], list[Result]] = {c: [] for c in configs}
    idles: dict[tuple[str, str], list[int]] = {c: [] for c in configs}
    ok = True
    for _ in range(rounds):
        for delay, max_events in configs:
            env = {"NMEM_TUNE_BATCH_MAX_DELAY_MS": delay, "NMEM_TUNE_BATCH_MAX_EVENTS": max_events}
            r32 = run_once(events, 32, "unique", env)
            r1 = run_once(single_events, 1, "unique", env)
            idles[(delay, max_events)] += idle_latency(env, idle_count, 0.005)
            ok = ok and r32.db_events == r32.events and r1.db_events == r1.events
            r32s[(delay, max_events)].append(r32)
            r1s[(delay, max_events)].append(r1)
    print(
        f"\nbatch settings sweep, {rounds} round(s) (unique payloads; per round: 32 conns x {events} events, "
        f"1 conn x {single_events} events, idle: {idle_count} single events on new connections, 5 ms apart)"
    )
    print(
        f"{'delay ms':>8} {'max ev':>6} | {'32c ev/s':>9} {'32c p50':>8} {'32c p99':>8} {'batch':>6} {'cpu/ev':>7} | "
        f"{'1c ev/s':>8} {'1c p50':>7} | {'idle p50':>8} {'idle p99':>8}"
    )
    from nmemd.capture.ingest import BATCH_MAX_DELAY_MS, BATCH_MAX_EVENTS

    default_key = (f"{BATCH_MAX_DELAY_MS:g}", str(BATCH_MAX_EVENTS))
    for key in configs:
        eps32, lat32, batch32, cpu32 = _pooled(r32s[key])
        eps1, lat1, _, _ = _pooled(r1s[key])
        idle = idles[key]
        print(
            f"{key[0]:>8} {key[1]:>6} | {eps32:>9,.0f} {ms(median(lat32)):>6.2f}ms {ms(p99(lat32)):>6.2f}ms "
            f"{batch32:>6.1f} {cpu32:>5.0f}us | {eps1:>8,.0f} {ms(median(lat1)):>5.2f}ms | "
            f"{ms(median(idle)):>6.2f}ms {ms(p99(idle)):>6.2f}ms" + ("  <- default" if key == default_key else "")
        )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="events in the main run")
    parser.add_argument("--connections", type=int, default=32, help="concurrent persistent connections")
    parser.add_argument(
        "--payload",
        choices=["unique", "repeat", "both"],
        default="both",
        help="unique: nothing to dedup; repeat: identical payloads per session",
    )
    parser.add_argument("--no-sweep", action="store_true", help="skip the batch-settings sweep")
    parser.add_argument("--sweep-events", type=int, default=5_000, help="events per 32-connection sweep run")
    parser.add_argument("--sweep-single", type=int, default=500, help="events per 1-connection sweep run")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the sweep settings (medians)")
    parser.add_argument("--idle", type=int, default=100, help="single events per idle-latency run")
    parser.add_argument(
        "--daemon-env",
        action="append",
        default=[],
        metavar="NMEM_KEY=VALUE",
        help="a setting for the daemon of the main run (repeatable), e.g. NMEM_BATCH_MAX_EVENTS=16",
    )
    parser.add_argument(
        "--compare-worker",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="then alternate runs with the extraction worker on and off, ROUNDS each (unique payloads)",
    )
    parser.add_argument(
        "--compare-generator",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="then alternate runs of the bare-protocol load generator and the asyncio-streams one, ROUNDS each",
    )
    parser.add_argument(
        "--compare-tree",
        metavar="DIR",
        help="then alternate runs of this checkout's daemon and the one in DIR (a git worktree of another commit)",
    )
    parser.add_argument("--tree-rounds", type=int, default=7, help="rounds of --compare-tree (default 7)")
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    common.wait_quiet(args.wait_quiet)
    common.print_machine()
    ok = True
    modes = ["unique", "repeat"] if args.payload == "both" else [args.payload]
    if any("=" not in item or not item.startswith("NMEM_") for item in args.daemon_env):
        parser.error("--daemon-env takes NMEM_KEY=VALUE")
    daemon_env = dict(item.split("=", 1) for item in args.daemon_env) or None
    for mode in modes:
        bodies = make_bodies(64, mode, "size")
        mean_bytes = sum(map(len, bodies)) / len(bodies)
        r = run_once(args.events, args.connections, mode, daemon_env)
        ok = print_result("ingest", r, mode, mean_bytes) and ok
    env = daemon_env or {}
    if args.compare_worker:
        variants = {"worker on": ({**env, "NMEM_EXTRACT_WORKER": "1"}, True),
                    "worker off": ({**env, "NMEM_EXTRACT_WORKER": "0"}, True)}  # fmt: skip
        ok = compare("extraction worker on vs off", variants, args.compare_worker, args.events, args.connections) and ok
    if args.compare_tree:
        tree = os.path.abspath(args.compare_tree)
        variants = {"this tree": (env, True), f"{tree}": ({**env, "PYTHONPATH": tree}, True)}
        title = f"this checkout vs the daemon code of {tree} (PYTHONPATH)"
        ok = compare(title, variants, args.tree_rounds, args.events, args.connections) and ok
    if args.compare_generator:
        variants = {"protocol generator": (env, True), "streams generator": (env, False)}
        title = "load generator: bare protocol vs asyncio streams (the same daemon)"
        ok = compare(title, variants, args.compare_generator, args.events, args.connections) and ok
    if not args.no_sweep:
        ok = sweep(args.sweep_events, args.sweep_single, args.idle, args.rounds) and ok
    if not ok:
        raise SystemExit("db check failed: the db does not hold exactly the events sent")


if __name__ == "__main__":
    main()
