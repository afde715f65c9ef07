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
from functools import cache
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

    __slots__ = ("name", "needles", "lower", "pattern", "group", "accept", "finder", "names", "cased")

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
        names: dict[str, str] | None = None,
        cased: bool = False,
    ) -> None:
        self.name = name
        self.names = names  # a pattern of named alternatives: each one's own replacement name
        self.cased = cased  # needles that mean something only as written (`SK`, not `sk`): not lowered
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
        if len(self.needles) > 8 and self.finder is not None:  # one search, not one per needle
            return self.finder.search(low) is not None
        hay = low if self.lower else text
        for n in self.needles:
            if n in hay:
                return True
        return False

    def apply(self, text: str, low: str) -> str:
        repl = f"[REDACTED:{self.name}]"
        accept = self.accept
        group = self.group
        names = self.names

        def fn(m: re.Match[str]) -> str:
            if accept is not None and not accept(m):
                return m.group(0)
            if names is not None:
                return f"[REDACTED:{names[m.lastgroup or '']}]"
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

# Issue #36, finding 17: the rest of the provider formats gitleaks' default rules know by their
# prefix (our own patterns, from each provider's documented token format). One family: one search
# of the lowered text for every prefix, then the token's own pattern where one is found.
_END: Final = r"(?![A-Za-z0-9_-])"
_PREFIXED: Final = (  # (name, prefix as written, the rest of the token)
    ("gitlab-token", "glpat-", r"[0-9A-Za-z_-]{20,300}+(?:\.[0-9a-z]{2,9})?"),
    ("gitlab-token", "gldt-", r"[0-9A-Za-z_-]{20,300}+"),
    ("gitlab-token", "glptt-", r"[0-9a-f]{40}"),
    ("gitlab-token", "glrt-", r"[0-9A-Za-z_-]{20,300}+(?:\.[0-9a-z]{2,9})?"),
    ("gitlab-token", "glsoat-", r"[0-9A-Za-z_-]{20,300}+"),
    ("gitlab-token", "glcbt-", r"[0-9A-Za-z]{1,5}_[0-9A-Za-z_-]{20,300}+"),
    ("gitlab-token", "glffct-", r"[0-9A-Za-z_-]{20,300}+"),
    ("gitlab-token", "glft-", r"[0-9A-Za-z_-]{20,300}+"),
    ("gitlab-token", "glimt-", r"[0-9A-Za-z_-]{25,300}+"),
    ("gitlab-token", "glagent-", r"[0-9A-Za-z_-]{50,300}+"),
    ("gitlab-token", "gloas-", r"[0-9A-Za-z_-]{64,300}+"),
    ("gitlab-token", "GR1348941", r"[0-9A-Za-z_-]{20,300}+"),
    ("huggingface-token", "hf_", r"[A-Za-z]{34}"),
    ("huggingface-token", "api_org_", r"[A-Za-z]{34}"),
    ("pypi-token", "pypi-AgEIcHlwaS5vcmc", r"[0-9A-Za-z_-]{50,1000}+"),
    ("npm-token", "npm_", r"[A-Za-z0-9]{36}"),
    ("dockerhub-token", "dckr_pat_", r"[A-Za-z0-9_-]{27,300}+"),
    ("dockerhub-token", "dckr_oat_", r"[A-Za-z0-9_-]{27,300}+"),
    ("digitalocean-token", "dop_v1_", r"[a-f0-9]{64}"),
    ("digitalocean-token", "doo_v1_", r"[a-f0-9]{64}"),
    ("digitalocean-token", "dor_v1_", r"[a-f0-9]{64}"),
    ("vault-token", "hvs.", r"[A-Za-z0-9_-]{24,300}+"),
    ("vault-token", "hvb.", r"[A-Za-z0-9_-]{24,400}+"),
    ("vault-token", "hvr.", r"[A-Za-z0-9_-]{24,300}+"),
    ("age-secret-key", "AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    ("shopify-token", "shpat_", r"[a-fA-F0-9]{32}"),
    ("shopify-token", "shpca_", r"[a-fA-F0-9]{32}"),
    ("shopify-token", "shppa_", r"[a-fA-F0-9]{32}"),
    ("shopify-token", "shpss_", r"[a-fA-F0-9]{32}"),
    ("linear-key", "lin_api_", r"[A-Za-z0-9]{40}"),
    ("sendinblue-key", "xkeysib-", r"[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("sentry-token", "sntryu_", r"[a-f0-9]{64}"),
    ("sentry-token", "sntrys_", r"eyJ[A-Za-z0-9+/=_]{30,1000}+"),
    ("planetscale-token", "pscale_tkn_", r"[\w=.-]{32,64}+"),
    ("planetscale-token", "pscale_pw_", r"[\w=.-]{32,64}+"),
    ("planetscale-token", "pscale_oauth_", r"[\w=.-]{32,64}+"),
    ("rubygems-key", "rubygems_", r"[a-f0-9]{48}"),
    ("prefect-key", "pnu_", r"[A-Za-z0-9]{36}"),
    ("pulumi-token", "pul-", r"[a-f0-9]{40}"),
    ("readme-key", "rdme_", r"[a-z0-9]{70}"),
    ("databricks-token", "dapi", r"[a-f0-9]{32}(?:-\d)?"),
    ("grafana-token", "glc_", r"[A-Za-z0-9+/]{32,400}+={0,3}"),
    ("grafana-token", "glsa_", r"[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    ("grafana-token", "eyJrIjoi", r"[A-Za-z0-9]{70,400}+={0,3}"),
    ("infracost-key", "ico-", r"[A-Za-z0-9]{32}"),
    ("frameio-token", "fio-u-", r"[A-Za-z0-9_=-]{64}"),
    ("flutterwave-key", "FLWSECK_TEST-", r"[a-hA-H0-9]{12,32}(?:-X)?"),
    ("flutterwave-key", "FLWPUBK_TEST-", r"[a-hA-H0-9]{32}-X"),
    ("doppler-token", "dp.pt.", r"[A-Za-z0-9]{43}"),
    ("dynatrace-token", "dt0c01.", r"[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("duffel-token", "duffel_", r"(?:test|live)_[A-Za-z0-9_=-]{43}"),
    ("perplexity-key", "pplx-", r"[A-Za-z0-9]{48}"),
    ("notion-token", "ntn_", r"[0-9]{11}[A-Za-z0-9]{35}"),
    ("openshift-token", "sha256~", r"[\w-]{43}"),
    ("shippo-token", "shippo_", r"(?:live|test)_[a-fA-F0-9]{40}"),
    ("clojars-token", "CLOJARS_", r"[A-Za-z0-9]{60}"),
    ("artifactory-key", "AKCp", r"[A-Za-z0-9]{69}"),
    ("alibaba-key", "LTAI", r"[A-Za-z0-9]{20}"),
    ("aws-bedrock-key", "ABSK", r"[A-Za-z0-9+/]{109,269}+={0,2}"),
    ("heroku-key", "HRKU-AA", r"[0-9A-Za-z_-]{58}"),
    ("postman-key", "PMAK-", r"[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),
    ("easypost-key", "EZAK", r"[A-Za-z0-9]{54}"),
    ("easypost-key", "EZTK", r"[A-Za-z0-9]{54}"),
    ("1password-token", "ops_eyJ", r"[A-Za-z0-9+/]{250,5000}+={0,3}"),
    ("adobe-secret", "p8e-", r"[A-Za-z0-9]{32}"),
    ("slack-token", "xapp-", r"\d-[A-Za-z0-9]{1,50}+-\d{1,20}+-[a-z0-9]{10,100}+"),
    ("scalingo-token", "tk-us-", r"[\w-]{48}"),
    ("square-token", "sq0atp-", r"[\w-]{22,60}+"),
    ("square-token", "sq0csp-", r"[\w-]{40,60}+"),
    ("square-token", "EAAA", r"[\w-]{60}"),
    ("facebook-token", "EAAM", r"[A-Za-z0-9]{100,400}+"),
    ("facebook-token", "EAAC", r"[A-Za-z0-9]{100,400}+"),
    ("clickhouse-key", "4b1d", r"[A-Za-z0-9]{38}"),
    ("settlemint-token", "sm_pat_", r"[A-Za-z0-9]{16}"),
    ("settlemint-token", "sm_aat_", r"[A-Za-z0-9]{16}"),
    ("settlemint-token", "sm_sat_", r"[A-Za-z0-9]{16}"),
    ("xai-key", "xai-", r"[A-Za-z0-9]{80}"),
    ("groq-key", "gsk_", r"[A-Za-z0-9]{52}"),
)
# Redacted at capture and before a push (in every text's gate): the families issue #36 found on the
# server. The rest of gitleaks' prefixed formats cost every captured event a tenth more of the
# daemon's CPU in the gate (bench/bench_ingest.py), so they are redacted before a push only
# (`OUTGOING`): the server never holds them, the local store as before.
_AT_CAPTURE: Final = (
    "gitlab-token", "huggingface-token", "pypi-token", "npm-token", "dockerhub-token", "digitalocean-token",
    "vault-token", "age-secret-key", "shopify-token",
)  # fmt: skip


def _prefixed_family(rows: tuple[tuple[str, str, str], ...]) -> Family:
    alts = [
        f"(?P<t{n}>" + _lead(re.escape(prefix), "[A-Za-z0-9_]") + rest + ")" + _END
        for n, (_name, prefix, rest) in enumerate(rows)
    ]
    names = {f"t{n}": name for n, (name, _p, _r) in enumerate(rows)}
    return Family("provider-token", tuple(p for _n, p, _r in rows), "|".join(alts), finder=True, names=names)


# Twilio, SendGrid and Telegram tokens: their marks (`SK`, `SG.`, `:AA`) are common once lowered
# (`task`, `msg.`), so they are looked for in the text as written.
_CASED: Final = (
    ("twilio-key", "SK", _lead("SK", "[A-Za-z0-9_]") + r"[0-9a-fA-F]{32}" + _END),
    ("sendgrid-key", "SG.", _lead(r"SG\.", "[A-Za-z0-9_]") + r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}" + _END),
    ("telegram-token", ":AA", r"(?<![0-9])[0-9]{8,10}:AA[A-Za-z0-9_-]{33}" + _END),
)

_PROVIDER_FAMILIES: Final = (
    _prefixed_family(tuple(r for r in _PREFIXED if r[0] in _AT_CAPTURE)),
    *(
        Family(name, (needle,), pattern, cased=True)  # one each: `SK` in a text runs only Twilio's pattern
        for name, needle, pattern in _CASED
    ),
)
_OUTGOING: Final = tuple(r for r in _PREFIXED if r[0] not in _AT_CAPTURE)
OUTGOING_NEEDLES: Final = tuple(prefix for _name, prefix, _rest in _OUTGOING)


@cache
def outgoing() -> Family:
    """The family of the formats redacted before a push only, compiled at the first push: the
    extraction worker and a daemon without a team never build it (its pattern is the largest)."""
    return _prefixed_family(_OUTGOING)


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

FAMILIES: Final = _TOKEN_FAMILIES + _PROVIDER_FAMILIES + _CONTEXT_FAMILIES + _TOOL_FAMILIES
