"""deploy/kubernetes: the probes' commands run as written, and KEDA's valueLocation names a
number in the real API's answer, against a real redis-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from servers import HOST, free_port
from webservers import ROOT, need_tool

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app

KUBERNETES = ROOT / "deploy" / "kubernetes"


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((KUBERNETES / name).read_text()) if doc]


def of_kind(name: str, kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in documents(name) if doc["kind"] == kind]
    return found


def run_probe(command: list[str], url: str, pod: str) -> subprocess.CompletedProcess[str]:
    """The probe's command as the kubelet runs it in the container (its env, our PATH)."""
    bin_dir = str(Path(sys.executable).parent)
    assert shutil.which("redis-presence", path=bin_dir), "the CLI's entry point"
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "POD_NAME": pod,
        "REDIS_PRESENCE_URL": url,
    }
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_liveness_probe_passes_while_the_pod_beats(redis_url: str) -> None:
    (container,) = of_kind("worker-probes.yaml", "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    command = container["livenessProbe"]["exec"]["command"]
    assert container["startupProbe"]["exec"]["command"] == command
    registry = RedisPresenceRegistry.from_url(redis_url)
    try:
        registry.heartbeat("orders", "billing", "billing-worker-7d9f-abc12")  # server clock
    finally:
        registry.close()
    alive = run_probe(command, redis_url, "billing-worker-7d9f-abc12")
    assert alive.returncode == 0, alive.stdout + alive.stderr
    assert alive.stdout.startswith("OK   consumer 'billing-worker-7d9f-abc12'")
    unknown = run_probe(command, redis_url, "billing-worker-7d9f-zzz99")
    assert unknown.returncode == 1
    assert unknown.stdout.endswith(": not tracked\n")
    outage = run_probe(command, f"redis://{HOST}:{free_port()}/0", "billing-worker-7d9f-abc12")
    assert outage.returncode == 0  # a Redis outage restarts nobody
    assert "cannot reach Redis" in outage.stderr


def test_the_alerting_cronjob_checks_the_declared_groups(redis_url: str) -> None:
    job = of_kind("worker-probes.yaml", "CronJob")["spec"]["jobTemplate"]["spec"]["template"]
    (container,) = job["spec"]["containers"]
    registry = RedisPresenceRegistry.from_url(redis_url)
    try:
        registry.expect("orders", "billing", 2)
        registry.heartbeat("orders", "billing", "w1")
    finally:
        registry.close()
    below = run_probe(container["args"], redis_url, "")
    assert below.returncode == 1, below.stderr
    assert below.stdout.startswith(
        "DEGRADED queue 'orders' group 'billing': below its minimum: 1 active, at least 2"
    )


@pytest.fixture
def api(redis_url: str) -> Any:
    """The service as the example runs it: with the token and the URL's Host allowed."""
    url = urlsplit(keda_trigger()["metadata"]["url"])
    assert url.hostname is not None
    config = WebConfig(
        url=redis_url,
        ttl_ms=None,
        read_cache_s=0,
        auth_token="s3cret",
        allowed_hosts=(url.hostname,),
    )
    base = f"{url.scheme}://{url.netloc}"
    with TestClient(create_app(config), base_url=base, raise_server_exceptions=False) as client:
        yield client


def keda_trigger() -> dict[str, Any]:
    (trigger,) = of_kind("keda-scaledobject.yaml", "ScaledObject")["spec"]["triggers"]
    return trigger  # type: ignore[no-any-return]


def test_the_keda_value_location_is_the_groups_active_count(redis_url: str, api: Any) -> None:
    trigger = keda_trigger()
    assert trigger["type"] == "metrics-api"
    meta = trigger["metadata"]
    assert meta["authMode"] == "bearer"
    assert meta["format"] == "json"
    registry = RedisPresenceRegistry.from_url(redis_url)
    try:
        for name in ("w1", "w2", "w3"):
            registry.heartbeat("orders", "billing", name)
    finally:
        registry.close()
    url = urlsplit(meta["url"])
    answer = api.get(f"{url.path}?{url.query}", headers={"Authorization": "Bearer s3cret"})
    assert answer.status_code == 200, answer.text
    value: Any = answer.json()
    for part in meta["valueLocation"].split("."):  # GJSON: plain dotted keys here
        value = value[part]
    assert value == 3
    assert float(meta["targetValue"]) > 0
    auth = of_kind("keda-scaledobject.yaml", "TriggerAuthentication")
    assert auth["metadata"]["name"] == trigger["authenticationRef"]["name"]
    assert [ref["parameter"] for ref in auth["spec"]["secretTargetRef"]] == ["token"]


def test_the_keda_free_slots_query_is_the_slots_in_use(tmp_path: Path) -> None:
    """The free-slots example's query, evaluated by promtool over the two metrics: the
    group's slots in use (capacity - free), and nothing for a group without capacity."""
    promtool = need_tool("promtool", "prometheus")
    (scaled,) = [
        d for d in documents("keda-scale-on-free-slots.yaml") if d["kind"] == "ScaledObject"
    ]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    meta = trigger["metadata"]
    assert meta["ignoreNullValues"] == "false"
    assert float(meta["threshold"]) > 0
    assert scaled["spec"]["fallback"]["replicas"] >= scaled["spec"]["minReplicaCount"]
    labels = 'queue="orders", group="billing", instance="a", job="redis-presence"'
    other = 'queue="orders", group="audit", instance="a", job="redis-presence"'
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"redis_presence_group_capacity{{{labels}}}", "values": "40 40 50"},
                    {"series": f"redis_presence_group_free{{{labels}}}", "values": "10 0 30"},
                    {"series": f"redis_presence_group_capacity{{{other}}}", "values": "99x2"},
                    {"series": f"redis_presence_group_free{{{other}}}", "values": "1x2"},
                ],
                "promql_expr_test": [
                    {
                        "expr": meta["query"],
                        "eval_time": f"{t}m",
                        "exp_samples": [{"labels": "{}", "value": v}],
                    }
                    for t, v in ((0, 30), (1, 40), (2, 20))
                ],
            },
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"redis_presence_group_active{{{labels}}}", "values": "3x2"}
                ],
                "promql_expr_test": [{"expr": meta["query"], "eval_time": "1m", "exp_samples": []}],
            },
        ],
    }
    path = tmp_path / "keda.test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
