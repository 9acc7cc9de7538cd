"""An OpenAI-compatible ``/v1/embeddings`` endpoint as the remote provider, against
the real demo endpoint process (``ingestdesk provider openai``) and real workers.

Such an endpoint has no look-up by request key: a lost reply is ``unknown`` and its
look-up answers ``no_lookup``; it is sent again only where the operator declared the
endpoint resend-safe, and then a bounded number of times. Each test counts what the
endpoint itself received."""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import math
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from core import ErrorCode, Ledger, Settings, TaskStatus
from core.demo_provider.openai_compat import count_tokens
from core.ingest.chunker import chunk_text
from core.ingest.embedder import HashingEmbedder, cosine
from core.ingest.embedding import RequestFailed
from core.ingest.openai_provider import (
    API_KEY_ENV,
    FALLBACK_API_KEY_ENV,
    OpenAIEmbeddings,
    parse_options,
    retry_after_s,
)
from core.ingest.parse_pool import ParserPool
from core.ingest.parsing import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from core.ingest.providers import (
    LookupState,
    NotSent,
    ProviderRejected,
    RemoteProvider,
    same_endpoint,
    verify,
)
from core.ingest.reconcile import BLIND_SENDS_MAX, Answer, reconcile_with
from core.ingest.worker import Worker
from core.states import RequestState, Stage
from core.store import ObjectStore
from tests.core.test_provider_drills import ledger, note, pool, settings, submit

__all__ = ["ledger", "pool", "settings"]  # fixtures shared with the provider drills

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="drives real processes with signals"
)

MODEL = "demo-hashed-embedding-1"
DIMS = 256
KEY = "sk-test-0123456789-SECRET-never-shown"
CLAIMABLE_WAIT_S = 30.0  # seconds a retry may take to become due on a loaded machine


@dataclass
class Endpoint:
    url: str  # the base URL: http://host:port/v1
    process: subprocess.Popen[str]

    @property
    def target(self) -> str:
        return f"openai+{self.url}"

    def faults(self, **faults: Any) -> None:
        httpx.post(f"{self.url}/faults", json=faults, timeout=5, trust_env=False).raise_for_status()

    def stats(self) -> dict[str, int]:
        found: dict[str, int] = httpx.get(f"{self.url}/stats", timeout=5, trust_env=False).json()
        return found

    def stop(self) -> None:
        self.process.terminate()
        self.process.communicate(timeout=10)


