"""Embedding providers: what the embedding stage calls, and the three different
answers a call to something outside the ledger can give.

Two kinds plug in:

* an :class:`~core.ingest.embedder.Embedder` runs in the worker's own process (the
  default hashed bag of words). It never loses anything: a crash loses the result
  and the call together, and nothing outside the ledger saw it. Its calls are not
  written to the provider ledger (two writes and an fsync per call would cost small
  documents a third of their speed, to record something that cannot be lost).
* a :class:`RemoteProvider` is a service. A call may have happened even when no
  reply came back, so every call goes through the provider ledger
  (:mod:`core.ledger.provider_requests`): the intent is committed as ``unknown``
  before the call, the verified reply after it, and an ``unknown`` request is looked
  up (:mod:`core.ingest.reconcile`), never blindly sent again.

A remote call ends in one of:

* a reply — verified (count, dimensions, checksum) before anything is recorded;
* :class:`NotSent` — provably never reached the provider (connection refused, or the
  provider said it is unavailable before doing anything): safe to send later;
* :class:`OutcomeUnknown` — sent, but no usable reply (timeout, dropped connection,
  a 5xx, a truncated body): the provider may have done it;
* :class:`ProviderRejected` — the provider answered that the request failed.

and a look-up ends in ``done`` / ``running`` / ``not_found`` / ``failed``, or
:class:`LookupUnavailable`: "lookup failed", "not found" and "failed" are three
different answers everywhere. A provider with no look-up by request key at all (an
OpenAI-compatible ``/v1/embeddings`` endpoint) answers ``no_lookup``: it cannot say
"not found", and is never taken to have said it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from core.ingest.embedder import Embedder, ProviderUnavailable
from core.states import ErrorCode


class NotSent(ProviderUnavailable):
    """The request never reached the provider; sending it later is safe."""

    # The task's error code when it is not plain provider_unavailable (a refused API
    # key is not worth retrying by itself), and the seconds the provider asked to be
    # left alone (a 429's Retry-After): the task's next attempt is no sooner.
    error_code: ErrorCode | None = None
    retry_after_s: float | None = None


class OutcomeUnknown(Exception):
    """The request was sent but no usable reply came back; the provider may have
    done the work. Never send it again blindly: look it up."""

    # The request it is about, once the embedding stage knows it: the task's failure
    # names it, so settling the request later finds the task (see
    # core.ledger.provider_requests).
    request_key: str | None = None


class ProviderRejected(Exception):
    """The provider answered that this request failed."""

    # The task's error code when it is not plain provider_failed (an input over the
    # model's token limit), and which of the request's texts the provider refused
    # (``position_known`` False: it did not say, and this is the likely one).
    error_code: ErrorCode | None = None
    position: int | None = None
    position_known: bool = True


class LookupUnavailable(Exception):
    """A look-up could not be answered now (the provider or its look-up is down)."""


class LookupState(StrEnum):
    """What the provider says about a request key."""

    DONE = "done"  # finished; its result can be fetched
    RUNNING = "running"  # received, not finished yet
    NOT_FOUND = "not_found"  # the provider never received it
    FAILED = "failed"  # received, and it failed
    # The provider keeps no record by request key (an OpenAI-compatible endpoint):
    # whether it received the request cannot be known, from it or anyone.
    NO_LOOKUP = "no_lookup"


@dataclass(frozen=True)
class Lookup:
    state: LookupState
    request_id: str | None = None


@dataclass(frozen=True)
class ProviderReply:
    """A provider's result for one request, as received (not yet verified)."""

    request_id: str
    vectors: list[bytes]
    count: int  # how many vectors the provider says it sent
    dimensions: int  # of each vector, as the provider states it
    checksum: str  # sha256 hex of the vectors concatenated, as the provider states it
    usage: Mapping[str, int] = field(default_factory=dict)


@runtime_checkable
class RemoteProvider(Protocol):
    """An embedding service reached over the network."""

    name: str
    version: str  # the model: changes whenever the same text would get another vector
    dimensions: int
    endpoint: str  # where reconcile reaches it (recorded on each request)
    # A repeated submit with the same request key is safe: the provider itself
    # answers a repeat with the first result (it declares so), or, for a provider with
    # no look-up, the operator declared that sending again is acceptable (embeddings
    # have no side effect, but each send costs). Off unless declared: without it, a
    # request the provider never saw (or cannot say it saw) after an unknown outcome
    # needs a person's decision.
    resend_safe: bool

    async def submit(
        self, request_key: str, texts: Sequence[str], *, retry_failed: bool = False
    ) -> ProviderReply:
        """Send one request. ``retry_failed``: if the provider holds a failed
        execution of this key, run it again (a request sent before and allowed to be
        sent again: a person's resend, or a send that never arrived); without it a
        repeated key is answered from its first execution, failed ones included.

        Raises:
            NotSent: nothing reached the provider.
            OutcomeUnknown: sent; no usable reply.
            ProviderRejected: the provider answered that it failed.
        """
        ...

    async def lookup(self, request_key: str) -> Lookup:
        """What the provider knows of ``request_key`` (``no_lookup``: it cannot know).

        Raises:
            LookupUnavailable: no answer now; ask again later.
        """
        ...

    async def fetch(self, request_key: str) -> ProviderReply:
        """The result of a request the provider finished.

        Raises:
            LookupUnavailable: no answer now (or an unusable one); ask again later.
        """
        ...

    async def aclose(self) -> None: ...


Provider = Embedder | RemoteProvider


def request_key(provider: RemoteProvider, texts: Sequence[str]) -> str:
    """sha256 of the input, the provider, the model and its options: the identity of
    one provider request. The same texts sent to the same model always get the same
    key, so a request can be looked up after any crash."""
    digest = hashlib.sha256()
    header = {"provider": provider.name, "model": provider.version, "dims": provider.dimensions}
    digest.update(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    for text in texts:
        encoded = text.encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


def same_endpoint(a: str | None, b: str | None) -> bool:
    """Whether two provider URLs name the same endpoint, compared as shown (without
    credentials, query or fragment; scheme and host in lower case, a default port
    spelled out, no trailing slash). A missing one is nobody's endpoint."""
    if not a or not b:
        return False
    return _endpoint(a) == _endpoint(b)


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ("", url, None, "")
    scheme = parts.scheme.lower()
    # A kind before the transport (``openai+https``) keeps the transport's port.
    default = {"http": 80, "https": 443}.get(scheme.rpartition("+")[2])
    return (scheme, (parts.hostname or "").lower(), port or default, parts.path.rstrip("/"))


def vectors_checksum(vectors: Sequence[bytes]) -> str:
    """sha256 hex of the vectors concatenated (float32 little-endian bytes)."""
    digest = hashlib.sha256()
    for vector in vectors:
        digest.update(vector)
    return digest.hexdigest()


def verify(reply: ProviderReply, expected_count: int, dimensions: int) -> str | None:
    """Why ``reply`` cannot be used (a short reason), or None if it verifies: the
    count, every vector's size and the checksum must all match."""
    if reply.count != expected_count or len(reply.vectors) != expected_count:
        return f"expected {expected_count} vectors, got {len(reply.vectors)} (said {reply.count})"
    if reply.dimensions != dimensions:
        return f"expected {dimensions} dimensions, provider said {reply.dimensions}"
    if any(len(v) != 4 * dimensions for v in reply.vectors):
        return "a vector has the wrong size"
    if vectors_checksum(reply.vectors) != reply.checksum:
        return "checksum does not match"
    return None
