"""Exceptions core raises to its callers. Each one's docstring is its default message,
and each maps to one CLI exit code so scripts can tell them apart."""

from __future__ import annotations

import errno


class IngestDeskError(Exception):
    """ingestdesk could not do that."""

    exit_code = 1

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class BadInput(IngestDeskError):
    """The input was not accepted."""

    exit_code = 2


class Conflict(IngestDeskError):
    """That change is not allowed in the current state."""

    exit_code = 3


class NeedsAcceptance(Conflict):
    """That version is flagged for review (pages read by OCR at low confidence, or
    skipped): publishing it needs the person to accept its pages as read."""


class KeyReused(Conflict):
    """That idempotency key was used for a different request; use a new key."""


class NotFound(IngestDeskError):
    """No such record in the ledger."""

    exit_code = 4


class LedgerUnavailable(IngestDeskError):
    """The ledger could not be opened."""

    exit_code = 1
    # Which ledger, as the message starts ("ledger PATH"): a screen that already
    # names its ledger shows only the reason.
    where = ""

    @property
    def reason(self) -> str:
        """The message without its ``where`` prefix."""
        prefix = f"{self.where}: "
        return self.message.removeprefix(prefix) if self.where else self.message


# sysexits.h's EX_TEMPFAIL: "a temporary failure; the user is invited to retry".
EXIT_TEMPFAIL = 75


class LedgerUnreachable(LedgerUnavailable):
    """The ledger cannot be reached for now (the database is down, restarting, or
    locked past the busy timeout); try again."""

    exit_code = EXIT_TEMPFAIL


class LedgerFull(LedgerUnreachable):
    """The ledger's disk is full; free space and try again."""


class SchemaTooNew(LedgerUnavailable):
    """This ledger was written by a newer ingestdesk; upgrade ingestdesk to open it."""


class StoreUnavailable(IngestDeskError):
    """The object store cannot be written (not a folder, full, or not writable)."""

    exit_code = 1


class StoreUnreachable(StoreUnavailable):
    """The object store cannot be reached for now (no connection, no answer in time);
    try again."""

    exit_code = EXIT_TEMPFAIL


class StoreFull(StoreUnreachable):
    """The object store's disk is full; free space and try again."""


class ProviderUnreachable(IngestDeskError):
    """The embedding provider could not be reached."""

    exit_code = 1


class WorkerStopped(IngestDeskError):
    """The worker stopped: it cannot do the work (its tasks went back to the queue)."""

    exit_code = 1


class ObjectReadError(IngestDeskError):
    """The stored original is missing or does not match its checksum."""


class ClaimBug(IngestDeskError):
    """A claim updated more than one row: the claim statement is wrong."""


ERROR_DETAIL_MAX = 500  # characters
# What the OS says when a write finds no room: no space left, or a quota used up.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a write that found the disk full."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, LedgerFull):
            return True
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
        if seen is exc:
            break
    return False


def error_detail_of(exc: BaseException) -> str:
    """What a failure may say about an exception: its type name, nothing else
    (a message can carry a path or user data; a type name cannot)."""
    return type(exc).__name__[:ERROR_DETAIL_MAX]
