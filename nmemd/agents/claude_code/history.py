"""Where Claude Code keeps its history (`~/.claude/projects/**/*.jsonl`, `$CLAUDE_CONFIG_DIR/projects`)
and how it is read: `history.transcripts`, the reader every `*.jsonl` no other agent claims goes to."""

from __future__ import annotations

import os
from typing import Final

from nmemd.history.sources import HistorySource, existing
from nmemd.history.transcripts import TranscriptReader, assistant_line, decode_line


def projects_root() -> str:
    """`~/.claude/projects` (`$CLAUDE_CONFIG_DIR/projects`): a folder per project, a transcript per session."""
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return os.path.join(base, "projects")


SOURCE: Final = HistorySource(
    roots=lambda: existing(projects_root()),
    claims=lambda path: path.endswith(".jsonl"),
    catch_all=True,
    lines=TranscriptReader.for_file,
    decode=decode_line,
    where=projects_root,
    words=TranscriptReader.words_of,
    words_line=assistant_line,
)
