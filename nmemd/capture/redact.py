"""Secret redaction and private-block stripping for everything nmem stores.

Hook payloads carry commands, prompts, diffs and tool output, and any of them
may hold a credential. Nothing reaches SQLite (or its FTS index) before
`strip_private` and `redact` ran over it.

Design constraints: patterns are compiled once; each starts with a literal (so
the regex engine's fast prefix search applies) or guards its start with a
lookbehind on its own character class, and every repeat is bounded or
possessive, so a multi-megabyte adversarial string costs linear time. A cheap
substring prefilter skips every family whose marker is absent, which is the
common case. Replacements keep the key name (`password=[REDACTED:password]`)
and never store what they matched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final

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


# --- Provider token formats -------------------------------------------------------------


def _lead(literal: str, run: str) -> str:
    """`literal` not preceded by a `run` character (or preceded by a JSON escape like `\\n`).

    The lookbehind sits after the literal so the pattern still starts with a literal.
    """
    return rf"{literal}(?:(?<!{run}{literal})|(?<=\\[nrt]{literal}))"


_ALNUM: Final = "[A-Za-z0-9]"
_TOKCH: Final = "[A-Za-z0-9_-]"
_END_ALNUM: Final = "(?![A-Za-z0-9])"


def _has_digit_and_upper(tok: str) -> bool:
    return any(c.isdigit() for c in tok) and any(c.isupper() for c in tok)


def _openai_ok(m: re.Match[str]) -> bool:
    tok = m.group(0)
    return tok.startswith(("sk-proj-", "sk-svcacct-", "sk-admin-")) or _has_digit_and_upper(tok)


Fn = Callable[[re.Match[str]], str]
MAX_CANDIDATES: Final = 100_000
"""Keyword hits examined per family and call; beyond it the rest of the text is dropped."""


def _sub_at(text: str, low: str, finder: re.Pattern[str], pattern: re.Pattern[str], fn: Fn) -> str:
    """`pattern.sub(fn, text)`, trying `pattern` only where `finder` hits the lowered text.

    A case-sensitive literal search on `low` is several times faster than a
    case-insensitive scan of `text`; `low` has the same length unless `text`
    holds one of the rare characters whose lower case is longer.
    """
    if len(low) != len(text):
        return pattern.sub(fn, text)
    out: list[str] = []
    pos = 0
    for n, c in enumerate(finder.finditer(low)):
        i = c.start()
        if i < pos:
            continue
        if n >= MAX_CANDIDATES:  # adversarially dense input: fail closed on the rest
            out.append(text[pos:i])
            out.append("[REDACTED:too-dense]")
            return "".join(out)
        m = pattern.match(text, i)
        if m is None:
            continue
        out.append(text[pos:i])
        out.append(fn(m))
        pos = m.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _trie(words: list[str]) -> str:
    """A regex alternation of `words` factored by prefix (much faster than a flat one)."""
    root: dict[str, dict[str, Any]] = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, dict[str, Any]]) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


class _Family:
    """One pattern family: a prefilter, a compiled pattern and its replacement.

    `group` names the part to replace (None: the whole match). `lower` families
    have lowercase needles and are located through the lowered text.
    """

    __slots__ = ("name", "needles", "lower", "pattern", "group", "accept", "finder")

    def __init__(
        self,
        name: str,
        needles: tuple[str, ...],
        pattern: str,
        *,
        group: str | None = None,
        lower: bool = False,
        finder: bool = False,
        accept: Callable[[re.Match[str]], bool] | None = None,
    ) -> None:
        self.name = name
        self.needles = needles
        self.lower = lower
        self.pattern = re.compile(pattern)
        self.group = group
        self.accept = accept
        # Locate candidates with a case-sensitive search for the lowercased needles in the
        # lowered text, then match at each: faster than a case-insensitive or lookbehind-led scan.
        self.finder = re.compile(_trie([n.lower() for n in needles])) if lower or finder else None

    def present(self, text: str, low: str) -> bool:
        """Cheap prefilter: does any needle occur?"""
        hay = low if self.lower else text
        for n in self.needles:
            if n in hay:
                return True
        return False

    def apply(self, text: str, low: str) -> str:
        repl = f"[REDACTED:{self.name}]"
        accept = self.accept
        group = self.group

        def fn(m: re.Match[str]) -> str:
            if accept is not None and not accept(m):
                return m.group(0)
            return repl if group is None else _sub_group(m, group, repl)

        if self.finder is not None:
            return _sub_at(text, low, self.finder, self.pattern, fn)
        return self.pattern.sub(fn, text)


def _sub_group(m: re.Match[str], group: str, repl: str) -> str:
    """m's text with `group` replaced by `repl`."""
    base = m.start()
    s, e = m.span(group)
    whole = m.group(0)
    return whole[: s - base] + repl + whole[e - base :]


