"""The ASGI app: the HTTP face of the ledger, beside the CLI and the dashboard.

It only creates and reads work: uploads, submits (202 at once), cancels, retries,
publishes and reads go through the same ledger roles the CLI uses; workers run
elsewhere (``ingestdesk worker`` processes on the same ledger). One ledger is opened
per process at start-up and closed at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from core.api import documents, indexes, problems, service, tasks, versions
from core.api.auth import Gate
from core.api.bodies import BodyGuard, BodyLimits
from core.api.context import filtered_reads
from core.api.routing import HeadAsGet
from core.api.uploads import upload_slots
from core.config import Settings
from core.gc_tuning import tuned_for_interactive_use
from core.ledger import Ledger

API_TITLE = "ingestdesk"
API_VERSION = "1"


def create_app(settings: Settings, bodies: BodyLimits | None = None) -> FastAPI:
    """The app for the ledger and store in ``settings`` (opened when it starts);
    ``bodies``: how long a request body may take (:mod:`core.api.bodies`)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledger = await Ledger.open(settings)
        app.state.ledger = ledger
        # Open mode is decided here, once (see core.api.auth).
        app.state.gate = await Gate.start(ledger)
        app.state.upload_slots = upload_slots()
        app.state.filtered_reads = filtered_reads()
        try:
            # A full collection walked every start-up object (FastAPI's routes and
            # models, SQLAlchemy's metadata): 76-80 ms, inside whichever request
            # set it off (see core.gc_tuning).
            with tuned_for_interactive_use():
                yield
        finally:
            await ledger.close()

    # The docs page's scripts are served from the package, not a CDN: it works
    # on a machine with no internet, as the service itself does. No /redoc: the
    # packaged ReDoc still loads its logo from cdn.redoc.ly, and /docs says it all.
    app = FastAPIOffline(
        redoc_url=None,
        title=API_TITLE,
        version=API_VERSION,
        description="Upload documents, submit them for ingestion (202 at once), watch, "
        "cancel, retry; upload new versions, review, publish, reject, withdraw, delete; "
        "list, create, activate and drop vector indexes. "
        "Errors are application/problem+json.",
        lifespan=lifespan,
    )
    problems.install(app)
    app.add_middleware(HeadAsGet)
    # Outermost: it sees the answer as it leaves, whatever inside refused the body.
    app.add_middleware(BodyGuard, limits=bodies or BodyLimits())
    app.include_router(documents.router)
    app.include_router(versions.router)
    app.include_router(tasks.router)
    app.include_router(indexes.router)
    app.include_router(service.router)
    return app
