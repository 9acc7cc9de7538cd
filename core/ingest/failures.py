"""How a parse fails, in one vocabulary every format shares, and which PDF parser
(and version) a parse uses.

Its own module so the format modules (:mod:`core.ingest.formats`) and
:mod:`core.ingest.parsing`, which dispatches to them, can both use it without an
import circle. :mod:`core.ingest.parsing` re-exports every name here.
"""

from __future__ import annotations

import functools

from core.states import ErrorCode

PARSERS = ("pypdf", "pdfium")
OUT_OF_MEMORY_REASON = "parser exceeded memory limit"
# The codes a parse can fail with: the document's (parse_error, empty_document), a
# parser killed from outside (parser_killed, see ParserKilled) and pages that need an
# OCR engine this machine lacks (ocr_unavailable, see core.ingest.formats.ocr).
PARSE_FAILURE_CODES = frozenset(
    {
        ErrorCode.PARSE_ERROR,
        ErrorCode.EMPTY_DOCUMENT,
        ErrorCode.PARSER_KILLED,
        ErrorCode.OCR_UNAVAILABLE,
    }
)


class ParseFailure(Exception):
    """The document could not be parsed."""

    def __init__(self, code: ErrorCode | str, reason: str | None = None) -> None:
        """Build a failure.

        Args:
            code: ``parse_error`` or ``empty_document`` (``parser_killed``: use
                :class:`ParserKilled`).
            reason: A short operator-facing reason, free of paths and stack traces.
                Defaults to this class's docstring.

        Raises:
            ValueError: ``code`` is not one of :data:`PARSE_FAILURE_CODES`.
        """
        parsed = ErrorCode(code)
        if parsed not in PARSE_FAILURE_CODES:
            raise ValueError(f"not a parse failure code: {code!r}")
        self.code: ErrorCode = parsed
        self.reason: str = reason or (type(self).__doc__ or "").strip()
        super().__init__(self.code, self.reason)

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


class ParserKilled(ParseFailure):
    """parser process killed from outside"""

    def __init__(self, reason: str | None = None) -> None:
        """A parse cut short by a signal this worker did not send (an operator's
        ``kill -9``, the kernel's OOM killer), on the fresh process it was retried on
        too. Not the document's doing as far as anyone knows: its code,
        ``parser_killed``, is retried automatically, with backoff, until the task's
        attempts run out (so no document is retried for ever)."""
        super().__init__(ErrorCode.PARSER_KILLED, reason)

    def __reduce__(self) -> tuple[type[ParserKilled], tuple[str]]:
        # Pickled as what it is (an exception pickles its args, and these differ).
        return (ParserKilled, (self.reason,))


class ParserUnavailable(RuntimeError):
    """The requested parser library is not installed."""


def parser_info(parser: str) -> dict[str, str]:
    """Name and version of a parser, as recorded on a task (a fresh dict each call).

    Args:
        parser: ``"pypdf"`` or ``"pdfium"``.

    Returns:
        ``{"parser": name, "version": library version}``.

    Raises:
        ValueError: Unknown parser name.
        ParserUnavailable: The parser's library is not installed.
    """
    return {"parser": parser, "version": _parser_version(parser)}


@functools.cache
def _parser_version(parser: str) -> str:
    # Cached: the worker records it on every task, and reading a distribution's
    # metadata parses its METADATA file (~0.3 ms). Only successes are cached.
    import importlib.metadata  # not at import time: parser processes never need it

    distribution = {"pypdf": "pypdf", "pdfium": "pypdfium2"}.get(parser)
    if distribution is None:
        raise ValueError(f"unknown parser {parser!r}; expected one of {PARSERS}")
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ParserUnavailable(
            f"parser {parser!r} needs the {distribution} package, which is not installed"
        ) from exc