_TOKEN_FAMILIES: Final = (
    _Family(
        "aws-access-key",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        "(?:" + "|".join(_lead(p, _ALNUM) for p in ("AKIA", "ASIA", "ABIA", "ACCA", "A3T[A-Z0-9]")) + ")"
        r"[A-Z2-7]{16}" + _END_ALNUM,
    ),
    _Family(
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        "(?:" + _lead("gh[pousr]_", _ALNUM) + r"[A-Za-z0-9]{36,255}+"
        "|" + _lead("github_pat_", _ALNUM) + r"[A-Za-z0-9_]{22,255}+)",
    ),
    _Family("slack-token", ("xox",), _lead("xox[baprs]-", _ALNUM) + r"[A-Za-z0-9-]{10,250}+"),
    _Family("anthropic-key", ("sk-ant-",), _lead("sk-ant-", _ALNUM) + r"[A-Za-z0-9_-]{20,300}+"),
    _Family(
        "openai-key",
        ("sk-",),
        _lead("sk-", _ALNUM) + r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,300}+",
        accept=_openai_ok,
    ),
    _Family("google-api-key", ("AIza",), _lead("AIza", _ALNUM) + r"[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    _Family(
        "stripe-key",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_"),
        r"[sr]k_(?:(?<![A-Za-z0-9][sr]k_)|(?<=\\[nrt][sr]k_))(?:live|test)_[0-9A-Za-z]{10,250}+",
        finder=True,
    ),
    _Family(
        "jwt",
        ("eyJ",),
        _lead("eyJ", _TOKCH) + r"[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+=*+",
    ),
)

# --- Headers, bearer tokens, URL and CLI credentials -----------------------------------


def _plain_word(v: str) -> bool:
    return v.isalpha() and v.islower() and len(v) < 16


_PLACEHOLDER_WORDS: Final = frozenset(
    {
        "none", "null", "nil", "true", "false", "undefined", "str", "string", "int", "bytes", "bool",
        "any", "optional", "required", "redacted", "hidden", "secret", "password", "token",
    }
)  # fmt: skip
_IDENT_CHAIN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
_IDENT_UNDERSCORE: Final = re.compile(r"[A-Za-z]*_[A-Za-z_]*")
_MASK_CHARS: Final = frozenset("*xX.•#-_ ")


def is_placeholder(value: str, *, quoted: bool = True) -> bool:
    """True for values that are obviously not secrets: empty, `$VAR`, `${VAR}`, `<x>`, `***`..."""
    v = value.strip()
    if not v:
        return True
    if v[0] in "$%{<[*#(" or v.startswith(("[REDACTED", "-", "~/", "./")):
        return True
    if v[0] == "/" and " " not in v:  # a file path
        return True
    if all(c in _MASK_CHARS for c in v):
        return True
    if v.lower() in _PLACEHOLDER_WORDS:
        return True
    if not quoted:  # unquoted right-hand sides that read as code, not data
        if "(" in v or "[" in v or _IDENT_CHAIN.fullmatch(v) or _IDENT_UNDERSCORE.fullmatch(v):
            return True
    return False


def _auth_ok(m: re.Match[str]) -> bool:
    cred = m.group("cred")
    return not is_placeholder(cred) and not _plain_word(cred)


def _bearer_ok(m: re.Match[str]) -> bool:
    tok = m.group("tok")
    if is_placeholder(tok):
        return False
    return (any(c.isdigit() for c in tok) and len(tok) >= 12) or len(tok) >= 24


_CURL_USER: Final = ("-u", "--user")  # the password family's needles (curl -u user:password)