def start_endpoint(*args: str, env: dict[str, str] | None = None) -> Endpoint:
    command = [sys.executable, "-m", "core.cli", "provider", "openai", "--port", "0"]
    process = subprocess.Popen(
        [*command, "--seed", "7", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("openai-compatible endpoint listening on http://"), (
        line,
        process.stderr,
    )
    return Endpoint(line.split()[-1], process)


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    started = start_endpoint("--api-key-env", "DEMO_ENDPOINT_KEY", env={"DEMO_ENDPOINT_KEY": KEY})
    yield started
    if started.process.poll() is None:
        started.stop()


def remote(
    endpoint: Endpoint,
    *,
    key: str | None = KEY,
    resend_safe: bool = False,
    **options: str,
) -> OpenAIEmbeddings:
    environ = {} if key is None else {API_KEY_ENV: key}
    return OpenAIEmbeddings(
        endpoint.url, MODEL, DIMS, options, resend_safe=resend_safe, environ=environ
    )


async def run_task(
    ledger: Ledger, pool: ParserPool, provider: RemoteProvider, task_id: str
) -> None:
    """One attempt of one task by an in-process worker (no reconcile pass, no retry)."""
    worker = Worker(ledger, "w-openai", pool=pool, embedder=provider)
    assert await worker.run_task(task_id)


async def wait_claimable(ledger: Ledger, task_id: str) -> None:
    deadline = time.monotonic() + CLAIMABLE_WAIT_S
    while True:
        task = await ledger.reads.get_task(task_id)
        if task.next_attempt_at is None or task.next_attempt_at <= time.time():
            return
        assert time.monotonic() < deadline, task
        await asyncio.sleep(0.05)


async def the_request(ledger: Ledger, task_id: str) -> Any:
    found = await ledger.providers.for_task(task_id)
    assert len(found) == 1, found
    return found[0]


# ------------------------------------------------------------- the happy path


@pytest.mark.parametrize("encoding", ["float", "base64"])
async def test_a_batch_is_embedded_normalised_and_verified(
    endpoint: Endpoint, encoding: str
) -> None:
    provider = remote(endpoint, encoding_format=encoding)
    texts = ["Leases expire after thirty seconds.", "The reaper requeues the task.", "ok"]
    try:
        reply = await provider.submit("0" * 64, texts)
    finally:
        await provider.aclose()
    assert verify(reply, len(texts), DIMS) is None
    assert reply.usage["prompt_tokens"] > 0 and reply.request_id.startswith("req_")
    local = HashingEmbedder(DIMS)
    for text, vector in zip(texts, reply.vectors, strict=True):
        values = array("f")
        values.frombytes(vector)
        assert math.isclose(math.fsum(v * v for v in values), 1.0, abs_tol=1e-5)
        # The endpoint's vectors, as sent (JSON floats), then float32: the same vector.
        assert cosine(vector, array("f", local.vector(text)).tobytes()) > 0.99999
    assert endpoint.stats()["submits"] == 1


async def test_connect_asks_the_endpoint_its_dimensions(endpoint: Endpoint) -> None:
    env = {API_KEY_ENV: KEY}
    os.environ.update(env)
    try:
        provider = await OpenAIEmbeddings.connect(endpoint.target, MODEL)
    finally:
        for name in env:
            os.environ.pop(name)
    try:
        assert provider.dimensions == DIMS
        assert provider.endpoint == endpoint.target
        assert KEY not in repr(provider) and KEY not in repr(vars(provider))
        assert (await provider.lookup("0" * 64)).state is LookupState.NO_LOOKUP
    finally:
        await provider.aclose()


async def test_a_document_is_embedded_through_the_provider_ledger_in_endpoint_sized_requests(
    ledger: Ledger, pool: ParserPool, tmp_path: Path
) -> None:
    small = start_endpoint("--max-inputs", "4")
    try:
        task_id = await submit(ledger, note(1, paragraphs=150), "batched.md")
        provider = remote(small, key=None, max_inputs="4")
        try:
            await run_task(ledger, pool, provider, task_id)
        finally:
            await provider.aclose()
        task = await ledger.reads.get_task(task_id)
        assert task.status is TaskStatus.SUCCEEDED, task
        chunks = await ledger.reads.chunks(task.document_id)
        requests = await ledger.providers.for_task(task_id)
        assert len(chunks) > 4 and len(requests) == math.ceil(len(chunks) / 4)
        assert {r.state for r in requests} == {RequestState.DONE}
        assert {r.endpoint for r in requests} == {small.target}
        stats = small.stats()
        assert stats["submits"] == stats["distinct_batches"] == len(requests)
        assert stats["most_submits_of_one_batch"] == 1
    finally:
        small.stop()


# ------------------------------------------------------ a reply lost after the work


LOST = {
    "lost reply": {"lose_reply": 1.0},
    "500 after the work": {"server_error": 1.0},
    "slow reply": {"slow_s": 4.0},
}


@pytest.mark.parametrize("fault", list(LOST))
async def test_a_lost_reply_is_unknown_and_without_the_declaration_goes_to_review(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint, fault: str
) -> None:
    task_id = await submit(ledger, note(2), "lost.md")
    endpoint.faults(**LOST[fault])
    provider = remote(endpoint, timeout_s="1.5")
    try:
        await run_task(ledger, pool, provider, task_id)
        task = await ledger.reads.get_task(task_id)
        assert (task.status, task.error_code) == (TaskStatus.RETRY_WAIT, ErrorCode.OUTCOME_UNKNOWN)
        request = await the_request(ledger, task_id)
        assert request.state is RequestState.UNKNOWN
        assert endpoint.stats()["submits"] == 1  # the endpoint did the work

        endpoint.faults(lose_reply=0.0, server_error=0.0, slow_s=0.0)
        await wait_claimable(ledger, task_id)
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.NEEDS_REVIEW)
    request = await the_request(ledger, task_id)
    assert request.state is RequestState.NEEDS_REVIEW
    assert "no record by request key" in (request.detail or "")
    assert "not found" not in (request.detail or "")  # nobody can know that
    assert endpoint.stats()["submits"] == 1  # looked up (locally), never sent again
    listed = await ledger.providers.awaiting_review()
    assert [r.task_id for r in listed] == [task_id]
    if fault != "lost reply":
        return
    # A person decides to pay for it again: sent once more, and the task goes on.
    await ledger.provider_review.resend(task_id, actor="ops", reason="costs little")
    provider = remote(endpoint)
    try:
        await wait_claimable(ledger, task_id)
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    assert endpoint.stats()["submits"] == 2


async def test_a_lost_reply_is_sent_again_once_when_declared_resend_safe(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint
) -> None:
    task_id = await submit(ledger, note(3), "resend.md")
    endpoint.faults(lose_reply=1.0)
    provider = remote(endpoint, resend_safe=True)
    try:
        await run_task(ledger, pool, provider, task_id)
        assert (await the_request(ledger, task_id)).state is RequestState.UNKNOWN
        endpoint.faults(lose_reply=0.0)
        await wait_claimable(ledger, task_id)
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.SUCCEEDED, task
    request = await the_request(ledger, task_id)
    assert (request.state, request.sends) == (RequestState.DONE, 2)
    stats = endpoint.stats()
    assert (stats["submits"], stats["most_submits_of_one_batch"]) == (2, 2)


async def test_a_reply_lost_every_time_is_sent_a_bounded_number_of_times(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint
) -> None:
    task_id = await submit(ledger, note(4), "always-lost.md")
    endpoint.faults(lose_reply=1.0)
    provider = remote(endpoint, resend_safe=True)
    try:
        for _ in range(BLIND_SENDS_MAX + 2):
            await wait_claimable(ledger, task_id)
            await run_task(ledger, pool, provider, task_id)
            if (await ledger.reads.get_task(task_id)).status is TaskStatus.FAILED:
                break
        # Its attempts may run out first (outcome_unknown): the worker's look-up pass
        # then settles the request, as it would within RECONCILE_EVERY_S.
        store = ObjectStore(ledger.settings.store_root)
        decisions = await reconcile_with(ledger, store, provider)
    finally:
        await provider.aclose()
    task = await ledger.reads.get_task(task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error_code in (ErrorCode.NEEDS_REVIEW, ErrorCode.OUTCOME_UNKNOWN)
    assert [(d.answer, d.state) for d in decisions] in (
        [],
        [(Answer.NO_LOOKUP, RequestState.NEEDS_REVIEW)],
    )
    assert [r.task_id for r in await ledger.providers.awaiting_review()] == [task_id]
    request = await the_request(ledger, task_id)
    assert (request.state, request.sends) == (RequestState.NEEDS_REVIEW, BLIND_SENDS_MAX)
    assert f"sent {BLIND_SENDS_MAX} times" in (request.detail or "")
    assert endpoint.stats()["submits"] == BLIND_SENDS_MAX


async def test_the_cli_reconcile_says_there_is_no_look_up_and_leaves_it_to_a_person(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint, settings: Settings
) -> None:
    task_id = await submit(ledger, note(5), "cli-reconcile.md")
    endpoint.faults(lose_reply=1.0)
    provider = remote(endpoint)
    try:
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    done = cli_env(settings, {}, "--json", "reconcile", "--all")
    assert done.returncode == 0, done.stderr
    decisions = json.loads(done.stdout)["decisions"]
    assert [(d["task_id"], d["answer"], d["state"]) for d in decisions] == [
        (task_id, Answer.NO_LOOKUP.value, RequestState.NEEDS_REVIEW.value)
    ]
    assert endpoint.stats()["submits"] == 1


# --------------------------------------------------------------- 429, too long


@pytest.mark.parametrize("form", ["seconds", "HTTP date"])
async def test_a_429_waits_at_least_its_retry_after_then_succeeds(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint, form: str
) -> None:
    task_id = await submit(ledger, note(6), "limited.md")
    wait_s = 3.0
    started = time.time()
    header = (
        f"{wait_s:g}"
        if form == "seconds"
        else email.utils.formatdate(math.ceil(started + wait_s) + 1, usegmt=True)
    )
    endpoint.faults(rate_limit=1, retry_after=header)
    provider = remote(endpoint)
    try:
        await run_task(ledger, pool, provider, task_id)
        task = await ledger.reads.get_task(task_id)
        assert (task.status, task.error_code) == (
            TaskStatus.RETRY_WAIT,
            ErrorCode.PROVIDER_RATE_LIMITED,
        )
        # The drills' backoff is 0.05-0.2 s: only the Retry-After makes it this long.
        assert task.next_attempt_at is not None and task.next_attempt_at >= started + wait_s
        assert "rate limited (HTTP 429); retry after" in (task.error_detail or "")
        assert (await the_request(ledger, task_id)).state is RequestState.NOT_SENT
        await wait_claimable(ledger, task_id)
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    stats = endpoint.stats()
    assert (stats["rate_limited"], stats["submits"]) == (1, 1)


async def test_an_input_over_the_token_limit_fails_once_naming_its_chunk(
    ledger: Ledger, pool: ParserPool
) -> None:
    words = " ".join(f"ledger{i}" for i in range(400))
    dense = "x." * 300  # 600 tokens in 600 characters
    text = f"{words}\n\n{dense}\n\n{words}"
    spans = chunk_text(text, chunk_size=DEFAULT_CHUNK_SIZE, overlap=DEFAULT_CHUNK_OVERLAP)
    culprit = next(i for i, (a, b) in enumerate(spans) if count_tokens(text[a:b]) > 400)
    task_id = await submit(ledger, text.encode(), "dense.txt")
    strict = start_endpoint("--max-tokens", "400")
    provider = remote(strict, key=None)
    try:
        await run_task(ledger, pool, provider, task_id)
        task = await ledger.reads.get_task(task_id)
        # Permanent: failed on its first attempt, no retry to storm with.
        assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.INPUT_TOO_LONG)
        assert task.attempt == 1
        detail = task.error_detail or ""
        assert detail.startswith(f"chunk {culprit}: "), (detail, culprit)
        assert "400 tokens" in detail and "nothing was cut" in detail
        assert "\n" not in detail and len(detail) <= 500
        assert (await the_request(ledger, task_id)).state is RequestState.FAILED
        await ledger.operator.retry(task_id)
        await run_task(ledger, pool, provider, task_id)  # the retry does not send it
    finally:
        await provider.aclose()
        stats = strict.stats()
        strict.stop()
    assert (stats["requests"], stats["too_long"], stats["submits"]) == (1, 1, 0)


# ---------------------------------------------------------------- the API key


async def test_a_wrong_key_is_a_clear_error_and_a_retry_with_the_right_one_succeeds(
    ledger: Ledger, pool: ParserPool, endpoint: Endpoint
) -> None:
    wrong = "sk-wrong-key-that-must-not-show"
    task_id = await submit(ledger, note(7), "wrong-key.md")
    provider = remote(endpoint, key=wrong)
    try:
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    task = await ledger.reads.get_task(task_id)
    assert (task.status, task.error_code) == (TaskStatus.FAILED, ErrorCode.PROVIDER_AUTH_FAILED)
    assert task.attempt == 1
    assert "refused the API key (HTTP 401)" in (task.error_detail or "")
    assert wrong not in (task.error_detail or "")
    assert (await the_request(ledger, task_id)).state is RequestState.NOT_SENT

    await ledger.operator.retry(task_id)
    provider = remote(endpoint)
    try:
        await run_task(ledger, pool, provider, task_id)
    finally:
        await provider.aclose()
    assert (await ledger.reads.get_task(task_id)).status is TaskStatus.SUCCEEDED
    stats = endpoint.stats()
    assert (stats["unauthorized"], stats["submits"]) == (1, 1)


CLI = (sys.executable, "-m", "core.cli")


def files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def cli_env(
    settings: Settings, env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in (API_KEY_ENV, FALLBACK_API_KEY_ENV)}
    return subprocess.run(
        [*CLI, "--db", settings.db_url, "--store", str(settings.store_root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **env},
    )


async def test_the_key_never_shows_in_rows_logs_or_errors(
    ledger: Ledger, endpoint: Endpoint, settings: Settings, tmp_path: Path
) -> None:
    ok = await submit(ledger, note(8), "keyed.md")
    lost = await submit(ledger, note(9), "keyed-lost.md")
    args = ["worker", "--until-idle", "--provider", endpoint.target, "--model", MODEL]
    endpoint.faults(lose_reply=0.0)
    first = cli_env(settings, {FALLBACK_API_KEY_ENV: KEY}, *args, "--log-format", "json")
    assert first.returncode == 0, first.stderr
    assert (await ledger.reads.get_task(ok)).status is TaskStatus.SUCCEEDED
    assert (await ledger.reads.get_task(lost)).status is TaskStatus.SUCCEEDED
    # A lost reply and a refused key leave their own rows and details.
    third = await submit(ledger, note(10), "keyed-third.md")
    endpoint.faults(lose_reply=1.0)
    second = cli_env(settings, {API_KEY_ENV: KEY}, *args, "--dimensions", str(DIMS))
    endpoint.faults(lose_reply=0.0)
    refused = cli_env(settings, {API_KEY_ENV: KEY + "-but-wrong"}, *args)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "refused the API key (HTTP 401)" in refused.stderr
    tasks = cli_env(settings, {}, "--json", "tasks")
    history = cli_env(settings, {}, "--json", "task", third)
    shown = [first, second, refused, tasks, history]
    assert (await ledger.reads.get_task(third)).error_code is ErrorCode.OUTCOME_UNKNOWN
    for ran in shown:
        assert KEY not in ran.stdout + ran.stderr
    # Every file the ledger and the object store wrote (the SQLite WAL included).
    assert files_holding(tmp_path, KEY) == []
    # And the ledger's own rows, read as any reader would.
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        dumped = "\n".join(db.iterdump())
    assert "openai+http://" in dumped and KEY not in dumped


# --------------------------------------------------------------- small pieces


def test_retry_after_reads_seconds_dates_and_milliseconds() -> None:
    now = 1_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_s(httpx.Headers({"retry-after": "7"}), now) == 7.0
    assert retry_after_s(httpx.Headers({"retry-after": date}), now) == pytest.approx(30, abs=1)
    assert retry_after_s(httpx.Headers({"retry-after-ms": "250"}), now) == 0.25
    assert retry_after_s(httpx.Headers({"retry-after": "soon"}), now) is None
    assert retry_after_s(httpx.Headers({"retry-after": "-5"}), now) == 0.0
    assert retry_after_s(httpx.Headers({"retry-after": "1e9"}), now) == 3600.0
    assert retry_after_s(httpx.Headers({}), now) is None


def test_options_are_checked_never_ignored() -> None:
    assert parse_options(["max_inputs=32", "send_dimensions=true"]) == {
        "max_inputs": "32",
        "send_dimensions": "true",
    }
    for bad in (["max_input=32"], ["max_inputs"], ["max_inputs=1", "max_inputs=2"]):
        with pytest.raises(ValueError, match=r"option|KEY=VALUE"):
            parse_options(bad)
    with pytest.raises(ValueError, match="max_inputs"):
        OpenAIEmbeddings("http://127.0.0.1:1/v1", MODEL, DIMS, {"max_inputs": "0"})
    with pytest.raises(ValueError, match="http"):
        OpenAIEmbeddings("ftp://host/v1", MODEL, DIMS)


TOO_LONG_ANSWERS = {
    # OpenAI, for one input among several: it does not say which.
    "openai": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 8192 tokens, however "
                "you requested 9000 tokens (9000 in your prompt; 0 for the completion). "
                "Please reduce your prompt; or completion length.",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
        "8192 tokens",
    ),
    "tei": (
        422,
        {
            "error": "Input validation error: `inputs` must have less than 512 tokens. Given: 900",
            "error_type": "Validation",
        },
        "512 tokens",
    ),
    "vllm": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 512 tokens. "
            "However, you requested 900 tokens in the input for embedding generation.",
            "type": "BadRequestError",
            "code": 400,
        },
        "512 tokens",
    ),
}


