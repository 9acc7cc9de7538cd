"""A :class:`~core.ingest.providers.RemoteProvider` reached over HTTP (the wire
protocol of :mod:`core.demo_provider`), with httpx.

What matters here is the mapping of what happened on the wire to the three
outcomes of a submit. Only a failure that provably happened before a request byte
left is :class:`NotSent` (the connection was never made, or the provider said
``unavailable`` before doing anything); everything after the request may have been
sent is :class:`OutcomeUnknown`, including answers this client does not understand.
A look-up is stricter still: ``not_found`` is believed only when the provider itself
says it (its JSON), because a 404 from a wrong URL or a proxy, read as "never
received", would invite a second send.

Replies are returned as received; callers verify them (:func:`verify`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Sequence
from typing import Any

import httpx

from core.ingest.providers import (
    Lookup,
    LookupState,
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
    ProviderReply,
)

DEFAULT_TIMEOUT_S = 10.0  # seconds to wait for a reply (read, write, a free connection)
CONNECT_TIMEOUT_S = 5.0  # seconds to establish a connection (at most the timeout above)
MAX_REPLY_BYTES = 512 * 1024 * 1024  # bytes: a bigger reply is refused, not held in memory
DETAIL_MAX = 120  # characters of a provider's own error detail quoted in a message
INFO_PATH = "/v1/info"
SUBMIT_PATH = "/v1/embeddings"
_KEY = re.compile(r"[0-9a-f]{64}")
# Failures of the connection itself: no request byte was written.
_NEVER_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.UnsupportedProtocol,
)
_STATES = {"done": LookupState.DONE, "running": LookupState.RUNNING, "failed": LookupState.FAILED}


class _Unusable(Exception):
    """A reply this client cannot use; the message says why (short)."""


def shown_url(url: str) -> str:
    """``url`` without credentials or query, fit for a message or a log line."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return "<invalid URL>"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{host}{port}{parsed.path.rstrip('/')}"


def _new_client(url: str, timeout_s: float) -> httpx.AsyncClient:
    """An httpx client for ``url``.

    Raises:
        ValueError: ``url`` is not an http(s) URL with a host.
    """
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{shown_url(url)} is not a URL") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{shown_url(url)} is not an http(s) URL")
    return httpx.AsyncClient(
        base_url=url,
        timeout=httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)),
        # No proxies from the environment: a proxy turns "connection refused" (never
        # sent) into a 502 (outcome unknown), blurring the one distinction that
        # decides whether a request may be sent again.
        trust_env=False,
        follow_redirects=False,
    )


async def _exchange(
    client: httpx.AsyncClient, method: str, path: str, body: Any = None
) -> tuple[int, bytes]:
    """Status and body of one request; the body is read whole, up to a cap.

    Raises:
        httpx.HTTPError: The transport failed.
        _Unusable: The reply is larger than :data:`MAX_REPLY_BYTES`.
    """
    request = client.build_request(method, path, json=body)
    response = await client.send(request, stream=True)
    try:
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > MAX_REPLY_BYTES:
                raise _Unusable(f"a reply over {MAX_REPLY_BYTES} bytes")
        return response.status_code, bytes(data)
    finally:
        await response.aclose()


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        raise _Unusable("a reply that is not JSON") from None
    if not isinstance(value, dict):
        raise _Unusable("a reply that is not a JSON object")
    return value


def _error_of(data: bytes) -> str | None:
    """The ``error`` a provider's JSON reply names, if it is one."""
    try:
        error = _json_object(data).get("error")
    except _Unusable:
        return None
    return error if isinstance(error, str) else None


def _count(value: object, what: str, lowest: int = 0) -> int:
    # bool is an int to Python, not in a provider's JSON.
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise _Unusable(f"a reply with a bad {what}")
    return value


