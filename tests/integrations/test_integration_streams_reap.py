"""`reap_stream_consumers` against real redis-servers: the stream on one server, presence
on another (and both on one Redis Cluster, on different nodes).

Presence is judged at a fixed ``now_ns`` (its states never drift while a test runs);
Redis's own idle times are real, so a test that needs a consumer idle past the horizon
polls ``XINFO CONSUMERS`` with a deadline. Every test checks that no entry was lost: each
delivered entry is in some consumer's pending list (the tests never acknowledge).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from servers import MakeRedisServer, RedisClusterProcesses

from integrations.stream_groups import (
    GROUP,
    MS,
    NOW_NS,
    STREAM,
    STREAMS_PREFIX,
    TTL_MS,
    assert_nothing_lost,
    beat,
    idle_past_horizon,
    make_group,
    pending_of,
    read,
)
from redis_presence import PresenceError, RedisPresenceRegistry
from redis_presence.integrations import streams
from redis_presence.integrations.streams import NO_TARGET, UNSEEN, reap_stream_consumers
from redis_presence.keys import encode_name
from redis_presence.scripts import script

pytestmark = pytest.mark.redis_server

PREFIX = STREAMS_PREFIX


def reap(client: Any, registry: Any, **options: Any) -> streams.StreamReap:
    options.setdefault("ttl_ms", TTL_MS)
    options.setdefault("now_ns", NOW_NS)
    return reap_stream_consumers(client, registry, STREAM, GROUP, **options)


def test_reap_moves_a_dead_consumers_entries_to_a_live_one_and_removes_it(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 8)
    dead = set(read(stream_client, "dead", 5))
    live = set(read(stream_client, "live", 3))
    beat(registry, "dead", 10 * TTL_MS)  # expired
    beat(registry, "live", 0)  # active
    idle_past_horizon(stream_client, "dead")

    outcome = reap(stream_client, registry)

    assert outcome.target == "live"
    assert outcome.moved == {"dead": 5}
    assert outcome.removed == ("dead",)
    assert not outcome.dry_run
    assert pending_of(stream_client) == {"live": dead | live}
    assert {row.consumer for row in registry.snapshot(now_ns=NOW_NS)} == {"live"}
    (reaped,) = [c for c in outcome.consumers if c.consumer == "dead"]
    assert (reaped.presence, reaped.pending, reaped.deregistered) == ("expired", 5, True)
    # JUSTID moves the entries without counting a delivery.
    rows = stream_client.xpending_range(STREAM, GROUP, "-", "+", 100, "live")
    assert {row["times_delivered"] for row in rows} == {1}
    assert_nothing_lost(stream_client, dead | live)


def test_an_expired_row_that_redis_never_knew_is_only_deregistered(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 1)
    delivered = set(read(stream_client, "live", 1))
    beat(registry, "ghost", 10 * TTL_MS)  # in presence only
    beat(registry, "live", 0)
    dry = reap(stream_client, registry, dry_run=True)
    (ghost,) = [c for c in dry.consumers if c.consumer == "ghost"]
    assert (ghost.removed, ghost.deregistered, ghost.idle_ms) == (False, True, None)
    stream_client.config_resetstat()
    outcome = reap(stream_client, registry)
    assert outcome.removed == ()
    (ghost,) = [c for c in outcome.consumers if c.consumer == "ghost"]
    assert ghost.deregistered
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["live"]
    assert "cmdstat_evalsha" not in stream_client.info("commandstats")  # no script call
    assert_nothing_lost(stream_client, delivered)


def test_active_stale_and_recently_seen_consumers_are_never_touched(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 9)
    delivered = set()
    for name in ("active", "stale", "expired-but-reading", "unseen-old", "unseen-new"):
        delivered |= set(read(stream_client, name, 1 if name != "unseen-new" else 2))
    beat(registry, "active", TTL_MS)  # active to the millisecond
    beat(registry, "stale", 2 * TTL_MS)  # stale to the millisecond
    beat(registry, "expired-but-reading", 2 * TTL_MS + 1)  # expired to the millisecond
    idle_past_horizon(stream_client, "active", "stale", "unseen-old")
    delivered |= set(read(stream_client, "expired-but-reading", 1))  # Redis sees it read now
    delivered |= set(read(stream_client, "unseen-new", 1))

    outcome = reap(stream_client, registry)

    by_name = {c.consumer: c for c in outcome.consumers}
    assert outcome.removed == ("unseen-old",)
    assert outcome.target == "active"
    assert by_name["active"].reason == "presence calls it active"
    assert by_name["stale"].reason == "presence calls it stale"
    assert by_name["expired-but-reading"].presence == "expired"
    assert by_name["expired-but-reading"].reason.startswith("Redis saw it read or claim")
    assert by_name["unseen-new"].presence == UNSEEN
    assert by_name["unseen-new"].reason.startswith("Redis saw it read or claim")
    assert by_name["unseen-old"].presence == UNSEEN
    assert set(pending_of(stream_client)) == set(by_name) - {"unseen-old"}
    assert_nothing_lost(stream_client, delivered)


def test_with_no_live_target_nothing_is_claimed_or_removed_and_it_says_so(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 4)
    delivered = set(read(stream_client, "a", 2)) | set(read(stream_client, "b", 2))
    beat(registry, "a", 10 * TTL_MS)
    beat(registry, "b", 10 * TTL_MS)
    idle_past_horizon(stream_client, "a", "b")
    before = pending_of(stream_client)

    outcome = reap(stream_client, registry)

    assert outcome.target is None
    assert outcome.moved == {}
    assert outcome.removed == ()
    assert outcome.note == (
        "no consumer of group 'billing' is active in presence (TTL 100 ms) to take the "
        "entries: nothing claimed, nothing removed"
    )
    assert {c.reason for c in outcome.consumers} == {NO_TARGET}
    assert {c.presence for c in outcome.consumers} == {"expired"}  # as the note says
    assert pending_of(stream_client) == before
    assert len(registry.snapshot(now_ns=NOW_NS)) == 2
    # Naming a target nobody sees reading does not make it act.
    with pytest.raises(ValueError, match="claim_to must name a consumer active in presence"):
        reap(stream_client, registry, claim_to="rescuer")
    assert pending_of(stream_client) == before
    assert_nothing_lost(stream_client, delivered)


def group_state(client: redis.Redis, presence: redis.Redis) -> tuple[object, ...]:
    """Everything a reap could change: each consumer's pending ids, the group's counts, and
    every presence key's value."""
    (info,) = client.xinfo_groups(STREAM)
    presence_keys = {key: presence.dump(key) for key in presence.keys("*")}
    return pending_of(client), info["consumers"], info["pending"], presence_keys


