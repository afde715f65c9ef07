"""What two versions of the team server's `nmem.name_tokens` are compared on (issue #40).

M012 built a GIN index over `nmem.name_tokens(title, files)`; M014 replaced the function with one
that takes the same names at a third of the CPU. The index stays valid only while both give the
same names for every row, so the tests and bench/bench_team_name_tokens.py keep the server's
function of one version under another name (`keep_function`) and compare the two row by row
(`differing`). `texts` makes titles and file lists shaped like an agent's: commands, edits, paths,
identifiers of every case style, grep lines, versions, and the awkward ones (separators doubled or
at either end, non-ASCII letters, control characters), with a fixed seed.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

Text = tuple[str | None, list[str | None] | None]

_WORDS = (
    "Edited Ran Read Searched Fixed failed exit code the tests of in on for to a and with import from error "
    "Error: TypeError warning passed build make pytest npm cargo git diff status commit push the it is not "
    "Updated the plan Cannot read properties undefined reading map line col step ok done FAILED PASSED"
).split()
_NAMES = (
    "transform_enhanced.py CoderService.ts parse_config getUserById os.path.join __init__.py x_y.py-224 "
    "v1.2.3-rc.1 my-component README.md package-lock.json .gitignore ws_test.py routes.py HTTPServer "
    "XMLHttpRequest iOS snake_Case_Mix e2e_test useEffect filesToModify pyproject.toml Cargo.lock "
    "nmem.name_tokens pg_catalog.regexp_split_to_array a.b.c a-b-c a_b_c aB Ab AB ab a.B a-B a_B "
    "old_transform_enhanced.py.bak .env.local node_modules/.bin x--y x..y x.-y x-.y x__y _private __dunder__ "
    "trailing_ trailing. trailing- -leading .leading _leading 3.14 1e-5 0x1F_ff sha256:9f86d08 "
    "café_crème.txt naïveBayes Straße-1 İstanbul_x 数据_处理.py ÉtéHiver ǅungla_x ﬁle_name.py Σίσυφος_v2 "
    "x\u0301y_z 🙂_ok Ωmega.Alpha ØreSund_dk"
).split()
_DIRS = "src tests api web lib nmemd team sql docs bench home kim work proj .venv node_modules".split()
_SEPARATORS = (" ", " ", " ", " ", ", ", ": ", " `", "` ", "'", '"', " (", ") ", "/", "\\", "\t", "=", "->", "...",
               " - ", "#", "@", "|", ";", "\u00a0", "\u3000", "\x01", "\x1b[0m")  # fmt: skip
_ALPHABET = list("aAbBzZqQ09_.-_.-  /\\:`'\"()[]{}éÉßİıΣσ中😀\t,;#@$%^&*+=~!?<>|\x01") + [
    "Service", "Coder", "foo", "x", "py", "ts", "..", "--", "__", "_.", "-_", ".-", "-.",
]  # fmt: skip


def _path(rnd: random.Random) -> str:
    parts = [rnd.choice(_DIRS) for _ in range(rnd.randint(0, 5))] + [rnd.choice(_NAMES + _WORDS)]
    return ("/" if rnd.random() < 0.4 else "") + "/".join(parts)


def _title(rnd: random.Random) -> str:
    pieces: list[str] = []
    for _ in range(rnd.randint(1, 18)):
        pick = rnd.random()
        pieces.append(rnd.choice(_WORDS) if pick < 0.55 else rnd.choice(_NAMES) if pick < 0.85 else _path(rnd))
        pieces.append(rnd.choice(_SEPARATORS))
    return "".join(pieces[:-1])


def _scrambled(rnd: random.Random, most: int) -> str:
    return "".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(0, most)))


def texts(count: int, seed: int = 40) -> list[Text]:
    """`count` (title, files) pairs: three in four shaped like an agent's rows, the rest scrambled
    from the characters names are split at; a NULL title or file list, or a NULL file, now and then."""
    rnd = random.Random(seed)
    out: list[Text] = []
    for _ in range(count):
        shaped = rnd.random() < 0.75
        title = (_title(rnd) if shaped else _scrambled(rnd, 40)) if rnd.random() > 0.03 else None
        files: list[str | None] | None = None
        if rnd.random() > 0.03:
            files = [
                (_path(rnd) if shaped else _scrambled(rnd, 24)) if rnd.random() > 0.03 else None
                for _ in range(rnd.choice((0, 0, 1, 1, 1, 2, 3)))
            ]
        out.append((title, files))
    return out


def keep_function(conn: psycopg.Connection[Any], name: str) -> None:
    """The server's `nmem.name_tokens` as it stands, also as `nmem.<name>`: same body, same flags."""
    row = conn.execute("SELECT pg_get_functiondef('nmem.name_tokens(text, text[])'::regprocedure)").fetchone()
    assert row is not None
    definition = str(row[0])
    assert "FUNCTION nmem.name_tokens(" in definition, definition[:200]
    conn.execute(definition.replace("FUNCTION nmem.name_tokens(", f"FUNCTION nmem.{name}(", 1).encode())


def load(conn: psycopg.Connection[Any], table: str, rows: list[Text]) -> None:
    """`rows` into a new plain table `table` (title text, files text[])."""
    conn.execute(f"CREATE TABLE {table} (title text, files text[])".encode())
    with conn.cursor().copy(f"COPY {table} (title, files) FROM STDIN".encode()) as copy:
        for row in rows:
            copy.write_row(row)


def differing(
    conn: psycopg.Connection[Any], table: str, old: str, new: str, collation: str | None = None, limit: int = 5
) -> list[tuple[Any, ...]]:
    """Rows of `table` whose names differ by the two functions: (title, files, old's, new's); with
    `collation`, each function called on the title in that collation (it orders the names, and
    decides which characters are letters and how they lowercase)."""
    title = f'title COLLATE "{collation}"' if collation else "title"
    sql = (
        f"SELECT title, files, {old}({title}, files), {new}({title}, files) FROM {table}"
        f" WHERE {old}({title}, files) IS DISTINCT FROM {new}({title}, files) LIMIT {int(limit)}"
    )
    return conn.execute(sql.encode()).fetchall()
