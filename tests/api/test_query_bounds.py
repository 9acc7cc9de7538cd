"""What a caller may cost with a question: the filter language
(``GET /api/ingestion-tasks?filter=``) is bounded (characters, terms, a term's value)
with a 400 that names the limit, and distinct filters leave nothing behind in the
server; a search query is bounded in characters (422, as its other limits)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx

from core import Settings
from core.filters import FILTER_TERMS_MAX, FILTER_TEXT_MAX, TERM_VALUE_MAX
from core.ledger.search import SEARCH_QUERY_MAX
from tests.api.conftest import Api, cli
from tests.api.test_auth import busy_server, rss_mb
from tests.api.test_checklist import is_problem

# Terms of every kind, so that random filters have many shapes (each shape was a new
# statement in SQLAlchemy's compiled cache).
TERM_KINDS = (
    "status:failed",
    "!status:succeeded",
    "code:parse_error",
    "!code:lease_expired",
    "stage:parse",
    "attempt:>1",
    "attempt:<=3",
    "worker:w1",
    "!worker:w2",
    "name:report",
    "!name:draft",
    "id:3f2a",
    "doc:91ab",
    "quarterly",
    "!scan",
)
DISTINCT_FILTERS = 300  # distinct filters of the largest accepted size, one request each
FILTER_GROWTH_MAX_MB = 30.0  # MiB the server may grow meanwhile (cached statements: ~75)


def _largest_filters(count: int) -> list[str]:
    rng = random.Random(19)
    return [" ".join(rng.choice(TERM_KINDS) for _ in range(FILTER_TERMS_MAX)) for _ in range(count)]


def test_distinct_filters_leave_the_server_as_large_as_it_was(
    settings: Settings, tmp_path: Path
) -> None:
    made = cli(settings, "tokens", "create", "reader", "--role", "viewer", "--json")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)["token"]
    servers = busy_server(settings, tmp_path / "server.log")
    api = next(servers)
    filters = _largest_filters(DISTINCT_FILTERS)
    assert all(len(f) <= FILTER_TEXT_MAX for f in filters)
    with httpx.Client(
        base_url=api.base, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        for warm in filters[:5]:  # the first statements compile SQLAlchemy's own caches
            assert client.get("/api/ingestion-tasks", params={"filter": warm}).status_code == 200
        before = rss_mb(api.process.pid)
        for text in filters[5:]:
            answer = client.get("/api/ingestion-tasks", params={"filter": text})
            assert answer.status_code == 200, answer.text
        grown = rss_mb(api.process.pid) - before
    servers.close()
    assert grown < FILTER_GROWTH_MAX_MB, f"the server grew by {grown:.1f} MiB"


def test_a_filter_over_its_limits_is_400_naming_the_limit(api: Api) -> None:
    too_many = " ".join(["status:failed"] * (FILTER_TERMS_MAX + 1))
    # The issue's: 990 terms, where SQLite said "Expression tree is too large" (a 503).
    huge = " ".join(f"name:n{i}" for i in range(990))
    long_value = "name:" + "x" * (TERM_VALUE_MAX + 1)
    cases = {
        too_many: f"at most {FILTER_TERMS_MAX} terms",
        huge: f"at most {FILTER_TEXT_MAX} characters",
        long_value: f"at most {TERM_VALUE_MAX} characters",
    }
    with api.client("viewer") as client:
        for text, limit in cases.items():
            answer = client.get("/api/ingestion-tasks", params={"filter": text})
            is_problem(answer, 400, "FilterTooLarge")
            assert limit in answer.json()["detail"], answer.text
        # At the limits, a filter is served.
        at_limit = " ".join(["!status:failed"] * FILTER_TERMS_MAX)
        assert client.get("/api/ingestion-tasks", params={"filter": at_limit}).status_code == 200
        widest = "name:" + "x" * TERM_VALUE_MAX
        assert client.get("/api/ingestion-tasks", params={"filter": widest}).status_code == 200


def test_the_cli_refuses_the_same_filters_in_the_same_words(settings: Settings) -> None:
    made = cli(settings, "tokens", "create", "reader", "--role", "viewer")  # a ledger to read
    assert made.returncode == 0, made.stderr
    too_many = " ".join(["status:failed"] * (FILTER_TERMS_MAX + 1))
    for command in (["tasks"], ["cancel", "--dry-run"], ["retry", "--dry-run"]):
        refused = cli(settings, *command, "--filter", too_many)
        assert refused.returncode == 2, refused
        [line] = refused.stderr.strip().splitlines()
        assert f"at most {FILTER_TERMS_MAX} terms (this one has {FILTER_TERMS_MAX + 1})" in line
        assert "Traceback" not in refused.stderr
    as_json = cli(settings, "tasks", "--filter", "x" * (FILTER_TEXT_MAX + 1), "--json")
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert error["kind"] == "FilterTooLarge"
    assert f"at most {FILTER_TEXT_MAX} characters" in error["message"]


def test_a_search_query_over_its_length_is_refused_naming_the_limit(api: Api) -> None:
    with api.client("viewer") as client:
        longest = " ".join(["lease"] * (SEARCH_QUERY_MAX // 6))
        assert client.get("/api/search", params={"q": longest}).status_code == 200
        answer = client.get("/api/search", params={"q": "w " * SEARCH_QUERY_MAX})
        is_problem(answer, 422, "BadInput")
        assert f"at most {SEARCH_QUERY_MAX} characters" in answer.json()["detail"]
    refused = cli(api.settings, "search", "x" * (SEARCH_QUERY_MAX + 1))
    assert refused.returncode == 2, refused
    assert f"at most {SEARCH_QUERY_MAX} characters" in refused.stderr


async def test_filtered_reads_take_turns_and_rest_between_them() -> None:
    """Two filtered reads never overlap, and the second starts no sooner than the
    first's duration times the rest after the first ended: back to back, expensive
    reads leave the server idle part of the time for every other request."""
    import asyncio
    import time

    from core.api.context import FilteredTurns

    turns = FilteredTurns(at_once=1, rest=1.0)
    spans: list[tuple[float, float]] = []

    async def read(hold_s: float) -> None:
        async with turns.turn():
            start = time.monotonic()
            await asyncio.sleep(hold_s)
            spans.append((start, time.monotonic()))

    await asyncio.gather(read(0.2), read(0.0))
    (first_start, first_end), (second_start, _) = spans
    assert second_start >= first_end + (first_end - first_start) * 1.0 - 0.01
