"""The page record: how each page of a document version was read (its text layer,
OCR with a mean confidence, OCR that found nothing, or skipped with why), and the
review flag it raises.

A version's pages are written with its chunks, in the fenced transaction that
finishes its task (:meth:`core.ledger.queue.WorkQueue.finish`), copied with them when
a result is reused, and dropped wherever its chunks are dropped (a failed, reaped or
cancelled attempt, a rejected or retired version; a deleted document's go with its
row). So the pages shown are always those of the chunks search would serve.

**The flag.** A version with a page read by OCR at a mean confidence under the
ledger's ``ocr_review_below`` (:class:`core.config.Settings`, default 60), or with a
page skipped, is *flagged*: its text may be misread or incomplete. Every face shows
why in one line (:attr:`PageSummary.reason`), and publishing a flagged version is
refused with a conflict unless the person says they accept it
(``publish --accept-low-confidence``, the API's ``accept_low_confidence``, the
dashboard's confirm); the acceptance is written into the document's history. The
threshold is read when asked, not stored: changing it re-judges every version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from sqlalchemy import (
    ColumnElement,
    and_,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from core.errors import ERROR_DETAIL_MAX
from core.filters import Term
from core.ledger.prepared import Prepared
from core.ledger.rows import at_most
from core.ledger.schema import DOCUMENT_PAGES
from core.states import PageDecision

P = DOCUMENT_PAGES.c
PAGES_NAMED_MAX = 12  # page numbers a flag's reason names; the rest are counted
IDS_PER_STATEMENT = 500  # document ids asked about per summary statement
# Versions with a page a wanted page term asks for, at most, for a filtered list to
# start from them: gathering costs a seek per version and a sort (as a rare name's,
# core.ledger.name_index.FEW_DOCUMENTS); more of them are found soon in the list's order.
FEW_VERSIONS = 2000


class PageLike(Protocol):
    """What the ledger reads of one page's reading: a parser's
    :class:`core.ingest.formats.base.PageReading`, or a :class:`PageView` copied."""

    @property
    def page(self) -> int: ...
    @property
    def decision(self) -> PageDecision: ...
    @property
    def chars(self) -> int: ...
    @property
    def confidence(self) -> float | None: ...
    @property
    def ocr_seconds(self) -> float: ...
    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True)
class PageView:
    """One page of a version as the ledger keeps it."""

    page: int
    decision: PageDecision
    chars: int
    confidence: float | None = None
    ocr_seconds: float = 0.0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["decision"] = self.decision.value
        return out


@dataclass(frozen=True)
class PageSummary:
    """A version's pages in a few numbers, cheap enough for every row of a list.

    Attributes:
        pages: Pages recorded (0: the format has no pages, or it was processed
            before pages were recorded).
        text, ocr, ocr_empty, skipped: Pages by decision.
        ocr_min_confidence, ocr_mean_confidence: Over the ``ocr`` pages (None: none).
        ocr_seconds: Time the OCR of every page took.
        review_below: The threshold the flag was judged against.
        low: OCR pages under ``review_below`` (or with no confidence).
        low_pages, skipped_pages: Their page numbers, the first PAGES_NAMED_MAX.
    """

    pages: int = 0
    text: int = 0
    ocr: int = 0
    ocr_empty: int = 0
    skipped: int = 0
    ocr_min_confidence: float | None = None
    ocr_mean_confidence: float | None = None
    ocr_seconds: float = 0.0
    review_below: float = 0.0
    low: int = 0
    low_pages: tuple[int, ...] = field(default_factory=tuple)
    skipped_pages: tuple[int, ...] = field(default_factory=tuple)

    @property
    def by_decision(self) -> str:
        """The pages by decision, the empty ones left out: ``480 text, 3 ocr``."""
        counts = (
            (self.text, "text"),
            (self.ocr, "ocr"),
            (self.ocr_empty, "ocr_empty"),
            (self.skipped, "skipped"),
        )
        return ", ".join(f"{n} {word}" for n, word in counts if n)

    @property
    def flagged(self) -> bool:
        """Whether a person must accept the pages before the version is published."""
        return self.low > 0 or self.skipped > 0

    @property
    def reason(self) -> str | None:
        """Why the version is flagged, in one line (None if it is not), e.g. ``3 pages
        read by OCR at confidence < 60: pages 4, 7, 9``."""
        parts = []
        if self.low:
            parts.append(
                f"{_pages(self.low)} read by OCR at confidence < {self.review_below:g}: "
                + _numbers(self.low_pages, self.low)
            )
        if self.skipped:
            parts.append(
                f"{_pages(self.skipped)} skipped: " + _numbers(self.skipped_pages, self.skipped)
            )
        return "; ".join(parts) or None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out |= {"flagged": self.flagged, "reason": self.reason}
        out["low_pages"], out["skipped_pages"] = list(self.low_pages), list(self.skipped_pages)
        return out


def _pages(n: int) -> str:
    return f"{n} page" if n == 1 else f"{n} pages"


def _numbers(named: Sequence[int], total: int) -> str:
    word = "page" if total == 1 else "pages"
    more = f" and {total - len(named)} more" if total > len(named) else ""
    return f"{word} " + ", ".join(str(n) for n in named) + more


# ------------------------------------------------------------------ display


@dataclass(frozen=True)
class PageRun:
    """Consecutive pages shown as one line: a run of ``text`` pages (or of
    ``ocr_empty`` pages, or pages skipped for one reason) collapses; every ``ocr``
    page stands alone, since its confidence is what a reviewer reads."""

    first: int
    last: int
    decision: PageDecision
    chars: int
    confidence: float | None
    ocr_seconds: float
    reason: str | None

    @property
    def pages(self) -> str:
        """``page 4`` or ``pages 1-480``."""
        if self.first == self.last:
            return f"page {self.first}"
        return f"pages {self.first}-{self.last}"


def page_runs(pages: Iterable[PageView]) -> list[PageRun]:
    """Pages in order, runs of alike pages collapsed (see :class:`PageRun`): a
    500-page text document is one line."""
    runs: list[PageRun] = []
    for p in sorted(pages, key=lambda v: v.page):
        last = runs[-1] if runs else None
        if (
            last is not None
            and p.decision is not PageDecision.OCR
            and last.decision is p.decision
            and last.reason == p.reason
            and last.last + 1 == p.page
        ):
            runs[-1] = PageRun(
                last.first,
                p.page,
                p.decision,
                last.chars + p.chars,
                None,
                last.ocr_seconds + p.ocr_seconds,
                p.reason,
            )
        else:
            runs.append(
                PageRun(p.page, p.page, p.decision, p.chars, p.confidence, p.ocr_seconds, p.reason)
            )
    return runs


# ------------------------------------------------------------------ writes

INSERT_PAGES = Prepared(insert(DOCUMENT_PAGES).values({c.name: bindparam(c.name) for c in P}))
DELETE_PAGES = Prepared(delete(DOCUMENT_PAGES).where(P.document_id == bindparam("p_document_id")))


def replace_pages(conn: Connection, document_id: str, readings: Sequence[PageLike]) -> None:
    """The version's page record, replaced by ``readings`` (in the caller's
    transaction). A page read twice keeps its last reading: the parser's contract is
    one per page, and a duplicate must not fail a finished task on the primary key."""
    DELETE_PAGES.rowcount(conn, {"p_document_id": document_id})
    by_page = {r.page: r for r in readings}
    if by_page:
        INSERT_PAGES.many(
            conn,
            [
                {
                    "document_id": document_id,
                    "page": r.page,
                    "decision": PageDecision(r.decision).value,
                    "chars": r.chars,
                    "confidence": r.confidence,
                    "ocr_seconds": r.ocr_seconds,
                    "reason": (r.reason or "")[:ERROR_DETAIL_MAX] or None,
                }
                for r in by_page.values()
            ],
        )


def drop_pages(conn: Connection, document_ids: Sequence[str]) -> None:
    """Drop these versions' page records (where their chunks are dropped)."""
    if len(document_ids) == 1:
        DELETE_PAGES.rowcount(conn, {"p_document_id": document_ids[0]})
    elif document_ids:
        conn.execute(delete(DOCUMENT_PAGES).where(P.document_id.in_(list(document_ids))))


