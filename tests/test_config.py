"""Config: typed settings from defaults, config.toml and NMEM_* variables; clear errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import BIN, Daemon
from helpers import log_text, ping

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
    assert settings.batch_max_events == 512 and sources["batch_max_events"] == "default"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bogus = 1\n", "unknown setting 'bogus'"),
        ('batch_max_events = "many"\n', "batch_max_events"),
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
