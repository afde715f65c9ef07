"""Append-only schema migrations, each recorded by name in `schema_migrations`.

Never edit a migration that has shipped: add a new one. The schema-migration
test opens a database made by every earlier version and checks it upgrades.
"""

from __future__ import annotations

from typing import Final

from nmem_client.inbox import INBOX_DDL
from nmemd.store import fts, grams, places

FTS_TOKENIZE: Final = "porter unicode61 remove_diacritics 2"

M001_INITIAL: Final = f"""
{INBOX_DDL};

CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    project TEXT,
    cwd TEXT,
    started_at REAL,
    ended_at REAL,
    last_event_at REAL,
    source TEXT,
    end_reason TEXT,
    model TEXT,
    transcript_path TEXT,
    last_assistant_message TEXT,
    summary TEXT,
    event_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_project_last ON sessions(project, last_event_at);

-- Every observation comes from one event; event_id is the idempotency key
-- (the n-th observation of an event gets "<event_id>:<n>").
CREATE TABLE observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    project TEXT,
    ts REAL NOT NULL,
    last_ts REAL NOT NULL,
    count INTEGER NOT NULL DEFAULT 1,
    hook_event TEXT NOT NULL,
    type TEXT NOT NULL,
    title TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    tool_name TEXT,
    file_path TEXT,
    command TEXT,
    tool_use_id TEXT,
    agent_id TEXT,
    pinned INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX observations_project_ts ON observations(project, ts);
CREATE INDEX observations_session_ts ON observations(session_id, ts);
CREATE INDEX observations_type_ts ON observations(type, ts);
CREATE INDEX observations_file ON observations(file_path) WHERE file_path IS NOT NULL;

-- The ledger of every event ever accepted: what makes delivery exactly-once.
-- A deduplicated event points at the observation it was merged into.
CREATE TABLE events (
    event_id TEXT PRIMARY KEY,
    received_at REAL NOT NULL,
    session_id TEXT,
    hook_event TEXT,
    observation_id INTEGER
) WITHOUT ROWID;

CREATE TABLE prompts (
    observation_id INTEGER PRIMARY KEY REFERENCES observations(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    prompt_number INTEGER NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX prompts_session ON prompts(session_id, prompt_number);

CREATE VIRTUAL TABLE observations_fts USING fts5(
    title, content, file_path, command,
    content='observations', content_rowid='id', tokenize='{FTS_TOKENIZE}'
);
CREATE TRIGGER observations_ai AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts(rowid, title, content, file_path, command)
    VALUES (new.id, new.title, new.content, new.file_path, new.command);
END;
CREATE TRIGGER observations_ad AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
END;
CREATE TRIGGER observations_au AFTER UPDATE OF title, content, file_path, command ON observations BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
    INSERT INTO observations_fts(rowid, title, content, file_path, command)
    VALUES (new.id, new.title, new.content, new.file_path, new.command);
END;

CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    last_run REAL,
    outcome TEXT
);
"""

# New observations are indexed once per batch by `store.commit_batch`, not row by row: an
# FTS5 insert made by a trigger runs inside each row's statement savepoint, where FTS5
# flushes its pending terms, so every row became its own index segment (half of a commit's cost).
M002_FTS_BATCH_INDEX: Final = "DROP TRIGGER IF EXISTS observations_ai;"

# Natural idempotency keys: an event seen live by a hook and again in its transcript
# (`tool:<session>:<tool_use_id>`, ...) is stored once, whatever its event_id.
# `import_files` holds how far `nmem import-transcripts` read each file; it lives
# beside the data it produced, so a fresh database imports from the start again.
M003_NATURAL_KEYS: Final = """
ALTER TABLE events ADD COLUMN natural_key TEXT;
CREATE UNIQUE INDEX events_natural_key ON events(natural_key) WHERE natural_key IS NOT NULL;

ALTER TABLE sessions ADD COLUMN git_branch TEXT;

CREATE TABLE import_files (
    path TEXT PRIMARY KEY,
    dev INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime REAL NOT NULL,
    offset INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    events INTEGER NOT NULL DEFAULT 0,
    imported_at REAL NOT NULL
);
"""

