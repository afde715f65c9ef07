"""A model of team sync, checked against the real thing (issue #36): three members, each a real daemon
with its own store, PostgreSQL role and checkout of one shared project; random sequences of capture,
forget (one's own row: for the team; a teammate's: hidden here), purge of a session, leave, rejoin,
daemon kill -9 and server restart. After quiescence every member's view of the project must be the
model's: each event once (nothing duplicated), every live event there (nothing lost), nothing
deleted back (nothing resurrected). Push and pull run as they always do, in the daemons' background.

Used by tests/daemon/test_team_model.py (a fixed seed, a few steps) and bench/bench_team_model.py
(more seeds and steps)."""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from nmemd.team import admin
from support.team_world import Member, bash_event

NAMES = ("al", "bo", "cy")
REMOTES = {
    "al": "git@github.com:acme/api.git",
    "bo": "https://github.com/acme/api",
    "cy": "ssh://git@github.com/acme/api",
}
FAST = {"NMEM_TEAM_PULL_INTERVAL_S": "1"}
QUIET_S = 120.0  # the bound of the wait for every view to settle
MARKER = re.compile(r"zqm\d+x")


class Violation(AssertionError):
    pass


class TeamSyncModel(RuleBasedStateMachine):
    cluster: ClassVar[Any] = None  # the PostgreSQL cluster (support.pg_cluster.Cluster), set by the runner
    steps_run: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
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
        self.joined = dict.fromkeys(NAMES, True)
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

    # --- rules ----------------------------------------------------------------------------------

    @rule(who=st.sampled_from(NAMES), session=st.integers(0, 1))
    def capture(self, who: str, session: int) -> None:
        marker = f"zqm{self.n}x"
        sid = f"s-{who}-{session}"
        self.n += 1
        event = bash_event(sid, self.repos[who], f"echo {marker}", f"{marker} done", self.n)
        assert self.members[who].hook(event).returncode == 0
        self.events[marker] = (who, sid)
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES), pick=st.integers(0, 10**6))
    def forget_own(self, who: str, pick: int) -> None:
        if not self.joined[who]:
            return
        own = [r for r in self._local(who, mine=True) if r[1] in self.events]
        if not own:
            return
        oid, marker, _ = own[pick % len(own)]
        done = self.members[who].nmem("forget", str(oid), "--yes")
        assert done.returncode == 0, done.stderr
        del self.events[marker]
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES), pick=st.integers(0, 10**6))
    def forget_teammates(self, who: str, pick: int) -> None:
        theirs = [r for r in self._local(who, mine=False) if r[1] in self.events]
        if not theirs:
            return
        oid, marker, _ = theirs[pick % len(theirs)]
        done = self.members[who].nmem("forget", str(oid), "--yes")
        assert done.returncode == 0 and "hidden on this machine only" in done.stdout, done.stdout + done.stderr
        self.hidden[who].add(marker)
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES), session=st.integers(0, 1))
    def purge_session(self, who: str, session: int) -> None:
        if not self.joined[who]:
            return
        sid = f"s-{who}-{session}"
        self.members[who].nmem("purge", "--session", sid, "--project", str(self.repos[who]), "--yes")
        for marker in [k for k, (author, s) in self.events.items() if author == who and s == sid]:
            del self.events[marker]
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES), pick=st.integers(0, 10**6))
    def forget_then_leave_while_the_server_is_away(self, who: str, pick: int) -> None:
        """A forget whose tombstone cannot leave yet, then a leave: the tombstone must still reach the team."""
        if not self.joined[who]:
            return
        own = [r for r in self._local(who, mine=True) if r[1] in self.events]
        if not own:
            return
        oid, marker, _ = own[pick % len(own)]
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
        TeamSyncModel.steps_run += 1

    @precondition(lambda self: any(self.joined.values()))
    @rule(who=st.sampled_from(NAMES))
    def leave(self, who: str) -> None:
        if not self.joined[who]:
            return
        m = self.members[who]
        assert m.nmem("team", "leave", "--project", str(self.repos[who])).returncode == 0
        self.joined[who] = False
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES))
    def rejoin(self, who: str) -> None:
        if self.joined[who]:
            return
        self._join(who)
        self.joined[who] = True
        TeamSyncModel.steps_run += 1

    @rule(who=st.sampled_from(NAMES))
    def kill_9(self, who: str) -> None:
        m = self.members[who]
        m.stop(signal.SIGKILL)
        m.start(FAST)
        TeamSyncModel.steps_run += 1

    @rule()
    def restart_server(self) -> None:
        self.cluster.stop("immediate")
        self.cluster.start()
        TeamSyncModel.steps_run += 1

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
            views = self.views()
            wrong = {n: v for n, v in views.items() if v != self.expected(n)}
            if not wrong:
                return
            if time.monotonic() >= deadline:
                lines = []
                for n, v in wrong.items():
                    want = self.expected(n)
                    dup = sorted({k for k in v if v.count(k) > 1})
                    lines.append(
                        f"{n}: lost {sorted(set(want) - set(v))}, duplicated {dup},"
                        f" resurrected {sorted(set(v) - set(want))}"
                    )
                raise Violation("; ".join(lines))
            time.sleep(0.2)

    def teardown(self) -> None:
        try:
            self.settle()
        finally:
            for m in self.members.values():
                m.stop()
                m.cleanup()
            shutil.rmtree(self.root, ignore_errors=True)
            self.stack.close()