@pytest.mark.parametrize(
    ("claim_to", "why"),
    [
        ("rescuer", "claim_to must name a consumer active in presence: 'rescuer' is unseen"),
        ("stale", "claim_to must name a consumer active in presence: 'stale' is stale"),
        ("dead", "claim_to must name a consumer active in presence: 'dead' is expired"),
    ],
    ids=["unknown", "stale", "being-reaped"],
)
def test_claim_to_must_name_an_active_consumer_or_nothing_changes(
    stream_client: redis.Redis,
    registry: RedisPresenceRegistry,
    redis_client: redis.Redis,
    claim_to: str,
    why: str,
) -> None:
    make_group(stream_client, 3)
    delivered = set()
    for name in ("dead", "stale", "live"):
        delivered |= set(read(stream_client, name, 1))
    beat(registry, "dead", 10 * TTL_MS)  # expired, and dead in Redis too: being reaped
    beat(registry, "stale", 2 * TTL_MS)  # a member of the group, stale in presence
    beat(registry, "live", 0)  # active, a member, holding 1
    idle_past_horizon(stream_client, "dead")
    before = group_state(stream_client, redis_client)
    for dry_run in (True, False):
        with pytest.raises(ValueError, match=f"^{re.escape(why)} "):
            reap(stream_client, registry, claim_to=claim_to, dry_run=dry_run)
        assert group_state(stream_client, redis_client) == before
    outcome = reap(stream_client, registry, claim_to="live")
    assert (outcome.target, outcome.removed) == ("live", ("dead",))
    assert_nothing_lost(stream_client, delivered)


