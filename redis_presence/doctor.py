"""`redis-presence doctor`: every check of a Redis deployment, and what to do about each.

Nothing here does I/O. A check is an ordinary plan (`redis_presence.plans.Plan`) that sends
one request at a time with `redis_presence.policy.ask` and gets its `Answer`: the reply, or
the refusal (an ACL denial) or error that Redis answered instead, so that a check goes on
where the user may not run a command; a lost connection or a refused login ends it with the
registry's `PresenceError`. `diagnose` runs them through a registry's ``execute``. The
decisions (what is wrong, what to do) are plain functions of what the checks found.

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
import statistics
import warnings
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any, NamedTuple

from .errors import (
    PresenceAuthError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceProtocolError,
    server_answered,
)
from .keys import Keyspace
from .model import Skipped
from .plans import Command, Plan
from .policy import ask, config_value, evicts, info_fields, text

TESTED_RELEASES: dict[str, tuple[str, ...]] = {"redis": ("7.0", "8.2"), "valkey": ("9.1",)}
"""The servers and releases (major.minor) the test suite runs against: the README's
"Tested versions" (Debian's redis-server 7.0, and the test extra's Redis 8.2 and Valkey 9.1)."""

SERVER_NAMES = {"redis": "Redis", "valkey": "Valkey"}

LATENCY_PINGS = 5
"""Round trips `doctor` times."""

LATENCY_WARN_MEDIAN_MS = 10.0
LATENCY_WARN_MAX_MS = 100.0
"""Round trips slower than these are reported: each heartbeat costs one."""

MEMORY_WARN_RATIO = 0.9
"""Used memory above this share of ``maxmemory`` is reported before writes start failing."""

_BROKER = (
    "evalsha script|load select type time exists get hget hset zadd zscore set zrem hdel del "
    "xadd pexpire"
)
_READER = (
    "select time get zrangebylex hlen hgetall hscan zcount zrangebyscore hmget zcard xrange "
    "xinfo|stream"
)
_JANITOR = f"{_BROKER} zrangebylex zrangebyscore hlen hgetall hscan hmget"
ROLES: dict[str, tuple[str, ...]] = {
    "broker": tuple(_BROKER.split()),
    "reader": tuple(_READER.split()),
    "janitor": tuple(_JANITOR.split()),
}
"""The commands of the ACL roles of docs/production.md ("Least privilege with ACL"), in order
there; the tests hold these to the tested ``ACL SETUSER`` lines."""


# -- findings ----------------------------------------------------------------------------


class Status(str, Enum):
    """How a finding rates a deployment, from fine to wrong."""

    OK = "ok"
    NOTE = "note"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        """0 for ok, note and skip (nothing wrong found), 1 for warn, 2 for fail."""
        return {Status.WARN: 1, Status.FAIL: 2}.get(self, 0)


class Finding(NamedTuple):
    """One thing `doctor` found: which `check`, its `status`, what it found (`summary`),
    what to do about it (`advice`, empty when nothing), and the cluster `node` it is
    about (empty for the deployment as a whole)."""

    check: str
    status: Status
    summary: str
    advice: str = ""
    node: str = ""

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready mapping."""
        return {
            "check": self.check,
            "status": self.status.value,
            "summary": self.summary,
            "advice": self.advice,
            "node": self.node,
        }


def worst(findings: Iterable[Finding]) -> Status:
    """The most serious status among `findings` (OK when there is none)."""
    return max((f.status for f in findings), key=lambda s: s.rank, default=Status.OK)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


CONFIG_ADVICE = (
    "run redis-presence doctor as a user who may run CONFIG GET or INFO (an administrator)"
)


