"""Protocol version 2, the write side (V2 "Beat semantics"): capacity, draining, drain
requests, instance tokens (conflict, restarted), mode 1, and the move to version 2; the
in-process model and a real redis-server, on the same sequences, must agree."""

from __future__ import annotations

from typing import Any

import pytest
from backends import make_registry, raw_client

from redis_presence import ConsumerPresenceRegistry, RedisPresenceRegistry
from redis_presence.beats import BeatReply, Written, process_instance
from redis_presence.errors import PresenceProtocolError
from redis_presence.events import EventKind
from redis_presence.keys import PROTOCOL_VERSION
from redis_presence.validation import BeatSpec

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
Q, G = "orders", "billing"
DERIVED = {EventKind.STALE, EventKind.EXPIRED}

BOTH = pytest.mark.parametrize(
    "backend", ["memory", pytest.param("redis", marks=pytest.mark.redis_server)]
)
ALL = pytest.mark.parametrize(
    "backend",
    [
        "memory",
        pytest.param("redis", marks=pytest.mark.redis_server),
        pytest.param("cluster", marks=pytest.mark.redis_server),
    ],
)


class Store:
    """One store seen through one or more registries (a registry per instance token), with
    what a test compares: each consumer's stored fields and the events logged."""

    def __init__(self, request: pytest.FixtureRequest, backend: str) -> None:
        self.request, self.backend = request, backend
        self.registries: dict[str, Any] = {}
        self.client = raw_client(request, backend) if backend != "memory" else None
        self.model = ConsumerPresenceRegistry() if backend == "memory" else None

    def reg(self, instance: str = "one") -> Any:
        if instance not in self.registries:
            if self.model is not None:
                self.registries[instance] = _As(self.model, instance)
            else:
                self.registries[instance] = make_registry(
                    self.request, self.backend, instance=instance
                )
        return self.registries[instance]

    def stored(self, consumer: str) -> list[str]:
        """The consumer's stored value, as its nine (or v1's 3-4) fields."""
        if self.model is not None:
            value = self.model._rows[(Q, G, consumer)]
            return ["0" if v is None else str(v) for v in value]
        assert self.client is not None
        raw = self.client.hget(f"presence:{{{Q}}}:{G}:c", consumer)
        return str(raw.decode()).split(" ")

    def kinds(self) -> list[tuple[str, str]]:
        """Every logged event (not the derived ones), oldest first: (kind, consumer)."""
        if self.model is not None:
            return [(e.kind.value, e.consumer) for _, e in self.model._log]
        assert self.client is not None
        out = []
        for _, entry in self.client.xrange(f"presence:{{{Q}}}:events"):
            for field in entry:
                if field.startswith(b"c"):
                    out.append((entry[b"k"].decode(), field[1:].decode()))
        return out


class _As:
    """The model registry beating as another process (`instance`): one store, two tokens."""

    def __init__(self, model: ConsumerPresenceRegistry, instance: str) -> None:
        self._model, self._instance = model, instance

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._model, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._model._instance = self._instance
            return attr(*args, **kwargs)

        return call


@pytest.fixture
def store_of(request: pytest.FixtureRequest) -> Any:
    return lambda backend: Store(request, backend)


@BOTH
def test_capacity_is_kept_by_a_beat_without_it_and_replaced_by_one_with_it(
    store_of: Any, backend: str
) -> None:
    store = store_of(backend)
    reg = store.reg()
    assert reg.heartbeat(Q, G, "w1", 2, now_ns=T0, capacity=8) == BeatReply(False)
    assert store.stored("w1")[4] == "8"
    reg.heartbeat(Q, G, "w1", 3, now_ns=T0 + MS)
    assert store.stored("w1")[2:5] == ["3", "0", "8"]
    reg.heartbeat(Q, G, "w1", 3, now_ns=T0 + 2 * MS, capacity=0)
    assert store.stored("w1")[4] == "0"
    reg.heartbeat_many([BeatSpec(Q, G, "w1", 1, capacity=16)], now_ns=T0 + 3 * MS)
    assert store.stored("w1")[4] == "16"
    reg.heartbeat_many([(Q, G, "w1", 1)], now_ns=T0 + 4 * MS)
    assert store.stored("w1")[4] == "16"
    assert len(store.stored("w1")) == 9
    assert store.stored("w1")[7] == "one"


