"""The demo: real broker processes (`broker`) and the story played with them (`story`)."""

from __future__ import annotations

from .broker import DEMO_GROUPS, broker_consumers, run_broker
from .story import run_demo

__all__ = ["DEMO_GROUPS", "broker_consumers", "run_broker", "run_demo"]
