"""`/metrics` when Redis answers with data the service cannot read (issue 30, loose end).

A spoilt shared setting of the prefix (``P:ttl``, ``P:stuck``) fails every read that needs
it (docs/protocol.md, section 8). Before, ``/metrics`` then said ``redis_presence_up 0``,
which reads as Redis down and fires `RedisPresenceRedisUnreachable`: Redis answered. Now
``redis_presence_up`` stays 1 and ``redis_presence_data_error`` is 1 (no group series: none
can be claimed), until the key is stored again or deleted; a scrape that does not need the
spoilt key (the progress budget without ``--stuck-metrics``, the TTL with ``--ttl-ms``)
reads on. On a real redis-server; the alert rules' side in deploy/prometheus/alerts.test.yml.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from web_client import make_client, metric_samples

from redis_presence import PresenceDataWarning, RedisPresenceRegistry

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

GROUP = (("group", "g"), ("queue", "q"))


def scrape(redis_url: str, **options: Any) -> dict[str, dict[Any, float]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PresenceDataWarning)  # the service's own log
        with make_client(redis_url, **options) as web:
            response = web.get("/metrics")
    assert response.status_code == 200, response.text
    return metric_samples(response.text)


@pytest.mark.parametrize(
    ("key", "plant", "options", "needed"),
    [
        pytest.param("presence:ttl", "text", {"ttl_ms": None}, True, id="ttl-text"),
        pytest.param("presence:ttl", "hash", {"ttl_ms": None}, True, id="ttl-a-hash"),
        pytest.param(
            "presence:ttl",
            "text",
            {"ttl_ms": None, "stuck_metrics": True},
            True,
            id="ttl-text-stuck-metrics",
        ),
        pytest.param("presence:ttl", "text", {"ttl_ms": 10_000}, False, id="ttl-given"),
        pytest.param(
            "presence:stuck",
            "text",
            {"ttl_ms": None, "stuck_metrics": True},
            True,
            id="stuck-text-stuck-metrics",
        ),
        pytest.param("presence:stuck", "text", {"ttl_ms": None}, False, id="stuck-not-needed"),
    ],
)
def test_a_spoilt_setting_of_the_prefix_is_redis_up_with_a_data_error(
    redis_url: str, redis_client: Any, key: str, plant: str, options: dict[str, Any], needed: bool
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "a")
    if plant == "hash":
        redis_client.hset(key, "a", "b")
    else:
        redis_client.set(key, "abc")
    samples = scrape(redis_url, **options)
    assert samples["redis_presence_up"] == {(): 1.0}  # Redis answered
    assert samples["redis_presence_protocol_mismatch"] == {(): 0.0}
    if needed:
        assert samples["redis_presence_data_error"] == {(): 1.0}
        assert "redis_presence_group_active" not in samples  # nothing is claimed
    else:
        assert samples["redis_presence_data_error"] == {(): 0.0}
        assert samples["redis_presence_group_active"] == {GROUP: 1.0}
    redis_client.delete(key)  # stored again or deleted: read again
    samples = scrape(redis_url, **options)
    assert samples["redis_presence_data_error"] == {(): 0.0}
    assert samples["redis_presence_group_active"] == {GROUP: 1.0}


def test_redis_down_is_up_0_without_a_data_error(make_redis_server: Any) -> None:
    server = make_redis_server()
    url = f"redis://127.0.0.1:{server.port}/0"
    server.stop()
    samples = scrape(url)
    assert samples["redis_presence_up"] == {(): 0.0}
    assert samples["redis_presence_data_error"] == {(): 0.0}
