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
"""

from __future__ import annotations

import re

from core.errors import BadInput

IDENTIFIER_MAX = 128  # characters of a worker id or an actor
# Characters Unicode draws as nothing that str.isprintable still passes (they are
# letters or marks, not "Other"): the Hangul fillers, the variation selectors, the
# combining grapheme joiner, the Khmer inherent vowels and the Mongolian selectors.
# ``w\u3164`` would show as ``w`` followed by a blank, a second ``w`` to the eye.
_INVISIBLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]"
)


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
