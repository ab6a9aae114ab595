"""The generated modules (`aio_operations`, `contract`) are current, and say what they are.

`redis_presence/operations.py` is the one place an operation's method is written;
`python -m tools.codegen` (a development tool: the wheel does not ship it) writes its
asyncio form and the protocol. These tests fail when either generated module is behind its
source, or when a registry lacks an operation the contract names.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from redis_presence.aio import AsyncRedisPresenceRegistry
from redis_presence.aio_operations import AsyncContractOperations, AsyncOperations
from redis_presence.contract import PresenceRegistry
from redis_presence.memory import ConsumerPresenceRegistry
from redis_presence.operations import ContractOperations, Operations
from redis_presence.registry import RedisPresenceRegistry
from tools import codegen

ROOT = Path(__file__).resolve().parent.parent


def test_generated_modules_are_current() -> None:
    for target, text in codegen.generated().items():
        assert target.read_text(encoding="utf-8") == text, (
            f"{target.name} is behind operations.py: run python -m tools.codegen"
        )


def test_check_mode_exits_zero_when_current() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tools.codegen", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_a_stale_module_is_named_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    current = codegen.ASYNC_TARGET.read_text(encoding="utf-8")
    stale = tmp_path / "aio_operations.py"
    stale.write_text("# an old version\n", encoding="utf-8")
    monkeypatch.setattr(codegen, "ASYNC_TARGET", stale)
    monkeypatch.setattr(codegen, "PROTOCOL_TARGET", tmp_path / "contract.py")
    assert codegen.main(["--check"]) == 1
    assert "aio_operations.py, contract.py behind operations.py" in capsys.readouterr().err
    assert stale.read_text(encoding="utf-8") == "# an old version\n"  # --check writes nothing
    assert codegen.main([]) == 0
    assert stale.read_text(encoding="utf-8") == current
    assert codegen.main(["--check"]) == 0


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if inspect.isfunction(member) and not name.startswith("_") and name not in codegen.RUNNERS
    }


def test_the_async_operations_have_the_sync_signatures() -> None:
    for sync, asyncio_form in (
        (ContractOperations, AsyncContractOperations),
        (Operations, AsyncOperations),
    ):
        sync_methods, async_methods = _public(sync), _public(asyncio_form)
        assert sorted(async_methods) == sorted(sync_methods)
        for name, signature in sync_methods.items():
            assert list(async_methods[name].parameters) == list(signature.parameters), name
            member = getattr(asyncio_form, name)
            streams = name == "iter_snapshot"
            assert (
                inspect.iscoroutinefunction(member)
                or inspect.isasyncgenfunction(member)
                or (streams)
            ), name


def test_the_protocol_names_every_contract_operation() -> None:
    operations = set(_public(ContractOperations))
    members = {name for name in vars(PresenceRegistry) if not name.startswith("_")}
    assert operations <= members
    assert "__len__" in vars(PresenceRegistry)
    for name in operations:
        protocol_signature = inspect.signature(getattr(PresenceRegistry, name))
        assert protocol_signature == _public(ContractOperations)[name], name


@pytest.mark.parametrize("registry", [RedisPresenceRegistry, ConsumerPresenceRegistry])
def test_every_sync_registry_has_every_contract_operation(registry: type) -> None:
    for name, signature in _public(ContractOperations).items():
        own = inspect.signature(getattr(registry, name))
        assert list(own.parameters) == list(signature.parameters), (registry.__name__, name)


def test_the_async_registry_is_the_async_operations() -> None:
    assert issubclass(AsyncRedisPresenceRegistry, AsyncOperations)
    assert issubclass(RedisPresenceRegistry, Operations)
    assert not hasattr(AsyncRedisPresenceRegistry, "__len__")


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("redis_presence.redis", "RedisPresenceRegistry", RedisPresenceRegistry),
        ("redis_presence.protocol", "PresenceRegistry", PresenceRegistry),
    ],
)
def test_the_old_module_names_still_work_with_a_warning(old: str, name: str, new: object) -> None:
    module = __import__(old, fromlist=[name])
    gone = rf"{old} is deprecated and goes in redis-presence [0-9.]+: import {name} from"
    with pytest.warns(DeprecationWarning, match=gone):
        assert getattr(module, name) is new
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unknown name is an AttributeError, not a warning
        with pytest.raises(AttributeError, match="no attribute 'nothing'"):
            module.nothing  # noqa: B018 (an attribute the old module never had)
