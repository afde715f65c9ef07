"""A model of team sync, checked against the real thing (issue #36): three members, each a real daemon
with its own store, PostgreSQL role and checkout of one shared project; random sequences of capture,
forget (one's own row: for the team; a teammate's: hidden here), purge of a session, leave, rejoin,
a forget whose tombstone waits through a leave while the server is away, daemon kill -9, server
restart, a late redelivery of a push the server took before (at-least-once: a COMMIT whose reply
was lost, retried after the row was deleted), and a leave and join at once of a member who hid a
teammate's row (the history pulled again). Push and pull run as they always do, in the daemons'
background. At every quiescence (mid-run when a rule asks, and at the end) four invariants hold:
every member's view of the project is the model's (each live event once: nothing lost, duplicated
or resurrected), so is the server's, every member's full-text index names only rows that exist and
finds every row it indexed, and no byte of a deleted event's text is left in a member's store file
(a delete goes the way purge's does).

The driver (`run`) picks each operation with a seeded `random.Random` among those that apply (a
hypothesis state machine run once starts from its simplest example, the same rule every step, which
is how a planted bug went unseen). Used by tests/daemon/test_team_model.py (fixed seeds, a few steps)
and bench/bench_team_model.py (more seeds and steps)."""

from __future__ import annotations

import random
import re
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmemd.team import admin, pg, schema
from nmemd.team.local import OutRow
from support.team_world import Member, bash_event

NAMES = ("al", "bo", "cy")
REMOTES = {
    "al": "git@github.com:acme/api.git",
    "bo": "https://github.com/acme/api",
    "cy": "ssh://git@github.com/acme/api",
}
FAST = {"NMEM_TEAM_PULL_INTERVAL_S": "1"}
QUIET_S = 120.0  # the bound of the wait for every view to settle
ON_SERVER_S = 30.0  # the bound of the wait for a row to reach the server
MARKER = re.compile(r"zqm\d+x")
PROJECT = "github.com/acme/api"
# Each event's output holds a word of its own: consonants only, so the porter stemmer keeps it whole, and
# random, so the full-text index's pages (which store a term as its difference from the one before)
# keep most of its bytes as they are: a delete that leaves the index's bytes behind is found by them.
LETTERS = "bcdfghjklmnpqrtvwxz"


class Violation(AssertionError):
    pass


