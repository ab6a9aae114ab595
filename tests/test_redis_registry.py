"""What only the Redis backends promise: sharing, key hygiene, script cache, errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import redis
from backends import (
    REDIS_BACKENDS,
    all_keys,
    dump,
    make_registry,
    raw_client,
    second_client,
    without_logs,
)
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import free_port

from redis_presence import (
    PresenceBatchError,
    PresenceConnectionError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceState,
    RedisPresenceRegistry,
    process_instance,
)
from redis_presence.keys import Keyspace
from redis_presence.plans import Limits

MS = 1_000_000
T0 = 1_796_000_000_123_456_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=REDIS_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_two_brokers_on_two_connections_see_each_other(
    request: pytest.FixtureRequest, backend: str
) -> None:
    broker_a = make_registry(request, backend)
    broker_b = RedisPresenceRegistry(second_client(request, backend))
    broker_a.heartbeat("orders", "billing", "from-a", 1, now_ns=T0)
    broker_b.heartbeat("orders", "billing", "from-b", 2, now_ns=T0)
    broker_b.heartbeat("mail", "send", "from-b", now_ns=T0)
    for reader in (broker_a, broker_b):
        assert [row.key for row in reader.snapshot(now_ns=T0)] == [
            ("mail", "send", "from-b"),
            ("orders", "billing", "from-a"),
            ("orders", "billing", "from-b"),
        ]
        assert reader.count_active_by_group(now_ns=T0) == {
            ("mail", "send"): 1,
            ("orders", "billing"): 2,
        }
    assert broker_b.deregister("orders", "billing", "from-a") is True
    assert len(broker_a) == 2


def test_prefixes_isolate_and_nothing_is_written_outside(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    client.set("unrelated", "keep")
    one = make_registry(request, backend, prefix="one")
    two = make_registry(request, backend, prefix="two")
    one.heartbeat("q", "g", "c", now_ns=T0)
    two.heartbeat("q", "g", "other", now_ns=T0)
    assert [row.consumer for row in one.snapshot(now_ns=T0)] == ["c"]
    assert [row.consumer for row in two.snapshot(now_ns=T0)] == ["other"]
    keys = {k.decode() for k in all_keys(client)}
    assert keys - {"unrelated"} == {k for k in keys if k.startswith(("one:", "two:"))}
    assert one.prune_expired(now_ns=T0 + 61_000 * MS) == 1
    assert len(two) == 1
    assert client.get("unrelated") == b"keep"


def test_empty_groups_leave_every_index(request: pytest.FixtureRequest, backend: str) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "a", now_ns=T0)
    registry.heartbeat("q", "h", "b", now_ns=T0 - 90_000 * MS)
    registry.heartbeat("r", "g", "c", now_ns=T0)
    assert registry.prune_expired(now_ns=T0) == 1
    assert registry.deregister("q", "g", "a") is True
    assert registry.deregister("r", "g", "c") is True
    # Only the queues' event logs stay (they say who left), and expire a day later.
    assert without_logs(all_keys(client)) == []
    assert registry.snapshot(now_ns=T0) == []


def test_heartbeat_after_removal_of_last_consumer_is_tracked(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "old", now_ns=T0 - 90_000 * MS)
    registry.prune_expired(now_ns=T0)
    registry.heartbeat("q", "g", "new", now_ns=T0)
    assert [row.consumer for row in registry.snapshot(now_ns=T0)] == ["new"]


def test_scripts_recover_after_script_flush(request: pytest.FixtureRequest, backend: str) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "c", now_ns=T0)
    operations: list[Callable[[], object]] = [
        lambda: registry.heartbeat("q", "g", "c", now_ns=T0),
        lambda: registry.snapshot(now_ns=T0),
        lambda: registry.count_active_by_group(now_ns=T0),
        lambda: registry.prune_expired(now_ns=T0),
        lambda: registry.deregister("q", "g", "nobody"),
    ]
    for operation in operations:
        client.script_flush()
        operation()
    assert registry.count_active_by_group(now_ns=T0) == {("q", "g"): 1}


def test_a_split_batch_recovers_after_script_flush(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A batch sent as several calls in one pipeline (prebuilt RESP on a standalone
    client) meets NOSCRIPT on every call: the script is loaded once, the calls sent again,
    and every beat is written."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend, limits=Limits(beats=2))
    beats = [("q", f"g{i % 2}", f"c{i}", i) for i in range(7)]
    registry.heartbeat_many(beats, now_ns=T0)
    client.script_flush()
    assert registry.heartbeat_many(beats, now_ns=T0 + MS) == 7
    rows = registry.snapshot(now_ns=T0 + MS)
    assert sorted((r.group, r.consumer, r.lease_count, r.last_heartbeat_ns) for r in rows) == (
        sorted((g, c, lease, T0 + MS) for _, g, c, lease in beats)
    )


def test_a_single_beat_writes_what_a_batch_of_one_writes(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """`heartbeat` sends its own lean script; what it leaves in the store is exactly what
    `heartbeat_many` leaves for the same beats (two prefixes of one store, compared)."""
    client = raw_client(request, backend)
    single = make_registry(request, backend, prefix="single")
    batch = make_registry(request, backend, prefix="batch")
    steps = [
        ("orders", "billing", "w1", 1, T0),  # a new group
        ("orders", "billing", "w2", 0, T0 + MS),  # a new consumer of a listed group
        ("orders", "billing", "w1", 5, T0 + 2 * MS),  # a known one: registration kept
        ("mail", "send", "w1", 2**32 - 1, T0 + 3 * MS),  # another queue
        ("mail", "send", "w1", 0, T0 + 3 * MS - 1),  # a beat from the past: stored as sent
    ]

    def without(prefix: str) -> dict[bytes, Any]:
        """The prefix's keys without the prefix; index members (key names) likewise, and
        the event logs' entries without their ids (the instants they were written)."""
        start = prefix.encode() + b":"
        stored = {k[len(start) :]: v for k, v in dump(client).items() if k.startswith(start)}
        epoch = b"{" + start + b"events}:epoch"
        if epoch in stored:  # its value names the instant it was written: only its presence
            stored[epoch] = (stored[epoch][0], None, stored[epoch][2])
            stored[b"{events}:epoch"] = stored.pop(epoch)
        for name in (b"groups", b"events", b"newest", b"oldest"):
            if name in stored:
                kind, members, expires = stored[name]
                members = [
                    (m.removeprefix(start), 0 if name == b"events" else score)
                    for m, score in members
                ]
                stored[name] = (kind, members, expires)
        for name, (kind, entries, expires) in list(stored.items()):
            if kind == "stream":
                fields = [{k: v.replace(start, b"") for k, v in f.items()} for _, f in entries]
                stored[name] = (kind, fields, expires)
        return stored

    for queue, group, consumer, lease, now in steps:
        single.heartbeat(queue, group, consumer, lease, now_ns=now)
        batch.heartbeat_many([(queue, group, consumer, lease)], now_ns=now)
        assert without("single") == without("batch")
    stored = without("single")
    token = process_instance()  # version 2 values: no progress, capacity, flags or conflict
    assert stored[b"{orders}:billing:c"][1] == [
        (b"w1", f"{T0} {T0 + 2 * MS} 5 0 0 0 0 {token} -".encode()),
        (b"w2", f"{T0 + MS} {T0 + MS} 0 0 0 0 0 {token} -".encode()),
    ]
    # The server clock: the same fields, stamped by TIME.
    single.heartbeat("orders", "billing", "w3", 7)
    batch.heartbeat_many([("orders", "billing", "w3", 7)])
    rows = {r.key: r for r in single.snapshot()} | {r.key: r for r in batch.snapshot()}
    assert rows[("orders", "billing", "w3")].state is PresenceState.ACTIVE
    assert sorted(without("single")) == sorted(without("batch"))


