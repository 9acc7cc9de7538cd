"""Every error the API answers is ``application/problem+json`` (RFC 9457).

The body carries the same stable ``kind`` and one-line message the CLI prints under
``--json`` (``{"error": {"kind": …, "message": …}}`` there; ``kind`` and ``detail``
here), and the HTTP status the state machines imply: a refused transition is 409,
an unknown id 404, bad input 422 (400 when the request itself cannot be read). Never
a traceback, a path or SQL: anything unexpected is a bare 500, and an unavailable
ledger or store is a 503 with its stable kind and a neutral line (the server log has
the message the CLI would print).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from core.errors import (
    BadInput,
    Conflict,
    IngestDeskError,
    KeyReused,
    LedgerUnavailable,
    LedgerUnreachable,
    NotFound,
    StoreUnavailable,
    StoreUnreachable,
)
from core.filters import FilterTooLarge

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_S = 2  # seconds a client is asked to wait while the ledger is unreachable
log = logging.getLogger("ingestdesk.api")

# Most specific first: SchemaTooNew is a LedgerUnavailable, and so on.
STATUS_OF: tuple[tuple[type[IngestDeskError], int], ...] = (
    # Refused for its size before it is looked at, as a body over its cap is (413).
    (FilterTooLarge, 400),
    (BadInput, 422),
    # The IETF Idempotency-Key draft: a key reused with another payload is 422.
    (KeyReused, 422),
    (Conflict, 409),
    (NotFound, 404),
    (LedgerUnavailable, 503),
    (StoreUnavailable, 503),
)
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# What each status means in the CLI's words, for problems that are not ours.
KIND_OF_STATUS = {
    400: "BadInput",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "BadInput",
    409: "Conflict",
    413: "BadInput",
    415: "BadInput",
    422: "BadInput",
    503: "LedgerUnavailable",
}
# What a client is told when the ledger or the store fails. Their own messages name
# the ledger's file or URL and quote the driver's error: right for the operator at
# the CLI, not for whoever can reach the API. The kind stays, so clients can still
# tell the two apart.
UNAVAILABLE_DETAIL: tuple[tuple[type[IngestDeskError], str], ...] = (
    (StoreUnavailable, "the object store is unavailable; try again later"),
    (LedgerUnavailable, "the ledger is unavailable; try again later"),
)


# The body of every error, for the OpenAPI document.
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Problem",
    "required": ["type", "title", "status", "detail", "kind"],
    "properties": {
        "type": {"type": "string", "example": "urn:ingestdesk:problem:Conflict"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "one line: the CLI's message"},
        "kind": {"type": "string", "description": "the CLI's error kind under --json"},
    },
}


def responses(described: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """An endpoint's OpenAPI ``responses`` for the errors it may answer, each as
    problem+json: ``{409: "why", …}``."""
    return {
        status: {"description": why, "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA}}}
        for status, why in described.items()
    }


class ApiProblem(Exception):
    """A refusal the API itself makes (authentication, roles, request shape).

    Its headers are its own copy: refusals are often built from a module-level
    mapping (the 401's challenge), and whatever adds a header to one refusal
    (``Connection: close`` for one sent before its body was read) must not add it to
    every later one. A shared dict once did exactly that: after one 401 on a request
    with a body, every 401 closed its connection."""

    def __init__(
        self, status: int, kind: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers: dict[str, str] = dict(headers or {})


def problem(
    status: int, kind: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """One problem+json response (``headers`` are copied, never kept)."""
    body = {
        "type": f"urn:ingestdesk:problem:{kind}",
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "kind": kind,
    }
    return JSONResponse(
        body, status_code=status, media_type=PROBLEM_JSON, headers=dict(headers or {})
    )


def status_of(exc: IngestDeskError) -> int:
    for cls, status in STATUS_OF:
        if isinstance(exc, cls):
            return status
    return 500


def public_detail(exc: IngestDeskError) -> str:
    """What a client over HTTP is told of ``exc``: its message, unless it is about
    the ledger or store being unavailable (see UNAVAILABLE_DETAIL)."""
    for cls, detail in UNAVAILABLE_DETAIL:
        if isinstance(exc, cls):
            return detail
    return exc.message


def install(app: FastAPI) -> None:
    """Answer every error as problem+json."""

    @app.exception_handler(IngestDeskError)
    async def _ours(request: Request, exc: IngestDeskError) -> JSONResponse:
        detail = public_detail(exc)
        if detail != exc.message:
            log.warning("%s %s: %s", request.method, request.url.path, exc.message)
        # A ledger or store away for now (restarting, locked, full): a client may
        # come back soon.
        away = isinstance(exc, LedgerUnreachable | StoreUnreachable)
        headers = {"Retry-After": str(RETRY_AFTER_S)} if away else None
        return problem(status_of(exc), type(exc).__name__, detail, headers)

    @app.exception_handler(ApiProblem)
    async def _api(_request: Request, exc: ApiProblem) -> JSONResponse:
        return problem(exc.status, exc.kind, exc.detail, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        # A body that is not JSON at all is a request that cannot be read (400), not
        # a well-formed one whose values are refused (422).
        if any(error.get("type") == "json_invalid" for error in errors):
            return problem(400, "BadInput", "the body is not valid JSON")
        # One line, in the CLI's manner: which parameter, and what is wrong with it.
        parts = []
        for error in errors:
            where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("query", "path"))
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        return problem(422, "BadInput", "; ".join(parts) or "the request was not understood")

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _exc: ClientDisconnect) -> JSONResponse:
        # The client hung up while its body was being read (or the server hung up on a
        # stalled one while stopping): nothing was stored and nobody is left to read
        # an answer (the server drops it). One line, not a traceback.
        log.info(
            "%s %s: the client went away before its body was read", request.method, request.url.path
        )
        return problem(400, "BadInput", "the request body ended before it was complete")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = KIND_OF_STATUS.get(exc.status_code, "Error")
        detail = exc.detail if isinstance(exc.detail, str) else TITLES.get(exc.status_code, "")
        return problem(exc.status_code, kind, detail, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        # The trace goes to the server's log, never to the client.
        log.error("unexpected %s", type(exc).__name__, exc_info=exc)
        return problem(500, "InternalError", "an unexpected error; the server log has the details")
