"""The daemon fixes glibc's heap thresholds (nmemd.daemon.malloc_tuning), in a process of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_heap_takes_effect_on_linux() -> None:
    code = "from nmemd.daemon import malloc_tuning; print(malloc_tuning.keep_heap())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "True" and out.stderr == ""
