"""`redis-presence unexpect`: forget a declared group (defined with `expect`)."""

from __future__ import annotations

from .expect import unexpect as command

__all__ = ["command"]
