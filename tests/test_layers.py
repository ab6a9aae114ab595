"""The import arrows point one way, and every Python file keeps the house rules.

Read from the source with `ast`, not by importing. The rules:

- no module under `redis_presence/web/` imports `redis_presence.cli` (anywhere in the module);
- no module outside `redis_presence/cli/` imports `redis_presence.cli` (anywhere in the module);
- what the design rests on stays free of I/O: nothing under `redis_presence/plans/`, nor
  `redis_presence/model.py` or `redis_presence/keys.py`, imports a driver, a socket, asyncio,
  threads, processes or a web or CLI framework (`FORBIDDEN_IN_PURE`), directly or through a
  module of the package that does (at load time or inside a function; imports under
  `if TYPE_CHECKING:` never run and do not count);
- no import cycle, at module level, among the modules of every Python tree of the
  repository: the package, `tests/`, `benchmarks/`, `tools/` and the docs site's hooks
  (`TREES`). Module level means the statements run on import: top-level imports, including
  those under `try`/`if` at the top level, but not imports under `if TYPE_CHECKING:` (never
  run) nor imports inside a function or method body (run on call, after every module has
  loaded: the lazy imports that keep `redis-presence --help` fast). A second test holds the
  stricter rule: no cycle even counting every import, those inside functions and those under
  `TYPE_CHECKING` (types that need each other are a circle too);
- no module of any of those trees is over `MAX_MODULE_LINES` lines (a longer one is split by
  job, as `urls.py` was into `url_parsing`, `redaction` and `clients`).

`from . import x` and `from pkg import x` count as an arrow to `pkg.x` when `pkg.x` is a
module of the trees, else to `pkg`. An arrow to a package also runs its `__init__`, so it
counts as an arrow to that `__init__` module. A module is named as the code that runs it
imports it: the package and `benchmarks`/`tools` from the repository's root, a test module
from `tests/` (pytest puts that folder on the path: `servers`, `integrations.workers`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator, Mapping
from enum import Enum
from pathlib import Path

import redis_presence

ROOT = Path(redis_presence.__file__).parent
PACKAGE = "redis_presence"
REPO = Path(__file__).resolve().parent.parent


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


TREES: tuple[tuple[Path, Iterable[Path]], ...] = (
    (ROOT.parent, ROOT.rglob("*.py")),
    (REPO, (REPO / "benchmarks").rglob("*.py")),
    (REPO, (REPO / "tools").rglob("*.py")),
    (REPO / "tests", (REPO / "tests").rglob("*.py")),
    (REPO / "docs" / "_hooks", (REPO / "docs" / "_hooks").glob("*.py")),
    (REPO / "docs", (REPO / "docs").glob("*.py")),
)
"""Every Python tree of the repository: (the folder its modules are imported from, its files)."""


def all_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for base, paths in TREES:
        for path in sorted(paths):
            name = module_name(path, base)
            assert name not in modules, f"{path} and {modules[name]} are both module {name}"
            modules[name] = path
    return modules


MODULES = all_modules()


def shown(path: Path) -> str:
    """`path` as the repository names it."""
    for base in (REPO, ROOT.parent):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class Runs(Enum):
    """When an import statement runs."""

    ON_LOAD = "when the module loads"
    ON_CALL = "when the function around it is called"
    NEVER = "never: under `if TYPE_CHECKING:`"


def source(name: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names `node`, in module `name`, imports: for ``from m import a`` both
    ``m.a`` (a module, if it is one) and ``m``; relative names made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if is_package(name) else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    return [f"{origin}.{alias.name}" for alias in node.names]


def imported(name: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules of the trees `node`, in module `name`, imports."""
    for target in source(name, node):
        module = target
        while module and module not in MODULES:  # `import a.b.c` or `from a.b import name`
            module = module.rpartition(".")[0]
        if module:
            yield module


