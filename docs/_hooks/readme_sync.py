"""Carry README.md's changes into the docs pages copied from it (until the README becomes
the front door of docs/README-outline.md; then delete this file).

    python docs/_hooks/readme_sync.py [BASE]

Cuts README.md at BASE (default: `SYNCED_FROM`, the commit the pages were last synced
from) and the README.md of the work tree into the same pages, and merges the difference
into each docs page with `git merge-file` (three-way: edits made to the pages since are
kept; a conflict is left marked in the page). Not part of the site's build."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYNCED_FROM = "c540b0ec5ec6ed8402af0a83ea91f4bf86f8a7f1"

# page -> its parts: (first heading, heading it stops before or None, levels to lift)
Part = tuple[str, str | None, int]
PAGES: dict[str, tuple[str | None, list[Part]]] = {
    "getting-started.md": (
        "# Getting started",
        [
            ("## Quick start", "## The rule", 0),
            ("## Trying it with docker compose", "## Running with many brokers", 0),
        ],
    ),
    "concepts.md": (
        "# Concepts",
        [
            ("## The rule", "## Library usage", 0),
            (
                "## Where it runs, whether it progresses, who must be there",
                "## Command-line interface",
                0,
            ),
            ("### Clocks: a beat from the future", "### Forked processes", 0),
        ],
    ),
    "library.md": (
        "# Using the library",
        [
            ("## Library usage", "## Where it runs, whether it progresses, who must be there", 0),
            ("## Running with many brokers", "## Integrations", 0),
        ],
    ),
    "cli.md": (None, [("## Command-line interface", "## Dashboard, API and metrics", 1)]),
    "web.md": (None, [("## Dashboard, API and metrics", "### Prometheus metrics", 1)]),
    "metrics.md": (
        "# Metrics and alerts",
        [("### Prometheus metrics", "## Trying it with docker compose", 1)],
    ),
    "integrations/index.md": (None, [("## Integrations", "### Celery", 1)]),
    "integrations/celery.md": (None, [("### Celery", "### Dramatiq", 2)]),
    "integrations/dramatiq.md": (None, [("### Dramatiq", "### FastStream", 2)]),
    "integrations/faststream.md": (
        None,
        [("### FastStream", "### Redis Streams: a reader that beats on every read", 2)],
    ),
    "integrations/streams.md": (
        "# Redis Streams",
        [("### Redis Streams: a reader that beats on every read", "## Operating in production", 0)],
    ),
    "production.md": (
        None,
        [("## Operating in production", "## Bad input", 1), ("## Bad input", "## Performance", 0)],
    ),
    "performance.md": (None, [("## Performance", None, 1)]),
}


def _lift(block: list[str], by: int) -> list[str]:
    out, fence = [], False
    for line in block:
        if line.startswith("```"):
            fence = not fence
        out.append(line[by:] if not fence and re.match(r"^#{2,} ", line) else line)
    return out


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return re.sub(r"[- ]+", "-", text.strip())


def _headings(body: list[str]) -> set[str]:
    slugs, fence = set(), False
    for line in body:
        fence ^= line.startswith("```")
        heading = re.match(r"#+ (.*)", line)
        if heading and not fence:
            slugs.add(_slug(heading.group(1)))
    return slugs


def cut(readme: str) -> dict[str, str]:
    """README text -> the text of each page copied from it, its links pointing into the
    site (``#anchor`` -> ``page.md#anchor`` where the heading moved to another page)."""
    lines = readme.splitlines()
    bodies: dict[str, list[str]] = {}
    for name, (title, parts) in PAGES.items():
        body = [title, ""] if title else []
        for start, end, by in parts:
            first = lines.index(start)
            last = lines.index(end) if end else len(lines)
            body += _lift(lines[first:last], by)
        bodies[name] = body
    anchors = {name: _headings(body) for name, body in bodies.items()}
    pages = {}
    for name, body in bodies.items():
        up = "../" * name.count("/")

        def link(match: re.Match[str], name: str = name, up: str = up) -> str:
            anchor = match.group(1)
            if anchor in anchors[name]:
                return match.group(0)
            where = next((page for page, slugs in anchors.items() if anchor in slugs), None)
            if where is None:
                return match.group(0)
            if where == "performance.md" and anchor == "performance":
                return f"]({up}performance.md)"
            return f"]({up}{where}#{anchor})"

        text = "\n".join(body).rstrip() + "\n"
        text = re.sub(r"\]\(#([\w\-]+)\)", link, text)
        text = text.replace("](docs/", "](" + up).replace("](benchmarks/", f"]({up}benchmarks/")
        pages[name] = text
    return pages


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else SYNCED_FROM
    old_readme = subprocess.run(
        ["git", "show", f"{base}:README.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    old, new = cut(old_readme), cut((ROOT / "README.md").read_text(encoding="utf-8"))
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in PAGES:
            if old[name] == new[name]:
                continue
            base_file, new_file = Path(tmp, "base.md"), Path(tmp, "new.md")
            base_file.write_text(old[name], encoding="utf-8")
            new_file.write_text(new[name], encoding="utf-8")
            page = ROOT / "docs" / name
            merged = subprocess.run(
                ["git", "merge-file", str(page), str(base_file), str(new_file)], check=False
            )
            print(f"{name}: {'merged' if merged.returncode == 0 else 'CONFLICTS, see the page'}")
            status = status or merged.returncode
    print("then: set SYNCED_FROM to the README's commit, and run mkdocs build --strict")
    return 1 if status else 0


if __name__ == "__main__":
    raise SystemExit(main())
