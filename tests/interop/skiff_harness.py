"""Process/port helpers for the Skiff interop suite (imported by conftest.py and tests).

Nothing here builds anything: the broker binary must already exist
(``./scripts/test`` builds it with cargo before running pytest).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Seconds to wait for the broker to accept a TCP connection after spawning it.
START_TIMEOUT_S = float(os.environ.get("SKIFF_START_TIMEOUT", "20"))
#: Seconds to wait for a graceful (SIGTERM) shutdown before escalating to SIGKILL.
STOP_TIMEOUT_S = float(os.environ.get("SKIFF_STOP_TIMEOUT", "10"))


def skiff_bin() -> Path:
    """Broker binary: ``$SKIFF_BIN`` or ``<target dir>/debug/skiff``."""
    env = os.environ.get("SKIFF_BIN")
    if env:
        return Path(env).resolve()
    return target_dir() / "debug" / "skiff"


def target_dir() -> Path:
    """Cargo's target directory: ``$CARGO_TARGET_DIR`` (relative to the repository) or ``target``."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    return target if target.is_absolute() else REPO_ROOT / target


def broker_required() -> bool:
    """``SKIFF_REQUIRE_BROKER=1`` turns a missing binary into a failure, not a skip."""
    return os.environ.get("SKIFF_REQUIRE_BROKER", "").strip().lower() in {"1", "true", "yes"}


def require_tool(*names: str, package: str) -> str:
    """The path of the first of ``names`` on PATH.

    ``./scripts/test`` installs every tool the suite uses and sets ``SKIFF_REQUIRE_TOOLS=1`` (as
    does CI), so there a missing tool fails the test; a bare ``pytest`` run skips it instead.
    """
    import shutil

    import pytest

    for name in names:
        path = shutil.which(name)
        if path:
            return path
    required = os.environ.get("SKIFF_REQUIRE_TOOLS") == "1" or bool(os.environ.get("CI"))
    message = f"{names[0]} is not installed (Debian package {package}; ./scripts/test installs it)"
    if required:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def rss_kb(pid: int) -> int:
    """A process's resident set (VmRSS in /proc/PID/status), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def settled_rss_kb(pid: int, timeout_s: float = 4.0) -> int:
    """The resident set once it stops moving (two readings 0.2 s apart within 64 KiB), bounded."""
    last = rss_kb(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = rss_kb(pid)
        if abs(now - last) < 64:
            return now
        last = now
    return last


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a free loopback port (bind to 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_tcp(host: str, port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Poll until ``host:port`` accepts a TCP connection.

    Raises ``RuntimeError`` if ``proc`` exits first and ``TimeoutError`` after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before {host}:{port} accepted connections")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{host}:{port} did not accept a TCP connection within {timeout_s:.0f}s")
        time.sleep(0.05)


class SkiffBroker:
    """One Skiff broker subprocess bound to a fixed loopback port and data dir.

    ``restart()`` keeps the port and the data dir, so tests can check durability.
    stdout and stderr of every incarnation are appended to ``log_dir``.
    """

    host = "127.0.0.1"

    def __init__(self, binary: Path, data_dir: Path, log_dir: Path, port: int | None = None,
                 extra_args: list[str] | None = None, env: dict[str, str] | None = None):
        self.binary = Path(binary)
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.port = port if port is not None else free_port(self.host)
        #: The admin HTTP listener's port (kept across restarts, like the Kafka port).
        self.admin_port = free_port(self.host)
        if extra_args is None:
            extra_args = shlex.split(os.environ.get("SKIFF_BROKER_ARGS", ""))
        self.extra_args = list(extra_args)
        #: Extra environment for the broker process (e.g. ``{"RUST_LOG": "debug"}``).
        self.env = dict(env or {})
        self.stderr_path = self.log_dir / "broker.stderr.log"
        self.stdout_path = self.log_dir / "broker.stdout.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    @property
    def argv(self) -> list[str]:
        return [str(self.binary), "broker", "--listen", self.bootstrap,
                "--data-dir", str(self.data_dir),
                "--set", f"admin.listen={self.host}:{self.admin_port}", *self.extra_args]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        if self.running:
            raise RuntimeError("broker already running")
        self.starts += 1
        banner = f"\n===== start #{self.starts}: {shlex.join(self.argv)}\n"
        with open(self.stderr_path, "a") as err, open(self.stdout_path, "a") as out:
            err.write(banner)
            out.write(banner)
            err.flush()
            out.flush()
            env = dict(os.environ)
            env.setdefault("RUST_BACKTRACE", "1")
            env.update(self.env)
            # The broker gets its own session so a Ctrl-C aimed at pytest does not race teardown.
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         env=env, start_new_session=True)
        try:
            wait_for_tcp(self.host, self.port, timeout_s, self.proc)
        except (RuntimeError, TimeoutError) as exc:
            self.kill()
            raise RuntimeError(f"skiff broker did not come up: {exc}\n--- stderr ---\n{self.stderr_text()}") from exc

    def _signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with open(self.stderr_path, "a") as err:
                err.write(f"\n===== harness: no exit {timeout_s:.0f}s after SIGTERM, sending SIGKILL\n")
            self.proc.kill()
            self.proc.wait(timeout=timeout_s)
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL (simulated crash). Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        return self.proc.returncode

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Graceful stop (SIGTERM), then start again on the same port and data dir."""
        self.stop()
        self.start(timeout_s)

    def stderr_text(self, limit: int = 64 * 1024) -> str:
        try:
            data = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return "<no stderr captured>"
        return data if len(data) <= limit else "...<truncated>...\n" + data[-limit:]


def mock_cluster_bootstrap(client) -> str:
    """Bootstrap address of the librdkafka mock cluster owned by ``client``.

    A confluent-kafka client created with ``test.mock.num.brokers`` starts an
    in-process mock cluster and silently replaces ``bootstrap.servers`` with
    it. The Python binding has no mock-cluster API, but the mock brokers
    appear in metadata, so read them from there. The cluster lives as long as
    ``client`` does; other clients (any library) can connect to it meanwhile.
    """
    md = client.list_topics(timeout=10)
    if not md.brokers:
        raise RuntimeError("mock cluster reported no brokers")
    return ",".join(f"{b.host}:{b.port}" for _, b in sorted(md.brokers.items()))
