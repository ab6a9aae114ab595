"""Hosts and versions (issue 34 item 4), against a real redis-server: the consumers rolled
up by a metadata field (`/hosts`, its JSON twin and `/api/v1/hosts`), and the consumer
lists searched by metadata (``host=``, ``version=``, ``field=`` and ``value=``)."""

from __future__ import annotations

from typing import Any

from web_client import HOSTILE, MS, T0, TTL_MS, Clock, TestClient, client, clock, writer

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import Keyspace
from redis_presence.rollup import NONE, UNREADABLE, roll_up

__all__ = ["client", "clock", "writer"]  # the fixtures, used by name below


def fleet(writer: RedisPresenceRegistry, clock: Clock) -> None:
    """web-1 runs two consumers of 1.2 (one holds 2 leases), web-2 one of 1.1 that died
    with 3 leases, a hostile host one; one consumer says nothing of itself."""
    dead_at = clock.now_ns - (2 * TTL_MS + 1) * MS  # expired now
    writer.heartbeat("q", "g1", "a", 2, now_ns=clock.now_ns)
    writer.heartbeat("q", "g2", "b", 0, now_ns=clock.now_ns)
    writer.heartbeat("q", "g1", "dead", 3, now_ns=dead_at)
    writer.heartbeat("other", "g", "plain", 1, now_ns=clock.now_ns)
    writer.heartbeat("other", "g", "odd", 0, now_ns=clock.now_ns)
    writer.describe("q", "g1", "a", {"host": "web-1", "version": "1.2"})
    writer.describe("q", "g2", "b", {"host": "web-1", "version": "1.2"})
    writer.describe("q", "g1", "dead", {"host": "web-2", "version": "1.1"})
    writer.describe("other", "g", "odd", {"host": HOSTILE})


def values(body: dict[str, Any]) -> dict[str | None, tuple[int, ...]]:
    return {
        v["label"]: (
            v["active"],
            v["stale"],
            v["expired"],
            v["groups"],
            v["leases"],
            v["leases_expired"],
        )
        for v in body["values"]
    }


