"""Generate the asyncio operations and the `PresenceRegistry` protocol from `operations`.

``python -m tools.codegen``, from the repository's root, writes
`redis_presence/aio_operations.py` and `redis_presence/contract.py` from
`redis_presence/operations.py`; ``--check`` only says whether they are current (exit 1 when
not), as the test suite does. Both are ordinary modules in the repository (so type checkers
and readers see them); this generator is the only writer, and a development tool: the wheel
does not ship it. It needs ruff (the ``test`` extra), which sorts the imports and formats
the result.

The async form is the sync one with, method by method: ``def`` -> ``async def`` (except a
method that returns an iterator without yielding, as `iter_snapshot` returns
``self.stream(...)``: it stays a plain method returning an async iterator), ``await``
before each call of ``self.execute`` and of another method made a coroutine,
``time.sleep`` -> ``asyncio.sleep``, ``Iterator`` -> ``AsyncIterator``; dunder methods
are left out (``len()`` cannot be awaited: ``size()`` is the asyncio spelling). The
protocol is `ContractOperations`' public methods with their signatures and docstrings.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "redis_presence"
SOURCE = PACKAGE / "operations.py"
ASYNC_TARGET = PACKAGE / "aio_operations.py"
PROTOCOL_TARGET = PACKAGE / "contract.py"

SOURCE_CLASSES = ("ContractOperations", "Operations")
RUNNERS = ("execute", "stream")
"""Methods of `ContractOperations` that a registry implements (its transport): not in the
protocol."""

GENERATED = (
    "# Generated from redis_presence/operations.py by `python -m tools.codegen`:\n"
    "# edit that file and run the generator, not this one.\n"
)

ASYNC_DOC = '''"""The registries' operations as coroutines, for `AsyncRedisPresenceRegistry`.

`AsyncContractOperations` and `AsyncOperations` are `redis_presence.operations`'s
`ContractOperations` and `Operations` with coroutine methods: the same plans, run by the
asyncio registry's ``execute``. ``len()`` cannot be awaited: ``await registry.size()``.
"""
'''

PROTOCOL_DOC = '''"""`PresenceRegistry`: the methods every synchronous registry offers.

Type against it to accept `RedisPresenceRegistry` and `ConsumerPresenceRegistry` alike
(the CLI, the demo brokers and the test suite do); it is `runtime_checkable`, so
`isinstance` checks that the methods exist (not their signatures). Its signatures are
`redis_presence.operations.ContractOperations`', so the two cannot drift apart.
"""
'''


PROTOCOL_CLASS_DOC = (
    '    """Heartbeat, snapshot (whole or streamed), counts, prune and deregister, the shared\n'
    "    TTL and the events, metadata, the progress budget and declared groups, with the\n"
    "    contract's signatures; `queue` / `group` filter a read to one queue or one group,\n"
    '    and `ttl_ms` None is the shared TTL."""\n'
)


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self._line_starts = [0]
        for line in text.splitlines(keepends=True):
            self._line_starts.append(self._line_starts[-1] + len(line))

    def offset(self, line: int, column: int) -> int:
        """The character offset of an ast position (1-based line, UTF-8 column)."""
        start = self._line_starts[line - 1]
        encoded = self.text[start : self._line_starts[line]].encode()
        return start + len(encoded[:column].decode())

    def classes(self) -> list[ast.ClassDef]:
        found = {
            node.name: node
            for node in self.tree.body
            if isinstance(node, ast.ClassDef) and node.name in SOURCE_CLASSES
        }
        missing = [name for name in SOURCE_CLASSES if name not in found]
        if missing:
            raise SystemExit(f"{SOURCE.name} has no class {', '.join(missing)}")
        return [found[name] for name in SOURCE_CLASSES]

    def methods(self, cls: ast.ClassDef) -> list[ast.FunctionDef]:
        methods = []
        for node in cls.body:
            if isinstance(node, ast.AsyncFunctionDef):
                raise SystemExit(f"{SOURCE.name}: {node.name} is async: write the sync form")
            if isinstance(node, ast.FunctionDef):
                methods.append(node)
        return methods

    def lines_of(self, node: ast.FunctionDef) -> tuple[int, int]:
        """The offsets of a method's whole lines, its decorators and one blank line before."""
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        start = self._line_starts[first - 1]
        end = self._line_starts[node.end_lineno or node.lineno]
        if self.text[start - 2 : start] == "\n\n":
            start -= 1
        return start, end


def _yields(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Yield | ast.YieldFrom) for n in ast.walk(node))


def _stays_sync(node: ast.FunctionDef) -> bool:
    """A method that hands back an iterator without yielding itself (``self.stream(...)``)."""
    returns = node.returns
    annotation = returns.value if isinstance(returns, ast.Subscript) else returns
    return isinstance(annotation, ast.Name) and annotation.id == "Iterator" and not _yields(node)


