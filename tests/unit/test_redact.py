"""redact() and strip_private(): every secret family, non-secrets left alone, linear on hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.team_hostile import AT_CAPTURE, BARE_TOKENS

from nmemd.capture.redact import CONTEXT_TAG, REDACTED, redact, redact_outgoing, sensitive_key, strip_private
from nmemd.capture.secret_patterns import MAX_CANDIDATES

# Obviously fake values in each family's format.
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GHP = "ghp_" + "a1B2c3D4e5" * 3 + "abcdef"
GH_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789abcdefghijklmn"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
OPENAI = "sk-proj-abcDEF1234567890abcdefGHIJ"
OPENAI_LEGACY = "sk-" + "aB3" * 16
ANTHROPIC = "sk-ant-api03-" + "Ab1_" * 20
GOOGLE = "AIza" + "SyA1234567890abcdefghijklmnopqrstuv"
STRIPE = "sk_live_" + "51Hxyz" * 4
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0\n"
    "/vUv9Xo1JZbyQ==\n-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key {AWS_ID} end", "key [REDACTED:aws-access-key] end"),
        (f"aws_access_key_id = {AWS_ID}", "aws_access_key_id = [REDACTED:aws-access-key]"),
        (f"ASIA{AWS_ID[4:]}", "[REDACTED:aws-access-key]"),
        (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "AWS_SECRET_ACCESS_KEY=[REDACTED:aws-secret-key]"),
        (f'"aws_secret_access_key": "{AWS_SECRET}"', '"aws_secret_access_key": "[REDACTED:aws-secret-key]"'),
        (f"git push https://{GHP}@github.com/o/r", "git push https://[REDACTED:github-token]@github.com/o/r"),
        (f"token {GH_PAT}.", "token [REDACTED:github-token]."),
        (f"SLACK={SLACK}", "SLACK=[REDACTED:slack-token]"),
        (f"OPENAI_API_KEY={OPENAI}", "OPENAI_API_KEY=[REDACTED:openai-key]"),
        (f"use {OPENAI_LEGACY} here", "use [REDACTED:openai-key] here"),
        (f"k={ANTHROPIC}", "k=[REDACTED:anthropic-key]"),
        (f"maps?key={GOOGLE}&x=1", "maps?key=[REDACTED:google-api-key]&x=1"),
        (f"stripe {STRIPE}", "stripe [REDACTED:stripe-key]"),
        (f"rk_test_{'Ab1' * 8}", "[REDACTED:stripe-key]"),
        (f"cookie jar {JWT} done", "cookie jar [REDACTED:jwt] done"),
        (f"before\n{PEM}\nafter", "before\n[REDACTED:private-key]\nafter"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQUJDRA==",
            "[REDACTED:private-key]",
        ),
        (
            'curl -H "Authorization: Bearer abc123def456ghi789"',
            'curl -H "Authorization: Bearer [REDACTED:auth-header]"',
        ),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED:auth-header]"),
        (
            "headers = {'Authorization': 'token 0123456789abcdef'}",
            "headers = {'Authorization': 'token [REDACTED:auth-header]'}",
        ),
        ("got Bearer Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5 back", "got Bearer [REDACTED:bearer-token] back"),
        ("Cookie: session=abc123; theme=dark", "Cookie: [REDACTED:cookie]"),
        ("postgres://app:s3cr3t-Pw@db:5432/x", "postgres://app:[REDACTED:url-password]@db:5432/x"),
        (
            "git clone https://alice:hunter2@example.com/r.git",
            "git clone https://alice:[REDACTED:url-password]@example.com/r.git",
        ),
        ("curl -u bob:pa55word https://x", "curl -u bob:[REDACTED:password] https://x"),
        ("password=hunter2", "password=[REDACTED:password]"),
        ("DB_PASSWORD: hunter2", "DB_PASSWORD: [REDACTED:password]"),
        ('db_password = "correct horse"', 'db_password = "[REDACTED:password]"'),
        ("passwd := 'xyzzy42'", "passwd := '[REDACTED:password]'"),
        ("pwd=s3cret!", "pwd=[REDACTED:password]"),
        (
            '{"client_secret": "abcd1234", "token_type": "bearer"}',
            '{"client_secret": "[REDACTED:secret]", "token_type": "bearer"}',
        ),
        ('{\\"api_key\\": \\"abc123\\"}', '{\\"api_key\\": \\"[REDACTED:api-key]\\"}'),
        ("export GITLAB_TOKEN=glpat-abcdef123456", "export GITLAB_TOKEN=[REDACTED:token]"),
        ("apiKey: 'k-123'", "apiKey: '[REDACTED:api-key]'"),
        ("accessToken=abc-def-ghi12", "accessToken=[REDACTED:token]"),
        ("ACCESS_KEY=AbCd1234", "ACCESS_KEY=[REDACTED:access-key]"),
        ("private_key = 'MIIBOgIBAAJ'", "private_key = '[REDACTED:private-key]'"),
        ('config["password"] = "hunter2"', 'config["password"] = "[REDACTED:password]"'),
        ("mysql --password hunter2 -h db", "mysql --password [REDACTED:password] -h db"),
        ("tool --api-key=k123 --token 'abc def'", "tool --api-key=[REDACTED:api-key] --token '[REDACTED:token]'"),
        ("login --db-password s3cr3t", "login --db-password [REDACTED:password]"),
        ("?token_url=https://x/?access_token=abc123&y=1", "?token_url=https://x/?access_token=[REDACTED:token]&y=1"),
        ("\\npassword=abc123", "\\npassword=[REDACTED:password]"),
    ],
)
def test_family(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # idempotent


@pytest.mark.parametrize(
    "text",
    [
        "def login(password: str, token: Optional[str] = None) -> bool:",
        "password = os.environ['DB_PASSWORD']",
        "token = self.token",
        "secret = get_secret(name)",
        "tokenizer = AutoTokenizer.from_pretrained(model)",
        "max_tokens=100, input_tokens: 6, passwords = []",
        "password_file=/run/secrets/db",
        "token_type: bearer",
        "token_count = 12",
        "password=${DB_PASS}",
        "password=$DB_PASS",
        "password=<your-password>",
        "password=***",
        "password: ''",
        'password: ""',
        "api_key: null",
        "secret: true",
        "--password-stdin registry.example.com",
        "--token -v",
        "task-list-item-for-kebab-case-identifiers",
        "a Bearer token is sent in the Authorization header",
        "Authorization: header must be set",
        "https://example.com:8080/path/@scope/pkg",
        "https://user@example.com/repo.git",
        "ssh git@github.com:org/repo.git",
        "eyJhbGciOi is only a JWT header",
        "AKIA is a prefix; AKIASHORT too",
        "sort(key=lambda x: x[1])",
        "primary_key = 'id'",
        "git push -u origin main",
        "cd $PWD && pwd",
        "The credentials mode is 'include'.",
        "",
        "short",
    ],
)
def test_non_secrets_untouched(text: str) -> None:
    assert redact(text) == text


def test_code_and_prose_untouched() -> None:
    code = (
        "import os\n\n\ndef main(argv: list[str]) -> int:\n"
        '    """Parse args; see https://docs.python.org/3/library/argparse.html."""\n'
        "    for i, arg in enumerate(argv):\n        if arg == '--verbose':\n            print(i, arg)\n"
        "    return 0  # ok: nothing to hide\n"
    )
    assert redact(code) == code
    prose = "We rotated the keys yesterday; the token service is at 99.9% uptime. Password resets work."
    assert redact(prose) == prose


