"""The handshake nmem-mcp answers itself (nmemd/mcp/handshake.py says why): the shipped file is the daemon's
server's own answers, and the bridge answers only a well-formed legacy `initialize` and a first-page
`tools/list` with them, at the version the SDK would negotiate, or the 2026-07-28 requests a client sends
before it offers the tools, at a version the daemon serves. The bridge and a real daemon together:
tests/daemon/test_mcp.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nmem_client import bridge
from nmemd.mcp import handshake

CLIENT_INFO = {"name": "codex-mcp-client", "title": "Codex", "version": "0.169.0"}


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _init(version: object = "2025-06-18", rid: object = 0, **params: object) -> bytes:
    body = {"protocolVersion": version, "capabilities": {"elicitation": {}}, "clientInfo": CLIENT_INFO, **params}
    return _line({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": body})


@pytest.fixture(scope="module")
def shipped() -> bridge.Handshake:
    found = bridge.load_handshake()
    assert found is not None, f"{bridge.HANDSHAKE_FILE} is missing or unreadable"
    return found


def test_the_shipped_handshake_is_the_servers_own() -> None:
    """nmem_client/mcp_handshake.json is what `python -m nmemd.mcp.handshake` prints: it cannot drift from
    the server's tools, their schemas and its instructions."""
    with open(bridge.HANDSHAKE_FILE, encoding="utf-8") as f:
        assert f.read() == handshake.render(), "run: python -m nmemd.mcp.handshake > nmem_client/mcp_handshake.json"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_a_known_version_is_answered_as_asked_and_the_daemon_asked_the_same(
    shipped: bridge.Handshake, version: str
) -> None:
    answered = bridge.local_initialize(_init(version, rid=7), shipped)
    assert answered is not None
    reply, own = (json.loads(x) for x in answered)
    assert reply["id"] == 7 and reply["result"]["protocolVersion"] == version
    assert reply["result"]["serverInfo"]["name"] == "nmem" and "search" in reply["result"]["instructions"]
    assert own["id"] == bridge.OWN_INIT_ID and own["method"] == "initialize"
    assert own["params"] == {"protocolVersion": version, "capabilities": {"elicitation": {}}, "clientInfo": CLIENT_INFO}


def test_an_unknown_version_gets_the_latest_and_the_daemon_is_asked_for_that_one(shipped: bridge.Handshake) -> None:
    answered = bridge.local_initialize(_init("2099-01-01", rid="a"), shipped)
    assert answered is not None
    reply, own = (json.loads(x) for x in answered)
    assert reply["id"] == "a" and reply["result"]["protocolVersion"] == shipped.latest == "2025-11-25"
    assert own["params"]["protocolVersion"] == shipped.latest  # both sides of the bridge speak one version


@pytest.mark.parametrize(
    "line",
    [
        b"not json\n",
        b"[1]\n",
        _line({"jsonrpc": "2.0", "method": "initialize", "params": {}}),  # a notification
        _init(rid=True),
        _init(rid=2**63),
        _init(rid=None),
        _init(version=5),
        _init(clientInfo={"name": "x"}),
        _init(capabilities=None),
        _line({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}),  # the 2026-07-28 era
    ],
)
def test_anything_else_is_left_to_the_daemon(shipped: bridge.Handshake, line: bytes) -> None:
    assert bridge.local_initialize(line, shipped) is None


def test_a_first_page_tools_list_is_answered_with_the_six_tools(shipped: bridge.Handshake) -> None:
    reply = bridge.local_tools_list(_line({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}), shipped)
    assert reply is not None
    tools = json.loads(reply)["result"]["tools"]
    assert {t["name"] for t in tools} == {"search", "timeline", "get_observations", "recent_context", "sessions",
                                          "file_history"}  # fmt: skip
    assert all(t["annotations"]["readOnlyHint"] is True for t in tools)
    cursor = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "x"}}
    assert bridge.local_tools_list(_line(cursor), shipped) is None


ENVELOPE = "io.modelcontextprotocol/"
MODERN_META = {f"{ENVELOPE}protocolVersion": "2026-07-28", f"{ENVELOPE}clientInfo": CLIENT_INFO,
               f"{ENVELOPE}clientCapabilities": {}}  # fmt: skip


def _modern(rid: object, method: str, **params: object) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {"_meta": MODERN_META, **params}}


@pytest.mark.parametrize("method", ["server/discover", "prompts/list", "resources/list", "tools/list"])
def test_what_claude_code_asks_before_it_offers_the_tools_is_answered_here(
    shipped: bridge.Handshake, method: str
) -> None:
    """Claude Code 2.1.330 speaks the 2026-07-28 protocol: `server/discover`, then the three lists."""
    reply = bridge.local_modern(_modern("x", method), shipped)
    assert reply is not None
    result = json.loads(reply)["result"]
    assert json.loads(reply)["id"] == "x" and result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "nmem"
    assert bridge.local_modern(_modern("x", method, cursor="p2"), shipped) is None  # a later page: the daemon's
    other = {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    unknown = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": other}}
    assert bridge.local_modern(unknown, shipped) is None  # the daemon refuses it with the versions it serves


def test_a_call_is_never_answered_here(shipped: bridge.Handshake) -> None:
    assert bridge.local_modern(_modern(1, "tools/call", name="search", arguments={"query": "x"}), shipped) is None


def test_a_listen_is_acknowledged_as_the_daemon_would() -> None:
    """mcp's `_honored_subset`: every kind asked for, true flags only, the URIs when there are some."""
    asked = {"toolsListChanged": True, "promptsListChanged": False, "resourcesListChanged": True}
    ack = bridge.local_ack(_modern("listen:0", "subscriptions/listen", notifications=asked))
    assert ack is not None
    assert json.loads(ack) == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": "listen:0"},
            "notifications": {"toolsListChanged": True, "resourcesListChanged": True},
        },
    }
    uris = json.loads(
        bridge.local_ack(_modern(2, "subscriptions/listen", notifications={"resourceSubscriptions": ["a"]})) or ""
    )
    assert uris["params"]["notifications"] == {"resourceSubscriptions": ["a"]}
    assert bridge.local_ack(_modern(3, "subscriptions/listen")) is None  # malformed: the daemon says so
    assert bridge.local_ack(_modern(4, "tools/list")) is None
