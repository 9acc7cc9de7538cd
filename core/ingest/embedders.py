"""The embedder registry: which embedders there are, what each needs installed, and
the one text form an index's embedder is written in (CLI, API, ledger).

A spec is ``KIND[:MODEL][?KEY=VALUE&...]``:

* ``hashed``, ``hashed:512`` — the hashed bag of words (lexical; no dependency). Its
  only model is ``bag-of-words``; a number after the colon is the dimensions.
* ``wordllama``, ``wordllama:128`` — WordLlama ``l2_supercat``; 64, 128 or 256 dims.
* ``openai:text-embedding-3-small?dimensions=1536&url=http://127.0.0.1:8080/v1`` — an
  OpenAI-compatible ``/v1/embeddings`` endpoint: the model as the endpoint names it,
  options after ``?`` (URL-encoded values). ``dimensions`` may be left out for
  OpenAI's own models, whose sizes are known. The API key is read from the
  environment, never written in a spec: a spec is stored in the ledger and shown.

``dimensions=N`` is accepted for every kind (``wordllama?dimensions=128`` is
``wordllama:128``); :meth:`EmbedderSpec.text` writes the one canonical form.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import parse_qsl, quote, urlsplit

from core.errors import BadInput

if TYPE_CHECKING:
    from core.ingest.embedder import Embedder
    from core.ingest.providers import RemoteProvider
    from core.ledger import IndexView, Ledger

SPEC_MAX_CHARS = 2_000  # characters; a spec is a CLI argument or a query parameter
OPTION_VALUE_MAX_CHARS = 1_000  # characters
MAX_OPTIONS = 16
HASHED_MAX_DIMENSIONS = 65_536  # 256 KB a vector: past any use of a bag of words
REMOTE_MAX_DIMENSIONS = 65_536
_KIND = re.compile(r"[a-z][a-z0-9_-]*\Z")
_OPTION_KEY = re.compile(r"[a-z][a-z0-9_]*\Z")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
# Options that would put a secret into a spec (and so into the ledger and its output).
_SECRET_KEYS = frozenset({"api_key", "apikey", "key", "token", "secret", "password"})
# Sizes of OpenAI's own models, so their specs need no dimensions=.
OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


class Options(dict[str, str]):
    """A spec's options: a read-only dict, sorted by key, hashable. Being a dict,
    it goes through ``json.dumps``, ``dataclasses.asdict``, pickle and deepcopy."""

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(sorted(dict(items).items()))

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("an embedder spec's options cannot be changed")

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))

    def __reduce__(self) -> tuple[type[Options], tuple[dict[str, str]]]:
        return Options, (dict(self),)


@dataclass(frozen=True)
class EmbedderSpec:
    """What makes an index's vectors: an embedder kind, its model, the dimensions and
    the options that change the vectors or where they come from.

    ``options`` is an :class:`Options`: a read-only dict, sorted by key.
    """

    embedder: str
    model: str
    dimensions: int
    options: Mapping[str, str] = field(default_factory=Options)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", Options(self.options))

    @classmethod
    def parse(cls, text: str) -> EmbedderSpec:
        """The spec ``text`` names (see the module docstring).

        Raises:
            BadInput: Not a spec: one line saying why and naming the accepted kinds.
        """
        return _parse(text)

    @classmethod
    def of(cls, spec: str | EmbedderSpec) -> EmbedderSpec:
        """``spec`` itself, or the spec a text names (as :meth:`parse`)."""
        return spec if isinstance(spec, EmbedderSpec) else _parse(spec)

    def text(self) -> str:
        """The canonical text form; ``EmbedderSpec.parse(spec.text()) == spec``."""
        if self.embedder in LOCAL_MODELS:
            head = f"{self.embedder}:{self.dimensions}"
            options = dict(self.options)
        else:
            head = f"{self.embedder}:{self.model}"
            options = {**self.options, "dimensions": str(self.dimensions)}
        if not options:
            return head
        query = "&".join(f"{k}={quote(v, safe='/:@.-_~')}" for k, v in sorted(options.items()))
        return f"{head}?{query}"

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class EmbedderKind:
    """One kind of embedder, for ``ingestdesk embedders``."""

    name: str
    summary: str
    model: str  # "" where the model is chosen in the spec
    dimensions: str  # what may be asked for, as people read it
    default_dimensions: int | None
    needs: tuple[str, ...]  # distributions beyond ingestdesk's own
    example: str


KINDS: tuple[EmbedderKind, ...] = (
    EmbedderKind(
        "hashed",
        "hashed bag of words (feature hashing): lexical, no model, the zero-dependency fallback",
        "bag-of-words",
        f"1-{HASHED_MAX_DIMENSIONS}",
        256,
        (),
        "hashed:256",
    ),
    EmbedderKind(
        "wordllama",
        "WordLlama l2_supercat, local and offline: Llama 2 token embeddings, mean-pooled "
        "(weights: Llama 2 Community Licence may apply)",
        "l2_supercat",
        "64, 128, 256",
        256,
        ("wordllama",),
        "wordllama:256",
    ),
    EmbedderKind(
        "openai",
        "any OpenAI-compatible /v1/embeddings endpoint (OpenAI, Azure OpenAI, Ollama, vLLM, "
        "TEI, LocalAI); the API key from the environment",
        "",
        "the model's (dimensions=N)",
        None,
        ("httpx",),
        "openai:text-embedding-3-small?url=https://api.openai.com/v1",
    ),
)
KIND_NAMES = tuple(kind.name for kind in KINDS)
# Kinds with one model of their own: after the colon comes the dimensions.
LOCAL_MODELS = {"hashed": "bag-of-words", "wordllama": "l2_supercat"}


def _refuse(reason: str) -> BadInput:
    return BadInput(f"{reason}; an embedder is one of {', '.join(KIND_NAMES)} (e.g. wordllama:256)")


def _parse(text: str) -> EmbedderSpec:
    if not isinstance(text, str):
        raise _refuse("an embedder spec is text")
    if len(text) > SPEC_MAX_CHARS:
        raise _refuse(f"embedder spec over {SPEC_MAX_CHARS} characters")
    text = text.strip()
    if not text or not text.isprintable() or any(c.isspace() for c in text):
        raise _refuse("an embedder spec is one word without spaces or control characters")
    head, has_query, query = text.partition("?")
    kind, has_arg, arg = head.partition(":")
    kind = kind.lower()
    if not _KIND.match(kind) or kind not in KIND_NAMES:
        raise _refuse(f"unknown embedder {kind[:40]!r}")
    if has_arg and not arg:
        raise _refuse(f"nothing after '{kind}:'")
    if has_query and not query:
        raise _refuse("nothing after '?'")
    options = _options(query) if query else {}
    asked = options.pop("dimensions", None)
    if kind in LOCAL_MODELS:
        return _local(kind, arg, asked, options)
    return _remote(kind, arg, asked, options)


def _options(query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(
            query, keep_blank_values=True, strict_parsing=True, max_num_fields=MAX_OPTIONS
        )
    except ValueError:
        raise _refuse(
            f"options after '?' are KEY=VALUE joined by '&' (at most {MAX_OPTIONS})"
        ) from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if not _OPTION_KEY.match(key):
            raise _refuse(f"option name {key[:40]!r} is not lower-case letters, digits and _")
        if key in options:
            raise _refuse(f"option {key!r} given twice")
        if key in _SECRET_KEYS:
            raise _refuse(
                f"option {key!r}: a secret never goes in a spec (it is stored and "
                "shown); the API key is read from the environment"
            )
        if not value:
            raise _refuse(f"option {key!r} has no value")
        if len(value) > OPTION_VALUE_MAX_CHARS or not value.isprintable():
            raise _refuse(f"option {key!r}: at most {OPTION_VALUE_MAX_CHARS} printable characters")
        options[key] = value
    return options


def _dimensions(kind: str, given: str, allowed: range | tuple[int, ...]) -> int:
    if not given.isascii() or not given.isdigit():
        raise _refuse(f"{kind} dimensions must be a whole number, got {given[:40]!r}")
    # A digit string of any length is a number out of range, not "not a number"; only
    # short ones are converted (int() of a huge string is slow by design).
    value = int(given) if len(given) <= 9 else None
    if value is None or value not in allowed:
        shown = (
            f"{allowed.start}-{allowed.stop - 1}"
            if isinstance(allowed, range)
            else ", ".join(map(str, allowed))
        )
        raise _refuse(f"{kind} dimensions must be {shown}, got {given[:40]}")
    return value


def _local(kind: str, arg: str, asked: str | None, options: dict[str, str]) -> EmbedderSpec:
    if options:
        raise _refuse(f"{kind} takes no options but dimensions (got {', '.join(sorted(options))})")
    if arg and asked is not None and arg != asked:
        raise _refuse(f"{kind}:{arg[:20]} and dimensions={asked[:20]} disagree")
    given = arg or asked
    if kind == "hashed":
        allowed: range | tuple[int, ...] = range(1, HASHED_MAX_DIMENSIONS + 1)
        default = 256
    else:
        from core.ingest import wordllama_embedder as wl  # stdlib-only at import

        allowed, default = wl.DIMENSIONS, wl.DEFAULT_DIMENSIONS
    if given is not None and not given.isdigit() and arg == given:
        raise _refuse(
            f"after '{kind}:' comes its dimensions (its one model is {LOCAL_MODELS[kind]})"
        )
    dimensions = default if given is None else _dimensions(kind, given, allowed)
    return EmbedderSpec(kind, LOCAL_MODELS[kind], dimensions)


def _remote(kind: str, model: str, asked: str | None, options: dict[str, str]) -> EmbedderSpec:
    if not model:
        raise _refuse(f"{kind} needs its model: {kind}:MODEL?url=...")
    if len(model) > 200 or not _MODEL.match(model):
        raise _refuse(f"{kind} model {model[:40]!r} is not a model name")
    url = options.get("url")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _refuse(f"{kind} url must be http:// or https:// with a host")
        if parts.username or parts.password:
            raise _refuse(
                f"{kind} url must not hold credentials; the API key is read from the environment"
            )
    if asked is None:
        if model not in OPENAI_DIMENSIONS:
            raise _refuse(f"{kind} model {model[:40]!r} needs ?dimensions=N (its vector size)")
        return EmbedderSpec(kind, model, OPENAI_DIMENSIONS[model], options)
    dimensions = _dimensions(kind, asked, range(1, REMOTE_MAX_DIMENSIONS + 1))
    return EmbedderSpec(kind, model, dimensions, options)


# ---------------------------------------------------------------------- instances


def embedder_for(spec: EmbedderSpec) -> Embedder | RemoteProvider:
    """The embedder (or remote provider) that makes ``spec``'s vectors.

    Raises:
        BadInput: That kind is not available here (with what to install).
    """
    if spec.embedder == "hashed":
        from core.ingest.embedder import HashingEmbedder

        return HashingEmbedder(spec.dimensions)
    if spec.embedder == "wordllama":
        from core.ingest.wordllama_embedder import ModelUnavailable, WordLlamaEmbedder

        try:
            return WordLlamaEmbedder(spec.dimensions)
        except ModelUnavailable as exc:
            raise BadInput(f"embedder {spec.text()} is not available here: {exc.message}") from None
    if spec.embedder == "openai":
        from core.ingest.openai_provider import OpenAIEmbeddings

        options = dict(spec.options)
        url = options.pop("url", None)
        if url is None:
            raise BadInput(f"embedder {spec.text()} needs the endpoint: ?url=https://HOST/v1")
        try:
            return OpenAIEmbeddings(url, spec.model, spec.dimensions, options)
        except ValueError as exc:
            raise BadInput(f"embedder {spec.text()}: {exc}") from None
    raise _refuse(f"unknown embedder {spec.embedder[:40]!r}")


def spec_of_index(index: IndexView) -> EmbedderSpec:
    """The spec that makes an index's vectors (its kind, model, dimensions, options)."""
    return EmbedderSpec(
        index.embedder,
        LOCAL_MODELS.get(index.embedder, index.model),
        index.dimensions,
        Options(index.options),
    )


