"""Security over TLS: a server's certificate checked against a CA, client certificates
(mutual TLS) in the URL or in keyword arguments, the CLI over TLS, and no password in what a
refused connection says. (ACL roles and passwords: test_security.py.)"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import redis
from backends import dump
from click.testing import CliRunner
from leaks import ASYNC_FAST, FAST, PASSWORD, exception_text, secrets_in
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer, free_port
from tls_files import TlsFiles, make_ca, make_client_cert

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceConfigError,
    PresenceConnectionError,
    PresenceError,
    RedisPresenceRegistry,
)
from redis_presence.cli import cli

T0 = 1_796_000_000_123_456_000
PRODUCTION_DOC = Path(__file__).resolve().parent.parent / "docs" / "production.md"

pytestmark = pytest.mark.timeout(60)


# --- TLS ------------------------------------------------------------------------------------


def tls_url(
    server: RedisServer,
    ca_cert: Path,
    *,
    client: tuple[Path, Path] | None = None,
    password: str | None = None,
) -> str:
    """A ``rediss://`` URL trusting `ca_cert`, with a client ``(cert, key)`` and a password."""
    auth = f":{quote(password, safe='')}@" if password is not None else ""
    query = f"ssl_ca_certs={quote(str(ca_cert))}"
    if client is not None:
        query += f"&ssl_certfile={quote(str(client[0]))}&ssl_keyfile={quote(str(client[1]))}"
    return f"rediss://{auth}127.0.0.1:{server.port}?{query}"


def test_tls_with_the_right_ca_works_and_a_wrong_ca_is_refused(
    make_redis_server: MakeRedisServer, tls_files: TlsFiles, tmp_path: Path
) -> None:
    server = make_redis_server(tls=tls_files)
    with RedisPresenceRegistry.from_url(tls_url(server, tls_files.ca_cert)) as registry:
        registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)
        registry.heartbeat("orders", "billing", "w2")  # server clock
        rows = registry.snapshot(now_ns=T0)
        assert [(r.consumer, r.lease_count) for r in rows] == [("w1", 3), ("w2", 0)]
        assert registry.count_active_by_group(now_ns=T0) == {("orders", "billing"): 2}

    other_ca, _ = make_ca(tmp_path / "other-ca", cn="some other CA")
    wrong = RedisPresenceRegistry.from_url(
        tls_url(server, other_ca), retry=Retry(NoBackoff(), 0), socket_connect_timeout=5
    )
    with pytest.raises(PresenceConnectionError, match=r"(?i)certificate") as info:
        wrong.snapshot(now_ns=T0)
    assert isinstance(info.value, PresenceError)

    plaintext = RedisPresenceRegistry.from_url(
        f"redis://127.0.0.1:{server.port}",
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=5,
        socket_timeout=5,
    )
    with pytest.raises(PresenceConnectionError):
        plaintext.heartbeat("orders", "billing", "w3", now_ns=T0)
    with server.client() as check:
        assert check.zcard("presence:{orders}:billing:hb") == 2