def memory_findings(policy: str | None, maxmemory: int | None, used: int | None) -> list[Finding]:
    """The eviction policy, and how full the memory is."""
    if policy is None:
        summary = "maxmemory-policy not read: the user may run neither CONFIG GET nor INFO"
        return [Finding("memory-policy", Status.SKIP, summary, CONFIG_ADVICE)]
    found: list[Finding] = []
    if evicts(policy):
        found.append(
            Finding(
                "memory-policy",
                Status.FAIL,
                f"maxmemory-policy is {policy}: Redis may evict any key, so one of a group's "
                "keys and not another; consumers then vanish, and snapshot, counts and len "
                "disagree",
                "CONFIG SET maxmemory-policy noeviction (or a volatile-* policy), then CONFIG "
                "REWRITE; give Redis the memory it needs",
            )
        )
    elif policy.lower().startswith("volatile-"):
        found.append(
            Finding(
                "memory-policy",
                Status.OK,
                f"maxmemory-policy is {policy}: it evicts only keys with a TTL, which presence "
                "data never has",
            )
        )
    else:
        found.append(
            Finding(
                "memory-policy",
                Status.OK,
                f"maxmemory-policy is {policy}: presence keys are never evicted; when memory is "
                "full, heartbeats are refused (PresenceOutOfMemoryError, CLI exit 7) and reads "
                "keep working",
            )
        )
    if not maxmemory:
        if maxmemory == 0:
            found.append(Finding("memory-use", Status.OK, "no maxmemory limit is set"))
        return found
    if used is None:
        found.append(
            Finding(
                "memory-use",
                Status.SKIP,
                f"maxmemory is {_size(maxmemory)}; used memory not read (INFO refused)",
                CONFIG_ADVICE,
            )
        )
        return found
    share = used / maxmemory
    summary = f"used memory {_size(used)} of maxmemory {_size(maxmemory)} ({share:.0%})"
    if share >= 1 and not evicts(policy):
        found.append(
            Finding(
                "memory-use",
                Status.FAIL,
                f"{summary}: Redis refuses every write that needs memory (OOM), heartbeats "
                "included; reads, deregister and prune still work",
                "raise maxmemory (CONFIG SET maxmemory ...) or free memory, then check that "
                "brokers' heartbeats succeed again",
            )
        )
    elif share >= MEMORY_WARN_RATIO:
        found.append(
            Finding(
                "memory-use",
                Status.WARN,
                f"{summary}: close to the limit (a write is refused once used memory and what it "
                "needs pass maxmemory)",
                "raise maxmemory or free memory before writes are refused",
            )
        )
    else:
        found.append(Finding("memory-use", Status.OK, summary))
    return found


def persistence_finding(
    appendonly: str | None, save: str | None, appendfsync: str | None, aof_enabled: str | None
) -> Finding:
    """Whether a restart keeps presence (AOF, RDB snapshots)."""
    aof = appendonly.lower() == "yes" if appendonly is not None else None
    if aof is None and aof_enabled is not None:
        aof = aof_enabled == "1"
    if aof is None:
        summary = "persistence not read: the user may run neither CONFIG GET nor INFO"
        return Finding("persistence", Status.SKIP, summary, CONFIG_ADVICE)
    if aof:
        if appendfsync is not None and appendfsync.lower() == "no":
            return Finding(
                "persistence",
                Status.NOTE,
                "AOF is on with appendfsync no: the OS decides when it reaches the disk, so "
                "a crash may lose the last 30 s or so of heartbeats",
                "appendfsync everysec (the default) loses at most about a second",
            )
        fsync = f" (appendfsync {appendfsync})" if appendfsync else ""
        return Finding("persistence", Status.OK, f"AOF is on{fsync}: a restart keeps presence")
    advice = "CONFIG SET appendonly yes, then CONFIG REWRITE (docs/production.md: Persistence)"
    if save is None:
        return Finding(
            "persistence",
            Status.WARN,
            "AOF is off, and whether RDB snapshots run is unknown (CONFIG GET refused): a "
            "restart may empty the registry",
            advice,
        )
    if save.strip():
        return Finding(
            "persistence",
            Status.WARN,
            f"AOF is off; RDB snapshots only (save {save.strip()}): a restart loses every "
            "heartbeat since the last snapshot",
            advice,
        )
    return Finding(
        "persistence",
        Status.WARN,
        "no persistence (AOF off, no RDB snapshots): a restart empties the registry, live "
        "consumers are missing until their next beat and dead ones are forgotten",
        advice,
    )


