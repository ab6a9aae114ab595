"""The language-neutral conformance cases (`conformance/*.json`, docs/protocol.md) on every
backend of the matrix: the in-process registry answers the same replies, and every Redis
backend also leaves exactly the key contents each case names. The Node.js client runs the
same files (`clients/node/test/conformance.test.mjs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from backends import BACKENDS, dump, make_registry, raw_client
from conformance_runner import CASES, load, run

from redis_presence import PresenceProtocolError, RedisPresenceRegistry
from redis_presence.keys import PROTOCOL_VERSION

pytestmark = pytest.mark.timeout(60)
T0 = 1_700_000_000_000_000_000


def test_there_are_cases() -> None:
    names = [path.stem for path in CASES]
    assert len(names) >= 10, names
    assert len({load(path)["name"] for path in CASES}) == len(CASES)


# A case that reads or spoils the store itself runs on the Redis backends only.
RUNS = [
    pytest.param(backend.values[0], path, marks=backend.marks, id=f"{backend.id}-{path.stem}")
    for path in CASES
    for backend in BACKENDS
    if not (backend.values[0] == "memory" and load(path).get("needs_store"))
]


@pytest.mark.parametrize(("backend", "path"), RUNS)
def test_case(request: pytest.FixtureRequest, backend: str, path: Path) -> None:
    case = load(path)
    assert case["protocol_version"] == PROTOCOL_VERSION
    prefix = case.get("prefix", "presence")
    registry = make_registry(request, backend, prefix=prefix, instance=case.get("instance"))
    client = None if backend == "memory" else raw_client(request, backend)

    def other(instance: str) -> Any:
        # Another process on the same store (make_registry shares it; a case that needs
        # one is never run on the in-process model, which is one process).
        assert backend != "memory", f"{path.stem}: steps of another instance need a store"
        return make_registry(request, backend, prefix=prefix, instance=instance)

    run(case, registry, client, other)


@pytest.mark.redis_server
def test_another_protocol_version_is_refused_before_anything_is_written(
    redis_client: Any,
) -> None:
    RedisPresenceRegistry(redis_client).heartbeat("q", "g", "c", now_ns=T0)
    assert redis_client.get("presence:protocol") == PROTOCOL_VERSION.encode()
    redis_client.set("presence:protocol", "3")  # a client of a later, incompatible release
    before = dump(redis_client)
    registry = RedisPresenceRegistry(redis_client)
    with pytest.raises(PresenceProtocolError, match='written by protocol version "3"'):
        registry.heartbeat("q", "g", "c", now_ns=T0 + 1)
    for read in (registry.snapshot, registry.count_active_by_group, registry.prune_expired):
        with pytest.raises(PresenceProtocolError):
            read()
    assert dump(redis_client) == before


@pytest.mark.redis_server
def test_the_first_beat_claims_the_version_and_a_reader_writes_nothing(redis_client: Any) -> None:
    reader = RedisPresenceRegistry(redis_client)
    assert reader.snapshot(now_ns=T0, ttl_ms=1_000) == []
    assert reader.count_active_by_group() == {}
    assert redis_client.keys("*") == []  # reading claims nothing
    RedisPresenceRegistry(redis_client).heartbeat_many([("q", "g", "c", 1)], now_ns=T0)
    assert redis_client.get("presence:protocol") == PROTOCOL_VERSION.encode()
