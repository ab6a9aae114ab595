"""Hiding credentials: where a connection URL's passwords are, and the URL without them.

No message of the package carries a password: a message names a URL only as `redact` writes
it (the userinfo's and ``?password=`` / ``?sentinel_password=`` values as ``***``), and the
driver's words only where they cannot hold the URL (`driver_reason`). Nothing is masked after
the fact, so no word of a message is garbled, whatever the password (``a``, ``Redis``, ``%``).
The URL forms are documented in `redis_presence.urls`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

from .errors import DRIVER_ERRORS

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+")
"""A host as written (a name, an address, or an IPv6 address in brackets); `url_parsing`
reads hosts with the same pattern."""
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~%/-]*")
_SECRET_OPTION = re.compile(r"(?i)(?:^|_)password$")
"""The name of a query parameter whose value is a secret."""


def _after_scheme(url: str) -> int:
    """Where the part after a leading ``scheme://`` starts (0 when the URL does not start
    with one: a ``://`` later on may be part of a password)."""
    match = _SCHEME.match(url)
    return match.end() + 3 if match and url.startswith("://", match.end()) else 0


def _plain_authority(text: str) -> bool:
    """Whether `text` reads as ``host[:port][,host[:port]...]`` (or nothing at all)."""
    if not text:
        return True
    for node in text.split(","):
        host, _, port = node.rpartition(":") if not node.endswith("]") else (node, "", "")
        if not host or not _HOST.fullmatch(host) or (port and not port.isdigit()):
            return False
    return True


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the userinfo of `url` starts and ends: after ``scheme://``, up to the last
    ``@`` that is not inside a query value, so a password written with a raw ``@``, ``/``,
    ``:`` or ``?`` is still all userinfo.

    An ``@`` is a query value's (``?client_name=a@b``) only when what precedes its ``?``
    reads as ``[userinfo@]host[:port][,...][/path]`` and an ``=`` stands between the ``?``
    and the ``@``. When in doubt the longer userinfo is taken: hiding too much is harmless,
    showing a piece of a password is not."""
    start = _after_scheme(url)
    if not start:  # malformed anyway: everything up to the last "@" may be secret
        at = url.rfind("@")
        return (0, at) if at >= 0 else None
    ats = [i for i in range(start, len(url)) if url[i] == "@"]
    for at in reversed(ats):
        if not _in_query_value(url, start, at):
            return start, at
    return None


def _in_query_value(url: str, start: int, at: int) -> bool:
    for query in (i for i in range(start, at) if url[i] == "?"):
        if "=" not in url[query:at]:
            continue
        before = url[start:query]
        plain = before[before.rfind("@") + 1 :]  # without a userinfo
        authority, _, path = plain.partition("/")
        if _plain_authority(authority) and _PLAIN_PATH.fullmatch(path):
            return True
    return False


_QUERY_PAIR = re.compile(r"(?=[?&]([^&=?#]*)=([^&#]*))")
"""Every ``?name=value`` or ``&name=value``, overlapping ones too (a zero-width match)."""


def _query_secrets(url: str) -> list[tuple[int, int]]:
    """Spans of the values of ``password``-like query parameters (``?password=``,
    ``&sentinel_password=``), as written, wherever they stand (a raw ``?``, ``&`` or ``@``
    in a password can move where the query seems to start); overlapping spans merged."""
    start = _after_scheme(url)
    spans: list[tuple[int, int]] = []
    for match in _QUERY_PAIR.finditer(url, start):
        if match.group(2) and _SECRET_OPTION.search(unquote_plus(match.group(1))):
            begin, end = match.span(2)
            if spans and begin <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((begin, end))
    return spans


def secrets_of(url: str) -> list[str]:
    """The URL's passwords (userinfo, ``?password=``, ``?sentinel_password=``) as written
    and percent-decoded, longest first (empty without)."""
    found: set[str] = set()
    span = _userinfo(url)
    if span is not None:
        password = url[span[0] : span[1]].partition(":")[2]
        found |= {password, unquote(password)}
    for begin, end in _query_secrets(url):
        value = url[begin:end]
        found |= {value, unquote(value), unquote_plus(value)}
    return sorted(found - {""}, key=len, reverse=True)


def redact(url: str) -> str:
    """The URL with every password replaced by ``***`` (safe for messages and logs)."""
    for begin, end in reversed(_query_secrets(url)):
        url = url[:begin] + "***" + url[end:]
    span = _userinfo(url)
    if span is None:
        return url
    user, sep, _ = url[span[0] : span[1]].partition(":")
    hidden = f"{user}:***" if sep else user or "***"
    return url[: span[0]] + hidden + url[span[1] :]


_URL_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"()<>]+")
"""A URL written in free text (a command line's stray argument, say), up to a blank, a quote
or a bracket (a comma after it is taken as part of it: hiding too much is harmless)."""


def redact_urls(text: str) -> str:
    """`text` with every URL in it written as `redact` writes it: for words that quote what
    a user typed (click's usage errors), where a URL may stand that is no parsed one."""
    return _URL_TOKEN.sub(lambda match: redact(match.group(0)), text)


_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")
_URL_VALUE = re.compile(r"Invalid value for '(\w+)' in connection URL")


def driver_reason(exc: BaseException) -> str:
    """Why redis-py refused a URL or an option. Its own errors name hosts, ports and
    options, never the URL, and are shown as they are; anything else (a `TypeError` or
    `ValueError`, of the URL parser say, which may quote a piece of the URL) is rebuilt
    from what it names: an option's name, else the exception's type."""
    text = str(exc)
    if isinstance(exc, DRIVER_ERRORS):
        return text or type(exc).__name__
    keyword = _KEYWORD.search(text)
    if isinstance(exc, TypeError) and keyword:
        return f"no option {keyword.group(1)!r}"
    value = _URL_VALUE.search(text)
    if isinstance(exc, ValueError) and value:
        return f"redis-py refuses the value of option {value.group(1)!r}"
    return f"redis-py refuses it ({type(exc).__name__})"
