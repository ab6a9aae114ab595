"""The package's version: the one place it is written.

pyproject.toml reads it at build time (``[tool.hatch.version]``); ``redis-presence
--version``, the reporter's ``version`` metadata and the OpenAPI document read it here, so a
checkout that was never installed reports the same number as a wheel. The Node client
(clients/node/package.json) carries the same number: tests/test_release.py keeps the two
equal, and CHANGELOG.md says why.
"""

from __future__ import annotations

__version__ = "0.2.0"
