"""mkdocs hooks (mkdocs.yml `hooks:`): what the site generates from the code.

- `openapi.json` and the routes table of web.md, from `openapi.ROUTES` (checked against
  the app's routes by tests/test_docs.py);
- the benchmark figures under benchmarks/reference/, served from where they are kept;
- the CLI reference: every visible command's `--help`, as click prints it;
- the API reference's entries, one per public name (`redis_presence._EXPORTS`), the
  registries first, and one per integration module (`reference.py` builds all three)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

import redis_presence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import openapi  # beside this file
import reference  # beside this file

ROOT = Path(__file__).resolve().parents[2]
ROUTES_MARK = "<!-- routes: generated from docs/_hooks/openapi.py -->"


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    document = openapi.openapi_json(redis_presence.__version__, openapi.served_routes())
    files.append(File.generated(config, "openapi.json", content=document))
    for figure in sorted((ROOT / "benchmarks" / "reference").glob("*.png")):
        uri = figure.relative_to(ROOT).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown: str, page: Page, **_: Any) -> str:
    if ROUTES_MARK in markdown:
        markdown = markdown.replace(ROUTES_MARK, openapi.routes_table())
    return reference.render(markdown)  # the CLI and API references