# ------------------------------------------------------------------ reads


def page_views(conn: Connection, document_id: str) -> list[PageView]:
    """A version's pages in order."""
    query = (
        select(P.page, P.decision, P.chars, P.confidence, P.ocr_seconds, P.reason)
        .where(P.document_id == document_id)
        .order_by(P.page)
    )
    return [
        PageView(r.page, PageDecision(r.decision), r.chars, r.confidence, r.ocr_seconds, r.reason)
        for r in conn.execute(query)
    ]


def low(review_below: float) -> ColumnElement[bool]:
    """An OCR page under the threshold; one without a confidence counts as low (an
    engine that said nothing about its reading is not trusted blindly)."""
    return and_(
        P.decision == PageDecision.OCR.value,
        or_(P.confidence < review_below, P.confidence.is_(None)),
    )


def flagging(review_below: float) -> ColumnElement[bool]:
    """A page that flags its version: OCR under the threshold, or skipped."""
    return or_(low(review_below), P.decision == PageDecision.SKIPPED.value)


def few_versions(
    conn: Connection, condition: ColumnElement[bool], options: Mapping[str, Any]
) -> Select[Any] | None:
    """The versions with a page meeting ``condition``, when they are at most
    :data:`FEW_VERSIONS` (counted no further, through ix_document_pages_decision),
    else None. A list of tasks matching a page term then starts from them (a seek of
    ``tasks.document_id`` each) instead of reading every task in order for the few
    that match: ``ocr:low`` on a ledger of a million tasks and a few scans read them
    all (0.8 s). Executed with ``options``: the filters' own statement cache."""
    versions = select(P.document_id).where(condition).distinct()
    return versions if at_most(conn, versions, FEW_VERSIONS, options) else None


