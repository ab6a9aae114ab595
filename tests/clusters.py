"""A Redis Cluster of real ``redis-server`` processes for the tests (`RedisClusterProcesses`)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
import redis.asyncio.cluster
import redis.cluster
from binaries import need_binary
from servers import (
    CLUSTER_SLOTS,
    CLUSTER_TIMEOUT_S,
    MAX_POLL_S,
    POLL_S,
    RedisServer,
    ServerError,
    no_retry,
)
from waiting import wait_until


class RedisClusterProcesses:
    """Three (by default) ``redis-server --cluster-enabled yes`` masters joined into one
    cluster, each with ``replicas`` replicas (``redis-cli --cluster create`` makes the first
    ``masters`` nodes the masters)."""

    def __init__(
        self, dir: Path, *, masters: int = 3, replicas: int = 0, binary: str | None = None
    ) -> None:
        self.dir = dir
        self.replicas = replicas
        count = masters * (1 + replicas)
        self.nodes = [
            RedisServer(dir=dir / f"node{i}", cluster=True, binary=binary) for i in range(count)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    def start(self, timeout: float = CLUSTER_TIMEOUT_S) -> RedisClusterProcesses:
        """Start every node, join them with ``redis-cli --cluster create``, wait for state ok."""
        cli = need_binary("redis-cli")
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"{node.host}:{node.port}" for node in self.nodes]
            argv = [cli, "--cluster", "create", *addresses]
            argv += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode != 0:
                output = (done.stdout + done.stderr).decode(errors="replace")
                raise ServerError(
                    f"redis-cli --cluster create failed ({done.returncode}):\n{output}"
                )
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout: float = CLUSTER_TIMEOUT_S) -> None:
        """Poll ``CLUSTER INFO`` on every running node: state ok, all slots assigned, all
        nodes known; and every running replica's link to its master up."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with node.client(socket_timeout=2, retry=no_retry()) as c:
                wait_until(
                    functools.partial(self._node_ok, c),
                    timeout_s=timeout,
                    what=f"cluster state ok on port {node.port}",
                    alive=node.check_alive,
                    interval_s=POLL_S,
                    max_interval_s=MAX_POLL_S,
                )
            if node.role() == "slave":
                node.wait_replica_synced(timeout)

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        return [node for node in self.nodes if node.is_running and node.role() == "master"]

    def _node_ok(self, c: redis.Redis) -> bool:
        try:
            info = c.cluster("INFO")
        except redis.ConnectionError:
            return False
        return (
            info.get("cluster_state") == "ok"
            and int(info.get("cluster_slots_assigned", 0)) == CLUSTER_SLOTS
            and int(info.get("cluster_known_nodes", 0)) == len(self.nodes)
        )

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new sync cluster client (bytes replies unless told otherwise); the caller closes it."""
        params: dict[str, Any] = {
            "startup_nodes": [
                redis.cluster.ClusterNode(h, p)  # type: ignore[no-untyped-call]
                for h, p in self.startup_nodes
            ],
            "decode_responses": False,
        }
        params.update(kwargs)
        return redis.cluster.RedisCluster(**params)

    def async_client(self, **kwargs: Any) -> redis.asyncio.cluster.RedisCluster:
        """A new asyncio cluster client; the caller awaits ``aclose()``."""
        params: dict[str, Any] = {
            "startup_nodes": [
                redis.asyncio.cluster.ClusterNode(h, p) for h, p in self.startup_nodes
            ],
            "decode_responses": False,
        }
        params.update(kwargs)
        return redis.asyncio.cluster.RedisCluster(**params)

    def flushall(self) -> None:
        """FLUSHALL on every running primary (these are our own servers)."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with node.client() as c:
                if c.info("replication").get("role") == "master":
                    c.flushall()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
