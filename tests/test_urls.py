"""Connection URLs: every malformed one is a config error with the password hidden, every
client gets explicit timeouts, and several startup nodes or sentinels are all used."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import signal
import threading
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer, free_port

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceConfigError,
    PresenceError,
    PresenceReporter,
    RedisPresenceRegistry,
    clients,
    redaction,
    url_parsing,
    urls,
)
from redis_presence.cli import cli
from redis_presence.keys import Keyspace
from redis_presence.urls import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_SOCKET_TIMEOUT_S,
    open_async_client,
    open_client,
    parse_url,
    redact,
    secrets_of,
)

T0 = 1_796_000_000_123_456_000
NO_RETRY: dict[str, Any] = {"retry": Retry(NoBackoff(), 0), "socket_connect_timeout": 1}

pytestmark = pytest.mark.timeout(60)


def exception_text(exc: BaseException) -> str:
    """Everything a caller could see of `exc`: traceback, message and repr of each link."""
    parts = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def fast_factory(url: str, prefix: str, read_only: bool) -> RedisPresenceRegistry:
    """The CLI's registry factory without redis-py's retries (a refused connection fails at
    once instead of after ten backoffs)."""
    return RedisPresenceRegistry.from_url(url, prefix=prefix, read_only=read_only, **NO_RETRY)


def cli_output(url: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--url", url, "ls"], obj=fast_factory)
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), f"{url!r}: {result.exception!r}"
    return result.exit_code, result.output


# --- the fuzzed forms of issue 16 ------------------------------------------------------------

FUZZED = [
    pytest.param("admin:hunter2@127.0.0.1:1", "hunter2", id="no-scheme"),
    pytest.param("redis:/admin:hunter2@127.0.0.1:1/0", "hunter2", id="one-slash"),
    pytest.param("redis:admin:hunter2@127.0.0.1:1/0", "hunter2", id="no-slash"),
    pytest.param("redis://:S3cr?t=X@127.0.0.1:1/0", "S3cr?t=X", id="raw-question-then-equals"),
    pytest.param("redis://u:S3cr?t=X@127.0.0.1/0?db=1", "S3cr?t=X", id="raw-question-then-query"),
    pytest.param("unix://:hunter2?=@/tmp/x.sock", "hunter2", id="unix-raw-question"),
    pytest.param("redis://:hunter2@127.0.0.1:1/0?protocol=4", "hunter2", id="protocol-4"),
    pytest.param("redis://:hunter2@127.0.0.1:1/0?encoding=nope", "hunter2", id="encoding-nope"),
    pytest.param("redis://:hunter2@127.0.0.1:1/0#frag", "hunter2", id="fragment"),
    pytest.param("redis://127.0.0.1:1/0?password=hunter2&protocol=4", "hunter2", id="query-pw"),
    pytest.param("redis+cluster://:hunter2@h:1,h:port", "hunter2", id="cluster-bad-port"),
    pytest.param("redis+cluster://:hunter2@h:1/2", "hunter2", id="cluster-db"),
    pytest.param("redis://:hunter2@h:1,h:2/0", "hunter2", id="several-hosts"),
    pytest.param("redis+sentinel://:hunter2@h:1/", "hunter2", id="sentinel-no-service"),
    pytest.param(
        "redis+sentinel://h:1/m?sentinel_password=hunter2&socket_timeout=-1",
        "hunter2",
        id="sentinel-query-pw",
    ),
    pytest.param("unix://:hunter2@tmp/x.sock", "hunter2", id="unix-relative"),
    pytest.param("redis://:hunter2@h:1/0?retry_on_timeout=maybe", "hunter2", id="bad-bool"),
    pytest.param("redis://:hunter2@h:1/0?max_connections=0", "hunter2", id="no-connections"),
    pytest.param("redis://:hunter2@[::1/0", "hunter2", id="broken-ipv6"),
    pytest.param("rediss://:hunter2@h:1/0?ssl_cert_reqs=maybe", "hunter2", id="bad-cert-reqs"),
]


@pytest.mark.parametrize(("url", "password"), FUZZED)
def test_malformed_urls_are_config_errors_with_the_password_hidden(url: str, password: str) -> None:
    for opener in (RedisPresenceRegistry, AsyncRedisPresenceRegistry):
        with pytest.raises(PresenceConfigError, match="invalid Redis URL") as info:
            opener.from_url(url)
        text = exception_text(info.value)
        assert password not in text, text
        assert "***" in str(info.value), str(info.value)  # the URL is shown, redacted
    code, output = cli_output(url)
    assert code == 2, output
    assert password not in output
    assert output.startswith("Error: invalid Redis URL"), output
    assert output.count("\n") == 1, output


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("unix://", "expected unix://[user:password@]/path/to/redis.sock[?db=N]"),
        ("unix:/tmp/x.sock", "expected unix://[user:password@]/path/to/redis.sock[?db=N]"),
        ("unix://tmp/x.sock", "the socket path must be absolute: unix:///path/to/redis.sock"),
        ("unix:///tmp/x.sock?db=zero", "the database must be a number, got 'zero'"),
        ("redis:/localhost", "expected redis://[user:password@]host[:port][/db]"),
        ("localhost:6379", "expected scheme://[user:password@]host[:port][/db]"),
        ("redis+cluster://", "expected redis+cluster://[user:password@]host[:port][,host2"),
        ("redis+sentinel://h", "no service name: expected redis+sentinel://"),
        ("redis://h:0/0", "the port must be a number from 1 to 65535, got '0'"),
        ("redis://h:1/2147483648", "the database must be a number from 0 to 2147483647"),
        ("redis://h:1/0?protocol=4", "option 'protocol' must be one of 2, 3, got '4'"),
        ("redis://h:1/0?encoding=nope", "option 'encoding' must be a text encoding"),
        ("redis://h:1/0?socket_timeout=-1", "option 'socket_timeout' must be a positive number"),
        ("redis://h:1/0?password=x&socket_timeout=0", "must be a positive number of seconds"),
    ],
)
def test_each_scheme_names_its_own_form(url: str, message: str) -> None:
    with pytest.raises(PresenceConfigError) as info:
        RedisPresenceRegistry.from_url(url)
    assert message in str(info.value)
    if url.startswith("unix"):
        assert "host[:port]" not in str(info.value)


def test_malformed_sentinel_urls_are_config_errors() -> None:
    cases = {
        "redis+sentinel://127.0.0.1:26379": "no service name",
        "redis+sentinel://127.0.0.1:26379/": "no service name",
        "redis+sentinel://127.0.0.1:26379/mymaster/zero": "the database must be a number",
        "redis+sentinel://127.0.0.1:26379/mymaster/0/1": r"expected redis\+sentinel://",
        "redis+sentinel://:pw@127.0.0.1:port/mymaster": "the port must be a number",
        "redis+sentinel://h1:1,,h2:2/mymaster": "invalid host ''",
        "redis://127.0.0.1:1,127.0.0.1:2/0": "several hosts need",
        "redis://127.0.0.1:1/0?sentinel_password=pw": "takes no option 'sentinel_password'",
    }
    for url, message in cases.items():
        for opener in (RedisPresenceRegistry, AsyncRedisPresenceRegistry):
            with pytest.raises(PresenceConfigError, match=message) as info:
                opener.from_url(url)
            assert "pw@" not in str(info.value)
            assert "=pw" not in str(info.value)


def test_query_passwords_are_hidden_like_userinfo_ones() -> None:
    url = "redis+sentinel://:a%40b@h:1/m?sentinel_password=s%26t&password=p+q"
    assert set(secrets_of(url)) >= {"a%40b", "a@b", "s%26t", "s&t", "p+q", "p q"}
    assert redact(url) == "redis+sentinel://:***@h:1/m?sentinel_password=***&password=***"
    plain = "redis://h:1/0?client_name=a@b&password="
    assert redact(plain) == plain


# --- messages built without the password (issue 22, item 8) -----------------------------------

REFERENCE = "Zq7Xw-reference-password-Zq7Xw"
"""A password no message could hold by chance: every other password's messages must be these
(a message that depends on the password either shows it or garbles a word masking it)."""
SHORT_PASSWORDS = ["a", "e", "Redis", "wrong", "%", "user", "s", "x" * 300]
RIGHT = "the-right-password"


def library_messages(url: str) -> list[str]:
    """What the sync and the asyncio registry say when a beat through `url` fails."""
    said = []
    for attempt in (try_sync, try_async):
        error = attempt(url)
        assert isinstance(error, PresenceError), url
        said.append(f"{type(error).__name__}: {error}")
    return said


def web_readyz(url: str) -> str:
    with warnings.catch_warnings():  # as in test_web_api: httpx, not the httpx2 fork
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from starlette.testclient import TestClient

    from redis_presence.web import WebConfig, create_app

    config = WebConfig(url=url, ttl_ms=10_000, read_cache_s=0)
    app = create_app(config)
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        response = client.get("/readyz")
        assert response.status_code == 503, response.text
        return str(response.json()["message"])


def messages_for(password: str, port: int, admin: redis.Redis) -> dict[str, str]:
    """Every message a user may see when `password` is wrong, when the ACL user it logs in
    is denied a command, when no server listens, and when the URL is malformed."""
    encoded = quote(password, safe="")
    admin.acl_setuser(
        "limited",
        enabled=True,
        reset=True,
        passwords=[f"+{password}"],
        keys=["*"],
        commands=["+ping", "+time", "+info", "+client"],
    )
    urls = {
        "wrong": f"redis://:{encoded}@127.0.0.1:{port}/0",
        "wrong, named user": f"redis://default:{encoded}@127.0.0.1:{port}/0",
        "denied": f"redis://limited:{encoded}@127.0.0.1:{port}/0",
        "nobody listening": f"redis://:{encoded}@127.0.0.1:{CLOSED}/0",
        "malformed": f"redis://:{encoded}@127.0.0.1:port/0",
        "bad option": f"redis://:{encoded}@127.0.0.1:{port}/0?protocol=4",
        "no such file": f"rediss://:{encoded}@127.0.0.1:{port}/0?ssl_ca_certs=/nonexistent.pem",
    }
    said: dict[str, str] = {}
    for case, url in urls.items():
        for i, message in enumerate(library_messages(url)):
            said[f"{case} (library {i})"] = message
        code, output = cli_output(url)
        said[f"{case} (cli ls)"] = f"exit {code}: {output}"
    for case in ("wrong", "denied"):
        result = CliRunner().invoke(cli, ["--url", urls[case], "doctor"], obj=fast_factory)
        timings = re.sub(r"\d+(\.\d+)? ms", "_ ms", result.output)  # latency: 0.04 ms
        said[f"{case} (cli doctor)"] = f"exit {result.exit_code}: {timings}"
    for case in ("wrong", "nobody listening"):
        said[f"{case} (web readyz)"] = web_readyz(urls[case])
    return said


def test_no_password_is_masked_into_a_message_it_is_never_put_there(
    make_redis_server: MakeRedisServer,
) -> None:
    """With password ``a``, masking wrote "Redis refused ***ccess: wrong user n***me or
    p***ssword": the message named the password by its holes. Every message is built
    without the password, so it reads the same whatever the password."""
    server = make_redis_server(requirepass=RIGHT)
    with server.client(password=RIGHT) as admin:
        expected = messages_for(REFERENCE, server.port, admin)
        assert not [m for m in expected.values() if MARK in m or REFERENCE in m]
        assert "wrong user name or password" in expected["wrong (library 0)"]
        assert "PresenceAuthError" in expected["denied (library 1)"], expected
        assert "can act as none of the roles" in expected["denied (cli doctor)"]
        garbled = {
            (password[:12], case): said
            for password in SHORT_PASSWORDS
            for case, said in messages_for(password, server.port, admin).items()
            if said != expected[case]
        }
    assert not garbled, "\n".join(f"{k}: {v!r}" for k, v in garbled.items())


def test_a_url_typed_where_no_url_belongs_is_shown_redacted_and_driver_words_are_rebuilt() -> None:
    """click quotes a stray argument as typed, and a URL parser's error may quote the URL:
    neither reaches a message as it is, and nothing else of them is touched."""
    stray = "redis://:a@127.0.0.1:1/0"
    result = CliRunner().invoke(cli, ["--url", f"redis://:a@127.0.0.1:{CLOSED}/0", "ls", stray])
    assert result.exit_code == 2, result.output
    assert "unexpected extra argument (redis://:***@127.0.0.1:1/0)" in result.output
    assert ":a@" not in result.output
    assert urls.redact_urls("a and redis://u:s3cret@h/0?password=x (again)") == (
        "a and redis://u:***@h/0?password=*** (again)"
    )
    leaky = ValueError("Port could not be cast to integer value as 'hunter2@h'")
    assert urls.driver_reason(leaky) == "redis-py refuses it (ValueError)"
    typo = TypeError("Connection.__init__() got an unexpected keyword argument 'colour'")
    assert urls.driver_reason(typo) == "no option 'colour'"
    own = redis.exceptions.RedisClusterException("Cluster mode is not enabled on this node")
    assert urls.driver_reason(own) == "Cluster mode is not enabled on this node"


def test_urls_still_offers_every_public_name_of_the_modules_it_was_split_into() -> None:
    """`from redis_presence.urls import X` works for each public name defined in
    `url_parsing`, `redaction` and `clients` (the names it held before the split), and
    gives the very object the package itself uses."""
    defined: dict[str, object] = {}
    for module in (url_parsing, redaction, clients):
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            defined |= {name: getattr(module, name) for name in names if not name.startswith("_")}
    assert sorted(urls.__all__) == sorted(defined)
    assert {name: getattr(urls, name) for name in urls.__all__} == defined
    assert {"parse_url", "redact", "open_client", "DEFAULT_SOCKET_TIMEOUT_S"} <= set(defined)


# --- what the parser hands redis-py ----------------------------------------------------------


def test_sentinel_urls_name_every_sentinel_the_service_and_the_database() -> None:
    parsed = parse_url("rediss+sentinel://u:p%40ss@s1,s2:26380,[::1]:26381/cache/4?ssl_ca_certs=x")
    assert parsed.nodes == (("s1", 26379), ("s2", 26380), ("::1", 26381))
    assert (parsed.service_name, parsed.db, parsed.base, parsed.topology) == (
        "cache",
        4,
        "rediss",
        "sentinel",
    )
    client = open_client(
        "rediss+sentinel://u:p%40ss@s1,s2:26380/cache/4?sentinel_username=sen&sentinel_password=x",
        ssl_ca_certs=__file__,
    )
    pool = client.connection_pool
    assert pool.service_name == "cache"
    assert pool.connection_class is redis.sentinel.SentinelManagedSSLConnection
    assert {k: pool.connection_kwargs[k] for k in ("username", "password", "db")} == {
        "username": "u",
        "password": "p@ss",
        "db": 4,
    }
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["host"] for s in sentinels] == ["s1", "s2"]
    for sentinel in sentinels:
        kwargs = sentinel.connection_pool.connection_kwargs
        assert (kwargs["username"], kwargs["password"]) == ("sen", "x")
        assert sentinel.connection_pool.connection_class is redis.SSLConnection
        assert kwargs["ssl_ca_certs"] == __file__
    client.close()


def test_cluster_urls_hand_every_startup_node_to_the_cluster_client() -> None:
    client = open_async_client("rediss+cluster://u:pw@n1:7000,n2,[::1]:7002")
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    nodes = {(n.host, n.port) for n in client.nodes_manager.startup_nodes.values()}
    assert nodes == {("n1", 7000), ("n2", 6379), ("::1", 7002)}
    assert client.connection_kwargs["password"] == "pw"
    assert client.connection_kwargs["connection_class"] is redis.asyncio.SSLConnection


# --- timeouts --------------------------------------------------------------------------------


def timeouts(connection_kwargs: dict[str, Any]) -> tuple[Any, Any]:
    return connection_kwargs["socket_connect_timeout"], connection_kwargs["socket_timeout"]


DEFAULTS = (DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_SOCKET_TIMEOUT_S)


def test_every_client_gets_explicit_timeouts_which_kwargs_and_the_url_override() -> None:
    assert DEFAULTS == (5.0, 5.0)
    for opener in (open_client, open_async_client):
        assert timeouts(opener("redis://h:1/0").connection_pool.connection_kwargs) == DEFAULTS
        assert timeouts(opener("unix:///tmp/x.sock").connection_pool.connection_kwargs) == DEFAULTS
        given = opener("redis://h:1/0", socket_timeout=1.5, socket_connect_timeout=None)
        assert timeouts(given.connection_pool.connection_kwargs) == (None, 1.5)
        in_url = opener("redis://h:1/0?socket_timeout=2.5", socket_timeout=1.5)
        assert timeouts(in_url.connection_pool.connection_kwargs) == (5.0, 2.5)
        sentinel = opener("redis+sentinel://s1:1,s2:2/m?socket_connect_timeout=0.5")
        assert timeouts(sentinel.connection_pool.connection_kwargs) == (0.5, 5.0)
        for one in sentinel.connection_pool.sentinel_manager.sentinels:
            assert timeouts(one.connection_pool.connection_kwargs) == (0.5, 5.0)
    cluster = open_async_client("redis+cluster://n1:7000,n2:7001", socket_timeout=3)
    assert timeouts(cluster.connection_kwargs) == (5.0, 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"socket_timeout": 0},
        {"socket_timeout": -1},
        {"socket_connect_timeout": "5"},
        {"protocol": 4},
    ],
)
def test_bad_timeouts_and_protocols_as_keyword_arguments_are_config_errors(
    kwargs: dict[str, Any],
) -> None:
    for opener in (RedisPresenceRegistry, AsyncRedisPresenceRegistry):
        with pytest.raises(PresenceConfigError, match=next(iter(kwargs))):
            opener.from_url("redis://h:1/0", **kwargs)


@pytest.fixture
def frozen(make_redis_server: MakeRedisServer) -> Iterator[RedisServer]:
    """A server that will be SIGSTOPped by the test: alive, listening, never answering;
    continued at teardown whatever happens."""
    server = make_redis_server()
    yield server
    if server.pid is not None and server.is_running:
        os.kill(server.pid, signal.SIGCONT)


def test_a_frozen_server_fails_calls_and_reporter_close_on_the_default_timeout(
    frozen: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a timeout (redis-py 5's default) both would wait forever: the defaults apply
    whatever the redis-py version."""
    monkeypatch.setattr(clients, "DEFAULT_SOCKET_TIMEOUT_S", 0.3)  # where the openers read it
    registry = RedisPresenceRegistry.from_url(frozen.url, retry=Retry(NoBackoff(), 0))
    reporter = PresenceReporter(registry, interval_ms=60_000)
    registry.heartbeat("orders", "billing", "w0", now_ns=T0)
    reporter.beat("orders", "billing", "w1")
    assert frozen.pid is not None
    os.kill(frozen.pid, signal.SIGSTOP)

    started = time.monotonic()
    with pytest.raises(PresenceError, match=r"(?i)timeout|timed out"):
        registry.heartbeat("orders", "billing", "w0", now_ns=T0 + 1)
    closing = threading.Thread(target=reporter.close)
    closing.start()
    closing.join(10)
    assert not closing.is_alive(), "PresenceReporter.close() hangs on a frozen server"
    assert time.monotonic() - started < 5

    async def frozen_async() -> None:
        async with AsyncRedisPresenceRegistry.from_url(
            frozen.url, retry=redis.asyncio.retry.Retry(NoBackoff(), 0)
        ) as registry:
            await registry.heartbeat("orders", "billing", "w2", now_ns=T0)

    with pytest.raises(PresenceError, match=r"(?i)timeout|timed out"):
        asyncio.run(asyncio.wait_for(frozen_async(), 10))
    os.kill(frozen.pid, signal.SIGCONT)
    registry.close()


