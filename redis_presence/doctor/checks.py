"""The checks of `redis-presence doctor`, as plans: what each reads of a deployment, and
`diagnose`, which runs them; what they conclude is `redis_presence.doctor.findings`.

Nothing here does I/O. A check is an ordinary plan (`redis_presence.plans.Plan`) that sends
one request at a time with `redis_presence.answers.try_command` and gets its `Answer`: the
reply, or the refusal (an ACL denial) or error that Redis answered instead, so that a check goes on
where the user may not run a command; a lost connection or a refused login ends it with the
registry's `PresenceError`. `diagnose` runs them through a registry's ``execute``.

Nothing a check sends writes: configuration and state are read with ``CONFIG GET`` and
``INFO``; the ACL rights of the current user are read with ``ACL DRYRUN``
where the user may run it, and otherwise by sending each command of the README's roles in a
form that Redis refuses after its ACL check and before it changes anything (``ZADD k NX XX
0 m``, ``SET k v NX XX``, ``HSET k f v f2``, ``SCRIPT LOAD "return ("``, ``EVALSHA <sha>
-1``), or, for ``DEL``, ``ZREM`` and ``HDEL``, on a key of a queue no one uses (a random
name), where it changes nothing.
"""

from __future__ import annotations

import secrets
import warnings
from typing import Any

from ..answers import config_value, info_fields, text, try_command
from ..errors import (
    PresenceAuthError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceProtocolError,
    server_answered,
)
from ..keys import EVENTS_COPY_SUFFIX, Keyspace
from ..model import ConsumerPresence, Rows, Skipped
from ..plans import Command, Plan
from .findings import (
    Finding,
    cluster_finding,
    conflict_finding,
    int_or_none,
    latency_finding,
    legacy_index_finding,
    memory_findings,
    persistence_finding,
    replication_finding,
    role_findings,
    spoilt_setting_finding,
    undecodable_finding,
    version_finding,
)

LATENCY_PINGS = 5
"""Round trips `doctor` times."""


def probes(keys: Keyspace, db: int) -> dict[str, tuple[str | int, ...]]:
    """Each command of `ROLES`, as a request that changes nothing: a read, an error Redis
    raises after its ACL check (a syntax error, a script that does not compile, a negative
    key count), a removal from keys of a queue no one uses (a random name), or a copy or
    rename of such a key, which is missing (``COPY`` answers 0, ``RENAME`` "no such key")."""
    unused = keys.group(f"~redis-presence-doctor-{secrets.token_hex(8)}", "probe")
    hb, data, mark, log = unused.hb, unused.data, unused.mark, unused.events
    return {
        "evalsha": ("EVALSHA", "0" * 40, -1),
        "fcall": ("FCALL", "redis-presence-doctor-probe", -1),
        "script|load": ("SCRIPT LOAD", "return ("),
        "function|load": ("FUNCTION LOAD", "not a library"),
        "select": ("SELECT", db),
        "type": ("TYPE", mark),
        "time": ("TIME",),
        "exists": ("EXISTS", hb),
        "hget": ("HGET", data, "c"),
        "hset": ("HSET", data, "c", "v", "odd"),
        "zadd": ("ZADD", hb, "NX", "XX", 0, "c"),
        "zscore": ("ZSCORE", hb, "c"),
        "set": ("SET", mark, "1", "NX", "XX"),
        "zrem": ("ZREM", hb, "c"),
        "hdel": ("HDEL", data, "c"),
        "del": ("DEL", mark),
        "zrangebylex": ("ZRANGEBYLEX", keys.groups, "-", "+", "LIMIT", 0, 1),
        "hlen": ("HLEN", data),
        "hgetall": ("HGETALL", data),
        "hscan": ("HSCAN", data, 0, "COUNT", 1),
        "zcount": ("ZCOUNT", hb, "-inf", "+inf"),
        "zrangebyscore": ("ZRANGEBYSCORE", hb, "-inf", "+inf", "LIMIT", 0, 1),
        "zrange": ("ZRANGE", hb, -1, -1, "WITHSCORES"),
        "zmscore": ("ZMSCORE", keys.groups, data),
        "hmget": ("HMGET", data, "c"),
        "zcard": ("ZCARD", hb),
        "get": ("GET", unused.ttl),
        "xadd": ("XADD", log, "NOMKSTREAM", "MAXLEN", "-1", "*", "k", "v"),
        "pexpire": ("PEXPIRE", log, 1),
        "copy": ("COPY", log, log + EVENTS_COPY_SUFFIX),
        "rename": ("RENAME", log + EVENTS_COPY_SUFFIX, log),
        "xrange": ("XRANGE", log, "-", "+", "COUNT", 1),
        "xinfo|stream": ("XINFO STREAM", log),
    }