# Full-text indexing trails the commit that stores an observation: live batches index in chunks
# of store.FTS_CHUNK rows (FTS5 writes a segment and merges per indexing transaction, ~40 % of
# a small batch's cost), the rest when the writer is quiet, before every search, and at start.
# `fts_state.indexed_below`: every observation with a smaller id is indexed, none above it is;
# the delete and update triggers leave the index alone for rows it does not hold yet.
M004_FTS_WATERMARK: Final = """
CREATE TABLE fts_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_below INTEGER NOT NULL
);
INSERT INTO fts_state(id, indexed_below) VALUES (1, (SELECT coalesce(max(id), 0) + 1 FROM observations));
DROP TRIGGER observations_ad;
CREATE TRIGGER observations_ad AFTER DELETE ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
END;
DROP TRIGGER observations_au;
CREATE TRIGGER observations_au AFTER UPDATE OF title, content, file_path, command ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
    INSERT INTO observations_fts(rowid, title, content, file_path, command)
    VALUES (new.id, new.title, new.content, new.file_path, new.command);
END;
"""

# A finished tool call is known by its observation row: `(session_id, tool_use_id)` of a
# PostToolUse(Failure) row, the same pair its natural key `tool:<session>:<tool_use_id>` names.
# The ledger keeps the key only for a call with no row of its own (merged into an earlier
# observation, or its row deleted: purge and retention copy the key into the ledger first).
# The session index becomes (session_id, tool_use_id): one session-keyed index instead of two,
# where each held a page per live session in every commit (~40 of a 14-event commit's ~87 WAL
# pages; 87 -> 66 pages, ingest +6 % in the same run, BENCHMARKS.md). Session queries sort a session's rows.
M005_TOOL_CALLS_BY_ROW: Final = """
CREATE INDEX observations_session_tool ON observations(session_id, tool_use_id);
DROP INDEX observations_session_ts;
"""

# No query reads observations(file_path): `queries.file_history` matches the path or any path
# ending with it, an OR that SQLite answers with a scan whatever the index. It cost every commit
# a page per file touched (~7 of a 14-event commit's 66 WAL pages).
M006_DROP_FILE_INDEX: Final = "DROP INDEX IF EXISTS observations_file;"

# Substring search for unspaced scripts (store/grams.py): each row's character pairs, indexed for the
# rows that hold such text, as they are indexed; rows older than the migration are indexed at start
# (`grams_from` climbs to `grams_below`, a chunk per transaction, progress in the log).
M007_UNSPACED_GRAMS: Final = f"""
CREATE VIRTUAL TABLE observations_grams USING fts5(grams, tokenize="{grams.TOKENIZE}");
CREATE TRIGGER observations_grams_ad AFTER DELETE ON observations BEGIN
    DELETE FROM observations_grams WHERE rowid = old.id;
END;
CREATE TRIGGER observations_grams_au AFTER UPDATE OF title, content ON observations BEGIN
    DELETE FROM observations_grams WHERE rowid = old.id;
END;
ALTER TABLE fts_state ADD COLUMN grams_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE fts_state ADD COLUMN grams_below INTEGER NOT NULL DEFAULT 0;
UPDATE fts_state SET grams_below = indexed_below;
"""

# The main index without positions or row lengths, and with prefix indexes (store/fts.py): at a
# million observations 117 instead of 296 bytes per observation, and a two-letter prefix in 0.5 ms
# instead of 0.2-0.4 s. Search ranks with its own BM25 (no bm25(), no docsize) and checks phrases on
# candidates. Rows stored before are indexed again at start (`reindex_from` climbs to
# `reindex_below`, a chunk per transaction, progress in the log); the triggers leave that band alone.
M008_POSITIONLESS_FTS: Final = f"""
DROP TABLE observations_fts;
CREATE VIRTUAL TABLE observations_fts USING fts5(
    title, content, file_path, command,
    content='observations', content_rowid='id', tokenize='{FTS_TOKENIZE}',
    detail=none, columnsize=0, prefix='2 3'
);
ALTER TABLE fts_state ADD COLUMN reindex_from INTEGER NOT NULL DEFAULT 0;
ALTER TABLE fts_state ADD COLUMN reindex_below INTEGER NOT NULL DEFAULT 0;
UPDATE fts_state SET reindex_from = (SELECT coalesce(min(id), 0) FROM observations), reindex_below = indexed_below;
DROP TRIGGER observations_ad;
CREATE TRIGGER observations_ad AFTER DELETE ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state)
 AND NOT (old.id >= (SELECT reindex_from FROM fts_state) AND old.id < (SELECT reindex_below FROM fts_state)) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
END;
DROP TRIGGER observations_au;
CREATE TRIGGER observations_au AFTER UPDATE OF title, content, file_path, command ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state)
 AND NOT (old.id >= (SELECT reindex_from FROM fts_state) AND old.id < (SELECT reindex_below FROM fts_state)) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, title, content, file_path, command)
    VALUES ('delete', old.id, old.title, old.content, old.file_path, old.command);
    INSERT INTO observations_fts(rowid, title, content, file_path, command)
    VALUES (new.id, new.title, new.content, new.file_path, new.command);
END;
"""