def test_key_names_are_kept() -> None:
    out = redact("MY_SERVICE_API_KEY=abc123def and clientSecret: 'xyz987'")
    assert out == "MY_SERVICE_API_KEY=[REDACTED:api-key] and clientSecret: '[REDACTED:secret]'"


def test_sensitive_key() -> None:
    for key, family in [
        ("password", "password"),
        ("client_secret", "secret"),
        ("apiKey", "api-key"),
        ("GITHUB_TOKEN", "token"),
        ("Authorization", "auth-header"),
        ("set-cookie", "cookie"),
        ("aws_secret_access_key", "secret"),
    ]:
        assert sensitive_key(key) == family, key
    for key in ("token_type", "max_tokens", "tokenizer", "password_file", "description", "input_tokens", "key"):
        assert sensitive_key(key) is None, key


def test_strip_private() -> None:
    assert strip_private("a <private>secret</private> b") == "a  b"
    assert strip_private("a <PRIVATE>x\ny</Private> b <private>z</private>") == "a  b "
    assert strip_private("keep <private>everything after\nis gone") == "keep "
    assert strip_private('x <private reason="pw">p</private>y') == "x y"
    assert CONTEXT_TAG == "nmem-context"
    assert strip_private("p <nmem-context>\n# memory\n</nmem-context> q") == "p  q"
    assert strip_private("no tags < here > at all") == "no tags < here > at all"
    assert strip_private("<privateer>ship</privateer>") == "<privateer>ship</privateer>"


def test_too_dense_input_fails_closed() -> None:
    text = "ok " + "token=x1 " * (MAX_CANDIDATES + 10)
    out = redact(text)
    assert out.startswith("ok token=[REDACTED:token] ") and out.endswith("[REDACTED:too-dense]")
    assert "x1" not in out


