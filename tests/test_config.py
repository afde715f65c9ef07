"""Config: typed settings from defaults, config.toml and NMEM_* variables; clear errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import BIN

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


def test_daemon_refuses_bad_config_with_one_line_and_exit_3(nmem_env: dict[str, str]) -> None:
    _write(nmem_env["NMEM_HOME"], "bogus = 1\n")
    done = subprocess.run([str(BIN / "nmemd")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0 and "bogus" in done.stderr
    assert not (Path(nmem_env["NMEM_HOME"]) / "nmem.db").exists()


def test_config_show_lists_values_and_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv("NMEM_DEDUP_WINDOW_S", "5")
    done = subprocess.run([str(BIN / "nmem"), "config", "show", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows["dedup_window_s"] == {"value": 5.0, "source": "env NMEM_DEDUP_WINDOW_S"}
    assert rows["synchronous"] == {"value": "NORMAL", "source": "default"}
