"""The package's import arrows point one way.

Read from the source with `ast`, not by importing. The rules:

- no module under `redis_presence/web/` imports `redis_presence.cli` (anywhere in the module);
- no module outside `redis_presence/cli/` imports `redis_presence.cli` (anywhere in the module);
- no import cycle among the package's modules at module level. Module level means the
  statements run on import: top-level imports, including those under `try`/`if` at the top
  level, but not imports under `if TYPE_CHECKING:` (never run) nor imports inside a function
  or method body (run on call, after every module has loaded: the lazy imports that keep
  `redis-presence --help` fast). A second test holds the stricter rule: no cycle even
  counting the imports inside functions (still not those under `TYPE_CHECKING`);
- no module of the package is over `MAX_MODULE_LINES` lines (a longer one is split by job,
  as `urls.py` was into `url_parsing`, `redaction` and `clients`).

`from . import x` and `from pkg import x` count as an arrow to `pkg.x` when `pkg.x` is a
module of the package, else to `pkg`. An arrow to a package also runs its `__init__`, so it
counts as an arrow to that `__init__` module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import redis_presence

ROOT = Path(redis_presence.__file__).parent
PACKAGE = "redis_presence"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(name: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The package modules `node`, in module `name`, imports."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            base = name.split(".") if is_package(name) else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        targets = []
        for alias in node.names:
            child = f"{source}.{alias.name}"
            targets.append(child if child in MODULES else source)
    for target in targets:
        module = target
        while module and module not in MODULES:  # `import a.b.c` of a name, not a module
            module = module.rpartition(".")[0]
        if module.startswith(PACKAGE):
            yield module


def walk(nodes: list[ast.stmt], top: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import under `nodes`, with whether it runs when the module loads."""
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, top
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from walk(node.body, False)
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            yield from walk(node.body, False)
            yield from walk(node.orelse, top)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    stmts = [c for c in children if isinstance(c, ast.stmt)]
                    yield from walk(stmts, top)
                    for child in children:
                        if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                            yield from walk(child.body, top)


def arrows(load_time_only: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node, top in walk(tree.body, True):
            if top or not load_time_only:
                targets.update(imported(name, node))
        targets.discard(name)
        graph[name] = targets
    return graph


def inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_web_layer_does_not_import_the_cli() -> None:
    upward = {
        (name, target)
        for name, targets in arrows(load_time_only=False).items()
        if inside(name, f"{PACKAGE}.web")
        for target in targets
        if inside(target, f"{PACKAGE}.cli")
    }
    assert upward == set()


def test_only_the_cli_imports_the_cli() -> None:
    upward = {
        (name, target)
        for name, targets in arrows(load_time_only=False).items()
        if not inside(name, f"{PACKAGE}.cli")
        for target in targets
        if inside(target, f"{PACKAGE}.cli")
    }
    assert upward == set()


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
    assert cycles(arrows(load_time_only=True)) == []


def test_no_import_cycle_even_through_lazy_imports() -> None:
    """Stricter than the rule: a function-level import that closes a circle (as
    `cli/options.py` importing `cli/app.py`, which imports it) is a circle too."""
    assert cycles(arrows(load_time_only=False)) == []


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
        f"{MODULES[name].relative_to(ROOT.parent)} ({name}) is {length} lines, over "
        f"{MAX_MODULE_LINES}: split it by job"
        for name, length in sorted(too_long.items())
    )


def test_the_length_check_finds_a_long_module(tmp_path: Path) -> None:
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    assert long_modules({"short": short, "long": long}) == {"long": MAX_MODULE_LINES + 1}