# --- a database the server does not have --------------------------------------------------------


def test_a_database_the_server_lacks_is_a_config_error_and_exit_2(
    make_redis_server: MakeRedisServer,
) -> None:
    # A server of its own: "nothing landed on database 0" must not read what other tests
    # left on a shared one.
    redis_server = make_redis_server()
    url = f"redis://127.0.0.1:{redis_server.port}/99"
    refused = r"invalid Redis URL .*/99'.*no database 99"
    with (
        pytest.raises(PresenceConfigError, match=refused),
        RedisPresenceRegistry.from_url(url) as r,
    ):
        r.heartbeat("orders", "billing", "w1", now_ns=T0)

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(url) as registry:
            await registry.size()

    with pytest.raises(PresenceConfigError, match="no database 99"):
        asyncio.run(main())
    result = CliRunner().invoke(cli, ["--url", url, "counts"])
    assert result.exit_code == 2, result.output
    assert "no database 99" in result.output
    with redis_server.client() as client:  # nothing landed on database 0 instead
        assert not client.exists(Keyspace("presence").groups)


def test_the_database_guard_keeps_a_good_database_working(redis_server: RedisServer) -> None:
    with RedisPresenceRegistry.from_url(f"{redis_server.url}/5") as registry:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert len(registry) == 1
    with redis_server.client(db=5) as client:
        assert client.exists(Keyspace("presence").groups)
        client.flushdb()