class TeamSyncModel:
    """Three members and the model of what each should see; `run` drives it."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.stack = ExitStack()
        self.db = self.stack.enter_context(self.cluster.database())
        admin.init(self.db.admin_dsn, "acme")
        self.root = Path(tempfile.mkdtemp(prefix="nmm", dir="/tmp"))
        self.members: dict[str, Member] = {}
        self.repos: dict[str, Path] = {}
        for name in NAMES:
            m = Member(name, self.root / name)
            self.members[name] = m
            m.dsn = admin.add_member(self.db.admin_dsn, "acme", name).dsn
            self.repos[name] = m.checkout("api", REMOTES[name])
            m.start(FAST)
            self._join(name)
        self.events: dict[str, tuple[str, str]] = {}  # marker -> (author, session) of every live event
        self.hidden: dict[str, set[str]] = {n: set() for n in NAMES}  # a member's forgets of teammates' rows
        self.words: dict[str, str] = {}  # marker -> the event's own word (its text's bytes in a store file)
        self.replayable: dict[str, tuple[str, OutRow]] = {}  # deleted events the server took: (author, push)
        self.joined = dict.fromkeys(NAMES, True)
        self.rng = random.Random(0)  # words unlike each other, not secret
        self.n = 0

    # --- the real thing -------------------------------------------------------------------------

    def _join(self, name: str) -> None:
        m = self.members[name]
        done = m.nmem("team", "join", "--project", str(self.repos[name]), stdin=m.dsn)
        assert done.returncode == 0, done.stderr

    def _local(self, name: str, mine: bool | None = None) -> list[tuple[int, str, str | None]]:
        """(id, marker, author) of the member's rows of the project."""
        conn = sqlite3.connect(f"file:{self.members[name].db}?mode=ro", uri=True, timeout=10)
        try:
            rows = conn.execute(
                "SELECT id, content, author FROM observations WHERE content LIKE '%zqm%' AND type = 'command'"
            ).fetchall()
        finally:
            conn.close()
        out = []
        for oid, content, author in rows:
            found = MARKER.search(content or "")
            if found and (mine is None or (author is None) == mine):
                out.append((int(oid), found.group(0), author))
        return out

    def _on_server(self) -> list[str]:
        """The markers of the project's live rows on the server (the superuser's view), repeats kept."""
        rows = self.db.execute("SELECT body FROM nmem.observations WHERE project = %s", (PROJECT,))
        return [m.group(0) for (body,) in rows if (m := MARKER.search(body or ""))]

    def _as_pushed(self, who: str, marker: str) -> OutRow | None:
        """The push of `who`'s event `marker` as the server took it (None: not there)."""
        rows = self.db.execute(
            "SELECT event_id, session_id, kind, title, body, extract(epoch FROM created_at)::float8"
            " FROM nmem.observations WHERE project = %s AND author = %s AND body LIKE %s",
            (PROJECT, who, f"%{marker}%"),
        )
        if not rows:
            return None
        event_id, session_id, kind, title, body, created = rows[0]
        return OutRow(outbox_id=0, op="obs", project_id=PROJECT, event_id=event_id, session_id=session_id,
                      kind=kind, title=title, body=body, created_at=float(created))  # fmt: skip

    def _forgetting(self, who: str, marker: str) -> None:
        """Before `who`'s own event leaves: what a late redelivery of its push would carry."""
        pushed = self._as_pushed(who, marker)
        if pushed is not None:
            self.replayable[marker] = (who, pushed)

    def _own_live(self) -> list[tuple[str, str]]:
        return sorted((author, k) for k, (author, _) in self.events.items() if self.joined[author])

    def _local_id(self, who: str, marker: str) -> int | None:
        return next((oid for oid, k, _ in self._local(who, mine=True) if k == marker), None)

    # --- operations: each runs only where it applies (the driver picks among those) ---------------

    def capture(self, rng: random.Random) -> None:
        who = rng.choice(NAMES)
        marker = f"zqm{self.n}x"
        sid = f"s-{who}-{rng.randrange(2)}"
        self.n += 1
        word = "".join(self.rng.choice(LETTERS) for _ in range(14)) + "q"
        event = bash_event(sid, self.repos[who], f"echo {marker}", f"{marker} done {word}", self.n)
        assert self.members[who].hook(event).returncode == 0
        self.events[marker] = (who, sid)
        self.words[marker] = word

    def can_forget_own(self) -> bool:
        return bool(self._own_live())

    def forget_own(self, rng: random.Random) -> None:
        who, marker = rng.choice(self._own_live())
        oid = self._local_id(who, marker)
        assert oid is not None, f"{who}'s own {marker} is not in their store"
        self._forgetting(who, marker)
        done = self.members[who].nmem("forget", str(oid), "--yes")
        assert done.returncode == 0, done.stderr
        del self.events[marker]

    def _hideable(self, who: str) -> list[str]:
        """The live events of joined teammates that `who` (joined) may hide: they reach their store."""
        if not self.joined[who]:
            return []
        return sorted(
            k
            for k, (author, _) in self.events.items()
            if author != who and self.joined[author] and k not in self.hidden[who]
        )

    def can_forget_teammates(self) -> bool:
        return any(self._hideable(n) for n in NAMES)

    def forget_teammates(self, rng: random.Random) -> None:
        """A teammate's row forgotten here, once it arrived: hidden on this machine only, for good."""
        who = rng.choice([n for n in NAMES if self._hideable(n)])
        marker = rng.choice(self._hideable(who))
        deadline = time.monotonic() + ON_SERVER_S
        while (oid := next((r[0] for r in self._local(who, mine=False) if r[1] == marker), None)) is None:
            if time.monotonic() > deadline:
                raise Violation(f"{who}: {marker} of a teammate did not arrive in {ON_SERVER_S:.0f} s")
            time.sleep(0.1)
        done = self.members[who].nmem("forget", str(oid), "--yes")
        assert done.returncode == 0 and "hidden on this machine only" in done.stdout, done.stdout + done.stderr
        self.hidden[who].add(marker)

    def purge_session(self, rng: random.Random) -> None:
        who, marker = rng.choice(self._own_live())
        sid = self.events[marker][1]
        gone = [k for k, (author, s) in self.events.items() if author == who and s == sid]
        for k in gone:
            self._forgetting(who, k)
        done = self.members[who].nmem("purge", "--session", sid, "--project", str(self.repos[who]), "--yes")
        assert done.returncode == 0, done.stderr
        for k in gone:
            del self.events[k]

    def forget_then_leave_while_the_server_is_away(self, rng: random.Random) -> None:
        """A forget of a row the team has, whose tombstone cannot leave yet, then a leave: the tombstone
        must still reach the team (the server and every teammate delete the row)."""
        who, marker = rng.choice(self._own_live())
        oid = self._local_id(who, marker)
        assert oid is not None, f"{who}'s own {marker} is not in their store"
        deadline = time.monotonic() + ON_SERVER_S
        while marker not in self._on_server():
            if time.monotonic() > deadline:
                raise Violation(f"{who}'s {marker} did not reach the server in {ON_SERVER_S:.0f} s")
            time.sleep(0.1)
        self._forgetting(who, marker)
        self.cluster.stop("immediate")
        try:
            m = self.members[who]
            done = m.nmem("forget", str(oid), "--yes")
            assert done.returncode == 0, done.stderr
            assert m.nmem("team", "leave", "--project", str(self.repos[who])).returncode == 0
        finally:
            self.cluster.start()
        del self.events[marker]
        self.joined[who] = False

    def can_leave(self) -> bool:
        return any(self.joined.values())

    def leave(self, rng: random.Random) -> None:
        who = rng.choice([n for n in NAMES if self.joined[n]])
        assert self.members[who].nmem("team", "leave", "--project", str(self.repos[who])).returncode == 0
        self.joined[who] = False

    def can_rejoin(self) -> bool:
        return not all(self.joined.values())

    def rejoin(self, rng: random.Random) -> None:
        who = rng.choice([n for n in NAMES if not self.joined[n]])
        self._join(who)
        self.joined[who] = True

    def can_share_again(self) -> bool:
        return any(self.joined[n] and self.hidden[n] for n in NAMES)

    def share_again(self, rng: random.Random) -> None:
        """A member who hid a teammate's row leaves and joins at once: the project's history is pulled
        again, and what they hid must stay hidden."""
        who = rng.choice([n for n in NAMES if self.joined[n] and self.hidden[n]])
        assert self.members[who].nmem("team", "leave", "--project", str(self.repos[who])).returncode == 0
        self._join(who)

    def kill_9(self, rng: random.Random) -> None:
        m = self.members[rng.choice(NAMES)]
        m.stop(signal.SIGKILL)
        m.start(FAST)

    def restart_server(self, rng: random.Random) -> None:
        self.cluster.stop("immediate")
        self.cluster.start()

    def can_redeliver(self) -> bool:
        return bool(self.replayable)

    def late_redelivery_of_a_deleted_events_push(self, rng: random.Random) -> None:
        """A push the server took, delivered again after its event was deleted (a COMMIT whose reply was
        lost and a retry that arrives late): the server must store nothing."""
        marker = rng.choice(sorted(self.replayable))
        who, row = self.replayable[marker]

        with pg.connect_blocking(self.members[who].dsn) as conn:
            pg.push(conn, "acme", f"{who}-box", [row], schema.SCHEMA_VERSION)

    def quiesce(self, rng: random.Random) -> None:
        """Everyone joined, every invariant checked now, mid-run."""
        self.settle()

    # --- quiescence -------------------------------------------------------------------------------

    def expected(self, name: str) -> list[str]:
        return sorted(k for k in self.events if k not in self.hidden[name])

    def views(self) -> dict[str, list[str]]:
        return {name: sorted(r[1] for r in self._local(name)) for name in NAMES}

    def settle(self) -> None:
        """Everyone joined again, then every view equals the model's within QUIET_S, or Violation."""
        for name in NAMES:
            if not self.joined[name]:
                self._join(name)
                self.joined[name] = True
        deadline = time.monotonic() + QUIET_S
        while True:
            wrong = self.violations()
            if not wrong:
                return
            if time.monotonic() >= deadline:
                raise Violation("; ".join(wrong))
            time.sleep(0.2)

    def violations(self) -> list[str]:
        """What differs from the model now ([]: nothing)."""
        out = [_diff(n, v, self.expected(n)) for n, v in self.views().items() if v != self.expected(n)]
        server = sorted(self._on_server())
        if server != sorted(self.events):
            out.append(_diff("the server", server, sorted(self.events)))
        for name in NAMES:
            out += self._store_file_violations(name)
        return out

    def _store_file_violations(self, name: str) -> list[str]:
        """The member's full-text index against its rows, and the bytes of its store file."""
        out: list[str] = []
        conn = sqlite3.connect(f"file:{self.members[name].db}?mode=ro", uri=True, timeout=10)
        try:
            stale = conn.execute(
                "SELECT -rowid FROM observations_fts WHERE observations_fts MATCH 'zqm*'"
                " EXCEPT SELECT id FROM observations"
            ).fetchall()
            below = conn.execute("SELECT indexed_below FROM fts_state").fetchone()[0]
            unindexed = conn.execute(
                "SELECT id FROM observations WHERE id < ? AND content LIKE '%zqm%'"
                " EXCEPT SELECT -rowid FROM observations_fts WHERE observations_fts MATCH 'zqm*'",
                (below,),
            ).fetchall()
        finally:
            conn.close()
        if stale:
            out.append(f"{name}: the full-text index names deleted rows {sorted(r[0] for r in stale)}")
        if unindexed:
            out.append(f"{name}: indexed rows the full-text index does not find {sorted(r[0] for r in unindexed)}")
        # What the WAL holds committed is copied into the file first, as the daemon's checkpointer does (a
        # PASSIVE checkpoint blocks no one): an idle daemon has no commit to start one after its delete.
        conn = sqlite3.connect(self.members[name].db, timeout=10)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()
        data = self.members[name].db.read_bytes()
        gone = set(self.words) - set(self.expected(name))
        left = sorted(k for k in gone if self.words[k][3:].encode() in data)
        if left:
            out.append(f"{name}: bytes of deleted events left in the store file: {left}")
        return out

    def close(self) -> None:
        for m in self.members.values():
            m.stop()
            m.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)
        self.stack.close()


