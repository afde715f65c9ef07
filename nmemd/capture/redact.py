"""Secret redaction and private-block stripping for everything nmem stores.

Hook payloads carry commands, prompts, diffs and tool output, and any of them
may hold a credential. Nothing reaches SQLite (or its FTS index) before
`strip_private` and `redact` ran over it.

What each kind of secret looks like (the pattern families) is in `secret_patterns`; here, the
order they run in, private blocks, PEM keys, `key = value` assignments and the gates that let
most text through untouched. Design constraints: patterns are compiled once; each starts with a
literal (so the regex engine's fast prefix search applies) or guards its start with a lookbehind
on its own character class, and every repeat is bounded or possessive, so a multi-megabyte
adversarial string costs linear time. A cheap substring prefilter skips every family whose
marker is absent, which is the common case. Replacements keep the key name
(`password=[REDACTED:password]`) and never store what they matched.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Final

from nmemd.capture.secret_patterns import (
    CURL_USER,
    FAMILIES,
    OUTGOING_NEEDLES,
    is_placeholder,
    outgoing,
    sub_at,
    sub_group,
    trie,
)

CONTEXT_TAG: Final = "nmem-context"
"""Tag that wraps nmem's own injected context; stripped so memory never recurses."""

REDACTED: Final = "[REDACTED:"

_PRIVATE_RE: Final = re.compile(
    rf"<(private|{CONTEXT_TAG})(?:\s[^<>]{{0,200}})?>(?:.*?</\1\s*>|.*)", re.IGNORECASE | re.DOTALL
)


def strip_private(text: str) -> str:
    """Remove `<private>...</private>` and `<nmem-context>...</nmem-context>` blocks.

    Case-insensitive, spans lines; an unterminated opening tag removes the rest of
    the text (fail closed).
    """
    if "<" not in text:
        return text
    return _PRIVATE_RE.sub("", text)


# --- PEM private key blocks --------------------------------------------------------------

_PEM_BEGIN: Final = re.compile(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.IGNORECASE)
_PEM_END: Final = re.compile(r"-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----", re.IGNORECASE)
# Body of an unterminated block (output cut short): base64, headers, escaped newlines.
_PEM_BODY: Final = re.compile(r"[A-Za-z0-9+/=\s:,.\\-]*+")


def _redact_pem(text: str) -> str:
    """Replace whole BEGIN..END private key blocks; linear even with many BEGINs."""
    out: list[str] = []
    pos = 0
    no_end = False
    for m in _PEM_BEGIN.finditer(text):
        if m.start() < pos:
            continue
        end = -1
        if not no_end:
            e = _PEM_END.search(text, m.end())
            if e is None:
                no_end = True  # no END after here: every later BEGIN is unterminated too
            else:
                end = e.end()
        if end < 0:
            body = _PEM_BODY.match(text, m.end())
            end = body.end() if body else m.end()
        out.append(text[pos : m.start()])
        out.append("[REDACTED:private-key]")
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


_PEM_BODY_BACK: Final = re.compile(r"[A-Za-z0-9+/=\s:,.\\-]*+")


def redact_tail(text: str) -> str:
    """`text`, the tail of a longer text, with the key body before a PEM END whose BEGIN was cut off.

    `redact` replaces BEGIN..END blocks and a BEGIN without END (a head cut short);
    a tail can start inside a block, so what precedes its first END without a BEGIN goes too.
    """
    if "private key" not in text.lower():
        return text
    end = _PEM_END.search(text)
    if end is None or _PEM_BEGIN.search(text, 0, end.start()) is not None:
        return text
    # Back over the key body (base64 lines) that ends at END: never past anything else.
    body = _PEM_BODY_BACK.match(text[: end.start()][::-1])
    start = end.start() - (body.end() if body else 0)
    return text[:start] + "[REDACTED:private-key]" + text[end.end() :]


# --- key = value assignments ------------------------------------------------------------

