"""Observation-like records from the real transcripts in ../shared/corpus, read at run time.

The team-search benchmark grows a server of millions of rows from them (copied and varied), so the
words, their frequencies, the phrases, identifiers and paths are those of real agent sessions. The
records are made roughly as nmem makes observations: a prompt, the assistant's text, a command and
its output, an edit and its new text, a read and what it returned, an error. Nothing of the corpus
is ever written into the repository: the pool lives in memory for one run.
"""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "corpus.tar.gz"
if not CORPUS.exists():
    CORPUS = Path("/work/shared/corpus/corpus.tar.gz")
BODY_CHARS = 1500  # a body of real output, clipped as a digest would clip it
TITLE_CHARS = 120


@dataclass(frozen=True)
class Record:
    kind: str
    title: str
    body: str
    files: tuple[str, ...]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c.get("text", c.get("content", ""))) for c in content if isinstance(c, dict))
    return ""


def _clip(text: str, n: int) -> str:
    return " ".join(text.split())[:n] if len(text) < 4 * n else " ".join(text[: 4 * n].split())[:n]


def _tool_record(name: str, args: dict[str, Any], result: str, is_error: bool) -> Record | None:
    path = str(args.get("file_path") or args.get("path") or args.get("notebook_path") or "")
    files = (path,) if path else ()
    if is_error:
        return Record("error", _clip(f"{name} failed: {result}", TITLE_CHARS), _clip(result, BODY_CHARS), files)
    if name == "Bash":
        cmd = str(args.get("command", ""))
        return Record("command", _clip(f"Ran `{cmd}`", TITLE_CHARS), _clip(f"$ {cmd}\n{result}", BODY_CHARS), ())
    if name in ("Edit", "MultiEdit", "Write"):
        new = str(args.get("new_string") or args.get("content") or json.dumps(args.get("edits", ""))[:BODY_CHARS])
        return Record("edit", _clip(f"Edited {path}", TITLE_CHARS), _clip(new, BODY_CHARS), files)
    if name == "Read":
        return Record("read", _clip(f"Read {path}", TITLE_CHARS), _clip(result, BODY_CHARS), files)
    if name in ("Grep", "Glob"):
        pattern = str(args.get("pattern", ""))
        return Record("search", _clip(f"Searched {pattern}", TITLE_CHARS), _clip(result, BODY_CHARS), files)
    if name in ("TodoWrite", "TaskUpdate", "TaskCreate"):
        return Record("plan", "Updated the plan", _clip(json.dumps(args, ensure_ascii=False), BODY_CHARS), ())
    text = json.dumps(args, ensure_ascii=False)
    return Record("tool", _clip(f"{name}: {text}", TITLE_CHARS), _clip(f"{text}\n{result}", BODY_CHARS), files)


def _session_records(lines: Iterator[bytes]) -> list[Record]:
    pending: dict[str, tuple[str, dict[str, Any]]] = {}
    out: list[Record] = []
    for raw in lines:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        msg = rec.get("message") if isinstance(rec, dict) else None
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if rec.get("type") == "user":
            if isinstance(content, str) and content.strip() and not content.startswith("<"):
                out.append(Record("prompt", _clip(content, TITLE_CHARS), _clip(content, BODY_CHARS), ()))
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    name, args = pending.pop(str(block.get("tool_use_id")), ("", {}))
                    if name:
                        made = _tool_record(name, args, _text(block.get("content")), bool(block.get("is_error")))
                        if made:
                            out.append(made)
        elif rec.get("type") == "assistant":
            for block in content if isinstance(content, list) else []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
                    pending[str(block.get("id"))] = (str(block.get("name")), block["input"])
                elif block.get("type") == "text" and len(str(block.get("text", ""))) > 40:
                    text = str(block["text"])
                    out.append(Record("note", _clip(text.splitlines()[0], TITLE_CHARS), _clip(text, BODY_CHARS), ()))
    return out


def sessions(corpus: Path = CORPUS) -> list[list[Record]]:
    """Each transcript of the corpus as its observation-like records, in order (sessions of fewer
    than 5 records left out)."""
    out: list[list[Record]] = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp, tarfile.open(corpus) as tar:
        tar.extractall(tmp, filter="data")
        for path in sorted(Path(tmp).rglob("*.jsonl")):
            with path.open("rb") as f:
                records = _session_records(iter(f))
            if len(records) >= 5:
                out.append(records)
    return out


WORD = re.compile(r"[a-z][a-z0-9]{2,}")
