"""``ingestdesk reconcile``: settle unknown provider requests by looking them up, and
``ingestdesk review``: the requests waiting for a person, and that person's decision.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from core.cli.command import Command, on_ledger
from core.cli.output import Output
from core.errors import BadInput, ProviderUnreachable
from core.safe_text import visible

if TYPE_CHECKING:
    from core.ingest.providers import RemoteProvider
    from core.ledger import Ledger, ProviderRequestView
    from core.ledger.provider_requests import NotDue

DECISIONS = ("resend", "fail")
PROVIDER_TIMEOUT_S = 10.0  # seconds a look-up may take before it counts as unavailable


def provider_url(value: str) -> str:
    """An argparse type for ``--provider``: an http(s) URL."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # raises for a port out of range or not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{visible(value)!r} is not a provider URL (e.g. http://127.0.0.1:8100)"
        )
    if parts.query or parts.fragment:
        # Requests go to paths under the URL; a query would not travel with them.
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        port = "" if parts.port is None else f":{parts.port}"
        raise argparse.ArgumentTypeError(
            f"{parts.scheme}://{host}{port}{visible(parts.path)}: a provider URL takes "
            "no query or fragment"
        )
    return value.rstrip("/")


async def connect_provider(url: str) -> RemoteProvider:
    """A remote provider at ``url``, its model read from it.

    Raises:
        ProviderUnreachable: nothing answers there (one line naming the URL).
    """
    from core.ingest.http_provider import HttpProvider
    from core.ingest.openai_provider import OpenAIEmbeddings, is_openai_url
    from core.ingest.providers import NotSent

    if is_openai_url(url):  # nothing to ask it: it has no look-up (see for_reconcile)
        try:
            return OpenAIEmbeddings.for_reconcile(url)
        except ValueError as exc:
            raise ProviderUnreachable(f"cannot use the endpoint {url[:80]}: {exc}") from None
    try:
        return await HttpProvider.connect(url, timeout_s=PROVIDER_TIMEOUT_S)
    except NotSent as exc:
        raise ProviderUnreachable(str(exc) or f"no provider answers at {url}") from None


async def cmd_reconcile(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk reconcile [--provider URL] [--all]``: one pass, each decision
    printed."""
    from core.ingest.providers import NotSent
    from core.ingest.reconcile import Answer, reconcile
    from core.states import RequestState

    async def connect(url: str) -> RemoteProvider:
        try:
            return await connect_provider(url)
        except ProviderUnreachable as exc:
            raise NotSent(exc.message) from None

    decisions = await reconcile(
        ledger,
        ledger.operator.store,
        connect,
        endpoint=args.provider,
        everything=args.all,
    )
    counts = await ledger.providers.counts()
    lines = [
        f"request={d.request_key[:12]} task={d.task_id[:8]} {d.answer.value} -> "
        f"{d.state.value}: {visible(d.detail)}"
        for d in decisions
    ]
    # Requests sent to another endpoint than --provider are listed, not looked up:
    # asking a provider that never saw them would answer "not found".
    skipped = sum(d.answer is Answer.NOT_LOOKED_UP for d in decisions)
    looked_up = len(decisions) - skipped
    elsewhere = f"{skipped} sent to another endpoint, not looked up here"
    waiting = await ledger.providers.not_due()
    if looked_up:
        # "Reconciled" would claim more than a look-up that found nothing new did.
        still = sum(
            d.answer is not Answer.NOT_LOOKED_UP and d.state is RequestState.UNKNOWN
            for d in decisions
        )
        summary = f"looked up {looked_up} requests: {looked_up - still} settled"
        summary += f", {still} still unknown"
        summary += f"; {elsewhere}" if skipped else ""
    elif skipped:
        summary = f"nothing looked up: {elsewhere}"
    else:
        summary = "nothing to reconcile: no unknown request is due" + _not_due(
            waiting, args.all, ledger.clock()
        )
    if decisions:
        summary += "; now " + " ".join(f"{state.value}={n}" for state, n in counts.items() if n)
    lines.append(summary)
    out.emit(
        {
            "decisions": [d.to_dict() for d in decisions],
            "requests": {state.value: n for state, n in counts.items()},
            "not_due": asdict(waiting),
        },
        lines,
    )


def _not_due(waiting: NotDue, everything: bool, now: float) -> str:
    """Why a pass found nothing due, when unknown requests exist: in flight (never
    looked up while their attempt runs), or waiting out a look-up's backoff, which
    ``--all`` skips."""
    said = ""
    if waiting.backing_off and not everything:
        soonest = max(0.0, (waiting.next_lookup_at or now) - now)
        said += (
            f"; {waiting.backing_off} unknown wait for their next look-up (the soonest in "
            f"{_age(soonest)}): reconcile --all looks them up now"
        )
    if waiting.in_flight:
        said += f"; {waiting.in_flight} in flight (the attempt that sent each still runs)"
    return said


def _review_line(r: ProviderRequestView, now: float) -> str:
    age = max(0.0, now - r.updated_at)
    return (
        f"task={r.task_id[:8]} request={r.request_key[:12]} age={_age(age)} "
        f"task_status={r.task_status.value if r.task_status else '-'} "
        f"document={r.document_name or '(gone)'}: {r.detail or ''}"
    )


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


async def cmd_review(ledger: Ledger, args: argparse.Namespace, out: Output) -> None:
    """``ingestdesk review`` lists the provider requests waiting for a person;
    ``review resend TASK`` / ``review fail TASK --reason R`` decides."""
    if args.decision is None:
        if args.task_id is not None:
            raise BadInput("say what to do with the task: review resend TASK or review fail TASK")
        waiting = await ledger.providers.awaiting_review()
        now = time.time()
        out.emit(
            [r.to_dict() | {"age_s": round(now - r.updated_at, 1)} for r in waiting],
            [_review_line(r, now) for r in waiting] or ["nothing waits for review"],
        )
        return
    if args.task_id is None:
        raise BadInput(f"review {args.decision} needs a task id")
    if args.decision == "resend":
        task = await ledger.provider_review.resend(
            args.task_id, actor=args.actor, reason=args.reason
        )
        verb = "resend approved"
    else:
        task = await ledger.provider_review.mark_failed(
            args.task_id, actor=args.actor, reason=args.reason or ""
        )
        verb = "marked failed"
    out.emit(
        task.to_dict(),
        f"{verb}: task={task.task_id[:8]} status={task.status.value}"
        + (f" error_code={task.error_code.value}" if task.error_code else ""),
    )


def _reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provider",
        type=provider_url,
        metavar="URL",
        help="the URL of the endpoint requests were sent to, with the credentials the "
        "ledger does not keep (requests sent elsewhere are not looked up; default: where "
        "each was sent)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="also look up requests whose next look-up is not due yet",
    )


def _review_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "decision",
        nargs="?",
        choices=DECISIONS,
        help="resend the task's requests, or mark them failed (default: list)",
    )
    parser.add_argument("task_id", nargs="?", help="the task whose requests are decided")
    parser.add_argument("--reason", help="why (kept in the task's history; needed for fail)")


RECONCILE = Command(
    "reconcile",
    "look unknown provider requests up and settle them (never resends)",
    on_ledger(cmd_reconcile, create=False),
    _reconcile_arguments,
)
REVIEW = Command(
    "review",
    "provider requests waiting for a person; resend or mark failed",
    on_ledger(cmd_review, create=False),
    _review_arguments,
)
