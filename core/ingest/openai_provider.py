"""Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, Azure OpenAI, Ollama,
vLLM, TEI, LocalAI) as a :class:`~core.ingest.providers.RemoteProvider`, with httpx.

The contract, made explicit under seed 001's rule. Such an endpoint has **no look-up
by request key**: it keeps nothing a client could ask about later. So:

* a reply lost after the request may have left (a timeout, a dropped connection, a
  5xx, a body that cannot be read) is :class:`OutcomeUnknown`, and its look-up answers
  ``no_lookup`` — never "not found", which nobody can know. Reconcile then sends it to
  review, or, when the operator declared the endpoint resend-safe (embeddings have no
  side effect, but each send is paid for), lets it be sent again, a bounded number of
  times (:data:`core.ingest.reconcile.BLIND_SENDS_MAX`);
* a 429 is an answer before any work: :class:`NotSent`, with the endpoint's
  ``Retry-After`` (seconds or an HTTP date) as the earliest next attempt
  (``provider_rate_limited``);
* a refused API key (401/403, or a 429 saying the quota is gone) is :class:`NotSent`
  too, but not worth retrying by itself (``provider_auth_failed``);
* an input over the model's token limit is refused by the endpoint (400/413/422) and
  becomes ``input_too_long``, naming the input; nothing is ever cut to fit here (some
  servers cut on their own: Ollama, TEI with ``--auto-truncate``; that cannot be seen
  from outside);
* a reply is verified by count and dimensions; its vectors are L2-normalised float32
  little-endian bytes, and the checksum is computed here (the endpoint gives none).

The API key is read from the environment (:data:`API_KEY_ENV`, else
:data:`FALLBACK_API_KEY_ENV`, or the variable the ``api_key_env`` option names) and
never shown: not in ``repr``, messages, the ledger (which records the endpoint
without credentials) or a command line.

Azure OpenAI: give the deployment's URL as the base
(``https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT``) and the
``api_version`` option: requests then carry ``?api-version=…`` and the key in an
``api-key`` header instead of ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from core.ingest.http_provider import _NEVER_SENT, CONNECT_TIMEOUT_S, MAX_REPLY_BYTES, shown_url
from core.ingest.openai_wire import (
    INPUT_INDEX,
    TOKENS,
    TOO_LONG,
    TOO_LONG_CODES,
    Unusable,
    error_of,
    parse_embeddings,
    retry_after_s,
)
from core.ingest.providers import (
    Lookup,
    LookupState,
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
    ProviderReply,
    vectors_checksum,
)
from core.states import ErrorCode

KIND_PREFIX = "openai+"  # worker --provider openai+https://…: this kind of endpoint
API_KEY_ENV = "INGESTDESK_EMBEDDINGS_API_KEY"
FALLBACK_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_TIMEOUT_S = 60.0  # seconds: a large batch on a busy endpoint takes a while
DEFAULT_MAX_INPUTS = 2048  # inputs per request: OpenAI's limit (TEI's default is 32)
MAX_INPUTS_CEILING = 100_000  # beyond it a typo
DETAIL_MAX = 160  # characters of an endpoint's own message quoted
PROBE_TEXT = "ingestdesk dimension probe"
# float: every server speaks it. base64 (OpenAI, vLLM, TEI): 4x smaller, and read in
# C; a 64 x 1536 float reply is ~2 MB of JSON whose parse holds the event loop ~65 ms.
ENCODINGS = ("float", "base64")
PROBE_ATTEMPTS = 3  # probes at start, when the endpoint answers 429
PROBE_WAIT_MAX_S = 30.0  # seconds one 429 of the probe is waited out at most
OPTIONS = (
    "api_key_env",
    "api_version",
    "encoding_format",
    "max_inputs",
    "proxy_from_env",
    "resend_safe",
    "send_dimensions",
    "timeout_s",
)
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


class _Key:
    """An API key that does not show itself: not in its holder's ``repr`` or
    ``vars``, not in a log line or a message that formats it by mistake."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<API key, hidden>"

    __str__ = __repr__


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"option {name} must be true or false (got {value[:20]!r})")


