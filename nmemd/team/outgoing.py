"""What may leave the machine of a shared project's row: the threat model's "the server sees only
what members chose to share, redacted", applied to every text column a push carries.

- Secrets and `<private>` blocks: `redact` and `strip_private` again, with today's rules.
- Prompts, when they are not shared (the default): a compaction summary's "All user messages"
  section goes, and any prompt of the session quoted verbatim (by a summary, a reply, a thought)
  becomes `[prompt not shared]`.
- Paths outside the shared project: an absolute path under the project's root becomes relative
  to it; one under a package folder keeps what follows (`…/site-packages/requests/api.py`); a
  system path (`/usr/lib/...`) stays; any other (the home folder, the user's name, another
  project) becomes `[path]`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from nmemd.capture import redact

PROMPT_HIDDEN: Final = "[prompt not shared]"
PATH_HIDDEN: Final = "[path]"
PROMPT_MIN_CHARS: Final = 12  # a shorter prompt ("yes", "go on") quoted is no disclosure, and too common to find
# Claude Code's compaction summary: "6. All user messages:" up to the next numbered section.
_USER_MESSAGES: Final = re.compile(
    r"(?im)^([ \t]*(?:\d+\.|#+)?[ \t]*\**All user messages\**:?)[^\n]*\n"
    r"(?:(?![ \t]*(?:\d+\.|#+)[ \t]+\S)[^\n]*(?:\n|\Z))*"
)
# An absolute path (or ~/...): a run of /segment, not inside a word or a URL (`://host/...`).
_PATH: Final = re.compile(r"(?<![\w.:/~-])(?:~(?=/)|/++[\w.@+%=,-]++)(?:/++[\w.@+%=,-]++)*+/?")
_SYSTEM: Final = (
    "/usr/", "/lib/", "/lib64/", "/bin/", "/sbin/", "/etc/", "/opt/", "/proc/", "/dev/", "/sys/", "/nix/store/",
    "/System/", "/Library/", "/Applications/", "/var/lib/", "/run/",
)  # fmt: skip
_PACKAGES: Final = ("/site-packages/", "/dist-packages/", "/node_modules/", "/.cargo/registry/", "/go/pkg/mod/")


def hide_prompts(text: str, prompts: Iterable[str]) -> str:
    """`text` without a compaction summary's user messages and without any prompt quoted whole."""
    if not text:
        return text
    if "user messages" in text or "User messages" in text or "User Messages" in text:
        text = _USER_MESSAGES.sub(lambda m: f"{m.group(1)} {PROMPT_HIDDEN}\n", text)
    quoted = {p.strip() for p in prompts if p and len(p.strip()) >= PROMPT_MIN_CHARS}
    for prompt in sorted(quoted, key=len, reverse=True):
        if prompt in text:
            text = text.replace(prompt, PROMPT_HIDDEN)
    return text


def relative_paths(text: str, root: str) -> str:
    """`text` with every absolute path made relative to `root` when under it, else kept only when
    it names nothing of this machine's user (see the module docstring)."""
    if not text or ("/" not in text and "~" not in text):
        return text
    top = root.rstrip("/")

    def one(m: re.Match[str]) -> str:
        path = m.group(0)
        path = re.sub("/{2,}", "/", path)
        if path == top or path == top + "/":
            return "."
        if path.startswith(top + "/"):
            return path[len(top) + 1 :]
        for mark in _PACKAGES:
            i = path.find(mark)
            if i >= 0:
                return "…" + path[i:]
        if path.startswith(_SYSTEM) or path.count("/") < 2 and not path.startswith("~"):
            return path  # a system path, or one segment ("/tmp", "/health"): nothing personal
        return PATH_HIDDEN

    return _PATH.sub(one, text)


def shareable_file(path: str | None, root: str) -> str | None:
    """A file column as it may leave: relative to the project's root, or None (outside it)."""
    if not path:
        return None
    top = root.rstrip("/")
    rel = path[len(top) + 1 :] if path.startswith(top + "/") else path
    rel = rel.lstrip("./") if rel.startswith("./") else rel
    if not rel or rel.startswith(("/", "~", "../")) or "/../" in rel or rel == "..":
        return None
    return rel


def shareable(text: str | None, *, root: str, prompts: Iterable[str] = (), share_prompts: bool = False) -> str:
    """One text column as it may leave: private blocks and secrets out, prompts hidden unless
    shared, paths relative or dropped."""
    if not text:
        return ""
    text = redact.redact_outgoing(redact.strip_private(text))
    if not share_prompts:
        text = hide_prompts(text, prompts)
    return relative_paths(text, root)
