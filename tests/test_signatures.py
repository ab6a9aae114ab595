"""Each operation's signature, held in agreement wherever it is written.

An operation's parameters are written by hand in its plan (`redis_presence.plans`), in
`redis_presence.operations` (`ContractOperations`, `Operations`), in the in-process model
(`ConsumerPresenceRegistry`) and in the Node client (``clients/node``); the asyncio form and
the `PresenceRegistry` protocol are generated (tests/test_codegen.py). These tests fail when
they disagree:

- `ContractOperations` and `ConsumerPresenceRegistry`: the same parameters (names, order, kinds,
  defaults, types) and the same return type, operation by operation;
- an operation and the plan it runs (found in its body: ``self.plans.<plan>(...)``): the
  same parameters;
- the Node client: each operation is listed in `NODE` with its method there and where each
  parameter went (or None: not offered, and why), and what is listed is what
  ``clients/node/src/registry.ts`` declares.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import redis_presence
from redis_presence.memory import ConsumerPresenceRegistry
from redis_presence.operations import ContractOperations, Operations
from redis_presence.plans import Planner

ROOT = Path(redis_presence.__file__).parent
NODE_REGISTRY = ROOT.parent / "clients" / "node" / "src" / "registry.ts"
RUNNERS = ("execute", "stream")  # a registry's transport, not an operation

COMPOSED = {
    "follow": "a loop over changes(), snapshot_cursor() and vanished_groups(), whose "
    "parameters are its own (interval_s, the cursor's kind)",
}
"""Operations that run more than one plan, so have no one plan to agree with."""

Parameter = tuple[str, str, object, object]


def parameters(function: Callable[..., Any]) -> list[Parameter]:
    """A callable's parameters after ``self``: name, kind, default and type (evaluated)."""
    found = inspect.signature(function, eval_str=True).parameters.values()
    return [(p.name, p.kind.name, p.default, p.annotation) for p in found if p.name != "self"]


def returns(function: Callable[..., Any]) -> object:
    return inspect.signature(function, eval_str=True).return_annotation


def disagreements(a: list[Parameter], b: list[Parameter]) -> list[str]:
    """How two parameter lists differ, position by position ([]: they agree)."""
    out = [f"{len(a)} parameters against {len(b)}"] if len(a) != len(b) else []
    fields = ("name", "kind", "default", "type")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        out += [
            f"parameter {i + 1} ({x[0]}): {field} {x[j]!r} against {y[j]!r}"
            for j, field in enumerate(fields)
            if x[j] != y[j]
        ]
    return out


def operations(cls: type) -> dict[str, Callable[..., Any]]:
    """The public operations a class of `redis_presence.operations` defines itself."""
    return {
        name: value
        for name, value in vars(cls).items()
        if inspect.isfunction(value) and not name.startswith("_") and name not in RUNNERS
    }


CONTRACT = operations(ContractOperations)
REDIS_ONLY = operations(Operations)


def plans_run() -> dict[str, set[str]]:
    """The plans each operation's body runs (``self.plans.<plan>(...)``)."""
    tree = ast.parse((ROOT / "operations.py").read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            for method in cls.body:
                if isinstance(method, ast.FunctionDef):
                    found[method.name] = {
                        node.func.attr
                        for node in ast.walk(method)
                        if isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Attribute)
                        and node.func.value.attr == "plans"
                    }
    return found


def test_the_comparison_finds_a_difference() -> None:
    def one(queue: str, ttl_ms: int | None = None) -> None: ...

    def other(queue: str, ttl_ms: int | None = 5) -> None: ...

    def third(queue: str, *, ttl_ms: int | None = None) -> None: ...

    assert disagreements(parameters(one), parameters(one)) == []
    assert disagreements(parameters(one), parameters(other)) == [
        "parameter 2 (ttl_ms): default None against 5"
    ]
    assert disagreements(parameters(one), parameters(third)) == [
        "parameter 2 (ttl_ms): kind 'POSITIONAL_OR_KEYWORD' against 'KEYWORD_ONLY'"
    ]


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_the_model_has_the_contracts_signature(name: str) -> None:
    model = getattr(ConsumerPresenceRegistry, name, None)
    assert model is not None, f"ConsumerPresenceRegistry has no {name}"
    contract = CONTRACT[name]
    assert disagreements(parameters(contract), parameters(model)) == []
    assert returns(model) == returns(contract)


