"""The local model, for real: WordLlama's shipped weights, loaded offline."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
from array import array
from pathlib import Path

import numpy as np
import pytest

import core.ingest.wordllama_embedder as wordllama_embedder
from bench.embedders import import_wordllama
from core.ingest.embedder import Embedder, HashingEmbedder, cosine
from core.ingest.parsing import parse_document
from core.ingest.pipeline import EMBED_BATCH
from core.ingest.wordllama_embedder import DIMENSIONS, WordLlamaEmbedder

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ROOT.parent.parent / "shared" / "corpora" / "formats"  # optional, see below
SENTENCE = "The lease expired, so the reaper requeued the task."
# Its first components as this recipe made them when it was written. A change of
# wordllama, its tokenizer file or the tokenizers library that moves them means the
# same text gets another vector: bump POOLING_VERSION (the index's version) with it.
GOLDEN = [0.1099068, -0.0000489, 0.0215367, 0.0883100, -0.0171467, 0.0371326, -0.0825539]
# (sentence, a paraphrase sharing none of its distinctive words, an unrelated one)
PARAPHRASES = [
    (
        "The invoice must be paid within thirty days.",
        "Payment of the bill is due in a month.",
        "The cat slept on the warm windowsill.",
    ),
    (
        "The server crashed because it ran out of memory.",
        "The machine went down after exhausting its RAM.",
        "Our team won the football match on Sunday.",
    ),
    (
        "Employees may work from home two days a week.",
        "Staff are allowed to telecommute twice weekly.",
        "The recipe calls for three cups of flour.",
    ),
    (
        "The flight was delayed by heavy snow.",
        "Bad winter weather held the plane on the ground.",
        "She planted tomatoes in the garden.",
    ),
    (
        "Please reset your password before Friday.",
        "Change your login credentials by the end of the week.",
        "The river flooded the village last spring.",
    ),
    (
        "The patient was given antibiotics for the infection.",
        "The doctor prescribed medicine to treat the bacterial illness.",
        "The stock market rose sharply today.",
    ),
    (
        "Children must wear helmets when cycling.",
        "Kids are required to put on protective headgear to ride a bike.",
        "The museum opens at nine in the morning.",
    ),
    (
        "The contract ends on the last day of December.",
        "The agreement expires at the close of the year.",
        "He repaired the leaking kitchen tap.",
    ),
]
MARGIN = 0.2  # cosine a paraphrase beats both unrelated pairs by (smallest seen: 0.26)


def as_array(vector: bytes) -> np.ndarray:
    return np.frombuffer(vector, dtype="<f4")


def real_chunks() -> list[str]:
    """Chunks of real prose: the shared corpus where present, else the README."""
    alice = CORPORA / "alice.epub"
    if alice.is_file():
        return [c.text for c in parse_document(alice.read_bytes(), "epub").chunks]
    readme = (ROOT / "README.md").read_bytes()
    return [c.text for c in parse_document(readme, "markdown").chunks]


@pytest.fixture(scope="module")
def embedder() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


async def test_vectors_are_normalised_little_endian_float32(embedder: WordLlamaEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dimensions == 256
    vectors = await embedder.embed([SENTENCE, "quarterly revenue grew", "x"])
    assert [len(v) for v in vectors] == [4 * 256] * 3
    for vector in vectors:
        assert abs(float(np.linalg.norm(as_array(vector).astype(np.float64))) - 1.0) < 1e-6
    assert array("f", as_array(vectors[0]).tolist()).tobytes() == vectors[0]
    assert as_array(vectors[0])[: len(GOLDEN)].tolist() == pytest.approx(GOLDEN, abs=1e-6)
    assert await embedder.embed([]) == []


async def test_agrees_with_wordllama_own_embed(embedder: WordLlamaEmbedder) -> None:
    # ingestdesk reads the package's two files itself (core.ingest.wordllama_embedder
    # ._load): the vectors must be those of wordllama's own loader and embed.
    WordLlama = import_wordllama()
    folder = wordllama_embedder.package_dir()
    assert folder is not None
    bare = WordLlama.load(dim=256, cache_dir=folder, disable_download=True)
    texts = real_chunks()[:200]
    ours = np.stack([as_array(v) for v in await embedder.embed(texts)])
    theirs = bare.embed(texts, norm=True)
    assert np.abs(ours - theirs).max() < 1e-5
    assert float((ours * theirs).sum(axis=1).min()) > 0.99999


def test_paraphrases_are_closer_than_unrelated_sentences(embedder: WordLlamaEmbedder) -> None:
    hashed = HashingEmbedder()
    lexical_misses = 0
    for sentence, paraphrase, unrelated in PARAPHRASES:
        a, p, u = embedder.embed_now([sentence, paraphrase, unrelated])
        assert cosine(a, p) > max(cosine(a, u), cosine(p, u)) + MARGIN, sentence
        ha, hp, hu = hashed.embed_now([sentence, paraphrase, unrelated])
        lexical_misses += cosine(ha, hp) <= max(cosine(ha, hu), cosine(hp, hu)) + MARGIN
    # The same test tells the two apart: a bag of words misses most paraphrases (it
    # finds only their shared function words).
    assert lexical_misses > len(PARAPHRASES) // 2


def test_vectors_are_the_same_in_another_process() -> None:
    code = (
        "import asyncio, sys; from core.ingest.wordllama_embedder import WordLlamaEmbedder;"
        "texts = sys.stdin.read().split('\\x1e');"
        "print(b''.join(asyncio.run(WordLlamaEmbedder().embed(texts))).hex())"
    )
    texts = "\x1e".join([SENTENCE, "日本語の文章です。", "Ünïcödé, ütf-8!", "x " * 9000])
    runs = {
        subprocess.run(
            [sys.executable, "-c", code], input=texts, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(runs) == 1
    assert len(next(iter(runs)).strip()) == 4 * 2 * 256 * 4


def test_vectors_are_the_same_on_one_tokenizer_thread_and_on_its_pool() -> None:
    # A worker tokenises on one thread (tokenize_on_one_thread); a program that
    # leaves the tokenizer its pool must get the same bytes, or their indexes differ.
    code = (
        "import asyncio, sys; from core.ingest.wordllama_embedder import WordLlamaEmbedder;"
        "texts = sys.stdin.read().split('\\x1e');"
        "print(b''.join(asyncio.run(WordLlamaEmbedder().embed(texts))).hex())"
    )
    texts = "\x1e".join([*real_chunks()[:40], SENTENCE, "日本語の文章です。", "x " * 9000])
    runs = {}
    for parallel in ("true", "false"):
        env = dict(os.environ, TOKENIZERS_PARALLELISM=parallel)
        runs[parallel] = subprocess.run(
            [sys.executable, "-c", code],
            input=texts,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
    assert runs["true"] == runs["false"]
    assert len(runs["true"].strip()) > 40 * 2 * 256 * 4


def test_one_tokenizer_thread_unless_the_environment_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(wordllama_embedder.TOKENIZER_THREADS_ENV, raising=False)
    wordllama_embedder.tokenize_on_one_thread()
    assert os.environ[wordllama_embedder.TOKENIZER_THREADS_ENV] == "false"
    monkeypatch.setenv(wordllama_embedder.TOKENIZER_THREADS_ENV, "true")
    wordllama_embedder.tokenize_on_one_thread()
    assert os.environ[wordllama_embedder.TOKENIZER_THREADS_ENV] == "true"


def test_empty_and_whitespace_give_the_zero_vector(embedder: WordLlamaEmbedder) -> None:
    empty, blank, padded, plain = embedder.embed_now(["", " \n\t\u00a0 ", "  hello  ", "hello"])
    assert empty == blank == bytes(4 * 256)
    assert padded == plain  # outer whitespace is no part of the text's meaning
    assert embedder.count_tokens(["", "   "]) == [0, 0]


def test_non_latin_text_is_embedded(embedder: WordLlamaEmbedder) -> None:
    texts = ["東京は日本の首都です。", "Москва — столица России.", "القاهرة عاصمة مصر", "🙂🚀"]
    vectors = embedder.embed_now(texts)
    for vector in vectors:
        assert abs(float(np.linalg.norm(as_array(vector))) - 1.0) < 1e-6
    assert len(set(vectors)) == len(texts)
    # Byte fallback: characters outside the vocabulary still become tokens.
    assert all(n > 0 for n in embedder.count_tokens(texts))


def test_a_long_text_is_never_cut(embedder: WordLlamaEmbedder) -> None:
    head = " ".join(sorted(real_chunks(), key=len)[-2:])
    assert embedder.count_tokens([head])[0] > wordllama_embedder.TRAINED_MAX_TOKENS
    # Words far past the model's training length still move the vector.
    longer = head + " " + " ".join(["volcano eruption lava ash"] * 40)
    a, b = embedder.embed_now([head, longer])
    assert cosine(a, b) < 0.99


def test_windows_give_the_whole_text_s_vector(
    embedder: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    prose = " ".join(real_chunks())
    assert len(prose) > 3 * wordllama_embedder.WINDOW_CHARS  # cut into windows
    no_spaces = "東京は日本の首都です。" * 4_000  # hard cuts
    windowed = embedder.embed_now([prose, no_spaces])
    counts = embedder.count_tokens([prose])
    monkeypatch.setattr(wordllama_embedder, "WINDOW_CHARS", 10**9)
    whole = embedder.embed_now([prose, no_spaces])
    assert cosine(windowed[0], whole[0]) > 0.9999
    assert cosine(windowed[1], whole[1]) > 0.9999
    # Cut at a space and the space dropped: the same tokens as the whole text.
    assert embedder.count_tokens([prose]) == counts


def test_a_batch_of_huge_texts_is_tokenised_in_bounded_calls(
    embedder: WordLlamaEmbedder,
) -> None:
    huge = ["word " * 200_000, "other " * 150_000]
    calls = list(wordllama_embedder._tokenizer_calls(huge))
    assert len(calls) > 1
    for owners, pieces in calls:
        assert sum(map(len, pieces)) <= wordllama_embedder.TOKENIZE_MAX_CHARS
        assert owners == sorted(owners)
    assert {o for owners, _ in calls for o in owners} == {0, 1}
    one, two = embedder.embed_now(huge)
    assert cosine(one, embedder.embed_now(["word"])[0]) > 0.999
    assert cosine(two, embedder.embed_now(["other"])[0]) > 0.999


# Texts where normalising before the tokenizer could go wrong: runs of spaces, spaces
# at either end, other whitespace, the word mark itself, added tokens' texts (split off
# before the tokenizer normalises), scripts that fall back to bytes.
TOKENIZER_EDGES = [
    "",
    " ",
    "   ",
    "a  b   c",
    " lead and trail ",
    "tab\tnew\nline\r\nnbsp\u00a0ideographic\u3000space",
    "\u2581 \u2581\u2581 word\u2581mark",
    "a<s>b",
    "x </s> y",
    "<unk>",
    " <s></s><unk> ",
    "中文 テキスト 🙂 é ü",
    "| n | a | b |\n| --- | --- | --- |\n| 1 | x y | z |",
]


def test_normalising_before_the_tokenizer_gives_its_own_tokens(
    embedder: WordLlamaEmbedder,
) -> None:
    model = wordllama_embedder._model(embedder.dimensions)
    assert model.prenormalised is not None  # the fast path is taken with wordllama 0.4
    texts = TOKENIZER_EDGES + real_chunks()[:300]
    own = model.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
    # One call of plain pieces (the fast path), and each text alone (a text holding
    # an added token's text takes the tokenizer's own path).
    plain = [t for t in texts if not any(token in t for token in model.added)]
    assert len(plain) < len(texts)
    by_text = {t: e.ids for t, e in zip(texts, own, strict=True)}
    model.words.clear()
    assert wordllama_embedder._token_ids(model, plain) == [by_text[t] for t in plain]
    assert model.words  # remembered: the same call again reads them from the cache
    assert wordllama_embedder._token_ids(model, plain) == [by_text[t] for t in plain]
    for text in texts:
        assert wordllama_embedder._token_ids(model, [text]) == [by_text[text]]


def random_texts(count: int, seed: int) -> list[str]:
    """Strings made to break a word-by-word tokenisation: runs of spaces and of the
    word mark, other whitespace, scripts without spaces, bytes the vocabulary lacks."""
    alphabet = [*"  \u2581\u2581abcdeéßü日本語の文字\n\t.,;0123!?-ﬁ", "\u200b", "🙂", "\x00"]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(count)]


def test_word_by_word_tokens_are_the_whole_texts_tokens(embedder: WordLlamaEmbedder) -> None:
    model = wordllama_embedder._model(embedder.dimensions)
    texts = random_texts(20_000, seed=20)
    own = [e.ids for e in model.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    model.words.clear()
    assert wordllama_embedder._token_ids(model, texts) == own


def test_a_full_word_cache_starts_again(
    embedder: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = wordllama_embedder._model(embedder.dimensions)
    monkeypatch.setattr(wordllama_embedder, "WORD_CACHE_MAX", 50)
    texts = real_chunks()[:40]
    own = [e.ids for e in model.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    model.words.clear()
    for text in texts:
        assert wordllama_embedder._token_ids(model, [text]) == [own[texts.index(text)]]
        assert len(model.words) <= 50 + len(text.split())
    vectors = embedder.embed_now(texts)
    model.words.clear()
    assert embedder.embed_now(texts) == vectors  # the same bytes, cache or none


@pytest.mark.parametrize("dimensions", [d for d in DIMENSIONS if d != 256])
def test_fewer_dimensions_are_the_leading_ones(
    embedder: WordLlamaEmbedder, dimensions: int
) -> None:
    small = WordLlamaEmbedder(dimensions)
    assert small.version != embedder.version
    (full,) = embedder.embed_now([SENTENCE])
    (cut,) = small.embed_now([SENTENCE])
    assert len(cut) == 4 * dimensions
    lead = as_array(full)[:dimensions]
    assert float(lead @ as_array(cut)) / float(np.linalg.norm(lead)) > 0.99999


def test_unsupported_dimensions_are_refused() -> None:
    with pytest.raises(ValueError, match="64, 128, 256"):
        WordLlamaEmbedder(512)


async def test_the_event_loop_keeps_answering_during_a_big_batch(
    embedder: WordLlamaEmbedder,
) -> None:
    embedder.load()
    texts = (real_chunks() * 10)[: EMBED_BATCH * 10]
    ticks = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await embedder.embed(texts)
    done.set()
    await ticker
    assert ticks > 10  # embedded on the loop, the ticker would not have run at all


async def test_a_small_batch_on_the_loop_keeps_the_gil_a_thread_gives_it_up(
    embedder: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small document's chunks are embedded on the event loop without time.sleep(0):
    each one had the loop wait to get the GIL back from the ledger's threads. A
    thread's batch (embed_now) still gives it up, so the loop keeps answering."""
    import types

    embedder.load()
    texts = [t for t in real_chunks() if len(t) < 1_000][:6]
    assert sum(map(len, texts)) <= wordllama_embedder.EMBED_ON_LOOP_MAX_CHARS
    yields: list[float] = []
    now = iter(range(1_000_000))  # every look at the clock is a second later
    fake_time = types.SimpleNamespace(perf_counter=lambda: float(next(now)), sleep=yields.append)
    monkeypatch.setattr(wordllama_embedder, "time", fake_time)
    on_loop = await embedder.embed(texts)
    assert yields == []
    assert embedder.embed_now(texts) == on_loop
    assert len(yields) >= len(texts) - 1


