"""Settings for one ledger: where it lives and how it behaves. Built from flags and
environment at the entry point and passed down; nothing here is read at import time."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import BadInput

DEFAULT_HOME = ".ingestdesk"
DEFAULT_DB_FILE = "ledger.db"
DEFAULT_STORE_DIR = "objects"
BYTES_PER_MB = 1024 * 1024
DEFAULT_MAX_UPLOAD_BYTES = 100 * BYTES_PER_MB  # 100 MB
MAX_UPLOAD_MB_LIMIT = 1_000_000  # MB: a cap above 1 TB is a typo, not a policy
DEFAULT_LEASE_S = 30.0  # seconds a claim stays valid without a heartbeat
DEFAULT_MAX_ATTEMPTS = 3  # automatic attempts for transient failures
DEFAULT_BACKOFF_BASE_S = 2.0  # seconds; doubled per attempt, with jitter
DEFAULT_BACKOFF_MAX_S = 300.0  # seconds
DEFAULT_STALL_AFTER_S = 60.0  # seconds without progress before a live task is "stalled"
DEFAULT_BUSY_TIMEOUT_MS = 30_000  # SQLite waits this long for the write lock
# A version with a page read by OCR at a mean confidence below this (0-100), or with a
# page skipped, is flagged: publishing it needs a person to accept the pages as read.
# 60: tesseract's mean word confidence on a clean 300-dpi scan sits in the 90s and
# falls under 60 where words come out misread (noise, skew, handwriting).
DEFAULT_OCR_REVIEW_BELOW = 60.0  # confidence, 0-100


@dataclass(frozen=True)
class Settings:
    """Everything a ledger, a worker and the dashboard need to agree on."""

    db_url: str
    store_root: Path
    # An S3-compatible bucket for the originals (``s3://BUCKET/PREFIX``), in place of
    # the folder store_root; its endpoint for a server other than AWS (MinIO, Ceph).
    store_url: str | None = None
    s3_endpoint: str | None = None
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    lease_s: float = DEFAULT_LEASE_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base_s: float = DEFAULT_BACKOFF_BASE_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S
    stall_after_s: float = DEFAULT_STALL_AFTER_S
    sqlite_synchronous: str = "NORMAL"
    sqlite_busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    ocr_review_below: float = DEFAULT_OCR_REVIEW_BELOW
    extra: dict[str, str] = field(default_factory=dict)

    def with_(self, **changes: object) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


def upload_cap_bytes(megabytes: str | float, source: str) -> int:
    """The upload size cap in bytes from a number of megabytes, refusing what is not
    a usable cap: not a number, nan, infinite, zero or less, or over 1 TB."""
    try:
        value = float(megabytes)
    except ValueError as exc:
        raise BadInput(f"{source} must be a number of megabytes, e.g. 100") from exc
    if not (math.isfinite(value) and 0 < value <= MAX_UPLOAD_MB_LIMIT):
        raise BadInput(f"{source} must be more than 0 and at most {MAX_UPLOAD_MB_LIMIT} (MB)")
    return max(1, int(value * BYTES_PER_MB))


MAX_BUSY_TIMEOUT_MS = 3_600_000  # an hour: longer is a typo, not a setting


def busy_timeout_ms(value: str) -> int:
    """How long SQLite waits for another process's write lock (INGESTDESK_BUSY_TIMEOUT_MS):
    a whole number of milliseconds, 0 to an hour. Past it, the ledger counts as
    unreachable for now (a looping worker waits and retries)."""
    try:
        ms = int(value)
    except ValueError as exc:
        raise BadInput("INGESTDESK_BUSY_TIMEOUT_MS must be a whole number of milliseconds") from exc
    if not 0 <= ms <= MAX_BUSY_TIMEOUT_MS:
        raise BadInput(f"INGESTDESK_BUSY_TIMEOUT_MS must be from 0 to {MAX_BUSY_TIMEOUT_MS}")
    return ms


def ocr_review_below(value: str, source: str = "INGESTDESK_OCR_REVIEW_BELOW") -> float:
    """The OCR confidence (0 to 100) under which a page flags its version for review;
    0 flags only skipped pages."""
    try:
        below = float(value)
    except ValueError as exc:
        raise BadInput(f"{source} must be a confidence from 0 to 100, e.g. 60") from exc
    if not (math.isfinite(below) and 0 <= below <= 100):
        raise BadInput(f"{source} must be from 0 to 100")
    return below


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite ledger file."""
    return f"sqlite:///{path.resolve()}"


def settings_from(
    db: str | None = None,
    store: str | os.PathLike[str] | None = None,
    *,
    home: Path | None = None,
    environ: dict[str, str] | None = None,
    **overrides: object,
) -> Settings:
    """Resolve settings: explicit flags win, then INGESTDESK_* environment, then a
    ``.ingestdesk/`` folder in the current directory."""
    env = os.environ if environ is None else environ
    base = (home or Path.cwd()) / DEFAULT_HOME
    db = db or env.get("INGESTDESK_DB") or None
    store = store or env.get("INGESTDESK_STORE") or None
    if db is None:
        db_url = sqlite_url(base / DEFAULT_DB_FILE)
    elif "://" in db:
        db_url = db
    else:
        # A bare path is the friendliest spelling of a SQLite ledger.
        db_url = sqlite_url(Path(db))
    store_url: str | None = None
    if store is not None and str(store).startswith("s3://"):
        store_url, store = str(store), None
    store_root = Path(store) if store is not None else base / DEFAULT_STORE_DIR
    if store_url is not None and "store_url" not in overrides:
        overrides["store_url"] = store_url
    endpoint = overrides.get("s3_endpoint") or env.get("INGESTDESK_S3_ENDPOINT") or None
    overrides["s3_endpoint"] = endpoint
    if env.get("INGESTDESK_MAX_UPLOAD_MB") and "max_upload_bytes" not in overrides:
        overrides["max_upload_bytes"] = upload_cap_bytes(
            env["INGESTDESK_MAX_UPLOAD_MB"], "INGESTDESK_MAX_UPLOAD_MB"
        )
    if "INGESTDESK_SYNCHRONOUS" in env and "sqlite_synchronous" not in overrides:
        overrides["sqlite_synchronous"] = env["INGESTDESK_SYNCHRONOUS"].upper()
    if env.get("INGESTDESK_BUSY_TIMEOUT_MS") and "sqlite_busy_timeout_ms" not in overrides:
        overrides["sqlite_busy_timeout_ms"] = busy_timeout_ms(env["INGESTDESK_BUSY_TIMEOUT_MS"])
    if env.get("INGESTDESK_OCR_REVIEW_BELOW") and "ocr_review_below" not in overrides:
        overrides["ocr_review_below"] = ocr_review_below(env["INGESTDESK_OCR_REVIEW_BELOW"])
    return Settings(db_url=db_url, store_root=store_root).with_(**overrides)
