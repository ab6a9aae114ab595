"""`python -m redis_presence.cli`: the same as the `redis-presence` console script."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    main()