def test_cli_over_tls(
    make_redis_server: MakeRedisServer, tls_files: TlsFiles, tmp_path: Path
) -> None:
    server = make_redis_server(tls=tls_files)
    url = tls_url(server, tls_files.ca_cert)
    runner = CliRunner()
    beat = runner.invoke(cli, ["--url", url, "heartbeat", "orders", "billing", "w1"])
    assert beat.exit_code == 0, beat.output
    listed = runner.invoke(cli, ["--url", url, "--now-ns", str(T0), "ls", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert '"consumer": "w1"' in listed.stdout
    counts = runner.invoke(cli, ["--url", url, "counts", "--format", "csv"])
    assert counts.exit_code == 0, counts.output
    assert "orders,billing,1" in counts.stdout

    other_ca, _ = make_ca(tmp_path / "other-ca", cn="some other CA")
    refused = runner.invoke(cli, ["--url", tls_url(server, other_ca), "ls"])
    assert refused.exit_code == 3  # ConnectionFailed
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "certificate" in refused.stderr.lower()


# --- mutual TLS: client certificates --------------------------------------------------------


@pytest.fixture
def mtls_server(make_redis_server: MakeRedisServer, tls_files: TlsFiles) -> RedisServer:
    """A TLS server with ``tls-auth-clients yes`` and a password; its own client() presents
    `tls_files.client_cert`."""
    return make_redis_server(tls=tls_files, tls_auth_clients=True, requirepass=PASSWORD)


@pytest.fixture
def mtls_admin(mtls_server: RedisServer) -> Iterator[redis.Redis]:
    """A client with the right certificate, holding one consumer written before each test."""
    with mtls_server.client() as client:
        RedisPresenceRegistry(client).heartbeat("orders", "billing", "w0", now_ns=T0)
        yield client


def test_production_doc_shows_the_tested_tls_directives(
    tls_files: TlsFiles, tmp_path: Path
) -> None:
    argv = RedisServer(dir=tmp_path, tls=tls_files, tls_auth_clients=True).command_line()
    pairs = itertools.pairwise(map(str, argv))
    tested = {flag.removeprefix("--"): value for flag, value in pairs if flag[:6] == "--tls-"}
    lines = PRODUCTION_DOC.read_text(encoding="utf-8").splitlines()
    shown = dict(line.split() for line in lines if line.startswith("tls-"))
    assert shown.keys() <= tested.keys(), f"docs/production.md shows untested directives: {shown}"
    assert shown["tls-auth-clients"] == tested["tls-auth-clients"] == "yes"


def client_pair(tls: TlsFiles) -> tuple[Path, Path]:
    return tls.client_cert, tls.client_key


def foreign_client_pair(dir: Path) -> tuple[Path, Path]:
    """A client certificate that another CA signed (the server does not trust it)."""
    return make_client_cert(dir, ca=make_ca(dir, cn="some other CA"))


def refused_client_urls(server: RedisServer, tls: TlsFiles, dir: Path) -> dict[str, str]:
    """URLs a ``tls-auth-clients yes`` server must refuse, by what is wrong with them."""
    foreign = foreign_client_pair(dir)
    return {
        "no client certificate": tls_url(server, tls.ca_cert, password=PASSWORD),
        "another CA's certificate": tls_url(server, tls.ca_cert, client=foreign, password=PASSWORD),
    }


def test_mutual_tls_with_the_client_certificate_in_the_url_or_in_kwargs(
    mtls_server: RedisServer, mtls_admin: redis.Redis, tls_files: TlsFiles, tmp_path: Path
) -> None:
    ca, good = tls_files.ca_cert, client_pair(tls_files)
    in_url = tls_url(mtls_server, ca, client=good, password=PASSWORD)
    with RedisPresenceRegistry.from_url(in_url) as registry:
        registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)
        assert [(r.consumer, r.lease_count) for r in registry.snapshot(now_ns=T0)] == [
            ("w0", 0),
            ("w1", 3),
        ]

    bare = tls_url(mtls_server, ca, password=PASSWORD)
    certfile, keyfile = good
    for as_given in (str, Path):
        kwargs: dict[str, Any] = {
            "ssl_certfile": as_given(certfile),
            "ssl_keyfile": as_given(keyfile),
        }
        with RedisPresenceRegistry.from_url(bare, **kwargs) as registry:
            registry.heartbeat("orders", "billing", "w2", now_ns=T0)
            assert registry.count_active_by_group(now_ns=T0) == {("orders", "billing"): 3}

    # redis-py lets a URL query value override the keyword argument of the same name.
    foreign_in_url = tls_url(
        mtls_server, ca, client=foreign_client_pair(tmp_path), password=PASSWORD
    )
    overridden = RedisPresenceRegistry.from_url(
        foreign_in_url, ssl_certfile=str(certfile), ssl_keyfile=str(keyfile), **FAST
    )
    with overridden, pytest.raises(PresenceConnectionError):
        overridden.snapshot(now_ns=T0)


def test_mutual_tls_with_the_asyncio_registry(
    mtls_server: RedisServer, mtls_admin: redis.Redis, tls_files: TlsFiles
) -> None:
    ca = tls_files.ca_cert
    good = tls_url(mtls_server, ca, client=client_pair(tls_files), password=PASSWORD)
    bare = tls_url(mtls_server, ca, password=PASSWORD)

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(good) as registry:
            await registry.heartbeat("orders", "billing", "w1", 2, now_ns=T0)
            assert [r.consumer for r in await registry.snapshot(now_ns=T0)] == ["w0", "w1"]
        async with AsyncRedisPresenceRegistry.from_url(bare, **ASYNC_FAST) as refused:
            with pytest.raises(PresenceConnectionError):
                await refused.heartbeat("orders", "billing", "w2", now_ns=T0)

    asyncio.run(main())
    assert mtls_admin.zcard("presence:{orders}:billing:hb") == 2


def test_mutual_tls_refuses_a_missing_or_foreign_client_certificate(
    mtls_server: RedisServer, mtls_admin: redis.Redis, tls_files: TlsFiles, tmp_path: Path
) -> None:
    """TLS 1.3 finishes the client's side of the handshake before the server checks the
    certificate, so the refusal shows on the first command: as the server's alert
    (``certificate required``, ``unknown ca``) or, when the command was still being written,
    as ``EOF occurred in violation of protocol``. Either way it is a connection error."""
    operations: dict[str, Callable[[RedisPresenceRegistry], object]] = {
        "heartbeat": lambda r: r.heartbeat("orders", "billing", "w9", 1, now_ns=T0),
        "snapshot": lambda r: r.snapshot(now_ns=T0),
    }
    before = dump(mtls_admin)
    for name, url in refused_client_urls(mtls_server, tls_files, tmp_path).items():
        for op_name, op in operations.items():
            with (
                pytest.raises(PresenceConnectionError) as info,
                RedisPresenceRegistry.from_url(url, **FAST) as registry,
            ):
                op(registry)
            message = str(info.value)
            assert message.startswith("cannot reach Redis: "), f"{name}, {op_name}: {message}"
            assert len(message.splitlines()) == 1, f"{name}, {op_name}: {message}"
            assert not secrets_in(exception_text(info.value), PASSWORD), f"{name}: {message}"
    assert dump(mtls_admin) == before


@pytest.mark.parametrize("option", ["ssl_ca_certs", "ssl_certfile", "ssl_keyfile"])
def test_a_tls_file_that_does_not_exist_is_a_config_error_naming_it(
    tls_files: TlsFiles, tmp_path: Path, option: str
) -> None:
    """Refused before connecting; redis-py alone would report it on the first command as
    ``Error 2 connecting to host:port. No such file or directory.``, naming no file."""
    missing = tmp_path / "no-such-dir" / f"{option}.pem"
    files: dict[str, Any] = {
        "ssl_ca_certs": tls_files.ca_cert,
        "ssl_certfile": tls_files.client_cert,
        "ssl_keyfile": tls_files.client_key,
        option: missing,
    }
    bare = f"rediss://:{quote(PASSWORD, safe='')}@127.0.0.1:{free_port()}/0"
    in_url = f"{bare}?{urlencode(files, safe='/', quote_via=quote)}"
    expected = f"{option} {str(missing)!r}: no such file"
    for url, kwargs in ((in_url, {}), (bare, files)):
        with pytest.raises(PresenceConfigError) as info:
            RedisPresenceRegistry.from_url(url, **kwargs)
        assert str(info.value) == expected
        assert not secrets_in(exception_text(info.value), PASSWORD)

    result = CliRunner().invoke(cli, ["--url", in_url, "ls"])
    assert result.exit_code == 2, result.output  # UsageProblem
    assert result.stderr == f"Error: {expected}\n"


def test_cli_with_a_client_certificate(
    mtls_server: RedisServer, mtls_admin: redis.Redis, tls_files: TlsFiles, tmp_path: Path
) -> None:
    url = tls_url(mtls_server, tls_files.ca_cert, client=client_pair(tls_files), password=PASSWORD)
    runner = CliRunner()
    beat = ["--url", url, "heartbeat", "orders", "billing", "w1", "--lease-count", "2"]
    assert runner.invoke(cli, beat).exit_code == 0
    ls = ["--now-ns", str(T0), "ls", "--format", "json"]
    listed = runner.invoke(cli, ls, env={"REDIS_PRESENCE_URL": url})
    assert listed.exit_code == 0, listed.output
    rows = [(row["consumer"], row["lease_count"]) for row in json.loads(listed.stdout)]
    assert rows == [("w0", 0), ("w1", 2)]

    before = dump(mtls_admin)
    for name, refused_url in refused_client_urls(mtls_server, tls_files, tmp_path).items():
        for args in (["ls"], ["heartbeat", "orders", "billing", "w9"]):
            refused = runner.invoke(cli, ["--url", refused_url, *args])
            assert refused.exit_code == 3, f"{name}: {refused.output}"  # ConnectionFailed
            assert refused.exception is None or isinstance(refused.exception, SystemExit)
            shown = refused.output + refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1, f"{name}: {refused.stderr}"
            assert refused.stderr.startswith("Error: cannot reach Redis: "), refused.stderr
            assert "Traceback" not in shown
            assert not secrets_in(shown, PASSWORD), f"{name}: {shown}"
    assert dump(mtls_admin) == before