ADVERSARIAL = [
    "a",
    "eyJ",
    "eyJabcdefghij.",
    "AKIA",
    "aToken",
    "password='",
    'token: \\"',
    "\\npassword",
    "--password ",
    "Authorization: ",
    "Bearer ",
    "-----BEGIN RSA PRIVATE KEY-----",
    "<private>",
    "://a:b",
    "sk-",
    "-u a:",
    "passwordxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "glpat-",
    "SK0",
    "1234567890:AA",
    "SG.",
    "hf_",
]


@pytest.mark.slow
@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_adversarial_5mb_is_linear(unit: str) -> None:
    """Each runs in well under a second (linear patterns); only the timeout guards it here."""
    text = (unit * (5_000_000 // len(unit) + 1))[:5_000_000]
    assert isinstance(redact(strip_private(text)), str)


TOKENS = st.sampled_from(
    [
        AWS_ID,
        GHP,
        GH_PAT,
        SLACK,
        OPENAI,
        ANTHROPIC,
        GOOGLE,
        STRIPE,
        JWT,
        *(t for n, t in BARE_TOKENS.items() if n in AT_CAPTURE),
    ]
)


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=300), TOKENS, st.text(max_size=300))
def test_planted_tokens_never_survive(before: str, token: str, after: str) -> None:
    assert token not in redact(f"{before} {token} {after}")


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(max_size=500))
def test_redact_never_raises(text: str) -> None:
    assert isinstance(redact(strip_private(text)), str)


# Issue #16, finding 6: credentials in tools' own syntax, with no `key = value` keyword.
TOOL_SECRETS = [
    ("export PGPASSWORD=hunter2pg && psql -h db", "hunter2pg"),
    ("MYSQL_PWD='Sq1pass99' mysql app", "Sq1pass99"),
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abcdEFGH1234abcdEFGH1234ab==;EndpointSuffix=x",
     "abcdEFGH1234abcdEFGH1234ab=="),
    ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=QWERTYuiop1234567890asdf=",
     "QWERTYuiop1234567890asdf="),
    ("mysql -h db -u root -pS3cretPw app < dump.sql", "S3cretPw"),
    ("mysqldump -uroot -pDumpPw77 app", "DumpPw77"),
    ("machine api.example.com\n  login bob\n  password Zx9netrcpw\n", "Zx9netrcpw"),
    ("default login anon password AnonPw42", "AnonPw42"),
    ('{"auths": {"ghcr.io": {"auth": "Ym9iOnMzY3JldHB3"}}}', "Ym9iOnMzY3JldHB3"),
    ('{\\"auths\\": {\\"r\\": {\\"auth\\": \\"Ym9iOnMzY3JldHB3\\"}}}', "Ym9iOnMzY3JldHB3"),
    ("curl -d '{}' https://hooks.slack.com/services/T0001/B0001/AbCdEfGhIjKl", "T0001/B0001/AbCdEfGhIjKl"),
    ("    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVk=", "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVk="),
    ("sshpass -p 'Pa55word!' ssh user@host", "Pa55word!"),
    ("db.example.com:5432:app:alice:pgS3cretLine", "pgS3cretLine"),
    ("*:*:*:postgres:wildPgPw", "wildPgPw"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "secret"), TOOL_SECRETS)
def test_tool_specific_credentials_are_redacted(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "please reset your password now",
        "the mysql -p flag prompts for it",
        "mysql -p",
        "password must be at least 12 characters",
        "auth is handled by the proxy",
        "see hooks.slack.com for docs",
        "host:5432:db is listening",
    ],
)
def test_tool_specific_families_leave_prose_alone(text: str) -> None:
    assert redact(text) == text


# Issue #36, finding 17: bare tokens of the providers gitleaks' default rules know by their prefix.
@pytest.mark.parametrize(("family", "token"), sorted(BARE_TOKENS.items()))
def test_bare_provider_tokens_are_redacted(family: str, token: str) -> None:
    """At capture for the families issue #36 named (and Twilio's, SendGrid's, Telegram's), before a
    push for every one."""
    for text in (token, f"output: {token}\n", f'{{"key":"{token}"}}', f"export X={token}; done", f"\\n{token}"):
        out = redact_outgoing(text)
        assert token not in out and f"[REDACTED:{family}]" in out, (text, out)
        assert (token not in redact(text)) == (family in AT_CAPTURE), text


@pytest.mark.parametrize(
    "text",
    ["npm_config_cache=/tmp/x", "the task desk SKIPPED", "msg.send(SG.prototype)", "at 10:AA we met",
     "hf_model_name = 'bert'", "glpat- prefix alone", "call dapi here", "SK-123", "ops_eyJ short",
     "sha256~abc", "dop_v1_ not hex"],
)  # fmt: skip
def test_provider_prefixes_in_prose_are_left_alone(text: str) -> None:
    assert redact(text) == text