@pytest.mark.parametrize("claim_to", [None, "fresh"], ids=["default", "claim-to"])
def test_a_live_reader_that_has_received_no_entry_yet_is_a_target(
    stream_client: redis.Redis, registry: RedisPresenceRegistry, claim_to: str | None
) -> None:
    """It beats, so it reads; it holds no pending list yet, and Redis (7.0) does not list
    it in the group before its first entry: the entries go to it, and it joins the group."""
    make_group(stream_client, 3)
    delivered = set(read(stream_client, "dead", 2)) | set(read(stream_client, "busy", 1))
    assert read(stream_client, "fresh", 10) == []  # a read that received nothing
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "busy", 0, lease_count=1)
    beat(registry, "fresh", 0)
    idle_past_horizon(stream_client, "dead")

    dry = reap(stream_client, registry, claim_to=claim_to, dry_run=True)
    assert (dry.target, dry.moved, dry.removed) == ("fresh", {"dead": 2}, ("dead",))
    outcome = reap(stream_client, registry, claim_to=claim_to)

    assert (outcome.target, outcome.moved, outcome.removed) == ("fresh", {"dead": 2}, ("dead",))
    held = pending_of(stream_client)
    assert set(held) == {"busy", "fresh"}
    assert len(held["fresh"]) == 2
    assert_nothing_lost(stream_client, delivered)


def test_the_default_ttl_is_the_groups_stored_one(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    """With 45 s stored for the group, a consumer silent for 70 s is stale (under the 30 s
    default it would be expired) and is left alone, and one silent for 40 s is active and may
    take the entries (under 30 s it would be stale)."""
    make_group(stream_client, 2)
    delivered = set(read(stream_client, "live", 1)) | set(read(stream_client, "quiet", 1))
    registry.set_ttl(45_000, queue=STREAM, group=GROUP)
    beat(registry, "ghost", 70_000)  # in presence only: deregistered if it were expired
    beat(registry, "quiet", 40_000)
    beat(registry, "live", 0)

    outcome = reap_stream_consumers(stream_client, registry, STREAM, GROUP, now_ns=NOW_NS)

    assert {row.consumer for row in registry.snapshot(now_ns=NOW_NS)} == {"ghost", "quiet", "live"}
    by_name = {c.consumer: c for c in outcome.consumers}
    assert (by_name["ghost"].presence, by_name["ghost"].deregistered) == ("stale", False)
    assert by_name["ghost"].reason == "presence calls it stale"
    assert by_name["quiet"].reason == "presence calls it active"
    assert outcome.ttl_ms == 45_000
    # claim_to is judged under the same TTL: 'quiet' is active under 45 s, stale under 30 s.
    assert (
        reap_stream_consumers(
            stream_client, registry, STREAM, GROUP, claim_to="quiet", now_ns=NOW_NS
        ).target
        == "quiet"
    )
    with pytest.raises(ValueError, match=r"'quiet' is stale .*TTL 30000 ms"):
        reap_stream_consumers(
            stream_client, registry, STREAM, GROUP, claim_to="quiet", ttl_ms=30_000, now_ns=NOW_NS
        )
    assert_nothing_lost(stream_client, delivered)


def test_the_default_ttl_falls_back_on_the_prefixs_stored_one(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    """100 ms stored for the prefix (none for the group): a consumer silent for 1 s is
    expired, and gone from Redis's view for longer than 200 ms: it is reaped (under the 30 s
    default it would be active)."""
    make_group(stream_client, 4)
    delivered = set(read(stream_client, "dead", 3)) | set(read(stream_client, "live", 1))
    registry.set_ttl(TTL_MS)
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "live", 0)
    idle_past_horizon(stream_client, "dead")

    outcome = reap_stream_consumers(stream_client, registry, STREAM, GROUP, now_ns=NOW_NS)

    assert outcome.removed == ("dead",)
    assert pending_of(stream_client) == {"live": delivered}
    assert outcome.ttl_ms == TTL_MS


def test_dry_run_changes_nothing_and_says_what_it_would_do(
    stream_client: redis.Redis, registry: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    make_group(stream_client, 6)
    read(stream_client, "dead", 4)
    read(stream_client, "live", 2)
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "live", 0)
    idle_past_horizon(stream_client, "dead")
    stream_before = (pending_of(stream_client), stream_client.xinfo_groups(STREAM))
    presence_before = {key: redis_client.dump(key) for key in redis_client.keys("*")}

    outcome = reap(stream_client, registry, dry_run=True)

    assert outcome.dry_run
    assert outcome.moved == {"dead": 4}
    assert outcome.removed == ("dead",)
    stream_after = (pending_of(stream_client), stream_client.xinfo_groups(STREAM))
    assert stream_after[0] == stream_before[0]
    assert stream_after[1][0]["pending"] == stream_before[1][0]["pending"]
    assert {key: redis_client.dump(key) for key in redis_client.keys("*")} == presence_before


def test_one_call_moves_every_entry_and_removes_the_consumer_counted_on_the_server(
    make_redis_server: MakeRedisServer, registry: RedisPresenceRegistry
) -> None:
    server = make_redis_server()
    with server.client() as client:
        make_group(client, 700)
        delivered = set(read(client, "dead", 600)) | set(read(client, "live", 100))
        beat(registry, "dead", 10 * TTL_MS)
        beat(registry, "live", 0)
        client.script_load(script("stream_reap").source)  # measured below: the script's own calls
        idle_past_horizon(client, "dead")
        client.config_resetstat()

        outcome = reap(client, registry)

        stats = client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
        calls.pop("config|resetstat")
        assert outcome.moved == {"dead": 600}
        # One XINFO CONSUMERS to survey, then one script call that moved 600 entries with one
        # XCLAIM and removed the consumer: one round trip for the claim and the removal.
        assert calls == {
            "xinfo|consumers": 1,
            "evalsha": 1,
            "xpending": 2,
            "xclaim": 1,
            "xgroup|delconsumer": 1,
        }
        assert_nothing_lost(client, delivered)


def test_a_consumer_holding_more_than_one_call_moves_takes_a_call_per_thousand(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 2_500)
    delivered = set(read(stream_client, "dead", 2_500))
    stream_client.xgroup_createconsumer(STREAM, GROUP, "live")  # holding nothing yet
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "live", 0)
    idle_past_horizon(stream_client, "dead")
    stream_client.config_resetstat()
    outcome = reap(stream_client, registry)
    assert outcome.moved == {"dead": 2_500}
    assert outcome.removed == ("dead",)
    assert int(stream_client.info("commandstats")["cmdstat_xclaim"]["calls"]) == 3
    assert pending_of(stream_client) == {"live": delivered}


