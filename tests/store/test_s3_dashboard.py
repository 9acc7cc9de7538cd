"""The dashboard's header names the bucket the originals are in (and its endpoint),
never a credential: hosts meant to share one can be seen to."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import Ledger
from tests.store.conftest import ACCESS_KEY, SECRET_KEY, S3Server, s3_settings

pytestmark = pytest.mark.usefixtures("aws_credentials")


async def test_the_header_shows_the_bucket_and_endpoint(
    s3_server: S3Server, tmp_path: Path
) -> None:
    from tui.app import IngestDeskApp

    settings = s3_settings(s3_server, tmp_path)
    async with await Ledger.open(settings) as ledger:
        app = IngestDeskApp(ledger, workers=0, poll_interval_s=0.1, actor="tester")
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.pause()
            assert app.sub_title.endswith(f"  store {settings.store_url} at {s3_server.endpoint}")
            assert SECRET_KEY not in app.sub_title and ACCESS_KEY not in app.sub_title
