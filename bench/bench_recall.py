"""Recall: does nmem answer what a coding agent asks its memory? (issue #14, "Measure")

Builds a store from the real transcripts of the shared corpus (`../shared/corpus`: 101 Claude Code
sessions), then asks the questions of `recall_questions.json` twice, as an agent would phrase them
(natural) and as search terms (keyword), through the daemon's public RPC (`search`, then `show` for
the full text), scoped to the project nmem derived for the question's session. A question is
answered at rank k when one of the first k results holds an expected fact (case-insensitive
substring of title + content). The same run scores a baseline, BM25 per turn (what a
conversation-search tool does: each user prompt plus the tool calls and results until the next
prompt, per project, `bm25s` over lowercase alphanumeric tokens minus English stop words), the same
BM25 over nmem's own observations (`bm25obs`: what ranking alone could reach on this store), which
facts the project's SessionStart context already holds and its size, and for each miss whether the
fact was stored at all (in the project, only under another project of the session, or not).

It also measures what is *shown*: whether an expected fact is visible in the printed line of a top-k
hit (the line the MCP `search` tool prints for it: title, path, snippet, its marks removed), and whether
every session of the store has a handoff (`sessions` RPC) whose lines all name their observations.

Only the public CLI/RPC is used, so the benchmark keeps measuring while search is rewritten; the
printed line is the tree's own MCP formatter. `--tree DIR` runs the same benchmark on the code in DIR
(a worktree of another commit, on PYTHONPATH) in the same run, over the same unpacked corpus, and
prints both side by side.

Needs the bench extra: `.venv/bin/pip install -e '.[bench]'` (bm25s). Run from the repo root:

    .venv/bin/python bench/bench_recall.py [--home DIR] [--corpus DIR] [--tree DIR] [--verbose] [--json]

`--home DIR` reuses a store already imported (its daemon is started on a fresh socket; stop any
other daemon on DIR first); `--keep` leaves the new store in place and prints its path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, VENV_BIN, Daemon, Home, machine_info, print_machine  # noqa: E402

QUESTIONS = Path(__file__).resolve().parent / "recall_questions.json"
CORPUS = REPO.parent / "shared" / "corpus"
NMEM = str(VENV_BIN / "nmem")
FORMS = ("natural", "keyword")
RANKS = (1, 3, 10)
SYSTEMS = ("nmem", "baseline", "bm25obs")  # bm25obs: BM25 over nmem's own observations, words OR-ed
TARGETS = {("natural", 3): 0.80, ("natural", 10): 0.90, ("keyword", 3): 0.90}
LIMIT = max(RANKS)
_TOKEN = re.compile(r"[a-z0-9]+")


# --- the store --------------------------------------------------------------------------------


class RecallHome(Home):
    """A `Home` for this benchmark: a fresh NMEM_HOME under /tmp, or one given (`--home`), never removed then."""

    def __init__(self, home: str | None = None) -> None:
        self.owned = home is None
        self.home = home or tempfile.mkdtemp(prefix="nmr", dir="/tmp")
        self.run_dir = tempfile.mkdtemp(prefix="nmr", dir="/tmp")  # AF_UNIX paths are short
        self.socket = os.path.join(self.run_dir, "d.sock")
        self.notify = os.path.join(self.run_dir, "n.sock")
        self.db = os.path.join(self.home, "nmem.db")
        self.log = os.path.join(self.run_dir, "nmemd.stderr")

    def cleanup(self) -> None:
        if self.owned:
            shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)


def unpack_corpus(corpus: str | None, scratch: str) -> Path:
    """The corpus's projects/ folder: given, or unpacked into `scratch` by the corpus's own script."""
    if corpus:
        path = Path(corpus)
        return path / "projects" if (path / "projects").is_dir() else path
    out = subprocess.run([str(CORPUS / "unpack.sh"), scratch], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def import_corpus(home: RecallHome, projects: Path) -> dict[str, Any]:
    """`nmem import-transcripts` into the running daemon, as a user would backfill."""
    out = subprocess.run(
        [NMEM, "import-transcripts", str(projects), "--json"],
        env=home.env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def export(home: RecallHome) -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """`nmem export`: each session's project, and (session, project, title + content) of every observation.

    The observations tell a search miss from a fact never stored, and feed `bm25obs`."""
    out = subprocess.run([NMEM, "export"], env=home.env(), check=True, capture_output=True, text=True)
    sessions, observations = {}, []
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if row.get("kind") == "session":
            sessions[row["session_id"]] = row.get("project") or ""
        elif row.get("kind") == "observation":
            text = f"{row.get('title')}\n{row.get('content')}"
            observations.append((row.get("session_id") or "", row.get("project") or "", text))
    return sessions, observations


def where_stored(stored: list[tuple[str, str, str]], session: str, project: str | None, expect: list[str]) -> str:
    """'project' (findable with --project), 'other project' (stored under another project), or 'no'."""
    if rank([t for _, p, t in stored if p == project], expect):
        return "project"
    if rank([t for s, _, t in stored if s == session], expect):
        return "other project"
    return "no"


class Memory:
    """nmem's RPC in-process (no CLI start per call): search, show, sessions, context."""

    def __init__(self, home: RecallHome) -> None:
        os.environ.update(NMEM_HOME=home.home, NMEM_SOCKET=home.socket, NMEM_AUTOSTART="0")
        try:
            from nmemd.control import control  # reads NMEM_SOCKET at each call
        except ImportError:  # an older tree (--tree): nmemd/client/ before its rename, nmemd/daemon/ before that
            try:
                from nmemd.client import control  # type: ignore[no-redef]
            except ImportError:
                from nmemd.daemon import control  # type: ignore[no-redef]

        self._ask = control.ask
        self.calls = 0

    def ask(self, method: str, params: dict[str, Any]) -> Any:
        self.calls += 1
        return self._ask(method, params, timeout=60.0)

    def search(self, query: str, project: str) -> tuple[list[dict[str, Any]], str | None]:
        """Top results with their full text and their printed line; a refused query is an empty list and
        its error."""
        from nmemd.errors import NmemError

        try:
            hits = self.ask("search", {"query": query, "project": project, "limit": LIMIT})
        except NmemError as exc:
            return [], str(exc)
        if not hits:
            return [], None
        details = {d["id"]: d for d in self.ask("show", {"ids": [h["id"] for h in hits]})}
        for hit in hits:
            detail = details.get(hit["id"], {})
            hit["text"] = f"{hit['title']}\n{detail.get('content') or ''}"
            hit["printed"] = printed(hit)
        return hits, None

    def handoffs(self) -> dict[str, int] | None:
        """How many sessions the store has, how many have a handoff, and lines without an observation
        behind them; None when the tree has no handoffs."""
        try:
            rows = self.ask("sessions", {"project": "*", "limit": 200, "handoff": True})
        except Exception:  # a tree whose sessions method takes no handoff parameter
            return None
        if rows and "handoff" not in rows[0]:
            return None
        lines = [line for r in rows for line in r["handoff"]]
        return {
            "sessions": len(rows),
            "with_handoff": sum(1 for r in rows if r["handoff"]),
            "lines": len(lines),
            "lines_without_ids": sum(1 for line in lines if not line["ids"]),
        }

    def context(self, project: str) -> str:
        return str(self.ask("context", {"project": project})["context"])


