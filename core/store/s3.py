"""Originals in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2, ...), so workers on
other hosts read what this host's upload stored.

The client is obstore (MIT; Rust's object_store under Python): measured on the
worker's own path against moto on loopback it used the least CPU per object, its
async reads never hold the event loop, and its retries ride out a store that comes
back within RETRY_S. Credentials and region come from botocore's own resolution
(environment, ``~/.aws/config`` and ``credentials``, ``AWS_PROFILE``), exactly as the
AWS tools read them, unless the environment alone decides them (see
:func:`_from_environment`); they are handed to obstore in memory and never shown.

An object appears under its key only whole: a put is one request, or a multipart
upload that S3 makes visible when it completes. An upload streamed in (HTTP) is kept
in memory up to PART_BYTES; past that it goes up in parts to ``incoming/<id>``
(its digest, and so its key, is only known at the end), then is copied server-side
under its key and the temporary object deleted. ``ingestdesk prune`` removes an
``incoming/`` object left by a server killed in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from core.errors import ObjectReadError, StoreUnavailable, StoreUnreachable
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

if TYPE_CHECKING:
    import obstore.store
    from obstore import WritableFile

SCHEME = "s3://"
INCOMING_DIR = "incoming/"  # under the prefix: streamed uploads still being written
PART_BYTES = 8 * 1024 * 1024  # bytes per part of a multipart upload (S3's floor: 5 MiB)
PARTS_IN_FLIGHT = 2  # parts uploaded at once: memory per upload is this times PART_BYTES
CONNECT_TIMEOUT_S = 5.0  # seconds to open a connection to the store
REQUEST_TIMEOUT_S = 300.0  # seconds one request may take (a big original's part)
# seconds a request is retried (with backoff) while the store does not answer: long
# enough to ride out a restart of the store, short next to a claim's life (the
# worker's heartbeat keeps its lease meanwhile: the read is async); past it the task
# fails with object_read_error and the ledger's own backoff takes over.
RETRY_S = 30.0
# Retries of one request are bounded by RETRY_S, not by a count: obstore's default
# of 10, with its jittered backoff, gave up after 3.5 s on a restarting server.
MAX_RETRIES = 1000
# seconds the start-up check waits for an answer: a store merely unreachable is not
# refused there (see check), so no command may wait out RETRY_S for it.
CHECK_RETRY_S = 2.0
BACKOFF_FIRST_S = 0.1  # seconds before the first retry (doubled, jittered, each time)
BACKOFF_MAX_S = 2.0  # seconds between retries at most: a store back is used soon
# Originals up to this size are hash-checked on the event loop; bigger ones in a
# thread (sha256 runs at ~1 GB/s: 1 MiB is about a millisecond).
VERIFY_ON_LOOP_MAX_BYTES = 1024 * 1024  # bytes
CREDENTIAL_TTL_S = 1800.0  # seconds obstore keeps a credential before asking again


def is_s3_location(store: str) -> bool:
    return store.startswith(SCHEME)


# Characters no S3 service accepts in a bucket name, whatever its rules: today's are
# 3-63 lowercase letters, digits, dots and hyphens, but buckets made in us-east-1
# before 2018 may hold capitals and underscores and run to 255, and stay reachable.
_BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]")


def split_location(location: str) -> tuple[str, str]:
    """(bucket, prefix) of ``s3://BUCKET/PREFIX``; the prefix may be empty."""
    parts = urlsplit(location)
    bucket, prefix = parts.netloc, parts.path.strip("/")
    if parts.scheme != "s3" or not bucket or parts.query or parts.fragment:
        raise StoreUnavailable(f"{location!r} is not a bucket: write s3://BUCKET/PREFIX")
    if not _BUCKET_NAME.fullmatch(bucket):
        raise StoreUnavailable(
            f"{bucket!r} is not a valid bucket name: 3 to 63 lowercase letters, digits,"
            " dots and hyphens"
        )
    return bucket, prefix


def endpoint_from(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The S3 endpoint: the flag, then INGESTDESK_S3_ENDPOINT, then the AWS tools'
    own AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (the config file's endpoint_url is
    read with the profile, see :class:`S3Store`); None for AWS itself."""
    for value in (
        flag,
        environ.get("INGESTDESK_S3_ENDPOINT"),
        environ.get("AWS_ENDPOINT_URL_S3"),
        environ.get("AWS_ENDPOINT_URL"),
    ):
        if value:
            return value.rstrip("/")
    return None


class _Credentials:
    """obstore's credential callback over botocore's resolved credentials (which
    refresh themselves when they come from a role or SSO)."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> dict[str, Any]:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(UTC) + timedelta(seconds=CREDENTIAL_TTL_S),
        }


