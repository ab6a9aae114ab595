"""A prefix written by another protocol version (``P:protocol``, docs/protocol.md, section 1):
every write refuses it with nothing written, and the reads that cannot go on say which
version wrote it (issue 30, item 4).

Before: only the heartbeats and prune refused (through the version read with the shared
TTLs); `deregister`, `describe`, `set_ttl`, `set_stuck_after`, `expect`, `unexpect` and
`migrate` wrote, and `changes` read the other version's logs. On a standalone server the
check is now in the very script that writes, so a registry that read the version a moment
ago (its cache of shared settings still fresh) refuses too: nothing can slip between the
check and the write. On a cluster the version lives in another slot than the queues' keys:
a write checks it first, read when the planner has not read it for TTL_CACHE_MS.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from typing import Any

import pytest
from backends import dump, make_registry, raw_client
from cli_invoke import invoke, one_error_line
from web_client import make_client, metric_samples

from redis_presence import AsyncRedisPresenceRegistry, PresenceProtocolError, RedisPresenceRegistry
from redis_presence.keys import Keyspace, encode_name
from redis_presence.plans import TTL_CACHE_MS, Plan, Planner
from redis_presence.web import feed as live_events
from redis_presence.web.feed import StreamMessage
from redis_presence.web.reads import PresenceData

pytestmark = pytest.mark.timeout(120)

T0 = 1_796_000_000_000_000_000
MS = 1_000_000
REFUSED = 'written by protocol version "3"'

WRITES: dict[str, Callable[[Planner], Plan[Any]]] = {
    "heartbeat": lambda p: p.heartbeat("q", "g", "c", 2, T0 + MS),
    "heartbeat (server clock)": lambda p: p.heartbeat("q", "g", "c", 2),
    "heartbeat (new group)": lambda p: p.heartbeat("q", "new", "c", 0, T0 + MS),
    "heartbeat (progressed)": lambda p: p.heartbeat("q", "g", "c", 1, T0 + MS, progressed=True),
    "heartbeat_many": lambda p: p.heartbeat_many([("q", "g", "c", 1), ("r", "h", "d", 0)], T0),
    "heartbeat_delayed": lambda p: p.heartbeat_delayed([("q", "g", "c", 1, 500, 100)]),
    "deregister": lambda p: p.deregister("q", "g", "c"),
    "describe": lambda p: p.describe("q", "g", "c", {"host": "b"}),
    "describe (remove)": lambda p: p.describe("q", "g", "c", {}),
    "describe_many": lambda p: p.describe_many([("q", "g", "c", {"host": "b"})]),
    "set_ttl": lambda p: p.set_ttl(5_000),
    "set_ttl (group)": lambda p: p.set_ttl(5_000, queue="q", group="g"),
    "set_ttl (forget)": lambda p: p.set_ttl(None, queue="q", group="g"),
    "set_stuck_after": lambda p: p.set_stuck_after(2_000),
    "set_stuck_after (forget)": lambda p: p.set_stuck_after(None),
    "expect": lambda p: p.expect("q", "other", 2),
    "expect (again)": lambda p: p.expect("q", "g", 3),
    "unexpect": lambda p: p.unexpect("q", "g"),
    "prune_expired": lambda p: p.prune_expired(T0 + 10**15),
    "prune_expired (ttl_ms)": lambda p: p.prune_expired(T0 + 10**15, 1_000),
    "prune_expired (one group)": lambda p: p.prune_expired(T0 + 10**15, queue="q", group="g"),
    "migrate": lambda p: p.migrate(),
    "request_drain": lambda p: p.request_drain("q", "g", "c"),
}


def seed(run: Callable[[Plan[Any]], Any], planner: Planner, client: Any) -> None:
    """A store of version 2 with something for every write to change (a consumer with
    metadata, an expired one, settings, a declaration, an entry of the 0.1 index), then
    claimed by another version, as a migration to it would."""
    run(planner.heartbeat("q", "g", "c", 1, T0))
    run(planner.heartbeat("q", "g", "old", 1, T0 - 10**14))
    run(planner.describe("q", "g", "c", {"host": "a"}))
    run(planner.set_ttl(20_000, queue="q", group="g"))
    run(planner.set_stuck_after(1_000))
    run(planner.expect("q", "g", 1))
    client.sadd(Keyspace("presence").legacy_index, f"{encode_name('q')}:{encode_name('g')}")
    client.set("presence:protocol", "3")


def refused_unwritten(run: Callable[[Plan[Any]], Any], write: Plan[Any], client: Any) -> None:
    before = dump(client)
    with pytest.raises(PresenceProtocolError, match=REFUSED):
        run(write)
    assert dump(client) == before


STANDALONE = ["redis", "async", "fakeredis"]


@pytest.mark.redis_server
@pytest.mark.parametrize("backend", STANDALONE)
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_of_a_registry_that_just_read_the_version_is_refused(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """The registry read version 2 a moment ago (its cache of shared settings is fresh):
    the script that writes reads the version again, in the same call."""
    registry = make_registry(request, backend)
    client = raw_client(request, backend)
    seed(registry.execute, registry.plans, client)
    refused_unwritten(registry.execute, WRITES[name](registry.plans), client)


@pytest.mark.redis_server
@pytest.mark.parametrize("backend", [*STANDALONE, "cluster", "async-cluster"])
@pytest.mark.parametrize("name", list(WRITES))
def test_a_write_of_a_new_registry_is_refused(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    writer = make_registry(request, backend)
    client = raw_client(request, backend)
    seed(writer.execute, writer.plans, client)
    registry = make_registry(request, backend)  # the same store, another process
    refused_unwritten(registry.execute, WRITES[name](registry.plans), client)


@pytest.mark.redis_server
@pytest.mark.parametrize("name", list(WRITES))
def test_on_a_cluster_a_write_reads_the_version_again_after_the_cache(
    cluster_client: Any, name: str
) -> None:
    """On a cluster the version is read before the write (another slot than the queue's):
    by a planner that has not read it for TTL_CACHE_MS. Within that window a migration to
    another version must wait (docs/protocol.md)."""
    now = [0]
    registry = RedisPresenceRegistry(cluster_client)
    planner = Planner("presence", clustered=True, clock=lambda: now[0])
    seed(registry.execute, planner, cluster_client)
    now[0] += TTL_CACHE_MS * MS + 1
    refused_unwritten(registry.execute, WRITES[name](planner), cluster_client)


READS: dict[str, Callable[[Any], object]] = {
    "snapshot": lambda r: r.snapshot(now_ns=T0),
    "snapshot (ttl_ms)": lambda r: r.snapshot(now_ns=T0, ttl_ms=1_000),
    "snapshot (one group, ttl_ms)": lambda r: r.snapshot(
        now_ns=T0, ttl_ms=1_000, queue="q", group="g"
    ),
    "count_active_by_group (ttl_ms)": lambda r: r.count_active_by_group(now_ns=T0, ttl_ms=1),
    "groups": lambda r: r.groups(now_ns=T0),
    "expected": lambda r: r.expected(),
    "len": len,
    "changes": lambda r: r.changes(),
}


@pytest.mark.redis_server
@pytest.mark.parametrize("backend", ["redis", "async", "cluster"])
@pytest.mark.parametrize("name", list(READS))
def test_a_read_that_cannot_go_on_names_the_version(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    writer = make_registry(request, backend)
    client = raw_client(request, backend)
    seed(writer.execute, writer.plans, client)
    reader = make_registry(request, backend)
    with pytest.raises(PresenceProtocolError, match=REFUSED):
        READS[name](reader)


@pytest.mark.redis_server
def test_changes_from_a_cursor_stops_at_another_version(redis_client: Any) -> None:
    """A follower (`changes` with its cursor, as `follow` and the live views go on) reads
    the version again once TTL_CACHE_MS passed, and stops there: the logs of another
    version are not read as this one's."""
    now = [0]
    registry = RedisPresenceRegistry(redis_client)
    planner = Planner("presence", clock=lambda: now[0])
    _, cursor = registry.execute(planner.changes())
    registry.heartbeat("q", "g", "c")
    events, cursor = registry.execute(planner.changes(cursor))
    assert [event.kind.value for event in events] == ["joined"]
    redis_client.set("presence:protocol", "3")
    now[0] += TTL_CACHE_MS * MS + 1
    with pytest.raises(PresenceProtocolError, match=REFUSED):
        registry.execute(planner.changes(cursor))


@pytest.mark.redis_server
def test_the_version_itself_of_another_type_is_a_data_error_and_nothing_is_written(
    redis_client: Any,
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "c", now_ns=T0)
    redis_client.delete("presence:protocol")
    redis_client.hset("presence:protocol", "v", "1")
    before = dump(redis_client)
    with pytest.raises(Exception, match="presence:protocol holds a hash") as info:
        registry.deregister("q", "g", "c")
    assert type(info.value).__name__ == "PresenceDataError"
    assert dump(redis_client) == before


@pytest.mark.redis_server
def test_a_migration_to_another_version_refuses_the_scripts_already_loaded(
    redis_client: Any,
) -> None:
    """The point of the check in the script: a client that keeps its prebuilt single beat
    (and read version 2 with its TTL) is refused from the first call after the version
    changed, also when the prefix's version key is written between two of its beats."""
    registry = RedisPresenceRegistry(redis_client)
    for i in range(3):
        registry.heartbeat("q", "g", f"c{i}", now_ns=T0 + i)
    redis_client.set("presence:protocol", "3")
    before = dump(redis_client)
    for i in range(3):
        with pytest.raises(PresenceProtocolError, match=REFUSED):
            registry.heartbeat("q", "g", f"c{i}", now_ns=T0 + 10 + i)
    assert dump(redis_client) == before
    redis_client.set("presence:protocol", "2")  # back: the same registry writes again
    registry.heartbeat("q", "g", "c0", now_ns=T0 + 20)
    assert registry.snapshot(now_ns=T0 + 20)[0].last_heartbeat_ns == T0 + 20


CLI_WRITES = [
    ["heartbeat", "q", "g", "c"],
    ["deregister", "q", "g", "c"],
    ["prune"],
    ["--ttl-ms", "1000", "prune"],
    ["ttl", "set", "5000"],
    ["ttl", "set", "5000", "--queue", "q", "--group", "g"],
    ["ttl", "unset", "--queue", "q", "--group", "g"],
    ["expect", "q", "other"],
    ["unexpect", "q", "g"],
    ["migrate"],
    ["drain", "q", "g", "c"],
]
CLI_READS = [["ls"], ["--ttl-ms", "1000", "counts"], ["events"]]


@pytest.mark.redis_server
@pytest.mark.parametrize("args", CLI_WRITES + CLI_READS, ids=" ".join)
def test_the_cli_says_which_version_wrote_the_prefix_in_one_line(
    redis_server: Any, redis_client: Any, args: list[str]
) -> None:
    """Exit code 5 (data this package did not write), one line, nothing written."""
    registry = RedisPresenceRegistry(redis_client)
    seed(registry.execute, registry.plans, redis_client)
    before = dump(redis_client)
    result = invoke(["--url", redis_server.url, *args])
    assert result.exit_code == 5, result.output
    assert REFUSED in one_error_line(result)
    assert dump(redis_client) == before


# -- the web service ---------------------------------------------------------------------

API = [
    "/api/v1/groups",
    "/api/v1/consumers",
    "/api/v1/groups/q/g",
    "/api/v1/events",
    "/api/v1/hosts",
]
PAGES = [
    "/",
    "/consumers",
    "/group?queue=q&group=g",
    "/consumer?queue=q&group=g&consumer=c",
    "/hosts",
    "/events",
]


@pytest.mark.redis_server
@pytest.mark.parametrize("ttl_ms", [None, 10_000], ids=["shared-ttl", "ttl-ms"])
def test_the_web_service_says_which_version_wrote_the_prefix_and_that_redis_is_up(
    redis_url: str, redis_client: Any, ttl_ms: int | None
) -> None:
    """Before: /api/v1/events answered 200 (the other version's logs read as this one's),
    and /metrics said ``redis_presence_up 0``, which reads as Redis down."""
    registry = RedisPresenceRegistry(redis_client)
    seed(registry.execute, registry.plans, redis_client)
    with make_client(redis_url, ttl_ms=ttl_ms) as web:
        for path in API:
            response = web.get(path)
            assert response.status_code == 502, path
            body = response.json()
            assert body["error"] == "other_protocol_version", path
            assert REFUSED in body["message"], path
            assert "since_ns" not in body  # not an outage
        for path in PAGES:
            twin = web.get(path, headers={"Accept": "application/json"})
            assert (twin.status_code, twin.json()["error"]) == (502, "other_protocol_version")
            page = web.get(path)
            assert page.status_code == 502, path
            assert "text/html" in page.headers["content-type"]
            assert REFUSED in html.unescape(page.text), path
        samples = metric_samples(web.get("/metrics").text)
        assert samples["redis_presence_up"] == {(): 1.0}
        assert samples["redis_presence_protocol_mismatch"] == {(): 1.0}
        assert "redis_presence_group_active" not in samples  # nothing is claimed
        redis_client.set("presence:protocol", "2")  # back: read again, no mismatch
        samples = metric_samples(web.get("/metrics").text)
        assert samples["redis_presence_protocol_mismatch"] == {(): 0.0}
        assert samples["redis_presence_group_active"] == {(("group", "g"), ("queue", "q")): 0.0}


@pytest.mark.redis_server
def test_the_event_stream_says_the_prefix_is_another_versions_not_that_redis_is_down(
    redis_url: str, redis_client: Any
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    seed(registry.execute, registry.plans, redis_client)

    async def run() -> StreamMessage:
        reader = AsyncRedisPresenceRegistry.from_url(redis_url)
        data = PresenceData(reader, ttl_ms=None)
        messages = live_events.stream(data, None, interval_s=0.01)
        try:
            return await anext(messages)
        finally:
            await messages.aclose()
            await reader.aclose()

    status = asyncio.run(run())
    assert status.event == "status"
    assert status.data["redis_up"] is True
    assert REFUSED in str(status.data["message"])