def printed(hit: dict[str, Any]) -> str:
    """The line the tree's MCP `search` tool prints for a hit, its highlight marks removed: `[word]`
    before snippets had spans, `⟦word⟧` since."""
    import msgspec

    from nmemd.mcp.tools import _hit_line
    from nmemd.recall.queries import Hit

    line = _hit_line(msgspec.convert({k: v for k, v in hit.items() if k not in ("text", "printed")}, Hit), time.time())
    if "spans" in hit:
        return line.replace("⟦", "").replace("⟧", "")
    return line.replace("[", "").replace("]", "")


# --- the baseline: BM25 per turn ----------------------------------------------------------------


def tokens(text: str, stopwords: frozenset[str]) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


def _prompt_text(record: dict[str, Any]) -> str | None:
    """The text of a real user prompt; None for tool results, meta records and interruptions."""
    if record.get("type") != "user" or record.get("isSidechain") or record.get("isMeta"):
        return None
    content = (record.get("message") or {}).get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        if not text:
            return None
    else:
        return None
    return None if text.startswith("[Request interrupted") else text


def _tool_text(record: dict[str, Any]) -> list[str]:
    """Tool calls (name and input) and tool results of one main-chain record."""
    if record.get("isSidechain"):
        return []
    content = (record.get("message") or {}).get("content")
    if not isinstance(content, list):
        return []
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            parts.append(f"{block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False)}")
        elif block.get("type") == "tool_result":
            result = block.get("content")
            if isinstance(result, list):
                result = "\n".join(str(b.get("text", "")) for b in result if isinstance(b, dict))
            parts.append(str(result or ""))
    return parts


