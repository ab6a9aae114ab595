"""How every list of the web service is paged, the groups and the consumers, as pages and
as ``/api/v1`` JSON: the cursor format, the limits, what a request asks for (`ask`), how a
page's cursors are made (`Page.of`, `Page.keyset`) and its links and JSON fields (`links`,
`cursors`). No I/O; which rows a page holds is `selection`'s (filters) and the registry's.

A cursor names the last item of a page (``after``) or the first (``before``), never an
offset: a page stays right while groups and consumers come and go between requests.
Cursors are opaque to clients: URL-safe base64 of ``[direction, queue, group, consumer]``
in JSON (a group's cursor has an empty consumer). Every list route checks its ``cursor``
and ``limit`` here, so a value it cannot use is the same 400 naming the parameter on each.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar
from urllib.parse import quote, urlencode

from starlette.requests import Request

from redis_presence._json import loads_flat
from redis_presence.validation import MAX_NAME_BYTES, check_name

from .params import BadRequest

T = TypeVar("T")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_CURSOR_CHARS = 4 * (3 * 6 * MAX_NAME_BYTES + 32) // 3 + 4
"""The longest cursor `Cursor.encode` makes (three names of at most 512 UTF-8 bytes, each
byte at most six JSON characters, in base64); anything longer is refused unread."""

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Cursor:
    """A position between items: just after `key`, or just before it."""

    direction: Literal["after", "before"]
    key: Key

    def encode(self) -> str:
        raw = json.dumps([self.direction[0], *self.key], ensure_ascii=False)
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, argument: str = "cursor") -> Cursor:
        """The cursor `encode` made, or `ValueError` naming `argument`: an oversized or
        nested document is refused before JSON parsing (no `RecursionError`)."""
        if len(text) > MAX_CURSOR_CHARS:
            raise ValueError(f"{argument} must be a cursor this API returned (too long)")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            value = loads_flat(raw.decode(), opening="[", max_chars=MAX_CURSOR_CHARS)
        except (binascii.Error, ValueError, UnicodeDecodeError):
            value = None
        if (
            isinstance(value, list)
            and len(value) == 4
            and value[0] in ("a", "b")
            and all(isinstance(part, str) for part in value)
        ):
            return cls("after" if value[0] == "a" else "before", (value[1], value[2], value[3]))
        raise ValueError(f"{argument} must be a cursor this API returned")

    @property
    def before(self) -> bool:
        return self.direction == "before"


def parse_limit(value: str | None, default: int = DEFAULT_LIMIT) -> int:
    """The `limit` query value: an integer in [1, MAX_LIMIT]; `ValueError` else."""
    if value is None or value == "":
        return default
    digits = value.isascii() and value.isdigit() and len(value) <= len(str(MAX_LIMIT))
    if not (digits and 1 <= int(value) <= MAX_LIMIT):
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {value!r:.60}")
    return int(value)


# -- the lists --------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """A list a route pages: what it lists (a groups cursor names a queue and a group, each
    a valid name) and how many items a page holds when the request gives no ``limit``."""

    of: Literal["groups", "consumers"]
    default_limit: int

    def describe(self) -> str:
        """The ``limit`` parameter, as the API's documentation states it."""
        noun = "groups" if self.of == "groups" else "rows"
        return f"{noun} per page, 1 to {MAX_LIMIT:,} (default {self.default_limit:,})"


GROUPS_PAGE = Listing("groups", 200)
"""The dashboard's groups page (``/``) and its JSON twin."""
GROUPS_API = Listing("groups", MAX_LIMIT)
"""``/api/v1/groups``."""
CONSUMERS_PAGE = Listing("consumers", 50)
"""The consumer tables (``/group``, ``/consumers``) and their JSON twins."""
CONSUMERS_API = Listing("consumers", DEFAULT_LIMIT)
"""``/api/v1/consumers`` and ``/api/v1/groups/<queue>/<group>``."""