# The operations and how often the driver picks each among those that apply (a capture builds the state
# the others work on), with what says whether it applies.
OPERATIONS: dict[str, tuple[int, Callable[[TeamSyncModel], bool]]] = {
    "capture": (4, lambda m: True),
    "forget_own": (2, TeamSyncModel.can_forget_own),
    "forget_teammates": (2, TeamSyncModel.can_forget_teammates),
    "purge_session": (1, TeamSyncModel.can_forget_own),
    "forget_then_leave_while_the_server_is_away": (1, TeamSyncModel.can_forget_own),
    "leave": (1, TeamSyncModel.can_leave),
    "rejoin": (1, TeamSyncModel.can_rejoin),
    "kill_9": (1, lambda m: True),
    "restart_server": (1, lambda m: True),
    "late_redelivery_of_a_deleted_events_push": (2, TeamSyncModel.can_redeliver),
    "quiesce": (1, lambda m: True),
    "share_again": (2, TeamSyncModel.can_share_again),
}


@dataclass
class Run:
    seed: int
    steps: list[str] = field(default_factory=list)  # the operations run, in order


def run(cluster: Any, seed: int, steps: int) -> Run:
    """`steps` operations picked by `seed` among those that apply, then quiescence: Violation (with the
    operations run) when a member's view, the server's or a store file differs from the model."""
    rng = random.Random(seed)
    done = Run(seed)
    model = TeamSyncModel(cluster)
    try:
        for _ in range(steps):
            names = [n for n, (_, applies) in OPERATIONS.items() if applies(model)]
            name = rng.choices(names, weights=[OPERATIONS[n][0] for n in names])[0]
            done.steps.append(name)
            getattr(model, name)(rng)
        model.settle()
    except AssertionError as exc:
        raise Violation(f"{exc} (seed {seed}, after {' '.join(done.steps)})") from exc
    finally:
        model.close()
    return done


def _diff(who: str, seen: list[str], want: list[str]) -> str:
    dup = sorted({k for k in seen if seen.count(k) > 1})
    return f"{who}: lost {sorted(set(want) - set(seen))}, duplicated {dup}, resurrected {sorted(set(seen) - set(want))}"
