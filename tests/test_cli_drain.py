"""`redis-presence drain`: one consumer, a group's, or a host's; text and JSON; a writer's
command (refused read-only, one line when Redis is unreachable)."""

from __future__ import annotations

import json

from cli_invoke import NOW, Backend, backend, invoke, one_error_line

from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below


def test_drain_one_consumer_then_its_next_beat_says_so(backend: Backend) -> None:
    backend.registry.heartbeat("orders", "billing", "w1", now_ns=NOW)
    done = backend.run("drain", "orders", "billing", "w1")
    assert done.exit_code == 0, done.output
    assert done.stdout == "consumer 'w1' (queue 'orders', group 'billing') asked to drain\n"
    assert backend.registry.heartbeat("orders", "billing", "w1", now_ns=NOW).drain_requested
    missing = backend.run("drain", "orders", "billing", "nobody", "--format", "json")
    assert json.loads(missing.stdout) == {
        "queue": "orders",
        "group": "billing",
        "consumers": [{"consumer": "nobody", "requested": False}],
    }


def test_drain_a_group_or_the_consumers_of_one_host(backend: Backend) -> None:
    registry = backend.registry
    for name, host in (("a", "web-1"), ("b", "web-2"), ("c", "web-1")):
        registry.heartbeat("orders", "billing", name, now_ns=NOW)
        registry.describe("orders", "billing", name, {"host": host})
    registry.heartbeat("orders", "other", "d", now_ns=NOW)
    by_host = backend.run("drain", "orders", "billing", "--host", "web-1", "--format", "json")
    assert by_host.exit_code == 0, by_host.output
    assert [c["consumer"] for c in json.loads(by_host.stdout)["consumers"]] == ["a", "c"]
    replies = {n: registry.heartbeat("orders", "billing", n, now_ns=NOW) for n in "abc"}
    assert {n: r.drain_requested for n, r in replies.items()} == {"a": True, "b": False, "c": True}
    whole = backend.run("drain", "orders", "billing")
    assert whole.stdout.count("asked to drain") == 3
    assert not registry.heartbeat("orders", "other", "d", now_ns=NOW).drain_requested
    empty = backend.run("drain", "orders", "nobody-here")
    assert empty.stdout == "no consumer of queue 'orders' group 'nobody-here'\n"
    both = backend.run("drain", "orders", "billing", "a", "--host", "web-1")
    assert both.exit_code != 0
    assert "not both" in one_error_line(both)


def test_drain_is_refused_read_only_before_opening_redis() -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("a refused write may not open a registry")

    result = invoke(["--read-only", "drain", "q", "g", "c"], obj=never)
    assert result.exit_code != 0
    assert "drain writes to Redis" in one_error_line(result)


def test_drain_on_a_prefix_in_mode_1_says_to_migrate(backend: Backend) -> None:
    backend.registry.client.set("presence:protocol", "1")
    backend.registry.heartbeat("orders", "billing", "w1", now_ns=NOW)
    result = backend.run("drain", "orders", "billing", "w1")
    assert result.exit_code != 0
    assert "migrate" in one_error_line(result)


def test_heartbeat_takes_capacity_and_draining_and_says_a_drain_was_requested(
    backend: Backend,
) -> None:
    beat = backend.at_now("heartbeat", "q", "g", "c", "--capacity", "8", "--format", "json")
    assert beat.exit_code == 0, beat.output
    assert json.loads(beat.stdout)["drain_requested"] is False
    value = backend.registry.client.hget("presence:{q}:g:c", "c").split(b" ")
    assert value[4:6] == [b"8", b"0"]
    backend.registry.request_drain("q", "g", "c")
    asked = backend.at_now("heartbeat", "q", "g", "c")
    assert asked.stdout.endswith("0 lease(s); a drain is requested\n")
    backend.at_now("heartbeat", "q", "g", "c", "--draining")
    value = backend.registry.client.hget("presence:{q}:g:c", "c").split(b" ")
    assert value[4:6] == [b"8", b"1"]  # capacity kept, draining, the request taken
    bad = backend.at_now("heartbeat", "q", "g", "c", "--capacity", "-1")
    assert bad.exit_code == 2
