"""The embedding stage's calls: straight to an in-process embedder, or through the
provider ledger to a remote provider (evidence first, never a blind resend).

For a remote provider, every batch of chunk texts is one request with a request key.
Its intent is committed as ``unknown`` before the call; a verified reply is stored
and committed as ``done``; a lost or damaged reply leaves it ``unknown`` for
reconcile. A request the ledger already knows is not sent again: a stored result is
used, one still in flight is waited for, an unknown one is looked up first — at the
endpoint it was sent to, and only there (another provider with the same name and
model makes the same request keys, and its "not found" would invite a second send).
Whatever stops the stage names its request, so the task's failure does too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from core.errors import ObjectReadError
from core.ingest.embedder import Embedder, HashingEmbedder, ProviderUnavailable
from core.ingest.providers import (
    LookupUnavailable,
    NotSent,
    OutcomeUnknown,
    ProviderRejected,
    RemoteProvider,
    request_key,
    same_endpoint,
    verify,
)
from core.ingest.reconcile import (
    Decision,
    describe,
    reconcile_one,
    record_result,
    split_vectors,
)
from core.ledger import Claim, IndexKey, IndexView, Intent, Ledger, ProviderRequestView
from core.safe_text import neutralise
from core.states import (
    REQUEST_RESULT_STATES,
    REQUEST_SENDABLE_STATES,
    ErrorCode,
    RequestState,
    Stage,
)
from core.store import Store


class TaskLost(Exception):
    """The worker no longer holds this task; it must stop writing."""


class Deferred(Exception):
    """Someone else is doing this work right now: hand the task back and wait."""

    def __init__(self, message: str, request_key: str | None = None) -> None:
        super().__init__(message)
        # The provider request another attempt is sending: its settling (or that
        # attempt's end) makes the waiting task due at once.
        self.request_key = request_key


class NeedsReview(Exception):
    """A request's outcome is unknown and the provider has no record of it: a person
    decides (resend, or mark failed)."""

    def __init__(self, message: str, request_key: str | None = None) -> None:
        super().__init__(message)
        self.request_key = request_key


class RequestFailed(Exception):
    """The provider answered that a request failed (or a person marked it so)."""

    def __init__(
        self, message: str, request_key: str | None = None, refused: ProviderRejected | None = None
    ) -> None:
        super().__init__(message)
        self.request_key = request_key
        # The task's code when not provider_failed (input_too_long), and the text the
        # provider refused, counted from the first text of the call (see detail_at).
        self.error_code = refused.error_code if refused else None
        self.position = refused.position if refused else None
        self.position_known = refused.position_known if refused else True

    def failure(self, progress: tuple[Stage, int, int] | None) -> tuple[ErrorCode, str]:
        """The task's error code and one-line detail, naming the refused chunk when
        the provider named a text: ``progress`` is the embedding stage's when the call
        was made (chunks done before it: the ordinal of its first text)."""
        code = self.error_code or ErrorCode.PROVIDER_FAILED
        if self.position is None:
            return code, neutralise(str(self))
        chunk = (progress[1] if progress and progress[0] is Stage.EMBEDDING else 0) + self.position
        if self.position_known:
            return code, neutralise(f"chunk {chunk}: {self}")
        return code, neutralise(
            f"a chunk of this batch, likely chunk {chunk} (the longest): {self}"
        )


class Embedding:
    """What the pipeline calls for one batch's vectors."""

    # A call may wait on something outside this process for seconds (a slow provider,
    # its time-out): the pipeline abandons it as soon as the task is cancelled.
    may_wait = False

    async def vectors(self, claim: Claim, texts: Sequence[str]) -> list[bytes]:
        """Vectors for ``texts``, in order (see the subclasses for what they raise)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what the calls hold (connections)."""


