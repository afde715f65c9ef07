"""The systemd units and the launchd plist nmem renders, in process: the absolute path of nmemd, the
hardening a user unit allows, quoting, and the templates in the repository (socket activation and
systemd's own checks: tests/daemon/test_service.py)."""

from __future__ import annotations

import os
import plistlib
import sys
from pathlib import Path

import pytest

from nmemd.daemon import instance
from nmemd.setup import service

REPO = Path(__file__).resolve().parents[2]
NMEMD = str(Path(sys.executable).parent / "nmemd")


def test_rendered_units_use_the_absolute_path_and_match_the_templates() -> None:
    units = service.render_systemd(NMEMD)
    assert set(units) == {"nmemd.socket", "nmemd.service"}
    svc, sock = units["nmemd.service"], units["nmemd.socket"]
    assert f"\nExecStart={NMEMD} --started-by systemd --socket %t/nmem/nmemd.sock\n" in svc
    assert os.path.isabs(NMEMD)
    for line in ("Type=notify", "Restart=on-failure", "RestartPreventExitStatus=4", "UMask=0077"):
        assert f"\n{line}\n" in svc
    for option in ("ProtectSystem", "ProtectHome", "PrivateTmp"):  # not available in user units
        assert option not in svc
    for line in ("ListenStream=%t/nmem/nmemd.sock", "SocketMode=0600", "DirectoryMode=0700"):
        assert f"\n{line}\n" in sock
    for name, text in service.render_systemd("@NMEMD@").items():
        assert (REPO / "systemd" / name).read_text() == text


def test_exec_path_with_spaces_and_specifiers_is_quoted() -> None:
    svc = service.render_systemd("/home/a b/100%/$x/nmemd")["nmemd.service"]
    assert '\nExecStart="/home/a b/100%%/$$x/nmemd" --started-by systemd' in svc


def test_launchd_plist_parses_with_the_expected_keys() -> None:
    text = service.render_launchd("/Users/a/.local/bin/nmemd", "/Users/a/.local/share/nmem/run/nmemd.sock",
                                  "/Users/a/Library/Logs/nmem")  # fmt: skip
    plist = plistlib.loads(text.encode())
    assert plist["Label"] == "dev.nmem.nmemd"
    assert plist["ProgramArguments"][0] == "/Users/a/.local/bin/nmemd"
    assert plist["ProgramArguments"][1:] == ["--started-by", "launchd", "--socket",
                                             "/Users/a/.local/share/nmem/run/nmemd.sock"]  # fmt: skip
    listener = plist["Sockets"]["Listener"]
    assert listener == {"SockPathName": "/Users/a/.local/share/nmem/run/nmemd.sock", "SockPathMode": 384,
                        "SockType": "stream"}  # fmt: skip
    assert plist["ProcessType"] == "Background"
    assert plist["Umask"] == 63
    assert plist["StandardErrorPath"].startswith("/Users/a/Library/Logs/nmem/")
    assert "KeepAlive" not in plist  # demand starts it; socket activation restarts it after a crash
    template = (REPO / "launchd" / "dev.nmem.nmemd.plist").read_text()
    assert template == service.render_launchd("@NMEMD@", "@SOCKET@", "@LOG_DIR@")


def test_launchd_listener_fd_is_none_off_macos() -> None:
    if sys.platform == "darwin":
        pytest.skip("on macOS outside launchd this returns None too, but through the real call")
    assert instance.launchd_listener_fd() is None  # moved beside systemd's inherited_socket