# --- hypothesis: no shape of URL shows its password or lets a redis-py error escape --------------

MARK = "Zq7Xw"
"""Every generated password starts, ends and is cut in two by this, so any piece of it that
a message shows holds the marker (the tests look for the marker, not the whole password)."""
CLOSED = free_port()  # nothing listens here: a connection is refused at once
CLOSED_2 = free_port()

PIECE = st.text(
    st.sampled_from("abcXYZ019@:/?#=&%+[], ;!$'()*~-._é\x00\n"),
    max_size=6,
)
PASSWORD = st.builds(lambda a, b: f"{MARK}{a}{MARK}{b}{MARK}", PIECE, PIECE)
SCHEME = st.sampled_from(
    [
        "redis://",
        "rediss://",
        "unix://",
        "redis+cluster://",
        "rediss+cluster://",
        "redis+sentinel://",
        "rediss+sentinel://",
        "REDIS://",
        "redis:/",
        "redis:",
        "redis:///",
        "http://",
        "",
    ]
)
HOSTS = st.sampled_from(
    [
        f"127.0.0.1:{CLOSED}",
        f"127.0.0.1:{CLOSED},127.0.0.1:{CLOSED_2}",
        f"[::1]:{CLOSED}",
        "",
        "h:port",
        "127.0.0.1:99999",
        "[::1",
        "/tmp/redis-presence-no-such.sock",
    ]
)
PATH = st.sampled_from(["", "/", "/0", "/3", "/zero", "/mymaster", "/mymaster/2", "/a/b/c"])
OPTION = st.sampled_from(
    [
        "protocol=4",
        "protocol=3",
        "encoding=nope",
        "socket_timeout=soon",
        "socket_connect_timeout=0.5",
        "client_name=a@b",
        "db=2",
        "ssl_certfle=x",
        "retry_on_timeout=maybe",
        "colour=blue",
        "",
    ]
)