def turns(path: Path) -> list[str]:
    """One text per user turn: the prompt, then every tool call and result until the next prompt."""
    out: list[list[str]] = []
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            prompt = _prompt_text(record)
            if prompt is not None:
                out.append([prompt])
            elif out:
                out[-1].extend(_tool_text(record))
    return ["\n".join(t) for t in out]


def turn_texts(projects: Path, session_project: dict[str, str]) -> dict[str, list[str]]:
    """The baseline's documents: every user turn of the corpus, by the project nmem gave its session."""
    texts: dict[str, list[str]] = defaultdict(list)
    for path in sorted(projects.rglob("*.jsonl")):
        project = session_project.get(path.stem)
        if project is not None:
            texts[project].extend(turns(path))
    return dict(texts)


def _encoded(path: str) -> str:
    """Claude Code's folder name for a cwd under ~/.claude/projects."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def launch_folder(path: Path) -> str | None:
    """The folder a transcript's session was started in: the first cwd of its lines whose encoding is the
    transcript's folder name (Claude Code files a whole session there, wherever the agent `cd`s)."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            cwd = re.search(r'"cwd":"((?:[^"\\]|\\.)*)"', line)
            if cwd:
                value = json.loads(f'"{cwd.group(1)}"')
                if _encoded(value) == path.parent.name:
                    return str(value)
    return None


def launch_texts(projects: Path) -> dict[str, list[str]]:
    """The same turns filed as a conversation-search tool files them: each session's under its launch folder."""
    texts: dict[str, list[str]] = defaultdict(list)
    for path in sorted(projects.rglob("*.jsonl")):
        folder = launch_folder(path)
        if folder is not None:
            texts[folder].extend(turns(path))
    return dict(texts)