def has_page(document_id: Any, condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """EXISTS a page of the version ``document_id`` (a column or value) meeting
    ``condition``: one seek in ix_document_pages_review."""
    return exists().where(P.document_id == document_id).where(condition)


def summaries(
    conn: Connection, document_ids: Iterable[str], review_below: float
) -> dict[str, PageSummary]:
    """The page summary of each version that has pages (others are absent): one
    grouped statement over the index, and one more naming the flagging pages of the
    versions flagged."""
    ids = list(dict.fromkeys(document_ids))
    counts: dict[str, dict[str, Any]] = {}
    is_low = low(review_below)
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        part = ids[start : start + IDS_PER_STATEMENT]
        query = (
            select(
                P.document_id,
                P.decision,
                func.count(),
                func.min(P.confidence),
                func.avg(P.confidence),
                func.sum(P.ocr_seconds),
                func.sum(case((is_low, 1), else_=0)),
            )
            .where(P.document_id.in_(part))
            .group_by(P.document_id, P.decision)
        )
        for doc, decision, n, lowest, mean, seconds, n_low in conn.execute(query):
            c = counts.setdefault(doc, {"pages": 0, "ocr_seconds": 0.0, "low": 0})
            c["pages"] += n
            c[decision] = n
            c["ocr_seconds"] += float(seconds or 0.0)
            c["low"] += int(n_low or 0)
            if decision == PageDecision.OCR.value:
                c["ocr_min_confidence"] = None if lowest is None else float(lowest)
                c["ocr_mean_confidence"] = None if mean is None else float(mean)
    flagged = [d for d, c in counts.items() if c["low"] or c.get(PageDecision.SKIPPED.value)]
    named: dict[str, dict[str, list[int]]] = {d: {"low": [], "skipped": []} for d in flagged}
    for start in range(0, len(flagged), IDS_PER_STATEMENT):
        part = flagged[start : start + IDS_PER_STATEMENT]
        query = (
            select(P.document_id, P.page, P.decision)
            .where(P.document_id.in_(part))
            .where(flagging(review_below))
            .order_by(P.document_id, P.page)
        )
        for doc, page, decision in conn.execute(query):
            kind = "skipped" if decision == PageDecision.SKIPPED.value else "low"
            if len(named[doc][kind]) < PAGES_NAMED_MAX:
                named[doc][kind].append(page)
    return {
        doc: PageSummary(
            pages=c["pages"],
            text=c.get(PageDecision.TEXT.value, 0),
            ocr=c.get(PageDecision.OCR.value, 0),
            ocr_empty=c.get(PageDecision.OCR_EMPTY.value, 0),
            skipped=c.get(PageDecision.SKIPPED.value, 0),
            ocr_min_confidence=c.get("ocr_min_confidence"),
            ocr_mean_confidence=c.get("ocr_mean_confidence"),
            ocr_seconds=c["ocr_seconds"],
            review_below=review_below,
            low=c["low"],
            low_pages=tuple(named.get(doc, {}).get("low", ())),
            skipped_pages=tuple(named.get(doc, {}).get("skipped", ())),
        )
        for doc, c in counts.items()
    }


def summary(conn: Connection, document_id: str, review_below: float) -> PageSummary:
    """One version's page summary (all zeros when it has no pages)."""
    return summaries(conn, [document_id], review_below).get(
        document_id, PageSummary(review_below=review_below)
    )


def term_condition(term: Term, review_below: float) -> ColumnElement[bool]:
    """The page a filter's page term asks for (see core.filters.PAGE_TERMS)."""
    decision = P.decision
    wanted = {
        ("ocr", "any"): decision == PageDecision.OCR.value,
        ("ocr", "low"): low(review_below),
        ("ocr", "empty"): decision == PageDecision.OCR_EMPTY.value,
        ("pages", "skipped"): decision == PageDecision.SKIPPED.value,
        ("pages", "flagged"): flagging(review_below),
    }
    return wanted[(str(term.field), term.value)]