def _whole(name: str, value: str, lowest: int, highest: int) -> int:
    try:
        number = int(value)
    except ValueError:
        number = lowest - 1
    if not lowest <= number <= highest:
        raise ValueError(f"option {name} must be a whole number from {lowest} to {highest}")
    return number


def api_key_from(environ: Mapping[str, str], name: str | None = None) -> str | None:
    """The API key in ``environ``: the variable ``name``, or :data:`API_KEY_ENV`, else
    :data:`FALLBACK_API_KEY_ENV`; None if none is set (an endpoint without keys)."""
    names = (name,) if name else (API_KEY_ENV, FALLBACK_API_KEY_ENV)
    for candidate in names:
        value = environ.get(candidate, "").strip()
        if value:
            return value
    return None


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts (a command line's) as options, each checked.

    Raises:
        ValueError: Not KEY=VALUE, a key given twice, or an unknown key.
    """
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{pair[:40]!r} is not KEY=VALUE")
        if key not in OPTIONS:
            raise ValueError(f"unknown option {key[:40]!r}; known: {', '.join(OPTIONS)}")
        if key in options:
            raise ValueError(f"option {key} given twice")
        options[key] = value.strip()
    return options


def base_of(url: str) -> str:
    """``url`` without the :data:`KIND_PREFIX` and trailing slashes."""
    return url.strip().removeprefix(KIND_PREFIX).rstrip("/")


def _new_client(base: str, timeout_s: float, proxy_from_env: bool) -> httpx.AsyncClient:
    """An httpx client for the endpoint at ``base``. Proxies from the environment
    (HTTPS_PROXY…) only when asked: a proxy turns "connection refused" (nothing sent)
    into a 502 (an unknown outcome), but an endpoint may be reachable no other way.

    Raises:
        ValueError: ``base`` is not an http(s) URL with a host.
    """
    try:
        parsed = httpx.URL(base)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{shown_url(base)} is not a URL") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{shown_url(base)} is not an http(s) URL")
    return httpx.AsyncClient(
        base_url=base,
        timeout=httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s)),
        trust_env=proxy_from_env,
        follow_redirects=False,
    )


class OpenAIEmbeddings:
    """An OpenAI-compatible embeddings endpoint. Build it with (base URL, model,
    dimensions, options); close it with :meth:`aclose`.

    Options (strings, as an index definition stores them): ``max_inputs`` (inputs per
    request, default :data:`DEFAULT_MAX_INPUTS`), ``send_dimensions`` (send
    ``dimensions`` with each request: models that can shorten their vectors, such as
    text-embedding-3-*), ``resend_safe`` (the operator's declaration), ``api_version``
    (Azure), ``api_key_env`` (the variable holding the key), ``timeout_s``,
    ``proxy_from_env`` (use HTTPS_PROXY and the like; off by default),
    ``encoding_format`` (``float``, or ``base64`` where the server speaks it).
    """

    name = "openai-compatible"
    kind = "openai"  # the index registry's kind (core.ingest.embedders)

    def __init__(
        self,
        base_url: str,
        model: str,
        dimensions: int,
        options: Mapping[str, str] | None = None,
        *,
        resend_safe: bool | None = None,
        environ: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """
        Raises:
            ValueError: Not an http(s) URL, no model, dimensions below 1, or an
                option that is unknown or out of range (nothing is ignored).
        """
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown option {unknown[0][:40]!r}; known: {', '.join(OPTIONS)}")
        if not model.strip():
            raise ValueError("an OpenAI-compatible endpoint needs a model name")
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        base = base_of(base_url)
        self.version = self.model = model.strip()
        self.dimensions = dimensions
        self.max_inputs = _whole(
            "max_inputs", opts.get("max_inputs", str(DEFAULT_MAX_INPUTS)), 1, MAX_INPUTS_CEILING
        )
        self.send_dimensions = _flag("send_dimensions", opts.get("send_dimensions", "false"))
        self.encoding_format = opts.get("encoding_format", "float").strip().lower()
        if self.encoding_format not in ENCODINGS:
            raise ValueError(f"option encoding_format must be one of {', '.join(ENCODINGS)}")
        # What of the options makes other vectors (an index is known by them), and
        # where they are made: two endpoints serving "the same" model may not (a
        # quantised copy), and a re-embedding task must find the endpoint from the
        # index alone. The rest (timeouts, batch sizes, where the key is) does not.
        self.index_options = {"url": base} | (
            {"send_dimensions": "true"} if self.send_dimensions else {}
        )
        declared = _flag("resend_safe", opts.get("resend_safe", "false"))
        self.resend_safe = declared if resend_safe is None else resend_safe
        timeout = opts.get("timeout_s", str(DEFAULT_TIMEOUT_S))
        try:
            timeout_s = float(timeout)
        except ValueError:
            timeout_s = math.nan
        if not (math.isfinite(timeout_s) and 0 < timeout_s <= 3_600):
            raise ValueError("option timeout_s must be seconds from 0 to 3600")
        self._api_version = opts.get("api_version") or None
        found = api_key_from(os.environ if environ is None else environ, opts.get("api_key_env"))
        self._key = None if found is None else _Key(found)
        proxied = _flag("proxy_from_env", opts.get("proxy_from_env", "false"))
        self._client = client if client is not None else _new_client(base, timeout_s, proxied)
        self._shown = shown_url(base)
        # Recorded with each request, never with credentials; the prefix says what kind
        # of endpoint it is, so reconcile knows there is nothing to look up there.
        self.endpoint = KIND_PREFIX + self._shown

    def __repr__(self) -> str:
        return f"OpenAIEmbeddings({self._shown!r}, model={self.version!r}, dims={self.dimensions})"

    @classmethod
    async def connect(
        cls,
        base_url: str,
        model: str,
        dimensions: int | None = None,
        options: Mapping[str, str] | None = None,
        *,
        resend_safe: bool | None = None,
    ) -> OpenAIEmbeddings:
        """The endpoint, its dimensions asked of it with one short probe when not
        given (which also proves the key is accepted).

        Raises:
            ValueError: See the constructor.
            NotSent, OutcomeUnknown, ProviderRejected: The probe failed.
        """
        provider = cls(base_url, model, dimensions or 1, options, resend_safe=resend_safe)
        if dimensions is None:
            try:
                provider.dimensions = await provider._probe()
            except BaseException:
                await provider.aclose()
                raise
        return provider

    async def _probe(self) -> int:
        """The dimensions of the endpoint's vectors, from one short request; a 429
        is waited out (its Retry-After, held short) a few times: a worker starting
        under a rate limit is not a worker that cannot start."""
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            status, headers, data = await self._post([PROBE_TEXT], with_dimensions=False)
            if status == 200:
                break
            try:
                self._refusal(status, headers, data, [PROBE_TEXT])
            except NotSent as exc:
                if (
                    exc.error_code is not ErrorCode.PROVIDER_RATE_LIMITED
                    or attempt == PROBE_ATTEMPTS
                ):
                    raise
                await asyncio.sleep(min(exc.retry_after_s or 1.0, PROBE_WAIT_MAX_S))
        try:
            (vector,), _usage = parse_embeddings(data, 1)
        except Unusable as exc:
            raise OutcomeUnknown(f"{self._where}: probe: {exc}") from None
        return len(vector) // 4

    @classmethod
    def for_reconcile(cls, endpoint: str) -> OpenAIEmbeddings:
        """The endpoint as ``ingestdesk reconcile`` finds it in the ledger: learning
        that it has no look-up needs no model, and no operator's declaration comes with
        it, so what it cannot know goes to a person (a worker declared resend-safe
        settles its own requests, on its next attempt or look-up pass).

        Raises:
            ValueError: Not an http(s) URL.
        """
        return cls(endpoint, "not-needed-for-a-look-up", 1, resend_safe=False)

    @property
    def _where(self) -> str:
        return f"endpoint {self._shown}"

    async def _post(
        self, texts: Sequence[str], *, with_dimensions: bool = True
    ) -> tuple[int, httpx.Headers, bytes]:
        """Status, headers and body of one POST ``{base}/embeddings``.

        Raises:
            NotSent: The connection was never made.
            OutcomeUnknown: Sent, no reply (or an oversized one).
        """
        body: dict[str, Any] = {"model": self.version, "input": list(texts)}
        body["encoding_format"] = self.encoding_format
        if self.send_dimensions and with_dimensions:
            body["dimensions"] = self.dimensions
        headers: dict[str, str] = {}
        params: dict[str, str] = {}
        if self._api_version is not None:
            params["api-version"] = self._api_version
            if self._key is not None:
                headers["api-key"] = self._key.reveal()
        elif self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        request = self._client.build_request(
            "POST", "embeddings", json=body, headers=headers, params=params
        )
        try:
            response = await self._client.send(request, stream=True)
        except _NEVER_SENT as exc:
            raise NotSent(f"{self._where}: not reached ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise OutcomeUnknown(f"{self._where}: no reply ({type(exc).__name__})") from None
        try:
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > MAX_REPLY_BYTES:
                    raise OutcomeUnknown(f"{self._where}: a reply over {MAX_REPLY_BYTES} bytes")
            return response.status_code, response.headers, bytes(data)
        except httpx.HTTPError as exc:
            raise OutcomeUnknown(f"{self._where}: no reply ({type(exc).__name__})") from None
        finally:
            await response.aclose()

    async def submit(
        self, request_key: str, texts: Sequence[str], *, retry_failed: bool = False
    ) -> ProviderReply:
        """Send one request (``request_key`` never leaves this process: the endpoint
        has no use for it; ``retry_failed`` means nothing to it).

        Raises:
            NotSent: Not reached, rate limited (429, with its Retry-After), or the API
                key refused (401/403).
            OutcomeUnknown: Sent, and no usable reply.
            ProviderRejected: The endpoint refused the request (an input over the
                model's token limit: ``input_too_long``, naming the input).
        """
        if not texts:
            raise ValueError("a request needs at least one text")
        if len(texts) > self.max_inputs:
            raise ValueError(
                f"{len(texts)} texts in one request; the endpoint takes {self.max_inputs}"
            )
        status, headers, data = await self._post(texts)
        if status != 200:
            self._refusal(status, headers, data, texts)
        try:
            vectors, usage = parse_embeddings(data, len(texts))
        except Unusable as exc:
            raise OutcomeUnknown(f"{self._where}: {exc}") from None
        sizes = {len(v) // 4 for v in vectors}
        if sizes != {self.dimensions}:
            # The work was done and paid for, and doing it again gives the same: a
            # setting to fix, not a reply to look up or send again.
            got = ", ".join(str(s) for s in sorted(sizes))
            hint = (
                "" if self.send_dimensions else " (a model that shortens vectors: send_dimensions)"
            )
            raise ProviderRejected(
                f"{self._where}: answered {got} dimensions; this index has {self.dimensions}{hint}"
            )
        request_id = headers.get("x-request-id") or headers.get("openai-request-id") or ""
        return ProviderReply(
            request_id=(request_id.strip()[:128] or "none"),
            vectors=vectors,
            count=len(vectors),
            dimensions=self.dimensions,
            # Computed here: the endpoint gives none. It proves nothing about transit
            # (JSON already parsed), but the stored result is checked against it.
            checksum=vectors_checksum(vectors),
            usage=usage,
        )

    def _refusal(
        self, status: int, headers: httpx.Headers, data: bytes, texts: Sequence[str]
    ) -> None:
        """Raise what a non-200 answer means (see :meth:`submit`)."""
        message, code = error_of(data)
        quoted = self._quote(message) or f"HTTP {status}"
        if status in (401, 403) or (status == 429 and code == "insufficient_quota"):
            # The endpoint's own words are not quoted: some echo part of the key.
            what = "its account has no quota left" if status == 429 else "refused the API key"
            refused = NotSent(f"{self._where}: {what} (HTTP {status}); nothing was embedded")
            refused.error_code = ErrorCode.PROVIDER_AUTH_FAILED
            raise refused
        if status == 429:
            wait = retry_after_s(headers)
            after = "" if wait is None else f"; retry after {wait:g} s"
            limited = NotSent(f"{self._where}: rate limited (HTTP 429){after}")
            limited.error_code = ErrorCode.PROVIDER_RATE_LIMITED
            limited.retry_after_s = wait
            raise limited
        if status in (400, 413, 422) and (code in TOO_LONG_CODES or TOO_LONG.search(message)):
            raise self._too_long(message, texts)
        if 300 <= status < 400:
            # Not followed: a redirect is answered before any work, and following it
            # would send the key wherever it points. The URL is to fix.
            location = headers.get("location", "")[:200]
            target = shown_url(location) if location else "somewhere it does not say"
            raise ProviderRejected(
                f"{self._where}: redirects (HTTP {status}) to {target}; give that URL"
            )
        if 400 <= status < 500 and status not in (408, 409):
            raise ProviderRejected(f"{self._where}: refused the request (HTTP {status}): {quoted}")
        # A 5xx (or a 408/409, or an answer from something else) after the request went:
        # the endpoint may have done the work.
        raise OutcomeUnknown(f"{self._where}: HTTP {status}: {quoted}")

    def _too_long(self, message: str, texts: Sequence[str]) -> ProviderRejected:
        named = INPUT_INDEX.search(message)
        index = next((int(g) for g in named.groups() if g is not None), None) if named else None
        if index is not None and not 0 <= index < len(texts):
            index = None
        known = index is not None or len(texts) == 1
        if index is None:
            # The endpoint did not say which: the longest is the likely one, said so.
            index = max(range(len(texts)), key=lambda i: len(texts[i]))
        limit = TOKENS.search(message)
        over = f" ({limit.group(1)} tokens)" if limit else ""
        rejected = ProviderRejected(
            f"over the model's token limit{over}, {len(texts[index])} characters; "
            f"nothing was cut: {self._quote(message) or 'refused'}"
        )
        rejected.error_code = ErrorCode.INPUT_TOO_LONG
        rejected.position = index
        rejected.position_known = known
        return rejected

    def _quote(self, message: str) -> str:
        """An endpoint's own message on one line, short, without the key."""
        printable = "".join(c if c.isprintable() else " " for c in message)
        if self._key is not None:
            printable = printable.replace(self._key.reveal(), "[key]")
        return " ".join(printable.split())[:DETAIL_MAX]

    async def lookup(self, request_key: str) -> Lookup:
        """Always ``no_lookup``: the endpoint keeps nothing by request key."""
        return Lookup(LookupState.NO_LOOKUP)

    async def fetch(self, request_key: str) -> ProviderReply:
        """Raises:
        LookupUnavailable: always; the endpoint keeps no results to fetch."""
        raise LookupUnavailable(f"{self._where} keeps no results: nothing to fetch again")

    async def aclose(self) -> None:
        await self._client.aclose()


def is_openai_url(url: str) -> bool:
    """Whether ``url`` names an OpenAI-compatible endpoint (``openai+http(s)://``)."""
    return url.strip().lower().startswith(KIND_PREFIX)
