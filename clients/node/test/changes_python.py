"""The Python package's side of test/changes.test.mjs: one call, its answer as JSON.

Arguments: one JSON object (``url``, ``prefix``, ``op``, and the op's). Instants go both ways
as decimal strings (JSON numbers above 2**53 do not survive JavaScript)."""

from __future__ import annotations

import json
import sys

from redis_presence import RedisPresenceRegistry
from redis_presence.events import EventCursor


def main() -> None:
    asked = json.loads(sys.argv[1])
    if asked.get("op") == "recode":
        print(json.dumps({"cursor": EventCursor.decode(asked["cursor"]).encode()}))
        return
    registry = RedisPresenceRegistry.from_url(asked["url"], prefix=asked["prefix"])
    now = asked.get("now_ns")
    answer = registry.changes(
        asked.get("cursor"),
        now_ns=None if now is None else int(now),
        queue=asked.get("queue"),
        group=asked.get("group"),
        limit=asked.get("limit", 1000),
    )
    events = [
        {k: str(v) if k.endswith("_ns") and v is not None else v for k, v in e.to_dict().items()}
        for e in answer.events
    ]
    print(json.dumps({"events": events, "cursor": answer.cursor, "more": answer.more}))
    registry.close()


if __name__ == "__main__":
    main()
