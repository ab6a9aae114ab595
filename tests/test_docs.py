"""The documentation stays true: every ```python block of docs/ and README.md runs against a
real redis-server, and the web routes the site documents are exactly the app's routes.

`mkdocs build --strict` (links, anchors, the generated CLI and API references) runs in
.ci/run. A block runs in a child interpreter of its own, on a flushed server, with every
``redis://`` URL (and ``host=..., port=6379``) pointed at that server, after a prelude that
binds the names a page's prose assumes: ``redis``, the public names of `redis_presence`,
``url``, ``client`` and ``registry``. A top-level line ``expression  # literal`` (a comment
that is a Python literal, as in ``len(registry)  # 2``) is checked: the expression must
equal the literal. A block that cannot run here says why in a
``<!-- no-run: reason -->`` line just before it.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import redis_presence
from redis_presence import TTL_CACHE_MS
from redis_presence.cli import cli
from redis_presence.web import WebConfig, create_app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
BLOCK_TIMEOUT_S = 60

BLOCK = re.compile(
    r"^(?:<!-- no-run: (?P<reason>[^\n]*?) -->\n)?```python\n(?P<code>.*?)^```$",
    re.DOTALL | re.MULTILINE,
)
URL = re.compile(r"redis://(?:[^@/\"'\s]*@)?[^/\"'\s?]+(?P<db>/\d+)?")
HOST_PORT = re.compile(r"host=\"[^\"]*\", port=6379")
SHOWN = re.compile(r"^(?P<expr>\S.*?)  # (?P<value>.+)$")

PRELUDE = """\
import redis
from redis_presence import *
url = {url!r}
client = redis.Redis.from_url(url)
registry = RedisPresenceRegistry(client)
"""


@dataclass
class Example:
    code: str
    where: list[str] = field(default_factory=list)
    skip: str | None = None


def _examples() -> list[Example]:
    """Every distinct python block, with where it appears (README.md repeats the docs)."""
    found: dict[str, Example] = {}
    for path in [*sorted(DOCS.rglob("*.md")), README]:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            code = match.group("code")
            line = text.count("\n", 0, match.start("code")) + 1
            example = found.setdefault(code, Example(code))
            example.where.append(f"{path.relative_to(ROOT)}:{line}")
            reason = match.group("reason")
            if reason is not None:
                example.skip = example.skip or reason
    return list(found.values())


EXAMPLES = _examples()


def _pointed_at(code: str, url: str) -> str:
    """`code` with its Redis URLs and hosts replaced by the test server's."""
    code = URL.sub(lambda m: url + (m.group("db") or ""), code)
    host, port = url.removeprefix("redis://").rsplit(":", 1)
    return HOST_PORT.sub(f'host="{host}", port={port}', code)


def _checked(code: str) -> str:
    """`code` with each top-level ``expression  # literal`` line turned into an assert."""
    lines = []
    for line in code.splitlines():
        match = SHOWN.match(line)
        checked = line
        if match:
            expr, value = match.group("expr"), match.group("value")
            try:
                ast.parse(expr, mode="eval")
                ast.literal_eval(value)
            except (SyntaxError, ValueError):
                pass
            else:
                checked = f"assert ({expr}) == {value}, repr({expr})  # {line!r}"
        lines.append(checked)
    return "\n".join(lines) + "\n"


def test_shown_values_are_checked() -> None:
    code = _checked("len(x)  # 2\ny = 1  # 1\nf()  # not a literal\n    g()  # 3\n")
    assert code.splitlines() == [
        "assert (len(x)) == 2, repr(len(x))  # 'len(x)  # 2'",
        "y = 1  # 1",
        "f()  # not a literal",
        "    g()  # 3",
    ]
    assert sum(" == " in _checked(e.code) for e in EXAMPLES if e.skip is None) >= 3


def test_the_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 10
    in_docs = [e for e in EXAMPLES if any(w.startswith("docs") for w in e.where)]
    assert sum(e.skip is not None for e in in_docs) <= 5, "keep the no-run list short"


@pytest.mark.parametrize(
    "example", [pytest.param(e, id=e.where[0]) for e in EXAMPLES if e.skip is None]
)
def test_example_runs(example: Example, redis_url: str) -> None:
    code = _checked(_pointed_at(example.code, redis_url))
    assert ":6379" not in code, code  # never the machine's own Redis
    assert "port=6379" not in code, code
    script = PRELUDE.format(url=f"{redis_url}/0") + code
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    where = ", ".join(example.where)
    assert done.returncode == 0, f"{where}:\n{textwrap.indent(done.stderr, '  ')}"


# -- the web routes -----------------------------------------------------------------------


