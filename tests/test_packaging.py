"""The Lua scripts load from a built wheel (in a fresh venv) and from an editable install; the
wheel holds the package and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import redis_presence
from redis_presence import scripts

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import sys, fakeredis, redis_presence
from redis_presence import RedisPresenceRegistry, scripts
registry = RedisPresenceRegistry(fakeredis.FakeRedis())
registry.heartbeat("q", "g", "c", 4, now_ns=1_796_000_000_000_000_000)
(row,) = registry.snapshot(now_ns=1_796_000_000_000_000_000)
assert row.lease_count == 4 and row.state.value == "active", row
print(scripts.script_origin(), redis_presence.__file__)
"""


def test_editable_install_reads_the_top_level_lua_folder() -> None:
    package_dir = Path(redis_presence.__file__).resolve().parent
    if package_dir.parent != ROOT:
        pytest.skip("redis_presence is not imported from this checkout")
    assert not (package_dir / "lua").exists()
    assert scripts.script_origin() == "checkout"
    for name in scripts.SCRIPT_NAMES:
        body = (ROOT / "lua" / f"{name}.lua").read_text(encoding="utf-8")
        assert body in scripts.source(name)


def test_the_wheel_holds_the_package_and_no_development_tool() -> None:
    """hatchling's listing of the wheel (what it would put in, without building): the package
    with its generated modules and its scripts; not the generator that writes those modules
    (`tools/codegen.py`), nor the tests or the benchmarks."""
    from hatchling.builders.wheel import WheelBuilder

    names = {f.distribution_path for f in WheelBuilder(str(ROOT)).recurse_included_files()}
    for shipped in ("aio_operations.py", "contract.py", "lua/heartbeat.lua", "py.typed"):
        assert f"redis_presence/{shipped}" in names, shipped
    assert sorted(name for name in names if not name.startswith("redis_presence/")) == []
    assert sorted(name for name in names if "codegen" in name) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_built_wheel_ships_and_loads_the_scripts(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip_wheel, "-q", "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("redis_presence-*.whl")
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip_install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip_install, "--no-deps", str(wheel)], check=True)
    # Dependencies (redis, fakeredis) come from this environment's site-packages; the
    # package itself only from the wheel: PYTHONPATH entries do not run .pth files, so
    # the editable install of this checkout is invisible there.
    env = dict(os.environ, PYTHONPATH=sysconfig.get_paths()["purelib"])
    out = subprocess.run(
        [str(python), "-c", CHECK],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert out[0] == "package"
    assert Path(out[1]).is_relative_to(venv)