def _command(probe: tuple[str | int, ...]) -> Command:
    return Command(str(probe[0]), probe[1:])


def rights(keys: Keyspace, db: int, login: str) -> Plan[tuple[dict[str, bool], str, str]]:
    """Which commands of `ROLES` the current user may run on the prefix's keys, the user's
    name (``ACL WHOAMI``, else `login`, the name the client logs in with) and how that was
    found (``ACL DRYRUN`` where the user may run it, else the probes themselves)."""
    whoami = yield from try_command(Command("ACL WHOAMI"))
    user = text(whoami.reply) if whoami.ok else None
    found = probes(keys, db)
    if user is not None:
        trial = yield from try_command(Command("ACL DRYRUN", (user, "TIME")))
        if trial.ok:
            allowed = {}
            for name, probe in found.items():
                words = str(probe[0]).split()
                answer = yield from try_command(Command("ACL DRYRUN", (user, *words, *probe[1:])))
                allowed[name] = answer.ok and text(answer.reply) == "OK"
            return allowed, user, "ACL DRYRUN"
    allowed = {}
    for name, probe in found.items():
        answer = yield from try_command(_command(probe))
        allowed[name] = answer.permitted
    return allowed, user or login, "probes that change nothing"


def server_checks(keys: Keyspace, *, db: int, login: str, clustered: bool) -> Plan[list[Finding]]:
    """Every check of one server: memory, persistence, version, ACL rights, latency and
    replication (on a cluster, of one primary)."""
    info = info_fields((yield from try_command(Command("INFO"))))
    config: dict[str, str | None] = {}
    for name in ("maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save"):
        config[name] = config_value((yield from try_command(Command("CONFIG GET", (name,)))), name)
    if info.get("role") == "slave":
        name = "replica-serve-stale-data"
        config[name] = config_value((yield from try_command(Command("CONFIG GET", (name,)))), name)

    maxmemory = config["maxmemory"] if config["maxmemory"] is not None else info.get("maxmemory")
    found = memory_findings(
        config["maxmemory-policy"] or info.get("maxmemory_policy"),
        int_or_none(maxmemory),
        int_or_none(info.get("used_memory")),
    )
    found.append(
        persistence_finding(
            config["appendonly"], config["save"], config["appendfsync"], info.get("aof_enabled")
        )
    )
    server = info.get("server_name")  # Valkey's; Redis has none
    version = info.get(f"{server}_version") if server else None
    found.append(version_finding(version or info.get("redis_version"), server))

    allowed, name, how = yield from rights(keys, db, login)
    found += role_findings(name, allowed, needs_select=db != 0 and not clustered, how=how)

    samples: list[float] = []
    command = "PING"
    for _ in range(LATENCY_PINGS):
        answer = yield from try_command(Command(command))
        if answer.refused is not None and command == "PING":  # the roles have TIME, not PING
            command, samples = "TIME", []
            answer = yield from try_command(Command(command))
        if answer.permitted:  # an error reply is a round trip too (MASTERDOWN, say)
            samples.append(answer.elapsed_ms)
    found.append(latency_finding(samples, command))
    found.append(replication_finding(info, config.get("replica-serve-stale-data")))
    return found