class LocalEmbedding(Embedding):
    """Calls to an in-process embedder: nothing outside the ledger to record."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def vectors(self, claim: Claim, texts: Sequence[str]) -> list[bytes]:
        """Raises:
        ProviderUnavailable: the embedder cannot answer now (transient)."""
        return await self.embedder.embed(texts)


def index_key_of(provider: Embedder | RemoteProvider) -> IndexKey:
    """The index ``provider``'s vectors belong to: the same kind, model, version and
    dimensions make comparable vectors. An embedder of the registry names its kind and
    model (core.ingest.embedders); the hashed bag of words and a remote provider are
    known by their names."""
    kind = getattr(provider, "kind", None)
    if kind is None:
        kind = "hashed" if provider.name == HashingEmbedder.name else provider.name
    options = getattr(provider, "index_options", None) or {}
    return IndexKey(
        str(kind),
        str(getattr(provider, "model", "")),
        provider.version,
        provider.dimensions,
        dict(options),
    )


def embedder_for_index(index: IndexView) -> Embedder | RemoteProvider:
    """An embedder made from an index's definition, to make that index's vectors.

    Raises:
        ProviderUnavailable: this process cannot make that kind of embedder (what
            it needs is not installed): another worker may.
    """
    from core.errors import BadInput
    from core.ingest.embedders import embedder_for, spec_of_index

    try:
        return embedder_for(spec_of_index(index))
    except BadInput as exc:
        raise ProviderUnavailable(f"index {index.name}: {exc.message}") from None


def index_key_for_spec(spec: str) -> IndexKey:
    """The index an embedder named on the command line makes vectors for.

    Raises:
        BadInput: not an embedder, or not one this process can make.
    """
    from core.ingest.embedders import EmbedderSpec, embedder_for

    return index_key_of(embedder_for(EmbedderSpec.parse(spec)))


def worker_options(spec: str, key: IndexKey) -> list[str]:
    """The options of ``spec`` that its index does not record (an endpoint's timeout,
    batch sizes, where its key is, the resend-safe declaration): they do not change
    the vectors, so a re-embedding task made from the index alone runs without them.
    A worker has them only when started with the same spec (``--embedder``)."""
    from core.ingest.embedders import EmbedderSpec

    given = EmbedderSpec.parse(spec).options
    return sorted(k for k in given if k not in key.options and k != "dimensions")


def embedding_for(provider: Embedder | RemoteProvider, ledger: Ledger, store: Store) -> Embedding:
    """The calls the pipeline makes to ``provider``: ledgered if it is remote."""
    if isinstance(provider, RemoteProvider):
        return LedgeredEmbedding(ledger, store, provider)
    return LocalEmbedding(provider)


class LedgeredEmbedding(Embedding):
    """Calls to a remote provider, each through the provider ledger.

    A call abandoned mid-flight (its task was cancelled) leaves its request as a lost
    reply does: ``unknown`` until reconcile looks it up, never sent again blindly."""

    may_wait = True

    def __init__(self, ledger: Ledger, store: Store, provider: RemoteProvider) -> None:
        self.ledger = ledger
        self.store = store
        self.remote = provider

    async def vectors(self, claim: Claim, texts: Sequence[str]) -> list[bytes]:
        """Vectors for ``texts``, sent at most once per request key.

        Raises:
            TaskLost: the task was taken away before the intent was recorded.
            Deferred: another running attempt sent the same request.
            ProviderUnavailable: not sent (provider unreachable), or the stored result
                could not be fetched again now.
            OutcomeUnknown: sent (now or earlier) and not settled yet.
            NeedsReview: a person must decide.
            RequestFailed: the provider said it failed.
        """
        # One provider request per call the endpoint accepts (max_inputs, where the
        # provider has such a limit): a request is one call, sent or not as a whole.
        size = getattr(self.remote, "max_inputs", None) or len(texts) or 1
        vectors: list[bytes] = []
        for start in range(0, len(texts), size):
            part = texts[start : start + size]
            key = request_key(self.remote, part)
            try:
                vectors += await self._vectors(claim, key, part)
            except OutcomeUnknown as exc:
                exc.request_key = exc.request_key or key
                raise
            except RequestFailed as exc:
                if exc.position is not None:
                    exc.position += start
                raise
        return vectors

    async def _vectors(self, claim: Claim, key: str, texts: Sequence[str]) -> list[bytes]:
        provider = self.remote
        # At most twice: a request reconcile found sendable is intended once more.
        for _ in range(2):
            answer = await self.ledger.providers.intend(
                claim,
                key,
                provider=provider.name,
                model=provider.version,
                endpoint=provider.endpoint,
                texts=len(texts),
            )
            request = answer.request
            if answer.intent is Intent.LOST:
                raise TaskLost
            if answer.intent is Intent.SEND:
                return await self._send(key, texts, retry_failed=answer.again)
            assert request is not None
            if answer.intent is Intent.USE:
                return await self._stored(request)
            if answer.intent is Intent.IN_FLIGHT:
                raise Deferred(
                    f"waiting for task {request.task_id[:8]}, which sent the same provider request",
                    key,
                )
            if answer.intent is Intent.NEEDS_REVIEW:
                raise NeedsReview(request.detail or "provider request needs review", key)
            if answer.intent is Intent.FAILED:
                raise RequestFailed(request.detail or "the provider said the request failed", key)
            if not same_endpoint(request.endpoint, provider.endpoint):
                # Sent elsewhere: this provider never saw it, and its "not found" would
                # be a lie that invites a second send. Reconcile asks where it went.
                raise OutcomeUnknown(
                    f"sent to another endpoint ({request.endpoint or 'not recorded'}); "
                    "not looked up here"
                )
            decision = await reconcile_one(self.ledger, self.store, provider, request)
            vectors = await self._after(decision)
            if vectors is not None:
                return vectors
        raise OutcomeUnknown("provider request still unknown; reconcile will look it up")

    async def _send(
        self, key: str, texts: Sequence[str], *, retry_failed: bool = False
    ) -> list[bytes]:
        settle = self.ledger.providers.settle
        try:
            reply = await self.remote.submit(key, texts, retry_failed=retry_failed)
        except NotSent as exc:
            await settle(key, RequestState.NOT_SENT, detail=f"not sent: {describe(exc)}")
            raise
        except OutcomeUnknown as exc:
            # The intent already says unknown: now it is due for reconciling. Not "the
            # reply was lost": a time-out or "still running" is no lost reply.
            detail = f"sent; no usable reply: {describe(exc)}"
            await settle(key, RequestState.UNKNOWN, detail=detail)
            raise
        except ProviderRejected as exc:
            await settle(key, RequestState.FAILED, detail=f"rejected: {describe(exc)}")
            raise RequestFailed(
                f"the provider rejected the request: {describe(exc)}", key, exc
            ) from None
        problem = verify(reply, len(texts), self.remote.dimensions)
        if problem is None:
            await record_result(
                self.ledger, self.store, key, reply, RequestState.DONE, detail="reply verified"
            )
            return reply.vectors
        # Damaged in transit: not done. The provider has it, so it is fetched again
        # by key (and verified) rather than sent again.
        await settle(key, RequestState.UNKNOWN, detail=f"reply did not verify: {problem}")
        request = await self.ledger.providers.get(key)
        assert request is not None
        vectors = await self._after(
            await reconcile_one(self.ledger, self.store, self.remote, request)
        )
        if vectors is None:
            raise OutcomeUnknown("reply did not verify; the request is unknown until looked up")
        return vectors

    async def _after(self, decision: Decision) -> list[bytes] | None:
        """The vectors a reconcile decision made available; None if the request may
        now be sent (a provider that declares repeats safe); raises otherwise."""
        if decision.state in REQUEST_RESULT_STATES:
            request = await self.ledger.providers.get(decision.request_key)
            assert request is not None
            return await self._stored(request)
        if decision.state in REQUEST_SENDABLE_STATES:
            return None
        if decision.state is RequestState.NEEDS_REVIEW:
            raise NeedsReview(decision.detail, decision.request_key)
        if decision.state is RequestState.FAILED:
            raise RequestFailed(decision.detail, decision.request_key)
        raise OutcomeUnknown(f"provider request unknown: {decision.detail}")

    async def _stored(self, request: ProviderRequestView) -> list[bytes]:
        """A settled request's vectors from the object store, verified; fetched from
        the provider again (by key, not sent) if the stored copy is gone or damaged."""
        dims = request.dimensions or self.remote.dimensions
        if request.result_key and request.result_sha256:
            try:
                blob = await asyncio.to_thread(
                    self.store.get, request.result_key, request.result_sha256
                )
            except ObjectReadError:
                pass
            else:
                vectors = split_vectors(blob, dims)
                if len(vectors) == request.texts and all(len(v) == 4 * dims for v in vectors):
                    return vectors
        try:
            reply = await self.remote.fetch(request.request_key)
        except LookupUnavailable as exc:
            raise ProviderUnavailable(
                f"stored result unreadable; fetch failed: {describe(exc)}"
            ) from None
        problem = verify(reply, request.texts, self.remote.dimensions)
        if problem is not None:
            raise ProviderUnavailable(
                f"stored result unreadable; fetched one did not verify: {problem}"
            )
        await record_result(
            self.ledger,
            self.store,
            request.request_key,
            reply,
            request.state,
            detail="result fetched again and verified",
            expect=REQUEST_RESULT_STATES,
        )
        return reply.vectors

    async def aclose(self) -> None:
        await self.remote.aclose()
