"""Where the code under test lives, and an nmem environment of a test's own: every path nmem or an agent
would touch points into the test's directories, never the user's."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from nmem_client import fallback

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SEND_SCRIPT = REPO / "nmem_client" / "send.py"

UNSET_FOR_TESTS = ("XDG_RUNTIME_DIR", "NMEM_TIMEOUT_MS", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")


def isolated_env(tmp_path: Path, short_dir: str) -> dict[str, str]:
    """NMEM_* and every agent's folders in `tmp_path`, the socket in `short_dir` (nmem_env's, or a
    module fixture's own)."""
    home = tmp_path / "home"
    env = {
        "NMEM_HOME": str(home),
        "NMEM_SOCKET": os.path.join(short_dir, "run", "nmemd.sock"),
        "COPILOT_HOME": str(tmp_path / "copilot"),  # never the user's ~/.copilot
        "NMEM_CURSOR_DIR": str(tmp_path / "cursor"),  # never the user's ~/.cursor
        "NMEM_CLINE_HOOKS_DIR": str(tmp_path / "cline" / "Hooks"),  # never the user's ~/Documents/Cline
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),  # never the user's ~/.config/opencode
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),  # nor ~/.local/share/opencode (nmem's own: NMEM_HOME)
    }
    return env


def remove_fallbacks(home: str, *roots: str) -> None:
    """Events a client kept outside an unusable NMEM_HOME (nmem_client.fallback) for this test's
    homes: its NMEM_HOME's folder, and any whose reason names a path of this test's."""
    for folder in fallback.candidates(home):
        shutil.rmtree(folder, ignore_errors=True)
    for base in {os.path.dirname(f) for f in fallback.candidates(home)}:
        for reason in Path(base).glob(f"*/{fallback.REASON}"):
            try:
                text = reason.read_text(errors="replace")
            except OSError:
                continue
            if any(root + "/" in text for root in roots):
                shutil.rmtree(reason.parent, ignore_errors=True)
