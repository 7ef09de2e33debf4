"""Tests of the broker fixture's process handling, using a fake `skiff` binary.

The fake is a tiny Python program with the same command line as the real
broker (`skiff broker --listen HOST:PORT --data-dir DIR`) that accepts TCP
connections, so restart/kill/teardown logic is covered before Skiff exists.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import textwrap
import time

import pytest

from skiff_harness import SkiffBroker, free_port, wait_for_tcp

FAKE = textwrap.dedent("""\
    import argparse, os, signal, socket, sys, time
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--listen", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--fail", action="store_true")
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    assert a.cmd == "broker", a.cmd
    if a.fail:
        print("fake broker: refusing to start", file=sys.stderr)
        sys.exit(3)
    os.makedirs(a.data_dir, exist_ok=True)
    with open(os.path.join(a.data_dir, "starts"), "a") as f:
        f.write("x")
    host, port = a.listen.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen()
    print(f"fake broker listening on {a.listen}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if a.ignore_term else (lambda *_: sys.exit(0)))
    s.settimeout(0.2)
    deadline = time.monotonic() + 120  # bounded even if nobody stops it
    while time.monotonic() < deadline:
        try:
            s.accept()[0].close()
        except socket.timeout:
            pass
""")


@pytest.fixture
def fake_bin(tmp_path):
    p = tmp_path / "fake-skiff"
    p.write_text(f"#!{sys.executable}\n" + FAKE)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _connects(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_wait_for_tcp_times_out():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        wait_for_tcp("127.0.0.1", free_port(), timeout_s=0.5)
    assert time.monotonic() - t0 < 5


def test_lifecycle(fake_bin, tmp_path):
    b = SkiffBroker(fake_bin, tmp_path / "data", tmp_path / "logs", extra_args=[])
    try:
        b.start()
        assert b.bootstrap == f"127.0.0.1:{b.port}"
        assert _connects(b.bootstrap)
        port = b.port
        b.restart()
        assert b.port == port and _connects(b.bootstrap)
        assert (b.data_dir / "starts").read_text() == "xx"
        assert b.kill() == -signal.SIGKILL
        assert not _connects(b.bootstrap)
        b.start()
        assert _connects(b.bootstrap)
        assert b.stop() == 0
        assert "fake broker listening" in b.stderr_text()
        assert b.stderr_text().count("===== start #") == 3
    finally:
        b.kill()


def test_stop_escalates_to_sigkill(fake_bin, tmp_path):
    b = SkiffBroker(fake_bin, tmp_path / "data", tmp_path / "logs", extra_args=["--ignore-term"])
    b.start()
    assert b.stop(timeout_s=1) == -signal.SIGKILL
    assert "sending SIGKILL" in b.stderr_text()


def test_start_failure_reports_stderr(fake_bin, tmp_path):
    b = SkiffBroker(fake_bin, tmp_path / "data", tmp_path / "logs", extra_args=["--fail"])
    with pytest.raises(RuntimeError, match="refusing to start"):
        b.start(timeout_s=5)
    assert not b.running


def test_broker_fixture_with_fake_binary(fake_bin, monkeypatch, request):
    monkeypatch.setenv("SKIFF_BIN", str(fake_bin))
    monkeypatch.delenv("SKIFF_BROKER_ARGS", raising=False)
    b = request.getfixturevalue("broker")
    assert b.running and _connects(b.bootstrap)
    assert b.data_dir.is_dir()
    b.restart()
    assert _connects(b.bootstrap)


def test_missing_binary_skips_or_fails(tmp_path, monkeypatch):
    # Checked through the helper rather than the fixture so this test never skips itself.
    from skiff_harness import broker_required, skiff_bin

    monkeypatch.setenv("SKIFF_BIN", str(tmp_path / "nope"))
    assert not skiff_bin().is_file()
    monkeypatch.setenv("SKIFF_REQUIRE_BROKER", "1")
    assert broker_required()
    monkeypatch.setenv("SKIFF_REQUIRE_BROKER", "0")
    assert not broker_required()
