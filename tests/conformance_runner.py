"""Run one language-neutral conformance case (`conformance/*.json`) against a registry.

The format is `conformance/README.md`'s. Nanosecond values are decimal strings in the
cases (JavaScript numbers are doubles); a step's `args` are the registry method's keyword
arguments, with every ``*_ns`` string made an int here. `store` and `redis` steps need the
store itself: on the in-process registry (`client` None) they are skipped, and a case with
``"needs_store": true`` is not run there at all. A step with ``"instance"`` runs on a
registry of the same store whose beats carry that token (`other`, given by the caller).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.cluster

import redis_presence.errors
from redis_presence.beats import BeatReply
from redis_presence.validation import BeatSpec

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
CASES = sorted(CONFORMANCE.glob("*.json"))
ARGUMENT_ERRORS = {"ValueError": ValueError, "TypeError": TypeError}


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return case


def _args(args: dict[str, Any]) -> dict[str, Any]:
    return {
        name: int(value) if name.endswith("_ns") and isinstance(value, str) else value
        for name, value in args.items()
    }


def _ns(value: int | None) -> str | None:
    return None if value is None else str(value)


def _row(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = row.to_dict()
    for name in ("registered_at_ns", "last_heartbeat_ns", "last_progress_ns"):
        out[name] = _ns(out[name])
    return out


def _reply(op: str, result: Any) -> Any:
    """A registry's answer in the cases' neutral form."""
    if op == "snapshot":
        return [_row(row) for row in result]
    if op in ("count_active_by_group", "expected"):
        return [[q, g, n] for (q, g), n in sorted(result.items())]
    if op == "groups":
        return [group.to_dict() for group in result]
    if isinstance(result, BeatReply):
        return result._asdict()
    return list(result) if isinstance(result, tuple) else result


def _subset(expected: Any, actual: Any) -> Any:
    """`actual` restricted to the fields `expected` names, row by row (rows are compared
    whole in count and order, each on the fields the case gives)."""
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [_subset(e, a) for e, a in zip(expected, actual, strict=True)]
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {k: actual.get(k, "<missing>") for k in expected}
    return actual


def raw_call(registry: Any, op: str, args: dict[str, Any]) -> Any:
    """Run one operation of a case on `registry` and return its answer."""
    kwargs = _args(args)
    if op == "len":
        return len(registry)
    if op == "heartbeat_many":
        # A beat is a [queue, group, consumer, lease_count] list or an object of BeatSpec's
        # fields (capacity, draining).
        beats = [
            BeatSpec(**beat) if isinstance(beat, dict) else tuple(beat)
            for beat in kwargs.pop("beats")
        ]
        return registry.heartbeat_many(beats, **kwargs)
    return getattr(registry, op)(**kwargs)


def call(registry: Any, op: str, args: dict[str, Any]) -> Any:
    """Run one operation of a case on `registry` and return its neutral reply."""
    return _reply(op, raw_call(registry, op, args))


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    return value


def store(client: Any, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` in the cases' neutral form (index marks, which only a
    cluster keeps, left out)."""
    from backends import all_keys

    out: dict[str, Any] = {}
    for raw in all_keys(client):
        key = _text(raw)
        if not key.startswith(prefix + ":") or key.endswith(":ix"):
            continue
        kind = _text(client.type(raw))
        if kind == "zset":
            value: Any = [
                [_text(m), str(int(s))] for m, s in client.zrange(raw, 0, -1, withscores=True)
            ]
        elif kind == "hash":
            value = {_text(k): _text(v) for k, v in sorted(client.hgetall(raw).items())}
        elif kind == "stream":
            value = [
                {_text(k): _text(v) for k, v in fields.items()} for _, fields in client.xrange(raw)
            ]
        elif kind == "set":
            value = sorted(_text(m) for m in client.smembers(raw))
        else:
            value = _text(client.get(raw))
        out[key] = {"type": kind, "value": value}
    return out


FLEET_INDEXES = ("newest", "oldest", "ttls")
"""`P:newest`, `P:oldest` and `P:ttls`, which only a standalone server keeps: a `store` step on a
cluster leaves them out."""


def _is_cluster(client: Any) -> bool:
    """Whether `client`, a case's store, is a Redis Cluster."""
    return isinstance(client, redis.cluster.RedisCluster)


def _expected_store(keys: dict[str, Any]) -> dict[str, Any]:
    """The case's key contents (a key given as null: absent), where a zset given by
    ``members`` is compared on its sorted members only (scores that are a server clock) and
    a key given as ``present`` on its type only (a value no client can predict)."""
    out: dict[str, Any] = {}
    for key, spec in keys.items():
        if spec is None:
            out[key] = None
        elif "members" in spec:
            out[key] = {"type": spec["type"], "value": sorted(spec["members"])}
        elif spec.get("present"):
            out[key] = {"type": spec["type"], "present": True}
        else:
            out[key] = {"type": spec["type"], "value": spec["value"]}
    return out