_CONTEXT_FAMILIES: Final = (
    _Family(
        "aws-secret-key",
        ("aws",),
        r"(?i:aws_?secret(?:_?access)?_?key)(?:\\?[\"'])?[ \t]{0,20}+(?::=|=>|[:=])[ \t]{0,20}+"
        r"(?:\\?[\"'])?(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        group="v",
        lower=True,
    ),
    _Family(
        "auth-header",
        ("authorization",),
        r"(?<![A-Za-z])(?i:authorization)(?:\\?[\"'])?[ \t]{0,20}+[:=][ \t]{0,20}+"
        r"(?:[fFbBrR]?\\?[\"'])?(?i:(?:bearer|basic|token|digest|bot|apikey|negotiate|ntlm)[ \t]+)?"
        r"(?P<cred>[^\s\"'\\,]{1,4000}+)",
        group="cred",
        lower=True,
        accept=_auth_ok,
    ),
    _Family(
        "cookie",
        ("cookie",),
        r"(?<![A-Za-z])(?i:cookie)[ \t]{0,20}+:[ \t]{0,20}+(?P<v>[^\r\n\"'\\]{1,4000}+)",
        group="v",
        lower=True,
        accept=lambda m: not is_placeholder(m.group("v")),
    ),
    _Family(
        "bearer-token",
        ("bearer",),
        r"(?<![A-Za-z])(?i:bearer)[ \t]+(?P<tok>[A-Za-z0-9._~+/=-]{8,4000}+)",
        group="tok",
        lower=True,
        accept=_bearer_ok,
    ),
    _Family(
        "url-password",
        ("://",),
        r"://(?P<user>[^\s:/@\"'<>\[\]]{1,256}+):(?P<pw>[^\s@/\"'<>]{1,256}+)@",
        group="pw",
        accept=lambda m: not is_placeholder(m.group("pw")),
    ),
    _Family(  # curl -u user:password
        "password",
        _CURL_USER,
        r"(?:-u(?<![A-Za-z0-9_-]-u)|--user(?<![A-Za-z0-9_-]--user))[ \t=]+[\"']?"
        r"(?P<user>[^\s:\"'$\[]{1,200}+):(?P<pw>[^\s\"']{1,500}+)",
        group="pw",
        accept=lambda m: not is_placeholder(m.group("pw")),
    ),
)

_NETRC_BEFORE: Final = re.compile(r"(?:^|\s)(?:(?:machine|login|account)[ \t]+\S{1,256}+|default)[ \t\r\n]+\Z", re.I)
_UNQUOTED: Final = r"[\"']?(?P<v>[^\s\"'`;&|]{1,500}+)"


def _netrc_ok(m: re.Match[str]) -> bool:
    """`password X` counts only in a .netrc entry: after `machine H`, `login U`, `account A` or `default`."""
    before = m.string[max(0, m.start() - 300) : m.start()]
    return _NETRC_BEFORE.search(before) is not None and not is_placeholder(m.group("v"))


def _value_ok(m: re.Match[str]) -> bool:
    return not is_placeholder(m.group("v"))


