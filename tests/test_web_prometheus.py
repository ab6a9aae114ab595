"""A real Prometheus scraping a real `redis-presence serve`, and the shipped rule files.

Prometheus (Debian's package) runs on loopback with a 1 s scrape interval, the service's
token, and the shipped alert rules loaded; the test waits for scrapes by polling the query
API, never by sleeping a fixed time.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from processes import ManagedProcess
from servers import free_port
from waiting import wait_until
from webservers import ROOT, ServeProcess, need_tool

from redis_presence import RedisPresenceRegistry

TTL_MS = 60_000
MS = 1_000_000
TOKEN = "scrape-t0ken"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "redis-presence.json"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_alert_rules_pass_promtool() -> None:
    promtool = need_tool("promtool", "prometheus")
    for args in (["check", "rules", str(ALERTS)], ["test", "rules", "alerts.test.yml"]):
        done = subprocess.run(
            [promtool, *args], cwd=ALERTS.parent, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout + done.stderr


class Prometheus(ManagedProcess):
    """Prometheus on a free loopback port, scraping `target` every second with the token
    and evaluating the shipped rules; ready once ``/-/ready`` answers."""

    def __init__(self, binary: str, dir: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = dir / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(ALERTS)],
                    "scrape_configs": [
                        {
                            "job_name": "redis-presence",
                            "authorization": {"credentials": TOKEN},
                            "static_configs": [{"targets": [target]}],
                        }
                    ],
                }
            )
        )
        super().__init__(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            name=f"prometheus on port {self.port}",
            log=dir / "prometheus.log",
        )

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        return list(data["result"])

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture
def prometheus_and_serve(
    redis_url: str, tmp_path: Path
) -> Iterator[tuple[Prometheus, ServeProcess]]:
    binary = need_tool("prometheus", "prometheus")
    serve = ServeProcess(
        redis_url,
        global_options=["--ttl-ms", str(TTL_MS)],
        serve_options=["--per-consumer-metrics"],
        env={"REDIS_PRESENCE_AUTH_TOKEN": TOKEN},
        token=TOKEN,
    )
    with serve, Prometheus(binary, tmp_path, serve.base_url.removeprefix("http://")) as prometheus:
        yield prometheus, serve


def by_labels(result: list[dict[str, Any]], *names: str) -> dict[tuple[str, ...], float]:
    return {tuple(r["metric"][n] for n in names): float(r["value"][1]) for r in result}


def test_prometheus_scrapes_the_snapshot_and_drops_a_deregistered_consumer(
    prometheus_and_serve: tuple[Prometheus, ServeProcess],
    redis_url: str,
    redis_client: redis.Redis,
) -> None:
    prometheus, serve = prometheus_and_serve
    seconds, micros = redis_client.time()
    now = seconds * 1_000_000_000 + micros * 1_000
    # Beats an hour ahead stay active for the whole test: no clock guard for this writer.
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    # Beats placed so that no state changes while the test runs: a future beat stays active.
    writer.heartbeat("orders", "billing", "w-active", 2, now_ns=now + 3_600_000 * MS)
    writer.heartbeat("orders", "billing", "w-stale", 0, now_ns=now - (TTL_MS + TTL_MS // 2) * MS)
    writer.heartbeat("orders", "shipping", "w-expired", 5, now_ns=now - 3_600_000 * MS)
    writer.heartbeat("emails", 'send "quoted"\nline', "mailer", 0, now_ns=now + 3_600_000 * MS)
    # Registered 400 s ago holding leases, never progressed, beating an hour ahead: stuck
    # under the default 300 s budget for the whole test.
    writer.heartbeat("emails", "bounces", "w-stuck", 3, now_ns=now - 400_000 * MS)
    writer.heartbeat("emails", "bounces", "w-stuck", 3, now_ns=now + 3_600_000 * MS)
    writer.expect("payments", "ledger")  # declared, without any consumer
    writer.expect("orders", "billing", min_active=2)

    def scraped() -> list[dict[str, Any]]:
        result = prometheus.query("redis_presence_consumers")
        return result if len(result) == 15 else []

    consumers = wait_until(scraped, timeout_s=30, what="a scrape with every group")
    seconds, micros = redis_client.time()
    snapshot = writer.snapshot(now_ns=seconds * 1_000_000_000 + micros * 1_000, ttl_ms=TTL_MS)
    expected = {
        (q, g, s): float(sum(1 for r in snapshot if (r.queue, r.group, r.state.value) == (q, g, s)))
        for q, g in {(r.queue, r.group) for r in snapshot} | {("payments", "ledger")}
        for s in ("active", "stale", "expired")
    }
    assert by_labels(consumers, "queue", "group", "state") == expected
    assert by_labels(prometheus.query("redis_presence_group_active"), "queue", "group") == {
        ("orders", "billing"): 1.0,
        ("orders", "shipping"): 0.0,
        ("emails", 'send "quoted"\nline'): 1.0,
        ("emails", "bounces"): 1.0,
        ("payments", "ledger"): 0.0,
    }
    declared = {("orders", "billing"): 2.0, ("payments", "ledger"): 1.0}
    assert by_labels(prometheus.query("redis_presence_group_min_active"), "queue", "group") == (
        declared
    )
    assert by_labels(prometheus.query("redis_presence_group_below_min"), "queue", "group") == {
        ("orders", "billing"): 1.0,
        ("payments", "ledger"): 1.0,
    }
    assert by_labels(prometheus.query("redis_presence_consumers_stuck"), "queue", "group") == {
        ("orders", "billing"): 0.0,
        ("orders", "shipping"): 0.0,  # expired: stuck is a flag on active rows only
        ("emails", 'send "quoted"\nline'): 0.0,
        ("emails", "bounces"): 1.0,
        ("payments", "ledger"): 0.0,
    }
    verdicts = prometheus.query("redis_presence_group_verdict == 1")
    assert by_labels(verdicts, "queue", "group", "verdict") == {
        ("orders", "billing", "DEGRADED"): 1.0,  # below its minimum of 2, one stale
        ("orders", "shipping", "STOPPED"): 1.0,
        ("emails", 'send "quoted"\nline', "OK"): 1.0,
        ("emails", "bounces", "STALLED"): 1.0,  # the consumers are read: progress known
        ("payments", "ledger", "STOPPED"): 1.0,
    }
    assert by_labels(prometheus.query("redis_presence_up"), "job") == {("redis-presence",): 1.0}
    leases = {("orders", "billing"): 2.0, ("orders", "shipping"): 5.0}
    leases |= {("emails", 'send "quoted"\nline'): 0.0, ("emails", "bounces"): 3.0}
    assert by_labels(prometheus.query("redis_presence_group_leases"), "queue", "group") == {
        **leases,
        ("payments", "ledger"): 0.0,
    }
    lost = by_labels(prometheus.query("redis_presence_group_leases_expired"), "queue", "group")
    assert lost == {
        **dict.fromkeys(leases, 0.0),
        ("orders", "shipping"): 5.0,
        ("payments", "ledger"): 0.0,
    }
    # Protocol version 2: nobody here drains, is in conflict or reports a capacity (no
    # capacity series: never a 0 that means "not reported").
    for name in ("draining", "conflicts"):
        found = by_labels(prometheus.query(f"redis_presence_group_{name}"), "queue", "group")
        assert found == dict.fromkeys(lost, 0.0), name
    assert prometheus.query("redis_presence_group_capacity") == []
    assert prometheus.query("redis_presence_group_free") == []
    ages = by_labels(prometheus.query("redis_presence_consumer_last_seen_age_seconds"), "consumer")
    assert set(ages) == {(r.consumer,) for r in snapshot}
    assert ages[("w-active",)] == 0.0
    assert 3_600 <= ages[("w-expired",)] < 3_600 + 30
    oldest = by_labels(
        prometheus.query("redis_presence_oldest_heartbeat_age_seconds"), "queue", "group"
    )
    assert 90 <= oldest[("orders", "billing")] < 90 + 30

    # Every expression the shipped dashboard and rules use parses and runs.
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = prometheus.api("rules")["groups"][0]["rules"]
    assert {r["name"] for r in rules} == {
        "RedisPresenceGroupStopped",
        "RedisPresenceGroupStalled",
        "RedisPresenceGroupDegraded",
        "RedisPresenceDeclaredGroupBelowMinimum",
        "RedisPresenceGroupVanished",
        "RedisPresenceConsumersNotHeartbeating",
        "RedisPresenceExpiredConsumersHoldLeases",
        "RedisPresenceRedisUnreachable",
        "RedisPresenceProtocolMismatch",
        "RedisPresenceDataError",
        "RedisPresenceExporterDown",
    }
    assert all(r["health"] != "err" for r in rules), rules
    for expr in [*exprs, *(r["query"] for r in rules)]:
        prometheus.query(re.sub(r"\$\w+", ".*", expr))
    # "Redis readable": 1 (UP) here; 0 is unreachable, 2 another protocol version's prefix,
    # 3 data of the prefix the service cannot read.
    readable = next(p for p in dashboard["panels"] if p["id"] == 3)["targets"][0]["expr"]
    assert [float(r["value"][1]) for r in prometheus.query(readable)] == [1.0]
    mismatch = prometheus.query("redis_presence_protocol_mismatch")
    assert by_labels(mismatch, "job") == {("redis-presence",): 0.0}
    unreadable = prometheus.query("redis_presence_data_error")
    assert by_labels(unreadable, "job") == {("redis-presence",): 0.0}
    no_reader = prometheus.query(exprs[0].replace("$queue", ".*").replace("$group", ".*"))
    assert float(no_reader[0]["value"][1]) == 2.0  # orders/shipping, payments/ledger
    below_panel = next(p for p in dashboard["panels"] if p["id"] == 10)["targets"][0]["expr"]
    below = prometheus.query(re.sub(r"\$\w+", ".*", below_panel))
    assert by_labels(below, "queue", "group") == {
        ("orders", "billing"): 1.0,
        ("payments", "ledger"): 0.0,
    }
    # The alert's expression selects exactly the declared groups below their minimum.
    rule = next(r for r in rules if r["name"] == "RedisPresenceDeclaredGroupBelowMinimum")
    assert by_labels(prometheus.query(rule["query"]), "queue", "group") == {
        ("orders", "billing"): 1.0,
        ("payments", "ledger"): 0.0,
    }

    # A deregistered consumer's series are gone from the next scrape.
    assert writer.deregister("orders", "billing", "w-stale")
    wait_until(
        lambda: (
            not prometheus.query(
                'redis_presence_consumer_last_seen_age_seconds{consumer="w-stale"}'
            )
        ),
        timeout_s=20,
        what="w-stale's series to go",
    )
    after = by_labels(prometheus.query("redis_presence_consumers"), "queue", "group", "state")
    assert after[("orders", "billing", "stale")] == 0.0
    assert after[("orders", "billing", "active")] == 1.0
    writer.close()
    assert TOKEN not in serve.stderr
