"""`/metrics`: a custom Prometheus collector over one fresh read per scrape.

Nothing is kept between scrapes: each scrape reads Redis, and the collector built from
that read is the only source of the exposition. A consumer that is deregistered or pruned
is gone from the next scrape, and a dead one turns stale, then expired, as its age says;
gauges updated in the background would keep reporting it as it last was.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from redis_presence import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState
from redis_presence.errors import PresenceError

from .data import GroupStats, PresenceData

NS_PER_S = 1_000_000_000

METRICS: dict[str, str] = {
    "redis_presence_up": "1 when this scrape read Redis, 0 when the read failed.",
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


def _gauge(name: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=list(labels))


def _age_s(now_ns: int, then_ns: int) -> float:
    return max(0, now_ns - then_ns) / NS_PER_S


class PresenceCollector(Collector):
    """The metric families of one `ScrapeReading`."""

    def __init__(self, reading: ScrapeReading, *, per_consumer: bool) -> None:
        self.reading = reading
        self.per_consumer = per_consumer

    def collect(self) -> Iterator[Metric]:
        reading = self.reading
        up = _gauge("redis_presence_up")
        up.add_metric([], 0.0 if reading.error else 1.0)
        yield up
        duration = _gauge("redis_presence_scrape_duration_seconds")
        duration.add_metric([], reading.seconds)
        yield duration
        ttl = _gauge("redis_presence_ttl_seconds")
        ttl.add_metric([], reading.ttl_ms / 1000)
        yield ttl
        if reading.error:
            return
        consumers = _gauge("redis_presence_consumers", ("queue", "group", "state"))
        active = _gauge("redis_presence_group_active", ("queue", "group"))
        minimum = _gauge("redis_presence_group_min_active", ("queue", "group"))
        below = _gauge("redis_presence_group_below_min", ("queue", "group"))
        stuck = _gauge("redis_presence_consumers_stuck", ("queue", "group"))
        oldest = _gauge("redis_presence_oldest_heartbeat_age_seconds", ("queue", "group"))
        leases = _gauge("redis_presence_group_leases", ("queue", "group"))
        lost = _gauge("redis_presence_group_leases_expired", ("queue", "group"))
        for stats in reading.groups:
            names = [stats.queue, stats.group]
            for state, value in (
                (PresenceState.ACTIVE, stats.active),
                (PresenceState.STALE, stats.stale),
                (PresenceState.EXPIRED, stats.expired),
            ):
                consumers.add_metric([*names, state.value], value)
            active.add_metric(names, stats.active)
            if stats.min_active is not None:
                minimum.add_metric(names, stats.min_active)
                below.add_metric(names, 1.0 if stats.below else 0.0)
            if stats.stuck is not None:
                stuck.add_metric(names, stats.stuck)
            if stats.oldest_heartbeat_ns is not None:
                oldest.add_metric(names, _age_s(reading.now_ns, stats.oldest_heartbeat_ns))
            if stats.leases is not None:
                leases.add_metric(names, stats.leases)
            if stats.leases_expired is not None:
                lost.add_metric(names, stats.leases_expired)
        yield consumers
        yield active
        yield minimum
        yield below
        for family in (stuck, oldest, leases, lost):
            if family.samples:
                yield family
        if self.per_consumer:
            ages = _gauge(
                "redis_presence_consumer_last_seen_age_seconds", ("queue", "group", "consumer")
            )
            for row in reading.consumers:
                ages.add_metric(
                    [row.queue, row.group, row.consumer],
                    _age_s(reading.now_ns, row.last_heartbeat_ns),
                )
            yield ages


async def scrape(data: PresenceData, *, read_consumers: bool) -> ScrapeReading:
    """Read what one scrape reports (`read_consumers`: a snapshot, for stuck counts, oldest
    heartbeats and per-consumer series); a Redis failure becomes `error` (and `up` 0)."""
    started = time.perf_counter()
    try:
        now, ttl, groups, consumers = await data.metrics(read_consumers=read_consumers)
    except PresenceError as exc:
        known = data.last_ttl.ttl_ms if data.last_ttl else DEFAULT_PRESENCE_TTL_MS
        return ScrapeReading(0, (), (), time.perf_counter() - started, known, str(exc))
    return ScrapeReading(now, groups, consumers, time.perf_counter() - started, ttl.ttl_ms)


TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _float(value: float) -> str:
    """A sample value exactly as prometheus_client writes it."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