async def worker_embedder(ledger: Ledger, spec: str | None = None) -> Embedder | RemoteProvider:
    """What a worker started by a person embeds with: ``spec`` when given; else the
    embedder of the ledger's active index, so new versions land where search looks
    (a worker on another model still works: its versions are re-embedded into the
    active index); else, on a ledger no worker has embedded in, :func:`default_spec`.

    Raises:
        BadInput: ``spec`` is not an embedder, or the active index's embedder is not
            available here (what to install, or pass an embedder).
    """
    if spec is not None:
        return embedder_for(EmbedderSpec.parse(spec))
    active = await ledger.indexes.active()
    if active is None:
        return embedder_for(default_spec())
    try:
        return embedder_for(spec_of_index(active))
    except BadInput as exc:
        raise BadInput(
            f"the active index {active.name} needs its embedder: {exc.message}; "
            "install it, or name another embedder (--embedder)"
        ) from None


def default_spec() -> EmbedderSpec:
    """The embedder a fresh ledger's first index uses: WordLlama where it can load,
    else the hashed bag of words (which always can)."""
    from core.ingest.wordllama_embedder import DEFAULT_DIMENSIONS, unavailable_reason

    if unavailable_reason() is None:
        return EmbedderSpec("wordllama", LOCAL_MODELS["wordllama"], DEFAULT_DIMENSIONS)
    return EmbedderSpec("hashed", LOCAL_MODELS["hashed"], 256)


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is missing."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason(kind: str) -> str | None:
    """Why ``kind`` cannot be used here (found without loading anything), or None."""
    if kind == "hashed":
        return None
    if kind == "wordllama":
        from core.ingest.wordllama_embedder import unavailable_reason as wordllama_missing

        return wordllama_missing()
    if kind == "openai":
        return None  # httpx is a dependency; the endpoint is checked when used
    return f"unknown embedder {kind!r}"
