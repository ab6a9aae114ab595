"""What `redis-presence doctor` concludes from what its checks found: each `Finding` (a
check, its `Status`, what to do), decided by plain functions of the values read, and the
knowledge they rest on (the tested releases, the ACL roles of docs/production.md, the
thresholds). Nothing here sends anything: `redis_presence.doctor.checks` reads the values.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import NamedTuple

from ..errors import PresenceDataError
from ..model import ConsumerPresence, Skipped
from ..policy import evicts

TESTED_RELEASES: dict[str, tuple[str, ...]] = {"redis": ("7.0", "8.2"), "valkey": ("9.1",)}
"""The servers and releases (major.minor) the test suite runs against: the README's
"Tested versions" (Debian's redis-server 7.0, and the test extra's Redis 8.2 and Valkey 9.1)."""

SERVER_NAMES = {"redis": "Redis", "valkey": "Valkey"}

LATENCY_WARN_MEDIAN_MS = 10.0
LATENCY_WARN_MAX_MS = 100.0
"""Round trips slower than these are reported: each heartbeat costs one."""

MEMORY_WARN_RATIO = 0.9
"""Used memory above this share of ``maxmemory`` is reported before writes start failing."""

_BROKER = (
    "evalsha fcall script|load function|load select type time exists get hget hset zadd zscore "
    "zcard zrange set zrem hdel del xadd pexpire copy rename"
)
FASTER_RIGHTS = ("fcall", "function|load", "zcard", "zrange")
"""What makes a beat cheaper on the server, or a fleet index fresher, and nothing else: the
heartbeats' function library (without it they go by EVALSHA,
redis_presence._executor.Functions), the move of a large group to a skiplist (lua/lib.lua,
`grown`) and lowering ``P:newest`` when a consumer leaves (`newest_again`). A role without
them still plays its part."""
SMALLER_RIGHTS = ("copy", "rename")
"""What makes a new queue's event log smaller, and nothing else: copying the log its first
entry created at its used size and renaming the copy back (lua/lib.lua, `compact_log`). A
role without them still plays its part; each new queue's log then keeps a node of about
4 KB."""
_READER = (
    "select time get zrangebylex hlen hgetall hscan zcount zrangebyscore zmscore hmget zcard "
    "xrange xinfo|stream"
)
_JANITOR = f"{_BROKER} zrangebylex zrangebyscore zmscore hlen hgetall hscan hmget"
ROLES: dict[str, tuple[str, ...]] = {
    "broker": tuple(_BROKER.split()),
    "reader": tuple(_READER.split()),
    "janitor": tuple(_JANITOR.split()),
}
"""The commands of the ACL roles of docs/production.md ("Least privilege with ACL"), in order
there; the tests hold these to the tested ``ACL SETUSER`` lines."""


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


def int_or_none(value: str | None) -> int | None:
    """A reply's number, or None (nothing read, or not a number)."""
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
        by_sha = [c for c in lacking if c in FASTER_RIGHTS]
        by_size = [c for c in lacking if c in SMALLER_RIGHTS]
        lacking = [c for c in lacking if c not in FASTER_RIGHTS + SMALLER_RIGHTS]
        if not lacking:
            playable += 1
            db0 = (
                "" if rights.get("select", False) else "; without SELECT it can use database 0 only"
            )
            if by_sha:
                db0 += (
                    f"; without {' '.join(by_sha)} its heartbeats cost more server time "
                    "(docs/production.md)"
                )
            if by_size:
                db0 += (
                    f"; without {' '.join(by_size)} each new queue's event log keeps a 4 KB node "
                    "(docs/production.md)"
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


def conflict_finding(rows: Iterable[ConsumerPresence] | None, why: str = "") -> Finding:
    """The consumers in conflict (protocol version 2): two processes beat as one consumer
    name within a TTL (a duplicate: the instance tokens of their beats alternate), so
    neither's presence can be trusted. `rows` None: the snapshot could not be read."""
    if rows is None:
        return Finding(
            "conflicts",
            Status.SKIP,
            f"the prefix's consumers not read: {why or 'the user may not read the index'}",
        )
    found = sorted(rows)
    if not found:
        return Finding("conflicts", Status.OK, "no consumer is beaten by two processes")
    names = [
        f"{row.queue}/{row.group}/{row.consumer}"
        + (f" (instance {row.instance})" if row.instance else "")
        for row in found
    ]
    return Finding(
        "conflicts",
        Status.WARN,
        f"{len(found)} consumer(s) in conflict, each beaten by two processes within a TTL: "
        f"{_first_five(names)}",
        "give each process its own consumer name (a duplicate, say a second pod with the same "
        "hostname-based name, keeps a dead consumer alive and doubles its leases), or stop "
        "the extra process",
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
        replicas = int_or_none(info.get("connected_slaves")) or 0
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
