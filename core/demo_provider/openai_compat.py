"""A demo OpenAI-compatible embeddings endpoint (``ingestdesk provider openai``): an
HTTP process answering ``POST /v1/embeddings`` as OpenAI does, with deterministic
vectors (the hashed bag of words), so :mod:`core.ingest.openai_provider` can be
exercised against something real, offline.

Like such an endpoint it keeps nothing by request key: there is no look-up. It
checks a bearer key when given one (``--api-key-env``), refuses inputs over its token
limit (a word or a punctuation mark is a token here) with OpenAI's
``context_length_exceeded`` answer naming the input, and can be told to answer 429
with a ``Retry-After``, lose a reply after doing the work, answer 500 after doing it,
or answer slowly (``POST /v1/faults``). It counts how many times each input batch was
embedded (``GET /v1/batches``), so a test can count sends.

Standard library on purpose, as :mod:`core.demo_provider.server`: a lost reply must
be a connection closed without a byte after the work was done.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import random
import re
import secrets
import signal
import socket
import sys
import threading
from array import array
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from core.ingest.embedder import HashingEmbedder

DEFAULT_MODEL = "demo-hashed-embedding-1"
DEFAULT_MAX_TOKENS = 512  # tokens per input (a word or a punctuation mark each)
DEFAULT_MAX_INPUTS = 2048  # inputs per request, OpenAI's limit
MAX_BODY_BYTES = 64 * 1024 * 1024  # bytes a request body may have
MAX_SLOW_S = 3_600.0  # seconds
MAX_SEED = 2**63 - 1
REQUEST_TIMEOUT_S = 30.0  # seconds a client gets to send its request
STOP_GRACE_S = 10.0  # seconds requests in flight get on SIGTERM/SIGINT
POLL_INTERVAL_S = 0.1  # seconds between serve_forever's looks at the stop flag
COUNTERS = (
    "requests",  # every POST /v1/embeddings
    "submits",  # requests embedded: the work done (and, at a real endpoint, paid for)
    "rate_limited",
    "unauthorized",
    "rejected",
    "too_long",
    "lost_replies",
    "server_errors",
)
_TOKEN = re.compile(r"\w+|[^\w\s]")


class FaultError(ValueError):
    """A fault setting that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class OpenAIFaults:
    """What the endpoint does wrong.

    Attributes:
        rate_limit: The next this many embedding requests answer 429 (before any
            work), each with ``retry_after`` as its ``Retry-After``.
        retry_after: The header's value: seconds, an HTTP date, or "" for none.
        lose_reply: Probability that a request is embedded, then its connection
            closed with no reply.
        server_error: Probability that a request is embedded, then answered 500.
        slow_s: Seconds a request waits after its work is done, before the answer.
        seed: Seed of the random draws; None: a fresh one each start.
    """

    rate_limit: int = 0
    retry_after: str = "1"
    lose_reply: float = 0.0
    server_error: float = 0.0
    slow_s: float = 0.0
    seed: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def changed(self, changes: Mapping[str, object]) -> OpenAIFaults:
        """A copy with ``changes`` (a partial JSON object) applied.

        Raises:
            FaultError: An unknown name, or a value of the wrong type or range.
        """
        fields: dict[str, Any] = {}
        for name, value in changes.items():
            if name in ("lose_reply", "server_error"):
                fields[name] = _number(name, value, 1.0)
            elif name == "slow_s":
                fields[name] = _number(name, value, MAX_SLOW_S)
            elif name == "rate_limit":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise FaultError("rate_limit must be a whole number of requests")
                fields[name] = value
            elif name == "retry_after":
                if not isinstance(value, str) or len(value) > 64 or not value.isprintable():
                    raise FaultError("retry_after must be a short header value")
                fields[name] = value
            elif name == "seed":
                if value is not None and (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or not 0 <= value <= MAX_SEED
                ):
                    raise FaultError(f"seed must be null or a whole number from 0 to {MAX_SEED}")
                fields[name] = value
            else:
                raise FaultError(f"unknown fault {name[:40]!r}")
        return replace(self, **fields)


