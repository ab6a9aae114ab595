"""mkdocs hooks (mkdocs.yml `hooks:`): what the site generates from the code.

- `openapi.json` and the routes table of web.md, from `openapi.ROUTES` (checked against
  the app's routes by tests/test_docs.py);
- the benchmark figures under benchmarks/reference/, served from where they are kept;
- the CLI reference: every visible command's `--help`, as click prints it;
- the API reference's entries, one per public name (`redis_presence._EXPORTS`);
- docs/protocol.md in the navigation when it exists."""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import click
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

import redis_presence
from redis_presence.cli.group import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openapi  # beside this file

ROOT = Path(__file__).resolve().parents[2]
ROUTES_MARK = "<!-- routes: generated from docs/_hooks/openapi.py -->"
API_MARK = "<!-- api: generated from redis_presence._EXPORTS -->"
CLI_MARK = "<!-- cli: generated from redis_presence.cli.group.cli -->"
HELP_WIDTH = 80  # a terminal's width, and what a page shows without scrolling


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


def api_reference() -> str:
    """A mkdocstrings block per public name, grouped by the module that defines it."""
    by_module: dict[str, list[str]] = {}
    for name, module in redis_presence._EXPORTS.items():
        by_module.setdefault(module, []).append(name)
    parts = []
    for module, names in by_module.items():
        parts.append(f"## `redis_presence.{module}`\n")
        parts += [f"::: redis_presence.{module}.{name}\n" for name in names]
    return "\n".join(parts)


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    docs = Path(config.docs_dir)
    nav = config.nav or []
    listed = [page for item in nav if isinstance(item, dict) for page in item.values()]
    if (docs / "protocol.md").exists() and "protocol.md" not in listed:
        at = listed.index("index-protocol.md")
        nav.insert(at, {"The protocol": "protocol.md"})
    return config


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    document = openapi.openapi_json(version("redis-presence"), openapi.served_routes())
    files.append(File.generated(config, "openapi.json", content=document))
    for figure in sorted((ROOT / "benchmarks" / "reference").glob("*.png")):
        uri = figure.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    if ROUTES_MARK in markdown:
        markdown = markdown.replace(ROUTES_MARK, openapi.routes_table())
    if CLI_MARK in markdown:
        markdown = markdown.replace(CLI_MARK, cli_reference())
    if API_MARK in markdown:
        markdown = markdown.replace(API_MARK, api_reference())
    return markdown
