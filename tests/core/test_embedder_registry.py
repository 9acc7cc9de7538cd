"""The embedder registry: the spec's text form, its refusals, the instances it makes,
and ``ingestdesk embedders``."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import BadInput
from core.ingest.embedder import HashingEmbedder
from core.ingest.embedders import (
    KIND_NAMES,
    EmbedderSpec,
    default_spec,
    embedder_for,
)
from core.ingest.wordllama_embedder import WordLlamaEmbedder

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:8080/v1"

PARSED = {
    "hashed": ("hashed", "bag-of-words", 256, {}, "hashed:256"),
    "hashed:512": ("hashed", "bag-of-words", 512, {}, "hashed:512"),
    "HASHED?dimensions=64": ("hashed", "bag-of-words", 64, {}, "hashed:64"),
    "wordllama": ("wordllama", "l2_supercat", 256, {}, "wordllama:256"),
    "wordllama:128": ("wordllama", "l2_supercat", 128, {}, "wordllama:128"),
    "wordllama:64?dimensions=64": ("wordllama", "l2_supercat", 64, {}, "wordllama:64"),
    f"openai:text-embedding-3-small?dimensions=1536&url={URL}": (
        "openai",
        "text-embedding-3-small",
        1536,
        {"url": URL},
        f"openai:text-embedding-3-small?dimensions=1536&url={URL}",
    ),
    # Known models need no dimensions; options come back sorted.
    "openai:text-embedding-3-large?url=https://api.openai.com/v1": (
        "openai",
        "text-embedding-3-large",
        3072,
        {"url": "https://api.openai.com/v1"},
        "openai:text-embedding-3-large?dimensions=3072&url=https://api.openai.com/v1",
    ),
    "openai:nomic-embed-text:v1.5?url=http://localhost:11434/v1&dimensions=768&batch=32": (
        "openai",
        "nomic-embed-text:v1.5",
        768,
        {"batch": "32", "url": "http://localhost:11434/v1"},
        "openai:nomic-embed-text:v1.5?batch=32&dimensions=768&url=http://localhost:11434/v1",
    ),
    "openai:m?dimensions=8&note=a%20b%26c%2Bd": (
        "openai",
        "m",
        8,
        {"note": "a b&c+d"},
        "openai:m?dimensions=8&note=a%20b%26c%2Bd",
    ),
}


@pytest.mark.parametrize("text", sorted(PARSED))
def test_specs_parse_and_write_back_in_one_canonical_form(text: str) -> None:
    embedder, model, dimensions, options, canonical = PARSED[text]
    spec = EmbedderSpec.parse(text)
    assert (spec.embedder, spec.model, spec.dimensions, dict(spec.options)) == (
        embedder,
        model,
        dimensions,
        options,
    )
    assert spec.text() == str(spec) == canonical
    assert EmbedderSpec.parse(canonical) == spec
    assert EmbedderSpec.of(text) == spec and EmbedderSpec.of(spec) is spec
    assert hash(EmbedderSpec.parse(canonical)) == hash(spec)


def test_a_spec_cannot_be_changed_through_its_options() -> None:
    spec = EmbedderSpec("openai", "m", 8, {"url": URL, "batch": "32"})
    for change in (
        lambda o: o.__setitem__("url", "http://elsewhere/v1"),
        lambda o: o.update(url="http://elsewhere/v1"),
        lambda o: o.pop("url"),
        lambda o: o.clear(),
        lambda o: o.setdefault("x", "y"),
    ):
        with pytest.raises(TypeError, match="cannot be changed"):
            change(spec.options)
    assert dict(spec.options) == {"batch": "32", "url": URL}


def test_a_spec_travels_as_json_pickle_and_copies() -> None:
    spec = EmbedderSpec.parse(f"openai:m?dimensions=8&url={URL}&batch=32")
    assert json.loads(json.dumps(dataclasses.asdict(spec))) == {
        "embedder": "openai",
        "model": "m",
        "dimensions": 8,
        "options": {"batch": "32", "url": URL},
    }
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert copy.deepcopy(spec) == spec
    assert dataclasses.replace(spec, dimensions=16).text() == (
        f"openai:m?batch=32&dimensions=16&url={URL}"
    )
    assert len({spec, EmbedderSpec.parse(spec.text())}) == 1


REFUSED = {
    "": "one word",
    "   ": "one word",
    "sentence-transformers": "unknown embedder 'sentence-transformers'",
    "hashed:": "nothing after 'hashed:'",
    "hashed:abc": "comes its dimensions (its one model is bag-of-words)",
    "hashed:0": "hashed dimensions must be 1-65536, got 0",
    "hashed:70000": "hashed dimensions must be 1-65536, got 70000",
    "hashed:99999999999999": "hashed dimensions must be 1-65536, got 99999999999999",
    "hashed:256?": "nothing after '?'",
    "hashed:256?dimensions=128": "disagree",
    "hashed?dimensions=1&dimensions=2": "given twice",
    "hashed?seed=1": "takes no options but dimensions",
    "hashed:2 56": "one word",
    "hashed:\x00": "one word",
    "wordllama:300": "wordllama dimensions must be 64, 128, 256, got 300",
    "wordllama:512": "64, 128, 256",
    "wordllama:l2_supercat": "its one model is l2_supercat",
    "wordllama:١٢٨": "whole number",  # Arabic-Indic digits are digits to str.isdigit
    "openai": "openai needs its model",
    "openai:my-model": "needs ?dimensions=N",
    "openai:my-model?dimensions=x": "whole number",
    "openai:m?dimensions=8&api_key=sk-SECRET": "the API key is read from the environment",
    "openai:m?dimensions=8&url=ftp://host/v1": "http:// or https://",
    "openai:m?dimensions=8&url=http://user:sk-SECRET@host/v1": "must not hold credentials",
    "openai:m?dimensions=8&Url=x": "lower-case",
    "openai:m?dimensions=8&url": "KEY=VALUE",
    "openai:m?dimensions=8&url=": "has no value",
    "openai:m?dimensions=8&x=%00": "printable",
    "openai:-m?dimensions=8": "not a model name",
    "hashed:" + "9" * 3000: "over 2000 characters",
    "openai:m?" + "&".join(f"k{i}=v" for i in range(20)): "at most 16",
}


@pytest.mark.parametrize("text", sorted(REFUSED))
def test_bad_specs_are_refused_in_one_line_naming_the_kinds(text: str) -> None:
    with pytest.raises(BadInput) as caught:
        EmbedderSpec.parse(text)
    message = caught.value.message
    assert REFUSED[text] in message
    assert message.endswith(f"an embedder is one of {', '.join(KIND_NAMES)} (e.g. wordllama:256)")
    assert "\n" not in message and len(message) < 300
    assert "SECRET" not in message  # a refusal never repeats a secret it was handed


def test_a_spec_that_is_not_text_is_refused() -> None:
    with pytest.raises(BadInput, match="an embedder spec is text"):
        EmbedderSpec.parse(256)  # type: ignore[arg-type]


_MODELS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,30}", fullmatch=True)
_VALUES = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp", "Cf", "Co", "Cn")),
    min_size=1,
    max_size=40,
).filter(str.isprintable)
_OPTIONS = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
        lambda k: (
            k not in {"dimensions", "url", "api_key", "apikey", "key", "token", "secret"}
            and k != "password"
        )
    ),
    _VALUES,
    max_size=5,
)


@given(model=_MODELS, dimensions=st.integers(1, 65_536), options=_OPTIONS)
def test_any_remote_spec_round_trips(model: str, dimensions: int, options: dict[str, str]) -> None:
    spec = EmbedderSpec("openai", model, dimensions, options)
    assert EmbedderSpec.parse(spec.text()) == spec


@given(dimensions=st.integers(1, 65_536))
def test_any_hashed_spec_round_trips(dimensions: int) -> None:
    spec = EmbedderSpec("hashed", "bag-of-words", dimensions)
    assert EmbedderSpec.parse(spec.text()) == spec


def test_embedder_for_makes_the_local_embedders() -> None:
    hashed = embedder_for(EmbedderSpec.parse("hashed:512"))
    assert isinstance(hashed, HashingEmbedder) and hashed.dimensions == 512
    local = embedder_for(EmbedderSpec.parse("wordllama:128"))
    assert isinstance(local, WordLlamaEmbedder) and local.dimensions == 128
    assert local.version.endswith("/l2_supercat/128/pool1")


def test_embedder_for_makes_an_openai_compatible_endpoint_known_by_its_url() -> None:
    from core.ingest.embedding import index_key_of
    from core.ingest.openai_provider import OpenAIEmbeddings

    remote = embedder_for(EmbedderSpec.parse(f"openai:m?dimensions=8&url={URL}&max_inputs=16"))
    assert isinstance(remote, OpenAIEmbeddings)
    assert (remote.model, remote.dimensions, remote.max_inputs) == ("m", 8, 16)
    # The index is known by the model and where it runs, not by how it is called.
    key = index_key_of(remote)
    assert (key.embedder, key.model, key.dimensions) == ("openai", "m", 8)
    assert dict(key.options) == {"url": URL}
    asyncio.run(remote.aclose())
    with pytest.raises(BadInput, match="needs the endpoint"):
        embedder_for(EmbedderSpec.parse("openai:m?dimensions=8"))
    with pytest.raises(BadInput, match="unknown option"):
        embedder_for(EmbedderSpec.parse(f"openai:m?dimensions=8&url={URL}&colour=red"))


def test_the_default_is_wordllama_where_it_loads() -> None:
    assert default_spec() == EmbedderSpec.parse("wordllama:256")


def _cli(*args: str, without_wordllama: bool = False) -> subprocess.CompletedProcess[str]:
    block = "import sys; sys.modules['wordllama'] = None; " if without_wordllama else ""
    code = f"{block}import sys; from core.cli.app import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_the_cli_lists_the_kinds_and_the_default() -> None:
    listed = _cli("embedders", "--json")
    assert listed.returncode == 0, listed.stderr
    kinds = {k["kind"]: k for k in json.loads(listed.stdout)}
    assert list(kinds) == ["hashed", "wordllama", "openai"]
    assert kinds["hashed"]["available"] and kinds["hashed"]["needs"] == {}
    assert kinds["wordllama"]["available"] and kinds["wordllama"]["default"]
    assert kinds["wordllama"]["needs"]["wordllama"].startswith("0.4")
    assert "Llama 2" in kinds["wordllama"]["summary"]
    assert kinds["openai"]["available"]
    for kind in kinds.values():
        assert EmbedderSpec.parse(kind["example"]).embedder == kind["kind"]
    text = _cli("embedders")
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["hashed", "wordllama", "openai", "default"]
    assert lines[-1].split() == ["default", "wordllama:256"]


def test_without_wordllama_the_listing_says_so_and_the_default_is_hashed() -> None:
    listed = _cli("embedders", "--json", without_wordllama=True)
    assert listed.returncode == 0, listed.stderr
    kinds = {k["kind"]: k for k in json.loads(listed.stdout)}
    assert not kinds["wordllama"]["available"]
    assert "pip install 'wordllama>=0.4,<0.5'" in kinds["wordllama"]["unavailable_reason"]
    assert kinds["hashed"]["default"]
    code = (
        "import sys; sys.modules['wordllama'] = None\n"
        "from core.ingest.embedders import EmbedderSpec, embedder_for, default_spec\n"
        "print(default_spec().text())\n"
        "try:\n    embedder_for(EmbedderSpec.parse('wordllama'))\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.splitlines() == [
        "hashed:256",
        "BadInput embedder wordllama:256 is not available here: wordllama is not installed "
        "(pip install 'wordllama>=0.4,<0.5')",
    ]
