"""The jobs the RQ integration tests enqueue for real ``rq worker`` processes.

A work horse imports this module by name (``rq_jobs.hold``): ``RP_BROKER_URL`` is the
test's broker database, where the release keys live.
"""

from __future__ import annotations

import os

import redis

# No socket timeout: `hold` blocks on BLPOP for as long as the test keeps it running.
_control = redis.Redis.from_url(os.environ["RP_BROKER_URL"], socket_timeout=None)


def hold(token: str) -> None:
    """Run until the test pushes to ``rp:release:<token>`` (a long job under its control)."""
    _control.rpush(f"rp:started:{token}", 1)
    _control.blpop([f"rp:release:{token}"], timeout=60)


def tick(key: str) -> None:
    """Count one run in ``key`` (the benchmark's job)."""
    _control.incr(key)