def _hooks_module(name: str) -> Any:
    """docs/_hooks/NAME.py, which imports no mkdocs."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / "_hooks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_route_is_documented() -> None:
    """docs/_hooks/openapi.py's ROUTES (the OpenAPI document and the routes table of
    docs/web.md) names exactly the app's routes."""
    module = _hooks_module("openapi")
    app = create_app(WebConfig())
    served = {getattr(route, "path", None) for route in app.routes}
    assert set(module.served_routes()) == served
    documented = set(module.ROUTES)
    assert served - documented == set(), "routes missing from docs/_hooks/openapi.py"
    assert documented - served == set(), "docs/_hooks/openapi.py documents no such route"


def test_the_documented_query_parameters_are_those_the_routes_take() -> None:
    """Every page and API route documents exactly the query parameters it takes (any other
    is a 400: `redis_presence.web.params.QUERY`); the operations' routes take none."""
    from redis_presence.web.params import QUERY

    module = _hooks_module("openapi")
    for route, info in module.ROUTES.items():
        documented = [name for name, _ in info.get("query", [])]
        assert sorted(documented) == sorted(QUERY.get(route, ())), route


def test_openapi_document() -> None:
    module = _hooks_module("openapi")
    document = module.openapi("0", module.served_routes())
    assert document["openapi"].startswith("3.")
    for path, item in document["paths"].items():
        (method,) = item
        # The service serves GET only, but for the drain requests (``--drain-token``).
        assert method == ("post" if path == "/api/v1/drain" else "get"), path
        names = re.findall(r"\{(\w+)\}", path)
        params = {p["name"] for p in item[method]["parameters"] if p["in"] == "path"}
        assert params == set(names), path


# -- the references and the CLI guide ------------------------------------------------------


def test_the_api_reference_puts_the_registry_first() -> None:
    """Every public name once, `RedisPresenceRegistry` first, each module placed."""
    reference = _hooks_module("reference")
    names = [name for _, names in reference.api_names() for name in names]
    assert names[0] == "RedisPresenceRegistry"
    assert sorted(names) == sorted(redis_presence.__all__)
    assert set(redis_presence._EXPORTS.values()) <= set(reference.MODULE_ORDER)


def test_the_api_reference_shows_every_integration() -> None:
    reference = _hooks_module("reference")
    page = reference.render((DOCS / "api.md").read_text(encoding="utf-8"))
    modules = sorted((ROOT / "redis_presence" / "integrations").glob("[!_]*.py"))
    assert len(modules) >= 8
    for module in modules:
        assert f"::: redis_presence.integrations.{module.stem}\n" in page, module.name


def _guide_headings() -> list[str]:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    return re.findall(r"^## (.*)$", text, re.MULTILINE)


def test_the_cli_guide_has_a_section_per_command() -> None:
    """docs/cli.md has a heading naming each visible command (each subcommand of a group
    that does nothing alone, as `streams reap`); the reference page has every --help."""
    ctx = click.Context(cli)
    wanted = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        if command.hidden:
            continue
        if isinstance(command, click.Group) and not command.invoke_without_command:
            sub_ctx = click.Context(command, parent=ctx, info_name=name)
            subs = [s for s in command.list_commands(sub_ctx) if s]
            wanted += [f"{name} {sub}" for sub in subs]
        else:
            wanted.append(name)
    headings = _guide_headings()
    missing = [path for path in wanted if not any(f"`{path}`" in h for h in headings)]
    assert missing == [], f"docs/cli.md has no section for {missing}"


def test_ttl_help_and_the_guide_agree_on_the_pickup() -> None:
    """When another process sees a new shared TTL: `TTL_CACHE_MS`, in both."""
    within = f"within {TTL_CACHE_MS // 1000} s"
    helped = CliRunner().invoke(cli, ["ttl", "--help"], terminal_width=200)
    assert within in " ".join(helped.output.split())
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    section = text.split("## `ttl`", 1)[1].split("\n## ", 1)[0]
    assert within in " ".join(section.split())
    assert not re.search(r"within \d+ s", " ".join(section.split()).replace(within, ""))


# -- the README's front door ---------------------------------------------------------------

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
MAX_FRONT_DOOR_LINES = 300


def _slugs(page: Path) -> set[str]:
    """The anchors mkdocs gives the headings of `page` (its toc slugify, ASCII names)."""
    slugs, fence = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fence ^= line.startswith("```")
        heading = re.match(r"#+ (.*)", line)
        if heading and not fence:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).replace("`", "").lower())
            slugs.add(re.sub(r"[- ]+", "-", text.strip()))
    return slugs


def test_front_door_links_resolve() -> None:
    """Every relative link of the README names a file of the repository, and a
    `page.md#anchor` one of that page's headings."""
    page = README
    for match in LINK.finditer(page.read_text(encoding="utf-8")):
        target = match.group("target")
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path
        assert file.exists(), f"{page.name} links to {target}: no such file"
        if anchor and file.name != "cli-reference.md":  # its headings are generated
            assert anchor in _slugs(file), f"{page.name} links to {target}: no such heading"


def test_front_door_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_FRONT_DOOR_LINES
