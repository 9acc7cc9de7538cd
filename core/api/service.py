"""The service's own endpoints: health, metrics, search."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.responses import Response

from core.api.auth import Viewer
from core.api.context import ledger_of
from core.api.problems import ApiProblem
from core.api.routing import GuardedRoute
from core.errors import ProviderUnreachable
from core.ledger import LedgerStats
from core.ledger.migrate import SCHEMA_HEAD
from core.safe_text import visible
from core.states import RequestState

router = APIRouter(tags=["service"], route_class=GuardedRoute)

SEARCH_MAX = 100  # hits per search at most


@router.get("/healthz", summary="Ledger reachable and its schema current")
async def healthz(request: Request) -> dict[str, Any]:
    """200 when the ledger answers at the schema this server knows; 503 (problem+json)
    when it does not answer, or was upgraded by a newer ingestdesk."""
    ledger = ledger_of(request)
    schema = await ledger.schema_revision()
    if schema != SCHEMA_HEAD:
        # Our own words, with no path in them: a probe may see them (a LedgerUnavailable
        # would be answered with the neutral line).
        raise ApiProblem(
            503, "LedgerUnavailable", f"ledger schema is {schema}, this server knows {SCHEMA_HEAD}"
        )
    revision = await ledger.reads.revision()
    # Which store the originals are in (a folder, or a bucket and its endpoint; never
    # a credential): hosts that should share one can be seen to.
    store = ledger.operator.store.label
    return {
        "status": "ok",
        "backend": ledger.backend,
        "schema": schema,
        "revision": revision,
        "store": store,
    }


class _Snapshot(Collector):
    """One scrape's figures, read from the ledger just before rendering."""

    def __init__(self, stats: LedgerStats, requests: Mapping[RequestState, int]) -> None:
        self.stats = stats
        self.requests = requests

    def collect(self) -> Any:
        stats = self.stats
        tasks = GaugeMetricFamily(
            "ingestdesk_tasks", "Ingestion tasks in each status", labels=["status"]
        )
        for status, n in stats.tasks.items():
            tasks.add_metric([status.value], n)
        yield tasks
        yield CounterMetricFamily(
            "ingestdesk_claims", "Claims made so far (attempts started)", value=stats.claims
        )
        failures = CounterMetricFamily(
            "ingestdesk_failures",
            "Attempts that ended failed or waiting for a retry, by error code",
            labels=["error_code"],
        )
        for code, n in sorted(stats.failures.items()):
            failures.add_metric([code.value], n)
        yield failures
        yield GaugeMetricFamily(
            "ingestdesk_queue_oldest_age_seconds",
            "How long the longest-waiting claimable task has waited",
            value=stats.oldest_claimable_age_s,
        )
        yield GaugeMetricFamily(
            "ingestdesk_workers_alive", "Workers with a recent heartbeat", value=stats.workers_alive
        )
        requests = GaugeMetricFamily(
            "ingestdesk_provider_requests",
            "Requests to remote embedding providers in each provider-ledger state",
            labels=["state"],
        )
        for state, n in self.requests.items():
            requests.add_metric([state.value], n)
        yield requests


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request, caller: Viewer) -> Response:
    ledger = ledger_of(request)
    stats = await ledger.reads.stats(time.time())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(stats, await ledger.providers.counts()))
    return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")


@router.get("/api/search", summary="Keyword, vector or hybrid search over published documents")
async def search(
    request: Request,
    response: Response,
    caller: Viewer,
    q: Annotated[str, Query(description="words to look for")],
    limit: Annotated[int, Query(ge=1, le=SEARCH_MAX)] = 20,
    mode: Annotated[
        str | None,
        Query(
            description="keyword, vector or hybrid (keyword and vector ranks fused); default: "
            "hybrid when the active index is a real model, else keyword",
            max_length=40,
        ),
    ] = None,
) -> list[dict[str, Any]]:
    """Best first. Each hit names its version (``family_id``, ``version_no``; at most
    one version of a document is published, so one version's chunks), its ``score``
    (higher is better), how it was found (``mode``, the ``index`` whose vectors
    answered, each leg's ``keyword_rank``/``keyword_score`` and
    ``vector_rank``/``vector_score``, the ``fused_score``) and a ``snippet`` with the
    matched words marked ``**so**``. Headers ``X-Search-Mode``, ``X-Search-Index``
    and ``X-Search-Path`` say how the answer was made; ``X-Search-Notice`` is set when
    it is not what was asked (hybrid answered from keyword ranks: the index's
    embedder did not answer). A vector search whose embedder does not answer is 503,
    kind ``ProviderUnreachable``."""
    try:
        answer = await ledger_of(request).reads.find(q, limit=limit, mode=mode)
    except ProviderUnreachable as exc:
        raise ApiProblem(503, "ProviderUnreachable", exc.message) from None
    response.headers["X-Search-Mode"] = answer.mode
    if answer.index:
        response.headers["X-Search-Index"] = _header(answer.index)
        response.headers["X-Search-Path"] = answer.path
    if answer.notice:
        response.headers["X-Search-Notice"] = _header(answer.notice)
    return [h.to_dict() for h in answer.hits]


def _header(text: str) -> str:
    """``text`` as a header value: printable ASCII (HTTP headers are Latin-1 at best,
    and an index is named by whoever created it)."""
    return visible(text).encode("ascii", "backslashreplace").decode("ascii")
