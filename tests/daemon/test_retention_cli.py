"""Retention through the CLI, as a subprocess: `nmem config show` names each layer of retention_days, a bad
setting is one clear line, and `nmem maintain --job retention` prints what it removed (the sweeps
themselves, in process: tests/unit/test_retention.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.db import integrity_ok
from support.helpers import nmem
from support.store import fill_by_age

from nmemd import config
from nmemd.errors import ConfigError


def test_retention_env_layers_over_the_file_and_config_show_names_both(
    nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("retention_days = { prompt = 50, read = 10 }\n")
    monkeypatch.setenv("NMEM_RETENTION_DAYS", "read=3, error=400")
    settings, sources = config.load_with_sources()
    assert settings.retention_days["read"] == 3 and settings.retention_days["prompt"] == 50
    assert settings.retention_days["error"] == 400 and settings.retention_days["fetch"] == 30
    assert sources["retention_days"] == f"default + {home / 'config.toml'} + env NMEM_RETENTION_DAYS"
    shown = nmem("config", "show", "--json")
    assert shown.returncode == 0, shown.stderr
    row = json.loads(shown.stdout)["retention_days"]
    assert row["value"]["read"] == 3.0 and "NMEM_RETENTION_DAYS" in row["source"]


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("env", "read", "expected TYPE=DAYS"),
        ("env", "reed=3", "unknown type 'reed'"),
        ("env", "read=-1", "retention_days"),
        ("env", "read=soon", "retention_days"),
        ("file", "retention_days = 30\n", "retention_days"),
        ("file", "[retention_days]\nbogus = 1\n", "unknown type 'bogus'"),
    ],
)
def test_bad_retention_config_is_one_clear_line(
    nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, where: str, value: str, expected: str
) -> None:
    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    if where == "env":
        monkeypatch.setenv("NMEM_RETENTION_DAYS", value)
    else:
        (home / "config.toml").write_text(value)
    with pytest.raises(ConfigError, match=expected):
        config.load()
    done = nmem("maintain", "--job", "retention")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected.split("'")[0] in lines[0], lines
    assert not (home / "nmem.db").exists()  # nothing changed


@pytest.mark.anyio
async def test_maintain_job_retention_prints_what_it_removed() -> None:
    settings = config.load()
    await fill_by_age(settings)
    done = nmem("maintain", "--job", "retention", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["name"] == "retention" and result["ok"]
    assert result["outcome"].startswith("removed 120 observations (")
    assert "read 40" in result["outcome"] and "command 40" in result["outcome"]
    table = nmem("maintain", "--job", "retention")
    assert table.returncode == 0 and "nothing expired" in table.stdout
    integrity_ok(settings.db)
