"""Text from users, made safe to keep and to show on a terminal.

Anything a user types can reach an operator's terminal later: a document name, a worker
id, an actor, a reason. Control characters (C0, C1) can clear the screen or retitle the
window, a newline can forge a line of history, and a bidirectional override can make
``invoice<RLO>fdp.md`` display as ``invoicedm.pdf``. Python's ``str.isprintable`` is
false for exactly the characters that do this (Unicode's "Other" categories — controls,
format characters such as the bidi overrides and zero-width joiners, unassigned and
private-use code points — and the separators other than the ASCII space), so it is the
one test used here.

* identifiers (worker ids, actors) are **refused** when they hold such characters
  (:func:`check_identifier`): an id is typed on purpose and should be exactly what is
  shown;
* free text (names, reasons) is **neutralised** where it enters (:func:`neutralise`);
* anything shown is **escaped** (:func:`visible`), so a row written by an older
  ingestdesk, or straight into the database, still cannot reach the terminal raw.

**Names that look alike** (token names, actors, worker ids) are one name to a reader
of the history: ``alice``, ``alice ``, ``Alice``, ``l\u043ecal`` (a Cyrillic o) and
full-width ``LOCAL``. :func:`normal_name` keeps a name as NFKC, trimmed (so full-width
``LOCAL`` is ``LOCAL`` and ``alice `` is ``alice``) and refuses one that mixes scripts (Latin with
Cyrillic or Greek: ``l\u043ecal``), the one rule that catches most spoofs in a name and
almost never a real one. :func:`looks_like` then compares what is left as Unicode's
TR39 does, by skeleton: each character replaced by the one it is confused with, case
folded, so a name all in Cyrillic letters that read as ``alice`` still collides
with ``alice``. The confusable pairs and the script of each character come from
confusable-homoglyphs (MIT), which ships Unicode's confusables.txt and Scripts.txt as
data; it has no skeleton function, so the few lines of it are here.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

from core.errors import BadInput

IDENTIFIER_MAX = 128  # characters of a worker id or an actor
# Characters Unicode draws as nothing that str.isprintable still passes (they are
# letters or marks, not "Other"): the Hangul fillers, the variation selectors, the
# combining grapheme joiner, the Khmer inherent vowels and the Mongolian selectors.
# ``w\u3164`` would show as ``w`` followed by a blank, a second ``w`` to the eye.
_INVISIBLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)


@functools.cache
def _confusables() -> Any:  # the module; it ships no type hints
    """confusable-homoglyphs, imported on first use: its import reads Unicode's tables
    and pulls in urllib and email (~20 ms), which every command would pay at start-up
    (:func:`visible` is on every output path) while only a name check needs it."""
    from confusable_homoglyphs import confusables

    return confusables


def _safe(text: str) -> bool:
    return text.isprintable() and _INVISIBLE.search(text) is None


def _unsafe(ch: str) -> bool:
    return (not ch.isprintable() and ch != " ") or _INVISIBLE.match(ch) is not None


def neutralise(text: str, replacement: str = " ") -> str:
    """``text`` with each unsafe character replaced (an invisible letter or mark
    dropped); other spaces become plain spaces."""
    if _safe(text):
        return text
    return "".join(
        ""
        if _INVISIBLE.match(ch)
        else (" " if ch.isspace() and ch not in "\t\n\r\v\f" else replacement)
        if _unsafe(ch)
        else ch
        for ch in text
    )


def visible(text: str) -> str:
    """``text`` for a terminal: each unsafe character shown as its escape (``\\x1b``,
    ``\\u202e``), so the operator sees that it was there and it does nothing."""
    if _safe(text):
        return text
    return "".join(_escape(ch) if _unsafe(ch) else ch for ch in text)


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def check_identifier(value: str, what: str, *, limit: int = IDENTIFIER_MAX) -> str:
    """Refuse an id that is empty, longer than ``limit`` characters, or holds unsafe
    characters; return it."""
    if not value or not value.strip():
        raise BadInput(f"{what} must not be empty")
    if len(value) > limit:
        raise BadInput(f"{what} is longer than {limit} characters")
    if not _safe(value):
        raise BadInput(
            f"{what} '{visible(value)}' holds control or invisible characters; "
            "use letters, digits and punctuation"
        )
    return value


# Scripts any name may mix with its own: digits, punctuation, spaces (Common) and
# combining marks (Inherited).
SHARED_SCRIPTS = ["COMMON", "INHERITED"]


def normal_name(value: str, what: str) -> str:
    """``value`` as a name is kept: NFKC, trimmed; refused when empty, too long,
    holding unsafe characters, or mixing scripts (see the module's docstring)."""
    name = unicodedata.normalize("NFKC", value).strip()
    check_identifier(name, what)
    # ASCII letters are all one script (Latin), so an ASCII name cannot mix scripts.
    if not name.isascii() and _confusables().is_mixed_script(name, allowed_aliases=SHARED_SCRIPTS):
        raise BadInput(
            f"{what} '{visible(name)}' mixes scripts (such as Latin and Cyrillic), which "
            "makes it look like another name; write it in one script"
        )
    return name


def looks_like(a: str, b: str) -> bool:
    """Whether two names would read as one: the same skeleton, before or after case
    folding (``Alice``/``alice``, ``aIice``/``alice``, all-Cyrillic look-alikes of ``alice``)."""
    a, b = unicodedata.normalize("NFKC", a).strip(), unicodedata.normalize("NFKC", b).strip()
    return _skeleton(a.casefold()) == _skeleton(b.casefold()) or (
        _skeleton(a).casefold() == _skeleton(b).casefold()
    )


def _skeleton(text: str) -> str:
    return "".join(_prototype(ch) for ch in unicodedata.normalize("NFD", text))


@functools.lru_cache(maxsize=4096)
def _prototype(ch: str) -> str:
    """The one ASCII spelling ``ch`` is confused with (``ch`` itself when none), the
    same for every member of a class of ASCII look-alikes (``l``, ``1``, ``I``, ``|``)."""
    if ch.isascii():
        return _ascii_class(ch)
    for glyph in _confusables().confusables_data.get(ch, ()):
        text = glyph["c"]
        if text.isascii() and text.isprintable():
            return "".join(_ascii_class(c) for c in text)
    return ch


@functools.lru_cache(maxsize=256)
def _ascii_class(ch: str) -> str:
    """The least member of ``ch``'s class of ASCII characters confused with each other
    (the data lists pairs, not always both ways: the class is their closure)."""
    seen, todo = {ch}, [ch]
    while todo:
        for glyph in _confusables().confusables_data.get(todo.pop(), ()):
            other = glyph["c"]
            if len(other) == 1 and other.isascii() and other.isprintable() and other not in seen:
                seen.add(other)
                todo.append(other)
    return min(seen)
