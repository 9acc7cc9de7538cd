"""The ingestion design's acceptance checklist, over HTTP: a real server process,
real worker processes on the same ledger, a real HTTP client."""

from __future__ import annotations

import subprocess
from typing import Any

import httpx

from tests import hostile
from tests.api.conftest import Api, cli_command

REPORT = b"The quarterly ingestion report: throughput, error budgets and the ledger.\n"
TASK_FIELDS = (
    "task_id",
    "document_id",
    "status",
    "stage",
    "completed",
    "total",
    "attempt",
    "error_code",
    "error_detail",
)
PROBLEM_JSON = "application/problem+json"


def upload(client: httpx.Client, data: bytes, name: str) -> dict[str, Any]:
    answer = client.post("/api/documents", files={"file": (name, data)})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def submit(client: httpx.Client, document_id: str) -> httpx.Response:
    return client.post(f"/api/documents/{document_id}/submit")


def added(client: httpx.Client, data: bytes = REPORT, name: str = "report.md") -> dict[str, Any]:
    answer = submit(client, upload(client, data, name)["document_id"])
    assert answer.status_code == 202, answer.text
    return dict(answer.json())


def is_problem(answer: httpx.Response, status: int, kind: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM_JSON)
    body = answer.json()
    assert (body["status"], body["kind"]) == (status, kind)
    assert body["detail"] and "\n" not in body["detail"]
    for leak in ("Traceback", "SELECT", "UPDATE", "/tmp/", "sqlalchemy"):
        assert leak not in answer.text


def test_submit_is_202_and_the_task_is_queued_at_download(api: Api) -> None:
    with api.client() as client:
        doc = upload(client, REPORT, "report.md")
        assert doc["status"] == "draft"
        answer = submit(client, doc["document_id"])
        assert answer.status_code == 202
        task = answer.json()
        assert set(TASK_FIELDS) <= set(task)
        assert (task["status"], task["stage"], task["attempt"]) == ("queued", "download", 0)
        assert (task["completed"], task["total"], task["error_code"]) == (0, 1, None)
        assert answer.headers["location"] == f"/api/ingestion-tasks/{task['task_id']}"
        again = client.get(answer.headers["location"])
        assert again.status_code == 200
        assert {k: again.json()[k] for k in TASK_FIELDS} == {k: task[k] for k in TASK_FIELDS}
        # The same fields the CLI prints for the task.
        shown = subprocess.run(
            cli_command(api.settings, "task", task["task_id"][:8], "--json"),
            capture_output=True,
            text=True,
            check=True,
        )
        import json

        assert {k: json.loads(shown.stdout)[k] for k in TASK_FIELDS} == {
            k: task[k] for k in TASK_FIELDS
        }
        # A submit of a document that is no longer a draft is refused.
        is_problem(submit(client, doc["document_id"]), 409, "Conflict")


