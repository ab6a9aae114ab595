"""Startup (issue 18, item 14): `--help` and `--version` import neither redis-py nor rich,
and the package's public names load on first use. The time itself is measured by the
benchmark's `startup` case, not asserted here."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import redis_presence
from redis_presence.cli import cli

HEAVY = ("redis", "rich", "fakeredis")

PROBE = f"""
import contextlib, io, sys
from redis_presence.cli import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main()
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules}} & {set(HEAVY)!r})))
"""


def heavy_after(*args: str) -> list[str]:
    """The heavy packages a fresh process has imported once `redis-presence ARGS` is done."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr == "", done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], *([name, "--help"] for name in sorted(cli.commands))],
    ids=" ".join,
)
def test_help_and_version_import_neither_redis_nor_rich(args: list[str]) -> None:
    assert heavy_after(*args) == []


def test_importing_the_package_imports_no_driver() -> None:
    code = "import sys, redis_presence; print('redis' in sys.modules, 'rich' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_every_public_name_loads_from_its_module() -> None:
    table = redis_presence._EXPORTS
    assert redis_presence.__all__ == list(table)
    assert set(table) == {
        "DEFAULT_PRESENCE_TTL_MS",
        "DEFAULT_MAX_FUTURE_MS",
        "DEFAULT_STUCK_AFTER_MS",
        "DEFAULT_RETENTION_TTLS",
        "ConsumerMeta",
        "GroupPresence",
        "GroupsPage",
        "DEFAULT_REPORT_INTERVAL_MS",
        "AsyncPresenceReporter",
        "AsyncRedisPresenceRegistry",
        "BeatReply",
        "BeatSpec",
        "Written",
        "process_instance",
        "ConsumerPresence",
        "ConsumerPresenceRegistry",
        "PresenceAuthError",
        "PresenceBatchError",
        "PresenceClockError",
        "PresenceClusterMigratingError",
        "PresenceConfigError",
        "PresenceConnectionError",
        "PresenceDataError",
        "PresenceDataWarning",
        "PresenceError",
        "PresenceOutOfMemoryError",
        "PresencePoolExhausted",
        "PresenceProtocolError",
        "PresenceReadOnlyError",
        "PresenceResyncRequired",
        "DEFAULT_EVENTS_KEPT",
        "EventKind",
        "FollowCursor",
        "FollowSnapshot",
        "PresenceEvent",
        "Limits",
        "MAX_BEATS_PER_CALL",
        "MAX_CONSUMERS_PER_CALL",
        "MAX_GROUPS_PER_CALL",
        "MAX_ROWS_PER_ROUND_TRIP",
        "TTL_CACHE_MS",
        "PresenceRegistry",
        "GroupFacts",
        "GroupVerdict",
        "Verdict",
        "judge",
        "PresenceReporter",
        "PresenceState",
        "RedisPresenceRegistry",
    }
    for name, module in table.items():
        expected = getattr(importlib.import_module(f"redis_presence.{module}"), name)
        assert getattr(redis_presence, name) is expected, name
    assert set(redis_presence.__all__) <= set(dir(redis_presence))
    star: dict[str, object] = {}
    exec("from redis_presence import *", star)
    assert set(star) - {"__builtins__"} == set(table)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        redis_presence.Nope  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from redis_presence import Nope", {})


# The venv's own metadata: PYTHONPATH (first on sys.path) also holds this environment's.
SAY_VERSIONS = """
import sysconfig
from importlib.metadata import distributions
import redis_presence
from redis_presence.reporter import default_meta
(wheel,) = distributions(name="redis-presence", path=[sysconfig.get_paths()["purelib"]])
print(wheel.version, redis_presence.__version__, default_meta()["version"])
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_wheel_installs_a_working_console_script(tmp_path: Path) -> None:
    """The README's "Installing": a built wheel puts `redis-presence` on the venv's PATH."""
    root = Path(redis_presence.__file__).resolve().parents[1]
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(root)],
        check=True,
    )
    (wheel,) = wheels.glob("redis_presence-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)],
        check=True,
    )
    # Dependencies come from this environment (PYTHONPATH runs no .pth file, so the
    # editable install of this checkout stays invisible); the package from the wheel.
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    version = subprocess.run(
        [str(venv / "bin" / "redis-presence"), "--version"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert version.stdout == f"redis-presence {redis_presence.__version__}\n"
    # the wheel's own metadata and the reporter's, read inside the venv, say the same
    said = subprocess.run(
        [str(venv / "bin" / "python"), "-c", SAY_VERSIONS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert said.stdout.split() == [redis_presence.__version__] * 3
    helped = subprocess.run(
        [str(venv / "bin" / "redis-presence"), "ls", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--sort" in helped.stdout