@pytest.mark.parametrize("backend", ["fakeredis", "redis", "async"], indirect=True)
def test_a_deleted_index_heals_with_the_next_beat_of_each_group(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Standalone: a batched beat lists its group whenever it is not listed, and so does
    a beat that adds a consumer, so a lost index (deleted by hand, restored from an old
    backup) comes back with the next batched beat (a reporter's flush) or new consumer of
    each group; a single beat of a known consumer does not look at the index (issue 33:
    it saves a ZSCORE on the hot path). On a cluster it comes back when the group's index
    mark expires (INDEX_MARK_MS)."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    registry.heartbeat_many([("mail", "send", "w1", 0)], now_ns=T0)
    client.delete("presence:groups")
    assert registry.snapshot(now_ns=T0) == []
    registry.heartbeat("orders", "billing", "w1", now_ns=T0 + MS)
    assert registry.count_active_by_group(now_ns=T0 + MS) == {}
    registry.heartbeat("orders", "billing", "w2", now_ns=T0 + MS)
    assert registry.count_active_by_group(now_ns=T0 + MS) == {("orders", "billing"): 2}
    registry.heartbeat_many([("mail", "send", "w1", 0)], now_ns=T0 + MS)
    assert registry.count_active_by_group(now_ns=T0 + MS) == {
        ("mail", "send"): 1,
        ("orders", "billing"): 2,
    }


@pytest.mark.parametrize(
    "key",
    [
        "presence:groups",
        "presence:{q}:g:hb",
        "presence:{q}:g:c",
        "presence:{q}:g:ix",
    ],
)
def test_foreign_data_at_a_key_is_a_data_error_and_nothing_changes(
    request: pytest.FixtureRequest, backend: str, key: str
) -> None:
    """Every operation on that key's group alone refuses it, naming it, and changes nothing
    (batches and prunes over several groups: tests/test_bad_data.py)."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("q", "h", "c", now_ns=T0)
    registry.heartbeat("q", "g", "c", now_ns=T0)
    client.delete(key)
    client.rpush(key, "written by another program")
    before = dump(client)
    calls: list[Callable[[], object]] = [
        lambda: registry.heartbeat("q", "g", "c", now_ns=T0),
        lambda: registry.heartbeat_many([("q", "g", "y", 0)], now_ns=T0),
        lambda: registry.prune_expired(now_ns=T0 + 10**15, queue="q", group="g"),
        lambda: registry.deregister("q", "g", "c"),
    ]
    if key.endswith(":ix") and "cluster" not in backend:
        # Index marks are a cluster's: on a standalone server heartbeats never read or write
        # them, and only prune and deregister, which delete a group's keys, meet one.
        calls = calls[2:]
    if key.endswith(":groups"):
        # The index is every group's: on a standalone server every call that may list or
        # unlist a group refuses it (a single beat lists its group when it adds a consumer);
        # on a cluster, where it lives in another slot, a heartbeat of an indexed group and
        # a deregister that does not empty its group never touch it (README, "Bad input"),
        # and readers and prune, which start from the index, refuse it.
        calls = [lambda: registry.prune_expired(now_ns=T0 + 10**15)]
        if "cluster" not in backend:
            calls.append(lambda: registry.heartbeat("q", "g", "new", now_ns=T0))
    if key.endswith(":groups"):
        calls.append(lambda: registry.snapshot(now_ns=T0))
    if key.endswith(":c"):  # (a fleet read sets the group aside: test_bad_data.py)
        calls.append(lambda: registry.snapshot(now_ns=T0, queue="q", group="g"))
    for call in calls:
        with pytest.raises(PresenceError, match=f"WRONGTYPE.*{re.escape(key)}") as info:
            call()
        failure = info.value
        if isinstance(failure, PresenceBatchError):  # a heartbeat_many or a prune
            assert list(failure.failed) == [("q", "g")]
            assert failure.completed == 0
            failure = failure.failed["q", "g"]
        assert isinstance(failure, PresenceDataError)
        assert dump(client) == before


def test_a_stored_value_another_program_wrote_is_a_data_error_for_readers(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    registry.heartbeat("orders", "billing", "w2", now_ns=T0)
    client.hset("presence:{orders}:billing:c", "w2", "not three numbers")
    before = dump(client)
    with pytest.raises(PresenceDataError, match='did not write: "not three numbers"'):
        registry.consumer("orders", "billing", "w2", now_ns=T0)
    # Every read of the group sets that consumer aside, naming it, and reads the others
    # (issue 23, item 3; issue 30, item 3: not the whole group).
    for queue, group in (("orders", "billing"), (None, None)):
        with pytest.warns(PresenceDataWarning, match='did not write: "not three numbers"'):
            rows = registry.snapshot(now_ns=T0, queue=queue, group=group)
        assert [row.key for row in rows] == [("orders", "billing", "w1")]
    assert dump(client) == before


def test_foreign_index_member_is_set_aside_with_a_warning(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "c", now_ns=T0)
    client.zadd("presence:groups", {"presence:{no-separator": 0})
    with pytest.warns(PresenceDataWarning, match="did not write"):
        rows = registry.snapshot(now_ns=T0)
    assert [row.key for row in rows] == [("q", "g", "c")]


def test_unreachable_server_raises_connection_error() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    registry = RedisPresenceRegistry(client)
    with pytest.raises(PresenceConnectionError, match="cannot reach Redis") as info:
        registry.heartbeat("q", "g", "c")
    assert isinstance(info.value, PresenceError)
    with pytest.raises(PresenceConnectionError):
        registry.snapshot()


def test_decoded_responses_client_works(redis_server: Any, redis_client: Any) -> None:
    client = redis_server.client(decode_responses=True)
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("ö", "g", "c", 3, now_ns=T0)
    (row,) = registry.snapshot(now_ns=T0)
    assert (row.queue, row.consumer, row.lease_count, row.state) == (
        "ö",
        "c",
        3,
        PresenceState.ACTIVE,
    )
    assert registry.count_active_by_group(now_ns=T0) == {("ö", "g"): 1}
    client.close()


class CountingConnection(redis.Connection):
    """A connection that counts the commands it writes to its socket (pipelines and
    prebuilt commands included), by reading the RESP it sends."""

    sent: list[tuple[bytes, ...]]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        data = command if isinstance(command, bytes | str) else b"".join(command)
        type(self).sent.extend(resp_commands(data if isinstance(data, bytes) else data.encode()))
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def resp_commands(data: bytes) -> list[tuple[bytes, ...]]:
    """The commands (arrays of bulk strings) in a RESP stream."""
    commands = []
    at = 0
    while at < len(data):
        end = data.index(b"\r\n", at)
        count, at = int(data[at + 1 : end]), end + 2
        args = []
        for _ in range(count):
            end = data.index(b"\r\n", at)
            size = int(data[at + 1 : end])
            args.append(data[end + 2 : end + 2 + size])
            at = end + 2 + size + 2
        commands.append(tuple(args))
    return commands


def test_one_heartbeat_is_one_round_trip_of_one_command(redis_server: Any) -> None:
    CountingConnection.sent = []
    pool = redis.ConnectionPool(
        connection_class=CountingConnection, host=redis_server.host, port=redis_server.port
    )
    client = redis.Redis(connection_pool=pool)
    client.flushall()
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("q", "g", "c", now_ns=T0)  # first call also loads the script
    CountingConnection.sent.clear()
    registry.heartbeat("q", "g", "c", now_ns=T0 + MS)
    assert [args[0] for args in CountingConnection.sent] == [b"FCALL"]
    assert registry.snapshot(now_ns=T0 + MS)[0].last_heartbeat_ns == T0 + MS
    client.close()


def test_group_keys_share_the_queue_hash_tag() -> None:
    keys = Keyspace("presence").group("a{b}:c*", "g}{")
    for key in (keys.hb, keys.data, keys.mark):
        tag = key[key.index("{") + 1 : key.index("}")]
        assert tag == "a%7Bb%7D%3Ac%2A"
        assert key.startswith("presence:")