@st.composite
def urls_with_a_password(draw: st.DrawFn) -> tuple[str, str]:
    password = draw(PASSWORD)
    written = draw(st.sampled_from([password, quote(password, safe="")]))
    user = draw(st.sampled_from(["", "u", "presence-broker"]))
    options = draw(st.lists(OPTION, max_size=3))
    where = draw(st.sampled_from(["userinfo", "query", "sentinel-query", "both"]))
    encoded = quote(password, safe="")
    if where in ("query", "both"):
        options.append(f"password={encoded}")
    if where == "sentinel-query":
        options.append(f"sentinel_password={encoded}")
    userinfo = f"{user}:{written}@" if where in ("userinfo", "both") else ""
    query = "&".join(options)
    url = draw(SCHEME) + userinfo + draw(HOSTS) + draw(PATH) + (f"?{query}" if query else "")
    return url, password


def try_sync(url: str) -> BaseException | None:
    try:
        with RedisPresenceRegistry.from_url(url, **NO_RETRY) as registry:
            registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    except PresenceError as exc:
        return exc
    return None


def try_async(url: str) -> BaseException | None:
    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(
            url, retry=redis.asyncio.retry.Retry(NoBackoff(), 0), socket_connect_timeout=1
        ) as registry:
            await registry.heartbeat("orders", "billing", "w1", now_ns=T0)

    try:
        asyncio.run(main())
    except PresenceError as exc:
        return exc
    return None


