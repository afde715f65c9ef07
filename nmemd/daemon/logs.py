"""Daemon logging: a rotating file under NMEM_HOME, never the hook's stderr."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys

from nmem_client import paths

LOG_FILE = "nmemd.log"


def setup(log_dir: str, level: str = "INFO", *, stderr: bool = False) -> str:
    """Route the `nmemd` loggers to `log_dir/nmemd.log` (5 MB x 3); return the path.

    Done before anything imports mcp, whose server constructor would otherwise
    install its own rich handler on the root logger.
    """
    paths.make_dirs(log_dir)
    path = os.path.join(log_dir, LOG_FILE)
    handler: logging.Handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    if stderr:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(fmt)
        root.addHandler(console)
    root.setLevel(level)
    os.chmod(path, 0o600)
    return path
