"""What a secret looks like: the pattern families `redact` runs, and the matching they share.

A family is a prefilter (needles: a family whose needle is absent is skipped, the common case), a
compiled pattern and its replacement (`[REDACTED:<name>]`, of the whole match or of one group, so a
key name stays). Provider token formats (AWS, GitHub, Slack, ...), headers, bearer tokens and
URL/CLI credentials, and well-known tools' own syntax (PGPASSWORD, mysql -p, .netrc, kubeconfig).
Every pattern starts with a literal or guards its start with a lookbehind, and every repeat is
bounded or possessive: a multi-megabyte adversarial string costs linear time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

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


def sub_at(text: str, low: str, finder: re.Pattern[str], pattern: re.Pattern[str], fn: Fn) -> str:
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


def trie(words: list[str]) -> str:
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


class Family:
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
        self.finder = re.compile(trie([n.lower() for n in needles])) if lower or finder else None

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
            return repl if group is None else sub_group(m, group, repl)

        if self.finder is not None:
            return sub_at(text, low, self.finder, self.pattern, fn)
        return self.pattern.sub(fn, text)


def sub_group(m: re.Match[str], group: str, repl: str) -> str:
    """m's text with `group` replaced by `repl`."""
    base = m.start()
    s, e = m.span(group)
    whole = m.group(0)
    return whole[: s - base] + repl + whole[e - base :]


_TOKEN_FAMILIES: Final = (
    Family(
        "aws-access-key",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        "(?:" + "|".join(_lead(p, _ALNUM) for p in ("AKIA", "ASIA", "ABIA", "ACCA", "A3T[A-Z0-9]")) + ")"
        r"[A-Z2-7]{16}" + _END_ALNUM,
    ),
    Family(
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        "(?:" + _lead("gh[pousr]_", _ALNUM) + r"[A-Za-z0-9]{36,255}+"
        "|" + _lead("github_pat_", _ALNUM) + r"[A-Za-z0-9_]{22,255}+)",
    ),
    Family("slack-token", ("xox",), _lead("xox[baprs]-", _ALNUM) + r"[A-Za-z0-9-]{10,250}+"),
    Family("anthropic-key", ("sk-ant-",), _lead("sk-ant-", _ALNUM) + r"[A-Za-z0-9_-]{20,300}+"),
    Family(
        "openai-key",
        ("sk-",),
        _lead("sk-", _ALNUM) + r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,300}+",
        accept=_openai_ok,
    ),
    Family("google-api-key", ("AIza",), _lead("AIza", _ALNUM) + r"[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),
    Family(
        "stripe-key",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_"),
        r"[sr]k_(?:(?<![A-Za-z0-9][sr]k_)|(?<=\\[nrt][sr]k_))(?:live|test)_[0-9A-Za-z]{10,250}+",
        finder=True,
    ),
    Family(
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


CURL_USER: Final = ("-u", "--user")  # the password family's needles (curl -u user:password)

_CONTEXT_FAMILIES: Final = (
    Family(
        "aws-secret-key",
        ("aws",),
        r"(?i:aws_?secret(?:_?access)?_?key)(?:\\?[\"'])?[ \t]{0,20}+(?::=|=>|[:=])[ \t]{0,20}+"
        r"(?:\\?[\"'])?(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        group="v",
        lower=True,
    ),
    Family(
        "auth-header",
        ("authorization",),
        r"(?<![A-Za-z])(?i:authorization)(?:\\?[\"'])?[ \t]{0,20}+[:=][ \t]{0,20}+"
        r"(?:[fFbBrR]?\\?[\"'])?(?i:(?:bearer|basic|token|digest|bot|apikey|negotiate|ntlm)[ \t]+)?"
        r"(?P<cred>[^\s\"'\\,]{1,4000}+)",
        group="cred",
        lower=True,
        accept=_auth_ok,
    ),
    Family(
        "cookie",
        ("cookie",),
        r"(?<![A-Za-z])(?i:cookie)[ \t]{0,20}+:[ \t]{0,20}+(?P<v>[^\r\n\"'\\]{1,4000}+)",
        group="v",
        lower=True,
        accept=lambda m: not is_placeholder(m.group("v")),
    ),
    Family(
        "bearer-token",
        ("bearer",),
        r"(?<![A-Za-z])(?i:bearer)[ \t]+(?P<tok>[A-Za-z0-9._~+/=-]{8,4000}+)",
        group="tok",
        lower=True,
        accept=_bearer_ok,
    ),
    Family(
        "url-password",
        ("://",),
        r"://(?P<user>[^\s:/@\"'<>\[\]]{1,256}+):(?P<pw>[^\s@/\"'<>]{1,256}+)@",
        group="pw",
        accept=lambda m: not is_placeholder(m.group("pw")),
    ),
    Family(  # curl -u user:password
        "password",
        CURL_USER,
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
    Family(  # PGPASSWORD=..., MYSQL_PWD=... (the keyword inside a longer word)
        "password",
        ("pgpassword", "mysql_pwd"),
        r"(?i:pgpassword|mysql_pwd)[ \t]{0,20}+[:=][ \t]{0,20}+" + _UNQUOTED,
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    Family(  # Azure storage / service bus connection strings
        "access-key",
        ("accountkey", "sharedaccesskey"),
        r"(?i:accountkey|sharedaccesskey)[ \t]{0,20}+=[ \t]{0,20}+(?P<v>[A-Za-z0-9+/=]{16,1000}+)",
        group="v",
        lower=True,
    ),
    Family(  # mysql -pPASS (the password glued to -p)
        "password",
        ("mysql",),
        r"(?i:mysql(?:dump|admin|sh|import|check)?)(?=[ \t])[^\n|;&]{0,300}?(?<=[ \t])-p(?P<v>[^\s\"'`;&|]{1,200}+)",
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    Family(  # sshpass -p PASS
        "password",
        ("sshpass",),
        r"(?i:sshpass)[ \t]+-p[ \t]{0,20}+" + _UNQUOTED,
        group="v",
        lower=True,
        accept=_value_ok,
    ),
    Family(  # .netrc: machine H login U password P
        "password",
        ("passw",),
        r"(?i:password)[ \t]+(?P<v>[^\s\"'`]{1,500}+)",
        group="v",
        lower=True,
        accept=_netrc_ok,
    ),
    Family(  # docker config.json: "auth": "base64(user:password)"
        "auth-key",
        ('auth"', 'auth\\"'),
        r'(?i:auth)\\?"[ \t]{0,20}+:[ \t]{0,20}+\\?"(?P<v>[A-Za-z0-9+/=]{8,10000}+)',
        group="v",
        lower=True,
    ),
    Family(  # Slack incoming webhooks: the path is the credential
        "slack-webhook",
        ("hooks.slack.com",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9/_-]{10,300}+)",
        group="v",
        lower=True,
    ),
    Family(  # kubeconfig: the client's private key, base64
        "private-key",
        ("client-key-data",),
        r"(?i:client-key-data)\\?[\"']?[ \t]{0,20}+:[ \t]{0,20}+\\?[\"']?(?P<v>[A-Za-z0-9+/=]{16,200000}+)",
        group="v",
        lower=True,
    ),
    Family(  # .pgpass: host:port:database:user:password (default-port and wildcard lines)
        "password",
        (":5432:", ":*:"),
        r":(?:5432|\*):[^\s:]{1,256}+:[^\s:]{1,256}+:(?P<v>[^\s]{1,500}+)",
        group="v",
        lower=True,
        accept=_value_ok,
    ),
)

FAMILIES: Final = _TOKEN_FAMILIES + _CONTEXT_FAMILIES + _TOOL_FAMILIES
