"""The stages of one claimed task: download → parse → embedding → indexing →
finalizing. Every ledger write is fenced on the claim, so the pipeline learns it has
lost its task (cancelled, reaped) from a write answering False and stops there: a
parse in flight is abandoned and its parser process killed, embedding stops before
its next batch."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from core.errors import (
    ERROR_DETAIL_MAX,
    LedgerUnreachable,
    NotFound,
    ObjectReadError,
    error_detail_of,
    is_disk_full,
)
from core.ingest.embedder import Embedder, ProviderUnavailable
from core.ingest.embedding import (
    Deferred,
    Embedding,
    NeedsReview,
    RequestFailed,
    TaskLost,
    embedder_for_index,
    embedding_for,
    index_key_of,
)
from core.ingest.formats import format_for, format_info
from core.ingest.keys import CHUNKER_VERSION, processing_key, result_checksum
from core.ingest.parse_pool import ParserPool, estimate_pages_async
from core.ingest.parse_progress import reporting
from core.ingest.parser_process import ParserStartFailed
from core.ingest.parsing import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_PARSER,
    ParsedDocument,
    ParseFailure,
    ParseRequest,
    log_parser_warnings,
    run_parse,
)
from core.ingest.progress import Progress
from core.ingest.providers import OutcomeUnknown, RemoteProvider
from core.ingest.reconcile import describe, retry_after_of, unavailable
from core.ledger import ChunkRecord, Claim, IndexView, Ledger
from core.ledger.queue import LOST
from core.safe_text import neutralise
from core.states import DocumentKind, DocumentStatus, ErrorCode, Stage
from core.store import Store

logger = logging.getLogger(__name__)

EMBED_BATCH = 64  # chunks per embedder call
# Times a re-embedding task reads its version's chunks again when they changed while
# it embedded them (a version rejected and processed again meanwhile).
REEMBED_READS = 3
# The versions a re-embedding task embeds: those search may serve, now or once approved.
SERVABLE = (DocumentStatus.PUBLISHED, DocumentStatus.REVIEW_PENDING)
KEY_ON_LOOP_MAX_BYTES = 1 << 20  # bytes; larger originals get their processing key on a thread
ALWAYS_LOOK_UP_BYTES = 64 * 1024  # bytes; smaller originals look up only when shared
# Each wait is a hand-back and a history line: long enough not to flood the history
# while a big document is parsed, short next to the parse it saves.
KEY_WAIT_S = 10.0  # seconds a task waits before looking again at a task making its result
# Markdown and plain text up to this size are parsed in the worker's own process, not
# in a parser process. Text parsing is our own linear code (decode, NUL strip, regex
# chunking; no native code, no recursion), so a hostile text can neither hang nor
# crash it, and its memory is bounded by a small multiple of this size. Skipping the
# process round trip saves ~0.5 ms of CPU and two thread hops per document (a third
# of a small document's pipeline time). Larger texts, and every PDF, still go to the
# parser processes with their time budget and memory cap.
TEXT_IN_PROCESS_MAX_BYTES = 256 * 1024  # bytes
TEXT_ON_LOOP_MAX_BYTES = 32 * 1024  # bytes; parsed on the event loop (< 0.15 ms), else a thread


@dataclass(frozen=True)
class PipelineOptions:
    """How documents are processed; recorded on each task.

    The defaults are :mod:`core.ingest.parsing`'s, the one place they are written down
    (the parser processes import that module, and must not import this one). The
    values are checked where a parse is requested (see
    :class:`~core.ingest.parsing.ParseRequest`).
    """

    parser: str = DEFAULT_PARSER
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP


# The outcome of an attempt handed back because no parser process could start.
PARSER_UNAVAILABLE = "parser_unavailable"


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: succeeded, failed (with a code), lost (the task was
    taken away: cancelled or reaped, nothing more was written), or handed back
    (:data:`PARSER_UNAVAILABLE`)."""

    task_id: str
    result: str
    error_code: ErrorCode | None = None
    detail: str | None = None


Say = Callable[[str], None]
T = TypeVar("T")