def _parse_reply(data: bytes, request_key: str) -> ProviderReply:
    """The reply in a 200 body: as received, not verified; short pieces kept short.

    Raises:
        _Unusable: Not a finished reply for ``request_key``.
    """
    body = _json_object(data)
    if body.get("request_key") != request_key:
        raise _Unusable("a reply for another request")
    if body.get("status", "done") != "done":
        raise _Unusable("a reply that is not finished")
    request_id, checksum, encoded = (
        body.get("request_id"),
        body.get("checksum"),
        body.get("vectors"),
    )
    if not isinstance(request_id, str) or not request_id:
        raise _Unusable("a reply without a request id")
    if not isinstance(checksum, str) or not isinstance(encoded, str):
        raise _Unusable("a reply without vectors or checksum")
    count = _count(body.get("count"), "count")
    dimensions = _count(body.get("dimensions"), "dimensions", lowest=1)
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _Unusable("a reply whose vectors are not base64") from None
    size = 4 * dimensions  # float32
    # A leftover partial piece stays a (short) vector: verify() then refuses the
    # reply for its size instead of a shorter list passing as a different count.
    vectors = [blob[i : i + size] for i in range(0, len(blob), size)]
    raw_usage = body.get("usage")
    usage = (
        {k: v for k, v in raw_usage.items() if isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(raw_usage, dict)
        else {}
    )
    return ProviderReply(
        request_id=request_id,
        vectors=vectors,
        count=count,
        dimensions=dimensions,
        checksum=checksum,
        usage=usage,
    )


def _check_key(request_key: str) -> None:
    # It goes into a URL path: anything but the key's own shape is a caller's bug.
    if not _KEY.fullmatch(request_key):
        raise ValueError("a request key is 64 lowercase hex digits")


class HttpProvider:
    """A remote embedding provider over HTTP. Build it with :meth:`connect`, which
    asks the provider what it is; close it with :meth:`aclose`."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        version: str,
        dimensions: int,
        resend_safe: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """
        Raises:
            ValueError: ``url`` is not an http(s) URL.
        """
        self._client = client if client is not None else _new_client(url, timeout_s)
        self.name = name
        self.version = version
        self.dimensions = dimensions
        # What the shared ledger records with each request and what reconcile connects
        # to later: never the credentials or query (API keys) a URL may carry, which
        # every reader of the ledger would see. A provider that needs them is
        # reconciled with ``ingestdesk reconcile --provider URL``.
        self.endpoint = shown_url(url)
        self.resend_safe = resend_safe
        self._shown = shown_url(url)

    @classmethod
    async def connect(cls, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> HttpProvider:
        """The provider at ``url``, as its ``/v1/info`` describes it.

        Raises:
            NotSent: Not an http(s) URL, unreachable, or not answering as a provider.
        """
        try:
            client = _new_client(url, timeout_s)
        except ValueError as exc:
            raise NotSent(f"cannot reach the provider: {exc}") from None
        shown = shown_url(url)
        try:
            status, data = await _exchange(client, "GET", INFO_PATH)
            if status != 200:
                raise _Unusable(f"HTTP {status} from {INFO_PATH}")
            info = _json_object(data)
            name, model = info.get("name"), info.get("model")
            resend_safe = info.get("resend_safe", False)
            if not isinstance(name, str) or not isinstance(model, str) or not name or not model:
                raise _Unusable(f"no name or model in {INFO_PATH}")
            if not isinstance(resend_safe, bool):
                raise _Unusable(f"a bad resend_safe in {INFO_PATH}")
            dimensions = _count(info.get("dimensions"), "dimensions", lowest=1)
        except httpx.HTTPError as exc:
            await client.aclose()
            raise NotSent(f"cannot reach the provider at {shown} ({type(exc).__name__})") from None
        except _Unusable as exc:
            await client.aclose()
            raise NotSent(f"{shown} is not an embedding provider: {exc}") from None
        return cls(
            url,
            name=name,
            version=model,
            dimensions=dimensions,
            resend_safe=resend_safe,
            client=client,
        )

    async def submit(
        self, request_key: str, texts: Sequence[str], *, retry_failed: bool = False
    ) -> ProviderReply:
        """Send one request; see :meth:`RemoteProvider.submit`.

        Raises:
            NotSent: The connection was never made, or the provider answered
                ``unavailable`` (it records nothing before that answer).
            OutcomeUnknown: Sent, and no usable reply: a timeout or a dropped
                connection after the request went, a 5xx, still running, or a reply
                that cannot be read.
            ProviderRejected: The provider refused the request (400/422).
        """
        _check_key(request_key)
        body: dict[str, Any] = {"request_key": request_key, "texts": list(texts)}
        if retry_failed:
            body["retry_failed"] = True
        where = f"provider {self._shown}"
        try:
            status, data = await _exchange(self._client, "POST", SUBMIT_PATH, body)
        except _NEVER_SENT as exc:
            raise NotSent(f"{where}: not reached ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise OutcomeUnknown(f"{where}: no reply ({type(exc).__name__})") from None
        except _Unusable as exc:
            raise OutcomeUnknown(f"{where}: {exc}") from None
        if status == 200:
            try:
                return _parse_reply(data, request_key)
            except _Unusable as exc:
                raise OutcomeUnknown(f"{where}: {exc}") from None
        error = _error_of(data)
        if status == 503 and error == "unavailable":
            raise NotSent(f"{where}: unavailable")
        if status in (400, 422):
            detail = _detail_of(data) or error or f"HTTP {status}"
            raise ProviderRejected(f"{where}: rejected the request: {detail}")
        if status == 202:
            raise OutcomeUnknown(f"{where}: still running")
        raise OutcomeUnknown(f"{where}: HTTP {status}")

    async def lookup(self, request_key: str) -> Lookup:
        """What the provider knows of ``request_key``.

        Raises:
            LookupUnavailable: No trustworthy answer now.
        """
        _check_key(request_key)
        status, data = await self._read(f"{SUBMIT_PATH}/{request_key}", "look-up")
        where = f"provider {self._shown}: look-up"
        if status == 404:
            # Believed only from the provider itself: see the module docstring.
            if _error_of(data) == "not_found":
                return Lookup(LookupState.NOT_FOUND)
            raise LookupUnavailable(f"{where}: HTTP 404 that is not the provider's")
        if status != 200:
            raise LookupUnavailable(f"{where}: HTTP {status}")
        try:
            body = _json_object(data)
        except _Unusable as exc:
            raise LookupUnavailable(f"{where}: {exc}") from None
        status_text = body.get("status")
        state = _STATES.get(status_text) if isinstance(status_text, str) else None
        request_id = body.get("request_id")
        if state is None or body.get("request_key", request_key) != request_key:
            raise LookupUnavailable(f"{where}: an answer it cannot read")
        return Lookup(state, request_id if isinstance(request_id, str) else None)

    async def fetch(self, request_key: str) -> ProviderReply:
        """The result of a request the provider finished (never truncated on purpose).

        Raises:
            LookupUnavailable: No usable result now.
        """
        _check_key(request_key)
        status, data = await self._read(f"{SUBMIT_PATH}/{request_key}/result", "fetch")
        where = f"provider {self._shown}: fetch"
        if status != 200:
            raise LookupUnavailable(f"{where}: HTTP {status}")
        try:
            return _parse_reply(data, request_key)
        except _Unusable as exc:
            raise LookupUnavailable(f"{where}: {exc}") from None

    async def _read(self, path: str, what: str) -> tuple[int, bytes]:
        try:
            return await _exchange(self._client, "GET", path)
        except httpx.HTTPError as exc:
            raise LookupUnavailable(
                f"provider {self._shown}: {what} failed ({type(exc).__name__})"
            ) from None
        except _Unusable as exc:
            raise LookupUnavailable(f"provider {self._shown}: {what}: {exc}") from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _detail_of(data: bytes) -> str | None:
    """A provider's own ``detail`` for a refusal, cut short and on one line."""
    try:
        detail = _json_object(data).get("detail")
    except _Unusable:
        return None
    if not isinstance(detail, str):
        return None
    # A provider's text may hold control characters; a terminal would obey them.
    printable = "".join(c if c.isprintable() else " " for c in detail)
    return " ".join(printable.split())[:DETAIL_MAX] or None
