"""Document versions and the review desk over HTTP, on a real server process with real
worker processes and real tokens: a new version is searchable only once a publisher
publishes it; stale and racing publishes are 409; reject, withdraw and delete."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from core import Ledger, Settings
from tests.api.conftest import Api
from tests.api.test_checklist import is_problem, submit, upload

V1 = b"Harbour tariffs for the northern quay: berths, cranes and pilotage.\n"
V2 = b"Harbour tariffs for the northern quay, revised: berths and lighthouse dues.\n"


def processed(api: Api, client: httpx.Client, doc: dict[str, Any]) -> dict[str, Any]:
    """Submit a draft, let a worker process run it; the version, waiting for review."""
    queued = submit(client, doc["document_id"])
    assert queued.status_code == 202, queued.text
    worked = api.worker("--until-idle")
    assert worked.returncode == 0, worked.stderr
    after = client.get(f"/api/documents/{doc['document_id']}").json()
    assert after["status"] == "review_pending", after
    return dict(after)


def replace(client: httpx.Client, replaces: str, data: bytes, name: str) -> httpx.Response:
    return client.post("/api/documents", files={"file": (name, data)}, data={"replaces": replaces})


def hits(client: httpx.Client, q: str) -> list[tuple[str, int]]:
    # Keyword search: which versions hold the word (vectors bring nearest neighbours).
    answer = client.get("/api/search", params={"q": q, "mode": "keyword"})
    assert answer.status_code == 200, answer.text
    return [(h["document_id"], h["version_no"]) for h in answer.json()]


def test_a_new_version_is_searched_only_once_it_is_published(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        v1 = processed(api, client, upload(client, V1, "tariffs.md"))
        assert publisher.post(f"/api/documents/{v1['document_id']}/publish").status_code == 200
        answer = client.get("/api/search", params={"q": "harbour", "limit": 5, "mode": "keyword"})
        [hit] = answer.json()
        assert (hit["document_id"], hit["family_id"], hit["version_no"]) == (
            v1["document_id"],
            v1["document_id"],
            1,
        )
        assert hit["score"] > 0 and "**Harbour**" in hit["snippet"]
        assert {"filename", "ordinal", "page", "text"} <= set(hit)

        sent = replace(client, v1["document_id"][:8], V2, "tariffs.md")
        assert sent.status_code == 201, sent.text
        v2 = sent.json()
        assert (v2["status"], v2["family_id"], v2["version_no"]) == ("draft", v1["document_id"], 2)
        assert sent.headers["location"] == f"/api/documents/{v2['document_id']}"
        v2 = processed(api, client, v2)
        # Processed and waiting, but not published: search still finds v1 only.
        assert hits(client, "harbour") == [(v1["document_id"], 1)]
        assert hits(client, "lighthouse") == []

        queue = client.get("/api/review-queue").json()
        assert [d["document_id"] for d in queue] == [v2["document_id"]]
        review = client.get(f"/api/documents/{v2['document_id']}/review").json()
        assert review["candidate"]["document_id"] == v2["document_id"]
        assert review["published"]["document_id"] == v1["document_id"]
        assert any("lighthouse" in line for line in review["added"])
        assert any("pilotage" in line for line in review["removed"])
        assert (review["chunks_before"], review["chunks_after"]) == (1, 1)

        # Stale: the reviewer looked at another row version.
        stale = publisher.post(
            f"/api/documents/{v2['document_id']}/publish",
            json={"expect_version": v2["version"] + 1, "reason": "looks right"},
        )
        is_problem(stale, 409, "Conflict")
        assert f"changed since you looked: now version {v2['version']}" in stale.json()["detail"]
        assert hits(client, "harbour") == [(v1["document_id"], 1)]

        published = publisher.post(
            f"/api/documents/{v2['document_id']}/publish",
            params={"expect_version": v2["version"], "reason": "dues revised"},
        )
        assert published.status_code == 200, published.text
        assert (published.json()["status"], published.json()["version"]) == (
            "published",
            v2["version"] + 1,
        )
        assert hits(client, "harbour") == [(v2["document_id"], 2)]
        assert hits(client, "pilotage") == []

        versions = client.get(f"/api/documents/{v1['document_id']}/versions").json()
        assert [(v["version_no"], v["status"]) for v in versions] == [
            (1, "retired"),
            (2, "published"),
        ]
        history = client.get(f"/api/documents/{v2['document_id']}/history").json()
        steps = [(e["version_no"], e["action"], e["actor"]) for e in history]
        assert (2, "publish", "publisher-token") in steps
        assert (1, "retire", "publisher-token") in steps
        assert (1, "upload", "operator-token") in steps
        assert (2, "upload", "operator-token") in steps
        assert [e["reason"] for e in history if e["action"] == "publish"][-1] == "dues revised"
        assert client.get("/api/review-queue").json() == []


def test_two_concurrent_publishes_of_one_candidate_one_wins(api: Api) -> None:
    with api.client() as client:
        doc = processed(api, client, upload(client, V1, "race.md"))
    barrier = threading.Barrier(2)

    def publish(_: int) -> httpx.Response:
        with api.client("publisher") as publisher:
            barrier.wait()
            return publisher.post(
                f"/api/documents/{doc['document_id']}/publish",
                json={"expect_version": doc["version"]},
            )

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(publish, range(2)))
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    [lost] = [a for a in answers if a.status_code == 409]
    is_problem(lost, 409, "Conflict")
    assert "is published; only versions waiting for review" in lost.json()["detail"]
    with api.client("viewer") as viewer:
        history = viewer.get(f"/api/documents/{doc['document_id']}/history").json()
        assert [e["action"] for e in history].count("publish") == 1
        assert hits(viewer, "harbour") == [(doc["document_id"], 1)]


def test_reject_and_withdraw_round_trips(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        doc = processed(api, client, upload(client, V1, "round.md"))
        path = f"/api/documents/{doc['document_id']}"
        # A reason is required, however it is missing: the ledger's one line.
        for missing in (None, {}, {"reason": "  "}):
            answer = publisher.post(f"{path}/reject", json=missing)
            is_problem(answer, 422, "BadInput")
            assert answer.json()["detail"] == "rejecting a version needs a reason (--reason)"
        is_problem(publisher.post(f"{path}/reject", json={"why": "x"}), 422, "BadInput")

        rejected = publisher.post(f"{path}/reject", json={"reason": "wrong quay"})
        assert rejected.status_code == 200 and rejected.json()["status"] == "draft"
        assert client.get(f"{path}/chunks").json() == []
        again = publisher.post(f"{path}/reject", json={"reason": "twice"})
        is_problem(again, 409, "Conflict")
        assert "only versions waiting for review can be rejected" in again.json()["detail"]

        processed(api, client, doc)
        assert publisher.post(f"{path}/publish", json={"reason": "fixed"}).status_code == 200
        assert hits(client, "harbour") == [(doc["document_id"], 1)]
        is_problem(publisher.post(f"{path}/withdraw"), 422, "BadInput")
        withdrawn = publisher.post(f"{path}/withdraw", params={"reason": "superseded by law"})
        assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"
        assert hits(client, "harbour") == []
        is_problem(publisher.post(f"{path}/withdraw", json={"reason": "again"}), 409, "Conflict")
        # A withdrawn version may be published again, chunks and all.
        assert publisher.post(f"{path}/publish").status_code == 200
        assert hits(client, "harbour") == [(doc["document_id"], 1)]

        history = client.get(f"{path}/history").json()
        reasons = {e["action"]: e["reason"] for e in history}
        assert reasons["reject"] == "wrong quay"
        assert reasons["withdraw"] == "superseded by law"


def test_operator_and_viewer_tokens_cannot_decide(api: Api) -> None:
    with api.client() as client:
        doc = processed(api, client, upload(client, V1, "roles.md"))
        path = f"/api/documents/{doc['document_id']}"
        for action in ("publish", "reject", "withdraw"):
            for role in ("viewer", "operator"):
                with api.client(role) as weak:
                    answer = weak.post(f"{path}/{action}", json={"reason": "mine"})
                    is_problem(answer, 403, "Forbidden")
        with api.client("viewer") as viewer:
            is_problem(viewer.delete(path), 403, "Forbidden")
            is_problem(replace(viewer, doc["document_id"], V2, "x.md"), 403, "Forbidden")
        assert client.get(path).json()["status"] == "review_pending"


def test_publish_reads_its_body_strictly(api: Api) -> None:
    with api.client("publisher") as publisher:
        doc = upload(publisher, V1, "strict.md")
        path = f"/api/documents/{doc['document_id']}/publish"
        typo = publisher.post(path, json={"expected_version": 1})
        is_problem(typo, 422, "BadInput")
        assert "expected_version" in typo.json()["detail"]
        twice = publisher.post(path, json={"expect_version": 1}, params={"expect_version": 2})
        is_problem(twice, 422, "BadInput")
        is_problem(publisher.post(path, params={"expect_version": 0}), 422, "BadInput")
        draft = publisher.post(path, params={"expect_version": 1})
        is_problem(draft, 409, "Conflict")
        assert "is draft; only versions waiting for review" in draft.json()["detail"]


async def _claim(settings: Settings, task_id: str) -> None:
    async with await Ledger.open(settings) as ledger:
        assert await ledger.queue.claim(task_id, "held-by-test") is not None


def test_replace_and_delete_refuse_what_the_ledger_refuses(api: Api) -> None:
    with api.client() as client:
        is_problem(replace(client, "0123456789abcdef", V2, "x.md"), 404, "NotFound")
        # A blank replaces is a mistake, not a new document.
        blank = replace(client, "  ", V2, "x.md")
        is_problem(blank, 422, "BadInput")
        assert "replaces is blank" in blank.json()["detail"]
        doc = upload(client, V1, "busy.md")
        task = submit(client, doc["document_id"]).json()
        # A version is processing (queued): no new version until it is done.
        busy = replace(client, doc["document_id"], V2, "busy.md")
        is_problem(busy, 409, "Conflict")
        assert "is processing; cancel its task or let it finish first" in busy.json()["detail"]
        keyed = client.post(
            "/api/documents",
            files={"file": ("busy.md", V2)},
            data={"replaces": doc["document_id"]},
            headers={"Idempotency-Key": "k-1"},
        )
        is_problem(keyed, 422, "BadInput")

        asyncio.run(_claim(api.settings, task["task_id"]))  # the task is running now
        with api.client("publisher") as publisher:
            running = publisher.delete(f"/api/documents/{doc['document_id']}")
        is_problem(running, 409, "Conflict")
        assert (
            "is running; cancel it (or let it finish) before deleting" in (running.json()["detail"])
        )
        assert client.get(f"/api/documents/{doc['document_id']}").status_code == 200


def test_delete_removes_every_version_and_keeps_the_history(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        v1 = processed(api, client, upload(client, V1, "gone.md"))
        assert publisher.post(f"/api/documents/{v1['document_id']}/publish").status_code == 200
        v2 = replace(client, v1["document_id"], V2, "gone.md").json()
        task = submit(client, v2["document_id"]).json()
        cancelled = client.delete(f"/api/ingestion-tasks/{task['task_id']}")
        assert cancelled.status_code == 200, cancelled.text

        # An operator may not take a published document out of search this way.
        refused = client.delete(f"/api/documents/{v2['document_id']}")
        is_problem(refused, 403, "Forbidden")
        answer = publisher.delete(
            f"/api/documents/{v2['document_id']}", params={"reason": "wrong port"}
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["family_id"] == v1["document_id"]
        assert [(d["document_id"], d["status"]) for d in body["deleted"]] == [
            (v1["document_id"], "published"),
            (v2["document_id"], "draft"),
        ]
        for doc in (v1, v2):
            is_problem(client.get(f"/api/documents/{doc['document_id']}"), 404, "NotFound")
        is_problem(publisher.delete(f"/api/documents/{v1['document_id']}"), 404, "NotFound")
        assert hits(client, "harbour") == []
        history = client.get(f"/api/documents/{v1['document_id']}/history").json()
        deleted = [e for e in history if e["action"] == "delete"]
        assert {e["document_id"] for e in deleted} == {v1["document_id"], v2["document_id"]}
        assert {e["reason"] for e in deleted} == {"wrong port"}


def test_a_queued_task_of_a_deleted_document_fails_when_claimed(api: Api) -> None:
    with api.client() as client:
        doc = upload(client, V1, "queued.md")
        task = submit(client, doc["document_id"]).json()
        with api.client("publisher") as publisher:
            assert publisher.delete(f"/api/documents/{doc['document_id']}").status_code == 200
        assert api.worker("--until-idle").returncode == 0
        failed = client.get(f"/api/ingestion-tasks/{task['task_id']}").json()
        assert (failed["status"], failed["error_code"]) == ("failed", "document_not_found")


def test_the_openapi_document_describes_versions_and_review(api: Api) -> None:
    with api.client("viewer") as viewer:
        spec = viewer.get("/openapi.json").json()
    paths = spec["paths"]
    for path, method in (
        ("/api/documents/{document_id}/publish", "post"),
        ("/api/documents/{document_id}/reject", "post"),
        ("/api/documents/{document_id}/withdraw", "post"),
        ("/api/documents/{document_id}", "delete"),
        ("/api/documents/{document_id}/versions", "get"),
        ("/api/documents/{document_id}/history", "get"),
        ("/api/documents/{document_id}/review", "get"),
        ("/api/review-queue", "get"),
        ("/api/search", "get"),
    ):
        assert method in paths[path], (path, method)
    publish = paths["/api/documents/{document_id}/publish"]["post"]
    conflict = publish["responses"]["409"]["content"]
    assert conflict["application/problem+json"]["schema"]["properties"]["detail"]
    assert "expect_version" in {p["name"] for p in publish["parameters"]}
    reject = paths["/api/documents/{document_id}/reject"]["post"]
    assert reject["requestBody"]["required"] is True
    [schema] = reject["requestBody"]["content"]["application/json"]["schema"]["anyOf"][:1]
    body = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    assert body["required"] == ["reason"]
    form = paths["/api/documents"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert "replaces" in form["schema"]["properties"]
