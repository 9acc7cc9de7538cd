"""A real local embedding model: WordLlama's ``l2_supercat`` token embeddings (MIT
code; the weights are distilled from Llama 2's token embeddings, so the Llama 2
Community Licence may apply to them), mean-pooled over a text's tokens and
L2-normalised.

The weights (16 MB) and the tokenizer ship inside the ``wordllama`` wheel, so this
works offline and in CI. WordLlama is a bag of tokens: no attention, no word order,
but its token vectors were trained so that the mean of a sentence's tokens lands near
its paraphrases (measured in ``tests/core/test_wordllama.py``).

How a vector is made (``POOLING_VERSION`` names this recipe):

1. the text is stripped of outer whitespace; nothing left gives the zero vector (as
   the hashed bag of words does for a text without words);
2. it is tokenised with the model's own tokenizer (Llama 2's BPE, byte fallback, no
   special tokens), exactly as ``WordLlamaInference.embed`` does;
3. the token vectors are summed in float64 and the sum is L2-normalised, then stored
   as little-endian float32. ``embed`` means the tokens and divides by the norm; a
   mean and a sum have the same direction, so the vectors agree with ``embed(...,
   norm=True)`` to float32 rounding. Summing in float64 makes the float32 result
   independent of the order numpy adds in, so the same text gets the same bytes in
   every process.

Long texts are never cut. WordLlama 0.4 turns its tokenizer's truncation off at
inference: every token counts, however long the text (it was trained on texts of up
to ``TRAINED_MAX_TOKENS`` tokens; the default chunks, at most 1000 characters, of real
documents are ~215 tokens on average, a third of them over 256: bench.embedders).
A mean over windows of a text would be the same mean, so windows change nothing for
the vector; they bound the work. Llama's tokenizer has no pre-tokenizer, so BPE runs
over the whole text as one piece: a 4 MB chunk took 4 s and 240 MB. A text longer
than ``WINDOW_CHARS`` is therefore tokenised in windows cut at a space (the space
dropped: its normaliser prepends one to every piece, so the pieces read exactly as the
whole did) and its windows' token vectors are summed: the same sum, except around a
cut with no space nearby (measured: cosine > 0.9999 to the whole text's vector).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from core.errors import IngestDeskError
from core.ingest.embedder import GIL_YIELD_EVERY_S

DISTRIBUTION = "wordllama"
REQUIREMENT = "wordllama>=0.4,<0.5"
MODEL = "l2_supercat"  # the WordLlama configuration whose weights ship in the wheel
WEIGHTS_DIMENSIONS = 256  # the one weights file the wheel carries
# The files inside the package (its weights/ and tokenizers/ folders), and the table
# in the weights file, as WordLlama.load finds them.
WEIGHTS_FILE = f"{MODEL}_{WEIGHTS_DIMENSIONS}.safetensors"
TOKENIZER_FILE = f"{MODEL}_tokenizer_config.json"
TENSOR_KEY = "embedding.weight"
# Matryoshka-trained: the first N dimensions of the 256 are a model of their own
# (WordLlama's trunc_dim). 512 and 1024 would need a download: not offered.
DIMENSIONS = (64, 128, 256)
DEFAULT_DIMENSIONS = 256
TRAINED_MAX_TOKENS = 256  # tokens per text in training; inference takes any length
# Changes whenever this module would give the same text another vector.
POOLING_VERSION = "1"
# A text over this many characters is tokenised in windows (see the module docstring):
# ~4 400 tokens, ~4 MB of token vectors at 256 dimensions.
WINDOW_CHARS = 16_384  # characters
# One tokenizer call takes at most this many characters of windows, bounding the
# tokenizer's output (~60 bytes per character) for a batch of huge texts.
TOKENIZE_MAX_CHARS = 262_144  # characters
# Batches up to this many characters are embedded on the calling event loop, as the
# hashed embedder's are: a small document's chunks (a one-page PDF, ~5 600 characters)
# take ~1.6 ms with the word cache warm, less than a hop to a thread and back that
# waits for the GIL while the worker's other threads are busy (measured on 400 one-page
# PDFs, three interleaved pairs: 8-12 % less worker CPU than at 1 000 characters).
# Bigger batches (a pipeline batch of 64 chunks of 1000 characters: ~17 ms) go to a
# thread, so a dashboard's loop is never held longer than a few milliseconds.
EMBED_ON_LOOP_MAX_CHARS = 8_000  # characters
# Hugging Face's tokenizer spreads every batch over a thread pool unless this says
# otherwise. A worker's batches are one document's few chunks: the pool's wake-ups and
# spinning cost more CPU than the split saves wall time (measured on 400 small
# documents, six ~930-character chunks each: ~1.1 ms of CPU a document tokenised on
# one thread, up to ~1.7 ms on the pool), and that CPU is taken from the parser
# process on the other core.
TOKENIZER_THREADS_ENV = "TOKENIZERS_PARALLELISM"
# Words (see _WORD) are tokenised once per process and remembered: a document's words
# repeat (Zipf), and the tokenizer's own cost, BPE plus building an Encoding of token
# strings per call, was the largest part of embedding (0.33 s of CPU for the chunks of
# 27 real web pages, against 0.2 s for summing their vectors). A cache of 65 536 words
# is ~15 MB; past it, it starts again empty. Longer words (CJK text has no spaces: a
# whole window is one word) are tokenised each time.
WORD_CACHE_MAX = 65_536  # words
WORD_CACHE_MAX_CHARS = 48  # characters of a word that is remembered


class ModelUnavailable(IngestDeskError):
    """The wordllama embedding model cannot be loaded; install it with
    pip install 'wordllama>=0.4,<0.5'."""


# What Llama's normaliser does to a piece, and the pieces it does it to one by one.
_METASPACE = "\u2581"  # "▁", SentencePiece's word mark
_LLAMA_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": _METASPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": _METASPACE},
    ],
}
# A normalised piece cut before every word mark that follows another character, and
# around every run of line breaks and tabs: a run of word marks and what follows it up
# to the next such cut. BPE never merges across such a cut, since no token of Llama's
# vocabulary holds a word mark after another character (only runs of marks, "▁▁" to 16
# of them, hold one inside) or a line break or tab at all (both are byte tokens):
# _prenormalised checks the vocabulary. So tokenising each word alone gives the whole
# piece's tokens, and text cut into lines does not make each line's last and next
# line's first word one new word.
_ISOLATED = "\n\t"  # characters no token holds: each is its own byte token
_WORD = re.compile(f"[{_ISOLATED}]+|{_METASPACE}*[^{_METASPACE}{_ISOLATED}]+|{_METASPACE}+")


@dataclass
class _Model:
    embedding: Any  # numpy float32 array, (vocabulary, dimensions), C-contiguous
    # The tokenizer's file (JSON): the tokenizer with its normaliser is made from it
    # when first needed (see tokenizer).
    tokenizer_json: str
    # The same tokenizer without its normaliser, fed pieces normalised here (see
    # _token_ids); None when the tokenizer is not the one this mirrors.
    prenormalised: Any = None
    added: tuple[str, ...] = ()  # the added tokens' texts (<unk>, <s>, </s>)
    # Word -> its token ids, for the prenormalised path (see WORD_CACHE_MAX). Threads
    # embedding at once share it: each only gets, sets and clears single entries.
    words: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _tokenizer: Any = None

    @property
    def tokenizer(self) -> Any:
        """The model's own tokenizer (tokenizers.Tokenizer, no padding or truncation),
        made on first use: with the prenormalised path only a piece holding an added
        token's text needs it (making it took ~85 ms of every process's start)."""
        if self._tokenizer is None:
            self._tokenizer = _tokenizer_from(self.tokenizer_json)
        return self._tokenizer


def _token_ids(model: _Model, pieces: list[str]) -> list[list[int]]:
    """The tokenizer's token ids of each of ``pieces``, without special tokens.

    Llama's normaliser (prepend ``▁``, every space to ``▁``) costs the Rust
    tokenizer as much again as BPE itself (measured: 0.65 s against 0.39 s for the
    chunks of 54 real web pages), for alignments nothing here reads; ``str.replace``
    does the same to the text at C speed and the tokens are the same. Then each word
    (_WORD) is looked up in the model's word cache, and only the words not there are
    given to the tokenizer, in one call (:func:`_new_words_ids`). Not for a piece
    holding an added token's text: the tokenizer splits those off before it
    normalises, and prepends ``▁`` to each part after one."""
    fast = model.prenormalised
    if fast is None or any(token in piece for piece in pieces for token in model.added):
        encodings = model.tokenizer.encode_batch_fast(pieces, add_special_tokens=False)
        return [encoding.ids for encoding in encodings]
    split = [_WORD.findall(_METASPACE + p.replace(" ", _METASPACE)) if p else [] for p in pieces]
    cache = model.words
    known: dict[str, tuple[int, ...]] = {}
    missing: list[str] = []
    for words in split:
        for word in words:
            if word not in known:
                ids = cache.get(word)
                if ids is None:
                    known[word] = ()  # a placeholder: every word has tokens
                    missing.append(word)
                else:
                    known[word] = ids
    if missing:
        if len(cache) + len(missing) > WORD_CACHE_MAX:
            cache.clear()
        for word, ids in zip(missing, _new_words_ids(fast, missing), strict=True):
            known[word] = ids
            if len(word) <= WORD_CACHE_MAX_CHARS:
                cache[word] = ids
    out = []
    for words in split:
        ids_of_piece: list[int] = []
        for word in words:
            ids_of_piece.extend(known[word])
        out.append(ids_of_piece)
    return out


def _new_words_ids(fast: Any, words: list[str]) -> list[tuple[int, ...]]:
    """The token ids of each of ``words`` (cut by _WORD), tokenised in few inputs.

    One input a word cost ~9 us a word (an Encoding each); joined by line breaks, which
    no token holds and BPE never merges across (see _WORD), words of one group are
    tokenised as one text, and the ids are cut again at the line break's own token.
    A group that does not cut into as many words as went in (it cannot, by the
    vocabulary's rule) is tokenised a word at a time."""
    mark = _newline_token(fast)
    if mark is None:
        return [tuple(e.ids) for e in fast.encode_batch_fast(words, add_special_tokens=False)]
    groups: list[list[str]] = []
    size = WINDOW_CHARS
    for word in words:
        if word[0] in _ISOLATED:
            groups.append([word])  # a run of line breaks or tabs: alone, not joined
            size = WINDOW_CHARS
            continue
        if size + len(word) >= WINDOW_CHARS:
            groups.append([])
            size = 0
        groups[-1].append(word)
        size += len(word) + 1
    texts = ["\n".join(group) for group in groups]
    out: list[tuple[int, ...]] = []
    for group, encoding in zip(
        groups, fast.encode_batch_fast(texts, add_special_tokens=False), strict=True
    ):
        ids = encoding.ids
        if len(group) == 1:
            out.append(tuple(ids))
            continue
        cuts = [i for i, token in enumerate(ids) if token == mark]
        if len(cuts) != len(group) - 1:
            out.extend(
                tuple(e.ids) for e in fast.encode_batch_fast(group, add_special_tokens=False)
            )
            continue
        starts = [0, *(i + 1 for i in cuts)]
        ends = [*cuts, len(ids)]
        out.extend(tuple(ids[a:b]) for a, b in zip(starts, ends, strict=True))
    return out


@functools.cache
def _newline_token(fast: Any) -> int | None:
    """The one token a line break is, or None (then words are not joined); asked once
    per tokenizer, not on every batch with new words."""
    ids = fast.encode("\n", add_special_tokens=False).ids
    return ids[0] if len(ids) == 1 else None


_models: dict[int, _Model] = {}  # dimensions -> the model, loaded once per process
_load_lock = threading.Lock()


def package_dir() -> Path | None:
    """Where the installed ``wordllama`` package lives, found without importing it."""
    try:
        spec = importlib.util.find_spec(DISTRIBUTION)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed_version() -> str | None:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """Why the model cannot load here (without loading it), or None when it can."""
    folder, version = package_dir(), installed_version()
    if folder is None or version is None:
        return f"wordllama is not installed (pip install '{REQUIREMENT}')"
    if not version.startswith("0.4"):
        return f"wordllama {version} is installed; ingestdesk needs '{REQUIREMENT}'"
    weights = folder / "weights" / WEIGHTS_FILE
    tokenizer = folder / "tokenizers" / TOKENIZER_FILE
    for path, what in ((weights, "weights"), (tokenizer, "tokenizer")):
        if not path.is_file():
            return (
                f"wordllama's {what} are missing from its package "
                f"(pip install --force-reinstall '{REQUIREMENT}')"
            )
    return None


def tokenize_on_one_thread() -> None:
    """Make the tokenizer run each batch on its calling thread (see
    TOKENIZER_THREADS_ENV), unless the environment already chose. The tokenizer reads
    the variable at every batch, so this takes effect at once; call it before other
    threads run, as it changes the process's environment."""
    os.environ.setdefault(TOKENIZER_THREADS_ENV, "false")


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat``: mean-pooled token embeddings, L2-normalised.

    Constructing one checks that the model is installed (without loading it); the
    model loads once per process, on the first :meth:`embed`, off the event loop.

    Args:
        dimensions: 64, 128 or 256 (Matryoshka truncations of the shipped weights).

    Raises:
        ValueError: ``dimensions`` is not one of :data:`DIMENSIONS`.
        ModelUnavailable: wordllama is not installed, or its files are missing.
    """

    name = "wordllama"
    model = MODEL
    max_tokens = None  # nothing is cut; see TRAINED_MAX_TOKENS

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        if dimensions not in DIMENSIONS:
            raise ValueError(f"wordllama dimensions must be one of {DIMENSIONS}, got {dimensions}")
        reason = unavailable_reason()
        if reason is not None:
            raise ModelUnavailable(reason)
        self.dimensions = dimensions
        # Everything that decides a vector: the package (its weights and tokenizer
        # file ship inside it), the configuration, the dimensions, this recipe.
        self.version = f"wordllama-{installed_version()}/{MODEL}/{dimensions}/pool{POOLING_VERSION}"

    @property
    def loaded(self) -> bool:
        return self.dimensions in _models

    def load(self) -> None:
        """Load the model now (it loads on the first embed otherwise); ~0.17 s."""
        _model(self.dimensions)

    async def embed(self, texts: Sequence[str]) -> list[bytes]:
        if not texts:
            return []
        if self.loaded and sum(map(len, texts)) <= EMBED_ON_LOOP_MAX_CHARS:
            # Without giving the GIL up on the way: the loop's batch takes ~1.6 ms,
            # and each time.sleep(0) in it had the loop wait to get the GIL back
            # while the ledger's threads ran (one worker on 1 000 small documents,
            # four interleaved rounds: 7 % more documents/s without).
            return self._vectors(texts, yield_every_s=None)
        # Tokenising (Rust) and numpy's gathers and sums release the GIL; the loop
        # here holds it only between them (and yields, see embed_now), so a
        # dashboard's event loop keeps answering while a batch is embedded.
        return await asyncio.to_thread(self.embed_now, texts)

    def embed_now(self, texts: Sequence[str]) -> list[bytes]:
        """Vectors for ``texts`` on this thread (loading the model if need be),
        giving the GIL up every GIL_YIELD_EVERY_S (see core.ingest.embedder)."""
        return self._vectors(texts, GIL_YIELD_EVERY_S)

    def _vectors(self, texts: Sequence[str], yield_every_s: float | None) -> list[bytes]:
        import numpy as np

        model = _model(self.dimensions)
        sums = np.zeros((len(texts), self.dimensions), dtype=np.float64)
        table = model.embedding
        last_row = table.shape[0] - 1
        yield_at = None if yield_every_s is None else time.perf_counter() + yield_every_s
        for owners, pieces in _tokenizer_calls(texts):
            for owner, token_ids in zip(owners, _token_ids(model, pieces), strict=True):
                ids = np.asarray(token_ids, dtype=np.intp)
                if ids.size:
                    # What WordLlamaInference.embed does with ids past the table.
                    np.clip(ids, 0, last_row, out=ids)
                    sums[owner] += table[ids].sum(axis=0, dtype=np.float64)
                if yield_at is not None and time.perf_counter() >= yield_at:
                    time.sleep(0)  # releases the GIL: waiting threads get their turn
                    yield_at = time.perf_counter() + GIL_YIELD_EVERY_S
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        np.divide(sums, norms, out=sums, where=norms > 0)
        vectors = sums.astype("<f4")
        return [row.tobytes() for row in vectors]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """How many tokens each text's vector averages (after stripping), for a
        caller that wants to show or bound the length it embeds."""
        model = _model(self.dimensions)
        counts = [0] * len(texts)
        for owners, pieces in _tokenizer_calls(texts):
            for owner, token_ids in zip(owners, _token_ids(model, pieces), strict=True):
                counts[owner] += len(token_ids)
        return counts


def _tokenizer_calls(texts: Sequence[str]) -> Iterator[tuple[list[int], list[str]]]:
    """``(owners, pieces)`` per tokenizer call: every text's windows, in order, each
    with the index of the text it belongs to, at most TOKENIZE_MAX_CHARS a call."""
    owners: list[int] = []
    pieces: list[str] = []
    size = 0
    for owner, text in enumerate(texts):
        for piece in _windows(text.strip()):
            if pieces and size + len(piece) > TOKENIZE_MAX_CHARS:
                yield owners, pieces
                owners, pieces, size = [], [], 0
            owners.append(owner)
            pieces.append(piece)
            size += len(piece)
    if pieces:
        yield owners, pieces


def _windows(text: str) -> Iterator[str]:
    """``text`` in pieces of at most WINDOW_CHARS, cut at (and dropping) a space."""
    start, n = 0, len(text)
    while n - start > WINDOW_CHARS:
        cut = text.rfind(" ", start + 1, start + WINDOW_CHARS)
        if cut <= start:
            # No space in the window (CJK, a long token): a hard cut, which changes
            # the BPE split of the few characters around it.
            cut = start + WINDOW_CHARS
            yield text[start:cut]
            start = cut
        else:
            yield text[start:cut]
            start = cut + 1
    if start < n:
        yield text[start:]


def _model(dimensions: int) -> _Model:
    model = _models.get(dimensions)
    if model is not None:
        return model
    with _load_lock:
        model = _models.get(dimensions)
        if model is None:
            model = _models[dimensions] = _load(dimensions)
        return model


def _load(dimensions: int) -> _Model:
    """The weights and the tokenizer, read from the files wordllama ships, as
    ``WordLlama.load`` reads them (the safetensors ``embedding.weight`` table, its
    first ``dimensions`` columns as float32; ``Tokenizer.from_file``), without
    importing wordllama itself: its package brings pydantic and requests, ~140 ms of
    every process's start, for a loader of two files (tests/core/test_wordllama.py
    checks the vectors against wordllama's own)."""
    import numpy as np

    folder = package_dir()
    reason = unavailable_reason()
    if folder is None or reason is not None:
        raise ModelUnavailable(reason)
    try:
        from safetensors import safe_open

        with safe_open(str(folder / "weights" / WEIGHTS_FILE), framework="np") as weights:
            table = weights.get_tensor(TENSOR_KEY)
        tokenizer_json = (folder / "tokenizers" / TOKENIZER_FILE).read_text(encoding="utf-8")
        prenormalised, added = _prenormalised(tokenizer_json)
    except ImportError as exc:
        raise ModelUnavailable(
            f"wordllama cannot be loaded ({exc.name or 'a dependency'} is missing): "
            f"pip install '{REQUIREMENT}'"
        ) from None
    except Exception as exc:  # a damaged file: safetensors' and tokenizers' own errors
        raise ModelUnavailable(
            f"wordllama could not load {MODEL} ({type(exc).__name__}); "
            f"reinstall it: pip install --force-reinstall '{REQUIREMENT}'"
        ) from None
    embedding = np.ascontiguousarray(table[:, :dimensions], dtype=np.float32)
    return _Model(embedding, tokenizer_json, prenormalised, added)


def _tokenizer_from(tokenizer_json: str) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    # Ours alone: padding would make every text as long as the batch's longest.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _prenormalised(tokenizer_json: str) -> tuple[Any, tuple[str, ...]]:
    """The tokenizer without its normaliser and the added tokens' texts, when its
    normaliser is Llama's, nothing splits the text before BPE and no token holds a
    word mark after another character, a line break or a tab (so :func:`_token_ids`
    may normalise for it and tokenise word by word, see _WORD); else ``(None, ())``."""
    import json

    config = json.loads(tokenizer_json)
    if config.get("normalizer") != _LLAMA_NORMALIZER or config.get("pre_tokenizer") is not None:
        return None, ()
    model = config.get("model", {})
    if model.get("type") != "BPE":
        return None, ()
    # One search over the whole vocabulary joined by line breaks, not a loop a token:
    # a token holding a line break or a tab is refused first, so a word mark after a
    # character other than a mark or the joining line break is one inside a token.
    vocabulary = list(model.get("vocab", {}))
    joined = "\n".join(vocabulary)
    if (
        joined.count("\n") != len(vocabulary) - 1
        or "\t" in joined
        or re.search(f"[^{_METASPACE}\n]{_METASPACE}", joined)
    ):
        return None, ()
    fast = _tokenizer_from(tokenizer_json)
    fast.normalizer = None
    added = tuple(token["content"] for token in config.get("added_tokens", ()))
    return fast, added
