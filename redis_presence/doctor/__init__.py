"""`redis-presence doctor`: every check of a Redis deployment, and what to do about each.

Two modules, one job each: `checks` reads a deployment (each check an ordinary plan, sending
nothing that writes; `diagnose` runs them through a registry), and `findings` decides from
what they read what is wrong and what to do (plain functions of the values read, no I/O).
"""

from __future__ import annotations

from .checks import diagnose
from .findings import ROLES, TESTED_RELEASES, Finding, Status, version_finding, worst

__all__ = ["ROLES", "TESTED_RELEASES", "Finding", "Status", "diagnose", "version_finding", "worst"]
