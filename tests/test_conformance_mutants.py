"""The conformance cases catch wrong clients (issue 35 item 3): each wrong client here is a
small mutation of the Python client, made in this test only (a plan's requests or replies
rewritten, an encoder or a check replaced), and the conformance runner must fail it on
the case named, on a redis-server. The real client passes the same case (here, and on
every backend in tests/test_conformance.py; the Node client in
clients/node/test/conformance.test.mjs)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Generator
from typing import Any

import pytest
from backends import make_registry, raw_client
from conformance_runner import CONFORMANCE, load, run

import redis_presence.model
import redis_presence.plans.caches
import redis_presence.plans.core
import redis_presence.plans.index
import redis_presence.plans.reads
import redis_presence.plans.writes
import redis_presence.replies
from redis_presence.beats import NO_DRAIN, Written
from redis_presence.errors import PresenceDataError
from redis_presence.keys import decode_min_active
from redis_presence.model import Skipped
from redis_presence.plans import declared, groups
from redis_presence.plans.core import Spoilt
from redis_presence.plans.reads import ReadPlans
from redis_presence.plans.requests import Command, ScriptCall
from redis_presence.plans.settings import SettingsPlans
from redis_presence.plans.writes import WritePlans
from redis_presence.scripts import Script, script
from redis_presence.validation import BeatSpec

pytestmark = [pytest.mark.timeout(120), pytest.mark.redis_server]

Patch = Callable[[pytest.MonkeyPatch], None]


def _rewritten(
    method: Callable[..., Generator[Any, Any, Any]],
    request: Callable[[Any], Any] = lambda r: r,
    reply: Callable[[Any, Any], Any] = lambda r, x: x,
) -> Callable[..., Generator[Any, Any, Any]]:
    """`method`, a plan, with each request it yields passed through `request` and each
    reply it is given through `reply` (the mutation of a wrong client's wire traffic)."""

    def plan(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = method(*args, **kwargs)
        try:
            batch = next(inner)
            while True:
                try:
                    replies = yield type(batch)(request(r) for r in batch)
                except GeneratorExit:
                    inner.close()
                    raise
                except Exception as error:  # an error reply, thrown into the plan
                    batch = inner.throw(error)
                    continue
                batch = inner.send([reply(r, x) for r, x in zip(batch, replies, strict=True)])
        except StopIteration as done:
            return done.value

    return plan


# -- the wrong clients ----------------------------------------------------------------------


def meta_unsorted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata keys left in the caller's order."""
    monkeypatch.setattr(
        redis_presence.plans.writes,
        "encode_meta",
        lambda meta: json.dumps(meta, separators=(",", ":"), ensure_ascii=False),
    )


def meta_utf16_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata keys sorted by UTF-16 code units (JavaScript's default sort)."""

    def encode(meta: dict[str, str]) -> str:
        pairs = sorted(meta.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return json.dumps(dict(pairs), separators=(",", ":"), ensure_ascii=False)

    monkeypatch.setattr(redis_presence.plans.writes, "encode_meta", encode)


def _no_version_check(key: str, reply: Any) -> None:
    return None


def reads_check_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads never look at what P:protocol says."""
    monkeypatch.setattr(redis_presence.plans.caches, "_check_protocol", _no_version_check)
    monkeypatch.setattr(redis_presence.plans.index, "_check_protocol", _no_version_check)


def _lua(monkeypatch: pytest.MonkeyPatch, *edits: tuple[str, str]) -> None:
    """Every script sent with each of `edits` (old, new) made in its text, by EVALSHA (the
    heartbeats' function library left unused): a wrong client's scripts. Each edit must
    change some script (checked here, so that a mutant that no longer applies fails here,
    not as a wrong client)."""
    names = ("heartbeat", "heartbeat_many", "deregister", "drain", "setting")
    for old, _ in edits:
        assert any(old in script(name).source for name in names), old

    def edited(name: str) -> Script:
        found = script(name)
        text = found.source
        for old, new in edits:
            text = text.replace(old, new)
        if text == found.source:
            return found
        return Script(name, text, hashlib.sha1(text.encode()).hexdigest())

    monkeypatch.setattr(redis_presence.plans.core, "script", edited)
    monkeypatch.setattr(redis_presence.plans.writes, "script", edited)


def writes_check_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripts that write without checking P:protocol (their check_protocol a no-op)."""
    _lua(
        monkeypatch,
        (
            "local function check_protocol(i, given)\n",
            "local function check_protocol(i, given)\n  do MODE = VERSION; return nil end\n",
        ),
    )


def version_compared_as_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """P:protocol compared as a number ("02" and "2 " taken for version 2)."""
    real = redis_presence.plans.core._check_protocol

    def numeric(key: str, reply: Any) -> None:
        try:
            if reply is not None and int(reply) == 2:
                return
        except ValueError:
            pass
        real(key, reply)

    monkeypatch.setattr(redis_presence.plans.caches, "_check_protocol", numeric)
    monkeypatch.setattr(redis_presence.plans.index, "_check_protocol", numeric)
    _lua(
        monkeypatch,
        (
            "elseif not found or found == VERSION then",
            "elseif not found or tonumber(found) == tonumber(VERSION) then",
        ),
    )


def mode_1_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefix that says 1 written as version 2 (nine-field values, version 2 events)."""
    _lua(
        monkeypatch,
        ("if found == '1' then\n    MODE = '1'", "if found == '1' then\n    MODE = VERSION"),
    )


def mode_1_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client of version 2 that refuses a prefix that still says 1 (its reads, and the
    writes it checks itself)."""
    monkeypatch.setattr(redis_presence.plans.core, "PROTOCOL_MODES", ("2",))
    _lua(monkeypatch, ("if found == '1' then\n    MODE = '1'", "if found == 'never' then"))


def drain_in_mode_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """A drain request written on a prefix in mode 1 (whose version 1 clients lose it)."""
    _lua(
        monkeypatch,
        (
            "if MODE == '1' then\n  return redis.error_reply",
            "if MODE == 'never' then\n  return redis.error_reply",
        ),
    )


def restart_taken_for_duplicate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any change of token under an active consumer taken for a duplicate (a conflict),
    not only a return to the previous token."""
    _lua(monkeypatch, ("if active and token == prev then", "if active then"))


def restart_keeps_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart that keeps the old process's draining flag and drain request."""
    _lua(monkeypatch, ("flags = int_str(n - n % 4)", "flags = int_str(n)"))


def conflict_logged_every_beat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conflict event at every change of token of a duplicate, not once while active."""
    _lua(
        monkeypatch,
        (
            "if conflict == '0' or inactive_at(conflict, now_us, now_rest, ttl) then"
            " kind = 'conflict' end",
            "kind = 'conflict'",
        ),
    )


def _beats(beats: Any, change: Callable[[BeatSpec], BeatSpec]) -> list[Any]:
    """`beats` of heartbeat_many as BeatSpecs, each passed through `change`."""
    return [change(BeatSpec(*beat)) for beat in beats]


def capacity_dropped_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat without a capacity sent as capacity 0 (the stored one dropped), not kept."""
    beat, many = WritePlans.heartbeat, WritePlans.heartbeat_many

    def heartbeat(self: Any, *args: Any, capacity: int | None = None, **kwargs: Any) -> Any:
        return beat(self, *args, capacity=0 if capacity is None else capacity, **kwargs)

    def heartbeat_many(self: Any, beats: Any, now_ns: Any = None) -> Any:
        def zero(b: BeatSpec) -> BeatSpec:
            return b._replace(capacity=0) if b.capacity is None else b

        return many(self, _beats(beats, zero), now_ns)

    monkeypatch.setattr(WritePlans, "heartbeat", heartbeat)
    monkeypatch.setattr(WritePlans, "heartbeat_many", heartbeat_many)


def draining_never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never sends its draining flag (the scripts keep the stored one)."""
    beat, many = WritePlans.heartbeat, WritePlans.heartbeat_many

    def heartbeat(self: Any, *args: Any, draining: bool | None = None, **kwargs: Any) -> Any:
        return beat(self, *args, **kwargs)

    def heartbeat_many(self: Any, beats: Any, now_ns: Any = None) -> Any:
        return many(self, _beats(beats, lambda b: b._replace(draining=None)), now_ns)

    monkeypatch.setattr(WritePlans, "heartbeat", heartbeat)
    monkeypatch.setattr(WritePlans, "heartbeat_many", heartbeat_many)


def drain_reply_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat that never says a drain was requested (its script's reply ignored)."""
    beat = WritePlans.heartbeat

    def heartbeat(self: Any, *args: Any, **kwargs: Any) -> Any:
        yield from beat(self, *args, **kwargs)
        return NO_DRAIN

    monkeypatch.setattr(WritePlans, "heartbeat", heartbeat)


def drains_of_many_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """heartbeat_many's count without the beats whose consumer has a drain request."""
    many = WritePlans.heartbeat_many

    def heartbeat_many(self: Any, *args: Any, **kwargs: Any) -> Any:
        written = yield from many(self, *args, **kwargs)
        return Written(int(written))

    monkeypatch.setattr(WritePlans, "heartbeat_many", heartbeat_many)


def long_token_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored instance token read up to 33 characters (one more than a client writes)."""
    monkeypatch.setattr(redis_presence.replies, "_MAX_TOKEN", 33)
    monkeypatch.setattr(redis_presence.replies, "_TOKEN", re.compile(r"[A-Za-z0-9_.\-]{1,33}"))


def conflict_never_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row in conflict whenever a duplicate was ever seen (conflict_ns not 0), not only
    within a TTL of it."""
    real = redis_presence.model._v2_fields

    def fields(stored: Any, now_ns: int, ttl_ms: int) -> tuple[Any, ...]:
        out = real(stored, now_ns, ttl_ms)
        if stored is None:
            return out
        return (*out[:3], map(bool, stored[2]), out[4])

    monkeypatch.setattr(redis_presence.model, "_v2_fields", fields)


def no_version_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """No protocol-version check at all."""
    reads_check_no_version(monkeypatch)
    writes_check_no_version(monkeypatch)


def len_by_hlen(monkeypatch: pytest.MonkeyPatch) -> None:
    """`len` counted with HLEN of each group's hash instead of ZCARD of its sorted set."""

    def hlen(r: Any) -> Any:
        if isinstance(r, Command) and r.name == "ZCARD":
            return Command("HLEN", (str(r.args[0]).removesuffix(":hb") + ":c",), r.node_key)
        return r

    monkeypatch.setattr(ReadPlans, "size", _rewritten(ReadPlans.size, request=hlen))


def minimum_zero_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """expect() takes a minimum of 0."""

    def check(value: Any, argument: str = "min_active") -> int:
        if not 0 <= value <= 1_000_000:
            raise ValueError(f"{argument} must be in [0, 1000000], got {value}")
        return int(value)

    monkeypatch.setattr(declared, "check_min_active", check)


def minimum_read_leniently(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored minimum read with int() ("0" and "02" taken for 0 and 2)."""
    strict = decode_min_active

    def lenient(key: str, group: Any, value: Any) -> int:
        try:
            return int(value)
        except ValueError:  # not a number at all: set aside, as the real client does
            return strict(key, group, value)

    monkeypatch.setattr(declared, "decode_min_active", lenient)
    monkeypatch.setattr(groups, "decode_min_active", lenient)


def _prune_resumed(monkeypatch: pytest.MonkeyPatch, forget: Callable[[Any, Any], Any]) -> None:
    """prune with its resume offsets (below, ties) replaced by `forget` of them; a prune
    that makes 100 calls is taken for one that never ends (a wrong client may loop)."""
    calls = [0]

    def resumed(r: Any) -> Any:
        if isinstance(r, ScriptCall) and r.script.name == "prune":
            calls[0] += 1
            if calls[0] > 100:
                raise RuntimeError("prune never ends")
            at = 3 + int(r.args[2])  # EVALSHA sha numkeys KEYS... now budget below ties
            offsets = forget(r.args[at + 2], r.args[at + 3])
            return r._replace(args=(*r.args[: at + 2], *offsets, *r.args[at + 4 :]))
        return r

    monkeypatch.setattr(WritePlans, "_prune", _rewritten(WritePlans._prune, request=resumed))


def prune_forgets_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    """prune resumes a group from its start (offsets 0 0) instead of where it stopped."""
    _prune_resumed(monkeypatch, lambda below, ties: (0, 0))


def prune_forgets_tie_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """prune resumes a group at the first of the horizon's microsecond's consumers, not at
    the one after those it visited."""
    _prune_resumed(monkeypatch, lambda below, ties: (below, 0))


def large_group_one_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of more than 500 consumers read by one HSCAN page (its cursor ignored)."""

    def first_page(r: Any, x: Any) -> Any:
        if isinstance(r, Command) and r.name == "HSCAN" and not isinstance(x, Exception):
            return (0, x[1])
        return x

    monkeypatch.setattr(ReadPlans, "_read", _rewritten(ReadPlans._read, reply=first_page))


def settings_read_leniently(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored shared TTL read with int() and a range check (" 5000", "+5000", "5_000"
    taken for 5000)."""

    def lenient(value: Any) -> int:
        return int(value.decode() if isinstance(value, bytes) else value)

    monkeypatch.setattr(redis_presence.plans.core, "setting_digits", lenient)


def meta_read_leniently(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored metadata read as any JSON object of strings (17 keys, keys out of order)."""

    def lenient(key: str, consumer: Any, value: Any) -> dict[str, str]:
        meta = json.loads(value)
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise PresenceDataError(f"{key} holds metadata this package did not write")
        return meta

    monkeypatch.setattr(redis_presence.plans.reads, "decode_meta", lenient)


def lease_read_unbounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored lease count read whatever its size (19 digits)."""
    monkeypatch.setattr(redis_presence.replies, "MAX_LEASE_COUNT", 10**19)


def skipped_in_found_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read set aside reported in the order the read found it."""

    def found(skipped: list[Skipped]) -> tuple[Skipped, ...]:
        return tuple({(s.key, s.consumer): s for s in reversed(skipped)}.values())[::-1]

    for module in (redis_presence.plans.core, redis_presence.plans.reads, groups):
        monkeypatch.setattr(module, "_unique", found)


def spoilt_setting_fails_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's spoilt shared setting fails a read of many groups, instead of setting that
    group aside."""

    def keep(groups: Any, settings: Any, aside: list[Skipped]) -> Any:
        for value in settings:
            if isinstance(value, Spoilt):
                raise value.error()
        return list(groups), list(settings)

    monkeypatch.setattr(SettingsPlans, "keep", staticmethod(keep))


def own_ttls_unindexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting.lua that stores a group's own TTL and leaves P:ttls alone (a client of
    the layout before it): the whole-fleet prune then finds the short-TTL group late."""
    _lua(monkeypatch, ("    redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2])", "    local _ = 0"))


MUTANTS: list[tuple[Patch, str, int]] = [
    (meta_unsorted, "07-metadata", 11),
    (meta_unsorted, "21-metadata-code-point-order", 5),
    (meta_utf16_order, "21-metadata-code-point-order", 5),
    (meta_read_leniently, "21-metadata-code-point-order", 10),
    (reads_check_no_version, "17-another-protocol-version", 16),
    (writes_check_no_version, "17-another-protocol-version", 5),
    (no_version_check, "17-another-protocol-version", 2),
    (version_compared_as_number, "27-protocol-version-spellings", 2),
    (len_by_hlen, "22-len-counts-the-sorted-sets", 6),
    (minimum_zero_written, "09-declared-groups", 15),
    (minimum_read_leniently, "13-tolerant-reads-declared-and-metadata", 13),
    (prune_forgets_offsets, "23-prune-resumes-where-it-stopped", 4),
    (prune_forgets_tie_offset, "23-prune-resumes-where-it-stopped", 8),
    (large_group_one_page, "24-large-group-read", 5),
    (settings_read_leniently, "25-spoilt-setting-spellings", 2),
    (settings_read_leniently, "28-spoilt-group-progress-budget", 4),
    (spoilt_setting_fails_the_fleet, "14-tolerant-reads-spoilt-group-setting", 3),
    (spoilt_setting_fails_the_fleet, "25-spoilt-setting-spellings", 2),
    (lease_read_unbounded, "26-tolerant-reads-out-of-range-and-order", 5),
    (skipped_in_found_order, "26-tolerant-reads-out-of-range-and-order", 10),
    # Protocol version 2.
    (mode_1_ignored, "20-mode-1-prefix", 4),
    (mode_1_refused, "20-mode-1-prefix", 2),
    (mode_1_refused, "27-protocol-version-spellings", 31),
    (drain_in_mode_1, "20-mode-1-prefix", 6),
    (capacity_dropped_without_one, "29-capacity", 5),
    (draining_never_sent, "30-draining", 2),
    (drain_reply_dropped, "31-drain-request", 7),
    (drains_of_many_dropped, "31-drain-request", 8),
    (restart_taken_for_duplicate, "32-restart", 4),
    (restart_taken_for_duplicate, "33-duplicate-consumer", 4),
    (restart_keeps_flags, "32-restart", 4),
    (conflict_logged_every_beat, "33-duplicate-consumer", 11),
    (conflict_never_clears, "33-duplicate-consumer", 14),
    (long_token_read, "34-tolerant-reads-spoilt-version-2-value", 3),
    (own_ttls_unindexed, "02-rule-milliseconds-shared-ttl", 12),
]


def _run(request: pytest.FixtureRequest, name: str) -> None:
    case = load(CONFORMANCE / f"{name}.json")
    prefix = case.get("prefix", "presence")
    registry = make_registry(request, "redis", prefix=prefix, instance=case.get("instance"))

    def other(instance: str) -> Any:
        return make_registry(request, "redis", prefix=prefix, instance=instance)

    run(case, registry, raw_client(request, "redis"), other)


@pytest.mark.parametrize(
    ("mutate", "name", "step"),
    [pytest.param(m, n, step, id=f"{m.__name__}-{n[:2]}") for m, n, step in MUTANTS],
)
def test_the_case_fails_the_wrong_client(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    mutate: Patch,
    name: str,
    step: int,
) -> None:
    mutate(monkeypatch)
    with pytest.raises(AssertionError) as failed:
        _run(request, name)
    # The runner's own verdict, on the step of that case that shows the rule.
    case = load(CONFORMANCE / f"{name}.json")
    assert str(failed.value).startswith(f"{case['name']} step {step} ("), failed.value


@pytest.mark.parametrize("name", sorted({n for _, n, _ in MUTANTS}))
def test_the_case_passes_the_real_client(request: pytest.FixtureRequest, name: str) -> None:
    _run(request, name)