# -- a consumer that comes back between two steps ----------------------------------------


class Interleaved:
    """A registry that runs `action` just before its `nth` call of `method` (snapshot 1 is
    the survey, snapshot 2 the re-check before the script, deregister the last step)."""

    def __init__(
        self, registry: RedisPresenceRegistry, method: str, nth: int, action: Callable[[], None]
    ) -> None:
        self._registry = registry
        self._method = method
        self._nth = nth
        self._action = action
        self._calls = 0
        self.ran = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._registry, name)
        if name != self._method:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls += 1
            if self._calls == self._nth:
                self._action()
                self.ran = True
            return real(*args, **kwargs)

        return call


def dead_and_live(stream_client: redis.Redis, registry: RedisPresenceRegistry) -> set[bytes]:
    make_group(stream_client, 6)
    delivered = set(read(stream_client, "dead", 3)) | set(read(stream_client, "live", 1))
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "live", 0)
    idle_past_horizon(stream_client, "dead")
    return delivered


def test_comes_back_in_presence_before_the_recheck_is_left_alone(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    delivered = dead_and_live(stream_client, registry)
    interleaved = Interleaved(registry, "snapshot", 2, lambda: beat(registry, "dead", 0))
    outcome = reap(stream_client, interleaved)
    assert interleaved.ran
    assert outcome.removed == ()
    assert [c.reason for c in outcome.consumers if c.consumer == "dead"] == ["came back"]
    assert len(pending_of(stream_client)["dead"]) == 3
    assert_nothing_lost(stream_client, delivered)


@pytest.mark.parametrize("how", ["reads new entries", "re-reads its pending entries"])
def test_comes_back_in_the_stream_before_the_script_is_left_alone(
    stream_client: redis.Redis, registry: RedisPresenceRegistry, how: str
) -> None:
    delivered = dead_and_live(stream_client, registry)

    def come_back() -> None:
        if how == "reads new entries":
            delivered.update(read(stream_client, "dead", 1))
        else:
            stream_client.xreadgroup(GROUP, "dead", {STREAM: "0"}, count=1)

    interleaved = Interleaved(registry, "snapshot", 2, come_back)
    outcome = reap(stream_client, interleaved)
    assert interleaved.ran
    assert outcome.removed == ()
    (dead,) = [c for c in outcome.consumers if c.consumer == "dead"]
    assert dead.reason == "an entry of it is younger than the horizon"
    assert dead.moved == 0
    assert "dead" in pending_of(stream_client)
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["dead", "live"]
    assert_nothing_lost(stream_client, delivered)


def test_an_empty_read_before_the_script_loses_nothing(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    """The one window the script leaves: a read that delivers nothing (the stream has no new
    entries) does not stop the reap. The consumer holds nothing afterwards, its entries are
    with the live consumer, and its next read creates it again."""
    delivered = dead_and_live(stream_client, registry)
    delivered |= set(read(stream_client, "live", 10))  # nothing new is left for anyone

    def empty_read() -> None:
        assert read(stream_client, "dead", 1) == []

    interleaved = Interleaved(registry, "snapshot", 2, empty_read)
    outcome = reap(stream_client, interleaved)
    assert outcome.removed == ("dead",)
    assert pending_of(stream_client) == {"live": delivered}
    stream_client.xadd(STREAM, {"n": "after"})
    delivered.update(read(stream_client, "dead", 1))
    assert set(pending_of(stream_client)) == {"dead", "live"}
    assert_nothing_lost(stream_client, delivered)


def test_a_beat_between_the_script_and_the_deregistration_comes_back_with_the_next_beat(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    """The other window, in presence: a consumer silent on the stream for the whole horizon
    that beats right before its row is deregistered loses the row until its next beat;
    nothing it holds is lost (it holds nothing: its entries went to the live consumer)."""
    delivered = dead_and_live(stream_client, registry)
    interleaved = Interleaved(registry, "deregister", 1, lambda: beat(registry, "dead", 0))
    outcome = reap(stream_client, interleaved)
    assert interleaved.ran
    assert outcome.removed == ("dead",)
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["live"]
    beat(registry, "dead", 0)
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["dead", "live"]
    assert_nothing_lost(stream_client, delivered)


# -- errors and a cluster ----------------------------------------------------------------


def test_bad_arguments_name_themselves_and_change_nothing(
    stream_client: redis.Redis, registry: RedisPresenceRegistry
) -> None:
    make_group(stream_client, 2)
    read(stream_client, "dead", 2)
    before = pending_of(stream_client)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"stream": ""}, ValueError, "stream must be a non-empty string"),
        ({"group": None}, TypeError, "group must be a str"),
        ({"claim_to": ""}, ValueError, "claim_to must be a non-empty string"),
        ({"dry_run": "yes"}, TypeError, "dry_run must be a bool"),
        ({"ttl_ms": 0}, ValueError, "ttl_ms must be a positive int"),
        ({"now_ns": 1.5}, TypeError, "now_ns must be an int or None"),
    ]
    for change, error, message in cases:
        arguments: dict[str, Any] = {"stream": STREAM, "group": GROUP, "ttl_ms": TTL_MS}
        arguments.update(change)
        with pytest.raises(error, match=message):
            reap_stream_consumers(stream_client, registry, **arguments)
    with pytest.raises(PresenceError, match="stream 'orders' has no consumer group 'nobody'"):
        reap_stream_consumers(stream_client, registry, STREAM, "nobody")
    with pytest.raises(PresenceError, match="stream 'missing' has no consumer group"):
        reap_stream_consumers(stream_client, registry, "missing", GROUP)
    assert pending_of(stream_client) == before


