"""The conformance cases catch wrong clients (issue 35 item 3): each wrong client here is a
small mutation of the Python client, made in this test only (a plan's requests or replies
rewritten, an encoder or a check replaced), and the conformance runner must fail it on
the case named, on a redis-server. The real client passes the same case (here, and on
every backend in tests/test_conformance.py; the Node client in
clients/node/test/conformance.test.mjs)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Generator
from typing import Any

import pytest
from backends import make_registry, raw_client
from conformance_runner import CONFORMANCE, load, run

import redis_presence.plans.caches
import redis_presence.plans.core
import redis_presence.plans.index
import redis_presence.plans.reads
import redis_presence.plans.writes
import redis_presence.replies
from redis_presence.errors import PresenceDataError
from redis_presence.keys import decode_min_active
from redis_presence.model import Skipped
from redis_presence.plans import declared
from redis_presence.plans.core import Spoilt
from redis_presence.plans.reads import ReadPlans
from redis_presence.plans.requests import Command, ScriptCall
from redis_presence.plans.settings import SettingsPlans
from redis_presence.plans.writes import WritePlans
from redis_presence.scripts import Script, script

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


_UNCHECKED = "local function check_protocol(i)\n  if not KEYS[i] then return nil end"


def writes_check_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripts that write without checking P:protocol (their check_protocol a no-op)."""

    def unchecked(name: str) -> Script:
        found = script(name)
        text = found.source.replace(
            _UNCHECKED, "local function check_protocol(i)\n  do return nil end"
        )
        assert text != found.source
        return Script(name, text, hashlib.sha1(text.encode()).hexdigest())

    monkeypatch.setattr(redis_presence.plans.core, "script", unchecked)


def version_compared_as_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """P:protocol compared as a number ("01" and "1 " taken for version 1)."""
    real = redis_presence.plans.core._check_protocol

    def numeric(key: str, reply: Any) -> None:
        try:
            if reply is not None and int(reply) == 1:
                return
        except ValueError:
            pass
        real(key, reply)

    def loose(name: str) -> Script:
        found = script(name)
        text = found.source.replace(
            "if found and found ~= VERSION then",
            "if found and tonumber(found) ~= tonumber(VERSION) then",
        )
        assert text != found.source
        return Script(name, text, hashlib.sha1(text.encode()).hexdigest())

    monkeypatch.setattr(redis_presence.plans.caches, "_check_protocol", numeric)
    monkeypatch.setattr(redis_presence.plans.index, "_check_protocol", numeric)
    monkeypatch.setattr(redis_presence.plans.core, "script", loose)


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

    for module in (redis_presence.plans.core, redis_presence.plans.reads, declared):
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


MUTANTS: list[tuple[Patch, str, int]] = [
    (meta_unsorted, "07-metadata", 11),
    (meta_unsorted, "21-metadata-code-point-order", 5),
    (meta_utf16_order, "21-metadata-code-point-order", 5),
    (meta_read_leniently, "21-metadata-code-point-order", 10),
    (reads_check_no_version, "17-another-protocol-version", 16),
    (writes_check_no_version, "17-another-protocol-version", 5),
    (no_version_check, "17-another-protocol-version", 4),
    (version_compared_as_number, "27-protocol-version-spellings", 3),
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
