"""The Idempotency-Key header, as the IETF draft has it: a repeat answers 200 with the
first answer and does nothing new; the same key with another payload is 422."""

from __future__ import annotations

from tests.api.conftest import Api
from tests.api.test_checklist import REPORT, is_problem


def test_a_repeated_upload_and_submit_answer_the_first_result(api: Api) -> None:
    with api.client() as client:
        headers = {"Idempotency-Key": "upload-1"}
        first = client.post("/api/documents", files={"file": ("r.md", REPORT)}, headers=headers)
        again = client.post("/api/documents", files={"file": ("r.md", REPORT)}, headers=headers)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json()["document_id"] == first.json()["document_id"]
        other = client.post(
            "/api/documents", files={"file": ("r.md", REPORT + b"!")}, headers=headers
        )
        is_problem(other, 422, "KeyReused")

        doc = first.json()["document_id"]
        submit = {"Idempotency-Key": "submit-1"}
        queued = client.post(f"/api/documents/{doc}/submit", headers=submit)
        repeat = client.post(f"/api/documents/{doc}/submit", headers=submit)
        assert (queued.status_code, repeat.status_code) == (202, 200)
        assert repeat.json()["task_id"] == queued.json()["task_id"]
        assert repeat.headers["location"] == queued.headers["location"]
        # Without the key, the state machine answers as always.
        is_problem(client.post(f"/api/documents/{doc}/submit"), 409, "Conflict")
        tasks = client.get("/api/ingestion-tasks").json()["tasks"]
        assert [t["task_id"] for t in tasks] == [queued.json()["task_id"]]