def only_closed_local_ports(url: str) -> bool:
    """Whether opening `url` can reach nothing but this test's closed loopback ports (or a
    socket path that does not exist): a URL that names no port gets the default one, where
    the machine's own Redis may listen, and a host name may not be local at all."""
    try:
        parsed = parse_url(url)
    except PresenceConfigError:
        return True  # refused before any connection
    if parsed.base == "unix":
        return not os.path.exists(parsed.path)
    return all(h in ("127.0.0.1", "::1") and p in (CLOSED, CLOSED_2) for h, p in parsed.nodes)


@settings(max_examples=200, deadline=None)
@given(urls_with_a_password())
def test_no_url_shape_shows_its_password_or_lets_a_driver_error_escape(
    case: tuple[str, str],
) -> None:
    """Malformed or not, a URL's password never reaches a message, and nothing but the
    package's own errors comes out of `from_url`, the first call, or the CLI."""
    url, _ = case
    assume(only_closed_local_ports(url))
    for attempt in (try_sync, try_async):
        error = attempt(url)  # anything but a PresenceError fails the test right here
        assert error is not None, url  # nothing listens anywhere
        text = exception_text(error)
        assert MARK not in text, f"{url!r}:\n{text}"
    code, output = cli_output(url)
    assert code in (2, 3, 4), (url, output)
    assert MARK not in output, (url, output)
    assert output.startswith("Error: "), (url, output)
    assert output.count("\n") == 1, (url, output)