@dataclass(frozen=True)
class PageAsk:
    """What a request asks of a list: the page after or before `cursor` (None: the first
    page), of at most `limit` items."""

    cursor: Cursor | None
    limit: int

    @property
    def before(self) -> bool:
        """Whether the page lies before the cursor (read backwards from it)."""
        return self.cursor is not None and self.cursor.before


def ask(request: Request, listing: Listing) -> PageAsk:
    """The ``cursor`` and ``limit`` of a request to `listing`, checked: a `BadRequest`
    (400) naming the parameter it cannot use."""
    value = request.query_params.get("cursor")
    try:
        cursor = Cursor.decode(value) if value else None
    except ValueError as exc:
        raise BadRequest("cursor", str(exc)) from None
    if cursor is not None and listing.of == "groups":
        try:
            check_name("queue", cursor.key[0])
            check_name("group", cursor.key[1])
        except ValueError:
            raise BadRequest("cursor", "cursor must be a cursor of a list of groups") from None
    try:
        limit = parse_limit(request.query_params.get("limit"), listing.default_limit)
    except ValueError as exc:
        raise BadRequest("limit", str(exc)) from None
    return PageAsk(cursor, limit)


# -- pages ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of items (groups or consumer rows) and the cursors of its neighbours (None
    at either end)."""

    rows: list[T]
    next_cursor: str | None
    prev_cursor: str | None

    @classmethod
    def of(
        cls, rows: list[T], key: Callable[[T], Key], *, more_before: bool, more_after: bool
    ) -> Page[T]:
        """The page of `rows`, with a cursor after its last item when more lie after it and
        one before its first when more lie before (none for an empty page)."""
        return cls(
            rows,
            Cursor("after", key(rows[-1])).encode() if rows and more_after else None,
            Cursor("before", key(rows[0])).encode() if rows and more_before else None,
        )

    @classmethod
    def keyset(
        cls,
        rows: list[T],
        key: Callable[[T], Key],
        *,
        more: bool,
        backwards: bool,
        from_cursor: bool,
    ) -> Page[T]:
        """The page of a read from a cursor (`from_cursor`; else from the start) towards one
        side (`backwards`: towards the start), which says whether `more` items lie beyond
        what it returned: what lies on the cursor's other side is the page it came from."""
        if backwards:
            return cls.of(rows, key, more_before=more, more_after=True)
        return cls.of(rows, key, more_before=from_cursor, more_after=more)


class NamedGroup(Protocol):
    @property
    def queue(self) -> str: ...

    @property
    def group(self) -> str: ...


def group_key(group: NamedGroup) -> Key:
    """The cursor key of a group: its queue and group, and an empty consumer."""
    return (group.queue, group.group, "")


def cursors(page: Page[Any]) -> dict[str, str | None]:
    """A page's cursors as every list's JSON carries them."""
    return {"next_cursor": page.next_cursor, "prev_cursor": page.prev_cursor}


def query(request: Request, cursor: str | None) -> str:
    """The request's query string with its ``cursor`` set to `cursor` (None: removed, the
    first page), the other parameters (filters, ``limit``) kept."""
    pairs = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    if cursor is not None:
        pairs.append(("cursor", cursor))
    return urlencode(pairs, quote_via=quote)


def links(request: Request, page: Page[Any]) -> dict[str, str | None]:
    """What a page's template needs for its pager: the cursors, and the query strings of the
    first, previous and next pages."""
    return cursors(page) | {
        "first_query": query(request, None),
        "prev_query": query(request, page.prev_cursor),
        "next_query": query(request, page.next_cursor),
    }


__all__ = [
    "CONSUMERS_API",
    "CONSUMERS_PAGE",
    "GROUPS_API",
    "GROUPS_PAGE",
    "MAX_LIMIT",
    "Cursor",
    "Listing",
    "Page",
    "PageAsk",
    "ask",
    "cursors",
    "group_key",
    "links",
    "parse_limit",
    "query",
]