def test_the_model_loads_once_for_concurrent_first_calls() -> None:
    code = """
import threading
import core.ingest.wordllama_embedder as w
embedders = [w.WordLlamaEmbedder() for _ in range(4)]
barrier = threading.Barrier(4)
out = []
def run(e):
    barrier.wait()
    out.append(e.embed_now(["claim race"]))
threads = [threading.Thread(target=run, args=(e,)) for e in embedders]
for t in threads: t.start()
for t in threads: t.join()
assert len(out) == 4 and all(o == out[0] for o in out), out
assert list(w._models) == [256]
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_loading_reads_the_files_without_importing_wordllama() -> None:
    # wordllama's package brought pydantic and requests into every process that
    # embedded: ~140 ms of its start, for a loader of two files.
    code = (
        "import sys; from core.ingest.wordllama_embedder import WordLlamaEmbedder;"
        "WordLlamaEmbedder().embed_now(['x']);"
        "print(sorted(m for m in ('wordllama', 'pydantic', 'requests') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr


@pytest.mark.parametrize("damaged", ["weights", "tokenizer"])
def test_a_damaged_model_file_is_one_line_saying_reinstall(tmp_path: Path, damaged: str) -> None:
    installed = wordllama_embedder.package_dir()
    assert installed is not None
    package = tmp_path / "wordllama"  # found first on the path, as a damaged install is
    for folder, name in (("weights", "WEIGHTS_FILE"), ("tokenizers", "TOKENIZER_FILE")):
        file = getattr(wordllama_embedder, name)
        (package / folder).mkdir(parents=True)
        copy = (installed / folder / file).read_bytes()
        cut = copy[: len(copy) // 3] if folder.startswith(damaged) else copy
        (package / folder / file).write_bytes(cut)
    (package / "__init__.py").write_text("")
    code = (
        "from core.ingest.wordllama_embedder import WordLlamaEmbedder, ModelUnavailable\n"
        "try:\n    WordLlamaEmbedder().embed_now(['x'])\n"
        "except ModelUnavailable as exc:\n    print(exc.message)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wordllama could not load l2_supercat ("), result.stdout
    assert "pip install --force-reinstall 'wordllama>=0.4,<0.5'" in result.stdout
    assert result.stdout.count("\n") == 1 and str(tmp_path) not in result.stdout


def test_loading_leaves_the_root_logger_alone() -> None:
    code = (
        "import logging; from core.ingest.wordllama_embedder import WordLlamaEmbedder;"
        "before = (list(logging.getLogger().handlers), logging.getLogger().level);"
        "WordLlamaEmbedder().embed_now(['x']);"
        "logging.getLogger('somelib').info('must not be printed');"
        "assert (list(logging.getLogger().handlers), logging.getLogger().level) == before;"
        "print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_a_missing_wordllama_is_named_with_what_to_install() -> None:
    # sys.modules[name] = None is Python's own "this module is not there".
    code = (
        "import sys; sys.modules['wordllama'] = None;"
        "from core.ingest.wordllama_embedder import WordLlamaEmbedder, ModelUnavailable\n"
        "try:\n    WordLlamaEmbedder()\nexcept ModelUnavailable as exc:\n    print(exc.message)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "wordllama is not installed (pip install 'wordllama>=0.4,<0.5')\n"


def test_thread_safety_of_embedding_from_many_threads(embedder: WordLlamaEmbedder) -> None:
    texts = real_chunks()[:64]
    expected = embedder.embed_now(texts)
    results: list[list[bytes]] = []
    lock = threading.Lock()

    def run() -> None:
        got = embedder.embed_now(texts)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 3


async def test_a_worker_stores_wordllama_vectors(tmp_path: Path) -> None:
    """Through the real pipeline: a burst worker on a SQLite ledger stores exactly
    the vectors the embedder gives, and the task records the embedder's version."""
    from core import Settings, sqlite_url
    from core.ingest.parse_pool import ParserPool
    from core.ingest.worker import Worker
    from core.ledger import Ledger
    from core.states import TaskStatus

    settings = Settings(db_url=sqlite_url(tmp_path / "ledger.db"), store_root=tmp_path / "objects")
    text = "\n\n".join(sorted(real_chunks(), key=len)[-6:]).encode()
    embedder = WordLlamaEmbedder()
    async with await Ledger.open(settings) as ledger, ParserPool(workers=1) as pool:
        doc = await ledger.operator.upload(text, "alice.txt")
        task_id = (await ledger.operator.submit(doc.document_id)).task_id
        await Worker(ledger, "w-wordllama", pool=pool, embedder=embedder).run(until_idle=True)
        task = await ledger.reads.get_task(task_id)
        assert task.status is TaskStatus.SUCCEEDED, task.error_code
        active = await ledger.indexes.active()
        assert active is not None and active.embedder == "wordllama"
        records = await ledger.reads.chunk_records(doc.document_id, active.id)
    assert len(records) > 1
    assert [r.embedding for r in records] == embedder.embed_now([r.text for r in records])
    assert (task.options["embedder"], task.options["embedder_version"]) == (
        "wordllama",
        embedder.version,
    )
