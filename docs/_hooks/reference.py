"""The CLI and API references, built from the code for the mkdocs hook (`hooks.py` beside it).

Importable without mkdocs: tests/test_docs.py checks what they list (every command, every
public name, every integration module, the registries first). `render` fills a page's marks.

- `cli_reference`: each visible command's ``--help``, exactly as click prints it;
- `api_reference`: a mkdocstrings entry per public name (`redis_presence._EXPORTS`), grouped
  by the module that defines it, in `MODULE_ORDER` (the registries first);
- `integrations_reference`: a mkdocstrings entry per module of `redis_presence.integrations`
  (found on disk, not imported: no framework needs to be installed to build the site).
"""

from __future__ import annotations

import pkgutil

import click

import redis_presence
import redis_presence.integrations
from redis_presence.cli.group import cli

HELP_WIDTH = 80  # a terminal's width, and what a page shows without scrolling
API_MARK = "<!-- api: generated from redis_presence._EXPORTS -->"
CLI_MARK = "<!-- cli: generated from redis_presence.cli.group.cli -->"
INTEGRATIONS_MARK = "<!-- integrations: generated from redis_presence/integrations/ -->"

MODULE_ORDER = (
    "registry",  # RedisPresenceRegistry: what most readers came for
    "aio",
    "reporter",
    "beats",
    "model",
    "verdict",
    "events",
    "memory",
    "contract",
    "errors",
    "plans",
    "validation",
)
"""The API reference's order of the modules of `redis_presence._EXPORTS`; a module missing
here goes last (and tests/test_docs.py asks for it to be placed)."""

FIRST_INTEGRATION = "streams"  # needs no extra; the others follow in alphabetical order


def cli_reference() -> str:
    """Each visible command's ``--help``, exactly as click prints it, under a heading."""
    parts: list[str] = []

    def visit(command: click.Command, parent: click.Context | None, name: str) -> None:
        settings = {**command.context_settings, "max_content_width": HELP_WIDTH}
        ctx = click.Context(
            command, info_name=name, parent=parent, terminal_width=HELP_WIDTH, **settings
        )
        level = "#" * min(2 + ctx.command_path.count(" "), 4)
        parts.append(f"{level} {ctx.command_path}\n\n```text\n{command.get_help(ctx)}\n```\n")
        if isinstance(command, click.Group):
            for sub_name in command.list_commands(ctx):
                sub = command.get_command(ctx, sub_name)
                if sub is not None and not sub.hidden:
                    visit(sub, ctx, sub_name)

    visit(cli, None, "redis-presence")
    return "\n".join(parts)


def api_names() -> list[tuple[str, list[str]]]:
    """(module, its public names) in reference order: modules by `MODULE_ORDER`, and in each
    the classes and functions before the constants, otherwise in `_EXPORTS` order."""
    by_module: dict[str, list[str]] = {}
    for name, module in redis_presence._EXPORTS.items():
        by_module.setdefault(module, []).append(name)

    def rank(module: str) -> int:
        return MODULE_ORDER.index(module) if module in MODULE_ORDER else len(MODULE_ORDER)

    return [
        (module, sorted(names, key=str.isupper))  # stable: constants (ALL_CAPS) last
        for module, names in sorted(by_module.items(), key=lambda item: rank(item[0]))
    ]


def api_reference() -> str:
    """A mkdocstrings block per public name, grouped by the module that defines it."""
    parts = []
    for module, names in api_names():
        parts.append(f"## `redis_presence.{module}`\n")
        parts += [f"::: redis_presence.{module}.{name}\n" for name in names]
    return "\n".join(parts)


def integration_modules() -> list[str]:
    """The public modules of `redis_presence.integrations`, `FIRST_INTEGRATION` first."""
    found = [
        info.name
        for info in pkgutil.iter_modules(redis_presence.integrations.__path__)
        if not info.name.startswith("_")
    ]
    return sorted(found, key=lambda name: (name != FIRST_INTEGRATION, name))


def integrations_reference() -> str:
    """A mkdocstrings block per integration module, its private names left out."""
    return "\n".join(
        f'::: redis_presence.integrations.{name}\n    options:\n      filters: ["!^_"]\n'
        for name in integration_modules()
    )


def render(markdown: str) -> str:
    """`markdown` with each mark replaced by the reference it names."""
    for mark, build in (
        (CLI_MARK, cli_reference),
        (API_MARK, api_reference),
        (INTEGRATIONS_MARK, integrations_reference),
    ):
        if mark in markdown:
            markdown = markdown.replace(mark, build())
    return markdown
