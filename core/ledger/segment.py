"""Chinese, Japanese and Korean text cut into one search token per character, for the
keyword index and the query alike, on both backends.

Neither FTS5's unicode61 tokenizer nor PostgreSQL's parser knows where a word ends in
a script written without spaces: each takes a run of such characters as one token, so
``文字コード`` is not found in ``この文書は文字コードについて説明します``. Here each
character of those scripts is stood between two spaces before the text is indexed
(:func:`search_text`), and a query's word is cut the same way into characters that
must follow each other (:func:`query_tokens`, a phrase on both backends): a query
matches where its characters are consecutive in the text, and not where they appear
apart. Both backends split on an ASCII space whatever their locale, so the one Python
function here is the segmentation of both.

Why a character a token rather than overlapping pairs (Lucene's CJKAnalyzer): a
single-character query (``東``, ``字``) is a plain token, where with pairs it needs a
prefix query that still misses a character ending a run; the snippet marks exactly
the characters asked for; and measured on a Japanese corpus (see the commit) the two
index about the same number of tokens, while pairs make the vocabulary many times
larger for phrase queries no faster at chunk scale.

A space before and after every such character makes segmentation invertible:
:func:`unsegment` takes one space off each side of each of them, so a snippet cut
from the segmented text shows the chunk's text as written.
"""

from __future__ import annotations

import re

# Han (CJK unified ideographs and extensions, compatibility ideographs, the iteration
# mark 々, 〆 and the ideographic zero), hiragana and katakana with their iteration marks and the
# prolonged sound mark ー, katakana phonetic extensions, half-width katakana, Hangul
# syllables and jamo. All of them are word characters for Python's \w, FTS5's
# unicode61 and PostgreSQL's parser, so the query's words and the index agree on them.
CJK_RANGES = (
    ("\u1100", "\u11ff"),  # Hangul jamo
    ("\u3005", "\u3007"),  # 々 〆, ideographic zero
    ("\u3031", "\u3035"),  # vertical kana repeat marks
    ("\u3040", "\u3098"),  # hiragana
    ("\u309d", "\u309f"),  # ゝ ゞ ゟ (not the combining sound marks before them)
    ("\u30a1", "\u30fa"),  # katakana
    ("\u30fc", "\u30ff"),  # ー ヽ ヾ ヿ (not the middle dot ・, punctuation)
    ("\u3130", "\u318f"),  # Hangul compatibility jamo
    ("\u31f0", "\u31ff"),  # katakana phonetic extensions
    ("\u3400", "\u4dbf"),  # CJK extension A
    ("\u4e00", "\u9fff"),  # CJK unified ideographs
    ("\ua960", "\ua97f"),  # Hangul jamo extended A
    ("\uac00", "\ud7ff"),  # Hangul syllables, jamo extended B
    ("\uf900", "\ufaff"),  # CJK compatibility ideographs
    ("\uff66", "\uff9f"),  # half-width katakana
    ("\U00020000", "\U0003134f"),  # CJK extensions B to G
)
_CLASS = "".join(f"{low}-{high}" for low, high in CJK_RANGES)
# One such character, as a bracket expression Python and PostgreSQL read alike (code
# point ranges of the characters themselves, no escapes).
CJK_PATTERN = f"[{_CLASS}]"
_CJK = re.compile(CJK_PATTERN)
_CJK_RUN = re.compile(CJK_PATTERN + "+")
# A snippet's marks (core.ledger.search.MARK_START, MARK_END) sit between a character
# and the space segmentation put beside it.
_MARK = re.escape("**")
_SPACE_AFTER = re.compile(f"(?<=[{_CLASS}])((?:{_MARK})?) ")
_SPACE_BEFORE = re.compile(f" ((?:{_MARK})?)(?=[{_CLASS}])")
# A mark closed and opened again across the space taken away: one marked run.
_MARKS_MET = re.compile(f"(?<=[{_CLASS}]){_MARK}{_MARK}|{_MARK}{_MARK}(?=[{_CLASS}])")


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a character of a script segmented here."""
    return _CJK.search(text) is not None


def segment(text: str) -> str:
    """``text`` with a space before and after each CJK character (the rest as is)."""
    # A run at a time: 25 us for 300 characters of Japanese, against 123 us for a
    # replacement a character.
    return _CJK_RUN.sub(lambda run: " " + "  ".join(run.group()) + " ", text)


def search_text(text: str) -> str | None:
    """What the search index reads for a chunk instead of its text, or None where the
    text has nothing to segment (the index then reads the text itself, so a chunk in
    Latin script is indexed, ranked and shown exactly as before)."""
    return segment(text) if has_cjk(text) else None


def query_tokens(word: str) -> list[str]:
    """A query's word as the tokens the index holds, to be matched in order and
    adjacent: ``文字コード`` -> ``文 字 コ ー ド``, ``Unicode文字`` -> ``Unicode 文 字``."""
    return segment(word).split() if has_cjk(word) else [word]


def unsegment(snippet: str) -> str:
    """A snippet cut from segmented text (:func:`segment`), with marks around matched
    words, as the chunk's own text would read: the spaces segmentation added are
    taken away, and marks that met across one are joined."""
    if not has_cjk(snippet):
        return snippet
    joined = _SPACE_BEFORE.sub(r"\1", _SPACE_AFTER.sub(r"\1", snippet))
    return _MARKS_MET.sub("", joined)


_WORD = re.compile(r"\*\*(\w+)\*\*|\w+")


def phrase_marks(headline: str, terms: list[list[str]]) -> str:
    """A PostgreSQL headline of segmented text with a CJK character's mark kept only
    where the character is part of a whole term of the query (``terms`` as the index
    holds them). ``ts_headline`` marks every word that is in the query, wherever it
    is: for ``文字コード`` the ``文`` of ``文書`` too. Marks on other words are left as
    PostgreSQL put them. Read before :func:`unsegment`."""
    if not has_cjk(headline):
        return headline
    words = list(_WORD.finditer(headline))
    covered: set[int] = set()
    for term in terms:
        if not any(has_cjk(token) for token in term):
            continue
        for at in range(len(words) - len(term) + 1):
            if all(_same(words[at + k], token) for k, token in enumerate(term)):
                covered.update(range(at, at + len(term)))
    out, end = [], 0
    for i, word in enumerate(words):
        marked = word.group(1)
        if marked is not None and has_cjk(marked) and i not in covered:
            out.append(headline[end : word.start()] + marked)
            end = word.end()
    return "".join(out) + headline[end:]


def _same(word: re.Match[str], token: str) -> bool:
    # A CJK character is itself; another word matched the query where PostgreSQL
    # marked it (its folding is the configuration's, not ours to redo).
    if has_cjk(token):
        return (word.group(1) or word.group(0)) == token
    return word.group(1) is not None and not has_cjk(word.group(1))