@pytest.mark.parametrize("server", list(TOO_LONG_ANSWERS))
async def test_an_endpoint_that_does_not_say_which_input_names_the_longest_as_likely(
    server: str,
) -> None:
    status, body, limit = TOO_LONG_ANSWERS[server]
    provider = OpenAIEmbeddings("http://127.0.0.1:9/v1", MODEL, DIMS, environ={})
    try:
        with pytest.raises(ProviderRejected) as caught:
            provider._refusal(
                status, httpx.Headers(), json.dumps(body).encode(), ["a", "b" * 90, "c"]
            )
    finally:
        await provider.aclose()
    refused = caught.value
    assert refused.error_code is ErrorCode.INPUT_TOO_LONG
    assert (refused.position, refused.position_known) == (1, False)
    assert limit in str(refused)
    code, detail = RequestFailed(f"rejected: {refused}", "0" * 64, refused).failure(
        (Stage.EMBEDDING, 64, 200)
    )
    assert code is ErrorCode.INPUT_TOO_LONG
    assert detail.startswith("a chunk of this batch, likely chunk 65 (the longest): ")


async def test_an_endpoint_echoing_the_key_is_quoted_without_it() -> None:
    provider = OpenAIEmbeddings("http://127.0.0.1:9/v1", MODEL, DIMS, environ={API_KEY_ENV: KEY})
    body = json.dumps({"error": {"message": f"model `x` not found for key {KEY}"}}).encode()
    try:
        with pytest.raises(ProviderRejected) as caught:
            provider._refusal(404, httpx.Headers(), body, ["a"])
    finally:
        await provider.aclose()
    assert KEY not in str(caught.value) and "[key]" in str(caught.value)


