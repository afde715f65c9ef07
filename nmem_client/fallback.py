"""Where an event goes when NMEM_HOME cannot be used, and what the session is told.

NMEM_HOME may be a file, a folder of another user, or a path that cannot be created
(`/proc/nope`): the event then neither reaches the daemon nor its inbox. Rather than lose it
without a word (issue #31, item 2), the client keeps it in a private spool outside the home,
`$XDG_RUNTIME_DIR/nmem-spool/<home digest>/` (else `$TMPDIR/nmem-spool-<uid>/<home digest>/`),
every level a 0700 folder of ours (checked after `mkdir`: a folder planted there by another
user, or a symlink, is refused), each event a 0600 `<event_id>.event` file. The daemon of that
home drains it once the home works (nmemd.capture.drain, by event_id: stored once), and a
SessionStart reply tells the user in the agent's own way (`notice_reply`).
"""

from __future__ import annotations

import hashlib
import os

from nmem_client import paths

REASON = "reason"  # why the events are here: `nmem status` and `nmem doctor` say it


def candidates(home: str) -> list[str]:
    """The folders that may hold `home`'s fallback events, best first."""
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    out = []
    runtime = paths.runtime_dir()
    if runtime:
        out.append(paths.join(runtime, "nmem-spool", digest))
    tmp = paths.env("TMPDIR") or "/tmp"
    out.append(paths.join(tmp, f"nmem-spool-{os.geteuid()}", digest))
    return out


def private_folder_problem(folder: str) -> str | None:
    """Why `folder` is not a private folder of ours (None: it is): not through a symlink, ours, 0700."""
    try:
        st = os.lstat(folder)
    except OSError as exc:
        return f"{folder}: {exc.strerror}"
    if (st.st_mode & 0o170000) != 0o040000:
        return f"{folder} is not a directory"
    if st.st_uid != os.geteuid():
        return f"{folder} is owned by uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"{folder} may be reached by others (mode {st.st_mode & 0o777:o})"
    return None


def _made(folder: str) -> str:
    """`folder` (and its parent), made 0700 if missing; OSError unless both are private and ours."""
    for level in (paths.dirname(folder), folder):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:
            pass
        why = private_folder_problem(level)
        if why:
            raise OSError(13, why, level)
    return folder


def keep(event_id: str, payload: bytes, reason: str) -> str | None:
    """Write the event into the first usable fallback folder; its path, or None when none is."""
    for folder in candidates(paths.home()):
        try:
            paths.write_private(os.path.join(_made(folder), f"{event_id}.event"), payload)
            paths.write_private(os.path.join(folder, REASON), reason.encode("utf-8", "replace"))
        except OSError:
            continue
        return folder
    return None


def waiting(home: str) -> tuple[str, int, str] | None:
    """(folder, events, reason) of `home`'s fallback events still waiting; None without any."""
    for folder in candidates(home):
        if private_folder_problem(folder) is not None:
            continue
        try:
            count = sum(1 for n in os.listdir(folder) if n.endswith(".event"))
        except OSError:
            continue
        if count:
            try:
                reason = paths.read_regular(os.path.join(folder, REASON), 4096).decode("utf-8", "replace")
            except OSError:
                reason = "NMEM_HOME could not be used"
            return folder, count, reason.strip()
    return None


# The notice's reply for an agent the table does not name: inside the context, where the model reads it.
_OTHER_FORM = (b'{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":', b"}}")


def notice_reply(agent: bytes, text: str) -> bytes:
    """A SessionStart reply carrying only `text`, in the form `agent`'s hooks read: the daemon's own
    (`nmemd.recall.replies.shaped_reply`), as the registry renders it into `notice_forms` (tests keep it so);
    an agent whose hooks show no `systemMessage` reads the notice in the context, which reaches only the model."""
    from nmem_client.notice_forms import FORMS

    return _json_string(text).join(FORMS.get(agent, _OTHER_FORM))


def _json_string(text: str) -> bytes:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0xD800 <= ord(ch) < 0xE000:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x20 else "\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out).encode("utf-8")