def test_the_fleet_by_host_and_by_version(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    fleet(writer, clock)
    body = client.get("/api/v1/hosts").json()
    assert body["by"] == "host"
    assert body["consumers"] == 5
    assert [v["label"] for v in body["values"]] == [NONE, HOSTILE, "web-1", "web-2"]
    assert values(body) == {
        NONE: (1, 0, 0, 1, 1, 0),
        HOSTILE: (1, 0, 0, 1, 0, 0),
        "web-1": (2, 0, 0, 2, 2, 0),
        "web-2": (0, 0, 1, 1, 3, 3),
    }
    assert body["values"][0]["value"] is None
    # "Is build 1.1 drained?" No: its one consumer is gone but holds 3 leases.
    by_version = client.get("/api/v1/hosts", params={"by": "version"}).json()
    versions = {v["label"]: v for v in by_version["values"]}
    assert set(versions) == {NONE, "1.1", "1.2"}
    assert versions["1.1"]["drained"] is False
    assert versions["1.1"]["leases_expired"] == 3
    assert versions[NONE]["consumers"] == 2
    # Once it is pruned, it is: nothing of 1.1 is left.
    clock.advance_ms(1)
    assert writer.prune_expired(now_ns=clock.now_ns, ttl_ms=TTL_MS) == 1
    after = client.get("/api/v1/hosts", params={"by": "version"}).json()
    assert "1.1" not in {v["label"] for v in after["values"]}
    # Any field; a queue's or a group's consumers alone.
    assert values(client.get("/api/v1/hosts", params={"by": "region"}).json()) == {
        NONE: (4, 0, 0, 3, 3, 0)
    }
    of_q = client.get("/api/v1/hosts", params={"queue": "q"}).json()
    assert set(values(of_q)) == {"web-1"}
    one = client.get("/api/v1/hosts", params={"queue": "q", "group": "g2"}).json()
    assert values(one) == {"web-1": (1, 0, 0, 1, 0, 0)}
    # The page and its JSON twin: the same model.
    twin = client.get("/hosts", headers={"Accept": "application/json"}).json()
    assert twin["values"] == client.get("/api/v1/hosts").json()["values"]
    page = client.get("/hosts")
    assert page.status_code == 200
    assert HOSTILE not in page.text  # names are data: escaped
    assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    assert 'href="/consumers?host=web-1"' in page.text
    assert 'href="/consumers?field=host"' in page.text  # (none): without the field
    # A limit shows fewer values and counts the others.
    cut = client.get("/api/v1/hosts", params={"limit": "1"}).json()
    assert len(cut["values"]) == 1
    assert cut["more_values"] == 2  # (none), the hostile host and web-1: web-2 was pruned


def test_a_roll_up_is_bad_input_proof(client: TestClient) -> None:
    for query, parameter in [
        ({"by": "x" * 600}, "by"),
        ({"limit": "0"}, "limit"),
        ({"group": "g"}, "group"),
    ]:
        for path in ("/api/v1/hosts", "/hosts"):
            response = client.get(path, params=query, headers={"Accept": "application/json"})
            assert response.status_code == 400, (path, query)
            assert response.json()["parameter"] == parameter


def test_unreadable_metadata_is_said_not_counted_as_none(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    fleet(writer, clock)
    writer.client.hset(Keyspace("presence").group("other", "g").meta, "plain", b"[[[")
    body = client.get("/api/v1/hosts").json()
    assert body["unreadable"] == 1
    labels = values(body)
    assert labels[UNREADABLE] == (1, 0, 0, 1, 1, 0)
    assert NONE not in labels


def test_consumers_searched_by_metadata(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    fleet(writer, clock)

    def names(path: str, **query: str) -> list[str]:
        response = client.get(path, params=query, headers={"Accept": "application/json"})
        assert response.status_code == 200, response.text
        rows = response.json()["consumers"]
        assert all(row["meta"] is not None for row in rows)  # read to be searched
        return [row["consumer"] for row in rows]

    for path in ("/api/v1/consumers", "/consumers"):
        assert names(path, host="web-1") == ["a", "b"]
        assert names(path, host="web-1", queue="q", group="g2") == ["b"]
        assert names(path, version="1.1") == ["dead"]
        assert names(path, host=HOSTILE) == ["odd"]
        assert names(path, field="version") == ["odd", "plain"]  # without a version
        assert names(path, field="version", value="1.2") == ["a", "b"]
        assert names(path, host="nowhere") == []
    assert names("/api/v1/groups/q/g1", host="web-2") == ["dead"]
    assert names("/group", queue="q", group="g1", host="web-1") == ["a"]
    page = client.get("/consumers", params={"host": "web-1"})
    assert page.status_code == 200
    assert 'id="meta-filter"' in page.text
    assert 'name="field" value="host"' in page.text  # kept by the form
    for query, parameter in [
        ({"host": "a", "version": "b"}, "version"),
        ({"value": "x"}, "value"),
        ({"host": "a", "value": "x"}, "value"),
        ({"field": "x" * 600}, "field"),
    ]:
        bad = client.get("/api/v1/consumers", params=query)
        assert bad.status_code == 400, query
        assert bad.json()["parameter"] == parameter


def test_roll_up_of_rows_alone() -> None:
    from redis_presence import ConsumerPresence
    from redis_presence.model import ConsumerMeta

    rows = [
        ConsumerPresence.at(
            "q", "g", "a", T0, T0, 1, now_ns=T0, ttl_ms=TTL_MS, meta=ConsumerMeta({"host": "h"})
        ),
        ConsumerPresence.at(
            "q", "h", "b", T0, T0, 2, now_ns=T0, ttl_ms=TTL_MS, meta=ConsumerMeta({"host": "h"})
        ),
        ConsumerPresence.at("q", "g", "c", T0, T0, 0, now_ns=T0, ttl_ms=TTL_MS),
    ]
    found = roll_up(rows, "host")
    assert [(r.label, r.consumers, r.groups, r.leases) for r in found] == [
        (NONE, 1, 1, 0),
        ("h", 2, 2, 3),
    ]
    assert [r.label for r in roll_up(rows, "host", {("q", "g", "c")})] == [UNREADABLE, "h"]


def test_concurrent_views_share_one_read(
    redis_url: str, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    import asyncio

    import httpx
    import redis

    from redis_presence.web import WebConfig, create_app

    fleet(writer, clock)
    probe = redis.Redis.from_url(redis_url)

    def metadata_reads() -> int:
        stats = probe.info("commandstats").get("cmdstat_hmget", {"calls": 0})
        return int(stats["calls"])

    async def views(n: int) -> tuple[int, list[dict[str, Any]]]:
        app = create_app(WebConfig(url=redis_url, ttl_ms=TTL_MS, read_cache_s=0), clock=clock)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as web:
                await web.get("/api/v1/hosts")  # scripts loaded, settings cached
                before = metadata_reads()
                answers = await asyncio.gather(*(web.get("/api/v1/hosts") for _ in range(n)))
                return metadata_reads() - before, [a.json() for a in answers]

    one, (alone,) = asyncio.run(views(1))
    shared, answers = asyncio.run(views(5))
    probe.close()
    assert one >= 1
    assert shared == one  # five views at once: one read of the metadata
    assert all(answer["values"] == alone["values"] for answer in answers)


def test_drained_means_nothing_runs_nor_is_owed() -> None:
    from redis_presence import ConsumerPresence
    from redis_presence.model import ConsumerMeta

    def row(name: str, version: str, beat_ago_ms: int, leases: int) -> ConsumerPresence:
        beat = T0 - beat_ago_ms * MS
        meta = ConsumerMeta({"version": version})
        return ConsumerPresence.at(
            "q", "g", name, beat, beat, leases, now_ns=T0, ttl_ms=TTL_MS, meta=meta
        )

    rows = [
        row("a", "gone", 3 * TTL_MS, 0),  # expired, nothing held
        row("b", "owing", 3 * TTL_MS, 2),  # expired with leases: work nobody finished
        row("c", "maybe", TTL_MS + 5, 0),  # stale: may only have missed a beat
        row("d", "running", 1, 0),
    ]
    found = {r.label: r.drained for r in roll_up(rows, "version")}
    assert found == {"gone": True, "owing": False, "maybe": False, "running": False}