class Pipeline:
    """Runs claimed tasks to the end, one call per attempt."""

    def __init__(
        self,
        ledger: Ledger,
        store: Store,
        pool: ParserPool,
        embedder: Embedder | RemoteProvider,
        options: PipelineOptions | None = None,
    ) -> None:
        self.ledger = ledger
        self.store = store
        self.pool = pool
        self.embedder = embedder
        self.embedding = embedding_for(embedder, ledger, store)
        self.options = options or PipelineOptions()
        # The index its vectors go into (the ledger makes it the first time it sees
        # this embedder, active if it had none).
        self.index = index_key_of(embedder)
        # The calls that make other indexes' vectors (re-embedding tasks), by index id.
        self._index_embeddings: dict[int, Embedding] = {}

    async def run(self, claim: Claim, say: Say = lambda _line: None) -> Outcome:
        """Execute one attempt. Never raises for a document's fault: every failure
        becomes a stable error code on the task."""
        progress = Progress(self.ledger, claim)
        say = _never_fails(say)
        fail = functools.partial(self._fail, claim, progress=progress, say=say)
        try:
            return await self._stages(claim, progress, say)
        except TaskLost:
            say(f"lost task={claim.task_id[:8]} (cancelled or reaped); stopped without writing")
            return Outcome(claim.task_id, "lost")
        except ParseFailure as exc:
            # The reason is our own short vocabulary (no paths, no traces).
            return await fail(exc.code, exc.reason)
        except ObjectReadError as exc:
            # Its message is the store's own words (missing, damaged, the bucket
            # unreachable), never a path or a credential: the cause, for the operator.
            return await fail(ErrorCode.OBJECT_READ_ERROR, exc.message[:ERROR_DETAIL_MAX])
        except ProviderUnavailable as exc:  # a NotSent may carry its code and Retry-After
            return await fail(*unavailable(exc), retry_after_s=retry_after_of(exc))
        # A failure on a provider request names it: review and reconcile find the task by it.
        except OutcomeUnknown as exc:
            return await fail(ErrorCode.OUTCOME_UNKNOWN, describe(exc), exc.request_key)
        except NeedsReview as exc:
            return await fail(ErrorCode.NEEDS_REVIEW, neutralise(str(exc)), exc.request_key)
        except RequestFailed as exc:  # its detail names the chunk a provider refused
            return await fail(*exc.failure(progress.latest), exc.request_key)
        except Deferred as exc:
            return await self._defer(
                claim, progress, neutralise(str(exc)), say, request_key=exc.request_key
            )
        except NotFound as exc:
            return await fail(ErrorCode.DOCUMENT_NOT_FOUND, error_detail_of(exc))
        except ParserStartFailed as exc:
            # This worker cannot parse at all; the document is not at fault. The task
            # goes back (claimable at once, the attempt not counted) for a worker that
            # can, and the worker stops (see Worker).
            detail = neutralise(str(exc))
            await self.ledger.queue.hand_back(
                claim,
                reason=f"handed back: {detail}",
                progress=progress.latest,
                options=progress.options,
            )
            say(f"handed back task={claim.task_id[:8]}: {detail}")
            return Outcome(claim.task_id, PARSER_UNAVAILABLE, detail=detail)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_disk_full(exc):
                # The machine's fault, not the document's: retried with backoff. If
                # even the failure cannot be written, LedgerFull leaves here: a
                # looping worker rides it out and gives the claim back, a one-off
                # run ends with the tempfail code.
                return await fail(ErrorCode.DISK_FULL, _disk_full_detail(exc))
            if isinstance(exc, LedgerUnreachable):
                raise  # nothing can be recorded now: the worker gives the claim back
            # An unclassified fault in ingestdesk itself.
            # The task records the type name only (a message can carry a path or user
            # data); the whole story goes to this worker's own log, so nothing is lost.
            logger.error("internal error in task=%s", claim.task_id[:8], exc_info=True)
            return await fail(ErrorCode.INTERNAL_ERROR, error_detail_of(exc))

    async def _fail(
        self,
        claim: Claim,
        code: ErrorCode,
        detail: str,
        request_key: str | None = None,
        *,
        progress: Progress,
        say: Say,
        retry_after_s: float | None = None,
    ) -> Outcome:
        # Progress is coalesced, so the row may lag: record the stage and progress
        # really reached (the failures screen groups by stage), with the failure.
        view = await self.ledger.queue.fail(
            claim,
            code,
            detail,
            progress=progress.latest,
            waits_for_request=request_key,
            options=progress.options,
            retry_after_s=retry_after_s,
        )
        if view is None:
            say(f"lost task={claim.task_id[:8]} before its failure could be recorded")
            return Outcome(claim.task_id, "lost")
        say(
            f"{view.status.value} task={claim.task_id[:8]} error_code={code.value} "
            f"attempt={view.attempt}"
            + (
                f" next_attempt_in={view.next_attempt_at - self.ledger.clock():.1f}s"
                if view.next_attempt_at
                else ""
            )
        )
        return Outcome(claim.task_id, view.status.value, code, detail)

    async def _stages(self, claim: Claim, progress: Progress, say: Say) -> Outcome:
        async with progress.reporting(f"task={claim.task_id[:8]} progress reporter"):
            return await self._run_stages(claim, progress, say)

    async def _run_stages(self, claim: Claim, progress: Progress, say: Say) -> Outcome:
        if claim.index_id is not None:
            return await self._reembed(claim, progress, say)
        ledger, opts = self.ledger, self.options
        # download (the claim set download 0/1; a worker's claim brings the document)
        document = claim.document or await ledger.reads.get_document(claim.document_id)
        # A small local original is read on the loop, anything else off it (see the
        # store's read).
        data = await self.store.read(document.object_key, document.sha256, document.size)

        # parse: the page count is only known once parsed, so the bar starts from
        # a cheap estimate. Counting page objects scans the bytes: big files are
        # counted off the event loop. The parser pool's time budget uses the same
        # estimate, so it is made once and handed on.
        estimate = await estimate_pages_async(data, document.kind)
        info = format_info(document.kind, opts.parser)
        # Every option that changes the result, recorded on the task with the
        # processing key it makes (see core.ingest.keys).
        options = info | {
            "chunk_size": str(opts.chunk_size),
            "chunk_overlap": str(opts.chunk_overlap),
            "chunker": CHUNKER_VERSION,
            "embedder": self.embedder.name,
            "embedder_version": self.embedder.version,
            "embedder_dimensions": str(self.embedder.dimensions),
        }
        if len(data) <= KEY_ON_LOOP_MAX_BYTES:
            options["processing_key"] = processing_key(data, options)
        else:  # sha256 runs ~1 ms per MB: big originals are hashed off the event loop
            options["processing_key"] = await asyncio.to_thread(processing_key, data, options)
        progress.set(Stage.PARSE, 0, estimate, options=options)
        # A result to reuse, or a twin making it, can only exist when another document
        # holds the same bytes, which the claim read through an index. The look-up is a
        # write transaction (~0.4 ms of worker CPU): asked of every document it cost
        # small documents 13% of their speed (bench.ingest's small corpus: 0.55x ->
        # 0.47x of bare parsing). Big originals always ask: parsing one again is dear,
        # and a twin uploaded after this claim then finds this task holding the key.
        if claim.content_shared or len(data) >= ALWAYS_LOOK_UP_BYTES:
            reused = await self._reuse_or_wait(claim, progress, options, say)
            if reused is not None:
                return reused
        say(f"stage=parse 0/{estimate}")
        # Pages (slides, sheets) as the parser finishes them: an OCR page takes
        # seconds, and the operator must see a long scan move. Progress coalesces
        # its writes, so a report per page costs an assignment.
        parsed_units = functools.partial(progress.set, Stage.PARSE)
        # Only our own code on plain text runs here; every zip- or XML-based format
        # goes to the parser process.
        if format_for(document.kind).in_process and len(data) <= TEXT_IN_PROCESS_MAX_BYTES:
            parsed = await self._parse_text(data, document.kind, parsed_units)
        else:
            # A long parse is where a cancelled task would keep burning a core: it is
            # abandoned, and its parser process killed, as soon as a write finds the
            # task taken away.
            parsed = await progress.unless_lost(
                self.pool.parse(
                    data,
                    document.kind,
                    parser=opts.parser,
                    chunk_size=opts.chunk_size,
                    chunk_overlap=opts.chunk_overlap,
                    estimated_pages=estimate,
                    on_progress=parsed_units,
                )
            )
        del data
        chunks = parsed.chunks
        progress.set(Stage.PARSE, parsed.pages, parsed.pages)
        say(f"stage=parse {parsed.pages}/{parsed.pages} chunks={len(chunks)}")

        # embedding, progress per batch (the reporter writes the latest of it)
        total = len(chunks)
        vectors = await self._embed(claim, self.embedding, [c.text for c in chunks], progress, say)

        # indexing + finalizing in ONE fenced transaction: the document's chunks are
        # replaced and the task completes together, so a cancel lands either before
        # (nothing written) or after (its transaction deletes the chunks) — a draft
        # never keeps a half index.
        progress.set(Stage.INDEXING, total, total)
        progress.check()
        say(f"stage=indexing {total}/{total}")
        records = [
            ChunkRecord(c.ordinal, c.text, c.page, c.char_start, c.char_end, v, c.stored_location)
            for c, v in zip(chunks, vectors, strict=True)
        ]
        options["result_sha256"] = result_checksum(records)
        # The page record goes in the same transaction: the pages a reviewer sees are
        # those of the chunks search would serve.
        if not await ledger.queue.finish(
            claim, records, readings=parsed.readings, options=options, index=self.index
        ):
            raise TaskLost
        say(f"succeeded task={claim.task_id[:8]} chunks={total}")
        return Outcome(claim.task_id, "succeeded")

    async def _embed(
        self,
        claim: Claim,
        embedding: Embedding,
        texts: Sequence[str],
        progress: Progress,
        say: Say,
    ) -> list[bytes]:
        """The vectors of ``texts``, a batch at a time, progress per batch (the reporter
        writes the latest of it)."""
        total = len(texts)
        progress.set(Stage.EMBEDDING, 0, total)
        if embedding.may_wait and total:
            # A remote call can outlast the coalescing (and the worker: a reap then
            # records what the row says), so the stage is on the row before it starts.
            await progress.write_now()
        say(f"stage=embedding 0/{total}")
        vectors: list[bytes] = []
        for start in range(0, total, EMBED_BATCH):
            progress.check()
            call = embedding.vectors(claim, texts[start : start + EMBED_BATCH])
            # A cancel reaches a remote call within a heartbeat, not at its time-out;
            # a local batch takes milliseconds and is checked between batches.
            got = await (progress.unless_lost(call) if embedding.may_wait else call)
            vectors.extend(got)
            progress.set(Stage.EMBEDDING, len(vectors), total)
            await asyncio.sleep(0)  # let the dashboard breathe between batches
        return vectors

    async def _reembed(self, claim: Claim, progress: Progress, say: Say) -> Outcome:
        """A re-embedding task: the version's stored chunks embedded into the task's
        index (only the embedding stage runs: no download, no parse), written with the
        task's success in one transaction. The version itself is never changed."""
        assert claim.index_id is not None
        try:
            index = await self.ledger.indexes.get(claim.index_id)
        except NotFound:
            return await self._fail(
                claim,
                ErrorCode.INDEX_NOT_FOUND,
                f"index {claim.index_id} was dropped",
                progress=progress,
                say=say,
            )
        embedding = self.index_embedding(index)
        # The claim read the version in its own transaction; only a read after its
        # chunks changed under the embedding needs another round trip.
        document = claim.document
        for attempt in range(REEMBED_READS):
            if attempt or document is None:
                try:
                    document = await self.ledger.reads.get_document(claim.document_id)
                except NotFound:
                    document = None
            if document is None or document.status not in SERVABLE:
                # Deleted, rejected or withdrawn since it was queued: nothing to embed,
                # and nothing of the version is touched.
                found = "gone" if document is None else document.status.value
                say(f"version is {found}: nothing to embed into index {index.name}")
                records = []
            else:
                records = await self.ledger.reads.chunk_records(claim.document_id)
            texts = [r.text for r in records]
            vectors = await self._embed(claim, embedding, texts, progress, say)
            progress.set(Stage.INDEXING, len(vectors), len(vectors))
            progress.check()
            by_ordinal = {r.ordinal: v for r, v in zip(records, vectors, strict=True)}
            answer = await self.ledger.queue.finish_reembedding(claim, by_ordinal)
            if answer == LOST:
                raise TaskLost
            if answer == "succeeded":
                say(
                    f"succeeded task={claim.task_id[:8]} chunks={len(vectors)} "
                    f"into index {index.name}"
                )
                return Outcome(claim.task_id, "succeeded")
            say("the version's chunks changed while they were embedded; reading them again")
        return await self._fail(
            claim,
            ErrorCode.INTERNAL_ERROR,
            "the version's chunks kept changing while they were embedded",
            progress=progress,
            say=say,
        )

    def index_embedding(self, index: IndexView) -> Embedding:
        """The calls that make ``index``'s vectors: this pipeline's own embedder when it
        is that index's, else one made from the index's definition (and checked to be
        the same model, version and dimensions).

        Raises:
            ProviderUnavailable: this worker cannot make that index's vectors (another
                version of its model is installed, or its kind needs what is missing):
                transient, so another worker may take the task.
        """
        if index.key == self.index:
            return self.embedding
        made = self._index_embeddings.get(index.id)
        if made is None:
            embedder = embedder_for_index(index)
            if index_key_of(embedder) != index.key:
                raise ProviderUnavailable(
                    f"this worker cannot make the vectors of index {index.name}: it has "
                    f"{embedder.name} {embedder.version}, the index is {index.version}"
                )
            made = embedding_for(embedder, self.ledger, self.store)
            self._index_embeddings[index.id] = made
        return made

    async def _reuse_or_wait(
        self, claim: Claim, progress: Progress, options: dict[str, str], say: Say
    ) -> Outcome | None:
        """Never do the same work twice: if a succeeded task made this result and its
        chunks still verify, finish with a copy of them; else, if another running task
        is making it, hand this task back to wait for it. None: this task holds the
        processing key; go on and process.

        A verified result comes first: twins waiting for each other while the result
        they wait for is already there would wait forever (each took the other for
        the one making it). Both questions are one write transaction.
        """
        queue, key = self.ledger.queue, options["processing_key"]
        answer = await queue.hold_or_reuse(claim, key)
        if answer.holder == LOST:
            raise TaskLost
        found = answer.reusable
        if found is not None:
            records = await self.ledger.reads.chunk_records(found.document_id, self.index)
            checksum = result_checksum(records)
            if len(records) == found.chunks and checksum == found.result_sha256:
                options |= {"reused_from": found.task_id, "result_sha256": checksum}
                # The same bytes read the same way: the pages are copied with the chunks.
                _, readings = await self.ledger.reads.pages(found.document_id)
                if not await queue.finish(
                    claim, records, readings=readings, options=options, index=self.index
                ):
                    raise TaskLost
                say(
                    f"succeeded task={claim.task_id[:8]} chunks={len(records)} "
                    f"reused from task={found.task_id[:8]}"
                )
                return Outcome(claim.task_id, "succeeded")
            # Changed or half-written: it does not verify, so it is made again.
            say(f"result of task={found.task_id[:8]} does not verify; processing again")
        if answer.holder is not None:
            reason = f"waiting for task {answer.holder[:8]}, which is making the same result"
            return await self._defer(claim, progress, reason, say, key=key)
        return None

    async def _defer(
        self,
        claim: Claim,
        progress: Progress,
        reason: str,
        say: Say,
        *,
        key: str | None = None,
        request_key: str | None = None,
    ) -> Outcome:
        """Hand the task back to wait for another task doing the same work (making the
        result of processing key ``key``, or sending provider request
        ``request_key``): due when that work ends, or after KEY_WAIT_S at the latest."""
        handed_back = await self.ledger.queue.hand_back(
            claim,
            reason=reason,
            delay_s=KEY_WAIT_S,
            waits_for_key=key,
            waits_for_request=request_key,
            progress=progress.latest,
            options=progress.options,
        )
        if not handed_back:
            raise TaskLost
        say(f"deferred task={claim.task_id[:8]}: {reason}")
        return Outcome(claim.task_id, "deferred")

    async def _parse_text(
        self, data: bytes, kind: DocumentKind, on_progress: Callable[[int, int], None]
    ) -> ParsedDocument:
        """Parse a small text or Markdown document in this process (see
        TEXT_IN_PROCESS_MAX_BYTES); same outcomes, warning log and progress reports
        as the pool."""
        opts = self.options
        # Text ignores the PDF parser, so that setting is neither passed nor checked
        # here; building the request checks the chunk sizes.
        request = ParseRequest(kind, chunk_size=opts.chunk_size, chunk_overlap=opts.chunk_overlap)
        if len(data) <= TEXT_ON_LOOP_MAX_BYTES:
            with reporting(on_progress):
                outcome, lines, count = run_parse(data, request)
        else:
            loop = asyncio.get_running_loop()

            def from_thread(done: int, total: int) -> None:
                # Queued before the thread's result is, so it lands before it.
                loop.call_soon_threadsafe(on_progress, done, total)

            def parse() -> tuple[ParsedDocument | ParseFailure, list[str], int]:
                with reporting(from_thread):
                    return run_parse(data, request)

            outcome, lines, count = await asyncio.to_thread(parse)
        log_parser_warnings(lines, count)
        if isinstance(outcome, ParseFailure):
            raise outcome
        return outcome


def _disk_full_detail(exc: BaseException) -> str:
    """Which disk was full, in our own words (no path: see error_detail_of)."""
    where = "the ledger's disk" if isinstance(exc, LedgerUnreachable) else "a disk"
    return f"{where} was full ({error_detail_of(exc)})"


def _never_fails(say: Say) -> Say:
    """``say``, except that a sink that fails (a closed stdout, a broken pipe to a log
    collector) is logged once and then skipped: a log line is not the work, and its
    BrokenPipeError must not fail the task as an internal error."""
    broken = False

    def guarded(line: str) -> None:
        nonlocal broken
        if broken:
            return
        try:
            say(line)
        except Exception as exc:
            broken = True
            logger.warning("task progress lines are no longer shown: %s", error_detail_of(exc))

    return guarded
