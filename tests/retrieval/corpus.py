"""The labelled retrieval set (documents/ and questions.toml) and how it is scored."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.ingest.embedders import EmbedderSpec, embedder_for
from core.ledger import Ledger, SearchHit

HERE = Path(__file__).parent
DOCUMENTS = HERE / "documents"
QUESTIONS = HERE / "questions.toml"
RECALL_AT = 3  # hits a question's target must be among
# Words a paraphrase may share with its target: they say nothing about which
# document is meant (and keyword search, which needs every word, still fails).
COMMON_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "i",
        "i'm",
        "me",
        "my",
        "we",
        "our",
        "us",
        "do",
        "does",
        "did",
        "is",
        "are",
        "be",
        "can",
        "may",
        "how",
        "what",
        "when",
        "who",
        "whom",
        "which",
        "where",
        "to",
        "of",
        "for",
        "in",
        "on",
        "at",
        "with",
        "and",
        "or",
        "if",
        "it",
        "that",
        "this",
        "from",
        "by",
        "use",
        "much",
        "many",
        "long",
        "there",
        "s",
        "t",
    ]
)


@dataclass(frozen=True)
class Question:
    kind: str  # "paraphrase" or "exact"
    ask: str
    target: str  # a file name in documents/


def wordllama() -> Any:
    """The registry's wordllama embedder (256 dimensions), as a worker uses it."""
    return embedder_for(EmbedderSpec.of("wordllama"))


def questions(kind: str | None = None) -> list[Question]:
    found = [Question(**q) for q in tomllib.loads(QUESTIONS.read_text())["question"]]
    return [q for q in found if kind is None or q.kind == kind]


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


async def ingest(ledger: Ledger, run_workers: Callable[[], Awaitable[object]]) -> dict[str, str]:
    """Every document uploaded, submitted, ingested by ``run_workers`` and published:
    file name -> family id."""
    families = {}
    for path in sorted(DOCUMENTS.glob("*.md")):
        doc = await ledger.operator.upload(path.read_bytes(), path.name)
        await ledger.operator.submit(doc.document_id)
        families[doc.document_id] = path.name
    await run_workers()
    for document_id in families:
        await ledger.versions.publish(document_id)
    return {name: doc for doc, name in families.items()}


def hit_names(hits: Sequence[SearchHit]) -> list[str]:
    return [h.filename for h in hits]


async def recall(
    search: Callable[[str], Awaitable[Sequence[SearchHit]]],
    asked: Iterable[Question],
    at: int = RECALL_AT,
) -> tuple[float, list[str]]:
    """The share of questions whose target is among the first ``at`` hits, and the
    questions missed."""
    asked = list(asked)
    missed = []
    for q in asked:
        if q.target not in hit_names(await search(q.ask))[:at]:
            missed.append(q.ask)
    return 1 - len(missed) / len(asked), missed
