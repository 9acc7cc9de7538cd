"""Search modes over HTTP, on a real server process on both backends: a server
started before any vector existed answers vector and hybrid queries from the
vectors separate worker processes wrote since (and drops deleted ones), with no
restart; the answer says how it was made; a bad mode is refused naming the modes."""

from __future__ import annotations

from typing import Any

import httpx

from core.ledger.vector_search import default_path
from tests.api.conftest import Api
from tests.api.test_checklist import is_problem, submit, upload

TARIFFS = b"Harbour tariffs for the northern quay: berths, cranes and pilotage.\n"
PILOTS = b"Harbour pilots board inbound vessels at the outer buoy before noon.\n"


def ingested(
    api: Api, client: httpx.Client, publisher: httpx.Client, data: bytes, name: str
) -> str:
    """Upload, a worker process ingests it, a publisher publishes it: its id."""
    doc = upload(client, data, name)
    assert submit(client, doc["document_id"]).status_code == 202
    worked = api.worker("--until-idle")
    assert worked.returncode == 0, worked.stderr
    published = publisher.post(f"/api/documents/{doc['document_id']}/publish")
    assert published.status_code == 200, published.text
    return str(doc["document_id"])


def search(client: httpx.Client, q: str, **params: Any) -> httpx.Response:
    answer = client.get("/api/search", params={"q": q, **params})
    assert answer.status_code == 200, answer.text
    return answer


def test_a_server_answers_vectors_written_by_worker_processes_after_it_started(api: Api) -> None:
    server_pid = api.process.pid
    with api.client() as client, api.client("publisher") as publisher:
        none_yet = client.get("/api/search", params={"q": "harbour", "mode": "vector"})
        is_problem(none_yet, 422, "BadInput")
        assert "no active index" in none_yet.json()["detail"]

        tariffs = ingested(api, client, publisher, TARIFFS, "tariffs.md")
        answer = search(client, "harbour berths", mode="vector")
        assert [h["document_id"] for h in answer.json()] == [tariffs]
        hit = answer.json()[0]
        assert (hit["mode"], hit["vector_rank"], hit["keyword_rank"]) == ("vector", 1, None)
        assert hit["index"] == answer.headers["X-Search-Index"] != ""
        assert answer.headers["X-Search-Mode"] == "vector"
        assert answer.headers["X-Search-Path"] == default_path()  # int8+rescore here

        pilots = ingested(api, client, publisher, PILOTS, "pilots.md")
        answer = search(client, "harbour pilots", mode="vector")
        assert [h["document_id"] for h in answer.json()] == [pilots, tariffs]
        fused = search(client, "harbour pilots", mode="hybrid").json()
        assert [(h["document_id"], h["keyword_rank"]) for h in fused] == [
            (pilots, 1),
            (tariffs, None),
        ]

        deleted = publisher.delete(f"/api/documents/{tariffs}")
        assert deleted.status_code == 200, deleted.text
        answer = search(client, "harbour", mode="vector")
        assert [h["document_id"] for h in answer.json()] == [pilots]
    assert api.process.poll() is None and api.process.pid == server_pid  # never restarted


def test_the_default_mode_and_a_bad_one(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        ingested(api, client, publisher, TARIFFS, "tariffs.md")
        # The worker's default embedder is a real model (wordllama): hybrid search.
        answer = search(client, "harbour")
        assert answer.headers["X-Search-Mode"] == "hybrid"
        assert answer.headers["X-Search-Index"] == answer.json()[0]["index"] != ""
        assert "X-Search-Notice" not in answer.headers
        assert [(h["mode"], h["keyword_rank"], h["vector_rank"]) for h in answer.json()] == [
            ("hybrid", 1, 1)
        ]
        keyword = search(client, "harbour", mode="keyword")
        assert keyword.headers["X-Search-Mode"] == "keyword"
        assert "X-Search-Index" not in keyword.headers
        refused = client.get("/api/search", params={"q": "harbour", "mode": "semantic"})
        is_problem(refused, 422, "BadInput")
        assert refused.json()["detail"] == (
            "search mode is one of keyword, vector, hybrid ('semantic' asked)"
        )
