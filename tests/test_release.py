"""What a release says about itself agrees: one version, one licence, one changelog.

The package metadata is what the build backend makes of this checkout's pyproject.toml
(`build.util.project_wheel_metadata`, no isolated environment: hatchling is in the `test`
extra), not what an older install left in site-packages. `.ci/release` builds and checks the
real distributions; tests/test_cli_startup.py installs a wheel and asks it.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageMetadata
from pathlib import Path

import pytest
from build.util import project_wheel_metadata
from click.testing import CliRunner
from packaging.version import Version

import redis_presence
from redis_presence import _moved
from redis_presence.cli import cli
from redis_presence.reporter import default_meta

ROOT = Path(redis_presence.__file__).resolve().parents[1]
NODE = ROOT / "clients" / "node"
CHANGELOG = ROOT / "CHANGELOG.md"
VERSION = redis_presence.__version__

# "## [0.2.0] - 2026-12-24", "## [0.2.0] - Unreleased" (not yet dated), "## [Unreleased]"
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d\d-\d\d|Unreleased))?$")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}  # keep-a-changelog
GITHUB = re.compile(r"^(?:git\+)?(?P<root>https://github\.com/[\w.-]+/[\w.-]+?)(?:\.git|/.*)?$")


@pytest.fixture(scope="module")
def wheel_metadata() -> PackageMetadata:
    return project_wheel_metadata(ROOT, isolated=False)


def _package_json() -> dict[str, object]:
    return dict(json.loads((NODE / "package.json").read_text(encoding="utf-8")))


def _sections() -> list[tuple[str, str | None, str]]:
    """The changelog's ``## [version] - date`` sections: (version, date, body)."""
    text = CHANGELOG.read_text(encoding="utf-8")
    heads = list(re.finditer(r"^## .*$", text, re.MULTILINE))
    sections = []
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        match = RELEASE.match(head.group())
        assert match, f"CHANGELOG.md: not a release heading: {head.group()!r}"
        body = text[head.end() : after.start() if after else len(text)]
        sections.append((match.group("version"), match.group("date"), body))
    return sections


def test_one_version(wheel_metadata: PackageMetadata) -> None:
    """__about__.py is the one source: the built metadata, --version, the reporter's
    metadata and the Node client (released with the same number) all say it."""
    assert Version(VERSION) == Version(wheel_metadata["Version"])
    assert str(Version(VERSION)) == VERSION, "write the version in its normal form"
    shown = CliRunner().invoke(cli, ["--version"], prog_name="redis-presence")
    assert (shown.exit_code, shown.output) == (0, f"redis-presence {VERSION}\n")
    assert default_meta()["version"] == VERSION
    assert _package_json()["version"] == VERSION
    lock = json.loads((NODE / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["version"] == lock["packages"][""]["version"] == VERSION


def test_the_pages_name_this_version() -> None:
    """A wheel, tarball or `--version` line shown in the docs is this release's."""
    shown = re.compile(
        r"redis_presence-(?P<a>[0-9][^-\s]*)-py3|redis-presence-(?P<b>[0-9][\w.]*?)\.tgz"
        r"|redis-presence (?P<c>\d+\.\d+\.\d+)\b"
    )
    pages = [ROOT / "README.md", NODE / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    seen = 0
    for page in pages:
        for match in shown.finditer(page.read_text(encoding="utf-8")):
            named = next(v for v in match.groups() if v is not None)
            assert named == VERSION, f"{page.relative_to(ROOT)}: {match.group()!r}"
            seen += 1
    assert seen >= 3


def test_one_licence(wheel_metadata: PackageMetadata) -> None:
    """MIT, as an SPDX expression with the LICENSE file, in both packages."""
    assert wheel_metadata["License-Expression"] == "MIT"
    assert wheel_metadata.get_all("License-File") == ["LICENSE"]
    assert not [c for c in wheel_metadata.get_all("Classifier") or [] if c.startswith("License")]
    assert _package_json()["license"] == "MIT"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) ")
    assert "redis-presence developers" in text.splitlines()[2]
    # npm packs the LICENSE of the package's own folder
    assert (NODE / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


def test_the_project_urls_name_one_repository(wheel_metadata: PackageMetadata) -> None:
    urls = dict(entry.split(", ", 1) for entry in wheel_metadata.get_all("Project-URL") or [])
    assert {"Source", "Issues", "Changelog", "Documentation"} <= set(urls)
    package = _package_json()
    repository, bugs = package["repository"], package["bugs"]
    assert isinstance(repository, dict)
    assert isinstance(bugs, dict)
    assert repository["directory"] == "clients/node"
    named = [*urls.values(), repository["url"], bugs["url"], package["homepage"]]
    roots = set()
    for url in named:
        match = GITHUB.match(str(url))
        assert match, url
        roots.add(match.group("root"))
    assert len(roots) == 1, roots
    assert urls["Issues"] == bugs["url"]
    assert urls["Changelog"].endswith("/CHANGELOG.md")


def test_the_changelog_keeps_a_changelog() -> None:
    """An [Unreleased] section, then releases newest first, the newest this version."""
    sections = _sections()
    assert sections[0][:2] == ("Unreleased", None)
    releases = sections[1:]
    assert releases[0][0] == VERSION, "CHANGELOG.md's newest release is not __about__'s"
    versions = [Version(version) for version, _, _ in releases]
    assert versions == sorted(versions, reverse=True)
    assert all(date for _, date, _ in releases), "each release has a date (or 'Unreleased')"
    assert all(date != "Unreleased" for _, date, _ in releases[1:]), "only the newest is undated"
    for version, _, body in releases:
        kinds = re.findall(r"^### (.*)$", body, re.MULTILINE)
        assert kinds, version
        assert {k for k in kinds if not k.startswith("Upgrading from ")} <= KINDS, version


def test_the_old_module_names_go_when_the_changelog_says() -> None:
    """redis_presence.redis and .protocol forward (with a warning) until REMOVED_IN, and the
    changelog's Deprecated entry of this release says which release that is."""
    assert Version(VERSION) < Version(_moved.REMOVED_IN), "remove redis.py and protocol.py now"
    for old in ("redis", "protocol"):
        assert (ROOT / "redis_presence" / f"{old}.py").exists()
    (this,) = [body for version, _, body in _sections() if version == VERSION]
    deprecated = this.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
    assert "`redis_presence.redis`" in deprecated
    assert "`redis_presence.protocol`" in deprecated
    assert f"removed in {_moved.REMOVED_IN}" in deprecated
