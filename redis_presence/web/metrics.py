"""`/metrics`: a custom Prometheus collector over one fresh read per scrape.

Nothing is kept between scrapes: each scrape reads Redis, and what that read reports is
decided once, by `families` (every metric, series and value); the text format
(`render_text`, what Prometheus gets) and prometheus_client's encoders (`PresenceCollector`,
for OpenMetrics) only write those families out. A consumer that is deregistered or pruned
is gone from the next scrape, and a dead one turns stale, then expired, as its age says;
gauges updated in the background would keep reporting it as it last was.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from redis_presence import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from redis_presence.errors import PresenceDataError, PresenceError, PresenceProtocolError
from redis_presence.model import NS_PER_S

from .reads import GroupStats, PresenceData

METRICS: dict[str, str] = {
    "redis_presence_up": (
        "1 when Redis answered this scrape's read (also when it found the prefix written by "
        "another protocol version, redis_presence_protocol_mismatch, or data it cannot read, "
        "redis_presence_data_error), 0 when the read failed."
    ),
    "redis_presence_protocol_mismatch": (
        "1 when the prefix was written by another protocol version than this service speaks "
        "(its P:protocol key): Redis answered, but nothing of the prefix can be read; else 0."
    ),
    "redis_presence_data_error": (
        "1 when Redis answered but this scrape's read failed on data of the prefix that this "
        "service cannot read (such as a spoilt shared setting of the prefix, P:ttl or "
        "P:stuck, which every group without its own uses): no group series; else 0."
    ),
    "redis_presence_consumers": (
        "Tracked consumers per queue, group and state (active, stale, expired); every state "
        "of every tracked group is reported, 0 included."
    ),
    "redis_presence_group_active": "Active consumers per queue and group.",
    "redis_presence_group_min_active": (
        "The minimum of active consumers a declared group (registry.expect) must have."
    ),
    "redis_presence_group_below_min": (
        "1 when a declared group has fewer active consumers than its minimum, else 0; every "
        "declared group is reported, with or without consumers."
    ),
    "redis_presence_group_verdict": (
        "1, labelled with the group's verdict (OK, DRAINING, DEGRADED, STALLED, STOPPED): "
        "one series a group, whose verdict label changes with it; STALLED only with "
        "--stuck-metrics or --per-consumer-metrics (docs/concepts.md, one verdict per group)."
    ),
    "redis_presence_consumers_stuck": (
        "Active consumers holding leases without progress for longer than the group's "
        "progress budget (only with --stuck-metrics or --per-consumer-metrics)."
    ),
    "redis_presence_oldest_heartbeat_age_seconds": (
        "Seconds since the least recent heartbeat among the group's tracked consumers."
    ),
    "redis_presence_group_leases": (
        "Leases held by the group's tracked consumers (every state), summed (only with "
        "--stuck-metrics or --per-consumer-metrics)."
    ),
    "redis_presence_group_leases_expired": (
        "Leases held by the group's expired consumers: work nobody will finish."
    ),
    "redis_presence_group_capacity": (
        "The capacities of the group's active consumers that report one, summed (protocol "
        "version 2: heartbeat(..., capacity=N)); no series for a group none of whose "
        "active consumers reports one."
    ),
    "redis_presence_group_free": (
        "redis_presence_group_capacity minus the leases those consumers hold (never below "
        "0): the group's free slots; no series where the capacity has none."
    ),
    "redis_presence_group_draining": (
        "The group's active or stale consumers that say they are draining (a planned "
        "departure: its verdict is DRAINING rather than DEGRADED or STOPPED)."
    ),
    "redis_presence_group_conflicts": (
        "The group's consumers in conflict: two live processes beating with one consumer "
        "name (a duplicate), the last time within one TTL."
    ),
    "redis_presence_consumer_last_seen_age_seconds": (
        "Seconds since each consumer's last heartbeat (only with --per-consumer-metrics)."
    ),
    "redis_presence_scrape_duration_seconds": "How long this scrape's reads of Redis took.",
    "redis_presence_ttl_seconds": (
        "The heartbeat budget states are computed with (--ttl-ms, else the shared TTL)."
    ),
}
"""Every metric the service exposes, with its help text."""


@dataclass(frozen=True)
class ScrapeReading:
    """What one scrape read: `groups` (and `consumers` with per-consumer metrics), or the
    error that stopped the read."""

    now_ns: int
    groups: Sequence[GroupStats]
    consumers: Sequence[ConsumerPresence]
    seconds: float
    ttl_ms: int
    error: str | None = None
    other_protocol: bool = False
    """Whether `error` is that the prefix was written by another protocol version (Redis
    answered)."""
    data_error: bool = False
    """Whether `error` is data of the prefix this service cannot read, such as a spoilt
    ``P:ttl`` (Redis answered; another protocol version is `other_protocol`)."""


Samples = list[tuple[tuple[str, ...], float]]
"""A family's series: each one's label values (in the family's label order) and value."""


class Family(NamedTuple):
    """One metric of a scrape: its name, label names and samples (label values, value);
    `counts`: every value is a count (few distinct values)."""

    name: str
    labels: tuple[str, ...]
    samples: Samples
    counts: bool = True


def _age_s(now_ns: int, then_ns: int) -> float:
    return max(0, now_ns - then_ns) / NS_PER_S


GROUP = ("queue", "group")


def families(reading: ScrapeReading, *, per_consumer: bool) -> list[Family]:
    """What one scrape reports, in order: the one place that decides which metrics and
    series a reading gives (`render_text` and `PresenceCollector` only encode them). The
    group families are always there (0 included); stuck, oldest, leases, expired leases,
    capacity, free slots, draining and conflicts only when the read knew them for some
    group (and each series only for a group whose value it knew)."""
    answered = reading.other_protocol or reading.data_error
    up = 0.0 if reading.error and not answered else 1.0
    out = [
        Family("redis_presence_up", (), [((), up)]),
        Family(
            "redis_presence_protocol_mismatch", (), [((), 1.0 if reading.other_protocol else 0.0)]
        ),
        Family("redis_presence_data_error", (), [((), 1.0 if reading.data_error else 0.0)]),
        Family("redis_presence_scrape_duration_seconds", (), [((), reading.seconds)], False),
        Family("redis_presence_ttl_seconds", (), [((), reading.ttl_ms / 1000)], False),
    ]
    if reading.error:
        return out
    consumers: Samples = []
    active: Samples = []
    minimum: Samples = []
    below: Samples = []
    verdicts: Samples = []
    stuck: Samples = []
    oldest: Samples = []
    leases: Samples = []
    lost: Samples = []
    capacity: Samples = []
    free: Samples = []
    draining: Samples = []
    conflicts: Samples = []
    now = reading.now_ns
    for stats in reading.groups:
        queue, group = names = (stats.queue, stats.group)
        consumers += (
            ((queue, group, "active"), stats.active),
            ((queue, group, "stale"), stats.stale),
            ((queue, group, "expired"), stats.expired),
        )
        active.append((names, stats.active))
        if stats.min_active is not None:
            minimum.append((names, stats.min_active))
            below.append((names, 1.0 if stats.below else 0.0))
        verdicts.append(((queue, group, stats.verdict.value), 1.0))
        if stats.stuck is not None:
            stuck.append((names, stats.stuck))
        if stats.oldest_heartbeat_ns is not None:
            oldest.append((names, _age_s(now, stats.oldest_heartbeat_ns)))
        if stats.leases is not None:
            leases.append((names, stats.leases))
        if stats.leases_expired is not None:
            lost.append((names, stats.leases_expired))
        # Protocol version 2: only where the read knows them (never a 0 for "not reported").
        if stats.capacity is not None:
            capacity.append((names, stats.capacity))
            if stats.free is not None:
                free.append((names, stats.free))
        if stats.draining is not None:
            draining.append((names, stats.draining))
        if stats.conflicts is not None:
            conflicts.append((names, stats.conflicts))
    out += (
        Family("redis_presence_consumers", (*GROUP, "state"), consumers),
        Family("redis_presence_group_active", GROUP, active),
        Family("redis_presence_group_min_active", GROUP, minimum),
        Family("redis_presence_group_below_min", GROUP, below),
        Family("redis_presence_group_verdict", (*GROUP, "verdict"), verdicts),
    )
    out += [
        family
        for family in (
            Family("redis_presence_consumers_stuck", GROUP, stuck),
            Family("redis_presence_oldest_heartbeat_age_seconds", GROUP, oldest, False),
            Family("redis_presence_group_leases", GROUP, leases),
            Family("redis_presence_group_leases_expired", GROUP, lost),
            Family("redis_presence_group_capacity", GROUP, capacity),
            Family("redis_presence_group_free", GROUP, free),
            Family("redis_presence_group_draining", GROUP, draining),
            Family("redis_presence_group_conflicts", GROUP, conflicts),
        )
        if family.samples
    ]
    if per_consumer:
        ages: Samples = [
            ((row.queue, row.group, row.consumer), _age_s(now, row.last_heartbeat_ns))
            for row in reading.consumers
        ]
        out.append(
            Family(
                "redis_presence_consumer_last_seen_age_seconds", (*GROUP, "consumer"), ages, False
            )
        )
    return out


class PresenceCollector(Collector):
    """The metric families of one `ScrapeReading` (`families`), for prometheus_client's
    encoders (OpenMetrics)."""

    def __init__(self, reading: ScrapeReading, *, per_consumer: bool) -> None:
        self.reading = reading
        self.per_consumer = per_consumer

    def collect(self) -> Iterator[Metric]:
        for family in families(self.reading, per_consumer=self.per_consumer):
            gauge = GaugeMetricFamily(family.name, METRICS[family.name], labels=family.labels)
            for values, value in family.samples:
                gauge.add_metric(values, value)
            yield gauge


async def scrape(
    data: PresenceData, *, read_consumers: bool, capacity: bool = False
) -> ScrapeReading:
    """Read what one scrape reports (`read_consumers`: a snapshot, for stuck counts, oldest
    heartbeats and per-consumer series); a Redis failure becomes `error` (and `up` 0), a
    prefix of another protocol version `error` and `other_protocol`, data of the prefix it
    cannot read (a spoilt ``P:ttl``) `error` and `data_error` (both `up` 1: Redis answered).
    `capacity`: the default read also reads the live consumers' values (capacity, free
    slots, draining, conflicts: two commands a group more)."""
    started = time.perf_counter()
    try:
        now, ttl, groups, consumers = await data.metrics(
            read_consumers=read_consumers, capacity=capacity
        )
    except PresenceError as exc:
        known = data.last_ttl.ttl_ms if data.last_ttl else DEFAULT_PRESENCE_TTL_MS
        other = isinstance(exc, PresenceProtocolError)
        unreadable = isinstance(exc, PresenceDataError) and not other
        seconds = time.perf_counter() - started
        return ScrapeReading(
            0, (), (), seconds, known, str(exc), other_protocol=other, data_error=unreadable
        )
    return ScrapeReading(now, groups, consumers, time.perf_counter() - started, ttl.ttl_ms)


TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _float(value: float) -> str:
    """A sample value exactly as prometheus_client writes it."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


@functools.lru_cache(maxsize=4096)
def _number(value: float) -> str:
    """`_float` of a count (few distinct values, so cached)."""
    return _float(value)


def _escape(value: str) -> str:
    """A label value escaped as the text format wants it (backslash, newline, quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


_label = functools.lru_cache(maxsize=16_384)(_escape)
"""`_escape` of a name that recurs (a queue's, a group's)."""


def _head(name: str) -> str:
    help_text = METRICS[name].replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


def _samples(family: Family) -> list[str]:
    """A family's sample lines, its labels sorted by name (as prometheus_client writes
    them), one f-string per number of labels (no `Sample` built)."""
    name, samples = family.name, family.samples
    number = _number if family.counts else _float
    order = sorted(range(len(family.labels)), key=family.labels.__getitem__)
    keys = [family.labels[i] for i in order]
    # Queue and group names recur in every family of their group: escaped once (cached);
    # a consumer's name appears once per scrape, so a cache would only cost.
    escapes = [_escape if key == "consumer" else _label for key in keys]
    if not order:
        return [f"{name} {number(value)}\n" for _, value in samples]
    if len(order) == 2:
        (i, j), (a, b), (ea, eb) = order, keys, escapes
        return [
            f'{name}{{{a}="{ea(v[i])}",{b}="{eb(v[j])}"}} {number(value)}\n' for v, value in samples
        ]
    if len(order) == 3:
        (i, j, k), (a, b, c), (ea, eb, ec) = order, keys, escapes
        return [
            f'{name}{{{a}="{ea(v[i])}",{b}="{eb(v[j])}",{c}="{ec(v[k])}"}} {number(value)}\n'
            for v, value in samples
        ]
    marks = list(zip(keys, order, escapes, strict=True))
    return [
        name + "{" + ",".join(f'{key}="{e(v[i])}"' for key, i, e in marks) + f"}} {number(value)}\n"
        for v, value in samples
    ]


def render_text(reading: ScrapeReading, *, per_consumer: bool) -> bytes:
    """The text exposition (format 0.0.4) of `families(reading)`, byte for byte what
    ``prometheus_client.generate_latest`` writes for `PresenceCollector(reading)` (tested),
    without building a `Sample` per series: at 1,000 groups that is most of a scrape's
    time. Each family's labels are written sorted by name, as prometheus_client writes
    them, through one template per family."""
    out: list[str] = []
    for family in families(reading, per_consumer=per_consumer):
        out.append(_head(family.name))
        out += _samples(family)
    return "".join(out).encode()


def wants_openmetrics_only(accept: str) -> bool:
    """Whether a scraper accepts OpenMetrics but not the text format (Prometheus accepts
    both, and gets the text format)."""
    accept = accept.lower()
    return (
        "application/openmetrics-text" in accept
        and "text/plain" not in accept
        and "*/*" not in accept
    )


def registry_for(reading: ScrapeReading, *, per_consumer: bool) -> CollectorRegistry:
    """A registry holding only this scrape's collector, for `generate_latest`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PresenceCollector(reading, per_consumer=per_consumer))
    return registry
