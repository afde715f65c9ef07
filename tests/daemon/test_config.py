"""Config: typed settings from defaults, config.toml and NMEM_* variables; clear errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec
import pytest
from support.daemon import Daemon
from support.env import BIN
from support.helpers import log_text, ping

from nmemd import config
from nmemd.errors import ConfigError


def _write(home: str, text: str) -> Path:
    path = Path(home) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_file_and_env_layer_with_sources(nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(nmem_env["NMEM_HOME"], 'synchronous = "FULL"\ndedup_window_s = 30\nskip_tools = ["Read"]\n')
    monkeypatch.setenv("NMEM_DEDUP_WINDOW_S", "45")
    settings, sources = config.load_with_sources()
    assert settings.synchronous == "FULL" and sources["synchronous"] == str(path)
    assert settings.dedup_window_s == 45.0 and sources["dedup_window_s"] == "env NMEM_DEDUP_WINDOW_S"
    assert settings.skip_tools == ["Read"]
    assert settings.max_connections == 1024 and sources["max_connections"] == "default"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus = 1\n", "unknown setting 'bogus'"),
        ('max_connections = "many"\n', "max_connections"),
        ('synchronous = "SOMETIMES"\n', "synchronous"),
        ("x = [\n", "config.toml"),
    ],
)
def test_bad_config_names_the_key_and_the_file(nmem_env: dict[str, str], text: str, expected: str) -> None:
    _write(nmem_env["NMEM_HOME"], text)
    with pytest.raises(ConfigError, match=expected):
        config.load()


def test_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NMEM_READ_TIMEOUT_S", "-1")
    with pytest.raises(ConfigError, match="NMEM_READ_TIMEOUT_S"):
        config.load()


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
        assert shown.returncode == 0 and shown.stderr.splitlines() == [f"warning: {n}" for n in notes], shown.stderr
        assert "batch_max_delay_ms" not in shown.stdout and "dedup_window_s" in shown.stdout
        doctor = subprocess.run([str(BIN / "nmem"), "doctor", "--json"], capture_output=True, text=True, timeout=60)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["config"]["status"] == "warn" and checks["config"]["detail"] == "; ".join(notes), checks
    finally:
        daemon.stop()


def test_team_push_batch_is_a_constant_now(nmem_env: dict[str, str]) -> None:
    """A config.toml that sets team_push_batch loads whole; the key is said in one line, not used
    (tests and benches set the constant through NMEM_TUNE_TEAM_PUSH_BATCH)."""
    path = _write(nmem_env["NMEM_HOME"], "dedup_window_s = 7\nteam_push_batch = 50\n")
    assert config.retired_notes() == [
        f"{path} (line 2): 'team_push_batch' is no longer a setting (a constant now); ignored"
    ]
    checked = config.load_checked()
    assert checked.problems == [] and checked.settings.dedup_window_s == 7.0
    assert "team_push_batch" not in {f.name for f in msgspec.structs.fields(config.Settings)}


def test_a_retired_setting_in_the_environment_is_said_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NMEM_BATCH_MAX_EVENTS", "4")
    assert config.retired_notes() == [
        "env NMEM_BATCH_MAX_EVENTS: 'batch_max_events' is no longer a setting (a constant now); ignored"
    ]
    assert config.load_checked().problems == []