def test_a_queued_task_cancels_at_once_and_its_document_returns_to_draft(api: Api) -> None:
    with api.client() as client:
        task = added(client)
        answer = client.delete(f"/api/ingestion-tasks/{task['task_id'][:8]}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "cancelled"
        doc = client.get(f"/api/documents/{task['document_id']}").json()
        assert doc["status"] == "draft"
        history = client.get(f"/api/ingestion-tasks/{task['task_id']}?history=1").json()
        assert history["history"][-1]["actor"] == "operator-token"
        # Cancelling it again: the state machine refuses.
        is_problem(client.delete(f"/api/ingestion-tasks/{task['task_id']}"), 409, "Conflict")


def test_the_whole_run_through_worker_processes(api: Api) -> None:
    """Success, review, publish, search; a corrupt PDF fails with parse_error and is
    retried; cancel and retry refuse what the rules refuse."""
    with api.client() as client, api.client("publisher") as publisher:
        good = added(client)
        corrupt = added(client, hostile.truncated_pdf(), "scan.pdf")
        worked = api.worker("--until-idle", "--worker-id", "w-http")
        assert worked.returncode == 0, worked.stderr

        done = client.get(f"/api/ingestion-tasks/{good['task_id']}").json()
        assert (done["status"], done["stage"]) == ("succeeded", "finalizing")
        doc = client.get(f"/api/documents/{good['document_id']}").json()
        assert doc["status"] == "review_pending"
        # Chunks written by the worker process, read by the API process.
        chunks = client.get(f"/api/documents/{good['document_id']}/chunks").json()
        assert chunks and "quarterly ingestion report" in chunks[0]["text"]
        # Not searchable until a person publishes it.
        assert client.get("/api/search", params={"q": "quarterly"}).json() == []
        is_problem(client.post(f"/api/documents/{good['document_id']}/publish"), 403, "Forbidden")
        published = publisher.post(f"/api/documents/{good['document_id']}/publish")
        assert published.status_code == 200 and published.json()["status"] == "published"
        hits = client.get("/api/search", params={"q": "quarterly"}).json()
        assert [h["document_id"] for h in hits] == [good["document_id"]]
        is_problem(client.delete(f"/api/ingestion-tasks/{good['task_id']}"), 409, "Conflict")
        is_problem(client.post(f"/api/ingestion-tasks/{good['task_id']}/retry"), 409, "Conflict")

        failed = client.get(f"/api/ingestion-tasks/{corrupt['task_id']}").json()
        assert (failed["status"], failed["error_code"]) == ("failed", "parse_error")
        assert client.get(f"/api/documents/{corrupt['document_id']}").json()["status"] == "failed"
        retried = client.post(f"/api/ingestion-tasks/{corrupt['task_id']}/retry")
        assert retried.status_code == 200, retried.text
        assert (retried.json()["status"], retried.json()["attempt"]) == ("queued", 1)
        assert client.get(f"/api/ingestion-tasks/{corrupt['task_id']}").json()["attempt"] == 1
        api.worker("--until-idle")
        again = client.get(f"/api/ingestion-tasks/{corrupt['task_id']}").json()
        assert (again["status"], again["attempt"]) == ("failed", 2)


def test_retry_of_a_draft_or_a_task_that_has_not_failed_is_409(api: Api) -> None:
    with api.client() as client:
        queued = added(client)
        is_problem(client.post(f"/api/ingestion-tasks/{queued['task_id']}/retry"), 409, "Conflict")
        client.delete(f"/api/ingestion-tasks/{queued['task_id']}")  # document back to draft
        answer = client.post(f"/api/ingestion-tasks/{queued['task_id']}/retry")
        is_problem(answer, 409, "Conflict")
        assert "submit the document again" in answer.json()["detail"]


def test_two_workers_on_one_task_id_exactly_one_runs_it(api: Api) -> None:
    with api.client() as client:
        task = added(client)
    workers = [
        subprocess.Popen(
            cli_command(api.settings, "worker", task["task_id"], "--worker-id", name),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("worker-one", "worker-two")
    ]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0]
    assert sum("claimed task=" in out for out in outputs) == 1
    assert sum("claim missed task=" in out for out in outputs) == 1
    with api.client("viewer") as viewer:
        final = viewer.get(f"/api/ingestion-tasks/{task['task_id']}").json()
    assert (final["status"], final["attempt"]) == ("succeeded", 1)


def test_unknown_ids_and_bad_input_are_problems(api: Api) -> None:
    with api.client() as client:
        is_problem(client.get("/api/ingestion-tasks/0123456789abcdef"), 404, "NotFound")
        is_problem(client.get("/api/documents/zzzz"), 404, "NotFound")
        is_problem(client.get("/api/ingestion-tasks", params={"status": "bogus"}), 422, "BadInput")
        is_problem(
            client.get("/api/ingestion-tasks", params={"filter": "colour:red"}), 422, "BadInput"
        )
        is_problem(client.get("/api/ingestion-tasks", params={"cursor": "!!"}), 422, "BadInput")
        is_problem(client.get("/api/ingestion-tasks", params={"limit": 0}), 422, "BadInput")
        is_problem(
            client.post("/api/documents", files={"file": ("x.zip", b"PK\x03\x04" + bytes(64))}),
            422,
            "BadInput",
        )
        is_problem(client.post("/api/documents", content=b"not multipart"), 415, "BadInput")
        is_problem(client.get("/api/no-such-thing"), 404, "NotFound")


def test_task_lists_page_by_keyset(api: Api) -> None:
    with api.client() as client:
        made = [added(client, REPORT + bytes([65 + i]), f"n{i}.md")["task_id"] for i in range(5)]
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/api/ingestion-tasks", params=params).json()
            seen += [t["task_id"] for t in page["tasks"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == list(reversed(made))
        only = client.get("/api/ingestion-tasks", params={"filter": "name:n3"}).json()
        assert [t["task_id"] for t in only["tasks"]] == [made[3]]


def test_health_metrics_and_offline_docs(api: Api) -> None:
    health = httpx.get(f"{api.base}/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    with api.client("viewer") as viewer:
        added_by = api.client()
        added(added_by)
        added_by.close()
        metrics = viewer.get("/metrics")
        assert metrics.status_code == 200
        assert 'ingestdesk_tasks{status="queued"} 1.0' in metrics.text
        assert 'ingestdesk_provider_requests{state="unknown"} 0.0' in metrics.text
        assert "ingestdesk_queue_oldest_age_seconds" in metrics.text
        assert "ingestdesk_workers_alive" in metrics.text
        docs = viewer.get("/docs")
        assert docs.status_code == 200
        assert "cdn" not in docs.text.lower() and "unpkg" not in docs.text.lower()
        assert viewer.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200
        spec = viewer.get("/openapi.json").json()
        assert "/api/documents/{document_id}/submit" in spec["paths"]