class _StaticCredentials:
    """obstore's credential callback over keys given in the environment."""

    def __init__(self, access_key: str, secret_key: str, token: str | None) -> None:
        self._credentials = {
            "access_key_id": access_key,
            "secret_access_key": secret_key,
            "token": token,
        }

    def __call__(self) -> dict[str, Any]:
        return self._credentials | {
            "expires_at": datetime.now(UTC) + timedelta(seconds=CREDENTIAL_TTL_S)
        }


Credentials = _Credentials | _StaticCredentials


def _from_environment(environ: Mapping[str, str]) -> tuple[Credentials, str, str | None] | None:
    """Keys, region and no endpoint when the environment alone decides them, as it does
    for botocore: keys there come first in its chain, and with no profile named and no
    shared config file to read, nothing else could change the answer. Importing
    botocore costs a command 0.15 s of CPU (measured), on every ``add`` and ``worker``
    start; None sends the question to botocore."""
    access_key = environ.get("AWS_ACCESS_KEY_ID")
    secret_key = environ.get("AWS_SECRET_ACCESS_KEY")
    if not access_key or not secret_key:
        return None
    if environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE"):
        return None
    config = Path(environ.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config")
    with contextlib.suppress(OSError):
        if config.is_file() and config.stat().st_size > 0:
            return None
    token = environ.get("AWS_SESSION_TOKEN") or environ.get("AWS_SECURITY_TOKEN") or None
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return _StaticCredentials(access_key, secret_key, token), region, None


class S3Store:
    """Originals in ``s3://BUCKET/PREFIX``, verified on every read."""

    def __init__(
        self,
        location: str,
        *,
        endpoint: str | None = None,
        environ: Mapping[str, str] | None = None,
        retry_s: float = RETRY_S,
    ) -> None:
        env = os.environ if environ is None else environ
        self.bucket, self.prefix = split_location(location)
        self.endpoint = endpoint_from(endpoint, env)
        self._environ = env
        self._retry_s = retry_s
        self._client: obstore.store.S3Store | None = None

    @property
    def label(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at {_shown_endpoint(self.endpoint)}" if self.endpoint else where

    @property
    def client(self) -> obstore.store.S3Store:
        # Made on first use: a command that never touches an original never reads
        # the AWS configuration.
        if self._client is None:
            self._client = self._connect(self._retry_s)
        return self._client

    def _connect(self, retry_s: float) -> obstore.store.S3Store:
        try:
            from obstore.store import S3Store as Client
        except ImportError as exc:
            raise StoreUnavailable(
                "an s3:// store needs the s3 extra: pip install 'ingestdesk[s3]'"
            ) from exc
        resolved = _from_environment(self._environ)
        if resolved is None:
            resolved = self._from_aws_configuration()
        credentials, region, config_endpoint = resolved
        endpoint = self.endpoint or config_endpoint
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        options: dict[str, Any] = {
            "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
            "timeout": timedelta(seconds=REQUEST_TIMEOUT_S),
        }
        extra: dict[str, Any] = {}
        if self.endpoint:
            # A compatible server (MinIO, Ceph, moto) answers at one host, path-style;
            # plain http only where the endpoint says so (a loopback test server).
            extra = {"endpoint": self.endpoint, "virtual_hosted_style_request": False}
            options["allow_http"] = self.endpoint.startswith("http://")
        return Client(
            self.bucket,
            prefix=self.prefix or None,
            region=region,
            client_options=options,  # type: ignore[arg-type]
            retry_config={
                "max_retries": MAX_RETRIES,
                "retry_timeout": timedelta(seconds=retry_s),
                "backoff": {
                    "init_backoff": timedelta(seconds=BACKOFF_FIRST_S),
                    "max_backoff": timedelta(seconds=BACKOFF_MAX_S),
                    "base": 2,
                },
            },
            credential_provider=credentials,  # type: ignore[arg-type]
            **extra,
        )

    def _from_aws_configuration(self) -> tuple[Credentials, str, str | None]:
        """Credentials, region and endpoint as botocore resolves them: profiles, the
        shared config and credentials files, SSO, roles."""
        try:
            import botocore.session
        except ImportError as exc:
            raise StoreUnavailable(
                "an s3:// store needs the s3 extra: pip install 'ingestdesk[s3]'"
            ) from exc
        session = botocore.session.Session(profile=self._environ.get("AWS_PROFILE") or None)
        try:
            credentials = session.get_credentials()
            config = session.get_scoped_config()
        except Exception as exc:  # a profile named but not in the files, a bad file
            raise StoreUnavailable(
                f"s3://{self.bucket}: the AWS configuration cannot be read ({type(exc).__name__})"
            ) from exc
        if credentials is None:
            raise StoreUnavailable(
                f"s3://{self.bucket}: no AWS credentials found (environment, "
                "~/.aws/credentials or AWS_PROFILE)"
            )
        region = (
            self._environ.get("AWS_REGION") or session.get_config_variable("region") or "us-east-1"
        )
        return _Credentials(credentials), region, config.get("endpoint_url") or None

    def check(self) -> None:
        import obstore

        try:
            checker = self._connect(min(CHECK_RETRY_S, self._retry_s))
            next(iter(obstore.list(checker, INCOMING_DIR, chunk_size=1)), None)
        except StoreUnavailable:
            raise
        except Exception as exc:
            cause = fault(exc)
            if cause not in (UNREACHABLE, TIMED_OUT):
                # Unreachable is not refused here: a worker rides it out per task,
                # an upload is refused while it lasts.
                raise StoreUnavailable(f"s3://{self.bucket}: {cause}") from None

    def _exists(self, path: str) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.head(self.client, path)
        except (FileNotFoundError, NotFoundError):
            return False
        return True

    def put(self, data: bytes) -> tuple[str, str]:
        """Store bytes; returns (object key, sha256 hex).

        Put again when already there: S3 replaces an object atomically, so a copy
        that was damaged is repaired (the advice for object_read_error, "upload it
        again") and its date renewed, so prune sees it as young as the upload that
        is about to reference it (what touching does in a local folder).
        """
        import obstore

        digest = sha256_hex(data)
        key = key_for(digest)
        try:
            if len(data) <= PART_BYTES:
                existed = self._put_one(key, data)
            else:
                existed = self._exists(key)
                obstore.put(
                    self.client, key, data, chunk_size=PART_BYTES, max_concurrency=PARTS_IN_FLIGHT
                )
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise self._unavailable(exc) from None
        if not existed:
            note_created(key)
        return key, digest

    def _put_one(self, key: str, data: bytes) -> bool:
        """Put in one request; whether the key was there before.

        A new original (the usual case) is one conditional request, If-None-Match: *,
        where a HEAD and a PUT were two; an existing one is put again to renew it
        (see :meth:`put`). A server that ignores the condition overwrites,
        and the object is then noted as new to this request: a take-back still removes
        only an object no document references (``Ledger.take_back``)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.client, key, data, mode="create", use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            obstore.put(self.client, key, data, use_multipart=False)
            return True
        return False

    def receive(self) -> S3Receiving:
        return S3Receiving(self)

    def get(self, key: str, expected_sha256: str) -> bytes:
        import obstore

        try:
            data = obstore.get(self.client, checked_key(key)).bytes().to_bytes()
        except (StoreUnavailable, ObjectReadError):
            raise
        except Exception as exc:
            raise self._unreadable(exc) from None
        return verified(data, expected_sha256)

    async def read(self, key: str, expected_sha256: str, size: int) -> bytes:
        import obstore

        try:
            # obstore's own runtime does the I/O: the event loop only awaits it.
            got = await obstore.get_async(self.client, checked_key(key))
            data = (await got.bytes_async()).to_bytes()
        except (StoreUnavailable, ObjectReadError):
            raise
        except Exception as exc:
            raise self._unreadable(exc) from None
        if len(data) <= VERIFY_ON_LOOP_MAX_BYTES:
            return verified(data, expected_sha256)
        return await asyncio.to_thread(verified, data, expected_sha256)

    def exists(self, key: str) -> bool:
        return self._exists(checked_key(key))

    def remove(self, key: str) -> None:
        import obstore

        try:
            obstore.delete(self.client, checked_key(key))
        except Exception as exc:
            raise self._unavailable(exc) from None

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        import obstore

        try:
            for batch in obstore.list(self.client, prefix, chunk_size=1000):
                yield from batch  # type: ignore[misc]
        except Exception as exc:
            raise self._unavailable(exc) from None

    def entries(self) -> Iterator[StoreEntry]:
        for meta in self._list("sha256/"):
            if KEY_PATTERN.match(meta["path"]):
                yield StoreEntry(meta["path"], meta["size"], meta["last_modified"].timestamp())

    def unfinished(self) -> Iterator[StoreEntry]:
        for meta in self._list(INCOMING_DIR):
            yield StoreEntry(meta["path"], meta["size"], meta["last_modified"].timestamp())

    def remove_unfinished(self, name: str) -> None:
        import obstore

        if name.startswith(INCOMING_DIR) and "/" not in name[len(INCOMING_DIR) :]:
            try:
                obstore.delete(self.client, name)
            except Exception as exc:
                raise self._unavailable(exc) from None

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        cause = fault(exc)
        # No connection or no answer is for now (exit 75, Retry-After); a refusal is not.
        kind = StoreUnreachable if cause in (UNREACHABLE, TIMED_OUT) else StoreUnavailable
        return kind(f"cannot store the original in s3://{self.bucket}: {cause}")

    def _unreadable(self, exc: Exception) -> ObjectReadError:
        from obstore.exceptions import NotFoundError

        if isinstance(exc, FileNotFoundError | NotFoundError):
            return ObjectReadError(f"the stored original is missing from s3://{self.bucket}")
        return ObjectReadError(
            f"the stored original cannot be read from s3://{self.bucket}: {fault(exc)}"
        )


class S3Receiving:
    """An upload streamed into the bucket (see :class:`core.store.base.Receiving`):
    held in memory up to PART_BYTES, then in parts under ``incoming/``."""

    def __init__(self, store: S3Store) -> None:
        self._store = store
        self._buffer = bytearray()
        self._writer: WritableFile | None = None
        self._incoming: str | None = None
        self._hash = hashlib.sha256()
        self._head = bytearray()
        self.size = 0

    def write(self, data: bytes) -> None:
        import obstore

        self._hash.update(data)
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        self.size += len(data)
        try:
            if self._writer is None and len(self._buffer) + len(data) <= PART_BYTES:
                self._buffer += data
                return
            if self._writer is None:
                self._incoming = f"{INCOMING_DIR}{uuid.uuid4().hex}"
                self._writer = obstore.open_writer(
                    self._store.client,
                    self._incoming,
                    buffer_size=PART_BYTES,
                    max_concurrency=PARTS_IN_FLIGHT,
                )
                self._writer.write(bytes(self._buffer))
                self._buffer = bytearray()
            self._writer.write(data)
        except Exception as exc:
            self.discard()
            if isinstance(exc, StoreUnavailable):
                raise
            raise self._store._unavailable(exc) from None

    def store(self) -> StoredObject:
        import obstore

        digest = self._hash.hexdigest()
        try:
            if self._writer is None:
                key, _ = self._store.put(bytes(self._buffer))
            else:
                key = key_for(digest)
                self._writer.close()
                existed = self._store._exists(key)
                # Server-side: the bytes do not come back through this host.
                obstore.copy(self._store.client, self._incoming or "", key)
                obstore.delete(self._store.client, self._incoming or "")
                self._incoming = None
                if not existed:
                    note_created(key)
        except Exception as exc:
            self.discard()
            if isinstance(exc, StoreUnavailable):
                raise
            raise self._store._unavailable(exc) from None
        return StoredObject(key, digest, self.size, bytes(self._head))

    def discard(self) -> None:
        """Drop what was written (idempotent). A multipart upload cut short stays
        hidden in the bucket (never an object): a lifecycle rule aborting incomplete
        multipart uploads removes its parts."""
        import obstore

        self._buffer = bytearray()
        writer, self._writer = self._writer, None
        incoming, self._incoming = self._incoming, None
        if writer is None or incoming is None:
            return
        try:
            if not writer.closed():
                writer.close()
            obstore.delete(self._store.client, incoming)
        except Exception:  # best effort: prune removes an incoming/ object left behind
            return


UNREACHABLE = "the store is unreachable (no connection)"
TIMED_OUT = "the store did not answer in time"


def fault(exc: BaseException) -> str:
    """A short cause for an S3 failure, in our own words: obstore's messages carry
    URLs and server replies, which a task's detail must not (never credentials)."""
    from obstore.exceptions import (
        NotFoundError,
        PermissionDeniedError,
        UnauthenticatedError,
    )

    text = str(exc)
    if "NoSuchBucket" in text:
        return "the bucket does not exist"
    if isinstance(exc, PermissionError | PermissionDeniedError) or "AccessDenied" in text:
        return "access denied"
    if isinstance(exc, UnauthenticatedError) or any(
        code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch")
    ):
        return "the credentials were refused"
    if isinstance(exc, FileNotFoundError | NotFoundError):
        return "not found"
    if any(mark in text for mark in ("kind: Timeout", "TimedOut", "operation timed out")):
        return TIMED_OUT
    if any(mark in text for mark in ("kind: Connect", "error sending request", "dns error")):
        return UNREACHABLE
    return f"the store failed ({type(exc).__name__})"


def _shown_endpoint(endpoint: str) -> str:
    # An endpoint URL could carry user:password@: never shown.
    parts = urlsplit(endpoint)
    host = parts.hostname or endpoint
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if parts.scheme else host
