"""Property test: the Redis registry answers exactly like the in-process model."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from redis_presence import ConsumerPresenceRegistry, RedisPresenceRegistry
from redis_presence.validation import BeatSpec

MS = 1_000_000
T0 = 1_796_000_000_000_000_000
TTL = st.sampled_from([1, 2, 5, 1_000, 30_000])
NAMES = st.sampled_from(["a", "b", "a:b", "{a}", "ü", "*"])
# Steps of any size, on and off whole microseconds, including exact rule boundaries.
STEP_NS = st.one_of(
    st.integers(0, 3 * MS),
    st.sampled_from([MS - 1, MS, MS + 1, 2 * MS, 5 * MS, 11 * MS]),
    st.integers(0, 70_000 * MS),
)

METAS = st.dictionaries(
    st.sampled_from(["host", "pid", "a:b", "ü"]), st.sampled_from(["", "x", "7"])
)
STUCK = st.sampled_from([1, 2, 5, 1_000])
# Version 2: two processes (instance tokens) beating, capacities, draining flags.
WHO = st.sampled_from(["proc-a", "proc-b"])
CAPACITY = st.one_of(st.none(), st.sampled_from([0, 1, 7, 2**32 - 1]))
DRAINING = st.sampled_from([None, True, False])


class RegistryMatchesModel(RuleBasedStateMachine):
    """Random heartbeats (with and without progress), metadata, declared groups,
    deregisters, prunes and reads on both; every answer must agree."""

    client: Any

    def __init__(self) -> None:
        super().__init__()
        self.model = ConsumerPresenceRegistry(instance="proc-a")
        self.now = T0

    @initialize()
    def open_store(self) -> None:
        client = self.client()
        self.redis = RedisPresenceRegistry(client, prefix="prop", instance="proc-a")
        self.others = {
            "proc-a": self.redis,
            "proc-b": RedisPresenceRegistry(client, prefix="prop", instance="proc-b"),
        }

    def as_(self, who: str) -> tuple[ConsumerPresenceRegistry, RedisPresenceRegistry]:
        """The model and the Redis registry of process `who` (one store, its token)."""
        self.model._instance = who
        return self.model, self.others[who]

    @rule(
        queue=NAMES,
        group=NAMES,
        consumer=NAMES,
        who=WHO,
        capacity=CAPACITY,
        draining=DRAINING,
        skew=st.integers(-3 * MS, 3 * MS),
    )
    def v2_beat(
        self,
        queue: str,
        group: str,
        consumer: str,
        who: str,
        capacity: int | None,
        draining: bool | None,
        skew: int,
    ) -> None:
        """A beat with capacity and draining from one of two processes: the same reply."""
        at = max(0, self.now + skew)
        model, redis = self.as_(who)
        kwargs: dict[str, Any] = {"now_ns": at, "capacity": capacity, "draining": draining}
        assert model.heartbeat(queue, group, consumer, 1, **kwargs) == redis.heartbeat(
            queue, group, consumer, 1, **kwargs
        )
        self.as_("proc-a")  # the other rules beat as the first process

    @rule(
        beats=st.lists(
            st.builds(BeatSpec, NAMES, NAMES, NAMES, st.integers(0, 3), CAPACITY, DRAINING),
            max_size=5,
        ),
        who=WHO,
    )
    def v2_heartbeat_many(self, beats: list[BeatSpec], who: str) -> None:
        model, redis = self.as_(who)
        expected = model.heartbeat_many(beats, now_ns=self.now)
        written = redis.heartbeat_many(beats, now_ns=self.now)
        assert written == expected
        assert written.drain_requested == expected.drain_requested
        self.as_("proc-a")

    @rule(queue=NAMES, group=NAMES, consumer=NAMES)
    def request_drain(self, queue: str, group: str, consumer: str) -> None:
        assert self.model.request_drain(
            queue, group, consumer, now_ns=self.now
        ) == self.redis.request_drain(queue, group, consumer, now_ns=self.now)

    @invariant()
    def same_stored_values(self) -> None:
        """Every consumer's stored value (capacity, flags, conflict, instance tokens too)."""
        if not hasattr(self, "redis"):
            return
        client = self.redis.client
        for (queue, group, consumer), value in self.model._rows.items():
            raw = client.hget(self.redis.plans.keys.group(queue, group).data, consumer)
            model = ["0" if v is None else str(v) for v in value]
            assert raw.decode().split(" ") == model, (queue, group, consumer)

    @rule(step=STEP_NS)
    def advance(self, step: int) -> None:
        self.now += step

    @rule(
        queue=NAMES,
        group=NAMES,
        consumer=NAMES,
        lease=st.integers(0, 2**32 - 1),
        skew=st.integers(-3 * MS, 3 * MS),
    )
    def heartbeat(self, queue: str, group: str, consumer: str, lease: int, skew: int) -> None:
        at = max(0, self.now + skew)  # brokers' clocks disagree a little
        self.model.heartbeat(queue, group, consumer, lease, now_ns=at)
        self.redis.heartbeat(queue, group, consumer, lease, now_ns=at)

    @rule(queue=NAMES, group=NAMES, consumer=NAMES, lease=st.integers(0, 3))
    def progress(self, queue: str, group: str, consumer: str, lease: int) -> None:
        self.model.heartbeat(queue, group, consumer, lease, now_ns=self.now, progressed=True)
        self.redis.heartbeat(queue, group, consumer, lease, now_ns=self.now, progressed=True)

    @rule(queue=NAMES, group=NAMES, consumer=NAMES, meta=METAS)
    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> None:
        assert self.model.describe(queue, group, consumer, meta) == self.redis.describe(
            queue, group, consumer, meta
        )

    @rule(queue=NAMES, group=NAMES, least=st.integers(1, 3))
    def expect(self, queue: str, group: str, least: int) -> None:
        self.model.expect(queue, group, least)
        self.redis.expect(queue, group, least)

    @rule(queue=NAMES, group=NAMES)
    def unexpect(self, queue: str, group: str) -> None:
        assert self.model.unexpect(queue, group) == self.redis.unexpect(queue, group)

    @rule(ttl=TTL, stuck=STUCK)
    def rich_reads_agree(self, ttl: int, stuck: int) -> None:
        """Metadata, progress and `stuck` in snapshots; declared groups and their counts."""
        assert self.redis.snapshot(
            now_ns=self.now, ttl_ms=ttl, stuck_after_ms=stuck, with_meta=True
        ) == self.model.snapshot(now_ns=self.now, ttl_ms=ttl, stuck_after_ms=stuck, with_meta=True)
        assert self.redis.expected() == self.model.expected()
        assert self.redis.groups(now_ns=self.now, ttl_ms=ttl) == self.model.groups(
            now_ns=self.now, ttl_ms=ttl
        )

    @rule(queue=NAMES, group=NAMES, ttl=TTL)
    def one_group_and_its_verdict_agree(self, queue: str, group: str, ttl: int) -> None:
        """`group()`: the same row, so the same verdict and reason, as the model's."""
        row = self.redis.group(queue, group, now_ns=self.now, ttl_ms=ttl)
        assert row == self.model.group(queue, group, now_ns=self.now, ttl_ms=ttl)

    @rule(beats=st.lists(st.tuples(NAMES, NAMES, NAMES, st.integers(0, 9)), max_size=6))
    def heartbeat_many(self, beats: list[tuple[str, str, str, int]]) -> None:
        # Duplicate consumers in one batch: the last beat wins on both sides.
        assert self.model.heartbeat_many(beats, now_ns=self.now) == self.redis.heartbeat_many(
            beats, now_ns=self.now
        )

    @rule(queue=NAMES, group=NAMES, consumer=NAMES)
    def deregister(self, queue: str, group: str, consumer: str) -> None:
        assert self.model.deregister(queue, group, consumer) == self.redis.deregister(
            queue, group, consumer
        )

    @precondition(lambda self: len(self.model) > 0)
    @rule(ttl=TTL)
    def prune(self, ttl: int) -> None:
        expected = self.model.snapshot(now_ns=self.now, ttl_ms=ttl)
        assert self.model.prune_expired(now_ns=self.now, ttl_ms=ttl) == (
            self.redis.prune_expired(now_ns=self.now, ttl_ms=ttl)
        )
        survivors = [row for row in expected if row.state.value != "expired"]
        assert self.redis.snapshot(now_ns=self.now, ttl_ms=ttl) == survivors

    @precondition(lambda self: len(self.model) > 0)
    @rule(
        data=st.data(),
        ttl=TTL,
        horizon=st.sampled_from([1, 2]),
        delta=st.sampled_from([-1, 0, 1, -1_000, 1_000]),
    )
    def read_on_a_boundary(self, data: st.DataObject, ttl: int, horizon: int, delta: int) -> None:
        """Jump the reader to exactly where some consumer turns stale or expired."""
        rows = self.model.snapshot(now_ns=self.now)
        beat = data.draw(st.sampled_from([row.last_heartbeat_ns for row in rows]))
        self.now = beat + (horizon * ttl + 1) * MS + delta
        self.reads_agree(ttl)

    @rule(ttl=TTL)
    def reads_agree(self, ttl: int) -> None:
        assert self.redis.snapshot(now_ns=self.now, ttl_ms=ttl) == self.model.snapshot(
            now_ns=self.now, ttl_ms=ttl
        )
        assert self.redis.count_active_by_group(
            now_ns=self.now, ttl_ms=ttl
        ) == self.model.count_active_by_group(now_ns=self.now, ttl_ms=ttl)

    @invariant()
    def same_size(self) -> None:
        if hasattr(self, "redis"):
            assert len(self.redis) == len(self.model)


SETTINGS = settings(
    stateful_step_count=30, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.slow  # 5-9 s; the same machine on a real server stays in the quick loop
def test_fakeredis_registry_matches_model() -> None:
    class OnFakeRedis(RegistryMatchesModel):
        @staticmethod
        def client() -> Any:
            return fakeredis.FakeRedis(server=fakeredis.FakeServer())

    OnFakeRedis.TestCase.settings = SETTINGS
    OnFakeRedis.TestCase().runTest()


@pytest.mark.redis_server
@pytest.mark.timeout(300)
def test_real_redis_registry_matches_model(redis_server: Any) -> None:
    class OnRedisServer(RegistryMatchesModel):
        @staticmethod
        def client() -> Any:
            client = redis_server.client()
            client.flushall()
            return client

        def teardown(self) -> None:
            if hasattr(self, "redis"):
                self.redis.client.close()

    OnRedisServer.TestCase.settings = SETTINGS
    OnRedisServer.TestCase().runTest()