_KW: Final = (
    r"passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credentials?|auth[_-]?key"
)
_KW_NEEDLES: Final = (
    "passw", "passphrase", "pwd", "secret", "token", "apikey", "api_key", "api-key", "access_key",
    "access-key", "accesskey", "private_key", "private-key", "privatekey", "credential", "auth_key",
    "auth-key", "authkey",
)  # fmt: skip
# Keyword boundary: not inside a word, except at a camelCase hump or after a JSON escape.
_KW_START: Final = r"(?:(?<![A-Za-z])|(?<=[a-z0-9])(?=[A-Z])|(?<=\\[nrt]))"
# Not "tokens", "tokenizer", "passwords", "TOKENS".
_KW_STOP: Final = r"(?![a-z]|S(?![A-Z]))"
_VALUE: Final = (
    r"(?:[fFbBrRuU]{1,2}(?=[\"']))?"
    r"(?:\\\"(?P<v1>[^\"\\\n]{0,1000}+)\\\""
    r"|\"(?P<v2>(?:[^\"\\\n]|\\.){0,1000}+)\""
    r"|'(?P<v3>(?:[^'\\\n]|\\.){0,1000}+)'"
    r"|(?P<v4>[^\s\"'`,;&|)\]}>\\-][^\s\"'`,;&|)\]}>]{0,999}+))"
)
_ASSIGN_RE: Final = re.compile(
    _KW_START
    + rf"(?P<kw>(?i:{_KW})){_KW_STOP}(?P<tail>[A-Za-z0-9_.-]{{0,40}}+)"
    + r"(?:\\?[\"'])?\]?[ \t]{0,20}+(?P<op>:=|=>|=(?![=~])|:(?!:))[ \t]{0,20}+"
    + _VALUE
)
_FLAG_RE: Final = re.compile(
    r"--(?<![A-Za-z0-9_-]--)(?:[A-Za-z0-9]{1,20}+-){0,3}"
    + rf"(?P<kw>(?i:{_KW})){_KW_STOP}(?P<tail>[A-Za-z0-9_-]{{0,40}}+)[ \t]+"
    + _VALUE
)
_KW_STEMS: Final = ("pass", "pwd", "secret", "token", "key", "credential")  # every keyword holds one
_KW_FIND: Final = re.compile(trie(list(_KW_NEEDLES)))  # on lowered text
_KEY_RE: Final = re.compile(_KW_START + rf"(?P<kw>(?i:{_KW})){_KW_STOP}(?P<tail>[A-Za-z0-9_.-]{{0,60}})\Z")
_WORD_SPLIT: Final = re.compile(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")
# Last word of a key name that makes its value metadata, not a secret.
_BENIGN_TAIL: Final = frozenset(
    {
        "file", "files", "path", "dir", "url", "uri", "endpoint", "host", "name", "type", "id", "ids",
        "length", "len", "count", "size", "env", "var", "field", "header", "prefix", "suffix", "expiry",
        "expires", "expiration", "ttl", "timeout", "limit", "policy", "hint", "required", "min", "max",
        "enabled", "mode", "format", "label", "kind", "stdin", "cmd", "command", "prompt", "regex",
        "pattern", "location", "source", "provider", "manager", "store", "helper", "version", "index",
        "usage", "budget", "counter", "position", "class", "schema", "scope", "scopes", "method",
        "strategy", "reset", "rotation", "at", "template", "mask", "flag", "option", "param",
    }
)  # fmt: skip


def _family_of(kw: str) -> str:
    k = kw.lower()
    if k.startswith("pass") or k == "pwd":
        return "password"
    if k.startswith("api"):
        return "api-key"
    if k.startswith("access"):
        return "access-key"
    if k.startswith("private"):
        return "private-key"
    if k.startswith("cred"):
        return "credential"
    if k.startswith("auth"):
        return "auth-key"
    return k  # secret, token


def _benign_tail(tail: str) -> bool:
    if not tail:
        return False
    words = [w for w in _WORD_SPLIT.split(tail) if w]
    return bool(words) and words[-1].lower() in _BENIGN_TAIL


@lru_cache(maxsize=4096)
def sensitive_key(name: str) -> str | None:
    """The redaction family of a mapping key such as `client_secret` or `apiKey`, else None."""
    if len(name) > 80:
        return None
    low = name.lower()
    if low.endswith("authorization"):
        return "auth-header"
    if low.endswith("cookie"):
        return "cookie"
    for m in _KEY_RE.finditer(name):
        if not _benign_tail(m.group("tail")):
            return _family_of(m.group("kw"))
    return None


def _assign_sub(m: re.Match[str]) -> str:
    group = next(g for g in ("v1", "v2", "v3", "v4") if m.group(g) is not None)
    value = m.group(group)
    if _benign_tail(m.group("tail")) or is_placeholder(value, quoted=group != "v4"):
        # Keep the match, but look for assignments nested inside the value
        # (`token_url=https://x?access_token=abc`).
        if len(value) < 8:
            return m.group(0)
        return sub_group(m, group, _ASSIGN_RE.sub(_assign_sub, value))
    return sub_group(m, group, f"[REDACTED:{_family_of(m.group('kw'))}]")


def _flag_sub(m: re.Match[str]) -> str:
    group = next(g for g in ("v1", "v2", "v3", "v4") if m.group(g) is not None)
    value = m.group(group)
    if _benign_tail(m.group("tail")) or is_placeholder(value, quoted=group != "v4"):
        return m.group(0)
    return sub_group(m, group, f"[REDACTED:{_family_of(m.group('kw'))}]")


# Characters by how common they are in what nmem redacts (lowered prose, code, tool output),
# most common first; the rest are rarer still.
_BY_FREQUENCY: Final = ' etsroianldcpuhm\ngbwf.v-`_x"10y2:k4,3*/5'


def _anchored(words: list[str]) -> str:
    """A regex that finds any of `words`, each led by its rarest character.

    The engine tries a match only where the text holds one of the leading
    characters: far fewer places than the words' first letters, which are
    common ones. The rest of a word is checked around its anchor (a
    lookbehind for what precedes it), so a match is exactly an occurrence.
    """

    def rank(ch: str) -> int:
        i = _BY_FREQUENCY.find(ch)
        return len(_BY_FREQUENCY) if i < 0 else i

    groups: dict[str, set[tuple[str, str]]] = {}
    for w in words:
        i = max(range(len(w)), key=lambda i: (rank(w[i]), -i))
        groups.setdefault(w[i], set()).add((w[:i], w[i + 1 :]))
    alts = []
    for ch, parts in sorted(groups.items()):
        tails = [(f"(?<={re.escape(pre + ch)})" if pre else "") + re.escape(post) for pre, post in sorted(parts)]
        alts.append(re.escape(ch) + (tails[0] if len(tails) == 1 else "(?:" + "|".join(tails) + ")"))
    return "|".join(alts)


# One search over the lowered text for every needle rejects most strings (paths, ids,
# prose) before any family runs.
_NEEDLES: Final = sorted(
    {"private key", *_KW_NEEDLES, *(n.lower() for f in FAMILIES if not f.cased for n in f.needles)}
)
# Marks meaningful only as written (`SK`, `SG.`, `:AA`): looked for in the text itself.
_CASED: Final = tuple(f for f in FAMILIES if f.cased)
assert tuple(n for f in _CASED for n in f.needles) == ("SK", "SG.", ":AA")  # spelled out in _cased


def _cased(text: str) -> bool:
    return "SK" in text or "SG." in text or ":AA" in text


# curl's `-u` / `--user` count only where the password family can match them: not after a
# letter, digit, `_` or `-`, so prose ("follow-up", "pop-up") does not run every family. In
# lowered text a `k` may be a Kelvin sign (the one non-ASCII character that lowers to ASCII),
# which the family's lookbehind lets through: the gate lets it through too.
_CURL_USER_GATE: Final = r"-(?<![a-jl-z0-9_-]-)(?:-user|u)"  # led by its literal, like every other branch
_GATE: Final = re.compile(_anchored([n for n in _NEEDLES if n not in CURL_USER]) + "|" + _CURL_USER_GATE)
_GATE_MAX: Final = 65_536  # on longer text the per-family substring checks are cheaper than the gate
# Past the gate, most text holds only an assignment keyword ("token", "secret"): one search for
# every family's needles (an ASCII needle in the text is in its lowered form too) spares the
# fourteen per-family checks, which cost more than the assignments' own scan.
_FAMILY_GATE: Final = re.compile(
    _anchored(sorted({n.lower() for f in FAMILIES if not f.cased for n in f.needles} - set(CURL_USER)))
    + "|"
    + _CURL_USER_GATE
)


def redact(text: str) -> str:
    """Replace secrets in `text` with `[REDACTED:<family>]`, keeping key names.

    Order: PEM blocks, provider token formats, headers/URL/CLI credentials, then
    `key = value` assignments (which skip values already redacted).
    """
    if len(text) < 8:
        return text
    low = text.lower()
    if len(low) > _GATE_MAX or _GATE.search(low) is not None:
        return _redact_all(text, low)
    if _cased(text):  # a Twilio, SendGrid or Telegram token alone: only those families run
        for fam in _CASED:
            if fam.present(text, low):
                text = fam.apply(text, low)
    return text  # the common case: nothing could match


# Before a push: the needles of the capture families and of the outgoing ones in one search, so
# text with nothing to redact (most of a push) is scanned once, not once for each set. Compiled at
# the first push, as `outgoing()` is.
@cache
def _outgoing_gate() -> re.Pattern[str]:
    needles = {n for n in _NEEDLES if n not in CURL_USER} | {n.lower() for n in OUTGOING_NEEDLES}
    return re.compile(_anchored(sorted(needles)) + "|" + _CURL_USER_GATE)


def redact_outgoing(text: str) -> str:
    """`redact`, and the provider formats checked only before text leaves the machine (a push)."""
    low = text.lower()
    if len(low) <= _GATE_MAX and not _cased(text) and _outgoing_gate().search(low) is None:
        return text  # neither `redact` nor the outgoing family could match
    text = redact(text)
    low = text.lower()
    family = outgoing()
    if family.present(text, low):
        text = family.apply(text, low)
    return text


def _redact_all(text: str, low: str) -> str:
    """`redact` past its gate: every family whose needle is present, in order."""
    if "private key" in low:
        text = _redact_pem(text)
        low = text.lower()
    needled = _FAMILY_GATE.search(low) is not None
    for fam in FAMILIES:
        if (needled or fam.cased) and fam.present(text, low):
            new = fam.apply(text, low)
            if new is not text:
                text, low = new, new.lower()
    for stem in _KW_STEMS:
        if stem in low:
            break
    else:
        return text
    if "--" in text:
        text = _FLAG_RE.sub(_flag_sub, text)
        low = text.lower()
    return sub_at(text, low, _KW_FIND, _ASSIGN_RE, _assign_sub)
