"""CHANGELOG.md keeps the Keep a Changelog shape (https://keepachangelog.com/en/1.1.0/, issue #38): an
`[Unreleased]` section first, then releases as `## [x.y.z] - YYYY-MM-DD`, each with the six standard
types at most once. An entry added commit by commit under a new `### Changed` heading fails here:
it belongs in the release's one `### Changed`."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TYPES = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
RELEASE = re.compile(r"\[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})")
HEADING = re.compile(r"^(#+) (.*)$", re.MULTILINE)


def shape_problems(text: str) -> list[str]:
    """What keeps `text` from the Keep a Changelog shape; [] when it has it."""
    problems: list[str] = []
    if "keepachangelog.com" not in text:
        problems.append("the header does not point at Keep a Changelog")
    release: str | None = None
    seen: set[str] = set()
    releases: list[str] = []
    for hashes, title in HEADING.findall(text):
        if len(hashes) == 1:
            if title != "Changelog" or releases:
                problems.append(f"`# {title}`: one `# Changelog` title, at the top")
        elif len(hashes) == 2:
            release, seen = title, set()
            releases.append(title)
            if title == "[Unreleased]":
                if len(releases) > 1:
                    problems.append("`## [Unreleased]` comes first, once")
                continue
            found = RELEASE.fullmatch(title)
            if found is None:
                problems.append(f"`## {title}`: a release is `## [x.y.z] - YYYY-MM-DD`")
                continue
            try:
                datetime.date.fromisoformat(found.group(2))
            except ValueError:
                problems.append(f"`## {title}`: not a date")
        elif len(hashes) == 3:
            if release is None:
                problems.append(f"`### {title}` outside a release")
            elif title not in TYPES:
                problems.append(f"`### {title}` in {release}: the types are {', '.join(TYPES)}")
            elif title in seen:
                problems.append(f"`### {title}` twice in {release}: one section per type")
            seen.add(title)
        else:
            problems.append(f"`{hashes} {title}`: group entries by area within a type, not by heading")
    if not releases or releases[0] != "[Unreleased]":
        problems.append("no `## [Unreleased]` section first")
    return problems


def test_the_changelog_has_the_keep_a_changelog_shape() -> None:
    problems = shape_problems((REPO / "CHANGELOG.md").read_text())
    assert not problems, "CHANGELOG.md:\n" + "\n".join(problems)


def test_the_shape_check_refuses_what_the_changelog_used_to_be() -> None:
    """The commit-by-commit form: no brackets, a second `### Changed`, a `### Performance`."""
    old = "# Changelog\n[Keep a Changelog](https://keepachangelog.com)\n## Unreleased\n### Performance\n- a\n"
    old += "### Changed\n- b\n### Added\n- c\n### Changed\n- d\n"
    assert shape_problems(old) == [
        "`## Unreleased`: a release is `## [x.y.z] - YYYY-MM-DD`",
        "`### Performance` in Unreleased: the types are " + ", ".join(TYPES),
        "`### Changed` twice in Unreleased: one section per type",
        "no `## [Unreleased]` section first",
    ]


def test_the_shape_check_takes_releases_and_refuses_bad_ones() -> None:
    good = "# Changelog\nkeepachangelog.com\n## [Unreleased]\n### Added\n- a\n## [0.1.0] - 2027-01-05\n"
    good += "### Added\n- b\n### Fixed\n- c\n"
    assert shape_problems(good) == []
    assert shape_problems(good + "## [0.0.9] - 2026-13-01\n") == ["`## [0.0.9] - 2026-13-01`: not a date"]
    assert shape_problems(good + "## 0.0.9\n") == ["`## 0.0.9`: a release is `## [x.y.z] - YYYY-MM-DD`"]
    assert shape_problems(good + "## [Unreleased]\n") == ["`## [Unreleased]` comes first, once"]