# What the next retention sweep will remove, announced a day before it does (nmemd/jobs/retention.py):
# one row, the newest notice.
M009_RETENTION_NOTICE: Final = """
CREATE TABLE retention_notice (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    announced_at REAL NOT NULL,
    upto_id INTEGER NOT NULL,
    cutoffs TEXT NOT NULL,
    expiring TEXT NOT NULL
);
"""


def _main_index_again(content: str, content_rowid: str, sign: str) -> str:
    """The main index made anew over `content` (its `content_rowid`), each row under `{sign}id`: its old
    rows left to index again at start (`reindex_from`, repair), and the delete and edit triggers that
    keep it in step (rows above the watermark or still to index again are not in it)."""
    return f"""DROP TABLE observations_fts;
CREATE VIRTUAL TABLE observations_fts USING fts5(
    {fts.COLUMNS},
    content='{content}', content_rowid='{content_rowid}', tokenize='{FTS_TOKENIZE}',
    detail=none, columnsize=0, prefix='2 3'
);
UPDATE fts_state SET reindex_from = (SELECT coalesce(min(id), 0) FROM observations), reindex_below = indexed_below;
DROP TRIGGER observations_ad;
CREATE TRIGGER observations_ad AFTER DELETE ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state)
 AND NOT (old.id >= (SELECT reindex_from FROM fts_state) AND old.id < (SELECT reindex_below FROM fts_state)) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, {fts.COLUMNS})
    VALUES ('delete', {sign}old.id, {fts.values("old")});
END;
DROP TRIGGER observations_au;
CREATE TRIGGER observations_au AFTER UPDATE OF {fts.COLUMNS.replace("scope", "project")} ON observations
WHEN old.id < (SELECT indexed_below FROM fts_state)
 AND NOT (old.id >= (SELECT reindex_from FROM fts_state) AND old.id < (SELECT reindex_below FROM fts_state)) BEGIN
    INSERT INTO observations_fts(observations_fts, rowid, {fts.COLUMNS})
    VALUES ('delete', {sign}old.id, {fts.values("old")});
    INSERT INTO observations_fts(rowid, {fts.COLUMNS}) VALUES ({sign}new.id, {fts.values("new")});
END;
"""


# The project in the main index: each row's `scope` token (`fts.scope_token`, a generated column, so
# FTS5's rebuild and integrity-check read it as they read the others) lets a project's search ask the
# index for that project's rows, newest first, instead of reading the whole store's newest matches and
# keeping the project's: at a million rows a project with 0.7 % of them found 0 of a common word's 944
# rows. Rows stored before are indexed again at start, as m008 did (`reindex_from`, progress in the log).
M010_PROJECT_IN_INDEX: Final = f"""
ALTER TABLE observations ADD COLUMN scope TEXT GENERATED ALWAYS AS ({fts.SCOPE_SQL}) VIRTUAL;
{_main_index_again("observations", "id", "")}"""

# The coding agent of every session and observation (issue #19): NULL for Claude Code, so the rows
# stored before and Claude Code's own add nothing to the file (SQLite stores a trailing NULL column's
# absence for free in old rows, a one-byte header entry in new ones); the registry's name for another.
M011_AGENT: Final = """
ALTER TABLE sessions ADD COLUMN agent TEXT;
ALTER TABLE observations ADD COLUMN agent TEXT;
"""