def legacy_index(keys: Keyspace) -> Plan[Finding]:
    """The index of release 0.1 (``P:index``): how many groups it lists, or whether it
    exists, with whichever of ``SCARD``, ``EXISTS`` and ``ZCARD`` the user may run."""
    key = keys.legacy_index
    answer = yield from try_command(Command("SCARD", (key,)))
    if answer.ok:
        groups = int_or_none(text(answer.reply)) or 0
        return legacy_index_finding(key, groups, groups > 0)
    answer = yield from try_command(Command("EXISTS", (key,)))
    if answer.ok:
        return legacy_index_finding(key, None, text(answer.reply) != "0")
    # The reader's command: WRONGTYPE when the set exists.
    answer = yield from try_command(Command("ZCARD", (key,)))
    if answer.ok:
        return legacy_index_finding(key, None, text(answer.reply) != "0")
    if answer.failed is not None and "WRONGTYPE" in answer.failed:
        return legacy_index_finding(key, None, True)
    return legacy_index_finding(key, None, None)


def cluster_state() -> Plan[Finding]:
    """``CLUSTER INFO``."""
    answer = yield from try_command(Command("CLUSTER INFO"))
    return cluster_finding(info_fields(answer))


def _one(request: Command) -> Plan[Any]:
    (reply,) = yield [request]
    return reply


def diagnose(registry: Any) -> list[Finding]:
    """Every check of the deployment behind a sync registry (`RedisPresenceRegistry`): of
    the server, or of each primary of a Redis Cluster, then of the prefix's data. Sends
    nothing that writes; raises `PresenceConnectionError` when Redis cannot be reached and
    `PresenceAuthError` when it refuses the login."""
    registry.policy_check.due = False  # reported here, with what to do
    try:
        registry.execute(_one(Command("TIME")))  # every role has TIME: a refusal ends it here
    except PresenceError as error:
        if isinstance(error, PresenceAuthError) or not server_answered(error):
            raise
    keys = registry.plans.keys
    client = registry.client
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    found: list[Finding] = []
    if registry.clustered:
        found.append(registry.execute(cluster_state()))
        for node in client.get_primaries():
            node_client = client.get_redis_connection(node)
            node_registry = type(registry)(node_client, prefix=registry.prefix)
            node_registry.policy_check.due = False
            node_kwargs = node_client.connection_pool.connection_kwargs
            login = str(node_kwargs.get("username") or "default")
            checks = server_checks(keys, db=0, login=login, clustered=True)
            found += [f._replace(node=node.name) for f in node_registry.execute(checks)]
    else:
        login = str(kwargs.get("username") or "default")
        checks = server_checks(keys, db=int(kwargs.get("db") or 0), login=login, clustered=False)
        found += registry.execute(checks)
    found.append(registry.execute(legacy_index(keys)))
    found += _data(registry)
    return found


def _data(registry: Any) -> list[Finding]:
    """What a fleet snapshot and `groups()` set aside (skipped when they cannot be read):
    each group's shared settings, stored values, keys' types and declared minimums; and
    the consumers the snapshot says are in conflict (`conflict_finding`)."""
    plans = registry.plans
    skipped: list[Skipped] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PresenceDataWarning)
            rows: Rows[ConsumerPresence] = registry.execute(plans.snapshot())
            skipped += rows.skipped
            skipped += registry.execute(plans.groups()).skipped
    except PresenceAuthError:
        return [undecodable_finding(None), conflict_finding(None)]
    except PresenceProtocolError as error:
        return [undecodable_finding(None, str(error)), conflict_finding(None, str(error))]
    except PresenceDataError as error:  # a shared setting of the whole prefix
        return [spoilt_setting_finding(error), conflict_finding(None, str(error))]
    except PresenceError as error:  # a replica without its primary, say
        return [undecodable_finding(None, str(error)), conflict_finding(None, str(error))]
    unique = {(item.key, item.consumer): item for item in reversed(skipped)}
    return [
        undecodable_finding(list(unique.values())[::-1]),
        conflict_finding([row for row in rows if row.conflict]),
    ]
