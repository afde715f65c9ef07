"""The daemon's team methods (`NMEM1 rpc`): join, leave and status, on its one write connection.

Beside `rpc`, which hands them `team_*` methods: they drive the daemon's `TeamSync` (nmemd.team).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from nmemd.errors import UnknownMethod
from nmemd.recall.queries import convert_params
from nmemd.team import local

if TYPE_CHECKING:
    from nmemd.daemon.server import Daemon


class JoinParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    root: str
    project_id: str
    team: str
    dsn: str  # without its password
    member: str
    share_prompts: bool = False


class LeaveParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    root: str


async def call(daemon: Daemon, method: str, params: dict[str, Any]) -> Any:
    sync = daemon.team
    if method == "team_join":
        p = convert_params(method, params, JoinParams)
        project = local.SharedProject(
            root=p.root, project_id=p.project_id, team=p.team, dsn=p.dsn, member=p.member,
            share_prompts=p.share_prompts, joined_at=time.time(),
        )  # fmt: skip
        queued = await daemon.ingestor.store.transaction(local.join, project, daemon.settings.team_window_days)
        sync.reload()
        return {"root": p.root, "project_id": p.project_id, "team": p.team, "queued": queued}
    if method == "team_leave":
        p_leave = convert_params(method, params, LeaveParams)
        left = await daemon.ingestor.store.transaction(local.leave, p_leave.root)
        sync.reload()
        return {"root": p_leave.root, "left": left}
    if method == "team_status":
        return await sync.statuses()
    raise UnknownMethod(f"unknown method {method!r}")
