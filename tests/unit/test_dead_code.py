"""No dead code (issue #38): nothing in nmemd or nmem_client that nothing calls. vulture reads the code
with the tests and bench as its callers, under pyproject.toml's [tool.vulture]: what it cannot see
being used (typer commands, agents' modules read by name, asyncio's callbacks, fields written out)
is named there with its reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE = ("nmemd/", "nmem_client/")


def test_nothing_in_the_code_goes_uncalled() -> None:
    found = subprocess.run(
        [sys.executable, "-m", "vulture", "nmemd", "nmem_client", "tests", "bench"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert found.returncode in (0, 3), found.stderr  # 3: vulture found unused code
    dead = [line for line in found.stdout.splitlines() if line.startswith(CODE)]
    assert not dead, (
        "no caller (remove it; if something outside Python's sight calls it, add it to [tool.vulture]"
        " in pyproject.toml with the reason):\n" + "\n".join(dead)
    )
