"""The HTTP face of the office formats: a deck uploaded over HTTP, ingested by a real
worker process, its chunks and search hits naming their slide (notes marked)."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import Api

DECK = Path(__file__).parent.parent / "core" / "data" / "formats" / "powerpoint_sample.pptx"


def test_chunks_and_hits_carry_their_location(api: Api) -> None:
    with api.client() as client, api.client("publisher") as publisher:
        uploaded = client.post("/api/documents", files={"file": ("deck.pptx", DECK.read_bytes())})
        assert uploaded.status_code == 201, uploaded.text
        doc = uploaded.json()
        assert doc["kind"] == "pptx"
        assert client.post(f"/api/documents/{doc['document_id']}/submit").status_code == 202
        worked = api.worker("--until-idle")
        assert worked.returncode == 0, worked.stderr

        chunks = client.get(f"/api/documents/{doc['document_id']}/chunks").json()
        notes = [c for c in chunks if c["location"].get("notes")]
        assert [(c["location"], c["place"]) for c in notes] == [
            ({"slide": 2, "notes": True}, "slide 2 notes"),
            ({"slide": 3, "notes": True}, "slide 3 notes"),
        ]
        assert publisher.post(f"/api/documents/{doc['document_id']}/publish").status_code == 200
        hits = client.get("/api/search", params={"q": "some notes", "mode": "keyword"}).json()
        assert [(h["location"], h["place"]) for h in hits] == [
            ({"slide": 2, "notes": True}, "slide 2 notes")
        ]
