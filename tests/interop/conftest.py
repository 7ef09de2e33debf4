"""Fixtures for the Skiff interop suite: defined in skiff_fixtures.py (shared with
tests/robustness), found here by name. See tests/interop/README.md."""

from skiff_fixtures import *  # noqa: F401,F403
from cluster_fixtures import cluster, group_target, pg_db, postgres  # noqa: F401
