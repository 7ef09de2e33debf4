"""Fixtures and hooks shared by the interop suite (tests/interop) and the robustness suite
(tests/robustness): each suite's conftest.py imports them. See tests/interop/README.md."""

from __future__ import annotations

import atexit
import os
import shlex

import pytest
from confluent_kafka import Producer

from skiff_harness import SkiffBroker, broker_required, free_port, mock_cluster_bootstrap, skiff_bin

_LIVE: list[SkiffBroker] = []


@atexit.register
def _kill_leftovers() -> None:  # belt and braces: never leave a broker behind
    for b in _LIVE:
        b.kill()


def _missing_reason() -> str:
    return (f"Skiff broker binary not found at {skiff_bin()} "
            "(build it with `cargo build -p skiff`, or set SKIFF_BIN)")


# Module-level guard: with SKIFF_REQUIRE_BROKER=1 a missing binary aborts the whole
# run at start-up instead of quietly turning every broker test into a skip.
def pytest_sessionstart(session: pytest.Session) -> None:
    if broker_required() and not skiff_bin().is_file():
        raise pytest.UsageError(f"SKIFF_REQUIRE_BROKER=1 but {_missing_reason()}")


def pytest_report_header(config: pytest.Config) -> str:
    b = skiff_bin()
    state = "found" if b.is_file() else "MISSING (broker tests will skip)"
    if broker_required():
        state += ", SKIFF_REQUIRE_BROKER=1"
    return f"skiff broker binary: {b} [{state}]"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Attach the broker's stderr to the report of any failing test that used it."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        funcargs = getattr(item, "funcargs", {})
        brokers = [funcargs.get("broker")] + list(getattr(funcargs.get("make_broker"), "brokers", []))
        for b in brokers:
            if isinstance(b, SkiffBroker):
                rep.sections.append((f"skiff broker stderr ({b.stderr_path})", b.stderr_text()))


def _require_binary():
    binary = skiff_bin()
    if not binary.is_file():
        if broker_required():
            pytest.fail(f"SKIFF_REQUIRE_BROKER=1 but {_missing_reason()}", pytrace=False)
        pytest.skip(_missing_reason())
    return binary


def _start(b: SkiffBroker) -> None:
    try:
        b.start()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def broker(tmp_path) -> SkiffBroker:
    """A running Skiff broker on a free loopback port with a fresh data dir.

    Yields a SkiffBroker with ``.bootstrap`` ("127.0.0.1:PORT"), ``.data_dir``,
    ``.restart()`` (SIGTERM, then start again on the same port/dir), ``.kill()``
    (SIGKILL) and ``.start()``. Always stopped at teardown.
    """
    binary = _require_binary()
    b = SkiffBroker(binary, data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=free_port())
    _LIVE.append(b)
    try:
        _start(b)
        yield b
    finally:
        b.stop()
        _LIVE.remove(b)


@pytest.fixture
def make_broker(tmp_path):
    """Factory for brokers with extra arguments and environment.

    ``make_broker("--set", "num.partitions=3", env={"RUST_LOG": "debug"})`` starts a broker
    (own port, data dir ``<tmp>/bN/data``) and returns its SkiffBroker; pass ``start=False``
    to get it unstarted. ``$SKIFF_BROKER_ARGS`` is appended after ``args``. Every broker made
    is stopped at teardown, and its stderr is attached to the report of a failing test.
    """
    binary = _require_binary()
    made: list[SkiffBroker] = []

    def make(*args: str, env: dict[str, str] | None = None, start: bool = True) -> SkiffBroker:
        d = tmp_path / f"b{len(made)}"
        extra = [*args, *shlex.split(os.environ.get("SKIFF_BROKER_ARGS", ""))]
        b = SkiffBroker(binary, data_dir=d / "data", log_dir=d / "logs", port=free_port(),
                        extra_args=extra, env=env)
        made.append(b)
        _LIVE.append(b)
        if start:
            _start(b)
        return b

    make.brokers = made  # type: ignore[attr-defined]
    try:
        yield make
    finally:
        for b in made:
            b.stop()
            _LIVE.remove(b)


@pytest.fixture(scope="module")
def mock_cluster():
    """Bootstrap address of a 1-broker librdkafka mock cluster, alive for the module."""
    owner = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    try:
        yield mock_cluster_bootstrap(owner)
    finally:
        owner.flush(5)
        del owner
