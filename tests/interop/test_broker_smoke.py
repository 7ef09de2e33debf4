"""Protocol-agnostic checks of the real Skiff binary (skip while it does not exist).

Kafka-level interop tests against Skiff belong next to this file and take the
`broker` fixture; see README.md.
"""

from __future__ import annotations

import socket


def _connects(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def test_broker_starts_restarts_and_dies(broker):
    assert _connects(broker.bootstrap)
    broker.restart()  # SIGTERM, same port and data dir
    assert _connects(broker.bootstrap)
    broker.kill()
    assert not _connects(broker.bootstrap)
    broker.start()  # recovers from a crash on the same data dir
    assert _connects(broker.bootstrap)
