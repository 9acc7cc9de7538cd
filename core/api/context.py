"""What every route needs from the running app: the open ledger."""

from __future__ import annotations

from fastapi import Request

from core.ledger import Ledger


def ledger_of(request: Request) -> Ledger:
    """The ledger the app opened at start-up (one per process, shared by requests)."""
    ledger: Ledger = request.app.state.ledger
    return ledger
