"""A word inside an unspaced run (Chinese, Japanese, Thai) is found (issue #14, tokens that meet).

unicode61 keeps 東京サーバーの設定 as one token; the pairs index (store/grams.py, migration m007)
finds サーバ, 京サ or 設定 inside it. Through the real hook client and daemon; a store from
before m007 is indexed at start; purge leaves none of the pairs behind.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.earlier_stores import build_v6
from support.env import BIN

from nmemd.recall import search
from nmemd.recall.queries import Filters
from nmemd.store import readers

RUN = "東京サーバーの設定を変更した"  # "changed the Tokyo server's settings", written without spaces
THAI = "แก้ไขการตั้งค่าเซิร์ฟเวอร์"


def _prompt(session: str, text: str) -> bytes:
    return json.dumps(
        {"session_id": session, "cwd": "/tmp/nmem-cjk", "hook_event_name": "UserPromptSubmit", "prompt": text}
    ).encode()


def _found(db: Path, query: str) -> list[str]:
    conn = readers.open_readonly(str(db))
    try:
        return [h.title for h in search.search(conn, query, Filters())]
    finally:
        conn.close()


def test_words_inside_an_unspaced_run_are_found(nmem_env: dict[str, str], short_dir: str) -> None:
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        for i, text in enumerate([RUN, THAI, "an ascii prompt about servers"]):
            assert run_send(_prompt(f"s-{i}", text)).returncode == 0
    finally:
        assert daemon.stop() == 0
    for word in ("東京", "サーバ", "京サ", "設定", "変更", "設", "ตั้งค่า", "เซิร์ฟเวอร์"):
        titles = _found(daemon.db, word)
        assert titles and (RUN in titles[0] or THAI in titles[0]), (word, titles)
    assert _found(daemon.db, "設京") == []  # characters of the run, not in that order
    assert _found(daemon.db, "servers")[0].startswith("an ascii prompt")


def test_a_store_from_before_the_pairs_index_is_indexed_at_start(nmem_env: dict[str, str], short_dir: str) -> None:
    daemon = Daemon(nmem_env, short_dir)
    build_v6(daemon.home)
    conn = sqlite3.connect(daemon.db, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO observations(event_id, session_id, project, ts, last_ts, hook_event, type, title)"
            " VALUES ('old-cjk', 's-old', '/tmp/p', 1, 1, 'UserPromptSubmit', 'prompt', ?)",
            (RUN,),
        )
        conn.execute("INSERT INTO observations_fts(rowid, title) VALUES (-last_insert_rowid(), ?)", (RUN,))
        conn.execute("UPDATE fts_state SET indexed_below = (SELECT max(id) + 1 FROM observations)")
    finally:
        conn.close()
    daemon.start()
    assert daemon.stop() == 0
    log = "\n".join(p.read_text() for p in daemon.home.rglob("nmemd.log*"))
    assert "indexed unspaced-script text up to id" in log, log  # progress, chunk by chunk
    assert _found(daemon.db, "サーバ") == [RUN]
    assert db_rows(daemon.db, "SELECT grams_from = grams_below FROM fts_state") == [(1,)]
    integrity_ok(daemon.db)


def test_purge_leaves_no_pair_behind(nmem_env: dict[str, str], short_dir: str) -> None:
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        assert run_send(_prompt("s-secret", "秘密鍵はカモノハシ九号")).returncode == 0
        assert run_send(_prompt("s-other", RUN)).returncode == 0
        done = subprocess.run(
            [str(BIN / "nmem"), "purge", "--session", "s-secret", "--yes"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
    finally:
        assert daemon.stop() == 0
    raw = b"".join(p.read_bytes() for p in daemon.home.glob("nmem.db*"))
    for pair in ("カモ", "ノハ", "九号"):
        assert pair.encode() not in raw, pair
    assert _found(daemon.db, "サーバ") == [RUN]
