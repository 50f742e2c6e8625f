"""The standalone client (``activity.store.client``), redis-py's pool and pipeline under the service's
error boundary: a connection is never handed out with a reply left unread, and a pipeline's replies
are never another's.

Each property is produced for real on a throwaway redis-server: a reply left unread on a pooled
connection, a pipeline timing out while Redis is busy (its late replies must never be read as the
next pipeline's), a restart, a fork (the child must never write on the parent's sockets) and many
threads sharing one client. Connections are counted where the server sees them (CLIENT LIST, each
test's client under a name of its own; CLIENT ID for the one a pipeline went over).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis
from django.test import override_settings

from activity.errors import StoreTimeout
from activity.store.client import Pipeline, StandaloneClient, client_options, get_client
from project.redis_server import PrivateRedis
from tests.celery_procs import wait_for

# Runs until ARGV[1] seconds of server time have passed (Redis answers nothing else meanwhile).
BUSY_SCRIPT = """
local deadline = tonumber(redis.call('TIME')[1]) + tonumber(redis.call('TIME')[2]) / 1e6 + tonumber(ARGV[1])
while tonumber(redis.call('TIME')[1]) + tonumber(redis.call('TIME')[2]) / 1e6 < deadline do end
return 'late'
"""


@pytest.fixture(scope="module")
def server():
    with PrivateRedis() as running:
        yield running


def connected(server: PrivateRedis, name: str, **options) -> StandaloneClient:
    """A client made as the service makes its own, but for ``options``; its connections are named
    ``name`` (CLIENT SETNAME)."""
    return StandaloneClient.from_url(server.url, **{**client_options(1.0), "client_name": name, **options})


def set_and_get(client: StandaloneClient, key: str, value: str) -> list:
    pipe = client.pipeline(transaction=False)
    pipe.set(key, value)
    pipe.get(key)
    pipe.strlen(key)
    return pipe.execute()


def connections(server: PrivateRedis, name: str) -> set[int]:
    """The ids of the server's open connections named ``name`` (CLIENT LIST)."""
    with redis.Redis.from_url(server.url, decode_responses=True) as raw:
        return {int(found["id"]) for found in raw.client_list() if found["name"] == name}


def served_by(client: StandaloneClient) -> int:
    """The id of the connection a pipeline of ``client`` went over, as the server knows it (CLIENT ID)."""
    pipe = client.pipeline(transaction=False)
    pipe.client_id()
    return pipe.execute()[0]


def test_the_service_client_builds_the_service_pipeline(server):
    """What ``get_client()`` builds for a standalone server, not only this file's clients."""
    with override_settings(REDIS_URL=server.url, ACTIVITY_REDIS_CLUSTER=False):
        client = get_client()
    assert isinstance(client, StandaloneClient)
    assert isinstance(client.pipeline(transaction=False), Pipeline)


def test_a_connection_left_with_an_unread_reply_is_not_handed_out_as_is(server):
    client = connected(server, "unread")
    pool = client.connection_pool
    connection = pool.get_connection()
    connection.send_command("CLIENT", "ID")
    left = connection.read_response()
    connection.send_command("ECHO", "left unread")
    time.sleep(0.05)  # the reply is in the socket
    pool.release(connection)
    assert set_and_get(client, "acttest:unread", "v") == [True, "v", 1]
    # That connection was closed and another opened in its place; the client holds no other.
    now = served_by(client)
    assert now != left
    wait_for(lambda: connections(server, "unread") == {now}, timeout=5, what="the old connection closed")
    client.close()


def test_a_pipeline_timing_out_leaves_no_late_reply_for_the_next(server):
    busy, client = connected(server, "busy"), connected(server, "late", socket_timeout=0.2)
    runner = threading.Thread(target=busy.eval, args=(BUSY_SCRIPT, 0, 0.8))
    runner.start()
    time.sleep(0.1)  # the script holds Redis: the pipeline below is queued behind it
    with pytest.raises(StoreTimeout):
        set_and_get(client, "acttest:late", "first")
    runner.join()
    wait_for(lambda: not connections(server, "late"), timeout=5, what="the timed-out connection closed")
    # Redis has now answered the timed-out pipeline; none of that may be read as this one's replies.
    assert set_and_get(client, "acttest:late", "second") == [True, "second", 6]
    assert set_and_get(client, "acttest:late", "third!") == [True, "third!", 6]
    assert len(connections(server, "late")) == 1  # the pipelines took turns on one connection
    client.close()
    busy.close()


def test_an_error_reply_comes_back_in_place_and_the_connection_stays_in_step(server):
    client = connected(server, "in-step")
    client.set("acttest:text", "x")
    pipe = client.pipeline(transaction=False)
    pipe.incr("acttest:text")  # not an integer: an error reply in the middle
    pipe.get("acttest:text")
    with pytest.raises(Exception, match="not an integer"):
        pipe.execute()
    assert set_and_get(client, "acttest:text", "y") == [True, "y", 1]
    client.close()


def test_a_restart_is_survived_by_the_pooled_connection(server):
    with PrivateRedis() as own:
        client = connected(own, "restart")
        assert set_and_get(client, "acttest:restart", "before") == [True, "before", 6]
        own.restart()  # the pooled connection is now closed by the server
        assert set_and_get(client, "acttest:restart", "after") == [True, "after", 5]
        client.close()


def test_a_forked_child_opens_its_own_connection(server):
    client = connected(server, "fork")
    assert set_and_get(client, "acttest:fork:parent", "p") == [True, "p", 1]
    parents = connections(server, "fork")  # the parent's one connection
    assert parents == {served_by(client)}
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its pipelines must not share the parent's socket
        try:
            replies = [set_and_get(client, f"acttest:fork:child{i}", "c" * i) for i in range(1, 50)]
            ok = replies == [[True, "c" * i, i] for i in range(1, 50)]
            own = not {served_by(client) for _ in range(5)} & parents
            os.write(write, b"ok" if ok and own else b"no")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)  # the parent waits: sending too, it could make the child reconnect by chance
    assert os.read(read, 2) == b"ok" and status == 0
    os.close(read)
    replies = [set_and_get(client, f"acttest:fork:parent{i}", "p" * i) for i in range(1, 50)]
    assert replies == [[True, "p" * i, i] for i in range(1, 50)]
    client.close()


def test_threads_sharing_a_client_each_get_their_own_replies_and_connections_are_bounded(server):
    client, threads, rounds = connected(server, "threads"), 8, 200
    wrong: list[str] = []

    def work(n: int) -> None:
        for i in range(rounds):
            value = f"{n}-{i}" * (n + 1)
            if set_and_get(client, f"acttest:threads:{n}", value) != [True, value, len(value)]:
                wrong.append(value)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert wrong == []
    assert 1 <= len(connections(server, "threads")) <= threads
    client.close()