@functools.lru_cache(maxsize=4096)
def _number(value: float) -> str:
    """`_float` of a count (few distinct values, so cached)."""
    return _float(value)


def _label(value: str) -> str:
    """A label value escaped as the text format wants it (backslash, newline, quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _head(name: str) -> str:
    help_text = METRICS[name].replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"


def render_text(reading: ScrapeReading, *, per_consumer: bool) -> bytes:
    """The text exposition (format 0.0.4) of `PresenceCollector(reading)`, byte for byte
    what ``prometheus_client.generate_latest`` writes for it (tested), without building a
    `Sample` per series: at 1,000 groups that is most of a scrape's time."""
    out = [
        _head("redis_presence_up"),
        f"redis_presence_up {_number(0.0 if reading.error else 1.0)}\n",
        _head("redis_presence_scrape_duration_seconds"),
        f"redis_presence_scrape_duration_seconds {_float(reading.seconds)}\n",
        _head("redis_presence_ttl_seconds"),
        f"redis_presence_ttl_seconds {_float(reading.ttl_ms / 1000)}\n",
    ]
    if reading.error:
        return "".join(out).encode()
    consumers = [_head("redis_presence_consumers")]
    active = [_head("redis_presence_group_active")]
    minimum = [_head("redis_presence_group_min_active")]
    below = [_head("redis_presence_group_below_min")]
    stuck = [_head("redis_presence_consumers_stuck")]
    oldest = [_head("redis_presence_oldest_heartbeat_age_seconds")]
    leases = [_head("redis_presence_group_leases")]
    lost = [_head("redis_presence_group_leases_expired")]
    for stats in reading.groups:
        names = f'group="{_label(stats.group)}",queue="{_label(stats.queue)}"'
        series = f"redis_presence_consumers{{{names},state="
        consumers.append(
            f'{series}"active"}} {_number(stats.active)}\n'
            f'{series}"stale"}} {_number(stats.stale)}\n'
            f'{series}"expired"}} {_number(stats.expired)}\n'
        )
        active.append(f"redis_presence_group_active{{{names}}} {_number(stats.active)}\n")
        if stats.min_active is not None:
            minimum.append(
                f"redis_presence_group_min_active{{{names}}} {_number(stats.min_active)}\n"
            )
            flag = _number(1.0 if stats.below else 0.0)
            below.append(f"redis_presence_group_below_min{{{names}}} {flag}\n")
        if stats.stuck is not None:
            stuck.append(f"redis_presence_consumers_stuck{{{names}}} {_number(stats.stuck)}\n")
        if stats.oldest_heartbeat_ns is not None:
            age = _age_s(reading.now_ns, stats.oldest_heartbeat_ns)
            oldest.append(f"redis_presence_oldest_heartbeat_age_seconds{{{names}}} {_float(age)}\n")
        if stats.leases is not None:
            leases.append(f"redis_presence_group_leases{{{names}}} {_number(stats.leases)}\n")
        if stats.leases_expired is not None:
            held = _number(stats.leases_expired)
            lost.append(f"redis_presence_group_leases_expired{{{names}}} {held}\n")
    out += consumers + active + minimum + below
    for family in (stuck, oldest, leases, lost):  # a family without a sample is left out
        out += family if len(family) > 1 else []
    if per_consumer:
        out.append(_head("redis_presence_consumer_last_seen_age_seconds"))
        now = reading.now_ns
        out += [
            f'redis_presence_consumer_last_seen_age_seconds{{consumer="{_label(row.consumer)}",'
            f'group="{_label(row.group)}",queue="{_label(row.queue)}"}} '
            f"{_float(_age_s(now, row.last_heartbeat_ns))}\n"
            for row in reading.consumers
        ]
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