@BOTH
def test_draining_sets_the_flag_once_with_an_event_and_false_clears_it(
    store_of: Any, backend: str
) -> None:
    store = store_of(backend)
    reg = store.reg()
    reg.heartbeat(Q, G, "w1", now_ns=T0)
    reg.heartbeat(Q, G, "w1", now_ns=T0 + MS, draining=True)
    assert store.stored("w1")[5] == "1"
    reg.heartbeat(Q, G, "w1", now_ns=T0 + 2 * MS)  # None keeps it, no second event
    reg.heartbeat(Q, G, "w1", now_ns=T0 + 3 * MS, draining=True)
    assert store.stored("w1")[5] == "1"
    reg.heartbeat(Q, G, "w1", now_ns=T0 + 4 * MS, draining=False)
    assert store.stored("w1")[5] == "0"
    reg.heartbeat_many([BeatSpec(Q, G, "w1", draining=True)], now_ns=T0 + 5 * MS)
    assert store.stored("w1")[5] == "1"
    assert store.kinds() == [("joined", "w1"), ("draining", "w1"), ("draining", "w1")]


@ALL
def test_a_drain_request_reaches_the_next_beats_until_a_draining_beat(
    store_of: Any, backend: str
) -> None:
    store = store_of(backend)
    reg = store.reg()
    reg.heartbeat(Q, G, "w1", now_ns=T0)
    reg.heartbeat(Q, G, "w2", now_ns=T0)
    assert reg.request_drain(Q, G, "w1", now_ns=T0 + MS) is True
    assert reg.request_drain(Q, G, "nobody", now_ns=T0 + MS) is False
    assert store.stored("w1")[5] == "2"
    assert reg.heartbeat(Q, G, "w1", now_ns=T0 + 2 * MS) == BeatReply(True)
    assert reg.heartbeat(Q, G, "w2", now_ns=T0 + 2 * MS) == BeatReply(False)
    written = reg.heartbeat_many([(Q, G, "w1", 0), (Q, G, "w2", 0)], now_ns=T0 + 3 * MS)
    assert isinstance(written, Written)
    assert written == 2
    assert written.drain_requested == {(Q, G, "w1")}
    # a progressed beat answers as well (it goes by heartbeat_many)
    assert reg.heartbeat(Q, G, "w1", now_ns=T0 + 4 * MS, progressed=True).drain_requested
    # the draining beat takes the request: bit 2 cleared, bit 1 set
    assert reg.heartbeat(Q, G, "w1", now_ns=T0 + 5 * MS, draining=True) == BeatReply(False)
    assert store.stored("w1")[5] == "1"
    assert reg.heartbeat(Q, G, "w1", now_ns=T0 + 6 * MS) == BeatReply(False)
    # batched: a request, then a draining BeatSpec clears it in the same call's reply
    reg.request_drain(Q, G, "w2", now_ns=T0 + 7 * MS)
    written = reg.heartbeat_many([BeatSpec(Q, G, "w2", draining=True)], now_ns=T0 + 8 * MS)
    assert written.drain_requested == frozenset()
    assert store.kinds() == [
        ("joined", "w1"),
        ("joined", "w2"),
        ("drain_requested", "w1"),
        ("draining", "w1"),
        ("drain_requested", "w2"),
        ("draining", "w2"),
    ]


@ALL
def test_two_instances_alternating_on_one_consumer_conflict_once(
    store_of: Any, backend: str
) -> None:
    store = store_of(backend)
    a, b = store.reg("proc-a"), store.reg("proc-b")
    for i in range(6):
        (a if i % 2 == 0 else b).heartbeat(Q, G, "w1", now_ns=T0 + i * MS)
    stored = store.stored("w1")
    assert stored[6] == str(T0 + 5 * MS)  # conflict_ns: the last duplicate beat
    assert (stored[7], stored[8]) == ("proc-b", "proc-a")
    # the first switch looks like a restart; the switch back is the duplicate
    assert store.kinds() == [("joined", "w1"), ("restarted", "w1"), ("conflict", "w1")]
    if store.client is not None:  # the conflict entry carries both tokens
        entries = store.client.xrange(f"presence:{{{Q}}}:events")
        fields = {k: v for _, e in entries for k, v in e.items() if e[b"k"] == b"conflict"}
        assert fields[b"iw1"] == b"proc-b proc-a"


@BOTH
def test_a_restart_is_an_event_and_no_conflict(store_of: Any, backend: str) -> None:
    store = store_of(backend)
    old, new = store.reg("old-1"), store.reg("new-2")
    old.heartbeat(Q, G, "w1", now_ns=T0)
    old.heartbeat(Q, G, "w1", now_ns=T0 + MS)
    for i in range(2, 5):
        new.heartbeat(Q, G, "w1", now_ns=T0 + i * MS)
    stored = store.stored("w1")
    assert stored[6:] == ["0", "new-2", "old-1"]
    assert store.kinds() == [("joined", "w1"), ("restarted", "w1")]


