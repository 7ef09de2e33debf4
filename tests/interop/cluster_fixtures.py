"""Fixtures for cluster-mode tests, found by every test module through conftest.py:
``postgres`` (one throwaway PostgreSQL per module), ``pg_db`` (a database per test), ``cluster``
(``cluster(n, objects=None, extra=None, env=None)`` starts brokers 1..n on it), and
``group_target`` (the consumer-group tests' broker: a single node, or one broker of a three-broker
cluster, as the test is parametrized).
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

import cluster_util as cu
from groups_util import GROUP_ARGS, group_broker


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """One throwaway PostgreSQL for the module (a database per test); its log is kept in the
    pytest temp dir."""
    pg = cu.start_postgres()
    try:
        yield pg
    finally:
        pg.close(keep_log=tmp_path_factory.mktemp("postgres") / "postgres.log")


@pytest.fixture
def pg_db(postgres, request) -> str:
    postgres.start()  # running again if an earlier test left it stopped
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:6]
    return postgres.create_database(name)


def wait_shards(postgres, url: str, n: int, timeout: float = 30.0) -> None:
    """Until every coordinator shard is owned, by the ``n`` brokers between them, the same way
    twice 0.3 s apart: the shards have settled after the brokers joined one by one (each join
    moves some from their first owner)."""
    db = url.rsplit("/", 1)[-1].split("?", 1)[0]
    deadline = time.monotonic() + timeout
    last = None
    while True:
        owners = postgres.psql("SELECT owner FROM coordinator_shards ORDER BY shard", db=db).split()
        settled = len(owners) == 50 and len(set(owners)) == min(n, 50)
        if settled and owners == last:
            return
        last = owners if settled else None
        if time.monotonic() > deadline:
            raise AssertionError(f"coordinator shards never settled over {n} brokers: {owners}")
        time.sleep(0.3)


@pytest.fixture
def cluster(make_broker, tmp_path, pg_db, postgres):
    """``cluster(n, objects=None, extra=None, env=None)`` starts brokers 1..n on this test's
    database and ``file://<tmp>/objects`` (or ``objects``), and waits until every one lists all n
    as live. SIGSTOPped brokers get SIGCONT at teardown, before make_broker stops them."""
    made: list[cu.Cluster] = []

    def make(n: int, objects: str | None = None, extra: dict | None = None,
             env: dict | None = None) -> cu.Cluster:
        objects = objects or f"file://{tmp_path / 'objects'}"
        (tmp_path / "objects").mkdir(exist_ok=True)
        try:
            c = cu.Cluster(make_broker, tmp_path / f"cluster{len(made)}", pg_db, objects, n, extra,
                           {"NO_COLOR": "1", **(env or {})})
        except RuntimeError as exc:
            pytest.fail(str(exc), pytrace=False)
        made.append(c)
        c.wait_view(set(range(1, n + 1)))
        wait_shards(postgres, pg_db, n)
        return c

    try:
        yield make
    finally:
        for c in made:
            c.resume_all()


#: The group tests' broker settings (groups_util.GROUP_ARGS) as cluster config keys.
GROUP_KEYS = {GROUP_ARGS[i + 1].split("=", 1)[0]: int(GROUP_ARGS[i + 1].split("=", 1)[1])
              for i in range(0, len(GROUP_ARGS), 2)}


class ClusterTarget:
    """A three-broker cluster seen through one of its brokers (``bootstrap``, ``admin_url``):
    clients find the group's coordinator, wherever it is, from there."""

    def __init__(self, c: cu.Cluster, via: int):
        self.cluster = c
        self.via = via
        self.bootstrap = c.broker(via).bootstrap

    @property
    def admin_url(self) -> str:
        return self.cluster.broker(self.via).admin_url


@pytest.fixture(params=["single", "cluster"])
def group_target(request, make_broker):
    """The broker a consumer-group test runs against: a single node with the group settings, or
    broker 2 of a three-broker cluster (PostgreSQL and a ``file://`` store) with the same."""
    if request.param == "single":
        return group_broker(make_broker)
    if cu.find_postgres_bin() is None and not cu.services_required():
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql): cluster mode needs it")
    make = request.getfixturevalue("cluster")
    return ClusterTarget(make(3, extra={**GROUP_KEYS, "auto.create.topics.enable": True}), via=2)