class Bm25:
    """One bm25s index per project over `tokens` of its documents."""

    def __init__(self, texts: dict[str, list[str]]) -> None:
        import bm25s  # type: ignore[import-untyped]
        from bm25s.stopwords import STOPWORDS_EN  # type: ignore[import-untyped]

        self.stopwords = frozenset(STOPWORDS_EN)
        self.texts = texts
        self.index: dict[str, Any] = {}
        for project, docs in texts.items():
            retriever = bm25s.BM25()
            retriever.index([tokens(d, self.stopwords) for d in docs], show_progress=False)
            self.index[project] = retriever

    def search(self, query: str, project: str | None) -> list[str]:
        retriever = self.index.get(project or "")
        if retriever is None:
            return []
        vocab = retriever.vocab_dict
        query_tokens = [t for t in tokens(query, self.stopwords) if t in vocab]
        if not query_tokens:
            return []
        k = min(LIMIT, len(self.texts[project or ""]))
        docs, scores = retriever.retrieve([query_tokens], k=k, show_progress=False)
        return [self.texts[project or ""][int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


# --- scoring ------------------------------------------------------------------------------------


def rank(texts: list[str], expect: list[str]) -> int | None:
    """1-based rank of the first text holding an expected fact."""
    facts = [e.lower() for e in expect]
    for i, text in enumerate(texts, 1):
        low = text.lower()
        if any(f in low for f in facts):
            return i
    return None


def run(args: argparse.Namespace) -> dict[str, Any]:
    questions = json.loads(Path(args.questions).read_text())["questions"]
    scratch = tempfile.mkdtemp(prefix="nmrc", dir="/tmp")
    home = RecallHome(args.home)
    daemon = Daemon(home)
    timings: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        projects_dir = unpack_corpus(args.corpus, scratch)
        timings["unpack_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        daemon.start(timeout=60.0)
        imported = None
        if args.home is None:
            imported = import_corpus(home, projects_dir)
        timings["import_s"] = time.perf_counter() - t0

        memory = Memory(home)
        session_project, stored = export(home)
        t0 = time.perf_counter()
        turns_by_project = turn_texts(projects_dir, session_project)
        baseline = Bm25(turns_by_project)
        # Questions that name their project (the folder the session was launched in) are asked there, of
        # nmem and of a baseline that files each session under that folder.
        by_launch = Bm25(launch_texts(projects_dir)) if any("project" in q for q in questions) else baseline
        timings["baseline_index_s"] = time.perf_counter() - t0
        observations: dict[str, list[str]] = defaultdict(list)
        for _, obs_project, text in stored:
            observations[obs_project].append(text)
        bm25_obs = Bm25(dict(observations))

        t0 = time.perf_counter()
        rows = []
        for q in questions:
            stored_in = session_project.get(q["session_id"])
            project = q.get("project", stored_in) if stored_in is not None else None
            base = by_launch if "project" in q else baseline
            row: dict[str, Any] = {k: q[k] for k in ("id", "repo", "kind", "source", "expect")}
            row["project"] = project
            for form in FORMS:
                hits, error = memory.search(q[form], project) if project else ([], "session not in the store")
                row[f"nmem_{form}"] = rank([h["text"] for h in hits], q["expect"])
                row[f"visible_{form}"] = rank([h["printed"] for h in hits], q["expect"])
                row[f"nmem_{form}_error"] = error
                row[f"nmem_{form}_top"] = [f"{h['type']}: {h['title'][:100]}" for h in hits[:3]]
                row[f"nmem_{form}_hits"] = len(hits)
                row[f"baseline_{form}"] = rank(base.search(q[form], project), q["expect"])
                row[f"bm25obs_{form}"] = rank(bm25_obs.search(q[form], project), q["expect"])
                row[form] = q[form]
            rows.append(row)
        timings["queries_s"] = time.perf_counter() - t0
        for row, q in zip(rows, questions, strict=True):
            row["stored"] = where_stored(stored, q["session_id"], row["project"], q["expect"])
            row["project_turns"] = len((by_launch if "project" in q else baseline).texts.get(row["project"] or "", []))

        contexts = {}
        for project in sorted({r["project"] for r in rows if r["project"]}):
            text = memory.context(project)
            held = [r["id"] for r in rows if r["project"] == project and rank([text], r["expect"])]
            total = sum(1 for r in rows if r["project"] == project)
            contexts[project] = {"chars": len(text), "questions": total, "held": held}
        handoffs = memory.handoffs()
        timings["rpc_calls"] = memory.calls
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        if args.keep and home.owned:
            home.owned = False
            print(f"store kept: reuse it with --home {home.home}", file=sys.stderr)
        home.cleanup()
    sizes = sorted(len(t) for docs in turns_by_project.values() for t in docs)
    turn_stats = {"turns": len(sizes), "median_chars": sizes[len(sizes) // 2] if sizes else 0}
    return {"import": imported, "timings": timings, "questions": rows, "contexts": contexts, "turns": turn_stats,
            "handoffs": handoffs}  # fmt: skip


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, int]]]:
    out: dict[str, dict[str, dict[int, int]]] = {}
    for system in (*SYSTEMS, "visible"):
        out[system] = {}
        for form in FORMS:
            ranks = [r[f"{system}_{form}"] for r in rows]
            out[system][form] = {k: sum(1 for x in ranks if x is not None and x <= k) for k in RANKS}
    return out


def question_set(qid: str) -> str:
    """The set a question belongs to: its id's prefix before a `-` (`t39-07`: t39), else `q` (the first 85)."""
    return qid.split("-", 1)[0] if "-" in qid else "q"


def by_set(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    sets: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        sets[question_set(r["id"])].append(r)
    return dict(sets)


def print_sets(rows: list[dict[str, Any]], systems: tuple[str, ...] = ("nmem", "baseline")) -> None:
    """Each question set on its own (set: the ids' prefix), found top-1/3/10 for each system and form."""
    sets = by_set(rows)
    if len(sets) < 2:
        return
    print("\nby question set (found at top-1 / top-3 / top-10):")
    for name, group in sorted(sets.items()):
        table = summary(group)
        n = len(group)
        for system in systems:
            found = table[system]
            cells = "   ".join(
                f"{form} " + " / ".join(f"{found[form][k]:>2} ({100 * found[form][k] / n:3.0f} %)" for k in RANKS)
                for form in FORMS
            )
            print(f"  {name:5} {n:>3}  {system:9} {cells}")


# --- output -------------------------------------------------------------------------------------


def _cell(n: int, total: int) -> str:
    return f"{n:>3}/{total} {100 * n / total:3.0f} %"


def print_report(result: dict[str, Any], verbose: bool) -> None:
    rows = result["questions"]
    total = len(rows)
    table = summary(rows)
    repos = len({r["repo"] for r in rows})
    print(f"recall: {total} questions, {repos} repositories; answered at rank k (top-k), project-scoped")
    head = "  ".join(f"{'top-' + str(k):>12}" for k in RANKS)
    print(f"{'':10} {'form':8} {head}")
    for system in SYSTEMS:
        for form in FORMS:
            cells = "  ".join(f"{_cell(table[system][form][k], total):>12}" for k in RANKS)
            print(f"{system:10} {form:8} {cells}")
    for form in FORMS:
        goals = [f">= {100 * TARGETS[(form, k)]:.0f} %" if (form, k) in TARGETS else "" for k in RANKS]
        cells = "  ".join(f"{g:>12}" for g in goals)
        print(f"{'target':10} {form:8} {cells}")
    few = sum(1 for r in rows if r["project_turns"] <= LIMIT)
    turns_info = result["turns"]
    print(
        f"baseline: bm25s per user turn ({turns_info['turns']} turns, median {turns_info['median_chars']} chars;"
        f" {few} questions' projects have <= {LIMIT} turns, so top-{LIMIT} is every turn there)"
    )
    print("bm25obs:  bm25s per observation of this store (nmem export), words OR-ed: what ranking alone could reach")
    print_sets(rows)

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    print()
    print("by kind (top-10, natural / keyword): nmem | baseline | bm25obs")
    for kind, group in sorted(by_kind.items()):
        s = summary(group)
        n = len(group)
        print(
            f"  {kind:11} {n:>3}   nmem {s['nmem']['natural'][10]:>2} / {s['nmem']['keyword'][10]:>2}"
            f"   baseline {s['baseline']['natural'][10]:>2} / {s['baseline']['keyword'][10]:>2}"
            f"   bm25obs {s['bm25obs']['natural'][10]:>2} / {s['bm25obs']['keyword'][10]:>2}"
        )

    for form in FORMS:
        missed = [r for r in rows if r[f"nmem_{form}"] is None]
        where = {w: sum(1 for r in missed if r["stored"] == w) for w in ("project", "other project", "no")}
        empty = sum(1 for r in missed if not r[f"nmem_{form}_hits"])
        print(
            f"nmem {form} misses: {len(missed)}: fact stored in the project {where['project']},"
            f" only under another project of the session {where['other project']}, not stored {where['no']};"
            f" search returned nothing {empty}"
        )

    print("\nanswer visible in the printed line (MCP search line: title, path, snippet) of a top-k hit:")
    for form in FORMS:
        cells = "  ".join(f"{_cell(table['visible'][form][k], total):>12}" for k in RANKS)
        print(f"{'printed':10} {form:8} {cells}")
    handoffs = result.get("handoffs")
    if handoffs is None:
        print("handoffs: none in this tree")
    else:
        print(
            f"handoffs: {handoffs['with_handoff']}/{handoffs['sessions']} sessions have one; {handoffs['lines']}"
            f" lines, {handoffs['lines_without_ids']} without an observation id"
        )

    contexts = result["contexts"]
    held = sum(len(c["held"]) for c in contexts.values())
    chars = [c["chars"] for c in contexts.values()]
    print(
        f"\nSessionStart context: holds the fact of {held}/{total} questions; "
        f"{len(contexts)} projects, {min(chars)}-{max(chars)} chars (mean {sum(chars) // len(chars)})"
    )
    if verbose:
        for project, c in sorted(contexts.items(), key=lambda kv: -len(kv[1]["held"])):
            print(f"  {c['chars']:>5} chars  {len(c['held'])}/{c['questions']} held  {project}")

    errors = [r for r in rows for f in FORMS if r[f"nmem_{f}_error"]]
    if errors:
        print(f"\nsearch errors: {len(errors)} (e.g. {errors[0]['id']}: {errors[0]['nmem_natural_error']})")
    t = result["timings"]
    print(
        f"\ntimings: unpack {t['unpack_s']:.1f} s, start+import {t['import_s']:.1f} s, "
        f"baseline index {t['baseline_index_s']:.1f} s, queries {t['queries_s']:.1f} s ({t['rpc_calls']} rpc calls)"
    )
    if verbose:
        print("\nper question: rank natural/keyword for nmem, baseline, bm25obs (- = not in top 10)")
        for r in rows:
            ranks = [r[f"{s}_{f}"] for s in SYSTEMS for f in FORMS]
            cells = " ".join(f"{x if x else '-':>2}" for x in ranks)
            print(f"{r['id']} {cells}  [{r['kind']}/{r['source']}, stored: {r['stored']}] {r['repo']}: {r['natural']}")
            print(f"      expect {r['expect']}; keyword {r['keyword']!r}")
            for form in FORMS:
                if r[f"nmem_{form}"] is None:
                    top = "; ".join(r[f"nmem_{form}_top"]) or r[f"nmem_{form}_error"] or "no results"
                    print(f"      nmem {form} ({r[f'nmem_{form}_hits']} hits): {top}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", help="reuse this already imported NMEM_HOME (not removed)")
    parser.add_argument("--corpus", help="an unpacked corpus (its projects/ folder); default: unpack the shared one")
    parser.add_argument("--questions", default=str(QUESTIONS))
    parser.add_argument("--keep", action="store_true", help="keep the new store and print where it is")
    parser.add_argument("--verbose", action="store_true", help="per-question ranks and what nmem returned instead")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.add_argument("--tree", help="also run the code in this checkout (another commit's worktree), same corpus")
    args = parser.parse_args()
    if args.tree and args.home:
        parser.error("--tree builds a store per tree: leave out --home")
    if not args.json:
        print_machine()  # timings only; the recall figures do not depend on the machine
    scratch = tempfile.mkdtemp(prefix="nmrt", dir="/tmp") if args.tree and not args.corpus else None
    try:
        if scratch:
            args.corpus = str(unpack_corpus(None, scratch))
        start = time.perf_counter()
        result = run(args)
        result["machine"] = machine_info()
        result["timings"]["total_s"] = time.perf_counter() - start
        result["summary"] = summary(result["questions"])
        other = run_tree(args) if args.tree else None
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(json.dumps({**result, "tree": other} if other else result, indent=1))
        return 0
    print_report(result, args.verbose)
    print(f"total {result['timings']['total_s']:.1f} s")
    if other is not None:
        print_comparison(result, other, args.tree)
    return 0


def run_tree(args: argparse.Namespace) -> dict[str, Any]:
    """This benchmark over the same corpus with the code of `args.tree` (on PYTHONPATH), as JSON."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.tree)}
    # Its own venv when it has one: this venv's editable install would mix the two trees' packages.
    own = Path(args.tree) / ".venv" / "bin" / "python"
    argv = [
        str(own) if own.exists() else sys.executable,
        __file__,
        "--json",
        "--corpus",
        args.corpus,
        "--questions",
        args.questions,
    ]
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def print_comparison(this: dict[str, Any], other: dict[str, Any], tree: str) -> None:
    """Both trees' figures, side by side: found (answer in a top-k hit), shown (in its printed line),
    the context's held facts, the handoffs."""
    total = len(this["questions"])
    print(f"\nthis tree against {tree}, same corpus, same run:")
    print(f"{'':22} {'':8} " + "  ".join(f"{'top-' + str(k):>12}" for k in RANKS))
    for label, result in (("this tree", this), ("other tree", other)):
        table = summary(result["questions"])  # JSON made the other's ranks strings
        for what, system in (("found", "nmem"), ("shown", "visible")):
            for form in FORMS:
                cells = "  ".join(f"{_cell(table[system][form][k], total):>12}" for k in RANKS)
                print(f"{label + ', ' + what:22} {form:8} {cells}")
    for name in sorted(by_set(this["questions"])):
        if len(by_set(this["questions"])) < 2:
            break
        print(f"question set {name}:")
        for label, result in (("this tree", this), ("other tree", other)):
            group = by_set(result["questions"]).get(name, [])
            table = summary(group)
            for what, system in (("found", "nmem"), ("shown", "visible"), ("baseline", "baseline")):
                for form in FORMS:
                    cells = "  ".join(f"{_cell(table[system][form][k], len(group)):>12}" for k in RANKS)
                    print(f"{label + ', ' + what:22} {form:8} {cells}")
            ids = {r["id"] for r in group}
            held = sum(1 for c in result["contexts"].values() for qid in c["held"] if qid in ids)
            print(f"{label + ', context':22} holds {held}/{len(group)}")
    for label, result in (("this tree", this), ("other tree", other)):
        held = sum(len(c["held"]) for c in result["contexts"].values())
        chars = [c["chars"] for c in result["contexts"].values()]
        handoffs = result.get("handoffs")
        got = f"{handoffs['with_handoff']}/{handoffs['sessions']} sessions" if handoffs else "none"
        print(
            f"{label}: context holds {held}/{total} ({100 * held / total:.0f} %), {min(chars)}-{max(chars)} chars;"
            f" handoffs {got}"
        )


if __name__ == "__main__":
    sys.exit(main())
