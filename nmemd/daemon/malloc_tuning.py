"""Keep the daemon's C heap from shrinking and growing back at every burst of events.

glibc returns the top of the heap to the kernel once more than 128 KB is free there, and
serves blocks above a threshold it moves with the process's history from fresh `mmap`s.
The event loop's 256 KB socket reads and pipe writes cross both lines many times a
second; every give-back unmaps pages, and because the writer thread shares the address
space on the other core, every unmap sends it a TLB-flush interrupt (an exit to the
hypervisor on a virtual machine). Under load that cost the loop ~18 µs per event, and
how much depended on the import history (BENCHMARKS.md). Fixed thresholds of 1 MB keep
at most ~1 MB more resident and make the behaviour the same on every start.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Final

LOG = logging.getLogger("nmemd.malloc")
M_TRIM_THRESHOLD: Final = -1  # malloc.h
M_MMAP_THRESHOLD: Final = -3
THRESHOLD_BYTES: Final = 1 << 20


def keep_heap() -> bool:
    """Fix glibc's trim and mmap thresholds for this process; True when both took effect.

    A no-op (False) on other C libraries (macOS, musl), where `mallopt` is absent or differs.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError) as exc:
        LOG.debug("heap thresholds left to the C library: %s", exc)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1)
