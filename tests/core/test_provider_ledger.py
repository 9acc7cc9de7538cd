"""The provider ledger's rules on both backends: one sender per request key, in-flight
requests left alone, unknown ones due for reconcile only once their attempt ended,
and a person's decisions in the task's history."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from core import BadInput, Conflict, ErrorCode, Ledger, Settings, TaskStatus
from core.ledger import Claim, Intent
from core.ledger.provider_requests import NotDue
from core.states import RequestState
from tests.conftest import FakeClock
from tests.core.test_worker import cli

KEY = "ab" * 32


async def claimed(ledger: Ledger, name: str, worker: str = "w1") -> Claim:
    doc = await ledger.operator.upload(f"text of {name}\n".encode(), name)
    task = await ledger.operator.submit(doc.document_id)
    claim = await ledger.queue.claim(task.task_id, worker)
    assert claim is not None
    return claim


async def intend(ledger: Ledger, claim: Claim, key: str = KEY) -> Intent:
    answer = await ledger.providers.intend(
        claim, key, provider="demo", model="m1", endpoint="http://p", texts=3
    )
    return answer.intent


async def test_one_sender_per_key_and_a_running_sender_is_in_flight(ledger: Ledger) -> None:
    first = await claimed(ledger, "a.txt")
    second = await claimed(ledger, "b.txt", "w2")
    assert await intend(ledger, first) is Intent.SEND
    assert await intend(ledger, second) is Intent.IN_FLIGHT
    assert await ledger.providers.due() == []  # in flight: nobody looks it up

    await ledger.queue.fail(first, ErrorCode.OUTCOME_UNKNOWN, "reply lost")
    due = await ledger.providers.due()
    assert [r.request_key for r in due] == [KEY]
    assert await intend(ledger, second) is Intent.UNKNOWN  # look it up, never resend


async def test_concurrent_intents_on_one_key_tell_exactly_one_to_send(ledger: Ledger) -> None:
    claims = [await claimed(ledger, f"n{i}.txt", f"w{i}") for i in range(6)]
    answers = await asyncio.gather(*(intend(ledger, c) for c in claims))
    assert sorted(answers).count(Intent.SEND) == 1
    assert set(answers) == {Intent.SEND, Intent.IN_FLIGHT}


async def test_settled_requests_are_used_and_not_sent_ones_may_be_sent(ledger: Ledger) -> None:
    claim = await claimed(ledger, "a.txt")
    assert await intend(ledger, claim) is Intent.SEND
    assert await ledger.providers.settle(KEY, RequestState.NOT_SENT, detail="refused")
    assert await intend(ledger, claim) is Intent.SEND  # provably never left: send
    assert await ledger.providers.settle(
        KEY,
        RequestState.DONE,
        request_id="req_1",
        result_key="sha256/ab/" + "ab" * 32,
        result_sha256="ab" * 32,
        dimensions=8,
        usage={"texts": 3},
    )
    assert await intend(ledger, claim) is Intent.USE
    # Settling again from unknown does nothing: it is no longer unknown.
    assert not await ledger.providers.settle(KEY, RequestState.FAILED)
    (row,) = await ledger.providers.for_task(claim.task_id)
    assert (row.state, row.request_id, row.usage, row.sends) == (
        RequestState.DONE,
        "req_1",
        {"texts": 3},
        2,
    )
    counts = await ledger.providers.counts()
    assert counts[RequestState.DONE] == 1 and counts[RequestState.UNKNOWN] == 0


async def test_a_lost_claim_sends_nothing(ledger: Ledger) -> None:
    claim = await claimed(ledger, "a.txt")
    await ledger.operator.cancel(claim.task_id)
    assert await intend(ledger, claim) is Intent.LOST
    assert await ledger.providers.for_task(claim.task_id) == []


async def wait_on_a_sent_request(ledger: Ledger) -> tuple[Claim, Claim]:
    """One task sends the request; a second meets it in flight and is handed back to
    wait for it (as the pipeline does), due in a minute at the latest."""
    sender = await claimed(ledger, "sender.txt")
    waiter = await claimed(ledger, "waiter.txt", "w2")
    assert await intend(ledger, sender) is Intent.SEND
    assert await intend(ledger, waiter) is Intent.IN_FLIGHT
    assert await ledger.queue.hand_back(
        waiter, reason="waiting", delay_s=60.0, waits_for_request=KEY
    )
    return sender, waiter


async def claimable(ledger: Ledger) -> list[str]:
    return [c.task_id for c in await ledger.queue.claim_next("w3", limit=5)]


@pytest.mark.parametrize(
    "sender_ends", ["done", "reply lost", "reaped", "handed back", "cancelled"]
)
async def test_a_task_waiting_on_a_request_is_due_as_soon_as_its_sender_ends(
    ledger: Ledger, clock: FakeClock, sender_ends: str
) -> None:
    # It waited the whole KEY_WAIT_S, and a burst worker left it behind, while a task
    # waiting for an identical task's result was due at once.
    sender, waiter = await wait_on_a_sent_request(ledger)
    assert await claimable(ledger) == []  # waiting while the request is in flight
    if sender_ends == "done":
        assert await ledger.providers.settle(
            KEY, RequestState.DONE, result_key="r", result_sha256="ab" * 32, dimensions=8
        )
    elif sender_ends == "reply lost":
        await ledger.providers.settle(KEY, RequestState.UNKNOWN, detail="reply lost")
        assert await claimable(ledger) == []  # still in flight: its sender runs on
        await ledger.queue.fail(sender, ErrorCode.OUTCOME_UNKNOWN, waits_for_request=KEY)
    elif sender_ends == "reaped":
        clock.advance(ledger.settings.lease_s + 1)  # the waiter's minute is not over
        await ledger.queue.reap()
    elif sender_ends == "handed back":
        assert await ledger.queue.hand_back(sender, delay_s=30.0)
    else:
        await ledger.operator.cancel(sender.task_id)
    assert waiter.task_id in await claimable(ledger)


async def test_a_task_handed_back_to_wait_on_a_request_settled_meanwhile_is_due_at_once(
    ledger: Ledger,
) -> None:
    sender = await claimed(ledger, "sender.txt")
    waiter = await claimed(ledger, "waiter.txt", "w2")
    assert await intend(ledger, sender) is Intent.SEND
    assert await intend(ledger, waiter) is Intent.IN_FLIGHT
    # The sender's reply lands between the waiter's intent and its hand-back: that
    # settling woke nobody, so the hand-back itself sees the request is no longer sent.
    assert await ledger.providers.settle(KEY, RequestState.NOT_SENT, detail="refused")
    assert await ledger.queue.hand_back(
        waiter, reason="waiting", delay_s=60.0, waits_for_request=KEY
    )
    assert await claimable(ledger) == [waiter.task_id]


async def test_a_resend_makes_a_task_waiting_for_its_retry_due_at_once(
    ledger: Ledger, clock: FakeClock
) -> None:
    claim = await claimed(ledger, "retrying.txt")
    await intend(ledger, claim)
    failed = await ledger.queue.fail(claim, ErrorCode.OUTCOME_UNKNOWN, waits_for_request=KEY)
    assert failed is not None and failed.status is TaskStatus.RETRY_WAIT
    await ledger.providers.settle(KEY, RequestState.NEEDS_REVIEW, detail="not found")
    clock.advance(0.01)  # its backoff is far from over
    assert await claimable(ledger) == []
    await ledger.provider_review.resend(claim.task_id, actor="ana")
    assert await claimable(ledger) == [claim.task_id]


async def test_a_reconcile_that_finds_nothing_due_says_why_and_names_all(
    ledger: Ledger, settings: Settings, clock: FakeClock
) -> None:
    clock.now = time.time()  # the command reads the real clock
    backing_off = await claimed(ledger, "backing-off.txt")
    await intend(ledger, backing_off)
    await ledger.queue.fail(backing_off, ErrorCode.OUTCOME_UNKNOWN, waits_for_request=KEY)
    await ledger.providers.settle(
        KEY, RequestState.UNKNOWN, looked_up=True, next_lookup_at=clock() + 600
    )
    flying = await claimed(ledger, "in-flight.txt", "w2")
    await intend(ledger, flying, "cd" * 32)
    assert await ledger.providers.not_due() == NotDue(1, 1, clock() + 600)

    said = cli(settings, "reconcile")
    assert said.returncode == 0, said.stderr
    assert "nothing to reconcile: no unknown request is due" in said.stdout
    assert "1 unknown wait for their next look-up (the soonest in 10m)" in said.stdout
    assert "reconcile --all looks them up now" in said.stdout
    assert "1 in flight" in said.stdout
    shown = json.loads(cli(settings, "--json", "reconcile").stdout)
    assert shown["not_due"] == {"in_flight": 1, "backing_off": 1, "next_lookup_at": clock() + 600}


async def test_reconcile_backoff_hides_a_request_until_its_next_lookup(
    ledger: Ledger, clock: FakeClock
) -> None:
    claim = await claimed(ledger, "a.txt")
    await intend(ledger, claim)
    await ledger.queue.fail(claim, ErrorCode.OUTCOME_UNKNOWN)
    await ledger.providers.settle(
        KEY, RequestState.UNKNOWN, looked_up=True, next_lookup_at=clock() + 10
    )
    assert await ledger.providers.due() == []
    clock.advance(11)
    (due,) = await ledger.providers.due()
    assert due.lookups == 1


async def needs_review(ledger: Ledger) -> Claim:
    claim = await claimed(ledger, "review.txt")
    await intend(ledger, claim)
    await ledger.providers.settle(KEY, RequestState.NEEDS_REVIEW, detail="not found")
    await ledger.queue.fail(claim, ErrorCode.NEEDS_REVIEW, "not found")
    return claim


async def test_resend_requeues_the_task_and_lets_it_send_once_more(ledger: Ledger) -> None:
    claim = await needs_review(ledger)
    (waiting,) = await ledger.providers.awaiting_review()
    assert (waiting.task_id, waiting.task_status, waiting.document_name) == (
        claim.task_id,
        TaskStatus.FAILED,
        "review.txt",
    )
    task = await ledger.provider_review.resend(claim.task_id[:8], actor="ana", reason="ok")
    assert task.status is TaskStatus.QUEUED
    assert await ledger.providers.awaiting_review() == []
    again = await ledger.queue.claim(claim.task_id, "w1")
    assert again is not None
    assert await intend(ledger, again) is Intent.SEND
    history = await ledger.reads.task_history(claim.task_id)
    assert history[-2].actor == "ana"
    assert history[-2].reason == "resend approved after review: ok"
    with pytest.raises(Conflict):
        await ledger.provider_review.resend(claim.task_id, actor="ana")


async def test_mark_failed_needs_a_reason_and_keeps_the_request_from_being_sent(
    ledger: Ledger,
) -> None:
    claim = await needs_review(ledger)
    with pytest.raises(BadInput):
        await ledger.provider_review.mark_failed(claim.task_id, actor="ana", reason=" ")
    task = await ledger.provider_review.mark_failed(
        claim.task_id, actor="ana", reason="model retired"
    )
    assert (task.status, task.error_code, task.error_detail) == (
        TaskStatus.FAILED,
        ErrorCode.PROVIDER_FAILED,
        "model retired",
    )
    await ledger.operator.retry(claim.task_id)
    again = await ledger.queue.claim(claim.task_id, "w1")
    assert again is not None
    assert await intend(ledger, again) is Intent.FAILED
    last = (await ledger.reads.task_history(claim.task_id))[-3]
    assert (last.actor, last.reason) == ("ana", "marked failed after review: model retired")