def asynchronous(text: str) -> str:
    """The asyncio module for a sync `operations` source (before import sorting/formatting)."""
    source = _Source(text)
    edits: list[_Edit] = []
    methods = [m for cls in source.classes() for m in source.methods(cls)]
    coroutines = {m.name for m in methods if not m.name.startswith("__") and not _stays_sync(m)}
    for method in methods:
        if method.name.startswith("__"):
            start, end = source.lines_of(method)
            edits.append(_Edit(start, end, ""))
            continue
        if method.name in coroutines:
            at = source.offset(method.lineno, method.col_offset)
            edits.append(_Edit(at, at, "async "))
        for node in ast.walk(method):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner, name = node.func.value, node.func.attr
            if not isinstance(owner, ast.Name):
                continue
            at = source.offset(node.lineno, node.col_offset)
            if owner.id == "self" and name in coroutines:
                edits.append(_Edit(at, at, "await "))
            elif owner.id == "time" and name == "sleep":
                end = source.offset(
                    node.func.end_lineno or node.lineno, node.func.end_col_offset or 0
                )
                edits.append(_Edit(at, end, "await asyncio.sleep"))
    docstring = source.tree.body[0]
    if not (isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)):
        raise SystemExit(f"{SOURCE.name} has no module docstring")
    end = source.offset(docstring.end_lineno or 1, docstring.end_col_offset or 0) + 1
    edits.append(_Edit(0, end, "\0MODULE-DOCSTRING\0"))
    result = text
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        result = result[: edit.start] + edit.text + result[edit.end :]
    result = re.sub(r"^import time$", "import asyncio", result, flags=re.MULTILINE)
    result = re.sub(r"\bIterator\b", "AsyncIterator", result)
    result = re.sub(r"  # noqa: UP028[^\n]*", "", result)  # an async for cannot yield from
    for name in SOURCE_CLASSES:
        result = re.sub(rf"\b{name}\b", f"Async{name}", result)
    return result.replace("\0MODULE-DOCSTRING\0", GENERATED + ASYNC_DOC)


def protocol(text: str) -> str:
    """The `PresenceRegistry` module for a sync `operations` source (before formatting)."""
    source = _Source(text)
    contract = source.classes()[0]
    imports = "".join(
        ast.get_source_segment(text, node) + "\n"  # type: ignore[operator]
        for node in source.tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
    )
    parts = [
        GENERATED,
        PROTOCOL_DOC,
        "\n",
        imports,
        "from typing import Protocol, runtime_checkable\n\n",
        '__all__ = ["PresenceRegistry"]\n\n\n',
        "@runtime_checkable\nclass PresenceRegistry(Protocol):\n",
    ]
    parts.append(PROTOCOL_CLASS_DOC)
    lines = text.splitlines(keepends=True)
    for method in source.methods(contract):
        if method.name in RUNNERS:
            continue
        first = method.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        signature = "".join(lines[method.lineno - 1 : first.lineno - 1])
        # (a body never shares a line with its signature in this source)
        body = "".join(lines[first.lineno - 1 : first.end_lineno]) if has_doc else "        ...\n"
        parts.append("\n" + signature + body)
    return "".join(parts)


def _ruff(text: str, target: Path) -> str:
    """`text` with its imports sorted, unused ones removed, and formatted, as ruff does."""
    name = f"{PACKAGE.name}/{target.name}"  # ruff's settings for the package's files
    for args in (
        ["check", "--fix", "--quiet", "--select", "I,F401", "--exit-zero"],
        ["format", "--quiet"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args, "--stdin-filename", name, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            cwd=PACKAGE.parent,
        )
        if done.returncode != 0:
            raise SystemExit(f"ruff {args[0]} failed on {name}: {done.stderr.strip()}")
        text = done.stdout
    return text


def generated() -> dict[Path, str]:
    """What each generated module must hold, from the current `operations` source."""
    text = SOURCE.read_text(encoding="utf-8")
    return {
        ASYNC_TARGET: _ruff(asynchronous(text), ASYNC_TARGET),
        PROTOCOL_TARGET: _ruff(protocol(text), PROTOCOL_TARGET),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = args == ["--check"]
    if args and not check:
        print("usage: python -m tools.codegen [--check]", file=sys.stderr)
        return 2
    stale = []
    for target, text in generated().items():
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == text:
            continue
        stale.append(target.name)
        if not check:
            target.write_text(text, encoding="utf-8")
    if check and stale:
        print(
            f"{', '.join(stale)} behind operations.py: run python -m tools.codegen",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
