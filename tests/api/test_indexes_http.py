"""Vector indexes over HTTP, on a real server process with real worker processes and
real tokens: a new index's whole life (create → its campaign run by a worker → ready
→ activate → the old one retired → drop it), the refusals in the ledger's words, and
who may do what."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.conftest import Api
from tests.api.test_checklist import is_problem, submit, upload

FIRST = "hashed:256"  # the first worker's embedder: the ledger's first (active) index
SECOND = "hashed:128"
NOTES = (
    (b"Harbour tariffs for the northern quay: berths, cranes and pilotage.\n", "tariffs.md"),
    (b"Lighthouse dues are paid by every vessel entering the outer basin.\n", "dues.md"),
)


def published(api: Api, client: httpx.Client, publisher: httpx.Client) -> list[str]:
    """Upload NOTES, let a worker process ingest them (making the first index), and
    publish them: the versions a campaign re-embeds."""
    ids = [upload(client, data, name)["document_id"] for data, name in NOTES]
    for document_id in ids:
        assert submit(client, document_id).status_code == 202
    worked = api.worker("--until-idle", "--embedder", FIRST)
    assert worked.returncode == 0, worked.stderr
    for document_id in ids:
        answer = publisher.post(f"/api/documents/{document_id}/publish")
        assert answer.status_code == 200, answer.text
    return ids


def by_name(client: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = client.get("/api/indexes")
    assert answer.status_code == 200, answer.text
    return {index["name"]: index for index in answer.json()}


def test_an_index_is_created_built_by_a_worker_activated_and_the_old_one_dropped(
    api: Api,
) -> None:
    with (
        api.client() as client,
        api.client("publisher") as publisher,
        api.client("viewer") as viewer,
    ):
        published(api, client, publisher)
        [old] = by_name(viewer).values()
        assert (old["name"], old["state"], old["dimensions"]) == ("hashed-256", "active", 256)
        assert old["vectors"] == 2 and old["campaign"]["total"] == 0

        created = client.post("/api/indexes", json={"embedder": SECOND, "name": "small"})
        assert created.status_code == 201, created.text
        new = created.json()
        assert (new["name"], new["embedder"], new["dimensions"], new["state"]) == (
            "small",
            "hashed",
            128,
            "building",
        )
        assert new["campaign"] == {"total": 2, "done": 0, "by_status": {"queued": 2}}
        assert new["vectors"] == 0

        # Building: not ready, so activating is refused in the ledger's words.
        early = client.post("/api/indexes/small/activate")
        is_problem(early, 409, "Conflict")
        assert "is building, not ready (campaign: 2 queued)" in early.json()["detail"]

        worked = api.worker("--until-idle", "--embedder", FIRST)
        assert worked.returncode == 0, worked.stderr
        built = viewer.get("/api/indexes/small").json()
        assert built["state"] == "ready", built
        assert built["campaign"] == {"total": 2, "done": 2, "by_status": {"succeeded": 2}}
        assert built["vectors"] == 2 and built["built_at"] is not None
        # By id as well as by name.
        assert viewer.get(f"/api/indexes/{built['id']}").json()["name"] == "small"

        activated = client.post("/api/indexes/small/activate", json={})
        assert activated.status_code == 200, activated.text
        assert activated.json()["state"] == "active"
        states = {name: index["state"] for name, index in by_name(viewer).items()}
        assert states == {"hashed-256": "retired", "small": "active"}

        # The active one cannot be dropped; the retired one can, with its vectors.
        refused = client.delete("/api/indexes/small")
        is_problem(refused, 409, "Conflict")
        assert "is active: search answers from it" in refused.json()["detail"]
        dropped = client.delete("/api/indexes/hashed-256")
        assert dropped.status_code == 200, dropped.text
        assert (dropped.json()["name"], dropped.json()["vectors"]) == ("hashed-256", 2)
        assert list(by_name(viewer)) == ["small"]
        is_problem(viewer.get("/api/indexes/hashed-256"), 404, "NotFound")


def test_cancel_resume_and_force(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        published(api, client, publisher)
        assert client.post("/api/indexes", json={"embedder": SECOND}).status_code == 201
        name = "hashed-128"  # the default name, from the embedder

        cancelled = client.post(f"/api/indexes/{name}/cancel", json={"reason": "wrong model"})
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["campaign"]["by_status"] == {"cancelled": 2}
        tasks = client.get("/api/ingestion-tasks", params={"status": "cancelled"}).json()
        history = client.get(
            f"/api/ingestion-tasks/{tasks['tasks'][0]['task_id']}", params={"history": 1}
        ).json()["history"]
        assert (history[-1]["actor"], history[-1]["reason"]) == ("operator-token", "wrong model")

        # Cancelled tasks leave it building, not ready: activate needs force.
        is_problem(client.post(f"/api/indexes/{name}/activate"), 409, "Conflict")
        resumed = client.post(f"/api/indexes/{name}/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["campaign"]["by_status"] == {"cancelled": 2, "queued": 2}

        forced = client.post(f"/api/indexes/{name}/activate", json={"force": True})
        assert forced.status_code == 200, forced.text
        assert forced.json()["state"] == "active"
        # Already active: nothing to activate.
        is_problem(client.post(f"/api/indexes/{name}/activate"), 409, "Conflict")


def test_refusals_bad_specs_duplicates_unknown_names(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        published(api, client, publisher)
        for spec, said in (
            ("bm25", "unknown embedder 'bm25'"),
            ("hashed:0", "hashed dimensions must be"),
            ("hashed 256", "one word without spaces"),
        ):
            answer = client.post("/api/indexes", json={"embedder": spec})
            is_problem(answer, 422, "BadInput")
            assert said in answer.json()["detail"], answer.json()
        for body in ({}, {"embedder": ""}, {"embedder": SECOND, "colour": "red"}):
            is_problem(client.post("/api/indexes", json=body), 422, "BadInput")
        is_problem(client.post("/api/indexes", content=b"{x", headers=JSON), 400, "BadInput")

        # The active index's own embedder: it exists already.
        again = client.post("/api/indexes", json={"embedder": FIRST})
        is_problem(again, 409, "Conflict")
        assert "'hashed-256' is already this embedder" in again.json()["detail"]

        for method, path in (
            ("GET", "/api/indexes/nope"),
            ("POST", "/api/indexes/nope/activate"),
            ("POST", "/api/indexes/nope/resume"),
            ("POST", "/api/indexes/nope/cancel"),
            ("DELETE", "/api/indexes/nope"),
        ):
            answer = client.request(method, path)
            is_problem(answer, 404, "NotFound")
            assert "no index is named 'nope'" in answer.json()["detail"]
        assert [i["name"] for i in client.get("/api/indexes").json()] == ["hashed-256"]


JSON = {"Content-Type": "application/json"}


def test_a_viewer_reads_indexes_but_cannot_change_them(api: Api) -> None:
    with api.client("viewer") as viewer, api.client(None) as anonymous:
        assert viewer.get("/api/indexes").json() == []
        for method, path, body in (
            ("POST", "/api/indexes", {"embedder": SECOND}),
            ("POST", "/api/indexes/x/activate", None),
            ("POST", "/api/indexes/x/resume", None),
            ("POST", "/api/indexes/x/cancel", None),
            ("DELETE", "/api/indexes/x", None),
        ):
            answer = viewer.request(method, path, json=body)
            is_problem(answer, 403, "Forbidden")
            assert "this needs operator" in answer.json()["detail"]
            is_problem(anonymous.request(method, path, json=body), 401, "Unauthorized")
        is_problem(anonymous.get("/api/indexes"), 401, "Unauthorized")
        assert viewer.get("/api/indexes").json() == []


def test_the_openapi_document_describes_indexes(api: Api) -> None:
    with api.client("viewer") as viewer:
        spec = viewer.get("/openapi.json").json()
    paths = spec["paths"]
    for path, method, errors in (
        ("/api/indexes", "get", {"401", "403"}),
        ("/api/indexes", "post", {"400", "409", "413", "415", "422"}),
        ("/api/indexes/{name}", "get", {"404"}),
        ("/api/indexes/{name}", "delete", {"404", "409"}),
        ("/api/indexes/{name}/activate", "post", {"404", "409"}),
        ("/api/indexes/{name}/resume", "post", {"404"}),
        ("/api/indexes/{name}/cancel", "post", {"404"}),
    ):
        operation = paths[path][method]
        assert errors <= set(operation["responses"]), (path, method)
    create = paths["/api/indexes"]["post"]
    assert "201" in create["responses"]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    body = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert body["required"] == ["embedder"]
    assert "wordllama:128" in body["properties"]["embedder"]["examples"]