def outside(name: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules `node`, in module `name`, imports from outside the trees (the standard
    library and the dependencies), as written: ``redis``, ``redis.asyncio``."""
    if isinstance(node, ast.ImportFrom) and node.level:
        return
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        names = [node.module or ""]
    for target in names:
        module = target
        while module and module not in MODULES:
            module = module.rpartition(".")[0]
        if not module:
            yield target


def walk(nodes: list[ast.stmt], runs: Runs) -> Iterator[tuple[ast.Import | ast.ImportFrom, Runs]]:
    """Every import under `nodes`, with when it runs."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, runs
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from walk(node.body, Runs.NEVER if runs is Runs.NEVER else Runs.ON_CALL)
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            yield from walk(node.body, Runs.NEVER)
            yield from walk(node.orelse, runs)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    stmts = [c for c in children if isinstance(c, ast.stmt)]
                    yield from walk(stmts, runs)
                    for child in children:
                        if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                            yield from walk(child.body, runs)


@functools.cache
def imports(name: str) -> list[tuple[ast.Import | ast.ImportFrom, Runs]]:
    """Every import statement of module `name`, with when it runs."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    return list(walk(tree.body, Runs.ON_LOAD))


def arrows(counted: frozenset[Runs]) -> dict[str, set[str]]:
    """module -> the modules of the trees it imports, by the imports that run when `counted`."""
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        targets: set[str] = set()
        for node, runs in imports(name):
            if runs in counted:
                targets.update(imported(name, node))
        targets.discard(name)
        graph[name] = targets
    return graph


ON_LOAD = frozenset({Runs.ON_LOAD})
RUN = frozenset({Runs.ON_LOAD, Runs.ON_CALL})
ANY = frozenset(Runs)


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_web_layer_does_not_import_the_cli() -> None:
    upward = {
        (name, target)
        for name, targets in arrows(ANY).items()
        if inside(name, f"{PACKAGE}.web")
        for target in targets
        if inside(target, f"{PACKAGE}.cli")
    }
    assert upward == set()


def test_only_the_cli_imports_the_cli() -> None:
    upward = {
        (name, target)
        for name, targets in arrows(ANY).items()
        if inside(name, PACKAGE) and not inside(name, f"{PACKAGE}.cli")
        for target in targets
        if inside(target, f"{PACKAGE}.cli")
    }
    assert upward == set()


PURE = (f"{PACKAGE}.plans", f"{PACKAGE}.model", f"{PACKAGE}.keys")
"""What the design rests on: the plans, the model and the key layout, free of I/O."""

FORBIDDEN_IN_PURE = frozenset(
    {
        # drivers
        "redis",
        "hiredis",
        "fakeredis",
        "valkey",
        # the network, and waiting on it
        "socket",
        "ssl",
        "select",
        "selectors",
        "http",
        "urllib.request",
        # concurrency and processes
        "asyncio",
        "anyio",
        "threading",
        "_thread",
        "concurrent",
        "multiprocessing",
        "subprocess",
        "signal",
        # the web service and the command line
        "starlette",
        "uvicorn",
        "sse_starlette",
        "httpx",
        "jinja2",
        "prometheus_client",
        "click",
        "rich",
        # the frameworks of the integrations
        "celery",
        "kombu",
        "dramatiq",
        "rq",
        "huey",
        "taskiq",
        "taskiq_redis",
        "faststream",
        "gevent",
    }
)
"""Modules (and their submodules) the pure modules may not import, even indirectly."""

KNOWN_IMPURE = {(f"{PACKAGE}.errors", "redis")}
"""(module of the package, what it imports) pairs the pure modules still reach, each to go:
`errors.py` holds the exception classes every plan raises and also `translate`, which maps
redis-py's exceptions (it imports `redis.exceptions`). Moving that mapping beside the shared
executor (issue 31, items 1 and 5: `_executor.py` imports `translate` from `errors`) empties
this set; the test fails while an entry here is no longer needed."""


def forbidden(module: str, banned: frozenset[str]) -> bool:
    return any(inside(module, name) for name in banned)


def impure(
    roots: Iterable[str],
    graph: Mapping[str, set[str]],
    outer: Mapping[str, set[str]],
    banned: frozenset[str],
) -> dict[tuple[str, str], list[str]]:
    """(culprit, banned import) -> the chain of imports from one of `roots` to the culprit
    that imports it: `graph` is module -> modules of the trees it imports, `outer` module ->
    what it imports from outside them."""
    found: dict[tuple[str, str], list[str]] = {}
    chains = {root: [root] for root in sorted(roots)}
    queue = list(chains)
    while queue:
        name = queue.pop(0)
        for target in sorted(outer.get(name, ())):
            if forbidden(target, banned):
                found.setdefault((name, target), chains[name])
        for target in sorted(graph.get(name, ())):
            if target not in chains:
                chains[target] = [*chains[name], target]
                queue.append(target)
    return found


def outer_imports(counted: frozenset[Runs]) -> dict[str, set[str]]:
    """module -> what it imports from outside the trees, by the imports that run when `counted`."""
    return {
        name: {
            target
            for node, runs in imports(name)
            if runs in counted
            for target in outside(name, node)
        }
        for name in MODULES
    }


def test_the_plans_the_model_and_the_keys_import_no_io() -> None:
    roots = [name for name in MODULES if any(inside(name, pure) for pure in PURE)]
    assert f"{PACKAGE}.plans.reads" in roots
    found = impure(roots, arrows(RUN), outer_imports(RUN), FORBIDDEN_IN_PURE)
    new = {key: chain for key, chain in found.items() if key not in KNOWN_IMPURE}
    assert new == {}, "; ".join(
        f"{' -> '.join(chain)} imports {target}" for (_, target), chain in sorted(new.items())
    )
    assert set(found) >= KNOWN_IMPURE, f"no longer reached, remove: {KNOWN_IMPURE - set(found)}"


def test_the_purity_check_finds_a_banned_import_through_the_package() -> None:
    graph = {"p": {"q"}, "q": {"r"}, "r": set(), "s": set()}
    outer = {"p": {"json"}, "r": {"redis.asyncio"}, "s": {"socket"}}
    banned = frozenset({"redis", "socket"})
    assert impure(["p"], graph, outer, banned) == {("r", "redis.asyncio"): ["p", "q", "r"]}
    assert impure(["s"], graph, outer, banned) == {("s", "socket"): ["s"]}
    assert impure(["q"], graph, {"r": {"redisx"}}, banned) == {}  # a name, not a prefix


def test_imports_are_told_by_when_they_run() -> None:
    code = (
        "import a\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import b\n"
        "def f():\n"
        "    import c\n"
        "try:\n"
        "    import d\n"
        "except ImportError:\n"
        "    import e\n"
    )
    found = {
        alias.name: runs
        for node, runs in walk(ast.parse(code).body, Runs.ON_LOAD)
        for alias in node.names
        if alias.name != "TYPE_CHECKING"
    }
    assert found == {
        "a": Runs.ON_LOAD,
        "b": Runs.NEVER,
        "c": Runs.ON_CALL,
        "d": Runs.ON_LOAD,
        "e": Runs.ON_LOAD,
    }


def test_every_tree_is_read() -> None:
    for name in (
        PACKAGE,
        f"{PACKAGE}.plans.reads",
        "benchmarks.cases",
        "tools.codegen",
        "servers",
        "conftest",
        "integrations.workers",
        "hooks",
    ):
        assert name in MODULES, name
    assert "redis" not in MODULES


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_at_module_level() -> None:
    assert cycles(arrows(ON_LOAD)) == []


def test_no_import_cycle_even_through_lazy_imports() -> None:
    """Stricter than the rule: a function-level import that closes a circle (as
    `cli/options.py` importing `cli/app.py`, which imports it) is a circle too, and so is one
    closed under `TYPE_CHECKING` (as `benchmarks/startup.py` naming `cases.Sizes` was)."""
    assert cycles(arrows(ANY)) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


MAX_MODULE_LINES = 800


def long_modules(modules: dict[str, Path]) -> dict[str, int]:
    """The modules of `modules` over `MAX_MODULE_LINES` lines, with their lengths."""
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()
    }
    return {name: length for name, length in lengths.items() if length > MAX_MODULE_LINES}


def test_no_module_is_over_800_lines() -> None:
    too_long = long_modules(MODULES)
    assert too_long == {}, "; ".join(
        f"{shown(MODULES[name])} ({name}) is {length} lines, over "
        f"{MAX_MODULE_LINES}: split it by job"
        for name, length in sorted(too_long.items())
    )


def test_the_length_check_finds_a_long_module(tmp_path: Path) -> None:
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    assert long_modules({"short": short, "long": long}) == {"long": MAX_MODULE_LINES + 1}
