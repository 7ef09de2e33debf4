"""Helpers the Python benchmarks share: free loopback ports, starting the release broker with a
config file and waiting for its ports, stopping it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target/release/skiff"
RAW_LOAD = ROOT / "target/release/examples/raw_load"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(d: Path, config_text: str, ports: list[int], env: dict | None = None,
                 name: str = "broker") -> subprocess.Popen:
    """Starts target/release/skiff with ``config_text`` as its config file and ``d/data`` as its data
    dir; returns once every port in ``ports`` accepts connections (exits with the log when the
    broker dies first; 30 s at most)."""
    config = d / f"{name}.toml"
    config.write_text(config_text)
    log_path = d / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(BINARY), "broker", "--config", str(config), "--data-dir", str(d / f"{name}-data")],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                env={**os.environ, "RUST_LOG": "warn", **(env or {})})
    deadline = time.monotonic() + 30
    for port in ports:
        while True:
            if proc.poll() is not None:
                sys.exit(f"the broker exited ({proc.returncode}):\n{log_path.read_text()[:3000]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after 30 s")
                time.sleep(0.05)
    return proc


def stop_broker(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
