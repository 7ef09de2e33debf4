"""The broker's client-instance page (``GET /ui/clients`` on the admin listener) in a real browser:
Debian's headless Chromium.

A ``skiff consume --group`` process (whose skiff-client sends its KIP-1313 instance ID in every
request header) keeps a connection and a group membership open; the page, as Chromium's DOM after
loading it, must list that instance ID in its table (with the group and a detail section), and a
screenshot must be a real rendering (a PNG over 5 KB that is not a single colour — decoded here
with ``zlib``/``struct``, no imaging library).

``./scripts/test`` installs Chromium; only a bare ``pytest`` run without it skips this test.
"""

from __future__ import annotations

import collections
import json
import os
import struct
import subprocess
import time
import urllib.request
import zlib
from pathlib import Path

import pytest

from skiff_harness import require_tool, skiff_bin

pytestmark = pytest.mark.timeout(120)

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


def test_clients_page_in_headless_chromium(broker, tmp_path):
    browser = chromium()
    bootstrap = broker.bootstrap
    topic, group = "ui-topic", "ui-watchers"
    env = {"RUST_LOG": "warn", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    r = subprocess.run([str(skiff_bin()), "topic", "create", topic, "--partitions", "2", "--bootstrap", bootstrap],
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(skiff_bin()), "produce", topic, "--bootstrap", bootstrap], input="a\nb\nc\n",
                       capture_output=True, text=True, timeout=30, env=env)
    assert r.returncode == 0, r.stderr

    consumer = subprocess.Popen([str(skiff_bin()), "consume", topic, "--group", group, "--quiet",
                                 "--bootstrap", bootstrap], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
    try:
        deadline = time.monotonic() + 20
        instance = None
        while instance is None:
            for v in http_json(f"{broker.admin_url}/clients"):
                if any(m["group"] == group for m in v["memberships"]) and v["client_instance_id"]:
                    instance = v["client_instance_id"]
            if instance is None:
                assert time.monotonic() < deadline, "the skiff consumer never showed up in /clients"
                time.sleep(0.2)
        assert len(instance) == 22

        url = f"{broker.admin_url}/ui/clients"
        dom = run_chromium(browser, tmp_path / "profile-dom", "--dump-dom", url)
        assert dom.returncode == 0, dom.stderr[-2000:]
        html = dom.stdout
        assert '<table id="instances">' in html, html[:2000]
        assert "Client instances" in html
        assert instance in html, f"{instance} not in the DOM:\n{html[:4000]}"
        assert f'href="#{instance}"' in html and f'id="{instance}"' in html  # table row + detail section
        assert group in html and "skiff-cli" in html

        png = tmp_path / "clients.png"
        shot = run_chromium(browser, tmp_path / "profile-shot", f"--screenshot={png}", "--window-size=1200,800", url)
        assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
        data = png.read_bytes()
        assert len(data) > 5 * 1024, f"screenshot only {len(data)} bytes"
        width, height, pixels = png_pixels(data)
        assert (width, height) == (1200, 800), (width, height)
        counts = collections.Counter(pixels)
        background, n = counts.most_common(1)[0]
        assert len(counts) > 2, f"screenshot has {len(counts)} colours"
        assert n < 0.99 * len(pixels), f"screenshot is {n / len(pixels):.1%} one colour {background!r}"
    finally:
        consumer.terminate()
        try:
            consumer.wait(10)
        except subprocess.TimeoutExpired:
            consumer.kill()
            consumer.wait(10)
