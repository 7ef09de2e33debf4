"""Helpers for the cluster-mode tests (test_cluster.py): a throwaway PostgreSQL server, moto's S3
server, a set of Skiff brokers sharing them, and a raw Metadata probe that shows what one broker
believes (live brokers, partition leaders).

Everything is bounded: each subprocess call has a timeout, each wait a deadline. The Rust side
has the same services in crates/skiff-testkit (postgres.rs, s3.rs); this follows it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

import kafka_wire as kw
from skiff_harness import REPO_ROOT, SkiffBroker, free_port

#: Bound on one pg_ctl/initdb/psql call and on waiting for a service to answer.
SERVICE_TIMEOUT_S = 30
#: moto accepts any credentials; these are the ones the tests give the brokers and boto3.
S3_ACCESS_KEY_ID = "testing"
S3_SECRET_ACCESS_KEY = "testing"
S3_REGION = "us-east-1"


def services_required() -> bool:
    """A missing PostgreSQL or moto fails (not skips) under CI or ``SKIFF_REQUIRE_TOOLS=1``
    (what ``./scripts/test`` sets), as in skiff-testkit."""
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() != "false") or os.environ.get("SKIFF_REQUIRE_TOOLS") == "1"


def missing_service(reason: str):
    if services_required():
        pytest.fail(f"{reason}, and this run requires it (CI or SKIFF_REQUIRE_TOOLS=1)", pytrace=False)
    pytest.skip(reason)


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"<no log at {path}>"
    return f"--- last lines of {path} ---\n" + "\n".join(text[-lines:])


# ---------------------------------------------------------------------------------------------
# PostgreSQL

_PG_PROGRAMS = ("initdb", "pg_ctl", "postgres")


def find_postgres_bin() -> Path | None:
    """``/usr/lib/postgresql/15/bin`` (Debian 12), else the highest other version there, else a
    directory on PATH that has initdb, pg_ctl and postgres."""
    def has_all(d: Path) -> bool:
        return all((d / p).is_file() for p in _PG_PROGRAMS)

    env = os.environ.get("SKIFF_POSTGRES_BIN")
    if env:
        return Path(env) if has_all(Path(env)) else None
    candidates = [Path("/usr/lib/postgresql/15/bin")]
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = []
        for entry in root.iterdir():
            try:
                versions.append((tuple(int(x) for x in entry.name.split(".")), entry / "bin"))
            except ValueError:
                continue
        candidates += [b for _, b in sorted(versions, reverse=True)]
    candidates += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return next((d for d in candidates if has_all(d)), None)


def _runuser_prefix() -> list[str]:
    """PostgreSQL refuses to run as root: as root its programs run as ``postgres``."""
    if os.geteuid() != 0:
        return []
    if subprocess.run(["id", "-u", "postgres"], capture_output=True, timeout=10).returncode != 0:
        raise RuntimeError("running as root, PostgreSQL refuses to run as root, and there is no "
                           "`postgres` user to run it as (the postgresql package creates it)")
    runuser = shutil.which("runuser") or next((p for p in ("/usr/sbin/runuser", "/sbin/runuser")
                                               if os.path.isfile(p)), None)
    if runuser is None:
        raise RuntimeError("running as root, and there is no runuser to run PostgreSQL as `postgres`")
    return [runuser, "-u", "postgres", "--"]


#: Prefix of the servers' directories (under /tmp when root); each holds ``owner.pid``.
PG_DIR_PREFIX = "skiff-pg-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_servers(bin_dir: Path) -> None:
    """Stops and removes the servers of earlier runs whose pytest died without its teardown (a
    pytest-timeout expiry ends the process with ``os._exit``, and pg_ctl's server outlives it)."""
    for parent in {Path("/tmp"), Path(tempfile.gettempdir())}:
        for d in parent.glob(PG_DIR_PREFIX + "*"):
            try:
                owner = int((d / "owner.pid").read_text())
            except (OSError, ValueError):
                continue
            if owner == os.getpid() or _alive(owner):
                continue
            if (d / "data" / "postmaster.pid").exists():
                try:
                    subprocess.run([*_runuser_prefix(), str(bin_dir / "pg_ctl"), "stop", "-D", str(d / "data"),
                                    "-m", "immediate", "-w", "-s"], cwd=d, stdin=subprocess.DEVNULL,
                                   capture_output=True, timeout=SERVICE_TIMEOUT_S)
                except (OSError, RuntimeError, subprocess.TimeoutExpired):
                    continue
            shutil.rmtree(d, ignore_errors=True)


class Postgres:
    """A PostgreSQL server of its own: initdb into a directory under /tmp (the postgres user must
    reach it when we are root), listening on 127.0.0.1:``port`` only. ``stop()`` and
    ``start()`` keep the data directory and the port (a restart mid-test); ``close()`` stops it
    (``-m immediate``) and removes the directory."""

    def __init__(self, bin_dir: Path):
        self.bin = Path(bin_dir)
        self.prefix = _runuser_prefix()
        parent = "/tmp" if self.prefix else None
        self.dir = Path(tempfile.mkdtemp(prefix=PG_DIR_PREFIX, dir=parent))
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        if self.prefix:
            shutil.chown(self.dir, user="postgres", group="postgres")
            self.dir.chmod(0o700)
        self.data = self.dir / "data"
        self.log_file = self.dir / "postgres.log"
        self.port = 0
        self.running = False
        self.stops = 0

    # -- process control

    def _run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [*self.prefix, str(self.bin / program), *args]
        # cwd: the postgres user may not reach the test's working directory.
        done = subprocess.run(argv, cwd=self.dir, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=SERVICE_TIMEOUT_S + 10)
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}\n"
                               + _log_tail(self.log_file))
        return done

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                  "--locale=C", "-E", "UTF8")

    def _pg_ctl_start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} "
                   "-c fsync=off -c max_connections=200")
        try:
            self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log_file), "-o", options,
                      "-w", "-t", str(SERVICE_TIMEOUT_S), "-s")
        except (RuntimeError, subprocess.TimeoutExpired):
            # pg_ctl may give up on a server that still comes up later.
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-s", check=False)
            raise
        self.running = True
        deadline = time.monotonic() + SERVICE_TIMEOUT_S
        while True:  # pg_ctl -w waited on the Unix socket; TCP as well
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres does not accept TCP on {self.port}\n{_log_tail(self.log_file)}")
                time.sleep(0.05)

    def start(self) -> None:
        """First start: a free port (another if it was taken meanwhile). Later: the same port."""
        if self.running:
            return
        if self.port:
            self._pg_ctl_start()
            return
        for attempt in range(4):
            self.port = free_port()
            try:
                self._pg_ctl_start()
                return
            except RuntimeError:
                if attempt == 3 or "already in use" not in _log_tail(self.log_file, 200):
                    raise

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (fast: clients disconnected, a clean shutdown; immediate: as a
        crash). The data directory and port stay for ``start()``."""
        if not self.running:
            return
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", str(SERVICE_TIMEOUT_S), "-s")
        self.running = False
        self.stops += 1

    def close(self, keep_log: Path | None = None) -> None:
        try:
            if self.running:
                done = self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-s", check=False)
                if done.returncode != 0:
                    self._kill_postmaster()
                self.running = False
        finally:
            if keep_log is not None and self.log_file.is_file():
                try:
                    shutil.copyfile(self.log_file, keep_log)
                except OSError:
                    pass
            shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_postmaster(self) -> None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass

    # -- databases

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        """Runs ``sql`` with psql (over TCP, trust authentication); returns its unaligned output."""
        psql = shutil.which("psql") or "/usr/bin/psql"
        env = dict(os.environ, PGCONNECT_TIMEOUT="10")
        done = subprocess.run([psql, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db,
                               "-v", "ON_ERROR_STOP=1", "-X", "-A", "-t", "-c", sql],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=SERVICE_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def create_database(self, name: str) -> str:
        assert name.replace("_", "").isalnum() and len(name) <= 63, name
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def open_transactions(self, db: str, application_name: str) -> list[tuple[int, str, bool]]:
        """The sessions of ``application_name`` in database ``db`` that are inside a transaction:
        ``(pid, state, holds a lock on the logs table)``. A commit of cluster mode locks its
        partitions' ``logs`` rows (SELECT ... FOR UPDATE), which shows as a lock on the table."""
        out = self.psql(
            "SELECT a.pid, a.state, EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = a.pid AND l.granted AND c.relname = 'logs') FROM pg_stat_activity a "
            f"WHERE a.datname = current_database() AND a.application_name = '{application_name}' "
            "AND a.xact_start IS NOT NULL", db=db)
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        return [(int(pid), state, locked == "t") for pid, state, locked in rows]

    def lock_waits(self, db: str) -> str:
        """Who waits for a lock in ``db`` and on whom, then the other sessions inside a transaction
        (for failure messages)."""
        try:
            return self.psql(
                "SELECT format('%s pid %s waits %ss on %s (blocked by pids %s): %s', a.application_name, a.pid, "
                "round(extract(epoch FROM clock_timestamp() - a.query_start)::numeric, 1), a.wait_event, "
                "pg_blocking_pids(a.pid), left(regexp_replace(a.query, '\\s+', ' ', 'g'), 80)) "
                "FROM pg_stat_activity a WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' "
                "UNION ALL SELECT format('%s pid %s %s for %ss, last statement: %s', a.application_name, a.pid, "
                "a.state, round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1), "
                "left(regexp_replace(a.query, '\\s+', ' ', 'g'), 80)) FROM pg_stat_activity a "
                "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL "
                "AND a.wait_event_type IS DISTINCT FROM 'Lock'", db=db).strip() or "none"
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            return f"<could not ask PostgreSQL: {exc}>"

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log_file, lines)