@pytest.mark.slow
def test_on_a_cluster_with_the_stream_and_presence_on_different_nodes(
    redis_cluster: RedisClusterProcesses, cluster_client: redis.cluster.RedisCluster
) -> None:
    registry = RedisPresenceRegistry(cluster_client, prefix=PREFIX)

    def presence_key(stream: str) -> str:
        return f"{PREFIX}:{{{encode_name(stream)}}}:{GROUP}:hb"

    def node(key: str) -> str:
        return str(cluster_client.get_node_from_key(key).name)  # type: ignore[no-untyped-call]

    # A stream with a hash tag of its own lands elsewhere than its presence keys, which are
    # tagged with the percent-encoded name: pick one on another node.
    stream = next(
        name
        for name in (f"{{n{i}}}orders" for i in range(100))
        if node(name) != node(presence_key(name))
    )
    make_group(cluster_client, 5, stream=stream)
    delivered = set(read(cluster_client, "dead", 4, stream)) | set(
        read(cluster_client, "live", 1, stream)
    )
    beat(registry, "dead", 10 * TTL_MS, stream=stream)
    beat(registry, "live", 0, stream=stream)
    assert cluster_client.exists(presence_key(stream))  # where we said it is
    idle_past_horizon(cluster_client, "dead", stream=stream)
    outcome = reap_stream_consumers(
        cluster_client, registry, stream, GROUP, ttl_ms=TTL_MS, now_ns=NOW_NS
    )
    assert outcome.moved == {"dead": 4}
    assert outcome.removed == ("dead",)
    assert pending_of(cluster_client, stream) == {"live": delivered}
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["live"]


