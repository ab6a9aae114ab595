"""The package's exceptions: catch `PresenceError` to catch them all.

Bad arguments raise the built-in `TypeError` / `ValueError` (before anything is
written); everything that goes wrong on the Redis side is a `PresenceError`.
No message carries a password, by construction rather than by masking: the driver's
messages name hosts and ports, never credentials, and a URL reaches a message only as
`redaction.redact` writes it (so no word of a message is ever garbled by a short password).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as rx


class PresenceError(Exception):
    """Base class of every error raised by redis-presence for a Redis-side failure."""


class PresenceConnectionError(PresenceError):
    """Redis could not be reached, or the connection broke or timed out mid-call."""


class PresencePoolExhausted(PresenceError):
    """No connection of the client's pool came free within its ``pool_timeout``: this
    process makes more calls at once than ``max_connections``. Redis was not asked and may
    be perfectly well (so this is no `PresenceConnectionError`); retrying later is safe."""


class PresenceAuthError(PresenceError):
    """Redis refused the credentials, or the ACL user may not run this operation."""


class PresenceDataError(PresenceError):
    """A key under the prefix holds data this package did not write (e.g. WRONGTYPE)."""


class PresenceDataWarning(UserWarning):
    """A read set aside what it cannot decode (docs/protocol.md, section 9): a whole group in
    a read of many (an index member another program spelled, a key of another type, a
    spoilt shared setting), or, in any read, the consumers of a group whose stored values
    another program wrote; it read all the rest. The message names the key."""


class PresenceProtocolError(PresenceDataError):
    """The prefix's ``P:protocol`` key names a protocol version this package does not speak
    (docs/protocol.md): another client, of another release or language, wrote this prefix
    in a format this one cannot read or write safely; the message names that version. A
    write refused for it wrote nothing (the check and the write are one script)."""


class PresenceMetaError(PresenceDataError):
    """`snapshot(with_meta=True)` met metadata this package did not write (not a flat JSON
    object of str to str, oversized, or nested): `unreadable` maps each such
    ``(queue, group, consumer)`` to what is wrong with it, and `rows` holds every row of
    the read, those consumers' `meta` empty (for a caller that shows the others anyway;
    empty from `iter_snapshot`, which raises it once every row was handed out)."""

    def __init__(self, unreadable: dict[tuple[str, str, str], str], rows: Sequence[Any] = ()):
        self.unreadable = unreadable
        self.rows = list(rows)
        first = next(iter(unreadable.values()), "")
        more = f"; and {len(unreadable) - 1} more" if len(unreadable) > 1 else ""
        super().__init__(f"{first}{more}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.unreadable, self.rows)


class PresenceConfigError(PresenceError, ValueError):
    """A connection URL or option cannot be used (malformed URL, unknown scheme)."""


class PresenceReadOnlyError(PresenceError):
    """A write was sent through a read-only registry, or to a read-only replica."""


class PresenceResyncRequired(PresenceError):
    """`changes` cannot go on from this cursor (the event log was trimmed past it, or the
    cursor is older than the log): take a fresh `snapshot` and a fresh cursor."""


class PresenceClockError(PresenceError, ValueError):
    """The clock guard refused a beat: its explicit ``now_ns`` is more than the registry's
    ``max_future_ms`` ahead of the Redis server's clock (nothing was written)."""


