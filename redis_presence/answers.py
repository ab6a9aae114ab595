"""One request whose refusal or error reply is an answer, as the checks need it: `Answer`,
`try_command`, and the decoders of ``CONFIG GET`` and ``INFO`` answers.

Nothing here does I/O. `try_command` sends one request as a `Partial` batch and returns its
`Answer`: the reply, or the refusal (an ACL denial) or error that Redis answered instead, so
that a check goes on where the user may not run a command; a lost connection or a refused
login ends the plan with the registry's `PresenceError`. The registry's own policy check
(`redis_presence.policy`) and `redis_presence.doctor` take this step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from .errors import PresenceAuthError, PresenceError, is_login_refusal, server_answered
from .plans import Command, Partial, Plan


class Answer(NamedTuple):
    """What Redis answered one request: its `reply`, or that it `refused` it (an ACL
    denial: the user may not run the command or use the key), or another error it `failed`
    with (a syntax error, an unknown or renamed command, OOM, READONLY); with the round trip's
    `elapsed_ms`."""

    reply: Any = None
    refused: str | None = None
    failed: str | None = None
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the command ran and answered."""
        return self.refused is None and self.failed is None

    @property
    def permitted(self) -> bool:
        """Whether the ACL let the command through (it may still have failed after that)."""
        return self.refused is None


def try_command(request: Command) -> Plan[Answer]:
    """Send `request` on its own and return its `Answer`, with the round trip timed: a
    refusal or an error reply is answered; a lost connection or a refused login is raised
    (no check goes on without)."""
    started = time.perf_counter()
    (reply,) = yield Partial([request])
    elapsed_ms = (time.perf_counter() - started) * 1e3
    if not isinstance(reply, PresenceError):
        return Answer(reply, elapsed_ms=elapsed_ms)
    if not server_answered(reply) or is_login_refusal(reply):
        raise reply
    if isinstance(reply, PresenceAuthError):
        return Answer(refused=str(reply), elapsed_ms=elapsed_ms)
    return Answer(failed=str(reply), elapsed_ms=elapsed_ms)


# -- decoding replies ---------------------------------------------------------------------


def text(value: Any) -> str:
    """A reply value as text (replies are bytes or str, depending on the client)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _pairs(reply: Any) -> dict[str, Any]:
    """A map reply (a dict, or a flat list of names and values) with text names."""
    if isinstance(reply, Mapping):
        return {text(k): v for k, v in reply.items()}
    if isinstance(reply, list | tuple) and len(reply) % 2 == 0:
        return {text(k): v for k, v in zip(reply[0::2], reply[1::2], strict=True)}
    return {}


def config_value(answer: Answer, name: str) -> str | None:
    """The value of one parameter from a ``CONFIG GET name`` answer (None if not read)."""
    if not answer.ok:
        return None
    value = _pairs(answer.reply).get(name)
    return None if value is None else text(value)


def info_fields(answer: Answer) -> dict[str, str]:
    """An ``INFO`` answer as ``{field: text}`` (empty if not read)."""
    if not answer.ok:
        return {}
    reply = answer.reply
    if isinstance(reply, Mapping):
        return {text(k): text(v) for k, v in reply.items()}
    fields = {}
    for line in text(reply).splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            fields[name.strip()] = value.strip()
    return fields
