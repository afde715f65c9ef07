"""The daemon keeps start-up's objects out of full collections (nmemd.gc_tuning), in a process of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import gc
from nmemd import gc_tuning
if {own}:
    gc_tuning.own_process()
gc_tuning.freeze_long_lived()
print(gc.get_freeze_count() > 1000, gc.isenabled())
"""


@pytest.mark.parametrize(("own", "frozen"), [(True, "True"), (False, "False")])
def test_freeze_long_lived_only_in_nmemds_own_process(own: bool, frozen: str) -> None:
    code = CODE.format(own=own)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == [frozen, "True"] and out.stderr == ""  # collections still run for the rest