def _actual_store(keys: dict[str, Any], found: dict[str, Any], partial: bool) -> dict[str, Any]:
    """What the store holds, in the form of `_expected_store`: every key under the prefix,
    or (`partial`) only the keys the case names."""
    out: dict[str, Any] = {}
    names = keys if partial else found.keys() | keys.keys()
    for key in names:
        have = found.get(key)
        spec = keys.get(key) or {}
        if have is not None and "members" in spec and have["type"] == "zset":
            have = {"type": "zset", "value": sorted(m for m, _ in have["value"])}
        elif have is not None and spec.get("present"):
            have = {"type": have["type"], "present": True}
        out[key] = have
    return out


def run(
    case: dict[str, Any],
    registry: Any,
    client: Any | None,
    other: Callable[[str], Any] | None = None,
) -> None:
    """Every step of `case`, in order, on `registry` (and `client`, its store, or None); a
    step that fails is an `AssertionError` that starts with the case's name and the step.
    A step naming an ``instance`` other than the case's runs on ``other(instance)``, a
    registry of the same store whose beats carry that token (a case with such steps needs
    a store: two processes never share an in-process registry)."""
    prefix = case.get("prefix", "presence")
    registries = {case.get("instance"): registry}
    for number, step in enumerate(case["steps"], 1):
        where = f"{case['name']} step {number} ({step['op']})"
        token = step.get("instance", case.get("instance"))
        if token not in registries:
            assert other is not None, f"{where}: no registry of instance {token!r}"
            registries[token] = other(token)
        try:
            _step(step, where, prefix, registries[token], client)
        except AssertionError as failed:
            if str(failed).startswith(where):
                raise
            raise AssertionError(f"{where}: {failed}") from failed
        except (Exception, pytest.fail.Exception) as error:
            raise AssertionError(f"{where}: {error!r}") from error


def _step(step: dict[str, Any], where: str, prefix: str, registry: Any, client: Any) -> None:
    """One step of a case (`run`)."""
    op = step["op"]
    if op in ("store", "redis"):
        if client is None:
            return
        if op == "redis":
            for command in step["commands"]:
                client.execute_command(*command)
            return
        found = store(client, prefix)
        keys = step["keys"]
        if _is_cluster(client):
            # Nobody keeps the fleet indexes on a cluster (docs/protocol.md, section 2): they
            # are left out there, as index marks are on a standalone server.
            fleet = {f"{prefix}:{index}" for index in FLEET_INDEXES}
            keys = {k: v for k, v in keys.items() if k not in fleet}
            found = {k: v for k, v in found.items() if k not in fleet}
        actual = _actual_store(keys, found, bool(step.get("partial")))
        expected = _expected_store(keys)
        differ = {k: (actual.get(k), expected.get(k)) for k in actual | expected}
        differ = {k: pair for k, pair in differ.items() if pair[0] != pair[1]}
        assert not differ, f"{where}: (found, expected) {differ}"
        return
    args = step.get("args", {})
    if "error" in step:
        # The package's errors, or an argument refused (ValueError, TypeError) whose
        # message starts with the argument's name.
        error = (
            getattr(redis_presence.errors, step["error"], None) or ARGUMENT_ERRORS[step["error"]]
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(error) as raised:
                call(registry, op, args)
        if "argument" in step:
            assert str(raised.value).startswith(step["argument"]), (where, raised.value)
        if "completed" in step:
            assert raised.value.completed == step["completed"], (where, raised.value)
        if "refused" in step:
            refused = sorted(list(r) for r in raised.value.refused)
            assert refused == sorted(step["refused"]), (where, refused)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reply_of = raw_call(registry, op, args)
    reply = _reply(op, reply_of)
    if "reply" in step:
        assert _subset(step["reply"], reply) == step["reply"], where
    if "drain_requested" in step:
        # heartbeat_many: the beats whose consumer has a drain request after the call.
        drains = sorted(list(d) for d in reply_of.drain_requested)
        assert drains == sorted(step["drain_requested"]), (where, drains)
    # The keys set aside, in the order the read warns about them (docs/protocol.md,
    # section 9), once each.
    messages = [str(w.message) for w in caught]
    skipped = step.get("skipped", [])
    named = [key for message in messages for key in skipped if f" {key}: " in message]
    assert (len(messages), named) == (len(skipped), skipped), (where, messages)
    if skipped and hasattr(reply_of, "skipped"):
        # One key a group: a group whose consumers were set aside one by one lists each.
        keys = list(dict.fromkeys(s.key for s in reply_of.skipped))
        assert keys == skipped, where
