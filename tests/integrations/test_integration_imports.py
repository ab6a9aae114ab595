"""No framework is imported unless its integration is: `import redis_presence`, the CLI and
the Streams integration import none, and each framework module imports only its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FRAMEWORKS = ("celery", "kombu", "dramatiq", "faststream", "rq", "huey", "taskiq", "taskiq_redis")

CHECK = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(%r))))
"""


def imported(*modules: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHECK % (FRAMEWORKS,), *modules],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout))


def test_the_package_the_cli_and_streams_import_no_framework() -> None:
    modules = ("redis_presence", "redis_presence.cli", "redis_presence.integrations")
    assert imported(*modules, "redis_presence.integrations.streams") == set()


@pytest.mark.parametrize(
    ("module", "frameworks"),
    [
        ("redis_presence.integrations.celery", {"celery", "kombu"}),
        ("redis_presence.integrations.celery_beat", {"celery", "kombu"}),
        ("redis_presence.integrations.dramatiq", {"dramatiq"}),
        ("redis_presence.integrations.faststream", {"faststream"}),
        ("redis_presence.integrations.rq", {"rq"}),
        ("redis_presence.integrations.huey", {"huey"}),
        ("redis_presence.integrations.taskiq", {"taskiq"}),
    ],
)
def test_each_integration_imports_its_own_framework_only(module: str, frameworks: set[str]) -> None:
    assert imported(module) == frameworks


SYNC_PATH = """
import sys
import redis
from redis_presence import PresenceReporter, RedisPresenceRegistry
import redis_presence.integrations.celery, redis_presence.integrations.dramatiq
import redis_presence.integrations.huey, redis_presence.integrations.rq
reporter = PresenceReporter(RedisPresenceRegistry(redis.Redis(port=1)), 3_600_000)
reporter.beat("q", "g", "c")
reporter.close()  # its write fails (nothing listens on port 1) and is logged
print(sorted(m for m in sys.modules if m.startswith("redis_presence.aio")))
"""


def test_the_sync_reporter_and_integrations_leave_the_asyncio_registry_unimported() -> None:
    """A thread-driven worker (RQ, Huey, Celery, Dramatiq) loads only the sync registry; the
    asyncio one (and what only it uses) loads with `AsyncPresenceReporter`. asyncio itself
    comes with redis-py, which imports ``redis.asyncio`` at ``import redis``."""
    done = subprocess.run(
        [sys.executable, "-c", SYNC_PATH], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