def test_an_openai_endpoint_is_the_same_endpoint_however_its_port_is_spelled() -> None:
    assert same_endpoint(
        "openai+https://api.openai.com/v1", "openai+https://API.openai.com:443/v1/"
    )
    assert not same_endpoint("openai+https://api.openai.com/v1", "openai+https://api.openai.com/v2")


async def test_unreachable_is_not_sent() -> None:
    provider = OpenAIEmbeddings("http://127.0.0.1:9/v1", MODEL, DIMS, environ={})
    try:
        with pytest.raises(NotSent, match="not reached"):
            await provider.submit("0" * 64, ["text"])
    finally:
        await provider.aclose()


# ------------------------------------------------------------------ the README


README_PORT = 8101  # the README's endpoint (provider openai's default port)
README_WAIT_S = 90.0  # seconds the README's worker may take to say succeeded


def listenable(port: int) -> bool:
    """Whether a server can listen on ``port`` as the endpoint does (SO_REUSEADDR: a
    connection of an earlier run in TIME-WAIT is no obstacle)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_the_readme_example_does_what_it_says(tmp_path: Path) -> None:
    """The README's "An OpenAI-compatible embedding endpoint" block, run as written (its
    VAR=value prefixes as a shell would) in a scratch folder."""
    from tests.test_readme_examples import (
        NOTES,
        ingestdesk_program,
        scratch_env,
        section,
        sh_blocks,
    )

    (block,) = sh_blocks(section("An OpenAI-compatible embedding endpoint"))
    assert [e.argv[1:3] if "=" in e.argv[0] else e.argv[:2] for e in block] == [
        ["ingestdesk", "provider"],
        ["ingestdesk", "add"],
        ["ingestdesk", "worker"],
        ["ingestdesk", "tasks"],
    ]
    if not listenable(README_PORT):
        pytest.skip(f"port {README_PORT} is taken on this machine")
    (tmp_path / "notes.md").write_bytes(NOTES)

    def start(argv: list[str]) -> subprocess.Popen[str]:
        env = scratch_env() | dict(a.split("=", 1) for a in argv if "=" in a.split("-")[0])
        words = [a for a in argv if "=" not in a.split("-")[0]]
        assert words[0] == "ingestdesk", argv
        return subprocess.Popen(
            [*ingestdesk_program(), *words[1:]],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(argv: list[str]) -> str:
        process = start(argv)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, (argv, out, err)
        return out

    serving = start(block[0].argv)
    try:
        assert serving.stdout is not None
        line = serving.stdout.readline()
        assert line.strip().endswith(f"http://127.0.0.1:{README_PORT}/v1"), line
        run(block[1].argv)
        worker = start(block[2].argv)
        assert worker.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(worker.stdout or ()), daemon=True)
        reader.start()  # its log, line by line, until the worker ends
        deadline = time.monotonic() + README_WAIT_S
        while not any(" succeeded task=" in x for x in lines) and worker.poll() is None:
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
        worker.send_signal(signal.SIGINT)  # the README's Ctrl-C
        worker.wait(timeout=60)
        reader.join(timeout=10)
        _, err = worker.communicate(timeout=10)  # its stdout was read whole: closes the pipes
        assert worker.returncode == 130, (lines, err)
        limited = [x for x in lines if "error_code=provider_rate_limited" in x]
        assert len(limited) == 1 and "next_attempt_in=" in limited[0], lines
        waited = float(limited[0].split("next_attempt_in=")[1].split("s")[0])
        assert waited >= 2.5, limited  # Retry-After: 3, less the time to write it
        assert "succeeded" in run(block[3].argv)
        stats = httpx.get(f"http://127.0.0.1:{README_PORT}/v1/stats", timeout=5).json()
        assert (stats["rate_limited"], stats["submits"]) == (1, 1)
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=30)
    assert serving.returncode == 0


def test_the_worker_refuses_endpoint_options_that_do_not_fit(settings: Settings) -> None:
    """Checked before the ledger is opened: nothing is ignored."""
    cases = {
        ("--model", MODEL): "--model goes with --provider openai+URL only",
        ("--provider", "openai+http://127.0.0.1:9/v1"): "needs --model NAME",
        (
            "--provider",
            "openai+http://127.0.0.1:9/v1",
            "--model",
            MODEL,
            "--provider-option",
            "max_input=3",
        ): "unknown option 'max_input'",
        ("--provider", "openai+ftp://host/v1", "--model", MODEL): "is not a provider URL",
    }
    for args, says in cases.items():
        ran = cli_env(settings, {}, "worker", *args)
        assert ran.returncode == 2, (args, ran)
        assert says in ran.stderr and ran.stderr.count("\n") == 1, (args, ran.stderr)
    assert not Path(settings.db_url.removeprefix("sqlite:///")).exists()


async def test_a_proxy_from_the_environment_is_used_only_when_asked(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    direct = remote(endpoint)
    proxied = remote(endpoint, proxy_from_env="true")
    try:
        assert verify(await direct.submit("0" * 64, ["text"]), 1, DIMS) is None
        with pytest.raises(NotSent, match="not reached"):  # the proxy refused: nothing left
            await proxied.submit("0" * 64, ["text"])
    finally:
        await direct.aclose()
        await proxied.aclose()
    assert endpoint.stats()["submits"] == 1


def test_replies_are_read_by_index_normalised_and_refused_when_incomplete() -> None:
    from core.ingest.openai_wire import Unusable, parse_embeddings

    packed = base64.b64encode(array("f", [0.0, 2.0]).tobytes()).decode()
    body = {"data": [{"index": 1, "embedding": packed}, {"index": 0, "embedding": [3, 4]}]}
    (first, second), _usage = parse_embeddings(json.dumps(body).encode(), 2)
    assert list(array("f", first)) == pytest.approx([0.6, 0.8])  # by index, normalised
    assert list(array("f", second)) == pytest.approx([0.0, 1.0])  # base64 too
    for broken in (
        {"data": [{"index": 0, "embedding": [1.0, None]}]},
        {"data": [{"index": 0, "embedding": [1e309, 1.0]}]},
        {"data": [{"index": 0, "embedding": "not base64!"}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},
        {"data": []},
    ):
        with pytest.raises(Unusable):
            parse_embeddings(json.dumps(broken).encode(), 1)


async def test_other_dimensions_are_a_setting_to_fix_not_a_reply_to_send_again(
    endpoint: Endpoint,
) -> None:
    plain = OpenAIEmbeddings(endpoint.url, MODEL, 128, environ={API_KEY_ENV: KEY})
    shortened = OpenAIEmbeddings(
        endpoint.url, MODEL, 128, {"send_dimensions": "true"}, environ={API_KEY_ENV: KEY}
    )
    try:
        with pytest.raises(ProviderRejected, match="answered 256 dimensions; this index has 128"):
            await plain.submit("0" * 64, ["text"])
        assert verify(await shortened.submit("0" * 64, ["text"]), 1, 128) is None
    finally:
        await plain.aclose()
        await shortened.aclose()


async def test_a_redirect_is_not_followed_and_says_where_it_points() -> None:
    provider = OpenAIEmbeddings("http://127.0.0.1:9/v1", MODEL, DIMS, environ={API_KEY_ENV: KEY})
    moved = httpx.Headers({"location": "https://elsewhere.example/v1/embeddings?token=x"})
    try:
        with pytest.raises(ProviderRejected) as caught:
            provider._refusal(301, moved, b"", ["a"])
    finally:
        await provider.aclose()
    assert "redirects (HTTP 301) to https://elsewhere.example/v1/embeddings;" in str(caught.value)
    assert "token" not in str(caught.value)
