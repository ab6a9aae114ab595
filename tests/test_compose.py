"""docker-compose.yml stays valid: every command it names exists in the CLI and parses.

The docker engine is not needed (nor called): the file is read with PyYAML and each
redis-presence command line is parsed by the real click command, options included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

import redis_presence
from redis_presence.cli import cli

REPO = Path(redis_presence.__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    result: dict[str, dict[str, Any]] = data["services"]
    return result


def cli_argv(service: dict[str, Any]) -> list[str] | None:
    """The redis-presence arguments of a service, or None if it runs something else."""
    entrypoint = list(service.get("entrypoint") or [])
    command = service.get("command") or []
    argv = [*entrypoint, *(command if isinstance(command, list) else command.split())]
    if not argv or argv[0] != "redis-presence":
        return None
    return [str(arg) for arg in argv[1:]]


def parse(argv: list[str]) -> click.Command:
    """Parse `argv` like the console script would, without running anything."""
    ctx = cli.make_context("redis-presence", list(argv))
    name = argv[len(argv) - len(ctx.args) - 1]
    command = cli.get_command(ctx, name)
    assert command is not None, f"no such command: {name}"
    command.make_context(name, list(ctx.args), parent=ctx)
    return command


def test_services_and_redis_persistence(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == {"redis", "broker-a", "broker-b", "dashboard", "cli"}
    redis_service = services["redis"]
    command = redis_service["command"]
    assert command[0] == "redis-server"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert redis_service["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])


def test_every_cli_command_exists_and_parses(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = {}
    for name, service in services.items():
        argv = cli_argv(service)
        if argv is None:
            continue
        for key, value in (service.get("environment") or {}).items():
            monkeypatch.setenv(key, str(value))  # env values are validated too
        parsed[name] = parse(argv).name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["environment"]["REDIS_PRESENCE_URL"].startswith("redis://redis:")
    assert parsed == {
        "broker-a": "demo-broker",
        "broker-b": "demo-broker",
        "dashboard": "serve",
        "cli": "ls",
    }


def test_brokers_have_distinct_names(services: dict[str, dict[str, Any]]) -> None:
    names = []
    for service in services.values():
        argv = cli_argv(service) or []
        if "--name" in argv:
            names.append(argv[argv.index("--name") + 1])
    assert sorted(names) == ["broker-a", "broker-b"]


def test_the_image_copies_what_the_build_needs(services: dict[str, dict[str, Any]]) -> None:
    dockerfile = services["broker-a"]["build"]["dockerfile_inline"]
    sources = [
        src
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
    ]
    assert {"pyproject.toml", "README.md", "redis_presence", "lua"} <= set(sources)
    for src in sources:
        assert (REPO / src).exists(), src


def test_the_dashboard_is_published_on_loopback_and_checked(
    services: dict[str, dict[str, Any]],
) -> None:
    dashboard = services["dashboard"]
    assert dashboard["ports"] == ["127.0.0.1:8321:8321"]
    assert "/healthz" in " ".join(dashboard["healthcheck"]["test"])
    assert '".[web]"' in dashboard["build"]["dockerfile_inline"]


def test_the_commands_in_the_file_comments_exist() -> None:
    """The usage comments at the top name real CLI commands."""
    for line in COMPOSE.read_text().splitlines():
        match = re.match(r"#\s+docker compose run --rm cli(?: (\S+))?", line)
        if match and match.group(1):
            assert match.group(1) in cli.commands, line
