"""Config as the daemon and the CLI take it: a bad or retired setting is left out with one clear line in the
daemon's log, `nmem config show` and `nmem doctor`, and nothing stops (the layers themselves, in process:
tests/unit/test_config.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.daemon import Daemon
from support.env import BIN
from support.helpers import log_text, ping

from nmemd import config


def _write(home: str, text: str) -> Path:
    path = Path(home) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_daemon_runs_without_a_bad_setting_and_logs_it(nmem_env: dict[str, str], short_dir: str) -> None:
    """Issue #31 item 3: an unknown key no longer stops the daemon: it is left out, loudly (the whole
    story, with a corrupt file, a FIFO and the SessionStart reply: test_safety_fs.py)."""
    _write(nmem_env["NMEM_HOME"], "bogus = 1\ndedup_window_s = 7\n")
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        facts = ping(daemon.socket)
        path = Path(nmem_env["NMEM_HOME"]) / "config.toml"
        expected = f"{path} (line 1): unknown setting 'bogus'; bogus ignored, its default used"
        assert facts is not None and facts["config_problems"] == [expected]
        assert config.load_checked().settings.dedup_window_s == 7.0  # the rest of the file is used
        assert "unknown setting 'bogus'" in log_text(daemon.home)
    finally:
        daemon.stop()


def test_config_show_lists_values_and_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("NMEM_DEDUP_WINDOW_S", "5")
    done = subprocess.run([str(BIN / "nmem"), "config", "show", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows["dedup_window_s"] == {"value": 5.0, "source": "env NMEM_DEDUP_WINDOW_S"}
    assert rows["synchronous"] == {"value": "NORMAL", "source": "default"}


def test_a_retired_setting_is_said_in_one_line_and_stops_nothing(nmem_env: dict[str, str], short_dir: str) -> None:
    """A config.toml from before the tuning knobs became constants: the daemon starts and uses the
    rest of the file; its log, `nmem config show` and `nmem doctor` name the key in one line, a
    warning (exit 0 for config show, doctor's config check warns): nothing was left at a default."""
    import json

    _write(nmem_env["NMEM_HOME"], "batch_max_delay_ms = 2\ndedup_window_s = 7\nmaintenance_vacuum_pages = 1\n")
    path = Path(nmem_env["NMEM_HOME"]) / "config.toml"
    notes = [
        f"{path} (line 1): 'batch_max_delay_ms' is no longer a setting (a constant now); ignored",
        f"{path} (line 3): 'maintenance_vacuum_pages' is no longer a setting (a constant now); ignored",
    ]
    assert config.retired_notes() == notes
    checked = config.load_checked()
    assert checked.problems == [] and checked.settings.dedup_window_s == 7.0
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        facts = ping(daemon.socket)
        assert facts is not None and facts["config_problems"] == []
        assert all(f"WARNING nmemd: config: {n}" in log_text(daemon.home) for n in notes)
        shown = subprocess.run([str(BIN / "nmem"), "config", "show"], capture_output=True, text=True, timeout=60)
        said = shown.stderr.splitlines()
        assert shown.returncode == 0 and said[:-1] == [f"warning: {n}" for n in notes], shown.stderr
        assert said[-1].startswith("read from ")  # where the file was found (issue #37, 4)
        assert "batch_max_delay_ms" not in shown.stdout and "dedup_window_s" in shown.stdout
        doctor = subprocess.run([str(BIN / "nmem"), "doctor", "--json"], capture_output=True, text=True, timeout=60)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["config"]["status"] == "warn" and checks["config"]["detail"] == "; ".join(notes), checks
    finally:
        daemon.stop()
