"""What the daemon says back to hooks, and the work it does after a commit.

SessionStart (and, when enabled, UserPromptSubmit) get injected context;
Stop and SessionEnd schedule the session summary. Filled by the recall work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nmemd.model import Extracted

if TYPE_CHECKING:
    from nmemd.server import Daemon


async def hook_reply(daemon: Daemon, extracted: Extracted) -> bytes:
    """The bytes `nmem-send` prints on the hook's stdout (empty: nothing to say)."""
    return b""


async def after_commit(daemon: Daemon, extracted: Extracted) -> None:
    """Work triggered by a committed event, run in the background (never inside the hook's time)."""
    return None
