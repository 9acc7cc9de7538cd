"""Content-addressed object store: originals live under a key derived from their
sha256, so user-supplied names never become paths and identical uploads share a file."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from core.errors import ObjectReadError, StoreUnavailable

_KEY = re.compile(r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ObjectStore:
    """Originals on the local filesystem, written atomically and verified on read."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # Keys of the objects this instance wrote that were not there before (not
        # those it found already stored): the only ones a caller whose batch was then
        # refused may take back (see remove()).
        self.created: list[str] = []

    @staticmethod
    def key_for(digest: str) -> str:
        return f"sha256/{digest[:2]}/{digest}"

    def _path(self, key: str) -> Path:
        # Keys come from our own ledger, but a tampered row must not walk the disk.
        if not _KEY.match(key):
            raise ObjectReadError(f"malformed object key {key!r}")
        return self.root / key

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
            raise StoreUnavailable(
                f"cannot store the original in {self.root}: {exc.strerror or type(exc).__name__}"
            ) from exc
        self.created.append(key)
        return key, digest

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
        what the advice for object_read_error ("upload it again") relies on.
        """
        try:
            if path.stat().st_size != size:
                return False
            return sha256_hex(path.read_bytes()) == digest
        except OSError:
            return False

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".incoming-")
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
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def get(self, key: str, expected_sha256: str) -> bytes:
        """Read an object and check it is what the ledger says it is."""
        try:
            data = self._path(key).read_bytes()
        except OSError as exc:
            raise ObjectReadError("the stored original is missing or unreadable") from exc
        if sha256_hex(data) != expected_sha256:
            raise ObjectReadError("the stored original does not match its checksum")
        return data

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()
