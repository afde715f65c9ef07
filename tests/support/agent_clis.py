"""The real agent CLIs the e2e tests run, from the one table `.ci/run` installs them by
(tests/support/agent_clis.txt): their markers, the variables naming their binaries, their versions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).with_name("agent_clis.txt")


@dataclass(frozen=True)
class AgentCli:
    marker: str  # the pytest marker of its tests
    key: str  # NMEM_<key>_BIN names its binary, NMEM_REQUIRE_<key>=1 makes its absence an error
    folder: str  # .ci/<folder>/, where .ci/run installs it
    label: str
    version: str  # pinned
    package: str  # on npm

    @property
    def bin_var(self) -> str:
        return f"NMEM_{self.key}_BIN"

    @property
    def require_var(self) -> str:
        return f"NMEM_REQUIRE_{self.key}"

    def binary(self) -> str | None:
        """The binary to test with, or None (its tests are then skipped, with `skip_reason`)."""
        path = os.environ.get(self.bin_var, "")
        return path if path and os.access(path, os.X_OK) else None

    def skip_reason(self) -> str:
        return (
            f"the real {self.label} is not here: set {self.bin_var} to a {self.label} {self.version} binary"
            " (.ci/run installs it with npm when npm is available)"
        )


def _read() -> dict[str, AgentCli]:
    out = {}
    for line in TABLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            marker, key, folder, label, version, package, _binary, _needs = line.split("|")
            out[marker] = AgentCli(marker, key, folder, label, version, package)
    return out


CLIS: dict[str, AgentCli] = _read()  # by marker, in the table's order
