"""The broker's client-instance page (``GET /ui/clients``, ``/ui/clients/{id}`` on the admin
listener) in a real browser: Debian's headless Chromium, which runs the page's script (it reads the
JSON endpoints) within a virtual-time budget and dumps the DOM it built.

A ``skiff consume --group`` process (whose skiff-client sends its KIP-1313 instance ID in every
request header, and pushes telemetry every 500 ms under a subscription made here) keeps a
connection and a group membership open, and a librdkafka producer whose client ID is markup is
connected too. The list must show both, the hostile client ID as text only; a search by group finds
the consumer alone; the consumer's page must show its connections, its membership with each
partition's offsets and lag, its telemetry as inline SVG charts and its journal. Screenshots (the
list, the instance, the instance at a phone's width; copied to ``target/test-artefacts/ui/`` under
the cargo target directory, where CI keeps them) must be real
renderings (PNGs over 5 KB that are not a single colour — decoded here with ``zlib``/``struct``, no
imaging library).

``./scripts/test`` installs Chromium; only a bare ``pytest`` run without it skips this test.
"""

from __future__ import annotations

import collections
import json
import os
import re
import struct
import subprocess
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
from confluent_kafka import Producer

from skiff_harness import require_tool, skiff_bin, target_dir
from test_telemetry import alter_client_metrics

pytestmark = pytest.mark.timeout(180)

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]