def start_postgres() -> Postgres:
    """A running server, or skip (fail under CI) when PostgreSQL is not installed."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        missing_service("PostgreSQL is not installed (no initdb/pg_ctl/postgres in /usr/lib/postgresql/*/bin "
                        "or on PATH; apt-get install postgresql)")
    reap_stale_servers(bin_dir)
    pg = Postgres(bin_dir)
    try:
        pg.init()
        pg.start()
    except BaseException:
        pg.close()
        raise
    return pg


# ---------------------------------------------------------------------------------------------
# S3 (moto's server mode)

def find_moto_server() -> Path | None:
    env = os.environ.get("SKIFF_MOTO_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    for candidate in (REPO_ROOT / ".venv" / "bin" / "moto_server", Path(sys.executable).parent / "moto_server"):
        if candidate.is_file():
            return candidate
    found = shutil.which("moto_server")
    return Path(found) if found else None


def _prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


#: Looked up here, not in the forked child (which must not import or take locks).
_PRCTL = _prctl()


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when pytest dies, even without its teardown (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


class MotoServer:
    """``moto_server -H 127.0.0.1 -p PORT``: state in memory, killed by ``close()``."""

    def __init__(self, program: Path, log_dir: Path):
        self.program = program
        self.log_file = Path(log_dir) / "moto.log"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        for attempt in range(4):
            self.port = free_port()
            with open(self.log_file, "a") as log:
                self.proc = subprocess.Popen([str(self.program), "-H", "127.0.0.1", "-p", str(self.port)],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True, preexec_fn=_die_with_parent)
            if self._wait_ready():
                return
            self.close()
            if attempt == 3 or "already in use" not in _log_tail(self.log_file, 200):
                raise RuntimeError(f"moto_server did not come up\n{_log_tail(self.log_file)}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + SERVICE_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2) as r:
                    if r.headers.get("x-amzn-requestid") is not None:
                        return self.proc.poll() is None
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=S3_REGION,
                            aws_access_key_id=S3_ACCESS_KEY_ID, aws_secret_access_key=S3_SECRET_ACCESS_KEY)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        out: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_moto(log_dir: Path) -> MotoServer:
    program = find_moto_server()
    if program is None:
        missing_service("moto_server is not installed (pip install -r tests/interop/requirements.txt "
                        "into .venv, or set SKIFF_MOTO_SERVER)")
    server = MotoServer(program, log_dir)
    server.start()
    return server


# ---------------------------------------------------------------------------------------------
# What one broker says (Metadata v1 on a raw socket: no client's caching in the way)

def metadata(bootstrap: str, timeout: float = 5.0) -> dict:
    """``{"brokers": {node_id: "host:port"}, "controller": id,
    "topics": {name: {partition: leader}}}`` as ``bootstrap`` answers Metadata v1 (all topics)."""
    with kw.connect(bootstrap, timeout=timeout) as s:
        s.sendall(kw.request(kw.METADATA, 1, 7, struct.pack(">i", -1)))
        cid, data = kw.read_response(s)
    assert cid == 7
    r = kw.Reader(data)
    brokers = dict(r.array(lambda r: (r.take(">i"), f"{r.string()}:{r.take('>i')}", r.string())[:2]))
    controller = r.take(">i")

    def partition(r):
        err, pid, leader = r.take(">hii")
        r.array(lambda r: r.take(">i"))
        r.array(lambda r: r.take(">i"))
        return pid, (leader if err == 0 else -1)

    def topic(r):
        err = r.take(">h")
        name = r.string()
        r.take(">?")
        return name, err, dict(r.array(partition))

    topics = {name: parts for name, err, parts in r.array(topic) if err == 0}
    return {"brokers": brokers, "controller": controller, "topics": topics}


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append((z & 0x7F) | 0x80)
        z >>= 7


def record_batch(values: list[bytes], timestamp_ms: int) -> bytes:
    """A v2 record batch (no compression, not idempotent) of ``values`` without keys."""
    records = b""
    for i, v in enumerate(values):
        body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(v)) + v + _varint(0)
        records += _varint(len(body)) + body
    after_crc = (struct.pack(">hiqqqhii", 0, len(values) - 1, timestamp_ms, timestamp_ms, -1, -1, -1, len(values))
                 + records)
    after_length = struct.pack(">ib", -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def produce_v3(bootstrap: str, topic: str, partition: int, values: list[bytes], acks: int = -1,
               timeout: float = 10.0) -> tuple[int, int]:
    """One Produce v3 request on a raw socket: (error code, base offset)."""
    name = topic.encode()
    batch = record_batch(values, int(time.time() * 1000))
    body = (struct.pack(">hhi", -1, acks, int(timeout * 1000)) + struct.pack(">i", 1) + struct.pack(">h", len(name))
            + name + struct.pack(">i", 1) + struct.pack(">ii", partition, len(batch)) + batch)
    with kw.connect(bootstrap, timeout=timeout) as s:
        s.sendall(kw.request(kw.PRODUCE, 3, 11, body))
        cid, data = kw.read_response(s)
    assert cid == 11
    r = kw.Reader(data)
    assert r.take(">i") == 1
    r.string()
    assert r.take(">i") == 1
    _, error, base = r.take(">ihq")
    return error, base


def fetch_v4(bootstrap: str, topic: str, partition: int, offset: int = 0, timeout: float = 10.0) -> tuple[int, bytes]:
    """One Fetch v4 request on a raw socket: (error code, record set)."""
    with kw.connect(bootstrap, timeout=timeout) as s:
        s.sendall(kw.request(kw.FETCH, 4, 12, kw.fetch_v4_body(topic, partition, offset, 1 << 20, 1 << 20)))
        cid, data = kw.read_response(s)
    assert cid == 12
    return kw.fetch_v4_partition(data)


NOT_LEADER_OR_FOLLOWER = 6


# ---------------------------------------------------------------------------------------------
# A cluster of brokers

class Cluster:
    """N Skiff brokers (node.id 1..N), each with its own port, admin port and data dir, on one
    PostgreSQL database and one object store. Brokers are made by the ``make_broker`` fixture, so
    they are stopped at teardown and their stderr lands in a failing test's report. Each gets a
    TOML config file (``--config``) holding the cluster keys.

    ``brokers[i]`` is node ``i + 1``. ``pause``/``resume`` (SIGSTOP/SIGCONT), ``kill`` (SIGKILL),
    ``stop`` (SIGTERM) and ``start`` address a broker by node ID.
    """

    def __init__(self, make_broker, config_dir: Path, metadata_url: str, objects_url: str, n: int,
                 extra: dict[str, object] | None = None, env: dict[str, str] | None = None):
        self.config_dir = Path(config_dir)
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.keys: dict[str, object] = {
            "cluster.metadata": metadata_url,
            "cluster.objects": objects_url,
            "produce.commit.interval.ms": 20,
            "cluster.lease.ms": 3000,
            "auto.create.topics.enable": False,
            **(extra or {}),
        }
        self.brokers: list[SkiffBroker] = []
        # RUST_LOG left to the environment; info shows registration and fencing.
        env = {"RUST_LOG": os.environ.get("RUST_LOG", "info"), **(env or {})}
        for node in range(1, n + 1):
            cfg = self.config_dir / f"node-{node}.toml"
            # Each broker's PostgreSQL sessions carry its name (pg_stat_activity.application_name).
            url = f"{metadata_url}{'&' if '?' in metadata_url else '?'}application_name={self.app_name(node)}"
            keys = {**self.keys, "cluster.metadata": url, "node.id": node}
            cfg.write_text("".join(f'"{k}" = {_toml(v)}\n' for k, v in keys.items()))
            self.brokers.append(make_broker("--config", str(cfg), env=env, start=False))
        for b in self.brokers:
            b.start()

    @staticmethod
    def app_name(node: int) -> str:
        """The ``application_name`` of node ``node``'s PostgreSQL sessions."""
        return f"skiff-node-{node}"

    @property
    def lease_s(self) -> float:
        return int(self.keys["cluster.lease.ms"]) / 1000

    def broker(self, node: int) -> SkiffBroker:
        return self.brokers[node - 1]

    def bootstrap(self, *nodes: int) -> str:
        nodes = nodes or tuple(range(1, len(self.brokers) + 1))
        return ",".join(self.broker(n).bootstrap for n in nodes)

    # -- signals

    def pause(self, node: int) -> None:
        self.broker(node).proc.send_signal(signal.SIGSTOP)

    def resume(self, node: int) -> None:
        self.broker(node).proc.send_signal(signal.SIGCONT)

    def kill(self, node: int) -> None:
        self.broker(node).kill()

    def stop(self, node: int) -> None:
        self.broker(node).stop()

    def start(self, node: int) -> None:
        self.broker(node).start()

    def resume_all(self) -> None:
        """Teardown: a SIGSTOPped broker cannot act on SIGTERM."""
        for b in self.brokers:
            if b.running:
                try:
                    b.proc.send_signal(signal.SIGCONT)
                except ProcessLookupError:
                    pass

    # -- views

    def wait_view(self, nodes: set[int], via: list[int] | None = None, timeout: float = 20.0,
                  topic: str | None = None, partitions: int | None = None) -> dict[int, dict]:
        """Until each broker in ``via`` (default: every one in ``nodes``) lists exactly ``nodes``
        as live brokers (and, with ``topic``, has all its ``partitions`` with a leader among
        ``nodes``, the same leader on every broker asked). Returns the views."""
        via = sorted(via or nodes)
        deadline = time.monotonic() + timeout
        last: dict[int, object] = {}
        while True:
            views: dict[int, dict] = {}
            for node in via:
                try:
                    views[node] = metadata(self.broker(node).bootstrap, timeout=2)
                    last[node] = views[node]
                except (OSError, EOFError, AssertionError, struct.error) as exc:
                    last[node] = repr(exc)
            if len(views) == len(via) and all(set(v["brokers"]) == nodes for v in views.values()):
                if topic is None:
                    return views
                leaders = [v["topics"].get(topic, {}) for v in views.values()]
                if all(len(ls) == partitions and set(ls.values()) <= nodes for ls in leaders) \
                        and all(ls == leaders[0] for ls in leaders):
                    return views
            if time.monotonic() > deadline:
                raise AssertionError(f"brokers {via} did not agree on live brokers {sorted(nodes)}"
                                     f"{f' and the leaders of {topic}' if topic else ''} within {timeout:.0f}s; "
                                     f"last views: {last}")
            time.sleep(0.1)

    def leaders(self, topic: str, via: int) -> dict[int, int]:
        return metadata(self.broker(via).bootstrap)["topics"].get(topic, {})


def _toml(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'