# Team memory (nmemd/team, docs/team.md). Shared projects and their server (DSN without password: the
# password is in a 0600 libpq password file); a durable outbox filled by triggers in the transaction
# that stores a shared project's own observation or session summary (a lookup in a tiny table for an
# unshared one), and tombstones by purge; pull cursors; teammates' rows live in `observations` with
# their `author` (NULL: this user's own rows, which add nothing to the file), `machine` and `team_seq`,
# so the existing full-text index finds them; their session summaries in `team_sessions`.
M012_TEAM: Final = """
CREATE TABLE team_projects (
    root TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    team TEXT NOT NULL,
    dsn TEXT NOT NULL,
    member TEXT NOT NULL,
    share_prompts INTEGER NOT NULL DEFAULT 0,
    joined_at REAL NOT NULL
);
CREATE TABLE team_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    op TEXT NOT NULL,
    ref TEXT NOT NULL,
    project TEXT NOT NULL
);
CREATE TABLE team_cursors (
    link TEXT NOT NULL,
    feed TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (link, feed)
) WITHOUT ROWID;
CREATE TABLE team_links (
    link TEXT PRIMARY KEY,
    last_push_at REAL,
    last_pull_at REAL,
    pushed INTEGER NOT NULL DEFAULT 0,
    pulled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE team_sessions (
    team TEXT NOT NULL,
    session_id TEXT NOT NULL,
    author TEXT NOT NULL,
    machine TEXT,
    agent TEXT,
    project TEXT NOT NULL,
    started_at REAL,
    ended_at REAL,
    summary TEXT NOT NULL,
    team_seq INTEGER,
    PRIMARY KEY (team, session_id, author)
);
CREATE INDEX team_sessions_project ON team_sessions(project, ended_at);
ALTER TABLE observations ADD COLUMN author TEXT;
ALTER TABLE observations ADD COLUMN machine TEXT;
ALTER TABLE observations ADD COLUMN team_seq INTEGER;
CREATE INDEX observations_team ON observations(author, ts) WHERE author IS NOT NULL;
CREATE TRIGGER team_outbox_observation AFTER INSERT ON observations
WHEN new.author IS NULL AND new.project IN (SELECT root FROM team_projects) BEGIN
    INSERT INTO team_outbox(op, ref, project) VALUES ('obs', new.id, new.project);
END;
CREATE TRIGGER team_outbox_summary AFTER UPDATE OF summary ON sessions
WHEN new.summary IS NOT NULL AND new.summary IS NOT old.summary
 AND new.project IN (SELECT root FROM team_projects) BEGIN
    INSERT INTO team_outbox(op, ref, project) VALUES ('session', new.session_id, new.project);
END;
"""

# A session is one piece of work (issue #39): the places other than its project where it worked (a sibling
# checkout, a parent folder, another repository it `cd`ed into), so a search of the project it started in
# finds them. Each row keeps its own project; a folder under the session's project needs no entry (a
# project's search takes the folders under it). A row per (session, place): a few per session that moved,
# none for the rest. Filled by each batch (`store.places`) and, here, from the rows stored before.
M013_SESSION_PLACES: Final = f"""
CREATE TABLE session_places (
    launch TEXT NOT NULL,
    project TEXT NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (launch, project, session_id)
) WITHOUT ROWID;
CREATE TRIGGER session_places_ad AFTER DELETE ON sessions BEGIN
    DELETE FROM session_places WHERE launch = old.project AND session_id = old.session_id;
END;
{places.FILL.format(rows="1")};
"""

# Team memory kept apart (issue #36): a teammate's rows live in their own session space
# (`team/<author>/<session id>`, nmemd.team.local.team_session_id), so none joins a session of this
# user whatever session id it carries; `team_hidden` holds the event ids this user forgot (or a
# tombstone removed), never stored again by a pull; `team_links.admin` whether this member
# administers the team (a forget of a teammate's row then deletes it for the team); a summary
# removed or a session purged in a shared project is queued too (an empty summary replaces it on
# the server and at every teammate's).
M014_TEAM_APART: Final = """
UPDATE observations SET session_id = 'team/' || author || '/' || session_id
 WHERE author IS NOT NULL AND session_id NOT LIKE 'team/%';
UPDATE OR REPLACE team_sessions SET session_id = 'team/' || author || '/' || session_id
 WHERE session_id NOT LIKE 'team/%';
CREATE TABLE team_hidden (
    event_id TEXT PRIMARY KEY,
    hidden_at REAL NOT NULL
) WITHOUT ROWID;
ALTER TABLE team_links ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER team_outbox_summary;
CREATE TRIGGER team_outbox_summary AFTER UPDATE OF summary ON sessions
WHEN new.summary IS NOT old.summary AND new.project IN (SELECT root FROM team_projects) BEGIN
    INSERT INTO team_outbox(op, ref, project) VALUES ('session', new.session_id, new.project);
END;
CREATE TRIGGER team_outbox_session_gone AFTER DELETE ON sessions
WHEN old.summary IS NOT NULL AND old.project IN (SELECT root FROM team_projects) BEGIN
    INSERT INTO team_outbox(op, ref, project) VALUES ('session', old.session_id, old.project);
END;
"""

