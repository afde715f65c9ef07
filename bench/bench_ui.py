"""The web viewer on a million observations: each page's time and the live feed's delay (issue #20).

`nmem ui` runs over a daemon on a copy of a cached scale store (`bench_scale.py --build-only`) and,
in the same run, over a daemon on an empty store: each page is fetched in turn from both,
alternating, and the figures are medians with the ratio to the empty store. The feed's delay is
the time from a hook event sent with the real client to its row arriving on the page's event
stream (server-sent events).

    .venv/bin/python bench/bench_scale.py --store /tmp/nmem-scale-m --build-only
    .venv/bin/python bench/bench_ui.py --store /tmp/nmem-scale-m/obs-1000000
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import select
import shutil
import subprocess
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import common
from common import Daemon, Home, median

NMEM = str(Path(common.PYTHON).parent / "nmem")


class Viewer:
    """`nmem ui --no-open` over one daemon's store, logged in."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.proc = subprocess.Popen([NMEM, "ui", "--no-open"], env=home.env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
        assert self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], 30)[0]:
            raise SystemExit("nmem ui printed no URL within 30 s")
        line = self.proc.stdout.readline().decode()
        m = re.fullmatch(r"nmem ui: http://127\.0\.0\.1:(\d+)(/[\w-]+)/\?token=(\S+)\n", line)
        if m is None:
            raise SystemExit("nmem ui printed no URL")
        self.port, self.root, secret = int(m.group(1)), m.group(2), m.group(3)
        self.cookie = ""
        _, headers, _ = self.get(f"/?token={secret}")
        self.cookie = headers["set-cookie"].split(";")[0]

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", self.root + path, headers={"Host": f"127.0.0.1:{self.port}", "Cookie": self.cookie})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()

    def timed(self, path: str) -> float:
        start = time.perf_counter()
        status, _, _ = self.get(path)
        if status not in (200, 404):  # the empty store has no observation to show: its 404 page
            raise SystemExit(f"{path}: HTTP {status}")
        return (time.perf_counter() - start) * 1e3

    def feed_delay(self) -> float:
        """ms from a hook event sent by the real client to its row on the live feed's stream."""
        top = max(int(x) for x in re.findall(rb'data-id="(\d+)"', self.get("/feed")[2]) or [b"0"])
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Host": f"127.0.0.1:{self.port}", "Cookie": self.cookie}
        conn.request("GET", f"{self.root}/events?after={top}", headers=headers)
        reply = conn.getresponse()
        word = "feedmark" + uuid.uuid4().hex[:8]
        payload = {"session_id": "bench-ui", "hook_event_name": "UserPromptSubmit", "prompt": word, "cwd": "/tmp"}
        start = time.perf_counter()
        subprocess.run([common.PYTHON, "-I", "-S", common.SEND_PY], input=json.dumps(payload).encode(),
                       env=self.home.env(), capture_output=True, timeout=30, check=True)  # fmt: skip
        try:
            while True:
                line = reply.fp.readline()
                if not line:
                    raise SystemExit("the event stream ended")
                if word.encode() in line:
                    return (time.perf_counter() - start) * 1e3
        finally:
            conn.close()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def pages(store: Path) -> list[str]:
    """The pages a person opens, with a search of each kind and the largest project's context."""
    meta = json.loads((store / "meta.json").read_text())
    largest = meta["largest"]
    words = [q["query"] for q in meta["queries"] if q["kind"].startswith("word")][:2]
    question = next(q["query"] for q in meta["queries"] if q["kind"].startswith("question"))
    from urllib.parse import urlencode

    return [
        "/",
        "/feed",
        "/feed?before=500000",
        "/activity",
        "/sessions",
        "/sessions?" + urlencode({"project": largest}),
        *("/search?" + urlencode({"q": w, "project": "*"}) for w in words),
        "/search?" + urlencode({"q": question, "project": largest}),
        "/o/500000",
        "/context?" + urlencode({"project": largest}),
        "/status",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/nmem-scale-m/obs-1000000"),
                        help="a cached scale store directory (nmem.db and meta.json)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="fetches of each page from each store, alternating")
    parser.add_argument("--feeds", type=int, default=10, help="hook events timed onto the live feed")
    args = parser.parse_args()
    common.print_machine()
    paths = pages(args.store)
    with ExitStack() as stack:
        viewers: dict[str, Viewer] = {}
        for label, source in (("1M", args.store / "nmem.db"), ("empty", None)):
            home = Home()
            stack.callback(home.cleanup)
            if source is not None:
                shutil.copyfile(source, home.db)
            daemon = Daemon(home)
            daemon.start()
            stack.callback(daemon.stop)
            viewers[label] = Viewer(home)
            stack.callback(viewers[label].close)
        for v in viewers.values():  # warm: the first fetch of each page pays for imports and caches
            for path in paths:
                v.get(path)
        times: dict[str, dict[str, list[float]]] = {label: {p: [] for p in paths} for label in viewers}
        for _ in range(args.rounds):
            for path in paths:
                for label, v in viewers.items():
                    times[label][path].append(v.timed(path))
        print(f"{'page':70} {'1M p50':>9} {'empty p50':>10} {'ratio':>6} {'1M max':>8}")
        for path in paths:
            big, small = median(times["1M"][path]), median(times["empty"][path])
            print(f"{path[:70]:70} {big:7.1f}ms {small:8.1f}ms {big / small:5.1f}x {max(times['1M'][path]):6.1f}ms")
        delays: dict[str, list[float]] = {label: [] for label in viewers}
        for _ in range(args.feeds):
            for label, v in viewers.items():
                delays[label].append(v.feed_delay())
        for label, d in delays.items():
            print(f"live feed, {label}: a hook event on the page after p50 {median(d):.0f} ms, max {max(d):.0f} ms")


if __name__ == "__main__":
    main()
