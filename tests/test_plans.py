"""Plans without I/O: what the single-beat fast path sends, byte for byte."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.connection import PythonRespSerializer

from redis_presence import (
    DEFAULT_PRESENCE_TTL_MS,
    DEFAULT_STUCK_AFTER_MS,
    TTL_CACHE_MS,
    AsyncRedisPresenceRegistry,
    PresenceReadOnlyError,
    RedisPresenceRegistry,
    _wire,
)
from redis_presence._wire import Wire, resp
from redis_presence.beats import BeatReply
from redis_presence.keys import INDEX_MARK_MS
from redis_presence.plans import (
    MAX_CACHED_GROUPS,
    Command,
    Limits,
    Partial,
    Plan,
    Planner,
    ScriptCall,
    Single,
    alongside,
)
from redis_presence.scripts import script
from redis_presence.validation import DelayedBeat

T0 = 1_796_000_000_123_456_000
BEATS = [
    ("q", "g", "c", 0),
    ("q", "g", "d", 7),  # same group: from the cache
    ("a:b", "{x}", "ü", 2**32 - 1),
    ("q", "h", "c", 1),
]


ENCODERS: dict[str, Callable[[Any], Any] | None] = {
    "str": None,
    "utf-8": redis.Redis().get_encoder().encode,
    "latin-1": redis.Redis(encoding="latin-1").get_encoder().encode,
}


def same(value: Any) -> Any:
    return value


@pytest.mark.parametrize("clustered", [False, True], ids=["standalone", "cluster"])
@pytest.mark.parametrize("now", [None, T0], ids=["server-clock", "now_ns"])
@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_single_beat_is_one_prebuilt_call_of_the_lean_script(
    clustered: bool, now: int | None, encoding: str
) -> None:
    encode = ENCODERS[encoding] or same
    codec = (encoding, "strict")
    wire = Wire(codec, prebuilt=True)  # how a registry of that encoding writes it
    planner = Planner("präsenz", clustered=clustered)
    function = script("heartbeat").function
    seen: set[tuple[str, str]] = set()
    claim = [Command("SET", (planner.keys.protocol, "2", "NX"))]  # after the first beat only
    for queue, group, consumer, lease in BEATS:
        gk = planner.keys.group(queue, group)
        plan = planner.heartbeat(queue, group, consumer, lease, now)
        batch = next(plan)
        if (queue, group) not in seen:  # a new group: its shared TTL is read first, once
            seen.add((queue, group))  # (with the protocol version's, first checked)
            assert all(isinstance(request, Command) and request.name == "GET" for request in batch)
            assert {request.args[0] for request in batch} <= {
                planner.keys.ttl,
                gk.ttl,
                planner.keys.protocol,
            }
            batch = plan.send([None] * len(batch))  # nothing stored: the default TTL
        (call,) = batch
        assert isinstance(call, ScriptCall)
        assert call.script == script("heartbeat")
        # KEYS: the group's sorted set, hash, mark, event log and metadata, then the indexes,
        # the epoch marker, the protocol version and the fleet indexes on a standalone server;
        # ARGV: the TTL, the log's length and lifetime, the clock guard (DEFAULT_MAX_FUTURE_MS),
        # now, the beat (capacity and draining '' kept, the instance token), then the mark's
        # lifetime and the mode read on a cluster.
        now_arg = "" if now is None else str(now)
        keys: tuple[str, ...] = (gk.hb, gk.data, gk.mark, gk.events, gk.meta)
        if not clustered:
            keys += (
                planner.keys.groups,
                planner.keys.events,
                planner.keys.epoch,
                planner.keys.protocol,
                planner.keys.newest,
                planner.keys.oldest,
            )
        tail = (INDEX_MARK_MS, "2") if clustered else ()
        expected = (
            "FCALL",
            function,
            len(keys),
            *keys,
            30_000,
            10_000,
            86_400_000,
            10_000,
            now_arg,
            consumer,
            lease,
            "",
            "",
            planner.scope.token(),
            *tail,
        )
        # The same bytes on the wire: what the client would encode, some of it done already.
        assert [encode(arg) for arg in call.args] == [encode(arg) for arg in expected]
        if clustered:
            # A reply of [1, 0] (a group without a mark, no event) lists the group.
            assert plan.send([[1, 0]]) == [Command("ZADD", (planner.keys.groups, 0, gk.member))]
            if claim:
                assert plan.send([1]) == claim
                claim = []
            with pytest.raises(StopIteration):
                plan.send([1])
        else:
            if claim:
                assert plan.send([0]) == claim
                claim = []
            with pytest.raises(StopIteration):
                plan.send([0])
            again = planner.heartbeat(queue, group, consumer, lease, now)
            # Standalone, TTL known: one call and nothing else, sent as it is.
            assert isinstance(again, Single)
            assert [encode(arg) for arg in again.args] == [encode(arg) for arg in expected]
            if ENCODERS[encoding] is not None:  # and written, prebuilt, as the client would
                assert wire.single(again) == client_bytes(codec, expected)
                assert wire.single(again) == client_bytes(codec, expected)  # its head kept


CODECS = [("utf-8", "strict"), ("latin-1", "strict"), ("utf-8", "replace")]


def client_bytes(codec: tuple[str, str], command: tuple[Any, ...]) -> bytes:
    """What redis-py's own pure-Python packer writes for `command` on a client of that
    encoding (with hiredis installed, redis-py packs with hiredis instead, and so does a
    registry: `test_a_registry_prebuilds_the_bytes_its_client_writes`)."""
    encoder = redis.Redis(encoding=codec[0], encoding_errors=codec[1]).get_encoder()
    packer = PythonRespSerializer(6000, encoder.encode)  # redis-py's default cutoff
    return b"".join(packer.pack(*command))  # type: ignore[no-untyped-call]


@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.integers(min_value=-(2**63), max_value=2**64),
            st.binary(max_size=40),
        ),
        max_size=30,
    ),
    st.sampled_from(CODECS),
)
def test_resp_writes_what_the_client_writes(args: list[Any], codec: tuple[str, str]) -> None:
    command = ("EVALSHA", "0" * 40, *args)
    try:
        expected = client_bytes(codec, command)
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            resp(command, codec)
        return
    assert resp(command, codec) == expected


def test_resp_refuses_what_it_cannot_pack() -> None:
    for bad in (1.5, None, True, ["x"]):
        with pytest.raises(TypeError, match="cannot pack"):
            resp(("SET", "k", bad), ("utf-8", "strict"))


@pytest.mark.parametrize("codec", CODECS, ids="/".join)
def test_batched_calls_are_sent_prebuilt(codec: tuple[str, str]) -> None:
    """Each call of a split batch (Limits.beats = 2 here) goes as the RESP the client would
    write for its arguments, all in one write, when the registry writes on its connections
    itself (`Wire.prebuilt`); delayed beats, with and without progress, and a prune's
    calls too. Other script calls, and every call of a registry that does not, go through
    the client."""
    delayed: list[DelayedBeat] = [(q, g, c, lease, 1_500) for q, g, c, lease in BEATS]
    delayed[1] = (*delayed[1], 700)  # this one recorded progress
    plans: list[Callable[[Planner], Plan[int]]] = [
        lambda p: p.heartbeat_many(BEATS, T0),
        lambda p: p.heartbeat_delayed(delayed),
    ]
    wire = Wire(codec, prebuilt=True)
    for make in plans:
        plan = make(Planner("p", limits=Limits(beats=2)))
        batch = next(plan)  # the shared TTLs first: plain GETs, prebuilt too (PREBUILT_READS)
        assert all(isinstance(r, Command) and r.name == "GET" for r in batch)
        assert wire.batch(batch) == b"".join(
            client_bytes(codec, (r.name, *r.args)) for r in batch if isinstance(r, Command)
        )
        calls = plan.send([None] * len(batch))
        assert isinstance(calls, Partial)
        assert len(calls) == 2
        expected = [client_bytes(codec, c.args) for c in calls]
        assert [wire.call(c) for c in calls] == expected
        assert wire.batch(calls) == b"".join(expected)
        assert Wire(codec).batch(calls) is None
        assert all(Wire(codec).call(c) is None for c in calls)
    planner = Planner("p")
    prune = planner.prune_expired(T0, 1_000)
    next(prune)  # the version, the sizes of the index and the fleet indexes, the least TTL
    prune.send([None, 1, 0, 0, []])  # P:newest and P:oldest empty: every group is visited
    batch = prune.send([[planner.keys.group("q", "g").member], None])  # the index's page
    assert [wire.call(c) for c in batch] == [client_bytes(codec, c.args) for c in batch]
    assert [Wire(codec).call(c) for c in batch] == [None]


def test_a_registry_prebuilds_the_bytes_its_client_writes() -> None:
    """A registry's batched calls go as exactly what its client's connections would write
    for them: `_wire.resp` without hiredis, ``hiredis.pack_command`` where redis-py packs
    with hiredis (run with and without hiredis installed)."""
    client = redis.Redis()
    registry = RedisPresenceRegistry(client, prefix="p")
    planner = registry.plans
    beats = [(q, g, f"{c}-é-{i}", lease) for i, (q, g, c, lease) in enumerate(BEATS * 3)]
    plan = planner.heartbeat_many(beats, T0)
    batch = next(plan)
    batch = plan.send([None] * len(batch))  # the shared TTLs, then the calls
    connection = client.connection_pool.make_connection()
    calls = [c for c in batch if isinstance(c, ScriptCall)]
    assert calls
    for call in calls:
        written = b"".join(connection.pack_command(*call.args))  # type: ignore[no-untyped-call]
        assert registry._wire.call(call) == written
    client.close()


def test_an_async_registry_prebuilds_the_bytes_its_client_writes() -> None:
    """The asyncio twin: its batched calls go as what a ``redis.asyncio`` connection of the
    same encoding writes (always packed in Python, with the client's encoder)."""
    for encoding in ("utf-8", "latin-1"):
        client = redis.asyncio.Redis(encoding=encoding)
        registry = AsyncRedisPresenceRegistry(client, prefix="p")
        plan = registry.plans.heartbeat_many(BEATS, T0)
        batch = next(plan)
        calls = plan.send([None] * len(batch))
        connection = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
        assert calls
        for call in calls:
            assert isinstance(call, ScriptCall)
            assert registry._wire.call(call) == b"".join(connection.pack_command(*call.args))


def test_an_async_single_connection_registry_prebuilds_nothing() -> None:
    """An asyncio ``single_connection_client`` locks its one connection itself, so the
    registry sends through it and builds no RESP that nothing would send."""
    single = redis.asyncio.Redis(single_connection_client=True)
    assert not AsyncRedisPresenceRegistry.sends_prebuilt(single)
    assert AsyncRedisPresenceRegistry.sends_prebuilt(redis.asyncio.Redis())
    registry = AsyncRedisPresenceRegistry(single, prefix="p")
    assert not registry._wire.prebuilt
    plan = registry.plans.heartbeat_many(BEATS, T0)
    batch = next(plan)
    calls = plan.send([None] * len(batch))
    assert calls
    assert all(registry._wire.call(c) is None for c in calls)


def test_the_hiredis_packer_is_used_exactly_when_redis_py_uses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`hiredis_packer` follows redis-py's own rule: hiredis available and no
    ``command_packer`` given to the pool; otherwise the registry packs with `_wire.resp`."""
    fake = types.ModuleType("hiredis")

    def pack_command(command: tuple[Any, ...]) -> bytes:
        return b"packed by hiredis"

    fake.pack_command = pack_command  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hiredis", fake)
    monkeypatch.setattr(_wire, "HIREDIS_AVAILABLE", False)
    assert _wire.hiredis_packer(redis.Redis()) is None
    monkeypatch.setattr(_wire, "HIREDIS_AVAILABLE", True)
    assert _wire.hiredis_packer(redis.Redis()) is pack_command
    own = redis.Redis(connection_pool=redis.ConnectionPool(command_packer=object()))
    assert _wire.hiredis_packer(own) is None
    assert _wire.hiredis_packer(object()) is None  # no pool: nothing to follow
    # An asyncio client packs in Python with its encoder, hiredis or not.
    assert _wire.hiredis_packer(redis.asyncio.Redis()) is None
    registry = RedisPresenceRegistry(redis.Redis(encoding="latin-1"), prefix="p")
    plan = registry.plans.heartbeat_many(BEATS, T0)
    batch = next(plan)
    calls = plan.send([None] * len(batch))
    assert calls
    assert all(registry._wire.call(c) == b"packed by hiredis" for c in calls)


def test_the_single_beat_cache_is_bounded() -> None:
    planner = Planner("p", clustered=False)
    for i in range(MAX_CACHED_GROUPS + 10):
        plan = planner.heartbeat("q", f"g{i}", "c", 0, None)
        batch = next(plan)
        if batch[0].script if isinstance(batch[0], ScriptCall) else False:
            continue
        plan.send([None] * len(batch))
        assert len(planner.beat_cache) <= MAX_CACHED_GROUPS


def replace(registry: Any, old: str, new: str) -> Plan[bool]:
    """The README's composition: deregister `old` and register `new` in one plan."""
    existed = yield from registry.plans.deregister("orders", "billing", old)
    yield from registry.plans.heartbeat_many([("orders", "billing", new, 0)], T0)
    return bool(existed)


@pytest.mark.parametrize("backend", ["fakeredis", "redis"])
def test_plans_compose_and_any_registry_executes_them(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = request.getfixturevalue("fake_client" if backend == "fakeredis" else "redis_client")
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("orders", "billing", "worker-1", now_ns=T0)
    assert registry.execute(replace(registry, "worker-1", "worker-2")) is True
    assert [row.consumer for row in registry.snapshot(now_ns=T0)] == ["worker-2"]
    assert registry.execute(replace(registry, "worker-1", "worker-3")) is False
    assert len(registry) == 2


def test_a_bad_argument_is_refused_when_the_plan_is_built() -> None:
    planner = Planner("p")
    with pytest.raises(ValueError, match="queue must be a non-empty string"):
        planner.deregister("", "g", "c")
    with pytest.raises(TypeError, match="lease_count must be an int"):
        planner.heartbeat("q", "g", "c", 1.5)  # type: ignore[arg-type]
    reader = Planner("p", read_only=True)
    with pytest.raises(PresenceReadOnlyError):
        reader.prune_expired()
    call, version = next(reader.count_active_by_group(now_ns=T0))
    assert isinstance(call, Command)  # the index first (with the protocol version)
    assert (call.name, version) == ("ZRANGEBYLEX", Command("GET", ("p:protocol",)))


@pytest.mark.parametrize("backend", ["fakeredis", "redis", "cluster"])
def test_alongside_sends_foreign_commands_with_a_plan_in_one_round_trip(
    request: pytest.FixtureRequest, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = {"fakeredis": "fake_client", "redis": "redis_client", "cluster": "cluster_client"}
    client = request.getfixturevalue(fixture[backend])
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("stream", "readers", "r1", now_ns=T0)  # the script is loaded
    client.xadd("stream", {"k": "v"})
    sent: list[int] = []
    if backend != "cluster":  # one pipeline carries the beat and the XLEN
        execute = redis.client.Pipeline.execute

        def counted(pipe: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(len(pipe.command_stack))
            return execute(pipe, *args, **kwargs)

        monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
    beat = registry.plans.heartbeat("stream", "readers", "r1", 2, T0 + 1)
    result, (length,) = registry.execute(alongside(beat, [Command("XLEN", ("stream",))]))
    assert (result, length) == (BeatReply(False), 1)
    if backend != "cluster":
        assert sent == [2]
    (row,) = registry.snapshot(now_ns=T0 + 1)
    assert (row.last_heartbeat_ns, row.lease_count) == (T0 + 1, 2)
    # A plan of several batches keeps its own replies; the extra ones come back apart.
    deregistered, (length,) = registry.execute(
        alongside(
            registry.plans.deregister("stream", "readers", "r1"), [Command("XLEN", ("stream",))]
        )
    )
    assert (deregistered, length, len(registry)) == (True, 1, 0)


def test_the_ttl_a_reader_shows_is_the_one_its_reads_used(fake_client: Any) -> None:
    """`ttl_in_use` and `stuck_after_in_use` answer from the planner's one cache of shared
    settings (what its reads count with), read again after TTL_CACHE_MS, with the source."""
    now = [0]
    planner = Planner("p", clock=lambda: now[0])
    run = RedisPresenceRegistry(fake_client, prefix="p").execute
    owner = RedisPresenceRegistry(fake_client, prefix="p")
    owner.heartbeat("q", "g", "c", now_ns=T0 - 25_000 * 10**6)
    assert run(planner.ttl_in_use()) == (DEFAULT_PRESENCE_TTL_MS, "default")
    assert run(planner.ttl_in_use("q", "g")) == (DEFAULT_PRESENCE_TTL_MS, "default")
    owner.set_ttl(20_000)
    owner.set_ttl(40_000, queue="q", group="g")
    owner.set_stuck_after(1_000, queue="q", group="g")
    fresh = planner.ttl_in_use("q", "g")
    with pytest.raises(StopIteration):  # trusted: nothing to send
        next(fresh)
    (row,) = run(planner.snapshot(now_ns=T0))
    assert row.state.value == "active"  # 25 s old under the default 30 s the cache holds
    assert run(planner.stuck_after_in_use("q", "g")) == (1_000, "group")  # never read: now
    now[0] += TTL_CACHE_MS * 10**6 + 1
    assert run(planner.ttl_in_use()) == (20_000, "prefix")
    assert run(planner.ttl_in_use("q", "g")) == (40_000, "group")
    assert run(planner.ttl_in_use("q", "other")) == (20_000, "prefix")
    assert run(planner.stuck_after_in_use()) == (DEFAULT_STUCK_AFTER_MS, "default")
    (row,) = run(planner.snapshot(now_ns=T0))
    assert row.state.value == "active"  # under the group's 40 s
    waiting = planner.ttl_in_use("q", "new")  # the prefix's is fresh: one GET
    (ask,) = next(waiting)
    planner.settings_cache.forget()  # another plan emptied the cache while this one waited
    with pytest.raises(StopIteration) as done:  # it answers with what it saw and read
        waiting.send([fake_client.get(*ask.args)])
    assert done.value.value == (20_000, "prefix")
    with pytest.raises(ValueError, match="one group's"):
        planner.ttl_in_use("q", None)