# What `nmem status` reports without reading every row (issue #40): the observations of each type and
# the ledger's size and newest time, kept by triggers in the transaction that writes or deletes the rows
# (at a million observations counting them read 135 ms of the store; these are a few rows). The ledger
# is never deleted from (purge unlinks its rows), so its newest time only grows.
M015_COUNTS: Final = """
CREATE TABLE counts (
    name TEXT PRIMARY KEY,
    n INTEGER NOT NULL,
    latest REAL
) WITHOUT ROWID;
INSERT INTO counts(name, n) SELECT 'type:' || type, count(*) FROM observations GROUP BY type;
INSERT INTO counts(name, n, latest) SELECT 'events', count(*), max(received_at) FROM events;
CREATE TRIGGER counts_observations_ai AFTER INSERT ON observations BEGIN
    INSERT INTO counts(name, n) VALUES ('type:' || new.type, 1) ON CONFLICT(name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER counts_observations_ad AFTER DELETE ON observations BEGIN
    UPDATE counts SET n = n - 1 WHERE name = 'type:' || old.type;
END;
CREATE TRIGGER counts_observations_au AFTER UPDATE OF type ON observations BEGIN
    UPDATE counts SET n = n - 1 WHERE name = 'type:' || old.type;
    INSERT INTO counts(name, n) VALUES ('type:' || new.type, 1) ON CONFLICT(name) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER counts_events_ai AFTER INSERT ON events BEGIN
    INSERT INTO counts(name, n, latest) VALUES ('events', 1, new.received_at)
    ON CONFLICT(name) DO UPDATE SET n = n + 1, latest = max(coalesce(latest, excluded.latest), excluded.latest);
END;
CREATE TRIGGER counts_events_ad AFTER DELETE ON events BEGIN
    UPDATE counts SET n = n - 1 WHERE name = 'events';
END;
"""

# The main index newest first (fts.NEGATED_SINCE, issue #40): its rowids are the ids negated, so
# FTS5 reads a search's newest rows in its own order, and its content a view of the rows newest first
# (`fts.NEWEST_FIRST_VIEW`: 'rebuild' and 'integrity-check' read them in the index's order). Rows
# stored before are indexed again at start, as m010 did (`reindex_from`, progress in the log: ~40 s at
# a million rows).
M016_NEWEST_FIRST_INDEX: Final = f"""
CREATE VIEW {fts.NEWEST_FIRST_VIEW} AS SELECT -id AS fts_id, {fts.COLUMNS} FROM observations ORDER BY id DESC;
{_main_index_again(fts.NEWEST_FIRST_VIEW, "fts_id", "-")}"""

MIGRATIONS: Final[tuple[tuple[str, str], ...]] = (
    ("m001_initial", M001_INITIAL),
    ("m002_fts_batch_index", M002_FTS_BATCH_INDEX),
    ("m003_natural_keys", M003_NATURAL_KEYS),
    ("m004_fts_watermark", M004_FTS_WATERMARK),
    ("m005_tool_calls_by_row", M005_TOOL_CALLS_BY_ROW),
    ("m006_drop_file_index", M006_DROP_FILE_INDEX),
    ("m007_unspaced_grams", M007_UNSPACED_GRAMS),
    ("m008_positionless_fts", M008_POSITIONLESS_FTS),
    ("m009_retention_notice", M009_RETENTION_NOTICE),
    ("m010_project_in_index", M010_PROJECT_IN_INDEX),
    ("m011_agent", M011_AGENT),
    ("m012_team", M012_TEAM),
    ("m013_session_places", M013_SESSION_PLACES),
    ("m014_team_apart", M014_TEAM_APART),
    ("m015_counts", M015_COUNTS),
    (fts.NEGATED_SINCE, M016_NEWEST_FIRST_INDEX),
)

MIGRATIONS_DDL: Final = "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
