"""docs/protocol.md, section 13, stays true: the published SHA-1 of every script is the SHA-1
of the text the package sends (`redis_presence.scripts`), the library's name its digest, and
the worked ``EVALSHA`` calls, run in order on a real redis-server, give the replies the page
prints (as redis-cli prints them)."""

from __future__ import annotations

import base64
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import redis
from servers import RedisServer

from redis_presence import errors
from redis_presence.events import EventCursor
from redis_presence.keys import encode_meta
from redis_presence.scripts import SCRIPT_NAMES, library, script

PAGE = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
SECTION = re.compile(r"^## 13\. .*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
SECTION_11 = re.compile(r"^## 11\. .*?(?=^## |\Z)", re.DOTALL | re.MULTILINE)
SHA_ROW = re.compile(r"^\| `(?P<name>\w+)\.lua` \| `(?P<sha>[0-9a-f]{40})` \|", re.MULTILINE)
LIBRARY_NAME = re.compile(r"the library `(?P<name>redis_presence_[0-9a-f]{12})`")
BLOCK = re.compile(r"^```text\n(?P<body>redis> .*?)^```$", re.DOTALL | re.MULTILINE)
PROMPT = "redis> "
NOT_PROTOCOL = {"stream_reap"}
"""Scripts that are no part of the protocol (section 10), so not published."""


def section() -> str:
    found = SECTION.search(PAGE.read_text(encoding="utf-8"))
    assert found, "docs/protocol.md has no section 13"
    return found.group(0)


def test_the_published_sha1s_are_the_scripts_the_package_sends() -> None:
    published = {m["name"]: m["sha"] for m in SHA_ROW.finditer(section())}
    sent = {name: script(name).sha for name in SCRIPT_NAMES if name not in NOT_PROTOCOL}
    assert published == sent, (
        "docs/protocol.md section 13 publishes other SHA-1s than redis_presence/scripts.py "
        f"computes: publish {sent}"
    )
    name = LIBRARY_NAME.search(section())
    assert name, "section 13 names no function library"
    assert name["name"] == library().name, f"publish the library {library().name}"


def shown(reply: Any, indent: int = 0) -> list[str]:
    """`reply` as redis-cli prints it (RESP2): one string per line."""
    if isinstance(reply, redis.ResponseError):
        return [f"(error) {reply}"]
    if reply is None:
        return ["(nil)"]
    if isinstance(reply, int):
        return [f"(integer) {reply}"]
    if isinstance(reply, bytes):
        text = reply.decode("utf-8", "backslashreplace").replace("\\", "\\\\")
        return ['"' + text.replace('"', '\\"') + '"']
    if not reply:
        return ["(empty array)"]
    lines: list[str] = []
    for number, item in enumerate(reply, 1):
        head = f"{number}) "
        first, *rest = shown(item)
        lines.append(head + first)
        lines += [" " * len(head) + line for line in rest]
    return lines


def examples() -> list[tuple[str, list[str]]]:
    """Every ``redis> `` command of section 13 in order, with the lines of its reply (a line
    ending in `` \\`` goes on in the next one)."""
    steps: list[tuple[str, list[str]]] = []
    for block in BLOCK.finditer(section()):
        text = re.sub(r" \\\n\s*", " ", block["body"])
        for line in text.splitlines():
            if line.startswith(PROMPT):
                steps.append((line.removeprefix(PROMPT), []))
            else:
                steps[-1][1].append(line)
    return steps


def test_the_worked_examples_give_the_replies_shown(redis_server: RedisServer) -> None:
    steps = examples()
    sent = {command.split()[0].upper() for command, _ in steps}
    assert "EVALSHA" in sent, "section 13 shows no worked EVALSHA"
    called = {command.split()[1] for command, _ in steps if command.upper().startswith("EVALSHA")}
    every = {script(name).sha for name in SCRIPT_NAMES if name not in NOT_PROTOCOL}
    assert called == every, "section 13 shows one worked EVALSHA per script"
    client: Any = redis_server.client(protocol=2)  # RESP2, as redis-cli shows it by default
    try:
        client.flushall()
        for name in SCRIPT_NAMES:
            client.script_load(script(name).source)
        client.response_callbacks.clear()  # the replies as Redis sent them
        for command, expected in steps:
            try:
                reply = client.execute_command(*shlex.split(command))
            except redis.ResponseError as error:
                reply = error
            assert shown(reply) == expected, command
    finally:
        client.close()


@pytest.mark.parametrize(
    ("reply", "lines"),
    [
        (0, ["(integer) 0"]),
        (b'{"a":"b"}', ['"{\\"a\\":\\"b\\"}"']),
        ([[], 5], ["1) (empty array)", "2) (integer) 5"]),
        ([1, [2, b"x"]], ["1) (integer) 1", "2) 1) (integer) 2", '   2) "x"']),
    ],
)
def test_replies_are_shown_as_redis_cli_shows_them(reply: Any, lines: list[str]) -> None:
    assert shown(reply) == lines


def test_metadata_escapes_are_the_ones_section_5_lists() -> None:
    value = '"\\\b\f\n\r\t\x00\x1f/\x7f<>&\u2028\u2029é😀'
    expected = (
        '{"a":"' + '\\"\\\\\\b\\f\\n\\r\\t\\u0000\\u001f/\x7f<>&\u2028\u2029é😀' + '","b":""}'
    )
    assert encode_meta({"b": "", "a": value}) == expected


def test_a_cursor_is_read_in_any_json_spelling() -> None:
    cursor = EventCursor(5, 6, {"é": "1-0"}, "epoch", "presence", "é", None)
    written = cursor.encode()
    assert "=" not in written
    document = json.loads(base64.urlsafe_b64decode(written + "=" * (-len(written) % 4)))
    assert list(document) == ["v", "t", "s", "q", "e", "f"]
    assert b"\\u00e9" in base64.urlsafe_b64decode(written + "=" * (-len(written) % 4))
    respelt = json.dumps(dict(reversed(document.items())), indent=1, ensure_ascii=False)
    padded = base64.urlsafe_b64encode(respelt.encode()).decode()
    assert EventCursor.decode(padded) == EventCursor.decode(written) == cursor


ERROR_ROW = re.compile(
    r"^\| `(?P<prefix>[A-Z]+) ` \| [^|]+ \| [^|]+ \| `(?P<python>Presence\w+)`", re.MULTILINE
)
LUA_PREFIX = re.compile(r"'(PRESENCE[A-Z]+) ")


def test_every_script_error_prefix_is_in_the_error_model() -> None:
    """Section 11 lists each error prefix the scripts send, with the exception the package
    raises for it."""
    found = SECTION_11.search(PAGE.read_text(encoding="utf-8"))
    assert found, "docs/protocol.md has no section 11"
    listed = {m["prefix"]: m["python"] for m in ERROR_ROW.finditer(found.group(0))}
    lua = Path(__file__).resolve().parent.parent / "lua"
    sent = {m for path in lua.glob("*.lua") for m in LUA_PREFIX.findall(path.read_text())}
    assert sent, "no error prefix found in lua/"
    assert set(listed) == sent
    for prefix, name in listed.items():
        raised = errors.refusal(f"{prefix} because")
        assert type(raised) is getattr(errors, name), prefix
        assert str(raised) == "because"
