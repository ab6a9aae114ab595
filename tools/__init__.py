"""Development tools, run from a checkout as ``python -m tools.<name>``; the wheel ships none
of them (pyproject.toml packages `redis_presence` only)."""
