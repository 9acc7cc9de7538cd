"""The page record over HTTP, on a real server process: the document endpoint lists
each page's reading with the summary and its review flag, the review read carries
the flag, and publishing a flagged version is 409 NeedsAcceptance until the
publisher accepts it (body or query), as the CLI and the dashboard do."""

from __future__ import annotations

from core import Ledger, Settings
from core.ingest.formats.base import PageReading
from core.states import PageDecision
from tests.api.conftest import Api
from tests.api.test_checklist import is_problem
from tests.core.test_pages import finished, scan


async def flagged_and_clean(settings: Settings) -> tuple[str, str]:
    async with await Ledger.open(settings) as ledger:
        low = await finished(ledger, scan(), "low.pdf")
        clean = await finished(ledger, [PageReading(1, PageDecision.TEXT, 900)], "clean.pdf")
    return low.document_id, clean.document_id


async def test_the_document_endpoint_lists_pages_and_publish_needs_acceptance(
    api: Api, settings: Settings
) -> None:
    low, clean = await flagged_and_clean(settings)
    with api.client("viewer") as viewer, api.client("publisher") as publisher:
        doc = viewer.get(f"/api/documents/{low[:8]}").json()
        assert doc["page_summary"]["flagged"] is True
        assert doc["page_summary"]["reason"] == (
            "3 pages read by OCR at confidence < 60: pages 4, 7, 9"
        )
        assert doc["page_summary"]["low_pages"] == [4, 7, 9]
        assert len(doc["pages"]) == 10
        assert doc["pages"][3] == {
            "page": 4,
            "decision": "ocr",
            "chars": 800,
            "confidence": 42.0,
            "ocr_seconds": 2.1,
            "reason": None,
        }
        review = viewer.get(f"/api/documents/{low}/review").json()
        assert review["page_summary"]["flagged"] is True

        refused = publisher.post(f"/api/documents/{low}/publish")
        is_problem(refused, 409, "NeedsAcceptance")
        problem = refused.json()
        assert problem["type"] == "urn:ingestdesk:problem:NeedsAcceptance"
        assert "flagged for review: 3 pages read by OCR" in problem["detail"]
        assert viewer.get(f"/api/documents/{low}").json()["status"] == "review_pending"

        accepted = publisher.post(
            f"/api/documents/{low}/publish",
            json={"accept_low_confidence": True, "reason": "checked pages 4, 7, 9"},
        )
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["status"] == "published"
        last = viewer.get(f"/api/documents/{low}/history").json()[-1]
        assert last["reason"].startswith("checked pages 4, 7, 9; accepted as read: 3 pages")

        # A version with nothing to accept publishes as before; a query flag works too.
        plain = viewer.get(f"/api/documents/{clean}").json()
        assert plain["page_summary"]["flagged"] is False and len(plain["pages"]) == 1
        ok = publisher.post(
            f"/api/documents/{clean}/publish", params={"accept_low_confidence": "true"}
        )
        assert ok.status_code == 200, ok.text


async def test_the_tasks_filter_finds_low_confidence_documents_over_http(
    api: Api, settings: Settings
) -> None:
    low, _ = await flagged_and_clean(settings)
    with api.client("viewer") as viewer:
        answer = viewer.get("/api/ingestion-tasks", params={"filter": "ocr:low"})
        assert answer.status_code == 200, answer.text
        assert [t["document_id"] for t in answer.json()["tasks"]] == [low]
        bad = viewer.get("/api/ingestion-tasks", params={"filter": "ocr:maybe"})
        assert bad.status_code == 422 and "ocr must be one of" in bad.json()["detail"]
