"""Fixtures for the robustness suite: the interop suite's (tests/interop/skiff_fixtures.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

from skiff_fixtures import *  # noqa: E402,F401,F403
