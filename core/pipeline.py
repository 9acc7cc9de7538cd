"""The stages of one claimed task: download → parse → embedding → indexing →
finalizing. Every ledger write is fenced on the claim, so the pipeline learns it has
lost its task (cancelled, reaped) from a write answering False and stops there."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.embedder import Embedder, ProviderUnavailable
from core.errors import NotFound, ObjectReadError
from core.ledger import ChunkRecord, Claim, Ledger, error_detail_of
from core.parse_pool import ParserPool, estimate_pages
from core.parsing import ParseFailure, parser_info
from core.states import ErrorCode, Stage

EMBED_BATCH = 64  # chunks per embedder call
PROGRESS_EVERY_S = 0.5  # seconds between coalesced progress writes within a stage
ESTIMATE_INLINE_MAX_BYTES = 1 << 20  # bytes; larger files are page-counted on a thread


@dataclass(frozen=True)
class PipelineOptions:
    """How documents are processed; recorded on each task."""

    parser: str = "pypdf"
    chunk_size: int = 1000
    chunk_overlap: int = 150


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: succeeded, failed (with a code), or lost (the task was
    taken away: cancelled or reaped, nothing more was written)."""

    task_id: str
    result: str
    error_code: ErrorCode | None = None
    detail: str | None = None


class TaskLost(Exception):
    """The worker no longer holds this task; it must stop writing."""


Say = Callable[[str], None]


class Pipeline:
    """Runs claimed tasks to the end, one call per attempt."""

    def __init__(
        self,
        ledger: Ledger,
        pool: ParserPool,
        embedder: Embedder,
        options: PipelineOptions | None = None,
    ) -> None:
        self.ledger = ledger
        self.pool = pool
        self.embedder = embedder
        self.options = options or PipelineOptions()

    async def run(self, claim: Claim, say: Say = lambda _line: None) -> Outcome:
        """Execute one attempt. Never raises for a document's fault: every failure
        becomes a stable error code on the task."""
        try:
            return await self._stages(claim, say)
        except TaskLost:
            say(f"lost task={claim.task_id[:8]} (cancelled or reaped); stopped without writing")
            return Outcome(claim.task_id, "lost")
        except ParseFailure as exc:
            # The reason is our own short vocabulary (no paths, no traces).
            return await self._fail(claim, exc.code, exc.reason, say)
        except ObjectReadError as exc:
            return await self._fail(claim, ErrorCode.OBJECT_READ_ERROR, error_detail_of(exc), say)
        except ProviderUnavailable as exc:
            return await self._fail(
                claim, ErrorCode.PROVIDER_UNAVAILABLE, error_detail_of(exc), say
            )
        except NotFound as exc:
            return await self._fail(claim, ErrorCode.DOCUMENT_NOT_FOUND, error_detail_of(exc), say)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an unclassified fault in ingestdesk itself
            return await self._fail(claim, ErrorCode.INTERNAL_ERROR, error_detail_of(exc), say)

    async def _fail(self, claim: Claim, code: ErrorCode, detail: str, say: Say) -> Outcome:
        view = await self.ledger.fail(claim, code, detail)
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

    async def _progress(
        self, claim: Claim, stage: Stage, done: int, total: int, say: Say, **kw: object
    ) -> None:
        if not await self.ledger.report_progress(claim, stage, done, total, **kw):  # type: ignore[arg-type]
            raise TaskLost
        say(f"stage={stage.value} {done}/{total}")

    async def _stages(self, claim: Claim, say: Say) -> Outcome:
        ledger, opts = self.ledger, self.options
        # download (the claim itself set download 0/1)
        document = await ledger.get_document(claim.document_id)
        data = await asyncio.to_thread(ledger.store.get, document.object_key, document.sha256)

        # parse: the page count is only known once parsed, so the bar starts from
        # a cheap estimate; download 1/1 is folded into this write.
        # Counting page objects scans the bytes: keep big files off the event loop.
        if len(data) > ESTIMATE_INLINE_MAX_BYTES:
            estimate = await asyncio.to_thread(estimate_pages, data, document.kind)
        else:
            estimate = estimate_pages(data, document.kind)
        info = parser_info(opts.parser) if document.kind == "pdf" else {"parser": "text"}
        options = info | {
            "chunk_size": str(opts.chunk_size),
            "chunk_overlap": str(opts.chunk_overlap),
        }
        await self._progress(claim, Stage.PARSE, 0, estimate, say, options=options)
        parsed = await self.pool.parse(
            data,
            document.kind,
            parser=opts.parser,
            chunk_size=opts.chunk_size,
            chunk_overlap=opts.chunk_overlap,
        )
        del data
        chunks = parsed.chunks
        say(f"stage=parse {parsed.pages}/{parsed.pages} chunks={len(chunks)}")

        # embedding, progress per batch but written at most every PROGRESS_EVERY_S
        total = len(chunks)
        await self._progress(claim, Stage.EMBEDDING, 0, total, say)
        vectors: list[bytes] = []
        last_write = time.monotonic()
        for start in range(0, total, EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            vectors.extend(await self.embedder.embed([c.text for c in batch]))
            done = len(vectors)
            if done < total and time.monotonic() - last_write >= PROGRESS_EVERY_S:
                await self._progress(claim, Stage.EMBEDDING, done, total, say)
                last_write = time.monotonic()
            await asyncio.sleep(0)  # let the dashboard breathe between batches

        # indexing: one transaction replaces the document's chunks. Fenced: if the
        # task was cancelled meanwhile nothing is written.
        records = [
            ChunkRecord(c.ordinal, c.text, c.page, c.char_start, c.char_end, v)
            for c, v in zip(chunks, vectors, strict=True)
        ]
        if not await ledger.replace_chunks(claim, records):
            raise TaskLost
        say(f"stage=indexing {total}/{total}")

        # finalizing: a cancel that landed after indexing already deleted the
        # chunks in its own transaction; complete() then answers False.
        if not await ledger.complete(claim):
            raise TaskLost
        say(f"succeeded task={claim.task_id[:8]} chunks={total}")
        return Outcome(claim.task_id, "succeeded")