@BOTH
def test_a_new_instance_after_the_ttl_is_a_recovery_not_a_restart(
    store_of: Any, backend: str
) -> None:
    store = store_of(backend)
    old, new = store.reg("old-1"), store.reg("new-2")
    old.heartbeat(Q, G, "w1", now_ns=T0)
    new.heartbeat(Q, G, "w1", now_ns=T0 + 40_000 * MS)  # past the 30 s TTL
    assert store.stored("w1")[6:] == ["0", "new-2", "old-1"]
    assert store.kinds() == [("joined", "w1"), ("recovered", "w1")]


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_mode_1_writes_v1_values_logs_nothing_new_and_refuses_drains(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    client.set("presence:protocol", "1")
    a = make_registry(request, backend, instance="a")
    b = make_registry(request, backend, instance="b")
    assert a.heartbeat(Q, G, "w1", 2, now_ns=T0, capacity=5, draining=True) == BeatReply(False)
    b.heartbeat(Q, G, "w1", 2, now_ns=T0 + MS)
    a.heartbeat(Q, G, "w1", 2, now_ns=T0 + 2 * MS, progressed=True)
    a.heartbeat_many([BeatSpec(Q, G, "w2", 1, capacity=3, draining=True)], now_ns=T0 + 3 * MS)
    values = client.hgetall(f"presence:{{{Q}}}:{G}:c")
    assert values[b"w1"].decode().split(" ") == [str(T0), str(T0 + 2 * MS), "2", str(T0 + 2 * MS)]
    assert len(values[b"w2"].split(b" ")) == 3
    before = client.hgetall(f"presence:{{{Q}}}:{G}:c")
    with pytest.raises(PresenceProtocolError, match="migrate"):
        a.request_drain(Q, G, "w1", now_ns=T0 + 4 * MS)
    assert client.hgetall(f"presence:{{{Q}}}:{G}:c") == before
    kinds = {e[b"k"] for _, e in client.xrange(f"presence:{{{Q}}}:events")}
    assert kinds == {b"joined"}
    assert client.get("presence:protocol") == b"1"  # the claim (SET NX) leaves it


@pytest.mark.parametrize("backend", ["redis"])
def test_migrate_flips_to_2_and_seeds_the_fleet_indexes(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    client.set("presence:protocol", "1")
    reg = make_registry(request, backend)
    reg.heartbeat(Q, G, "w1", now_ns=T0)
    reg.heartbeat(Q, G, "w2", now_ns=T0 + 5 * MS)
    reg.heartbeat("mail", "send", "w1", now_ns=T0 + 7 * MS)
    client.delete("presence:newest", "presence:oldest")  # as if v1 clients had written them
    done = reg.migrate()
    assert (int(done), done.seeded, done.was) == (0, 2, "1")
    assert client.get("presence:protocol") == PROTOCOL_VERSION.encode() == b"2"
    newest = dict(client.zrange("presence:newest", 0, -1, withscores=True))
    oldest = dict(client.zrange("presence:oldest", 0, -1, withscores=True))
    data = f"presence:{{{Q}}}:{G}:c".encode()
    assert newest[data] == (T0 + 5 * MS) // 1000
    assert oldest[data] == T0 // 1000
    assert newest[b"presence:{mail}:send:c"] == (T0 + 7 * MS) // 1000
    # v2 now: a drain request goes through, the next beat writes a v2 value
    assert reg.request_drain(Q, G, "w1", now_ns=T0 + 8 * MS) is True
    assert reg.heartbeat(Q, G, "w1", now_ns=T0 + 9 * MS) == BeatReply(True)
    assert len(client.hget(f"presence:{{{Q}}}:{G}:c", "w2").split(b" ")) == 3
    assert len(client.hget(f"presence:{{{Q}}}:{G}:c", "w1").split(b" ")) == 9
    again = reg.migrate()  # resumable: seeding again changes nothing
    assert (int(again), again.seeded, again.was) == (0, 2, "2")
    assert dict(client.zrange("presence:oldest", 0, -1, withscores=True)) == oldest


@pytest.mark.parametrize("backend", ["redis"])
def test_a_fresh_prefix_is_claimed_for_2(request: pytest.FixtureRequest, backend: str) -> None:
    client = raw_client(request, backend)
    reg = make_registry(request, backend)
    reg.heartbeat(Q, G, "w1", now_ns=T0)
    assert client.get("presence:protocol") == b"2"
    client.set("presence:protocol", "3")
    with pytest.raises(PresenceProtocolError, match="version 2"):
        make_registry(request, backend).heartbeat(Q, G, "w1", now_ns=T0)


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"capacity": True}, TypeError, "capacity"),
    ({"capacity": -1}, ValueError, "capacity"),
    ({"capacity": 2**32}, ValueError, "capacity"),
    ({"capacity": 1.0}, TypeError, "capacity"),
    ({"draining": 1}, TypeError, "draining"),
    ({"draining": "yes"}, TypeError, "draining"),
]


