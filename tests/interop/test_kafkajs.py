"""kafkajs 2.2.4 (the most used Node.js client) admin calls against Skiff: ``admin.alterConfigs``
speaks the legacy AlterConfigs API (key 33), which replaces a topic's whole set of overrides, and
``describeConfigs`` reads them back. ``node/kafkajs_configs.mjs`` does the calls and prints JSON
lines.

Needs ``node`` and ``tests/interop/node/node_modules`` (``npm ci`` there; ``.ci/run`` does it).
Skipped when either is missing, except in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from groups_util import name

pytestmark = pytest.mark.timeout(60)

NODE_DIR = Path(__file__).resolve().parent / "node"


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    why = None
    if path is None:
        why = "node not on PATH"
    elif not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        why = f"kafkajs not installed (cd {NODE_DIR} && npm ci)"
    if why:
        if os.environ.get("CI") or os.environ.get("SKIFF_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{why} (./scripts/test installs it)")
        pytest.skip(why)
    return path


def test_kafkajs_alter_configs_replaces_and_describe_configs_reads(node, make_broker):
    b = make_broker()
    topic = name("kjs")
    run = subprocess.run([node, "kafkajs_configs.mjs", b.bootstrap, topic], cwd=NODE_DIR,
                         capture_output=True, text=True, timeout=45)
    events = {}
    for line in run.stdout.splitlines():
        e = json.loads(line)
        events[e["event"]] = e
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    created = events["created"]["configs"]
    assert created["retention.ms"] == {"value": "60000", "isDefault": False}
    altered = events["altered"]["configs"]
    # The legacy API replaces the whole set: retention.ms was not given, so it is the default.
    assert altered["cleanup.policy"] == {"value": "compact", "isDefault": False}
    assert altered["max.message.bytes"] == {"value": "200000", "isDefault": False}
    assert altered["retention.ms"]["isDefault"] is True
    assert events["bad"]["error"] == "INVALID_CONFIG", events["bad"]
    assert events["after_bad"]["configs"] == altered, "a refused change changes nothing"
