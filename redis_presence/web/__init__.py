"""The web service of `redis-presence serve`: dashboard, JSON API, SSE, metrics, health.

Needs the ``web`` extra (``pip install 'redis-presence[web]'``): Starlette, uvicorn,
sse-starlette, prometheus_client and Jinja2. Templates and static files ship inside the
package; the pages load nothing from anywhere else.
"""

from __future__ import annotations

from .app import create_app
from .service import WebConfig

__all__ = ["WebConfig", "create_app"]
