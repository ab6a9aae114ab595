"""Sentinel for the tests: a primary, its replicas and ``redis-sentinel`` processes watching
it, all real processes on loopback (`SentinelProcesses`)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis
from binaries import need_binary
from servers import (
    CLUSTER_TIMEOUT_S,
    LOG_NAME,
    MAX_POLL_S,
    POLL_S,
    RedisServer,
    ServerError,
    no_retry,
)
from waiting import wait_until

from redis_presence.localserver import LocalServer

SENTINEL_SERVICE = "mymaster"


class SentinelProcesses:
    """A primary, ``replicas`` replicas of it, and ``sentinels`` ``redis-sentinel`` processes
    (Debian's ``redis-sentinel`` package) monitoring it as ``service``, all on loopback.

    With ``requirepass`` every data node asks for that password (and uses it as
    ``masterauth``, since any of them may become a replica); with ``sentinel_password``
    the sentinels ask for theirs (and use it with each other). A sentinel calls the primary
    down after ``down_after_ms`` without a reply; two of three must agree (quorum 2).
    """

    def __init__(
        self,
        dir: Path,
        *,
        service: str = SENTINEL_SERVICE,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 10_000,
        requirepass: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.dir = dir
        self.service = service
        self.requirepass = requirepass
        self.sentinel_password = sentinel_password
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        auth = ["--masterauth", requirepass] if requirepass is not None else []
        self.primary = RedisServer(dir=dir / "primary", requirepass=requirepass, extra_args=auth)
        self.data_nodes = [self.primary] + [
            RedisServer(
                dir=dir / f"replica{i}",
                replicaof=self.primary,
                requirepass=requirepass,
                extra_args=auth,
            )
            for i in range(replicas)
        ]
        binary = need_binary("redis-sentinel")
        ping = {"password": sentinel_password} if sentinel_password is not None else {}
        self.sentinels = [
            LocalServer(
                binary,
                dir=dir / f"sentinel{i}",
                config_file=dir / f"sentinel{i}" / "sentinel.conf",
                options={"--logfile": ""},
                log_file=dir / f"sentinel{i}" / LOG_NAME,
                ping_kwargs=ping,
            )
            for i in range(sentinels)
        ]

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every sentinel."""
        return [(s.host, s.port) for s in self.sentinels]

    def url(self, scheme: str = "redis+sentinel", *, db: int | None = None) -> str:
        """``redis+sentinel://[:password@]h1:p1,h2:p2,h3:p3/service[/db][?sentinel_password=]``."""
        auth = f":{quote(self.requirepass, safe='')}@" if self.requirepass is not None else ""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        path = f"/{self.service}" + (f"/{db}" if db is not None else "")
        query = (
            f"?sentinel_password={quote(self.sentinel_password, safe='')}"
            if self.sentinel_password is not None
            else ""
        )
        return f"{scheme}://{auth}{hosts}{path}{query}"

    def _config(self) -> str:
        primary = self.primary
        lines = [
            f"sentinel monitor {self.service} {primary.host} {primary.port} 2",
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.service} 1",
        ]
        if self.requirepass is not None:
            lines.append(f"sentinel auth-pass {self.service} {self.requirepass}")
        if self.sentinel_password is not None:
            lines += [
                f"requirepass {self.sentinel_password}",
                f"sentinel sentinel-pass {self.sentinel_password}",
            ]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = CLUSTER_TIMEOUT_S) -> SentinelProcesses:
        """Start the data nodes, wait for the replicas to sync, start the sentinels (each
        with a fresh config file it may rewrite), and wait until every sentinel sees every
        replica and every other sentinel."""
        try:
            for node in self.data_nodes:
                node.start()
            for node in self.data_nodes[1:]:
                node.wait_replica_synced(timeout)
            for sentinel in self.sentinels:
                assert sentinel.config_file is not None
                sentinel.dir.mkdir(parents=True, exist_ok=True)
                sentinel.config_file.write_text(self._config())
                sentinel.start(timeout)
            self.wait_monitoring(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def sentinel_client(self, index: int = 0, **kwargs: Any) -> redis.Redis:
        """A client of one sentinel (text replies); the caller closes it."""
        return self.sentinels[index].client(decode_responses=True, socket_timeout=5, **kwargs)

    def _sentinel_state(self, index: int) -> dict[str, Any] | None:
        try:
            with self.sentinel_client(index, retry=no_retry()) as c:
                state: dict[str, Any] = c.execute_command("SENTINEL", "MASTER", self.service)
        except redis.RedisError:
            return None
        if isinstance(state, list):  # RESP2 reply as a flat list
            state = dict(zip(state[::2], state[1::2], strict=True))
        return state

    def wait_monitoring(
        self, timeout: float = CLUSTER_TIMEOUT_S, *, replicas: int | None = None
    ) -> None:
        """Poll ``SENTINEL MASTER`` on every running sentinel until it sees a primary up,
        ``replicas`` replicas (all of them by default) and every other sentinel."""
        wanted = len(self.data_nodes) - 1 if replicas is None else replicas
        others = len(self.sentinels) - 1

        def ready(index: int) -> bool:
            state = self._sentinel_state(index)
            if state is None:
                return False
            flags = str(state.get("flags", ""))
            return (
                "master" in flags
                and "down" not in flags
                and int(state.get("num-slaves", 0)) >= wanted
                and int(state.get("num-other-sentinels", 0)) >= others
            )

        for i, sentinel in enumerate(self.sentinels):
            if sentinel.is_running:
                wait_until(
                    functools.partial(ready, i),
                    timeout_s=timeout,
                    what=f"sentinel on port {sentinel.port} to monitor {self.service}",
                    alive=sentinel.check_alive,
                    interval_s=POLL_S,
                    max_interval_s=MAX_POLL_S,
                )

    def primary_address(self, index: int = 0) -> tuple[str, int]:
        """Where the sentinel at ``index`` says the primary is now."""
        with self.sentinel_client(index) as c:
            host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return str(host), int(port)

    def node_at(self, address: tuple[str, int]) -> RedisServer:
        """The data node listening at ``address``."""
        for node in self.data_nodes:
            if (node.host, node.port) == address:
                return node
        raise ServerError(f"no data node at {address}")

    def wait_primary(self, address: tuple[str, int], timeout: float = CLUSTER_TIMEOUT_S) -> None:
        """Poll until every running sentinel names ``address`` as the primary and that node
        says it is a master."""

        def moved() -> bool:
            try:
                named = {
                    self.primary_address(i) for i, s in enumerate(self.sentinels) if s.is_running
                }
                with self.node_at(address).client(socket_timeout=2, retry=no_retry()) as c:
                    role = c.info("replication")["role"]
            except redis.RedisError:
                return False
            return named == {address} and role == "master"

        wait_until(
            moved,
            timeout_s=timeout,
            what=f"{address} to become the primary of {self.service}",
            interval_s=POLL_S,
            max_interval_s=MAX_POLL_S,
        )

    def stop(self) -> None:
        for sentinel in reversed(self.sentinels):
            sentinel.stop()
        for node in reversed(self.data_nodes):
            node.stop()

    def __enter__(self) -> SentinelProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