def chromium() -> str:
    return require_tool("chromium", "chromium-browser", package="chromium")


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=60)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decodes an 8-bit, non-interlaced truecolour/greyscale PNG: (width, height, pixels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    assert header is not None, "no IHDR"
    width, height, depth, colour, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    assert depth == 8 and channels and interlace == 0, f"unsupported PNG: {header}"
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    pixels: list[bytes] = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        pixels.extend(bytes(line[x:x + channels]) for x in range(0, stride, channels))
        prev = line
    return width, height, pixels


def test_png_decoder_on_a_tiny_image():
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    # 2x2 RGB: row 0 unfiltered (red, green), row 1 with the Up filter (same as row 0).
    raw = b"\x00" + bytes([255, 0, 0, 0, 255, 0]) + b"\x02" + bytes(6)
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    assert png_pixels(png) == (2, 2, [b"\xff\x00\x00", b"\x00\xff\x00", b"\xff\x00\x00", b"\x00\xff\x00"])


def http_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def wait_for(predicate, what: str, timeout_s: float = 20):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def dump_dom(browser: str, profile: Path, url: str) -> str:
    """The DOM after the page's script ran (its first fetches; it polls every 5 s, past the budget)."""
    dom = run_chromium(browser, profile, "--virtual-time-budget=4000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def screenshot(browser: str, profile: Path, url: str, png: Path, size: tuple[int, int]) -> None:
    """A screenshot of `url` saved as `png`, checked to be a real rendering."""
    shot = run_chromium(browser, profile, "--virtual-time-budget=4000", f"--screenshot={png}",
                        f"--window-size={size[0]},{size[1]}", url)
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    data = png.read_bytes()
    assert len(data) > 5 * 1024, f"{png.name}: only {len(data)} bytes"
    width, height, pixels = png_pixels(data)
    assert (width, height) == size, (width, height)
    counts = collections.Counter(pixels)
    background, n = counts.most_common(1)[0]
    assert len(counts) > 2, f"{png.name} has {len(counts)} colours"
    assert n < 0.99 * len(pixels), f"{png.name} is {n / len(pixels):.1%} one colour {background!r}"


# A client ID that would be an element (and run a script) if the page wrote it as markup.
HOSTILE_CLIENT_ID = '<img src=x onerror="document.title=1" id=pwned>'


def test_clients_page_in_headless_chromium(broker, tmp_path):
    browser = chromium()
    bootstrap = broker.bootstrap
    topic, group = "ui-topic", "ui-watchers"
    env = {"RUST_LOG": "warn", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    # Telemetry every 500 ms, so that the instance's series have recent values to chart.
    error, message = alter_client_metrics(bootstrap, "ui-charts", {"metrics": "org.apache.kafka.", "interval.ms": "500"})
    assert error == 0, message
    r = subprocess.run([str(skiff_bin()), "topic", "create", topic, "--partitions", "2", "--bootstrap", bootstrap],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(skiff_bin()), "produce", topic, "--bootstrap", bootstrap], input="a\nb\nc\n",
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr

    consumer = subprocess.Popen([str(skiff_bin()), "consume", topic, "--group", group, "--quiet",
                                 "--bootstrap", bootstrap], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
    # A librdkafka client whose client ID is markup: the page must show it as text.
    hostile = Producer({"bootstrap.servers": bootstrap, "client.id": HOSTILE_CLIENT_ID})
    try:
        hostile.produce("ui-other", b"x")
        assert hostile.flush(20) == 0

        def caught_up():
            for v in http_json(f"{broker.admin_url}/clients"):
                member = [m for m in v["memberships"] if m["group"] == group]
                if member and v["client_instance_id"] and v["lag_records"] == 0 and len(member[0].get("partitions", [])) == 2:
                    return v
            return None

        view = wait_for(caught_up, "the skiff consumer, caught up, in /clients")
        instance = view["client_instance_id"]
        assert len(instance) == 22
        # Its series have a few recent values (pushes every 500 ms).
        wait_for(lambda: any(len(m.get("recent", [])) >= 2
                             for m in (http_json(f"{broker.admin_url}/clients/{instance}")["telemetry"] or {}).get("metrics", [])),
                 "two telemetry pushes")
        # librdkafka sends no KIP-1313 ID but gets a KIP-714 one: its connection is filed under
        # that telemetry ID (one instance, not also a connection without an ID).
        wait_for(lambda: any(c.get("client_id") == HOSTILE_CLIENT_ID and v["client_instance_id"]
                             and c.get("telemetry_instance_id") == v["client_instance_id"]
                             for v in http_json(f"{broker.admin_url}/clients") for c in v["connections"]),
                 "the hostile client in /clients under its telemetry ID")
        assert not any(c.get("client_id") == HOSTILE_CLIENT_ID for v in http_json(f"{broker.admin_url}/clients")
                       if not v["client_instance_id"] for c in v["connections"])

        # The list: every instance, the hostile client ID as text, no element made of it.
        page = f"{broker.admin_url}/ui/clients"
        html = dump_dom(browser, tmp_path / "profile-list", page)
        assert '<table id="instance-table">' in html, html[:2000]
        assert f'href="/ui/clients/{instance}"' in html, html[:4000]
        assert group in html and "skiff-cli" in html
        assert "&lt;img src=x onerror=" in html, "the hostile client ID is not shown as text"
        assert "<img" not in html and 'id="pwned"' not in html, "a client's text became markup"

        # Search by group: only the consumer's row; by the hostile client ID: only that one.
        html = dump_dom(browser, tmp_path / "profile-search", f"{page}?q={group}")
        rows = re.findall(r'<tr data-instance="([^"]*)"', html)
        assert rows == [instance], rows
        html = dump_dom(browser, tmp_path / "profile-search2", f"{page}?q=onerror")
        rows = re.findall(r'<tr data-instance="([^"]*)"', html)
        assert len(rows) >= 1 and instance not in rows, rows
        assert "<img" not in html

        # The instance: its connections, its membership with each partition's offsets and lag,
        # its telemetry as charts, its journal as a timeline.
        html = dump_dom(browser, tmp_path / "profile-instance", f"{page}/{instance}")
        assert f'<h2 class="id" id="instance-id">{instance}</h2>' in html, html[:4000]
        assert 'id="connections"' in html
        assert 'id="memberships"' in html and group in html
        assert len(re.findall(r'<tr class="partition">', html)) == 2, html
        assert re.search(r'<div class="v" id="instance-lag">0</div>', html), html
        assert 'id="telemetry"' in html and "<polyline" in html, "no chart of a telemetry series"
        assert "every 500 ms" in html, "the push interval, as subscribed"
        assert re.search(r"<strong>\d+</strong>", html) and not re.search(r"<strong>\{", html), \
            "a series' value shown as JSON, not as a number"
        assert 'id="journal"' in html and f"joined consumer group {group}" in html
        assert "since (ms)" not in html and re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", html), "times as dates"

        # Screenshots, where CI keeps them: the list, the instance, and the instance on a phone.
        artefacts = target_dir() / "test-artefacts" / "ui"
        artefacts.mkdir(parents=True, exist_ok=True)
        screenshot(browser, tmp_path / "profile-shot", page, artefacts / "clients.png", (1200, 800))
        screenshot(browser, tmp_path / "profile-shot2", f"{page}/{instance}", artefacts / "instance.png", (1200, 1400))
        screenshot(browser, tmp_path / "profile-shot3", f"{page}/{instance}", artefacts / "instance-phone.png", (390, 844))
        print(f"screenshots in {artefacts}")
    finally:
        hostile.flush(5)
        del hostile
        consumer.terminate()
        try:
            consumer.wait(10)
        except subprocess.TimeoutExpired:
            consumer.kill()
            consumer.wait(10)