def _number(name: str, value: object, highest: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultError(f"{name} must be a number from 0 to {highest:g}")
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= highest):
        raise FaultError(f"{name} must be a number from 0 to {highest:g}")
    return number


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as this endpoint counts them (words and punctuation)."""
    return sum(1 for _ in _TOKEN.finditer(text))


def batch_digest(inputs: list[str]) -> str:
    """The identity of one input batch (what ``GET /v1/batches`` counts by)."""
    return hashlib.sha256(json.dumps(inputs, ensure_ascii=False).encode()).hexdigest()


class _Refusal(Exception):
    """An answer other than 200: status, OpenAI's error object, extra headers."""

    def __init__(
        self, status: int, message: str, code: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
        self.headers = dict(headers or {})


class OpenAIServer(ThreadingHTTPServer):
    """The endpoint on an already bound, listening socket (bound by the caller)."""

    daemon_threads = True

    def __init__(
        self,
        listener: socket.socket,
        *,
        model: str = DEFAULT_MODEL,
        dimensions: int = 256,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_inputs: int = DEFAULT_MAX_INPUTS,
        api_key: str | None = None,
        faults: OpenAIFaults | None = None,
    ) -> None:
        super().__init__(listener.getsockname(), _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.server_address = listener.getsockname()
        self.model = model
        self.dimensions = dimensions
        self.max_tokens = max_tokens
        self.max_inputs = max_inputs
        self.api_key = api_key
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._faults = OpenAIFaults().changed((faults or OpenAIFaults()).to_dict())
        self._random = random.Random(self._faults.seed)
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._batches: dict[str, int] = {}
        self._embedders: dict[int, HashingEmbedder] = {}

    # ------------------------------------------------------------ shared state

    @property
    def faults(self) -> OpenAIFaults:
        with self._lock:
            return self._faults

    def update_faults(self, changes: Mapping[str, object]) -> OpenAIFaults:
        """Raises: FaultError (nothing is applied)."""
        with self._lock:
            self._faults = self._faults.changed(changes)
            if "seed" in changes:
                self._random = random.Random(self._faults.seed)
            return self._faults

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def take_rate_limit(self) -> str | None:
        """The Retry-After of a 429 if this request is to get one (counted)."""
        with self._lock:
            if self._faults.rate_limit <= 0:
                return None
            self._faults = replace(self._faults, rate_limit=self._faults.rate_limit - 1)
            self._counts["rate_limited"] += 1
            return self._faults.retry_after

    def hits(self, probability: float) -> bool:
        if probability <= 0.0:
            return False
        with self._lock:
            return self._random.random() < probability

    def embed(self, inputs: list[str], dimensions: int) -> list[list[float]]:
        """Vectors of ``inputs``, the batch counted as embedded once more."""
        digest = batch_digest(inputs)
        with self._lock:
            self._counts["submits"] += 1
            self._batches[digest] = self._batches.get(digest, 0) + 1
            embedder = self._embedders.setdefault(dimensions, HashingEmbedder(dimensions))
            return [embedder.vector(text) for text in inputs]

    def stats(self) -> dict[str, int]:
        with self._lock:
            found = dict(self._counts)
            found["distinct_batches"] = len(self._batches)
            found["most_submits_of_one_batch"] = max(self._batches.values(), default=0)
        return found

    def batches(self) -> dict[str, int]:
        with self._lock:
            return dict(self._batches)

    # ---------------------------------------------------------------- lifetime

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        sys.stderr.write(f"demo endpoint: request failed: {type(error).__name__}\n")

    def stop(self) -> None:
        """Ask :meth:`serve_until_stopped` to stop (safe from a signal handler)."""
        if not self.stopping.is_set():
            self.stopping.set()
            threading.Thread(target=self.shutdown, daemon=True).start()

    def serve_until_stopped(self) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`stop`), then close the socket."""
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()

        for sig in previous:
            signal.signal(sig, on_signal)
        try:
            self.serve_forever(poll_interval=POLL_INTERVAL_S)
        finally:
            self.stopping.set()
            self.server_close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _Handler(BaseHTTPRequestHandler):
    server: OpenAIServer
    timeout = REQUEST_TIMEOUT_S
    server_version = "demo-openai"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet, as the demo provider."""

    def _send(self, status: int, body: object, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> object:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise _Refusal(411, "a Content-Length is required", "invalid_request") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise _Refusal(413, f"the body must be at most {MAX_BODY_BYTES} bytes", "too_large")
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError:
            raise _Refusal(400, "the body is not JSON", "invalid_json") from None

    def _authorised(self) -> bool:
        key = self.server.api_key
        if key is None:
            return True
        given = self.headers.get("api-key") or ""
        bearer = self.headers.get("Authorization") or ""
        if bearer.startswith("Bearer "):
            given = bearer.removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), key.encode())

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, {"ok": True})
        elif path == "/v1/stats":
            self._send(200, self.server.stats())
        elif path == "/v1/batches":
            self._send(200, self.server.batches())
        elif path == "/v1/faults":
            self._send(200, self.server.faults.to_dict())
        elif path == "/v1/models":
            if not self._authorised():
                self._send(
                    401, _Refusal(401, "Incorrect API key provided.", "invalid_api_key").body
                )
                return
            model = {"id": self.server.model, "object": "model", "owned_by": "ingestdesk-demo"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._send(404, {"error": {"message": "no such path", "code": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path == "/v1/embeddings":
                self.server.count("requests")
                self._embeddings()
            elif path == "/v1/faults":
                body = self._body()
                if not isinstance(body, dict):
                    raise _Refusal(400, "the body must be a JSON object", "invalid_request")
                try:
                    self._send(200, self.server.update_faults(body).to_dict())
                except FaultError as exc:
                    raise _Refusal(400, str(exc), "invalid_fault") from None
            else:
                raise _Refusal(404, "no such path", "not_found")
        except _Refusal as refusal:
            self._send(refusal.status, refusal.body, refusal.headers)

    def _embeddings(self) -> None:
        server = self.server
        if not self._authorised():
            server.count("unauthorized")
            # The key given is never echoed.
            raise _Refusal(401, "Incorrect API key provided.", "invalid_api_key")
        body = self._body()
        retry_after = server.take_rate_limit()
        if retry_after is not None:
            headers = {"Retry-After": retry_after} if retry_after else {}
            raise _Refusal(429, "Rate limit reached for requests", "rate_limit_exceeded", headers)
        try:
            inputs, dimensions, packed = self._request(body)
        except _Refusal:
            server.count("rejected")
            raise
        for index, text in enumerate(inputs):
            tokens = count_tokens(text)
            if tokens > server.max_tokens:
                server.count("too_long")
                raise _Refusal(
                    400,
                    f"Invalid 'input[{index}]': this model's maximum context length is "
                    f"{server.max_tokens} tokens, however you requested {tokens} tokens. "
                    "Please reduce your input.",
                    "context_length_exceeded",
                )
        vectors = server.embed(inputs, dimensions)
        faults = server.faults
        if faults.slow_s:
            server.stopping.wait(faults.slow_s)  # the work is done: a timeout loses it
        if server.hits(faults.lose_reply):
            server.count("lost_replies")
            self.close_connection = True  # no byte of an answer
            return
        if server.hits(faults.server_error):
            server.count("server_errors")
            self._send(500, {"error": {"message": "The server had an error", "code": "server"}})
            return
        tokens = sum(map(count_tokens, inputs))
        reply = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _packed(v) if packed else v}
                for i, v in enumerate(vectors)
            ],
            "model": server.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        self._send(200, reply, {"x-request-id": "req_" + secrets.token_hex(12)})

    def _request(self, body: object) -> tuple[list[str], int, bool]:
        """The inputs and dimensions of an embeddings request.

        Raises:
            _Refusal: What OpenAI would refuse (400), or an unknown model (404).
        """
        server = self.server
        if not isinstance(body, dict):
            raise _Refusal(400, "the body must be a JSON object", "invalid_request")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _Refusal(400, "you must provide a model parameter", "invalid_request")
        if model != server.model:
            raise _Refusal(404, f"The model `{model[:64]}` does not exist", "model_not_found")
        given = body.get("input")
        inputs = [given] if isinstance(given, str) else given
        if (
            not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(t, str) and t for t in inputs)
        ):
            raise _Refusal(400, "'input' must be a non-empty string or list of them", "invalid")
        if len(inputs) > server.max_inputs:
            raise _Refusal(
                400, f"'input' holds {len(inputs)} items; at most {server.max_inputs}", "invalid"
            )
        if body.get("encoding_format", "float") not in ("float", "base64"):
            raise _Refusal(400, "encoding_format must be float or base64", "invalid")
        dimensions = body.get("dimensions", server.dimensions)
        if (
            isinstance(dimensions, bool)
            or not isinstance(dimensions, int)
            or not 1 <= dimensions <= server.dimensions
        ):
            raise _Refusal(400, f"dimensions must be 1 to {server.dimensions}", "invalid")
        return inputs, dimensions, body.get("encoding_format", "float") == "base64"


def _packed(vector: list[float]) -> str:
    """``encoding_format: base64``: float32 little-endian bytes, base64 (OpenAI's)."""
    values = array("f", vector)
    if sys.byteorder != "little":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")
