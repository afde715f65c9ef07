"""Config: typed settings from defaults, config.toml and NMEM_* variables; clear errors (what the daemon,
`nmem config show` and `nmem doctor` make of them: tests/daemon/test_config_cli.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

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