@pytest.mark.parametrize("name", sorted({*CONTRACT, *REDIS_ONLY}))
def test_an_operation_takes_what_its_plan_takes(name: str) -> None:
    operation = CONTRACT.get(name) or REDIS_ONLY[name]
    run = plans_run()[name]
    if name in COMPOSED:
        assert len(run) > 1, f"{name} runs one plan now: take it out of COMPOSED"
        return
    assert len(run) == 1, f"{name} runs {sorted(run) or 'no plan'}: list it in COMPOSED"
    (plan,) = run
    assert disagreements(parameters(operation), parameters(getattr(Planner(), plan))) == []


# -- the Node client ----------------------------------------------------------------------

NODE: dict[str, tuple[str, dict[str, str | None]] | str] = {
    "heartbeat": (
        "heartbeat",
        {
            "queue": "queue",
            "group": "group",
            "consumer": "consumer",
            "lease_count": "leaseCount",
            "now_ns": "options.nowNs",
            "progressed": None,
            "capacity": "options.capacity",
            "draining": "options.draining",
        },
    ),
    "heartbeat_many": ("heartbeatMany", {"beats": "beats", "now_ns": "options.nowNs"}),
    "request_drain": (
        "requestDrain",
        {"queue": "queue", "group": "group", "consumer": "consumer", "now_ns": "options.nowNs"},
    ),
    "clock_ns": "reads take the server clock inside each read",
    "snapshot": (
        "snapshot",
        {
            "now_ns": "options.nowNs",
            "ttl_ms": "options.ttlMs",
            "queue": "options.queue",
            "group": "options.group",
            "stuck_after_ms": "options.stuckAfterMs",
            "with_meta": "options.withMeta",
        },
    ),
    "iter_snapshot": "no streaming read: snapshot() reads a page of groups a round trip",
    "count_active_by_group": (
        "countActiveByGroup",
        {
            "now_ns": "options.nowNs",
            "ttl_ms": "options.ttlMs",
            "queue": "options.queue",
            "group": "options.group",
        },
    ),
    "count_active": "countActiveByGroup({queue, group}) counts one group",
    "consumer": "no read of one consumer",
    "prune_expired": (
        "pruneExpired",
        {
            "now_ns": "options.nowNs",
            "ttl_ms": "options.ttlMs",
            "queue": "options.queue",
            "group": "options.group",
            "retention_ms": "options.retentionMs",
        },
    ),
    "deregister": (
        "deregister",
        {"queue": "queue", "group": "group", "consumer": "consumer", "now_ns": "options.nowNs"},
    ),
    "describe": (
        "describe",
        {"queue": "queue", "group": "group", "consumer": "consumer", "meta": "meta"},
    ),
    "expect": ("expect", {"queue": "queue", "group": "group", "min_active": "minActive"}),
    "unexpect": ("unexpect", {"queue": "queue", "group": "group"}),
    "expected": ("expected", {}),
    "min_active": "expected() lists every declared group",
    "groups": (
        "groups",
        {
            "now_ns": "options.nowNs",
            "ttl_ms": "options.ttlMs",
            "details": None,
            "capacity": None,
            "departures": None,
        },
    ),
    "group": "groups() reads every group's row; countActiveByGroup({queue, group}) counts one",
    "set_stuck_after": "no progress budget yet (no progress either)",
    "stuck_after": "no progress budget yet (no progress either)",
    "stuck_after_source": "no progress budget yet (no progress either)",
    "set_ttl": (
        "setTtl",
        {"ttl_ms": "ttlMs", "queue": "where.queue", "group": "where.group"},
    ),
    "ttl": "ttlSource() answers the TTL with where it comes from",
    "ttl_source": ("ttlSource", {"queue": "where.queue", "group": "where.group"}),
    "ttl_sources": "no read of many groups' TTLs",
    "changes": (
        "changes",
        {
            "cursor": "options.cursor",
            "now_ns": "options.nowNs",
            "queue": "options.queue",
            "group": "options.group",
            "limit": "options.limit",
        },
    ),
    "follow": (
        "follow",
        {
            "cursor": "options.cursor",
            "interval_s": "options.intervalMs",
            "queue": "options.queue",
            "group": "options.group",
        },
    ),
    "size": ("size", {}),
}
"""Each operation of `ContractOperations`: its method in the Node client, with where each parameter
went (a parameter, or a field of an options parameter; None: not offered), or why the Node
client has none."""


