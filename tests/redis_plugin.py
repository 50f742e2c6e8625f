"""Pytest plugin (loaded with ``-p``): picks the Redis for the run before Django reads settings.

``TEST_REDIS_URL`` set: use that server. Otherwise a private throwaway redis-server is started for
the run, so counting tests (INFO commandstats) see only this run's commands and nothing of anyone
else's data is ever touched. Either way every key gets a per-run prefix, and Celery a per-run queue.
Under pytest-xdist (``make test`` runs two workers) each worker is a run of its own.

``--redis-cluster`` (or ``TEST_REDIS_CLUSTER=1``): the run's Redis is a private 3-master Redis
Cluster instead (``ACTIVITY_REDIS_CLUSTER=1``, ``REDIS_URL`` naming one node), and Celery's broker
and results a private standalone server beside it (kombu cannot use a cluster).
"""

from __future__ import annotations

import os
import secrets

import pytest

from project.redis_server import PrivateCluster, PrivateRedis

_private: PrivateRedis | None = None
_cluster: PrivateCluster | None = None


def pytest_addoption(parser):
    parser.addoption(
        "--redis-cluster",
        action="store_true",
        default=os.environ.get("TEST_REDIS_CLUSTER", "") not in ("", "0"),
        help="run against a private 3-master Redis Cluster (Celery's broker on a standalone server)",
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    global _private, _cluster
    if getattr(early_config.known_args_namespace, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        return (yield)  # pytest-xdist's controller: its workers run the tests, each on its own servers
    run = secrets.token_hex(4)
    url = os.environ.get("TEST_REDIS_URL")
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.pop("CELERY_RESULT_BACKEND", None)
    # Stopped by the config's cleanups, which run after a usage error too (pytest_unconfigure does
    # not: an unknown option would leave the servers running).
    if early_config.known_args_namespace.redis_cluster:
        _cluster = PrivateCluster().start()
        early_config.add_cleanup(_cluster.stop)
        _private = PrivateRedis().start()
        early_config.add_cleanup(_private.stop)
        url = _cluster.url
        os.environ["ACTIVITY_REDIS_CLUSTER"] = "1"
        os.environ["CELERY_BROKER_URL"] = os.environ["CELERY_RESULT_BACKEND"] = _private.url
    elif not url:
        _private = PrivateRedis().start()
        early_config.add_cleanup(_private.stop)
        url = _private.url
    os.environ["REDIS_URL"] = url
    os.environ["ACTIVITY_KEY_PREFIX"] = f"acttest:{run}:"
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = f"acttest-{run}"
    return (yield)


# The cluster pass skips what cannot apply to a cluster, each with its reason (kept short).
NOT_ON_A_CLUSTER = {
    "tests/test_store_unavailable.py::test_server_state_is_503_fails_open_retries_writes_nothing_and_recovers": (
        "drives one standalone server into each state it can be in; a cluster node's failure is tests/test_cluster.py's"
    ),
    # The README's steps set up a standalone Redis (ACTIVITY_REDIS_CLUSTER is a setting the new site
    # would have to add); packaging is the same on both.
    "tests/test_install.py": "follows the README's standalone setup in a new site",
    # MONITORs one server for the standalone rebuild's commands; a cluster rebuilds without SORT
    # (store/reports.py), its builds counted by tests/test_reports.py there too.
    "tests/test_reports_scale.py::test_a_rebuild_sorts_only_the_top_k_in_a_fixed_number_of_commands": (
        "MONITORs one server for the standalone rebuild's commands"
    ),
}


def pytest_collection_modifyitems(config, items):
    if _cluster is None:
        return
    for item in items:
        reason = next((why for prefix, why in NOT_ON_A_CLUSTER.items() if item.nodeid.startswith(prefix)), None)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"on a Redis Cluster: {reason}"))


@pytest.fixture(scope="session")
def private_redis() -> PrivateRedis | None:
    """The run's private standalone server (None when ``TEST_REDIS_URL`` points at a shared one);
    on a cluster run, the one that carries Celery's broker."""
    return _private


@pytest.fixture(scope="session")
def private_cluster() -> PrivateCluster | None:
    """The run's private Redis Cluster, None unless the run is ``--redis-cluster``."""
    return _cluster