# Issue #16, finding 6: credentials in well-known tools' own syntax (no `key = value` keyword).
_TOOL_FAMILIES: Final = (
    _Family(  # PGPASSWORD=..., MYSQL_PWD=... (the keyword inside a longer word)
        "password",
        ("pgpassword", "mysql_pwd"),
        r"(?i:pgpassword|mysql_pwd)[ \t]{0,20}+[:=][ \t]{0,20}+" + _UNQUOTED,
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    _Family(  # Azure storage / service bus connection strings
        "access-key",
        ("accountkey", "sharedaccesskey"),
        r"(?i:accountkey|sharedaccesskey)[ \t]{0,20}+=[ \t]{0,20}+(?P<v>[A-Za-z0-9+/=]{16,1000}+)",
        group="v",
        lower=True,
    ),
    _Family(  # mysql -pPASS (the password glued to -p)
        "password",
        ("mysql",),
        r"(?i:mysql(?:dump|admin|sh|import|check)?)(?=[ \t])[^\n|;&]{0,300}?(?<=[ \t])-p(?P<v>[^\s\"'`;&|]{1,200}+)",
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    _Family(  # sshpass -p PASS
        "password",
        ("sshpass",),
        r"(?i:sshpass)[ \t]+-p[ \t]{0,20}+" + _UNQUOTED,
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    _Family(  # .netrc: machine H login U password P
        "password",
        ("passw",),
        r"(?i:password)[ \t]+(?P<v>[^\s\"'`]{1,500}+)",
        group="v",
        lower=True,
        accept=_netrc_ok,
    ),
    _Family(  # docker config.json: "auth": "base64(user:password)"
        "auth-key",
        ('auth"', 'auth\\"'),
        r'(?i:auth)\\?"[ \t]{0,20}+:[ \t]{0,20}+\\?"(?P<v>[A-Za-z0-9+/=]{8,10000}+)',
        group="v",
        lower=True,
    ),
    _Family(  # Slack incoming webhooks: the path is the credential
        "slack-webhook",
        ("hooks.slack.com",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9/_-]{10,300}+)",
        group="v",
        lower=True,
    ),
    _Family(  # kubeconfig: the client's private key, base64
        "private-key",
        ("client-key-data",),
        r"(?i:client-key-data)\\?[\"']?[ \t]{0,20}+:[ \t]{0,20}+\\?[\"']?(?P<v>[A-Za-z0-9+/=]{16,200000}+)",
        group="v",
        lower=True,
    ),
    _Family(  # .pgpass: host:port:database:user:password (default-port and wildcard lines)
        "password",
        (":5432:", ":*:"),
        r":(?:5432|\*):[^\s:]{1,256}+:[^\s:]{1,256}+:(?P<v>[^\s]{1,500}+)",
        group="v",
        lower=True,
        accept=_value_ok,
    ),
)

_FAMILIES: Final = _TOKEN_FAMILIES + _CONTEXT_FAMILIES + _TOOL_FAMILIES

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
_KW_FIND: Final = re.compile(_trie(list(_KW_NEEDLES)))  # on lowered text
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
        return _sub_group(m, group, _ASSIGN_RE.sub(_assign_sub, value))
    return _sub_group(m, group, f"[REDACTED:{_family_of(m.group('kw'))}]")


def _flag_sub(m: re.Match[str]) -> str:
    group = next(g for g in ("v1", "v2", "v3", "v4") if m.group(g) is not None)
    value = m.group(group)
    if _benign_tail(m.group("tail")) or is_placeholder(value, quoted=group != "v4"):
        return m.group(0)
    return _sub_group(m, group, f"[REDACTED:{_family_of(m.group('kw'))}]")


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
_NEEDLES: Final = sorted({"private key", *_KW_NEEDLES, *(n.lower() for f in _FAMILIES for n in f.needles)})
# curl's `-u` / `--user` count only where the password family can match them: not after a
# letter, digit, `_` or `-`, so prose ("follow-up", "pop-up") does not run every family. In
# lowered text a `k` may be a Kelvin sign (the one non-ASCII character that lowers to ASCII),
# which the family's lookbehind lets through: the gate lets it through too.
_CURL_USER_GATE: Final = r"-(?<![a-jl-z0-9_-]-)(?:-user|u)"  # led by its literal, like every other branch
_GATE: Final = re.compile(_anchored([n for n in _NEEDLES if n not in _CURL_USER]) + "|" + _CURL_USER_GATE)
_GATE_MAX: Final = 65_536  # on longer text the per-family substring checks are cheaper than the gate
# Past the gate, most text holds only an assignment keyword ("token", "secret"): one search for
# every family's needles (an ASCII needle in the text is in its lowered form too) spares the
# fourteen per-family checks, which cost more than the assignments' own scan.
_FAMILY_GATE: Final = re.compile(
    _anchored(sorted({n.lower() for f in _FAMILIES for n in f.needles} - set(_CURL_USER))) + "|" + _CURL_USER_GATE
)


def redact(text: str) -> str:
    """Replace secrets in `text` with `[REDACTED:<family>]`, keeping key names.

    Order: PEM blocks, provider token formats, headers/URL/CLI credentials, then
    `key = value` assignments (which skip values already redacted).
    """
    if len(text) < 8:
        return text
    low = text.lower()
    if len(low) <= _GATE_MAX and _GATE.search(low) is None:  # the common case: nothing can match
        return text
    return _redact_all(text, low)


def _redact_all(text: str, low: str) -> str:
    """`redact` past its gate: every family whose needle is present, in order."""
    if "private key" in low:
        text = _redact_pem(text)
        low = text.lower()
    if _FAMILY_GATE.search(low) is not None:
        for fam in _FAMILIES:
            if fam.present(text, low):
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
    return _sub_at(text, low, _KW_FIND, _ASSIGN_RE, _assign_sub)
