"""kcat (Debian 12: kcat 1.7.1 on librdkafka 2.0.2) against a real Skiff broker.

``./scripts/test`` installs kcat; a bare ``pytest`` run without it skips these tests.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from skiff_harness import require_tool

TIMEOUT_S = 20
N = 50
pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def kcat() -> str:
    return require_tool("kcat", package="kcat")


@pytest.fixture
def b3(make_broker):
    return make_broker("--set", "num.partitions=3")


def run(kcat: str, bootstrap: str, *args: str, input: str | None = None) -> str:
    p = subprocess.run([kcat, "-b", bootstrap, "-X", "socket.timeout.ms=10000", *args], input=input,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert p.returncode == 0, f"kcat {' '.join(args)} exited {p.returncode}\nstderr:\n{p.stderr}"
    return p.stdout


def test_kcat_list_metadata(kcat, b3):
    topic = f"kcat-L-{uuid.uuid4().hex[:8]}"
    run(kcat, b3.bootstrap, "-P", "-t", topic, "-p", "0", input="x\n")
    out = run(kcat, b3.bootstrap, "-L")
    assert f"broker 1 at 127.0.0.1:{b3.port}" in out, out
    assert f'topic "{topic}" with 3 partitions' in out, out
    one = run(kcat, b3.bootstrap, "-L", "-t", topic, "-J")
    import json

    md = json.loads(one)
    (t,) = md["topics"]
    assert t["topic"] == topic and sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kcat_keyed_roundtrip(kcat, b3, acks):
    topic = f"kcat-{acks}-{uuid.uuid4().hex[:8]}"
    lines = [f"key-{i % 5}:value {i} with spaces" for i in range(N)]
    run(kcat, b3.bootstrap, "-P", "-t", topic, "-K:", "-X", f"acks={acks}", input="\n".join(lines) + "\n")
    # All partitions; per key the order must be kept (the partitioner hashes keys).
    out = run(kcat, b3.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%p|%o|%k|%s\n")
    rows = [r.split("|", 3) for r in out.splitlines()]
    assert len(rows) == N, out
    assert sorted(f"{k}:{v}" for _p, _o, k, v in rows) == sorted(lines)
    for key in {ln.split(":", 1)[0] for ln in lines}:
        mine = [v for _p, _o, k, v in rows if k == key]
        assert mine == [ln.split(":", 1)[1] for ln in lines if ln.startswith(key + ":")], key
        assert len({p for p, _o, k, _v in rows if k == key}) == 1, f"key {key} spread over partitions"
    per_part: dict[str, list[int]] = {}
    for p, o, _k, _v in rows:
        per_part.setdefault(p, []).append(int(o))
    for p, offs in per_part.items():
        assert offs == list(range(len(offs))), f"partition {p} offsets {offs}"


def test_kcat_single_partition_order(kcat, b3):
    topic = f"kcat-p0-{uuid.uuid4().hex[:8]}"
    lines = [f"k{i}:v{i}" for i in range(N)]
    run(kcat, b3.bootstrap, "-P", "-t", topic, "-p", "1", "-K:", "-X", "acks=all", "-z", "lz4",
        input="\n".join(lines) + "\n")
    out = run(kcat, b3.bootstrap, "-C", "-t", topic, "-p", "1", "-o", "beginning", "-e", "-q", "-K:")
    assert out.splitlines() == lines
