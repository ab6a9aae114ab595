"""One-line errors: library and usage failures become `click.ClickException`s.

Each prints as a single `Error: ...` line on stderr with a non-zero exit code, and no
password from the connection URL ever reaches the message. The library's exceptions are
imported only when something fails, so a command that succeeds never loads redis-py here.
"""

from __future__ import annotations

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


def one_line(message: str) -> str:
    """Collapse whitespace runs (newlines included) to single spaces."""
    return " ".join(str(message).split()) or "unknown error"


def translate(exc: BaseException, url: str | None) -> CliError:
    """The CLI error for a library, argument or usage error."""
    from redis_presence.errors import (
        PresenceAuthError,
        PresenceConfigError,
        PresenceConnectionError,
        PresenceDataError,
        PresenceReadOnlyError,
    )
    from redis_presence.urls import scrub

    if isinstance(exc, click.UsageError):
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        return UsageProblem(scrub(exc.format_message(), url) + hint)
    text = scrub(one_line(str(exc)) or type(exc).__name__, url)
    if isinstance(exc, PresenceConnectionError):
        return ConnectionFailed(text)
    if isinstance(exc, PresenceAuthError):
        return AuthFailed(text)
    if isinstance(exc, PresenceDataError):
        return DataProblem(text)
    if isinstance(exc, PresenceReadOnlyError):
        return ReadOnlyRefused(text)
    if isinstance(exc, PresenceConfigError | ValueError | TypeError):
        return UsageProblem(text)
    return CliError(text)


@contextmanager
def one_line_errors(url: str | None = None) -> Iterator[None]:
    """Turn `PresenceError`, `ValueError`, `TypeError` and usage errors into `CliError`."""
    try:
        yield
    except (CliError, click.exceptions.Exit, click.exceptions.NoArgsIsHelpError):
        raise
    except (click.UsageError, ValueError, TypeError) as exc:
        raise translate(exc, url) from None
    except Exception as exc:
        # A PresenceError exists only once its module is loaded: when it is not, this is
        # nothing of ours, and `--help` (which raises Exit) never imports redis-py here.
        errors = sys.modules.get("redis_presence.errors")
        if errors is not None and isinstance(exc, errors.PresenceError):
            raise translate(exc, url) from None
        raise