STREAM_REAPER_ACL = (
    "ACL SETUSER stream-reaper reset on >change-me-stream-reaper ~orders resetchannels -@all "
    "+select +xinfo|consumers +evalsha +script|load +xpending +xclaim +xgroup|delconsumer"
)
PRESENCE_REAPER_ACL = (
    "ACL SETUSER presence-stream-reaper reset on >change-me-stream-reaper ~presence:* "
    "resetchannels -@all +evalsha +script|load +select +time +type +get +hget +zrangebylex +hlen "
    "+hgetall +hscan +zadd +zrem +hdel +exists +del +xadd +pexpire +set"
)


def test_the_documented_acl_roles_are_enough(make_redis_server: MakeRedisServer) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "streams.md"
    readme = page.read_text(encoding="utf-8")
    assert STREAM_REAPER_ACL in readme
    assert PRESENCE_REAPER_ACL in readme
    streams_server, presence_server = make_redis_server(), make_redis_server()
    with streams_server.client() as admin:
        admin.execute_command(*shlex.split(STREAM_REAPER_ACL))
        make_group(admin, 4)
        delivered = set(read(admin, "dead", 3)) | set(read(admin, "live", 1))
        admin.set("elsewhere", 1)
    with presence_server.client() as admin:
        admin.execute_command(*shlex.split(PRESENCE_REAPER_ACL))
        writer = RedisPresenceRegistry(admin)
        writer.heartbeat(STREAM, GROUP, "dead", now_ns=NOW_NS - 10 * TTL_MS * MS)
        writer.heartbeat(STREAM, GROUP, "live", now_ns=NOW_NS)
    password = "change-me-stream-reaper"
    stream = streams_server.client(username="stream-reaper", password=password)
    presence = presence_server.client(username="presence-stream-reaper", password=password)
    with stream, presence:
        registry = RedisPresenceRegistry(presence)
        idle_past_horizon(stream, "dead")
        # The default TTL is read from presence (GET of the stored TTL keys).
        dry = reap_stream_consumers(stream, registry, STREAM, GROUP, dry_run=True, now_ns=NOW_NS)
        assert (dry.ttl_ms, dry.removed) == (30_000, ())
        outcome = reap(stream, registry)
        assert outcome.removed == ("dead",)
        assert pending_of(stream) == {"live": delivered}
        with pytest.raises(redis.exceptions.NoPermissionError):
            stream.get("elsewhere")