class PresenceBatchError(PresenceError):
    """Part of a `heartbeat_many` batch (or of a `prune_expired`) was refused, the rest was
    done: bad data costs only what it spoils.

    `failed` maps each ``(queue, group)`` with something refused to the `PresenceError` that
    says why: a `PresenceDataError` for a key of another type (the whole group is refused)
    or for a stored value this package did not write (that consumer's beats only; the error
    names the key and the field), or what refused a whole call of a batch split in several
    (`PresenceOutOfMemoryError`, `PresenceAuthError`, ...). `refused` lists, as
    ``(queue, group, consumer)``, every beat not written (for a prune: every expired
    consumer left in place for its spoilt value; a group refused whole lists none of its
    consumers). `completed` is how many beats were written (consumers removed). Everything
    else of the call was done, and retrying it is safe.
    """

    def __init__(
        self,
        failed: dict[tuple[str, str], PresenceError],
        completed: int,
        refused: Sequence[tuple[str, str, str]] = (),
    ) -> None:
        self.failed = failed
        self.completed = completed
        self.refused = list(refused)
        named = "; ".join(f"{q}/{g}: {error}" for (q, g), error in list(failed.items())[:3])
        more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
        super().__init__(
            f"refused in {len(failed)} group{'s' if len(failed) != 1 else ''}, "
            f"{completed} done: {named}{more}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.failed, self.completed, self.refused)


class PresenceOutOfMemoryError(PresenceError):
    """Redis refused a write because its memory is full (``OOM``: used memory above
    ``maxmemory`` and nothing it may evict); the write changed nothing, reads still work."""


DRIVER_ERRORS = (rx.RedisError, rx.RedisClusterException)
"""What redis-py raises for a Redis-side failure (its cluster errors are not all `RedisError`);
`translate` turns each into a `PresenceError`."""


# How Redis words an ACL denial raised inside a script. Redis 7.0 replies
# "ERR The user executing the script can't run this command or subcommand" (or "... can't
# access at least one of the keys ..."); Redis 7.2 and later reply "NOPERM ...", which
# redis-py already turns into NoPermissionError.
_SCRIPT_ACL_DENIALS = (
    "The user executing the script can't",
    "NOPERM ",
)


def _is_acl_denial(exc: Exception) -> bool:
    if isinstance(exc, rx.AuthenticationError | rx.NoPermissionError):
        return True
    if not isinstance(exc, rx.ResponseError):
        return False
    message = str(exc)
    return message.startswith(("NOAUTH", "WRONGPASS")) or any(
        denial in message for denial in _SCRIPT_ACL_DENIALS
    )


# How Redis (and redis-py) word a refused login: no password given (NOAUTH, or HELLO before
# AUTH with RESP3), or a wrong user name or password (WRONGPASS).
_NO_PASSWORD = ("NOAUTH", "Authentication required", "HELLO must be called with the client")
_WRONG_PASSWORD = ("WRONGPASS", "invalid username-password pair")


NO_PASSWORD = "Redis refused access: it requires a password (NOAUTH)"
WRONG_PASSWORD = (
    "Redis refused access: wrong user name or password, or the user is disabled (WRONGPASS)"
)


def _refusal(exc: Exception) -> str:
    message = str(exc)
    if any(words in message for words in _NO_PASSWORD):
        return NO_PASSWORD
    if any(words in message for words in _WRONG_PASSWORD):
        return WRONG_PASSWORD
    return f"Redis refused access: {exc}"


def is_login_refusal(error: BaseException) -> bool:
    """Whether `error` says the login itself failed (no or wrong password), rather than
    that the ACL user may not run one command or use one key."""
    return isinstance(error, PresenceAuthError) and str(error) in (NO_PASSWORD, WRONG_PASSWORD)


def server_answered(error: BaseException) -> bool:
    """Whether `error` is a reply of the server (an error reply, ``MASTERDOWN`` included)
    rather than a failure to reach it (refused, broken or timed-out connection)."""
    if isinstance(error, PresencePoolExhausted):
        return False  # Redis was not asked
    if not isinstance(error, PresenceConnectionError):
        return True
    return isinstance(error.__cause__, rx.MasterDownError)


OUT_OF_MEMORY = (
    "Redis is out of memory and refused the write (used memory is above maxmemory, and its "
    "maxmemory-policy left nothing to evict); nothing was written, reads still work: raise "
    "maxmemory or free memory (redis-presence doctor shows the server's memory settings)"
)


DATA_REFUSAL = "PRESENCEDATA "
CLOCK_REFUSAL = "PRESENCECLOCK "
PROTOCOL_REFUSAL = "PRESENCEPROTOCOL "
"""How a script's error reply starts when it refuses a stored value this package did not
write, a ``now_ns`` too far ahead of the server clock, or a prefix of another protocol
version (``lua/lib.lua``)."""


def refusal(message: str) -> PresenceError:
    """The package's exception for a script's refusal, whether it came back as an error reply
    or, for one group of a batch, inside the reply (``WRONGTYPE ...``, ``PRESENCEDATA ...``,
    ``PRESENCECLOCK ...``, ``PRESENCEPROTOCOL ...``)."""
    if message.startswith(PROTOCOL_REFUSAL):
        return PresenceProtocolError(message.removeprefix(PROTOCOL_REFUSAL))
    if message.startswith(DATA_REFUSAL):
        return PresenceDataError(message.removeprefix(DATA_REFUSAL))
    if message.startswith(CLOCK_REFUSAL):
        return PresenceClockError(message.removeprefix(CLOCK_REFUSAL))
    return PresenceDataError(f"unexpected data under the prefix: {message}")


def translate(exc: Exception) -> PresenceError:
    """The package's exception for a redis-py error (the caller chains the original)."""
    if isinstance(exc, PresenceError):
        return exc
    if _is_acl_denial(exc):
        return PresenceAuthError(_refusal(exc))
    if isinstance(exc, rx.MaxConnectionsError):  # before ConnectionError, which it is
        return PresencePoolExhausted(
            f"no free connection in this process's pool to Redis ({exc}): more calls at once "
            "than max_connections; Redis was not asked (raise max_connections or "
            "pool_timeout, or make fewer calls at once)"
        )
    if isinstance(exc, rx.RedisClusterException) and "cannot be connected" in str(exc):
        return PresenceConnectionError(f"cannot reach the Redis Cluster: {exc}")
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError | rx.MasterDownError):
        # MASTERDOWN: a replica that may not serve stale data lost its primary (transient).
        return PresenceConnectionError(f"cannot reach Redis: {exc}")
    if isinstance(exc, rx.OutOfMemoryError) or (
        isinstance(exc, rx.ResponseError) and str(exc).startswith("OOM ")
    ):
        return PresenceOutOfMemoryError(f"{OUT_OF_MEMORY} ({exc})")
    if isinstance(exc, rx.ReadOnlyError):
        return PresenceReadOnlyError(f"Redis is a read-only replica: {exc}")
    if isinstance(exc, rx.ResponseError) and str(exc).startswith(
        (DATA_REFUSAL, CLOCK_REFUSAL, PROTOCOL_REFUSAL)
    ):
        return refusal(str(exc))
    if isinstance(exc, rx.ResponseError) and "WRONGTYPE" in str(exc):
        return refusal(str(exc))
    return PresenceError(f"Redis error: {exc}")


class PresenceClusterMigratingError(PresenceConnectionError):
    """A Redis Cluster kept answering that a slot is on the move (``TRYAGAIN``, ``ASK``,
    ``MOVED``: a slot migration, or resharding) for longer than the registry's
    ``cluster_retry_ms``, through which it sent the request again. The request did not run
    (a redirected request never does); retrying later is safe."""
