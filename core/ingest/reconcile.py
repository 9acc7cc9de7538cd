"""Reconcile: settle provider requests whose outcome is unknown by looking them up,
never by sending them again.

For each ``unknown`` request no running attempt is sending (see
:mod:`core.ledger.provider_requests`), the provider is asked by request key:

* done → its result is fetched, verified (count, dimensions, checksum) and stored:
  ``recovered`` (the provider saw one submit);
* running → stays ``unknown``, looked up again after a growing wait;
* not found → ``needs_review`` (a person decides), unless the provider declares that a
  repeated submit with the same key is safe: then it may simply be sent again;
* failed → ``failed``;
* no look-up (the provider keeps no record by request key: an OpenAI-compatible
  endpoint) → ``needs_review``, unless the operator declared that endpoint
  resend-safe: then it may be sent again, at most :data:`BLIND_SENDS_MAX` sends in
  all (each one costs; a reply lost every time goes to a person). Never taken for
  "not found": nobody knows whether the endpoint did the work;
* the look-up (or the fetch) cannot be answered, or the fetched result does not
  verify → stays ``unknown``, looked up again later.

A request is only ever looked up at the endpoint it was sent to: another provider
with the same name and model makes the same request keys, and its "not found"
would be a lie that invites a second send. A request sent elsewhere stays
``unknown`` and the decision says so.

A request settled so that work can go on (recovered, or sendable again) takes the
tasks that failed waiting on it along: they are requeued, by ``reconcile``, in the
same transaction (see :meth:`core.ledger.ProviderLedger.settle`).

Workers run this on start and periodically; ``ingestdesk reconcile`` runs it once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from core.errors import error_detail_of
from core.ingest.embedder import ProviderUnavailable
from core.ingest.providers import (
    LookupState,
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
    ProviderReply,
    RemoteProvider,
    same_endpoint,
    verify,
)
from core.ledger import Ledger, ProviderRequestView
from core.ledger.provider_requests import Requeue
from core.safe_text import neutralise
from core.states import ErrorCode, RequestState
from core.store import Store

LOOKUP_BACKOFF_BASE_S = 2.0  # seconds before the second look-up; doubles after each
LOOKUP_BACKOFF_MAX_S = 300.0  # seconds between look-ups at most
DETAIL_MAX = 200  # characters of a provider's failure kept in a decision
# Sends of one request at most to a provider with no look-up, declared resend-safe:
# beyond it a reply lost every time (a proxy timing out a slow endpoint) would be
# paid for again and again, so a person decides.
BLIND_SENDS_MAX = 3


class Answer(StrEnum):
    """What one look-up learned: four answers that are never confused."""

    FOUND = "found"  # done at the provider; fetched and verified
    RUNNING = "running"  # the provider is still working on it
    NOT_FOUND = "not_found"  # the provider has no record of it
    FAILED = "failed"  # the provider says it failed
    LOOKUP_UNAVAILABLE = "lookup_unavailable"  # no answer now; asked again later
    DID_NOT_VERIFY = "did_not_verify"  # fetched, but the result was damaged; fetched again later
    SETTLED_ELSEWHERE = "settled_elsewhere"  # another process settled it meanwhile
    NOT_LOOKED_UP = "not_looked_up"  # sent to another endpoint than the one asked
    NO_LOOKUP = "no_lookup"  # the provider keeps no record by key: nobody can know


@dataclass(frozen=True)
class Decision:
    """One reconciled request: what the provider answered and where that left it."""

    request_key: str
    task_id: str
    answer: Answer
    state: RequestState
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def lookup_backoff_s(lookups: int) -> float:
    """Seconds until the next look-up of a request looked up ``lookups`` times."""
    return min(LOOKUP_BACKOFF_BASE_S * 2.0 ** min(lookups, 20), LOOKUP_BACKOFF_MAX_S)


def split_vectors(blob: bytes, dimensions: int) -> list[bytes]:
    """Vectors of ``dimensions`` float32 each, from their concatenation (a short
    last piece is kept, so a damaged blob fails verification instead of vanishing)."""
    size = 4 * dimensions
    return [blob[i : i + size] for i in range(0, len(blob), size)]


async def store_result(store: Store, reply: ProviderReply) -> tuple[str, str]:
    """Put a verified result's vectors into the object store (atomically: a crash
    leaves no half-written object behind). Returns its key and sha256."""
    blob = b"".join(reply.vectors)
    return await asyncio.to_thread(store.put, blob)


async def record_result(
    ledger: Ledger,
    store: Store,
    request_key: str,
    reply: ProviderReply,
    state: RequestState,
    *,
    detail: str,
    expect: frozenset[RequestState] = frozenset({RequestState.UNKNOWN}),
    requeue: Requeue | None = None,
    looked_up: bool = False,
) -> bool:
    """Store a verified reply's vectors, then commit the request as ``state`` with
    the provider's request id, the result's object key and usage (in that order: the
    row never points at an object that is not there). ``looked_up``: the reply was
    found by a look-up, counted with the others."""
    result_key, digest = await store_result(store, reply)
    return await ledger.providers.settle(
        request_key,
        state,
        detail=detail,
        request_id=reply.request_id,
        result_key=result_key,
        result_sha256=digest,
        dimensions=reply.dimensions,
        usage=reply.usage,
        expect=expect,
        requeue=requeue,
        looked_up=looked_up,
    )


async def reconcile_one(
    ledger: Ledger, store: Store, provider: RemoteProvider, request: ProviderRequestView
) -> Decision:
    """Look one unknown request up (at ``provider``: the caller checked that it is
    where the request was sent) and settle it as far as the answer allows; tasks
    that failed waiting on it go on if it may (see the module docstring)."""
    key = request.request_key
    retry_at = ledger.clock() + lookup_backoff_s(request.lookups)
    requeue = Requeue(ledger.settings.max_attempts)

    async def still_unknown(answer: Answer, detail: str) -> Decision:
        await ledger.providers.settle(
            key, RequestState.UNKNOWN, detail=detail, looked_up=True, next_lookup_at=retry_at
        )
        return Decision(key, request.task_id, answer, RequestState.UNKNOWN, detail)

    async def settle(answer: Answer, state: RequestState, detail: str) -> Decision:
        if not await ledger.providers.settle(
            key, state, detail=detail, looked_up=True, requeue=requeue
        ):
            return await _elsewhere(ledger, request)
        return Decision(key, request.task_id, answer, state, detail)

    try:
        found = await provider.lookup(key)
    except LookupUnavailable as exc:
        return await still_unknown(Answer.LOOKUP_UNAVAILABLE, f"lookup failed: {describe(exc)}")
    if found.state is LookupState.RUNNING:
        return await still_unknown(Answer.RUNNING, "still running at the provider")
    if found.state is LookupState.FAILED:
        return await settle(Answer.FAILED, RequestState.FAILED, "the provider says it failed")
    if found.state is LookupState.NO_LOOKUP:
        return await settle(Answer.NO_LOOKUP, *_without_lookup(provider, request))
    if found.state is LookupState.NOT_FOUND:
        if provider.resend_safe:
            return await settle(
                Answer.NOT_FOUND,
                RequestState.RESEND,
                # Nothing is sent here: the request becomes sendable, and the next
                # attempt (or this one, when a worker looked it up) sends it.
                "not found at the provider, which declares repeats safe: "
                "it may be sent again (not sent yet)",
            )
        return await settle(
            Answer.NOT_FOUND,
            RequestState.NEEDS_REVIEW,
            "not found at the provider; a person decides: resend, or mark failed",
        )
    try:
        reply = await provider.fetch(key)
    except LookupUnavailable as exc:
        return await still_unknown(
            Answer.LOOKUP_UNAVAILABLE, f"result fetch failed: {describe(exc)}"
        )
    problem = verify(reply, request.texts, provider.dimensions)
    if problem is not None:
        return await still_unknown(
            Answer.DID_NOT_VERIFY, f"fetched result did not verify: {problem}"
        )
    detail = "found at the provider; fetched and verified"
    if not await record_result(
        ledger,
        store,
        key,
        reply,
        RequestState.RECOVERED,
        detail=detail,
        requeue=requeue,
        looked_up=True,
    ):
        return await _elsewhere(ledger, request)
    return Decision(key, request.task_id, Answer.FOUND, RequestState.RECOVERED, detail)


def _without_lookup(
    provider: RemoteProvider, request: ProviderRequestView
) -> tuple[RequestState, str]:
    """Where a request to a provider with no look-up goes, and why (one line)."""
    unknowable = "the endpoint keeps no record by request key, so whether it did the work "
    if provider.resend_safe and request.sends < BLIND_SENDS_MAX:
        # Nothing is sent here either: the next attempt sends it.
        return RequestState.RESEND, (
            unknowable + "cannot be known; declared resend-safe: it may be sent again "
            f"(send {request.sends + 1} of at most {BLIND_SENDS_MAX}; not sent yet)"
        )
    if provider.resend_safe:
        return RequestState.NEEDS_REVIEW, (
            f"sent {request.sends} times without a usable reply (at most {BLIND_SENDS_MAX} "
            "automatically); a person decides: resend, or mark failed"
        )
    return RequestState.NEEDS_REVIEW, (
        unknowable + "cannot be known and it is not declared resend-safe; a person "
        "decides: resend (it is paid for again), or mark failed"
    )


async def _elsewhere(ledger: Ledger, request: ProviderRequestView) -> Decision:
    now = await ledger.providers.get(request.request_key)
    state = now.state if now is not None else request.state
    return Decision(
        request.request_key,
        request.task_id,
        Answer.SETTLED_ELSEWHERE,
        state,
        f"settled by another process meanwhile: {state.value}",
    )


async def reconcile(
    ledger: Ledger,
    store: Store,
    connect: Callable[[str], Awaitable[RemoteProvider]],
    *,
    endpoint: str | None = None,
    everything: bool = False,
) -> list[Decision]:
    """One pass over the unknown requests that are due (``everything``: also those
    whose next look-up is not due yet), oldest first, each looked up at the endpoint
    it was sent to. ``endpoint``: a URL for that endpoint (with the credentials the
    ledger does not keep); requests sent elsewhere are left unknown, not looked up."""
    far_future = float("inf") if everything else None
    due = await ledger.providers.due(now=far_future)
    decisions: list[Decision] = []
    providers: dict[str, RemoteProvider | str] = {}
    try:
        for request in due:
            where = request.endpoint if endpoint is None else endpoint
            if not where or not same_endpoint(where, request.endpoint):
                elsewhere = (
                    f"sent to another endpoint ({request.endpoint}); not looked up here"
                    if request.endpoint
                    else "no endpoint recorded; not looked up"
                )
                decisions.append(
                    Decision(
                        request.request_key,
                        request.task_id,
                        Answer.NOT_LOOKED_UP,
                        RequestState.UNKNOWN,
                        elsewhere,
                    )
                )
                continue
            if where not in providers:
                try:
                    providers[where] = await connect(where)
                except NotSent as exc:
                    providers[where] = describe(exc)
            provider = providers[where]
            if isinstance(provider, str):
                retry_at = ledger.clock() + lookup_backoff_s(request.lookups)
                detail = f"lookup failed: {provider}"
                await ledger.providers.settle(
                    request.request_key,
                    RequestState.UNKNOWN,
                    detail=detail,
                    looked_up=True,
                    next_lookup_at=retry_at,
                )
                decisions.append(
                    Decision(
                        request.request_key,
                        request.task_id,
                        Answer.LOOKUP_UNAVAILABLE,
                        RequestState.UNKNOWN,
                        detail,
                    )
                )
                continue
            decisions.append(await reconcile_one(ledger, store, provider, request))
    finally:
        for provider in providers.values():
            if not isinstance(provider, str):
                await provider.aclose()
    return decisions


async def reconcile_with(ledger: Ledger, store: Store, provider: RemoteProvider) -> list[Decision]:
    """One pass over the due unknown requests sent to ``provider``'s endpoint (what
    a worker runs on start and periodically, with the provider it already has)."""
    due = await ledger.providers.due(endpoint=provider.endpoint)
    return [await reconcile_one(ledger, store, provider, request) for request in due]


def unavailable(exc: ProviderUnavailable) -> tuple[ErrorCode, str]:
    """A task's error code and detail for a request the provider did not take: the
    code a :class:`NotSent` names (rate limited, key refused), else
    provider_unavailable."""
    code = exc.error_code if isinstance(exc, NotSent) else None
    return code or ErrorCode.PROVIDER_UNAVAILABLE, describe(exc)


def retry_after_of(exc: ProviderUnavailable) -> float | None:
    """Seconds the provider asked not to be called sooner (a 429's Retry-After)."""
    return exc.retry_after_s if isinstance(exc, NotSent) else None


def describe(exc: BaseException) -> str:
    """A provider failure in one line: the provider modules word their exceptions
    themselves (no paths, no secrets); anything else is named by its type only."""
    if isinstance(exc, LookupUnavailable | NotSent | OutcomeUnknown | ProviderRejected):
        return neutralise(str(exc))[:DETAIL_MAX] or error_detail_of(exc)
    return error_detail_of(exc)
