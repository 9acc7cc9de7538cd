"""``/api/indexes``: the ledger's vector indexes over HTTP — every index with its
re-embedding campaign's progress, and an operator's actions on them: create one for
another embedder (its campaign is queued at once; workers run it), resume or cancel
its campaign, activate it (the active one is retired in the same transaction), drop
an old one.

The actions go through ``ledger.campaigns``, as ``ingestdesk index`` does: the
ledger's rule is the answer (a refused move is 409 with the ledger's one-line
message, an unknown index 404, an embedder spec that is not one 422 with the
registry's reason). An index is named by its name or its id.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, ConfigDict, Field

from core.api.auth import Operator, Viewer
from core.api.context import ledger_of
from core.api.problems import responses
from core.api.routing import GuardedRoute
from core.errors import NotFound
from core.ingest.embedders import SPEC_MAX_CHARS

router = APIRouter(prefix="/api/indexes", tags=["vector indexes"], route_class=GuardedRoute)

NAME_MAX_CHARS = 120  # characters of an index's name (IndexKey.default_name cuts there too)
INDEX = "/{name}"
NOT_FOUND = {404: "no index has this name or id"}
REASON_HELP = "why, kept in the history of each cancelled task"


class CreateRequest(BaseModel):
    """The body of ``POST /api/indexes``."""

    model_config = ConfigDict(extra="forbid")

    embedder: str = Field(
        ...,
        min_length=1,
        max_length=SPEC_MAX_CHARS,
        description="the embedder spec, as `ingestdesk index create` takes it "
        "(`hashed:256`, `wordllama:128`, `openai:MODEL?url=...`; see `ingestdesk embedders`)",
        examples=["wordllama:128"],
    )
    name: str | None = Field(
        None,
        min_length=1,
        max_length=NAME_MAX_CHARS,
        description="its name (default: from the embedder, e.g. `wordllama-128`)",
    )


class ActivateRequest(BaseModel):
    """The optional body of ``activate``."""

    model_config = ConfigDict(extra="forbid")

    force: bool = Field(
        False,
        description="activate a building or retired index anyway, knowing that versions "
        "may lack its vectors (search would not find them until its campaign is done)",
    )


class CancelRequest(BaseModel):
    """The optional body of ``cancel``."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(None, max_length=1000, description=REASON_HELP)


# ------------------------------------------------------------------- reads


@router.get("", summary="Every index, oldest first, with its campaign's progress")
async def list_indexes(request: Request, caller: Viewer) -> list[dict[str, Any]]:
    """Each index's embedder, model, version, dimensions, state and vectors, and its
    campaign: ``{"total", "done", "by_status"}`` of its re-embedding tasks."""
    ledger = ledger_of(request)
    found = []
    for index in await ledger.indexes.list():
        # One read per index (the ledger has no list of progress): one dropped in
        # between is left out, not answered as a 404 of the whole list.
        with contextlib.suppress(NotFound):
            found.append((await ledger.campaigns.progress(index.id)).to_dict())
    return found


@router.get(INDEX, summary="One index, by name or id", responses=responses(NOT_FOUND))
async def get_index(request: Request, name: str, caller: Viewer) -> dict[str, Any]:
    return (await ledger_of(request).campaigns.progress(name)).to_dict()


# ------------------------------------------------------------------- actions


@router.post(
    "",
    status_code=201,
    summary="Create an index for an embedder, and its re-embedding campaign",
    responses=responses(
        {
            409: "the ledger already has an index for this embedder (resume it instead)",
            422: "not an embedder spec, or an embedder this server cannot make (the "
            "registry's one-line reason)",
        }
    ),
)
async def create_index(request: Request, body: CreateRequest, caller: Operator) -> dict[str, Any]:
    """One re-embedding task is queued per published and review-pending version;
    workers (``ingestdesk worker``) run them over the stored chunks. The index is
    ``building`` until they are done, then ``ready``; search keeps answering from the
    active index until this one is activated. ``worker_options`` names the options
    of the spec the index does not record (they do not change the vectors): workers
    use them only when started with the same spec (``--embedder``)."""
    from core.ingest.embedding import index_key_for_spec, worker_options

    key = index_key_for_spec(body.embedder)
    progress = await ledger_of(request).campaigns.create(key, name=body.name, actor=caller.name)
    return progress.to_dict() | {"worker_options": worker_options(body.embedder, key)}


@router.post(
    f"{INDEX}/activate",
    summary="Make a ready index the one search answers from",
    responses=responses(
        {
            **NOT_FOUND,
            409: "the index is not ready (its campaign has tasks left or failed; `force` "
            "activates it anyway), or it is already active",
        }
    ),
)
async def activate(
    request: Request,
    name: str,
    caller: Operator,
    body: Annotated[ActivateRequest | None, Body()] = None,
) -> dict[str, Any]:
    """The active index is retired in the same transaction: a search sees the old
    index or the new, never neither. The retired one stays until dropped."""
    ledger = ledger_of(request)
    index = await ledger.campaigns.activate(name, force=bool(body and body.force))
    return (await ledger.campaigns.progress(index.id)).to_dict()


@router.post(
    f"{INDEX}/resume",
    summary="Queue what an index still lacks, and requeue its campaign's failures",
    responses=responses(NOT_FOUND),
)
async def resume(request: Request, name: str, caller: Operator) -> dict[str, Any]:
    """Versions published since it was retired, tasks cancelled, tasks failed: a
    retired index is building again until caught up."""
    return (await ledger_of(request).campaigns.resume(name, actor=caller.name)).to_dict()


@router.post(
    f"{INDEX}/cancel",
    summary="Cancel an index's campaign tasks still to run",
    responses=responses(NOT_FOUND),
)
async def cancel(
    request: Request,
    name: str,
    caller: Operator,
    body: Annotated[CancelRequest | None, Body()] = None,
) -> dict[str, Any]:
    """The index keeps the vectors written so far; ``resume`` goes on from there."""
    progress = await ledger_of(request).campaigns.cancel(
        name, actor=caller.name, reason=body.reason if body else None
    )
    return progress.to_dict()


@router.delete(
    INDEX,
    summary="Drop an index that is not active, with its vectors",
    responses=responses(
        {**NOT_FOUND, 409: "the index is active: activate another index before dropping it"}
    ),
)
async def drop(request: Request, name: str, caller: Operator) -> dict[str, Any]:
    """Its campaign's tasks still to run are cancelled. The answer is the index as it
    was, with the number of vectors that went with it."""
    return (await ledger_of(request).campaigns.drop(name, actor=caller.name)).to_dict()