def _release(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def version_finding(version: str | None, server: str | None = None) -> Finding:
    """The server's version (`server` is ``INFO``'s ``server_name``, absent on Redis) against
    the tested releases."""
    if version is None:
        return Finding(
            "version", Status.SKIP, "server version not read (INFO refused)", CONFIG_ADVICE
        )
    kind = (server or "redis").lower()
    name = SERVER_NAMES.get(kind, server or "Redis")
    about = f"{name} {version}"
    releases = TESTED_RELEASES.get(kind)
    if releases is None:
        everything = "; ".join(
            f"{SERVER_NAMES[k]} {', '.join(v)}" for k, v in TESTED_RELEASES.items()
        )
        return Finding(
            "version",
            Status.NOTE,
            f"{about}: not a server the tests run on (tested: {everything})",
        )
    tested = f"tested: {name} {', '.join(releases)}"
    newest = f"upgrade to {name} {releases[-1]}"
    release = _release(version)
    known = [r for r in map(_release, releases) if r is not None]
    if release is None:
        return Finding("version", Status.WARN, f"{about}: version not understood ({tested})")
    if kind == "redis" and release < (6, 0):
        return Finding(
            "version",
            Status.FAIL,
            f"{about} has no ACL users and is older than every tested release ({tested})",
            newest,
        )
    if release < min(known):
        return Finding(
            "version",
            Status.WARN,
            f"{about} is older than every tested release ({tested})",
            newest,
        )
    if release in known:
        return Finding("version", Status.OK, f"{about} ({tested})")
    return Finding(
        "version",
        Status.NOTE,
        f"{about} is not a tested release ({tested}): expected to work, not tested",
    )


def role_findings(
    user: str, rights: Mapping[str, bool], *, needs_select: bool, how: str
) -> list[Finding]:
    """Which roles the user can play, and what it lacks for the others."""
    found = []
    playable = 0
    for role, commands in ROLES.items():
        needed = [c for c in commands if needs_select or c != "select"]
        lacking = [c for c in needed if not rights.get(c, False)]
        if not lacking:
            playable += 1
            db0 = (
                "" if rights.get("select", False) else "; without SELECT it can use database 0 only"
            )
            found.append(
                Finding(
                    f"acl-{role}",
                    Status.OK,
                    f"user {user!r} has every command of the {role} role ({how}){db0}",
                )
            )
        else:
            found.append(
                Finding(
                    f"acl-{role}",
                    Status.NOTE,
                    f"user {user!r} cannot act as a {role}: it lacks {' '.join(lacking)} ({how})",
                    f"for a {role}, use the {role} line of docs/production.md (ACL SETUSER ... "
                    f"{' '.join('+' + c for c in lacking)})",
                )
            )
    if not playable:
        found.append(
            Finding(
                "acl",
                Status.WARN,
                f"user {user!r} can act as none of the roles (broker, reader, janitor): every "
                "operation it tries is refused",
                "give it one of the ACL lines of docs/production.md (Least privilege with ACL)",
            )
        )
    return found


def legacy_index_finding(key: str, groups: int | None, present: bool | None) -> Finding:
    """A leftover index of release 0.1, which this release's readers do not see."""
    if present is None:
        return Finding(
            "legacy-index",
            Status.SKIP,
            f"{key} not read: the user may run none of SCARD, EXISTS and ZCARD",
        )
    if not present:
        return Finding("legacy-index", Status.OK, f"no index of release 0.1 left ({key})")
    many = f"lists {groups} group(s)" if groups is not None else "exists"
    return Finding(
        "legacy-index",
        Status.WARN,
        f"{key}, the index of release 0.1, {many}: this release's readers do not see those "
        "groups until they are moved",
        "run redis-presence migrate (as the janitor plus +srandmember +srem, or an "
        "administrator), once every broker runs this release",
    )


def undecodable_finding(skipped: Iterable[Skipped] | None, why: str = "") -> Finding:
    """The keys under the prefix that this package cannot decode (docs/protocol.md, section
    9): fleet reads set them aside (a whole group, or one consumer of a group), so those
    consumers are missing from every answer. `skipped` None: the data could not be read
    (`why`)."""
    if skipped is None:
        return Finding(
            "undecodable",
            Status.SKIP,
            f"the prefix's data not read: {why or 'the user may not read the index'}",
        )
    items = list(skipped)
    if not items:
        return Finding("undecodable", Status.OK, "every indexed group decodes")
    whole = [item.key for item in items if item.consumer is None]
    rows = [f"{item.key} field {item.consumer!r}" for item in items if item.consumer is not None]
    parts = []
    if whole:
        parts.append(
            f"{len(whole)} key(s) this package cannot decode, set aside by every read: "
            f"{_first_five(whole)}"
        )
    if rows:
        parts.append(
            f"{len(rows)} stored value(s) this package cannot decode, those consumers set "
            f"aside by every read (their groups' others read): {_first_five(rows)}"
        )
    return Finding(
        "undecodable",
        Status.WARN,
        f"{'; '.join(parts)}; first: {skipped_reason(items)}",
        "a client that does not follow docs/protocol.md wrote them (a name encoded with "
        "JavaScript's encodeURIComponent, say): fix that client, then delete the keys (a "
        "shared TTL: redis-presence ttl set, or unset)",
    )


def _first_five(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def spoilt_setting_finding(error: PresenceDataError) -> Finding:
    """A shared setting of the whole prefix (``P:ttl``, ``P:stuck``) this package cannot
    read: no group is set aside for it, every read that needs it fails."""
    return Finding(
        "undecodable",
        Status.FAIL,
        str(error),
        "store the key it names again, or delete it (a shared TTL: redis-presence ttl set, "
        "or unset; a progress budget: set_stuck_after)",
    )


def skipped_reason(skipped: Iterable[Skipped]) -> str:
    """Why the first key was set aside."""
    return next(iter(skipped)).reason


def latency_finding(samples_ms: list[float], command: str) -> Finding:
    """Round trips to the server."""
    if not samples_ms:
        return Finding("latency", Status.SKIP, "no round trip timed")
    median, most = statistics.median(samples_ms), max(samples_ms)
    summary = (
        f"{len(samples_ms)} round trips ({command}): median {median:.2f} ms, max {most:.2f} ms"
    )
    if median > LATENCY_WARN_MEDIAN_MS or most > LATENCY_WARN_MAX_MS:
        return Finding(
            "latency",
            Status.WARN,
            f"{summary}: slow (over {LATENCY_WARN_MEDIAN_MS:g} ms median or "
            f"{LATENCY_WARN_MAX_MS:g} ms max)",
            "every heartbeat is one round trip: check the network path and the server's "
            "load (SLOWLOG GET, LATENCY DOCTOR); a PresenceReporter keeps it off brokers' "
            "read paths",
        )
    return Finding("latency", Status.OK, summary)


def replication_finding(info: Mapping[str, str], serve_stale: str | None) -> Finding:
    """The server's place in replication: a primary, or a replica and its link."""
    role = info.get("role")
    if role is None:
        return Finding("replication", Status.SKIP, "role not read (INFO refused)")
    if role == "master":
        replicas = _int(info.get("connected_slaves")) or 0
        if not replicas:
            return Finding("replication", Status.OK, "a primary without replicas")
        return Finding(
            "replication",
            Status.OK,
            f"a primary with {replicas} replica(s): replication is asynchronous, so a "
            "failover may lose the last heartbeats (brokers restore them with their next)",
        )
    primary = f"{info.get('master_host', '?')}:{info.get('master_port', '?')}"
    if info.get("master_link_status") == "up":
        return Finding(
            "replication",
            Status.NOTE,
            f"a replica of {primary} (link up): it serves reads (ls, counts, watch; --read-only) "
            "and refuses writes (exit 6), and ages come from its own clock",
            "point brokers and the janitor at the primary",
        )
    down = info.get("master_link_down_since_seconds")
    since = f" for {down} s" if down and down not in ("-1",) else ""
    refused = (serve_stale or "").lower() == "no"
    what = (
        "every read is refused (MASTERDOWN: replica-serve-stale-data no)"
        if refused
        else "reads here show presence as it was when the link broke"
    )
    return Finding(
        "replication",
        Status.FAIL,
        f"a replica whose link to its primary {primary} is down{since}: {what}",
        "restore the primary or promote this replica (REPLICAOF NO ONE), and point brokers "
        "at the new primary",
    )


def cluster_finding(info: Mapping[str, str]) -> Finding:
    """The state of a Redis Cluster."""
    state = info.get("cluster_state")
    if state is None:
        return Finding("cluster", Status.SKIP, "cluster state not read (CLUSTER INFO refused)")
    summary = (
        f"Redis Cluster: state {state}, {info.get('cluster_size', '?')} primaries, "
        f"{info.get('cluster_slots_ok', '?')} of 16384 slots ok"
    )
    if state != "ok":
        return Finding(
            "cluster",
            Status.FAIL,
            f"{summary}: operations on the failing slots are refused (CLUSTERDOWN)",
            "CLUSTER INFO and CLUSTER NODES on each node show which node is failing",
        )
    return Finding("cluster", Status.OK, summary)


# -- the checks, as plans -----------------------------------------------------------------


def probes(keys: Keyspace, db: int) -> dict[str, tuple[str | int, ...]]:
    """Each command of `ROLES`, as a request that changes nothing: a read, an error Redis
    raises after its ACL check (a syntax error, a script that does not compile, a negative
    key count), or a removal from keys of a queue no one uses (a random name)."""
    unused = keys.group(f"~redis-presence-doctor-{secrets.token_hex(8)}", "probe")
    hb, data, mark, log = unused.hb, unused.data, unused.mark, unused.events
    return {
        "evalsha": ("EVALSHA", "0" * 40, -1),
        "script|load": ("SCRIPT LOAD", "return ("),
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
        "hmget": ("HMGET", data, "c"),
        "zcard": ("ZCARD", hb),
        "get": ("GET", unused.ttl),
        "xadd": ("XADD", log, "NOMKSTREAM", "MAXLEN", "-1", "*", "k", "v"),
        "pexpire": ("PEXPIRE", log, 1),
        "xrange": ("XRANGE", log, "-", "+", "COUNT", 1),
        "xinfo|stream": ("XINFO STREAM", log),
    }


def _command(probe: tuple[str | int, ...]) -> Command:
    return Command(str(probe[0]), probe[1:])


def rights(keys: Keyspace, db: int, login: str) -> Plan[tuple[dict[str, bool], str, str]]:
    """Which commands of `ROLES` the current user may run on the prefix's keys, the user's
    name (``ACL WHOAMI``, else `login`, the name the client logs in with) and how that was
    found (``ACL DRYRUN`` where the user may run it, else the probes themselves)."""
    whoami = yield from ask(Command("ACL WHOAMI"))
    user = text(whoami.reply) if whoami.ok else None
    found = probes(keys, db)
    if user is not None:
        trial = yield from ask(Command("ACL DRYRUN", (user, "TIME")))
        if trial.ok:
            allowed = {}
            for name, probe in found.items():
                words = str(probe[0]).split()
                answer = yield from ask(Command("ACL DRYRUN", (user, *words, *probe[1:])))
                allowed[name] = answer.ok and text(answer.reply) == "OK"
            return allowed, user, "ACL DRYRUN"
    allowed = {}
    for name, probe in found.items():
        answer = yield from ask(_command(probe))
        allowed[name] = answer.permitted
    return allowed, user or login, "probes that change nothing"


def server_checks(keys: Keyspace, *, db: int, login: str, clustered: bool) -> Plan[list[Finding]]:
    """Every check of one server: memory, persistence, version, ACL rights, latency and
    replication (on a cluster, of one primary)."""
    info = info_fields((yield from ask(Command("INFO"))))
    config: dict[str, str | None] = {}
    for name in ("maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save"):
        config[name] = config_value((yield from ask(Command("CONFIG GET", (name,)))), name)
    if info.get("role") == "slave":
        name = "replica-serve-stale-data"
        config[name] = config_value((yield from ask(Command("CONFIG GET", (name,)))), name)

    maxmemory = config["maxmemory"] if config["maxmemory"] is not None else info.get("maxmemory")
    found = memory_findings(
        config["maxmemory-policy"] or info.get("maxmemory_policy"),
        _int(maxmemory),
        _int(info.get("used_memory")),
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
        answer = yield from ask(Command(command))
        if answer.refused is not None and command == "PING":  # the roles have TIME, not PING
            command, samples = "TIME", []
            answer = yield from ask(Command(command))
        if answer.permitted:  # an error reply is a round trip too (MASTERDOWN, say)
            samples.append(answer.elapsed_ms)
    found.append(latency_finding(samples, command))
    found.append(replication_finding(info, config.get("replica-serve-stale-data")))
    return found


def legacy_index(keys: Keyspace) -> Plan[Finding]:
    """The index of release 0.1 (``P:index``): how many groups it lists, or whether it
    exists, with whichever of ``SCARD``, ``EXISTS`` and ``ZCARD`` the user may run."""
    key = keys.legacy_index
    answer = yield from ask(Command("SCARD", (key,)))
    if answer.ok:
        groups = _int(text(answer.reply)) or 0
        return legacy_index_finding(key, groups, groups > 0)
    answer = yield from ask(Command("EXISTS", (key,)))
    if answer.ok:
        return legacy_index_finding(key, None, text(answer.reply) != "0")
    answer = yield from ask(Command("ZCARD", (key,)))  # the reader's: WRONGTYPE when the set exists
    if answer.ok:
        return legacy_index_finding(key, None, text(answer.reply) != "0")
    if answer.failed is not None and "WRONGTYPE" in answer.failed:
        return legacy_index_finding(key, None, True)
    return legacy_index_finding(key, None, None)


def cluster_state() -> Plan[Finding]:
    """``CLUSTER INFO``."""
    answer = yield from ask(Command("CLUSTER INFO"))
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
    found.append(_undecodable(registry))
    return found


def _undecodable(registry: Any) -> Finding:
    """What a fleet snapshot and `groups()` set aside (skipped when they cannot be read):
    each group's shared settings, stored values, keys' types and declared minimums."""
    plans = registry.plans
    skipped: list[Skipped] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PresenceDataWarning)
            for plan in (plans.snapshot(), plans.groups()):
                skipped += registry.execute(plan).skipped
    except PresenceAuthError:
        return undecodable_finding(None)
    except PresenceProtocolError as error:
        return undecodable_finding(None, str(error))
    except PresenceDataError as error:  # a shared setting of the whole prefix
        return spoilt_setting_finding(error)
    except PresenceError as error:  # a replica without its primary, say
        return undecodable_finding(None, str(error))
    unique = {(item.key, item.consumer): item for item in reversed(skipped)}
    return undecodable_finding(list(unique.values())[::-1])
