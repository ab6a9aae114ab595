"""Bounded work: no command does more than the documented bounds, and a streaming read that
other writers interleave with stays sound.

- On a real server with 20,000 groups (and a few groups of thousands of consumers), every
  command counts, prune and snapshot send is checked against `Limits` from the server's own
  log of them (SLOWLOG with a threshold of 0, which records each command with its
  arguments and its duration); the longest is reported in the run numbers.
- A hypothesis state machine interleaves heartbeats, deregisters and prunes between the
  chunks of one `iter_snapshot` (every bound 2): no row twice, no consumer that was tracked
  throughout missing, and every row a state its consumer really had.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import redis
from conftest import RUN_SUMMARY
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from servers import RedisServer

from redis_presence import ConsumerPresence, PresenceState, RedisPresenceRegistry
from redis_presence.plans import Limits

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000
GROUPS = 20_000
BIG = {("big", f"g{i}"): 2_500 for i in range(3)}  # read in HSCAN steps


def fill(registry: RedisPresenceRegistry) -> None:
    """GROUPS one-consumer groups, some expired, and the BIG groups, half of them expired."""
    beats = [(f"q{i % 500:03d}", f"g{i:05d}", "c", 0) for i in range(GROUPS)]
    for start in range(0, len(beats), 5_000):
        registry.heartbeat_many(
            beats[start : start + 5_000], now_ns=T0 - (start // 5_000 % 2) * 90_000 * MS
        )
    for (queue, group), n in BIG.items():
        old = [(queue, group, f"c{i:05d}", i) for i in range(0, n, 2)]
        new = [(queue, group, f"c{i:05d}", i) for i in range(1, n, 2)]
        registry.heartbeat_many(old, now_ns=T0 - 90_000 * MS)
        registry.heartbeat_many(new, now_ns=T0)


class Logged(NamedTuple):
    """One command in the slow log: its duration, its arguments (SLOWLOG keeps the first 31
    of a long command), how many it had in all, and whether a script ran it."""

    usec: int
    args: list[str]
    argc: int
    inner: bool


MORE = re.compile(r"\.\.\. \((\d+) more arguments\)$")


def logged(client: redis.Redis) -> list[Logged]:
    """Every command in the slow log, oldest first (a script's own commands come before the
    script call that ran them)."""
    out = []
    for entry in reversed(client.slowlog_get(1_000_000)):
        raw = entry["command"]
        text = raw.decode() if isinstance(raw, bytes) else " ".join(map(str, raw))
        more = MORE.search(text)
        args = (text[: more.start()] if more else text).split()
        argc = len(args) + (int(more.group(1)) if more else 0)
        inner = entry.get("client_address") in (b"?:0", "?:0")
        out.append(Logged(int(entry["duration"]), args, argc, inner))
    return out


def p99(values: list[int]) -> int:
    return sorted(values)[len(values) * 99 // 100]


def limit(args: list[str]) -> int:
    """The count of a ``... LIMIT offset count`` command."""
    return int(args[args.index("LIMIT") + 2])


def work(
    command: Logged, inner: list[Logged], sizes: dict[str, int], bounds: Limits
) -> tuple[str, int, int]:
    """What one command the package sent does, by its arguments: (what, how many, the
    documented bound). A script call is judged by what its own commands (`inner`) did."""
    name, args = command.args[0].upper(), command.args
    if name == "ZRANGEBYLEX":  # an index page
        return "groups", limit(args), bounds.groups
    if name == "HSCAN":
        return "consumers", int(args[args.index("COUNT") + 1]), bounds.consumers
    if name == "HGETALL":
        return "consumers", sizes.get(args[1], 1), bounds.consumers
    if name == "HMGET":
        return "consumers", command.argc - 2, bounds.consumers
    fleet_index = len(args) > 1 and args[1].endswith((":events", ":newest", ":oldest"))
    if name == "ZRANGEBYSCORE":  # ties in counts, or the event index, or a fleet index
        return (
            ("groups" if fleet_index else "consumers"),
            limit(args),
            (bounds.groups if fleet_index else bounds.consumers),
        )
    if name == "ZRANGE" and args[1].endswith(":groups"):  # a page of the index by rank
        return "groups", int(args[3]) - int(args[2]) + 1, bounds.groups
    if name == "ZMSCORE":  # a fleet index's scores of a page of groups
        return "groups", command.argc - 2, bounds.groups
    if name in ("ZREM", "ZADD"):  # the index, after a prune
        return "groups", command.argc - 2, bounds.groups
    if name == "EVALSHA":  # prune.lua: KEYS are 4 or 5 a group, then the two indexes
        numkeys = int(args[2])
        starts = [i for i, key in enumerate(args[3 : 3 + numkeys]) if key.endswith(":hb")]
        per_group = starts[1] - starts[0] if len(starts) > 1 else numkeys - 2  # 4 or 5 keys
        groups = (numkeys - 2) // per_group
        assert groups <= bounds.prune_groups, args[:3]
        ranges = [limit(c.args) for c in inner if c.args[0].upper() == "ZRANGEBYSCORE"]
        assert not ranges or ranges[0] <= bounds.prune_consumers, ranges[:1]  # its budget
        removed = sum(
            c.argc - 2 for c in inner if c.args[0].upper() == "ZREM" and c.args[1].endswith(":hb")
        )
        return "consumers", removed, bounds.prune_consumers
    if name in ("MGET", "EXISTS"):  # shared settings of groups (one key in a broker's script)
        return "groups", command.argc - 1, bounds.groups
    assert name in ("TIME", "GET", "HLEN", "ZCOUNT", "ZCARD", "SCRIPT"), args[:3]
    return "o1", 1, 1


@pytest.fixture(scope="module")
def fleet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(dir=tmp_path_factory.mktemp("redis-bounded")) as server:
        yield server


@pytest.mark.slow
def test_no_command_does_more_than_the_bounds_with_20000_groups(
    fleet_server: RedisServer, record_property: Any
) -> None:
    client = fleet_server.client()
    registry = RedisPresenceRegistry(client)
    bounds = registry.plans.limits
    assert bounds == Limits()  # the documented constants
    fill(registry)
    sizes = {f"presence:{{{q}}}:{g}:c": n for (q, g), n in BIG.items()}
    expired = sum(row.state is PresenceState.EXPIRED for row in registry.iter_snapshot(now_ns=T0))
    client.config_set("slowlog-max-len", 1_000_000)
    client.config_set("slowlog-log-slower-than", 0)
    longest: dict[str, Logged] = {}
    durations: dict[str, list[int]] = {}  # of every command, by operation
    most: dict[tuple[str, str], int] = {}  # (operation, command) -> the most work it did
    try:
        for name, operation in (
            ("counts", lambda: registry.count_active_by_group(now_ns=T0)),
            ("snapshot", lambda: registry.snapshot(now_ns=T0)),
            # A page of groups whose filter nobody passes: every index page and group read.
            (
                "group_page",
                lambda: registry.group_page(limit=1_000, match=lambda g: g.stale > 0, now_ns=T0),
            ),
            # The groups nobody reads, from the fleet indexes: each group's shared TTL (every
            # group by rank, its TTL and P:newest), then one TTL (a range of P:newest).
            (
                "idle",
                lambda: registry.group_page(
                    limit=1_000, match=lambda g: g.active == 0, now_ns=T0, attention=True
                ),
            ),
            (
                "idle one ttl",
                lambda: registry.group_page(
                    limit=1_000, now_ns=T0, ttl_ms=30_000, attention=True, match=None
                ),
            ),
            ("prune", lambda: registry.prune_expired(now_ns=T0)),
        ):
            client.slowlog_reset()
            result: Any = operation()
            commands = logged(client)
            inner: list[Logged] = []
            for command in commands:
                if command.inner:
                    inner.append(command)
                    continue
                if command.args[0].upper() in ("SLOWLOG", "CONFIG"):
                    continue
                what, n, bound = work(command, inner, sizes, bounds)
                inner = []
                assert n <= bound, (name, what, n, bound, command.args[:6])
                key = (name, command.args[0].upper())
                most[key] = max(most.get(key, 0), n)
                if command.usec > longest.get(name, Logged(0, [""], 0, False)).usec:
                    longest[name] = command
                durations.setdefault(name, []).append(command.usec)
            if name == "counts":
                assert len(result) == GROUPS // 2 + len(BIG)
            elif name == "snapshot":
                assert len(result) == GROUPS + sum(BIG.values())
            elif name == "group_page":
                assert result.groups == []
                assert not result.more
            elif name.startswith("idle"):
                assert len(result.groups) == 1_000  # half the groups hold expired consumers
            else:  # exactly what a snapshot at the same instant called expired
                assert result == expired == GROUPS // 2 + sum(n // 2 for n in BIG.values())
    finally:
        client.config_set("slowlog-log-slower-than", 10_000)
        client.close()
    # Every bounded path was taken: HSCAN steps, prune calls cut short by their budget.
    assert most[("snapshot", "HSCAN")] == bounds.consumers
    assert most[("prune", "EVALSHA")] == bounds.prune_consumers
    record_property(
        RUN_SUMMARY,
        "longest command with 20,000 groups (SLOWLOG; on a shared machine, includes time the "
        "server was not scheduled): "
        + ", ".join(
            f"{name} {c.usec} us ({c.args[0].upper()}; p99 {p99(durations[name])} us)"
            for name, c in longest.items()
        )
        + "; most work per command: "
        + ", ".join(f"{op} {cmd} {n}" for (op, cmd), n in sorted(most.items()) if n > 1),
    )


# --- a streaming read, interleaved -------------------------------------------------------

SMALL = Limits(*[2] * len(Limits._fields))
QUEUES = ("q1", "q2")
NAMES = ("g1", "g2", "g3")
CONSUMERS = ("a", "b", "c", "d", "e")


class StreamMachine(RuleBasedStateMachine):
    """One `iter_snapshot` at a time, taken a row at a time, with writes in between."""

    client: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.registry = RedisPresenceRegistry(StreamMachine.client, limits=SMALL)
        StreamMachine.client.flushall()
        self.now = T0
        self.stored: dict[tuple[str, str, str], set[tuple[int, int, int]]] = {}
        self.current: dict[tuple[str, str, str], tuple[int, int, int]] = {}
        self.rows: Iterator[ConsumerPresence] | None = None
        self.seen: list[ConsumerPresence] = []
        self.throughout: set[tuple[str, str, str]] = set()

    def _remember(self, key: tuple[str, str, str], value: tuple[int, int, int]) -> None:
        self.current[key] = value
        self.stored.setdefault(key, set()).add(value)

    @rule(
        q=st.sampled_from(QUEUES),
        g=st.sampled_from(NAMES),
        c=st.sampled_from(CONSUMERS),
        lease=st.integers(0, 3),
        back=st.integers(0, 90_000),
    )
    def beat(self, q: str, g: str, c: str, lease: int, back: int) -> None:
        stamp = self.now - back * MS
        self.registry.heartbeat(q, g, c, lease, now_ns=stamp)
        key = (q, g, c)
        registered = self.current[key][0] if key in self.current else stamp
        self._remember(key, (registered, stamp, lease))

    @rule(q=st.sampled_from(QUEUES), g=st.sampled_from(NAMES), c=st.sampled_from(CONSUMERS))
    def deregister(self, q: str, g: str, c: str) -> None:
        self.registry.deregister(q, g, c)
        self.current.pop((q, g, c), None)
        self.throughout.discard((q, g, c))

    @rule()
    def prune(self) -> None:
        self.registry.prune_expired(now_ns=self.now, ttl_ms=TTL)
        horizon = self.now - (2 * TTL + 1) * MS
        for key in [k for k, v in self.current.items() if v[1] <= horizon]:
            del self.current[key]
            self.throughout.discard(key)

    @precondition(lambda self: self.rows is None)
    @rule()
    def start(self) -> None:
        self.rows = self.registry.iter_snapshot(now_ns=self.now, ttl_ms=TTL)
        self.seen = []
        self.throughout = set(self.current)

    @precondition(lambda self: self.rows is not None)
    @rule(n=st.integers(1, 4))
    def take(self, n: int) -> None:
        assert self.rows is not None
        for _ in range(n):
            row = next(self.rows, None)
            if row is None:
                self.finish()
                return
            self.seen.append(row)

    def finish(self) -> None:
        keys = [row.key for row in self.seen]
        assert len(keys) == len(set(keys)), "a row appears twice"
        missing = self.throughout - set(keys)
        assert not missing, f"tracked throughout, not read: {sorted(missing)}"
        for row in self.seen:
            value = (row.registered_at_ns, row.last_heartbeat_ns, row.lease_count)
            assert value in self.stored.get(row.key, set()), f"a torn row: {row}"
        self.rows = None

    @invariant()
    def stream_is_open_or_closed(self) -> None:
        assert self.rows is None or isinstance(self.seen, list)


@pytest.mark.parametrize("backend", ["fakeredis", "redis-small"])
def test_a_streaming_read_interleaved_with_writes_stays_sound(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = request.getfixturevalue(
        "fake_client" if backend == "fakeredis" else "small_redis_client"
    )
    StreamMachine.client = client
    test = StreamMachine.TestCase
    test.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
    test().runTest()
