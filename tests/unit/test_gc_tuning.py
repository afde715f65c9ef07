"""The daemon keeps start-up's objects out of full collections (nmemd.daemon.gc_tuning), in a process of its own."""

from __future__ import annotations

import subprocess
import sys


def test_freeze_long_lived_moves_live_objects_out_of_collections() -> None:
    code = (
        "import gc\n"
        "from nmemd.daemon import gc_tuning\n"
        "before = gc.get_freeze_count()\n"
        "gc_tuning.freeze_long_lived()\n"
        "print(before, gc.get_freeze_count() > 1000, gc.isenabled())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["0", "True", "True"] and out.stderr == ""  # collections still run for the rest
