"""Team memory's RPC methods (`NMEM1 rpc`): join, leave and status, on the daemon's one write connection.

The daemon's `rpc` hands them its `team_*` methods: they drive its `TeamSync` (`sync`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from nmemd.errors import UnknownMethod
from nmemd.recall.queries import convert_params
from nmemd.team import local

if TYPE_CHECKING:
    from nmemd.store.database import Store
    from nmemd.team.sync import TeamSync


class JoinParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    root: str
    project_id: str
    team: str
    dsn: str  # without its password
    member: str
    share_prompts: bool = False


class LeaveParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    root: str


async def call(store: Store, sync: TeamSync, window_days: float, method: str, params: dict[str, Any]) -> Any:
    """Run `method` (`team_join`, `team_leave`, `team_status`) on `store`, telling `sync` what changed;
    a project joined pulls its teammates' last `window_days` days."""
    if method == "team_join":
        p = convert_params(method, params, JoinParams)
        project = local.SharedProject(
            root=p.root, project_id=p.project_id, team=p.team, dsn=p.dsn, member=p.member,
            share_prompts=p.share_prompts, joined_at=time.time(),
        )  # fmt: skip
        queued = await store.transaction(local.join, project, window_days)
        sync.reload()
        return {"root": p.root, "project_id": p.project_id, "team": p.team, "queued": queued}
    if method == "team_leave":
        p_leave = convert_params(method, params, LeaveParams)
        left = await store.transaction(local.leave, p_leave.root)
        sync.reload()
        return {"root": p_leave.root, "left": left}
    if method == "team_status":
        return await sync.statuses()
    raise UnknownMethod(f"unknown method {method!r}")