@BOTH
@pytest.mark.parametrize(("kwargs", "error", "named"), BAD)
def test_bad_capacity_or_draining_writes_nothing(
    store_of: Any, backend: str, kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    store = store_of(backend)
    reg = store.reg()
    with pytest.raises(error, match=named):
        reg.heartbeat(Q, G, "w1", now_ns=T0, **kwargs)
    with pytest.raises(error, match=rf"beats\[1\]: {named}"):
        reg.heartbeat_many([(Q, G, "w0", 0), BeatSpec(Q, G, "w1", **kwargs)], now_ns=T0)
    assert reg.snapshot(now_ns=T0) == []


@pytest.mark.parametrize("token", ["", "a b", "x" * 33, "ü", "a:b", 7, b"ab"])
def test_a_bad_instance_token_is_refused(token: Any) -> None:
    error = TypeError if not isinstance(token, str) else ValueError
    with pytest.raises(error, match="instance"):
        ConsumerPresenceRegistry(instance=token)
    with pytest.raises(error, match="instance"):
        RedisPresenceRegistry(object(), instance=token)


def test_the_process_instance_is_16_hex_digits_and_redrawn_after_fork() -> None:
    import os

    token = process_instance()
    assert len(token) == 16
    assert int(token, 16) >= 0
    assert process_instance() == token
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.write(write, process_instance().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    assert len(child) == 16
    assert child != token


def test_written_is_an_int_with_the_drains() -> None:
    written = Written(3, [(Q, G, "w1")])
    assert written == 3
    assert written + 1 == 4
    assert written.drain_requested == frozenset({(Q, G, "w1")})
    assert Written(2).drain_requested == frozenset()
    import pickle

    again = pickle.loads(pickle.dumps(written))
    assert again == 3
    assert again.drain_requested == written.drain_requested


@BOTH
def test_a_new_instance_drops_what_the_old_one_said_or_was_asked(
    store_of: Any, backend: str
) -> None:
    """Draining and a pending drain request were the old process's: a restart clears both
    (lib.lua's beat_v2), a duplicate (the old token again, while active) does not."""
    store = store_of(backend)
    old, new = store.reg("old-1"), store.reg("new-2")
    old.heartbeat(Q, G, "w1", now_ns=T0, draining=True, capacity=4)
    old.request_drain(Q, G, "w1", now_ns=T0 + MS)
    assert store.stored("w1")[4:6] == ["4", "3"]
    assert new.heartbeat(Q, G, "w1", now_ns=T0 + 2 * MS) == BeatReply(False)
    assert store.stored("w1")[4:6] == ["4", "0"]  # capacity stays: it is the consumer's
    new.heartbeat(Q, G, "w1", now_ns=T0 + 3 * MS, draining=True)
    old.request_drain(Q, G, "w1", now_ns=T0 + 4 * MS)
    assert old.heartbeat(Q, G, "w1", now_ns=T0 + 5 * MS) == BeatReply(True)  # a duplicate
    assert store.stored("w1")[5:] == ["3", str(T0 + 5 * MS), "old-1", "new-2"]


@pytest.mark.parametrize("backend", ["redis"])
@pytest.mark.parametrize("batched", [False, True], ids=["heartbeat", "heartbeat_many"])
def test_a_beat_back_in_time_lowers_p_oldest(
    request: pytest.FixtureRequest, backend: str, batched: bool
) -> None:
    """V2SPEC: ``ZADD P:oldest LT`` when a consumer joins or a beat moves it back in time,
    whether or not P:newest is due (heartbeat.lua does; heartbeat_many.lua only lowered it
    together with a due P:newest)."""
    client = raw_client(request, backend)
    reg = make_registry(request, backend)
    reg.heartbeat(Q, G, "w1", now_ns=T0 + 3 * MS)
    if batched:
        reg.heartbeat_many([(Q, G, "w1", 0)], now_ns=T0 + 3 * MS - 1_000)
    else:
        reg.heartbeat(Q, G, "w1", now_ns=T0 + 3 * MS - 1_000)
    data = f"presence:{{{Q}}}:{G}:c"
    assert client.zscore("presence:oldest", data) == (T0 + 3 * MS - 1_000) // 1_000