def node_methods(source: str) -> dict[str, str]:
    """The Node registry's methods and the text of their parameter lists."""
    return {
        m["name"]: m["params"]
        for m in re.finditer(
            r"^  async \*?(?P<name>\w+)\((?P<params>.*)\): (?:Promise|AsyncGenerator)", source, re.M
        )
    }


def node_interfaces(source: str) -> dict[str, set[str]]:
    """Each interface's fields, those of the interface it extends included."""
    found: dict[str, tuple[str | None, set[str]]] = {}
    pattern = r"^export interface (\w+)(?: extends (\w+))? \{\n(.*?)^\}"
    for m in re.finditer(pattern, source, re.M | re.S):
        found[m[1]] = (m[2], set(re.findall(r"^\s+(\w+)\??:", m[3], re.M)))

    def fields(name: str) -> set[str]:
        base, own = found[name]
        return own | (fields(base) if base else set())

    return {name: fields(name) for name in found}


def node_parameters(params: str, interfaces: dict[str, set[str]]) -> dict[str, set[str]]:
    """A parameter list's names, each with its fields when it is an options object."""
    parts, depth, current = [], 0, ""
    for char in params:
        depth += char == "{"
        depth -= char == "}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    out: dict[str, set[str]] = {}
    for part in filter(str.strip, parts):
        name, _, rest = part.strip().partition(":")
        name = name.split("=")[0].strip()
        kind = rest.split("=")[0].strip()
        inline = re.fullmatch(r"\{(.*)\}", kind)
        if inline:
            out[name] = set(re.findall(r"(\w+)\??:", inline[1]))
        else:
            out[name] = interfaces.get(kind, set())
    return out


def test_the_node_listing_covers_every_operation_and_parameter() -> None:
    assert set(NODE) == set(CONTRACT)
    for name, listed in NODE.items():
        if isinstance(listed, tuple):
            python = [p[0] for p in parameters(CONTRACT[name])]
            assert list(listed[1]) == python, name


def test_the_node_client_declares_what_is_listed() -> None:
    source = NODE_REGISTRY.read_text(encoding="utf-8")
    # The options of the event reads are declared beside them (src/changes.ts).
    events = (NODE_REGISTRY.parent / "changes.ts").read_text(encoding="utf-8")
    methods, interfaces = node_methods(source), node_interfaces(source + "\n" + events)
    for name, listed in NODE.items():
        if not isinstance(listed, tuple):
            assert listed.strip(), f"{name}: say why the Node client has no such method"
            assert _camel(name) not in methods, f"{name}: the Node client has it now: list it"
            continue
        method, where = listed
        assert method in methods, f"{name}: no {method}() in {NODE_REGISTRY.name}"
        declared = node_parameters(methods[method], interfaces)
        for node in where.values():
            if node is None:
                continue
            parameter, _, field = node.partition(".")
            assert parameter in declared, f"{name}: {method}() has no parameter {parameter}"
            if field:
                assert field in declared[parameter], f"{name}: {method}() {node} is not declared"


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def test_the_node_parser_reads_a_method() -> None:
    source = (
        "export interface A {\n  nowNs?: Ns;\n}\n"
        "export interface B extends A {\n  withMeta?: boolean;\n}\n"
        "  async f(queue: string, n = 0, options: B = {}, where: { queue?: string } = {})"
        ": Promise<void> {\n"
    )
    params = node_methods(source)["f"]
    assert node_parameters(params, node_interfaces(source)) == {
        "queue": set(),
        "n": set(),
        "options": {"nowNs", "withMeta"},
        "where": {"queue"},
    }
