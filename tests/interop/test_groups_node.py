"""@platformatic/kafka 1.35.0 (Node 20, ``groupProtocol: 'consumer'``, hyphenated UUID member IDs)
and confluent-kafka (librdkafka, base64 member IDs) in the same KIP-848 group on Skiff.

``node/kip848_member.mjs`` is one member; it reports its member ID, assignment and records as JSON
lines and leaves the group when told to. The two members split 6 partitions 3/3, the Node member
leaves, the confluent member takes over all 6, and every record is consumed exactly once.

Needs ``node`` and ``tests/interop/node/node_modules`` (``npm ci`` there; ``.ci/run`` does it).
Skipped when either is missing, except in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from groups_util import (PARTS, ConsumerGroupType, describe, group_broker, members_summary, name, produce_values,
                         wait_group, wait_until)
from test_groups_confluent import Member, poll_all

pytestmark = pytest.mark.timeout(90)

NODE_DIR = Path(__file__).resolve().parent / "node"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    why = None
    if path is None:
        why = "node not on PATH"
    elif not (NODE_DIR / "node_modules" / "@platformatic" / "kafka").is_dir():
        why = f"@platformatic/kafka not installed (cd {NODE_DIR} && npm ci)"
    if why:
        if os.environ.get("CI") or os.environ.get("SKIFF_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{why} (./scripts/test installs it)")
        pytest.skip(why)
    return path


class NodeMember:
    """``node kip848_member.mjs`` as a subprocess; its JSON-line events collected by a thread."""

    def __init__(self, node: str, bootstrap: str, group: str, topic: str, client_id: str, max_s: int = 60):
        self.name = client_id
        self.events: list[dict] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen([node, "kip848_member.mjs", bootstrap, group, topic, client_id, str(max_s)],
                                     cwd=NODE_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                self.stderr.append(f"(stdout) {line}")

    def _last(self, kind: str):
        evs = [e for e in list(self.events) if e["event"] == kind]
        return evs[-1] if evs else None

    def member_id(self) -> str | None:
        e = self._last("joined")
        return e and e["memberId"]

    def parts(self) -> list[int]:
        if self.proc.poll() is not None and self._last("closed") is None:
            raise AssertionError(f"node member exited {self.proc.returncode}: {''.join(self.stderr)[-3000:]}")
        e = self._last("assignment")
        return e["partitions"] if e else []

    @property
    def got(self) -> list[tuple[int, int, bytes]]:
        return [(e["partition"], e["offset"], e["value"].encode()) for e in list(self.events)
                if e["event"] == "message"]

    def values(self) -> list[bytes]:
        return [v for _p, _o, v in self.got]

    def close(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError(f"node member did not stop within {timeout:.0f}s") from None
        assert self.proc.returncode == 0, f"node member exited {self.proc.returncode}: {''.join(self.stderr)[-3000:]}"


def test_node_and_confluent_share_a_kip848_group(node, group_target):
    b = group_target
    topic, group = name("gnode-t"), name("gnode")
    produced = produce_values(b.bootstrap, topic, "a", 10)
    nm = NodeMember(node, b.bootstrap, group, topic, "node1")
    cm = None
    try:
        wait_until(lambda: nm.parts() == list(range(PARTS)) and set(nm.values()) >= set(produced), 30,
                   "the node member owning all 6 partitions and consuming batch a")
        cm = Member(b.bootstrap, group, topic, "ck1")
        step = poll_all(cm)
        wait_until(lambda: len(nm.parts()) == 3 and len(cm.parts()) == 3
                   and sorted(nm.parts() + cm.parts()) == list(range(PARTS)),
                   30, "a 3/3 split between the node and the confluent member", step=step)
        # @platformatic/kafka 1.35.0 still delivers what a Fetch that was in flight when it gave up
        # a partition returns (seen: records of a revoked partition produced after the revocation,
        # consumed by both members). Its long polls last maxWaitTime (200 ms): let them run out.
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            step()
        produced += produce_values(b.bootstrap, topic, "b", 10)
        wait_until(lambda: set(nm.values() + cm.values()) >= set(produced), 30, "every record of a+b", step=step)

        d = wait_group(b.bootstrap, group, 2, step=step)
        assert d.type == ConsumerGroupType.CONSUMER
        nid, cid = nm.member_id(), cm.c.memberid()
        assert nid and UUID_RE.match(nid), f"node member ID {nid!r} is not a hyphenated UUID"
        assert members_summary(d) == {nid: nm.parts(), cid: cm.parts()}, members_summary(d)
        assert {m.member_id: m.client_id for m in d.members} == {nid: "node1", cid: "ck1"}

        nm.close()
        wait_until(lambda: cm.parts() == list(range(PARTS)), 30, "the confluent member taking over all 6", step=step)
        produced += produce_values(b.bootstrap, topic, "c", 10)
        wait_until(lambda: set(nm.values() + cm.values()) >= set(produced), 30, "every record of a+b+c", step=step)
        for _ in range(10):
            cm.poll(0.1)
        both = nm.values() + cm.values()
        dups = sorted({v for v in both if both.count(v) > 1})
        assert not dups, (
            f"{len(dups)} records consumed twice: {dups[:10]}\n"
            f"node got them at {[(e['partition'], e['offset'], e['t']) for e in nm.events if e.get('value', '').encode() in dups][:10]}\n"
            f"confluent got them at {[(p, o) for p, o, v in cm.got if v in dups][:10]}\n"
            f"node events: {[e for e in nm.events if e['event'] != 'message']}\nconfluent events {cm.events}")
        assert sorted(both) == sorted(produced)
        assert members_summary(describe(b.bootstrap, group)) == {cid: list(range(PARTS))}
    finally:
        if cm is not None:
            cm.close()
        if nm.proc.poll() is None:
            nm.proc.kill()
            nm.proc.wait(5)
