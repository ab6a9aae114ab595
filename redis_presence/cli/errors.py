"""One-line errors: library and usage failures become `click.ClickException`s.

Each prints as a single `Error: ...` line on stderr with a non-zero exit code, says what
was being done and the likely cause where the CLI can tell, and no password from the
connection URL ever reaches the message. The library's exceptions are imported only when
something fails, so a command that succeeds never loads redis-py here.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click


class CliError(click.ClickException):
    """Base of the CLI's errors: one line, exit code 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class UsageProblem(CliError):
    """A bad option value, URL or argument (exit code 2, like click's usage errors)."""

    exit_code = 2


class ConnectionFailed(CliError):
    """Redis could not be reached (exit code 3)."""

    exit_code = 3


class AuthFailed(CliError):
    """Redis refused the credentials (exit code 4)."""

    exit_code = 4


class DataProblem(CliError):
    """Keys under the prefix hold data this package did not write (exit code 5)."""

    exit_code = 5


class ReadOnlyRefused(CliError):
    """A write under `--read-only`, or sent to a read-only replica (exit code 6)."""

    exit_code = 6


class OutOfMemory(CliError):
    """Redis is out of memory and refused a write (exit code 7); reads still work."""

    exit_code = 7


class OutputFailed(CliError):
    """The output could not be written (`> /dev/full`): exit code 1."""


class OutputClosed(click.exceptions.Exit):
    """The reader of our output went away (`ls | head`): stop quietly with exit code 0."""

    def __init__(self) -> None:
        super().__init__(0)


def one_line(message: str) -> str:
    """Collapse whitespace runs (newlines included) to single spaces."""
    return " ".join(str(message).split()) or "unknown error"


def connection_hint(message: str, url: str | None, timeout_s: float | None) -> str:
    """What a connection failure most likely means, from the driver's words and the URL."""
    tls = bool(url) and str(url).lower().startswith("rediss")
    within = f" within {timeout_s:g} s (--timeout)" if timeout_s else ""
    if "Timeout connecting" in message:
        if tls:
            return (
                f"the TLS handshake got no answer{within}: is this a TLS port? A plain "
                "Redis port never answers it (use redis:// there)"
            )
        return f"no connection{within}: is the host up, and is the port open?"
    if "Timeout reading" in message or "Timeout writing" in message:
        return (
            f"connected, but no reply{within}: is it a Redis server, and is it busy (a long "
            "script or command) or paused?"
        )
    if not tls and ("Connection reset by peer" in message or "Connection closed" in message):
        return "the server hung up at once: if this port speaks TLS, use rediss://"
    return ""


def auth_hint(message: str) -> str:
    """What to do about a refusal, from the library's words."""
    if "(NOAUTH)" in message or "(WRONGPASS)" in message:
        return "pass the user name and password in the URL or REDIS_PRESENCE_URL"
    if "'select' command" in message:
        return "the ACL user may not SELECT this database: add +select to its role"
    return "the ACL role lacks this command or key: see the ACL roles in docs/production.md"


def translate(exc: BaseException, url: str | None, timeout_s: float | None = None) -> CliError:
    """The CLI error for a library, argument or usage error."""
    from redis_presence.errors import (
        PresenceAuthError,
        PresenceBatchError,
        PresenceConfigError,
        PresenceConnectionError,
        PresenceDataError,
        PresenceOutOfMemoryError,
        PresenceReadOnlyError,
    )
    from redis_presence.redaction import redact, redact_urls

    if isinstance(exc, click.UsageError):
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        # click quotes what was typed: a URL there (a stray argument) is shown redacted.
        return UsageProblem(redact_urls(exc.format_message()) + hint)
    # The library's messages carry no password (they name a URL only redacted): shown as
    # they are, never masked, so no word of them is garbled.
    text = one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, PresenceBatchError) and exc.failed:
        # Some groups refused: the exit code of the first refusal, the whole story in words.
        first = translate(next(iter(exc.failed.values())), url, timeout_s)
        return type(first)(text)
    if isinstance(exc, PresenceConnectionError):
        hint = connection_hint(text, url, timeout_s)
        where = f" at {redact(url)}" if url else ""
        if hint and text.startswith("cannot reach Redis"):
            text = f"cannot reach Redis{where}: {hint} ({text.partition(': ')[2]})"
        return ConnectionFailed(text)
    if isinstance(exc, PresenceAuthError):
        return AuthFailed(f"{text}; {auth_hint(text)}")
    if isinstance(exc, PresenceDataError):
        return DataProblem(text)
    if isinstance(exc, PresenceReadOnlyError):
        return ReadOnlyRefused(text)
    if isinstance(exc, PresenceOutOfMemoryError):
        return OutOfMemory(text)
    if isinstance(exc, PresenceConfigError | ValueError | TypeError):
        return UsageProblem(text)
    return CliError(text)


@contextmanager
def one_line_errors(url: str | None = None, timeout_s: float | None = None) -> Iterator[None]:
    """Turn `PresenceError`, `ValueError`, `TypeError` and usage errors into `CliError`."""
    try:
        yield
    except (CliError, click.exceptions.Exit, click.exceptions.NoArgsIsHelpError):
        raise
    except (click.UsageError, ValueError, TypeError) as exc:
        raise translate(exc, url, timeout_s) from None
    except Exception as exc:
        # A PresenceError exists only once its module is loaded: when it is not, this is
        # nothing of ours, and `--help` (which raises Exit) never imports redis-py here.
        errors = sys.modules.get("redis_presence.errors")
        if errors is not None and isinstance(exc, errors.PresenceError):
            raise translate(exc, url, timeout_s) from None
        raise


@contextmanager
def output_errors() -> Iterator[None]:
    """Writing to stdout failed: a closed pipe ends the command quietly (`OutputClosed`);
    anything else (`> /dev/full`) is one `OutputFailed` line. Either way stdout is pointed
    at /dev/null, so the interpreter's last flush cannot fail again."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EBADF, errno.EDQUOT):
            raise
        _silence_stdout()
        if exc.errno == errno.EPIPE:
            raise OutputClosed() from None
        raise OutputFailed(f"cannot write the output: {exc.strerror or exc}") from None


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (click's test runner)
        pass
