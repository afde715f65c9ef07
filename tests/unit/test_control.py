"""What the CLI's client side assumes of the daemon's methods (nmemd.control)."""

from __future__ import annotations

from nmemd.control import control
from nmemd.recall.methods import QUERIES


def test_reads_are_exactly_the_read_methods() -> None:
    """`ask` sends a read's request beside its ping, and a frozen daemon may run it after the ping timed
    out: only methods that change nothing may go that way, and every one of them should."""
    assert control.READS == set(QUERIES)
