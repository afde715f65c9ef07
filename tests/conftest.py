"""Shared fixtures and hooks: isolated NMEM_HOME, short socket paths, a real nmemd subprocess. The
helpers they use, and that test modules import, are in the `support` package."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import pg_cluster as pgc
from support.agent_clis import CLIS
from support.daemon import Daemon
from support.env import UNSET_FOR_TESTS, isolated_env, remove_fallbacks
from support.fixtures import SHARED
from support.helpers import umask_kept


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A directory under /tmp short enough for AF_UNIX paths (pytest's tmp_path is not)."""
    path = tempfile.mkdtemp(prefix="nm", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def nmem_env(tmp_path: Path, short_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Point every nmem path at this test's own directories."""
    env = isolated_env(tmp_path, short_dir)
    for key in UNSET_FOR_TESTS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield env
    remove_fallbacks(env["NMEM_HOME"], str(tmp_path), short_dir)


@pytest.fixture
def keep_umask() -> Iterator[None]:
    """For tests that run many hook clients in threads of this process (helpers.umask_kept)."""
    with umask_kept():
        yield


@pytest.fixture
def daemon(nmem_env: dict[str, str], short_dir: str) -> Iterator[Daemon]:
    d = Daemon(nmem_env, short_dir)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()
    elif d.proc is not None and d.proc.stderr is not None:
        d.proc.stderr.close()  # a daemon that died: its pipe must not leak into a later test's warnings


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pgc.Cluster]:
    """A real PostgreSQL cluster for the whole session (tests/support/pg_cluster.py); tests marked
    `postgres` skip, with the reason, where none can start, or fail where NMEM_REQUIRE_POSTGRES=1."""
    reason = pgc.unavailable()
    cluster = None
    if not reason:
        try:
            cluster = pgc.start_cluster()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            reason = f"no PostgreSQL test cluster could start: {' '.join(str(exc).split())[:400]}"
    if cluster is None:
        if os.environ.get(pgc.REQUIRE_ENV) == "1":
            pytest.fail(f"{pgc.REQUIRE_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_db(pg_cluster: pgc.Cluster) -> Iterator[pgc.Database]:
    """A fresh database of the session's cluster, owned by its own CREATEROLE admin (no superuser);
    dropped after the test with every role the test created."""
    with pg_cluster.database() as db:
        yield db


def pytest_configure(config: pytest.Config) -> None:
    for cli in CLIS.values():  # one marker per real agent CLI, from the table .ci/run installs them by
        config.addinivalue_line(
            "markers",
            f"{cli.marker}: end to end with the real {cli.label} ({cli.bin_var}); skipped, with the reason,"
            " where absent; .ci/run installs it",
        )


LAYERS = ("unit", "daemon", "e2e")  # tests/<layer>/: `pytest -m unit` is `pytest tests/unit`, and so on


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test is marked by the folder it lives in (docs/development.md says what each layer holds).
    tests = Path(__file__).parent
    for item in items:
        layer = item.path.relative_to(tests).parts[0]
        if layer in LAYERS:
            item.add_marker(layer)
    # Tests marked `shared` run over the real captures beside the repository, which a user's clone
    # has not: skipped there, with the reason. .ci/run sets NMEM_REQUIRE_SHARED where they exist,
    # so there they can never be skipped silently.
    # Tests marked with an agent CLI's marker (`claude_code`, ...: tests/support/agent_clis.txt) run the
    # real binary; .ci/run sets NMEM_REQUIRE_<KEY> when it installed it, so there a missing binary is an
    # error, never a skip.
    for cli in CLIS.values():
        if os.environ.get(cli.require_var) == "1" and cli.binary() is None:
            raise pytest.UsageError(f"{cli.require_var}=1 but {cli.bin_var} is not an executable {cli.label}")
    if os.environ.get("NMEM_REQUIRE_BROWSER") == "1" and not (
        os.environ.get("NMEM_CHROMIUM") or shutil.which("chromium")
    ):
        raise pytest.UsageError("NMEM_REQUIRE_BROWSER=1 but no chromium is on PATH (nor NMEM_CHROMIUM)")
    if SHARED.is_dir():
        return
    if os.environ.get("NMEM_REQUIRE_SHARED") == "1":
        raise pytest.UsageError(f"NMEM_REQUIRE_SHARED=1 but {SHARED} does not exist")
    skip = pytest.mark.skip(reason=f"needs the real captures in {SHARED} (absent here; .ci/run runs them)")
    for item in items:
        if "shared" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say why the `shared` tests and those of a real agent or browser were skipped, even under -q."""
    for marker in (*CLIS, "browser", "postgres"):
        missed = [r for r in terminalreporter.stats.get("skipped", []) if marker in r.keywords]
        if missed:
            reason = str(missed[0].longrepr[-1]) if isinstance(missed[0].longrepr, tuple) else "see -rs"
            terminalreporter.write_line(
                f"{len(missed)} tests marked `{marker}` skipped: {reason.removeprefix('Skipped: ')}"
            )
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "shared" in r.keywords]
    if skipped and not SHARED.is_dir():
        terminalreporter.write_line(
            f"{len(skipped)} tests marked `shared` skipped: they read the real captures in {SHARED},"
            " which is not beside this clone (.ci/run runs them where it is)"
        )
