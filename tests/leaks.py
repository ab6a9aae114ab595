"""What a leaked secret is, for the tests that a password never shows (test_security.py,
test_tls.py): the password their servers require, `secrets_in` (any run of `LEAK_WINDOW` of
its characters, as written or percent-encoded), the text a caller could print of an
exception or a log, and client options that fail at once (no retry) so a refusal is seen.
"""

from __future__ import annotations

import traceback
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio.retry
from redis.backoff import NoBackoff
from redis.retry import Retry

PASSWORD = "p@ss:w/rd%-Sekr1t-never-shown"

LEAK_WINDOW = 8
"""A password leaks when any run of this many of its characters shows."""


def secrets_in(text: str, *secrets: str) -> list[str]:
    """The pieces of the secrets (as written or percent-encoded) that appear in `text`."""
    forms = {form for s in secrets for form in (s, quote(s, safe=""), quote(s))}
    return sorted(
        {
            form[i : i + LEAK_WINDOW]
            for form in forms
            for i in range(max(1, len(form) - LEAK_WINDOW + 1))
            if form[i : i + LEAK_WINDOW] in text
        }
    )


def exception_text(exc: BaseException) -> str:
    """Everything a caller could print about `exc`: str, repr, and the whole chain."""
    parts = ["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)


FAST: dict[str, Any] = {
    "retry": Retry(NoBackoff(), 0),
    "socket_connect_timeout": 5,
    "socket_timeout": 5,
}
ASYNC_FAST: dict[str, Any] = {**FAST, "retry": redis.asyncio.retry.Retry(NoBackoff(), 0)}
"""`FAST` for an asyncio registry (which takes redis-py's asyncio retry policy)."""
