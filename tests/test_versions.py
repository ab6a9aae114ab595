"""The version matrix: each server binary is the version the README says is tested."""

from __future__ import annotations

import pytest
from binaries import DEBIAN_REDIS, REDIS_8, VALKEY_9, ServerBuild
from servers import RedisServer


@pytest.mark.parametrize(
    ("build", "fixture"),
    [
        pytest.param(DEBIAN_REDIS, "redis_server", id="redis-7"),
        pytest.param(REDIS_8, "redis8_server", id="redis-8"),
        pytest.param(VALKEY_9, "valkey9_server", id="valkey-9"),
    ],
)
def test_each_server_of_the_matrix_reports_its_major_version(
    request: pytest.FixtureRequest, build: ServerBuild, fixture: str
) -> None:
    server: RedisServer = request.getfixturevalue(fixture)
    with server.client(decode_responses=True) as client:
        info = client.info("server")
    assert str(info[build.version_field]).split(".")[0] == build.major, info
    if build is VALKEY_9:
        assert info.get("server_name") == "valkey", info
    print(f"{build.name}: {info[build.version_field]}")  # shown with -s
