"""Every failure of a `redis-presence` command is one line on stderr and its exit code:
Redis unreachable (3), a refused password (4), a bad URL, option or argument (2); and the CLI
guide's table lists exactly the codes the CLI uses. (Read-only refusals, 6, are in
test_cli_read_only.py; the failures an operator meets in test_cli_failures.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_invoke import Backend, backend, invoke, one_error_line
from servers import MakeRedisServer, free_port

import redis_presence
from redis_presence.cli.errors import CliError, ReadOnlyRefused
from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below

COMMANDS = [
    ["ls"],
    ["snapshot", "--format", "json"],
    ["counts"],
    ["watch", "--iterations", "1"],
    ["prune"],
    ["prune", "--dry-run"],
    ["heartbeat", "q", "g", "c"],
    ["deregister", "q", "g", "c"],
    ["drain", "q", "g", "c"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_unreachable_redis_is_one_line_and_exit_3(args: list[str]) -> None:
    port = free_port()  # nothing listens there
    result = invoke(["--url", f"redis://:pw-secret@127.0.0.1:{port}/0", *args])
    line = one_error_line(result)
    assert result.exit_code == 3
    assert "cannot reach Redis" in line
    assert str(port) in line
    assert "pw-secret" not in result.output


def test_unreachable_unix_socket(tmp_path: Path) -> None:
    result = invoke(["--url", f"unix://{tmp_path}/nothing.sock", "ls"])
    assert "cannot reach Redis" in one_error_line(result)
    assert result.exit_code == 3


def test_a_real_process_prints_one_line_and_no_traceback() -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-c", "from redis_presence.cli import main; main()", "ls"],
        env={
            **{k: v for k, v in os.environ.items() if k != "REDIS_PRESENCE_URL"},
            "REDIS_URL": f"redis://user:hunter2@127.0.0.1:{port}/0",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.startswith("Error: cannot reach Redis")
    assert proc.stderr.count("\n") == 1
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize("args", COMMANDS[:3], ids=" ".join)
def test_wrong_password_is_one_line_and_exit_4(
    make_redis_server: MakeRedisServer, args: list[str]
) -> None:
    server = make_redis_server(requirepass="correct-horse")
    for url in (
        f"redis://:wrong-battery@127.0.0.1:{server.port}/0",
        f"redis://default:wrong-battery@127.0.0.1:{server.port}/0",
        f"redis://127.0.0.1:{server.port}/0",  # no password at all
    ):
        result = invoke(["--url", url, *args])
        line = one_error_line(result)
        assert result.exit_code == 4, line
        assert "refused" in line
        assert "wrong-battery" not in result.output
    good = invoke(["--url", server.url, *args])
    assert good.exit_code == 0, good.output
    assert "correct-horse" not in good.output


@pytest.mark.parametrize(
    "url",
    [
        "foo://localhost",
        "localhost:6379",
        "",
        "redis://:pw-secret@127.0.0.1:99999999/0",
        "redis://:pw-secret@[::1/0",
        "redis://user:pw%2Fsecret@127.0.0.1:notaport/0",
    ],
)
def test_bad_urls_are_one_line_and_exit_2(url: str) -> None:
    result = invoke(["--url", url, "ls"])
    line = one_error_line(result)
    assert result.exit_code == 2
    assert "URL" in line
    assert "pw-secret" not in line
    assert "pw/secret" not in line
    assert "pw%2Fsecret" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["--ttl-ms", "0", "ls"],
        ["--ttl-ms", "-5", "ls"],
        ["--ttl-ms", "soon", "ls"],
        ["--bogus", "ls"],
        ["nosuchcommand"],
        ["ls", "--state", "sleeping"],
        ["ls", "--format", "xml"],
        ["counts", "--format", "yaml"],
        ["watch", "--interval", "0"],
        ["heartbeat", "q", "g"],
        ["heartbeat", "q", "g", "c", "--lease-count", "-1"],
        ["heartbeat", "q", "g", "c", "--lease-count", str(2**32)],
        ["deregister", "q"],
        ["demo", "--brokers", "0"],
        ["demo", "--ttl-ms", "5"],
        ["demo", "--duration", "abc"],
    ],
    ids=" ".join,
)
def test_bad_options_are_one_line_and_exit_2(args: list[str]) -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("no registry may be opened for a usage error")

    result = invoke(args, obj=never)
    one_error_line(result)
    assert result.exit_code == 2


def test_bad_ttl_from_the_environment_is_a_usage_error() -> None:
    result = invoke(["ls"], env={"REDIS_PRESENCE_TTL_MS": "0"})
    assert "--ttl-ms" in one_error_line(result)
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heartbeat", "", "g", "c"], "queue must be a non-empty string"),
        (["heartbeat", "q", "g", "x" * 600], "consumer must be at most 512 UTF-8 bytes"),
        (["deregister", "q", "", "c"], "group must be a non-empty string"),
        (["--prefix", "has space", "ls"], "prefix must not contain"),
        (["--prefix", "{tag}", "counts"], "prefix must not contain"),
    ],
)
def test_library_value_errors_are_one_line_and_exit_2(
    backend: Backend, args: list[str], message: str
) -> None:
    result = backend.run(*args)
    assert message in one_error_line(result)
    assert result.exit_code == 2


def test_readme_documents_every_exit_code() -> None:
    """The CLI guide's exit-code table names exactly the codes the CLI's errors use."""
    guide = Path(redis_presence.__file__).resolve().parents[1] / "docs" / "cli.md"
    readme = guide.read_text(encoding="utf-8")
    section = readme[readme.index("## Errors and exit codes") :]
    table = section[: section.index("```")]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    pending = [CliError]
    used = {0}
    while pending:
        cls = pending.pop()
        used.add(cls.exit_code)
        pending.extend(cls.__subclasses__())
    from redis_presence.cli.commands.doctor import EXIT_FAILURES, EXIT_WARNINGS

    assert used == set(range(8))
    assert documented == used | {EXIT_WARNINGS, EXIT_FAILURES} == set(range(10))
    assert ReadOnlyRefused.exit_code == 6
