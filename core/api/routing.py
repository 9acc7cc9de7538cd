"""How every route of the API runs, in one place rather than in each endpoint.

- **Who is calling is settled before the body is read.** FastAPI reads and parses a
  route's body before it solves the route's dependencies, so a token check written as
  a dependency comes after a client without one has made the server hold its whole
  body. :class:`GuardedRoute` runs the role check first, then reads the body; a
  refusal sent while a body is still unread closes the connection (:func:`hang_up`).
- **A JSON body is small and is JSON.** The review decisions take a reason and a
  number: a body over JSON_BODY_MAX_BYTES is refused (413) as soon as its
  Content-Length says so, or as it streams in, and a body that is not
  ``application/json`` is 415. (Uploads are multipart and stream in under their own
  cap: :mod:`core.api.uploads`.)
- **Each operation documents the errors it may answer,** as problem+json: 401/403
  where a role is needed, 422 where there are parameters, 400/413/415 where there is
  a JSON body, 503 everywhere (every route reads the ledger).
- **HEAD answers wherever GET does** (RFC 9110): :class:`HeadAsGet`.
"""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import params
from fastapi.dependencies.utils import get_flat_params
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api.auth import Requires, authorize
from core.api.problems import ApiProblem, responses
from core.states import Role

JSON_BODY_MAX_BYTES = 64 * 1024  # bytes of a JSON request body at most (a reason, a number)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type is one FastAPI parses as JSON: ``application/json`` or
    ``application/…+json``, with any parameters."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


def _declared_length(request: Request) -> int | None:
    length = request.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


def has_body(request: Request) -> bool:
    """Whether the request says a body follows its headers."""
    length = _declared_length(request)
    return (length is not None and length > 0) or "transfer-encoding" in request.headers


def hang_up(refusal: ApiProblem) -> ApiProblem:
    """``refusal``, answered with ``Connection: close``: sent before the body was read
    in full, so the server closes instead of draining the rest to keep the connection
    (a client could otherwise make it swallow gigabytes it already refused)."""
    refusal.headers.setdefault("Connection", "close")
    return refusal


def _too_large() -> ApiProblem:
    return ApiProblem(
        413, "BadInput", f"the request body is over the limit of {JSON_BODY_MAX_BYTES} bytes"
    )


async def _capped_json_body(request: Request) -> Request:
    """``request`` with its JSON body read under the cap, for FastAPI to parse.

    Refused before a byte is read when the headers already say no: a Content-Length
    over the cap (413), or a body that is not JSON (415)."""
    if not has_body(request):
        return request
    length = _declared_length(request)
    if length is not None and length > JSON_BODY_MAX_BYTES:
        raise _too_large()
    if not is_json(request.headers.get("content-type")):
        raise ApiProblem(415, "BadInput", "send the body as application/json")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > JSON_BODY_MAX_BYTES:
            raise _too_large()
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await request.receive()
        replayed = True
        return {"type": "http.request", "body": bytes(body), "more_body": False}

    return Request(request.scope, replay)


def _roles(route: APIRoute) -> list[Role]:
    """The roles a route's dependencies ask for (one, for every route of ours)."""
    return [d.call.role for d in route.dependant.dependencies if isinstance(d.call, Requires)]


def _reads_json(route: APIRoute) -> bool:
    return route.body_field is not None and not isinstance(route.body_field.field_info, params.Form)


class GuardedRoute(APIRoute):
    """An APIRoute that checks the caller before the body is read, caps a JSON body,
    and documents the errors every route of its kind may answer."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        described: dict[int, str] = {503: "the ledger or the object store is unavailable"}
        if _roles(self):
            described[401] = "no valid bearer token (the token is missing, unknown or revoked)"
            described[403] = "the token's role may not do this"
        if get_flat_params(self.dependant) or self.body_field is not None:
            # Declared here, FastAPI adds no default 422 with its own schema.
            described[422] = "a parameter or the body is refused"
        if _reads_json(self):
            described[400] = "the body is not valid JSON"
            described[413] = f"the body is over {JSON_BODY_MAX_BYTES} bytes"
            described[415] = "the body is not application/json"
        # What the endpoint says about a status wins over the generic line; listed in
        # order of status, as the docs page shows them.
        merged = {**responses(described), **self.responses}
        self.responses = dict(sorted(merged.items(), key=lambda item: str(item[0])))

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        roles = _roles(self)
        reads_json = _reads_json(self)

        async def guarded(request: Request) -> Response:
            try:
                for role in roles:
                    await authorize(request, role)
                if reads_json:
                    request = await _capped_json_body(request)
            except ApiProblem as refusal:
                if has_body(request):
                    hang_up(refusal)
                raise
            return await handler(request)

        return guarded


class HeadAsGet:
    """ASGI middleware: a HEAD request is answered as the GET would be, status and
    headers, without the body (RFC 9110 §9.3.2).

    FastAPI's routes answer only the methods they name, so without this every HEAD is
    405. The scope is copied: the server keeps seeing HEAD, and sends no body either.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app(dict(scope, method="GET"), receive, headers_only)
