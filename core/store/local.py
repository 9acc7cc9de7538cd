"""The local object store: originals in a folder, under a key derived from their
sha256, so user-supplied names never become paths and identical uploads share a file.

Bytes arrive two ways: whole (:meth:`ObjectStore.put`, for the CLI's files and the
provider's result vectors) or as a stream (:meth:`ObjectStore.receive`, for an HTTP
upload): written to an ``.incoming-*`` file under the store as they arrive, hashed on
the way, and renamed under their key at the end, so an upload costs a buffer in memory
whatever its size. A crash mid-write leaves only an ``.incoming-*`` file, which
``ingestdesk prune`` removes once it is stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from core.errors import DISK_FULL_ERRNOS, ObjectReadError, StoreFull, StoreUnavailable
from core.store.base import (
    HEAD_BYTES,
    KEY_PATTERN,
    StoredObject,
    StoreEntry,
    checked_key,
    key_for,
    note_created,
    sha256_hex,
    verified,
)

INCOMING_PREFIX = ".incoming-"  # the name of a file still being written
READ_BLOCK_BYTES = 1024 * 1024  # bytes read at a time to hash a stored object
# Originals up to this size are read (and hash-checked) on the event loop: ~30 us
# from a local folder, less than the hop to a thread and back, which under GIL
# contention from the embedder or ledger threads can wait milliseconds.
READ_ON_LOOP_MAX_BYTES = 64 * 1024  # bytes


class LocalStore:
    """Originals on the local filesystem, written atomically and verified on read."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    key_for = staticmethod(key_for)

    @property
    def label(self) -> str:
        return str(self.root)

    def check(self) -> None:
        # A folder is created on first write; what cannot be written is refused then.
        return None

    def _path(self, key: str) -> Path:
        return self.root / checked_key(key)

    def path_of(self, key: str) -> Path:
        """Where the object ``key`` lives (for maintenance: its age and size)."""
        return self._path(key)

    def put(self, data: bytes) -> tuple[str, str]:
        """Store bytes durably; returns (object key, sha256 hex).

        Temp file, fsync, rename, fsync of the directory: a crash leaves either the
        whole object or nothing, never a torn file under a valid key.
        """
        digest = sha256_hex(data)
        key = self.key_for(digest)
        path = self._path(key)
        if self._holds(path, digest, len(data)):
            return key, digest
        try:
            self._write(path, data)
        except OSError as exc:
            raise _unavailable(self.root, exc) from exc
        note_created(key)
        return key, digest

    def receive(self) -> LocalReceiving:
        """A new object written as it arrives (see :class:`Receiving`)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=INCOMING_PREFIX)
        except OSError as exc:
            raise _unavailable(self.root, exc) from exc
        return LocalReceiving(self, fd, Path(tmp))

    def _adopt(self, tmp: Path, digest: str, size: int) -> str:
        """Move a fully written, fsynced ``tmp`` under its key (or drop it, when the
        store holds these bytes already); the key."""
        key = self.key_for(digest)
        path = self._path(key)
        if self._holds(path, digest, size):
            tmp.unlink(missing_ok=True)
            return key
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        note_created(key)
        return key

    def remove(self, key: str) -> None:
        """Delete an object, if it is there.

        Objects are shared by every document with the same bytes: call this only for
        an object no document references, inside the ledger transaction that checked
        so (its write lock keeps a document that would reference it from committing
        in between).
        """
        self._path(key).unlink(missing_ok=True)

    @staticmethod
    def _holds(path: Path, digest: str, size: int) -> bool:
        """Whether ``path`` already holds exactly these bytes.

        A same-size object is read and checked, not trusted: a stored original that
        rotted on disk is replaced by the next upload of the same content, which is
        what the advice for object_read_error ("upload it again") relies on. It is
        read a block at a time (memory stays flat in its size), and touched when it
        matches: to ``prune`` it is as young as the upload that is about to
        reference it, never an old orphan to remove in between.
        """
        try:
            if path.stat().st_size != size:
                return False
            hasher = hashlib.sha256()
            with path.open("rb") as fh:
                while block := fh.read(READ_BLOCK_BYTES):
                    hasher.update(block)
            if hasher.hexdigest() != digest:
                return False
        except OSError:
            return False
        # A read-only store still serves what it holds: touching is for prune only.
        with contextlib.suppress(OSError):
            os.utime(path)
        return True

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=INCOMING_PREFIX)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            # A full disk or an interrupt leaves no partial object behind.
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)

    def get(self, key: str, expected_sha256: str) -> bytes:
        """Read an object and check it is what the ledger says it is."""
        try:
            data = self._path(key).read_bytes()
        except OSError as exc:
            raise ObjectReadError("the stored original is missing or unreadable") from exc
        return verified(data, expected_sha256)

    async def read(self, key: str, expected_sha256: str, size: int) -> bytes:
        if size <= READ_ON_LOOP_MAX_BYTES:
            return self.get(key, expected_sha256)
        return await asyncio.to_thread(self.get, key, expected_sha256)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def objects(self) -> Iterator[tuple[str, Path]]:
        """Every stored object, as (key, path); files that are not objects are skipped."""
        for path in sorted(self.root.glob("sha256/*/*")):
            key = path.relative_to(self.root).as_posix()
            if KEY_PATTERN.match(key) and path.is_file():
                yield key, path

    def entries(self) -> Iterator[StoreEntry]:
        for key, path in self.objects():
            entry = _entry(key, path)
            if entry is not None:
                yield entry

    def incoming(self) -> Iterator[Path]:
        """Every file still being written, or left by a write that never finished."""
        yield from sorted(self.root.glob(f"{INCOMING_PREFIX}*"))
        yield from sorted(self.root.glob(f"sha256/*/{INCOMING_PREFIX}*"))

    def unfinished(self) -> Iterator[StoreEntry]:
        for path in self.incoming():
            entry = _entry(path.relative_to(self.root).as_posix(), path)
            if entry is not None:
                yield entry

    def remove_unfinished(self, name: str) -> None:
        path = self.root / name
        # Only a name unfinished() gave: an incoming file, never an object or a path out.
        if path.name.startswith(INCOMING_PREFIX) and ".." not in Path(name).parts:
            path.unlink(missing_ok=True)


# The local store's name before there were others: tests and callers construct it so.
ObjectStore = LocalStore


def _entry(name: str, path: Path) -> StoreEntry | None:
    try:
        info = path.stat()
    except OSError:  # gone since it was listed
        return None
    return StoreEntry(name, info.st_size, info.st_mtime)


class LocalReceiving:
    """An object being written as it arrives, to an ``.incoming-*`` file (see
    :class:`core.store.base.Receiving`)."""

    def __init__(self, store: LocalStore, fd: int, tmp: Path) -> None:
        self._store = store
        self._file = os.fdopen(fd, "wb")
        self._tmp = tmp
        self._hash = hashlib.sha256()
        self._head = bytearray()
        self.size = 0

    def write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            self.discard()
            raise _unavailable(self._store.root, exc) from exc
        self._hash.update(data)
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        self.size += len(data)

    def store(self) -> StoredObject:
        """fsync, then rename under the object's key (or drop the copy, when the store
        holds these bytes already)."""
        digest = self._hash.hexdigest()
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            key = self._store._adopt(self._tmp, digest, self.size)
        except OSError as exc:
            self.discard()
            raise _unavailable(self._store.root, exc) from exc
        return StoredObject(key, digest, self.size, bytes(self._head))

    def discard(self) -> None:
        """Close and remove the partial file (idempotent)."""
        if not self._file.closed:
            self._file.close()
        self._tmp.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _unavailable(root: Path, exc: OSError) -> StoreUnavailable:
    # A full disk is for now, as the ledger's is: the same exit code (75) and answer.
    kind = StoreFull if exc.errno in DISK_FULL_ERRNOS else StoreUnavailable
    return kind(f"cannot store the original in {root}: {exc.strerror or type(exc).__name__}")
