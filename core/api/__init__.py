"""The HTTP API (FastAPI). Imported only by ``ingestdesk serve`` and ASGI servers:
the CLI's other commands never load FastAPI.

Run it with ``ingestdesk serve``, or by import path with any ASGI server, configured
by the same environment as the CLI (``INGESTDESK_DB``, ``INGESTDESK_STORE``)::

    uvicorn --factory core.api:app_from_environment --timeout-graceful-shutdown 9

(the bound ``ingestdesk serve`` sets itself, see :mod:`core.api.server`: without it,
one stalled client keeps the server from stopping).
"""

from __future__ import annotations

from fastapi import FastAPI

from core.api.app import create_app
from core.config import settings_from


def app_from_environment() -> FastAPI:
    """The app for the ledger the environment (or ./.ingestdesk/) points at."""
    return create_app(settings_from())


__all__ = ["app_from_environment", "create_app"]
