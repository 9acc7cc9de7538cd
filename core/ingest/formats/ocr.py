"""Reading page images with an OCR engine, in the parser process: Tesseract through
tesserocr (MIT; its wheel bundles libtesseract 5.5) with the language data of
Debian's ``tesseract-ocr-eng`` (Apache-2.0).

One engine per process, made on first use and reused: loading the language data
costs ~0.1-0.2 s, reading an A4 page at 300 dpi ~2 s (measured on this project's
2-core machines). Whether OCR is possible is known without importing the engine
(:func:`ocr_status`, :func:`unavailable_reason`), so ``ingestdesk formats`` and the
worker's processing key (:func:`engine_fingerprint`) never load libtesseract.

The rules that decide a page live here too, so a PDF page and an image frame are
judged alike: a text layer under ``MIN_TEXT_LAYER_CHARS`` is negligible, an OCR
reading with fewer than ``MIN_LEGIBLE_CHARS`` letters and digits in words the engine
is at least ``LEGIBLE_WORD_CONFIDENCE`` sure of found nothing legible, and a
document spends at most ``OCR_DOCUMENT_BUDGET_S`` in the engine (later pages are
skipped with why). Change any of them and bump ``OCR_RULES_VERSION``: documents read
under the old rules get a new processing key.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.metadata
import importlib.util
import math
import os
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core.ingest.formats.base import PageReading
from core.ingest.parse_progress import report_units
from core.states import ErrorCode, PageDecision

if TYPE_CHECKING:
    from PIL.Image import Image

# --- tunables ---------------------------------------------------------------------------

OCR_LANGUAGE = "eng"  # Tesseract language; its data file is <language>.traineddata
OCR_DPI = 300  # dots per inch a PDF page is rendered at for OCR (Tesseract's sweet spot)
# Images come with a resolution or none; Tesseract guesses badly without one.
DEFAULT_IMAGE_DPI = 300  # dots per inch assumed for an image that declares none
# A page image is scaled down to at most this many pixels before it is read, so a
# page declared a metre wide renders no gigapixel bitmap. A3 at 300 dpi is 17.4 MP;
# Tesseract holds a few copies of the image while reading (~5 bytes a pixel, measured).
MAX_OCR_PIXELS = 24_000_000  # pixels
# A text layer with fewer non-space characters than this is negligible (a scan with
# a stamped page number, a blank page): the page is rendered and read instead.
MIN_TEXT_LAYER_CHARS = 16  # characters
# A word read with at least this confidence (0-100) counts as legible; below it, the
# engine is guessing at specks, photos and textures.
LEGIBLE_WORD_CONFIDENCE = 50  # percent
# A reading with fewer letters and digits than this in legible words found nothing.
MIN_LEGIBLE_CHARS = 4  # characters
# A rendered page whose darkest and lightest grey are closer than this is blank: no
# engine time is spent on it (and none is needed to know it holds nothing).
BLANK_CONTRAST = 24  # grey levels of 255
# One page may take at most this long in the engine (its layout analysis cannot be
# interrupted, so a page may overrun by a second or so); a page over it is skipped.
OCR_PAGE_TIMEOUT_S = 60.0  # seconds
# OCR time one document may spend in all; the pages after are skipped, with why.
# ~100 A4 pages at 300 dpi here; below the parser pool's longest parse (30 min).
OCR_DOCUMENT_BUDGET_S = 240.0  # seconds
# Bump when a rule above changes what a page yields.
OCR_RULES_VERSION = "1"

DEBIAN_TESSDATA_GLOB = "/usr/share/tesseract-ocr/*/tessdata"
ENGINE_DISTRIBUTION = "tesserocr"
# How long a worker trusts what it last found installed when it makes a processing key:
# the look-up (an import-system search and a glob of Debian's data directories) took
# ~0.35 ms of the event loop's CPU for every PDF, a tenth of a one-page PDF's worker
# CPU. An engine or data installed while a worker runs still counts from the PDF it
# takes a few seconds later. Keyed on TESSDATA_PREFIX too: a change of it counts at once.
INSTALLED_TRUSTED_S = 5.0  # seconds
INSTALL_DATA = f"apt-get install tesseract-ocr-{OCR_LANGUAGE}"
INSTALL_ENGINE = "pip install tesserocr"


# --- what is installed ------------------------------------------------------------------


def tessdata_dir() -> Path | None:
    """The directory holding the language's data: ``TESSDATA_PREFIX`` when set (as
    Tesseract itself reads it, with or without a trailing ``tessdata``), else the
    newest Debian ``/usr/share/tesseract-ocr/<version>/tessdata``. None when the
    language's ``.traineddata`` is in neither."""
    candidates: list[Path] = []
    prefix = os.environ.get("TESSDATA_PREFIX")
    if prefix:
        candidates += [Path(prefix), Path(prefix) / "tessdata"]
    # Sorted by version number, newest first (a "10" must beat a "9").
    debian = sorted(glob.glob(DEBIAN_TESSDATA_GLOB), key=_version_order, reverse=True)
    candidates += [Path(d) for d in debian]
    return next((d for d in candidates if (d / f"{OCR_LANGUAGE}.traineddata").is_file()), None)


def _version_order(path: str) -> tuple[int, ...]:
    part = Path(path).parent.name
    return tuple(int(n) for n in part.split(".") if n.isdigit()) or (0,)


def _installed() -> tuple[bool, Path | None]:
    """Whether the engine is installed, and where its language data is (None: not)."""
    return importlib.util.find_spec(ENGINE_DISTRIBUTION) is not None, tessdata_dir()


_recent: tuple[float, str | None, str, tuple[bool, Path | None]] | None = None
_clock = time.monotonic


def _installed_recently() -> tuple[bool, Path | None]:
    """:func:`_installed`, as found at most INSTALLED_TRUSTED_S ago."""
    global _recent
    now, prefix = _clock(), os.environ.get("TESSDATA_PREFIX")
    seen, where = _recent, (prefix, DEBIAN_TESSDATA_GLOB)
    if seen is not None and now - seen[0] < INSTALLED_TRUSTED_S and seen[1:3] == where:
        return seen[3]
    found = _installed()
    _recent = (now, prefix, DEBIAN_TESSDATA_GLOB, found)
    return found


def unavailable_reason() -> str | None:
    """Why OCR cannot run here, in one line that names what to install; None when it can."""
    engine, data_dir = _installed()
    data = data_dir is not None
    if engine and data:
        return None
    if not engine and not data:
        return (
            f"the OCR engine and its {OCR_LANGUAGE} language data are not installed "
            f"({INSTALL_ENGINE}; {INSTALL_DATA})"
        )
    if not engine:
        return f"the OCR engine is not installed ({INSTALL_ENGINE})"
    return f"the OCR engine's {OCR_LANGUAGE} language data is not installed ({INSTALL_DATA})"


def ocr_status() -> str:
    """What OCR has here, in one line: the engine and data found, or what is missing."""
    missing = unavailable_reason()
    if missing is not None:
        return f"OCR unavailable: {missing}"
    return (
        f"OCR by tesserocr {_engine_version()} (Tesseract) with {OCR_LANGUAGE} data "
        f"from {tessdata_dir()}, pages rendered at {OCR_DPI} dpi"
    )


def engine_fingerprint() -> dict[str, str]:
    """What OCR'd text depends on, for a processing key: the engine's version, the
    language and a digest of its data, the resolution and the rules' version. Says
    ``unavailable`` when OCR cannot run, so a document read without OCR gets a new
    key (and is read again) once it is installed."""
    # Asked for every PDF a worker takes: whether OCR can run is looked up again every
    # few seconds (an install is noticed then), the data directory once, not twice.
    engine, data = _installed_recently()
    if not engine or data is None:
        return {"ocr": "unavailable"}
    return {
        "ocr": f"tesserocr {_engine_version()}",
        "ocr_language": OCR_LANGUAGE,
        "ocr_data": _data_digest(str(data / f"{OCR_LANGUAGE}.traineddata")),
        "ocr_dpi": str(OCR_DPI),
        "ocr_rules": OCR_RULES_VERSION,
    }


def _engine_version() -> str:
    # A tesserocr wheel pins the libtesseract it bundles (2.13.0: Tesseract 5.5.4).
    try:
        return _installed_engine_version()
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def _installed_engine_version() -> str:
    # Cached per process, found versions only (as core.ingest.failures caches the PDF
    # parser's): the worker records it for every PDF, and reading the distribution's
    # METADATA took ~0.8 ms, two thirds of the worker's own CPU on a one-page PDF
    # besides the ledger. A process keeps the engine it loaded first anyway.
    return importlib.metadata.version(ENGINE_DISTRIBUTION)


@functools.cache
def _data_digest(path: str) -> str:
    # Cached per process: the worker asks for every task, and the 4 MB file takes ~5 ms.
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


class OcrUnavailable(Exception):
    """OCR cannot run here; the message names what to install."""


# --- reading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class OcrReading:
    """What the engine read on one page image.

    Attributes:
        text: The text, lines separated by newlines (empty when it timed out).
        confidence: Mean word confidence, 0 to 100; None when it found no word.
        legible_chars: Letters and digits in words read with at least
            ``LEGIBLE_WORD_CONFIDENCE``.
        seconds: Time spent in the engine, in seconds.
        timed_out: The page took longer than its timeout and was abandoned.
        failed: The engine could not read the page at all.
    """

    text: str
    confidence: float | None
    legible_chars: int
    seconds: float
    timed_out: bool = False
    failed: bool = False

    @property
    def legible(self) -> bool:
        """Whether the engine found anything legible (see ``MIN_LEGIBLE_CHARS``)."""
        return not (self.timed_out or self.failed) and self.legible_chars >= MIN_LEGIBLE_CHARS


@functools.cache
def _engine() -> Any:
    """The process's one engine, made on first use (the language data loads once)."""
    missing = unavailable_reason()
    if missing is not None:
        raise OcrUnavailable(missing)
    import tesserocr

    try:
        return tesserocr.PyTessBaseAPI(path=f"{tessdata_dir()}/", lang=OCR_LANGUAGE)
    except RuntimeError as exc:  # damaged or foreign data: say so, without its path
        raise OcrUnavailable(
            f"the OCR engine could not load its {OCR_LANGUAGE} language data ({INSTALL_DATA})"
        ) from exc


def prepare() -> None:
    """Make the engine now (a parser process may do so before its memory cap).

    Raises:
        OcrUnavailable: OCR cannot run here.
    """
    _engine()


def read_image(image: Image, *, dpi: int, timeout_s: float = OCR_PAGE_TIMEOUT_S) -> OcrReading:
    """Read one page image.

    Args:
        image: The page, any Pillow mode; scaled down first when over ``MAX_OCR_PIXELS``.
        dpi: Its resolution, which Tesseract uses to judge text sizes.
        timeout_s: How long the engine may take, in seconds.

    Returns:
        What it read, with the mean confidence of its words.

    Raises:
        OcrUnavailable: OCR cannot run here.
    """
    api = _engine()
    started = time.perf_counter()
    page, dpi = fit_for_ocr(image, dpi)
    try:
        try:
            api.SetImage(page)
        except RuntimeError:  # an image Leptonica cannot take (zero-sized, odd depth)
            return OcrReading("", None, 0, time.perf_counter() - started, failed=True)
        api.SetSourceResolution(max(1, dpi))
        if not api.Recognize(timeout=max(1, int(timeout_s * 1000))):
            seconds = time.perf_counter() - started
            # False is a timeout, or (rarely) the engine giving up early.
            timed_out = seconds >= timeout_s
            return OcrReading("", None, 0, seconds, timed_out=timed_out, failed=not timed_out)
        words = _words(api)
        text = api.GetUTF8Text() if words else ""
    finally:
        api.Clear()  # the page's bitmap and results are not kept for the next page
    confidences = [conf for _, conf in words]
    legible = sum(
        sum(ch.isalnum() for ch in word) for word, conf in words if conf >= LEGIBLE_WORD_CONFIDENCE
    )
    return OcrReading(
        text=text.strip(),
        confidence=round(sum(confidences) / len(confidences), 1) if confidences else None,
        legible_chars=legible,
        seconds=time.perf_counter() - started,
    )


def _words(api: Any) -> list[tuple[str, float]]:
    """Each recognised word and its confidence. (tesserocr's MapWordConfidences
    reports an empty page as an unraisable error; walking the results does not.)"""
    import tesserocr

    found: list[tuple[str, float]] = []
    iterator = api.GetIterator()
    if iterator is None:
        return found
    for word in tesserocr.iterate_level(iterator, tesserocr.RIL.WORD):
        try:
            text = word.GetUTF8Text(tesserocr.RIL.WORD).strip()
        except RuntimeError:  # an empty page has no first word
            break
        if text:
            found.append((text, float(word.Confidence(tesserocr.RIL.WORD))))
    return found


def flattened(image: Image) -> Image:
    """``image`` in a mode the engine reads well: 1-bit, grey or RGB as they are,
    anything else grey, transparency laid on white paper (a transparent PNG's
    "paper" is often black pixels of alpha 0)."""
    from PIL import Image as PILImage

    if image.mode in ("1", "L", "RGB"):
        return image
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = PILImage.new("RGBA", rgba.size, (255, 255, 255, 255))
        return PILImage.alpha_composite(background, rgba).convert("L")
    return image.convert("L")


def fit_for_ocr(image: Image, dpi: int) -> tuple[Image, int]:
    """``image`` :func:`flattened`, scaled down to at most ``MAX_OCR_PIXELS``; with
    its resolution, scaled alike."""
    from PIL import Image as PILImage

    image = flattened(image)
    scale = pixel_scale(image.width, image.height, MAX_OCR_PIXELS)
    if scale < 1:
        size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
        if image.mode == "1":
            image = image.convert("L")  # resampling a 1-bit image would drop strokes
        image = image.resize(size, PILImage.Resampling.LANCZOS)
        dpi = max(1, round(dpi * scale))
    return image, dpi


def pixel_scale(width: float, height: float, max_pixels: int) -> float:
    """The factor (at most 1) that brings a ``width`` by ``height`` bitmap within
    ``max_pixels``."""
    pixels = width * height
    if pixels <= max_pixels or pixels <= 0:
        return 1.0
    scale = float((max_pixels / pixels) ** 0.5)
    # A renderer rounds each side up, which may overshoot by a row and a column.
    while math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        scale *= 0.999
    return scale


def is_blank(image: Image) -> bool:
    """Whether a page image holds nothing to read: one flat tone, give or take
    ``BLANK_CONTRAST`` grey levels (a blank page, a scanner's empty platen)."""
    low, high = flattened(image).convert("L").getextrema()
    return bool(float(high) - float(low) < BLANK_CONTRAST)  # type: ignore[arg-type]


def negligible(text: str) -> bool:
    """Whether a text layer is too thin to stand for its page (``MIN_TEXT_LAYER_CHARS``)."""
    return visible_chars(text) < MIN_TEXT_LAYER_CHARS


def visible_chars(text: str) -> int:
    """Characters of ``text`` that are not white space."""
    # str.split() breaks at exactly the characters str.isspace() calls white space
    # (checked over every code point), in C: counting through a generator took ~0.4 ms
    # a text page, 13% of a one-page PDF's parse, for a page decision.
    return sum(map(len, text.split()))


class OcrBudget:
    """The OCR time one document may still spend (``OCR_DOCUMENT_BUDGET_S`` at first)."""

    def __init__(self, seconds: float = OCR_DOCUMENT_BUDGET_S) -> None:
        self.total = seconds
        self.spent = 0.0

    @property
    def remaining(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.total - self.spent)

    def spend(self, seconds: float) -> None:
        """Count ``seconds`` of OCR."""
        self.spent += seconds

    def timeout_s(self) -> float:
        """How long the next page may take: its own limit, or what is left."""
        return min(OCR_PAGE_TIMEOUT_S, self.remaining)

    def over_reason(self) -> str:
        """Why a page is skipped once the budget is spent, in one line."""
        return f"over the document's OCR budget ({self.total:.0f} s spent)"


# --- deciding a page --------------------------------------------------------------------


class Drawn(Enum):
    """What a page shows, as far as its content says without rendering it."""

    NOTHING = "nothing"  # no page objects at all: blank
    TEXT_ONLY = "text_only"  # text objects only: its text layer is all there is
    PICTURES = "pictures"  # images, paths or shadings, which may carry text


class PageSource(Protocol):
    """One page as :class:`PageReader` asks about it; both calls may raise
    :class:`RenderFailed`."""

    def drawn(self) -> Drawn:
        """What the page shows (cheap: no rendering)."""
        ...

    def render(self) -> tuple[Image, int]:
        """The page as an image, and that image's resolution in dpi."""
        ...


class PageReader:
    """Decides how each page of one document is read, and keeps its OCR budget.

    A page whose text layer is enough (``MIN_TEXT_LAYER_CHARS``) is ``text`` and is
    never rendered. So is a thin layer on a page that shows nothing but text (a
    one-line page: there is nothing else to read). A page with nothing drawn is
    ``ocr_empty`` without rendering. Any other page is rendered and, unless blank,
    read: ``ocr`` when the engine found legible text (the page's text is then the
    engine's, or the thin layer when that is as long), else ``ocr_empty`` (the thin
    layer, if any, is kept: nothing is lost by reading). Without an engine, over the
    budget, past its timeout or when it cannot be rendered, a page is ``skipped``
    with why, and its thin layer kept.
    """

    def __init__(self, budget: OcrBudget | None = None, *, pages: int = 0) -> None:
        """Start a document's reading.

        Args:
            budget: The document's OCR budget (``OCR_DOCUMENT_BUDGET_S`` by default).
            pages: The document's page count; when given, a page about to be rendered
                and read is reported started (the pages before it done).
        """
        self.budget = budget or OcrBudget()
        self.pages = pages
        self._missing = unavailable_reason()  # asked once: it reads the file system
        self.skipped_for_engine = 0
        self.skipped_otherwise: list[str] = []  # reasons, for an empty document's detail

    def read(self, number: int, layer: str, page: PageSource) -> tuple[str, PageReading]:
        """One page's text and its reading.

        Args:
            number: The page number, from 1.
            layer: Its text layer ("" for an image).
            page: The page, asked what it shows and rendered only when needed.
        """
        chars = visible_chars(layer)
        if chars >= MIN_TEXT_LAYER_CHARS:  # not negligible(layer), counted once
            return layer, PageReading(number, PageDecision.TEXT, chars)
        started = time.perf_counter()
        try:
            drawn = page.drawn()
        except RenderFailed as exc:
            return layer, self._skipped(number, chars, str(exc))
        if drawn is Drawn.TEXT_ONLY and chars:
            return layer, PageReading(number, PageDecision.TEXT, chars)
        if drawn is Drawn.NOTHING:
            return layer, PageReading(
                number, PageDecision.OCR_EMPTY, chars, ocr_seconds=time.perf_counter() - started
            )
        if self.budget.remaining <= 0:
            return layer, self._skipped(number, chars, self.budget.over_reason())
        if self.pages and number == 1:
            # A page for the engine takes seconds (more on a loaded machine), and the
            # parser pool times a parse from its last report: "0 done" starts the first
            # page's own allowance (the pool's unit_timeout_s) now, as the report after
            # each page does for the next. The first page of a scan was otherwise left
            # the parse's up-front budget, sized for text pages (10.5 s for one page),
            # which a loaded 2-core machine missed.
            report_units(0, self.pages)
        try:
            image, dpi = page.render()
        except RenderFailed as exc:
            return layer, self._skipped(number, chars, str(exc))
        image = flattened(image)  # once, for the blank check and the engine
        if is_blank(image):
            seconds = time.perf_counter() - started
            self.budget.spend(seconds)
            return layer, PageReading(number, PageDecision.OCR_EMPTY, chars, ocr_seconds=seconds)
        if self._missing is not None:
            self.skipped_for_engine += 1
            return layer, self._skipped(number, chars, f"OCR unavailable: {self._missing}")
        timeout = self.budget.timeout_s()
        reading = read_image(image, dpi=dpi, timeout_s=timeout)
        del image
        seconds = time.perf_counter() - started
        self.budget.spend(seconds)
        if reading.timed_out:
            return layer, self._skipped(
                number, chars, f"OCR of the page took over {timeout:.0f} s", seconds
            )
        if reading.failed:
            return layer, self._skipped(
                number, chars, "the OCR engine could not read the page image", seconds
            )
        if reading.legible:
            # The engine's text, unless the thin layer already says as much (exactly).
            text = reading.text if visible_chars(reading.text) > chars else layer
            return text, PageReading(
                number,
                PageDecision.OCR,
                visible_chars(text),
                confidence=reading.confidence,
                ocr_seconds=seconds,
            )
        return layer, PageReading(
            number,
            PageDecision.OCR_EMPTY,
            chars,
            confidence=reading.confidence,
            ocr_seconds=seconds,
        )

    def nothing_found(self, pages: int, empty_reason: str) -> tuple[ErrorCode, str]:
        """The failure of a document none of whose ``pages`` yielded text: pages
        the engine could have read make it ``ocr_unavailable`` (naming what to
        install), else ``empty_document`` with ``empty_reason``."""
        if self.skipped_for_engine:
            need = (
                "1 page needs"
                if self.skipped_for_engine == 1
                else (f"{self.skipped_for_engine} of {pages} pages need")
            )
            return ErrorCode.OCR_UNAVAILABLE, f"{need} OCR, and {self._missing}"
        if self.skipped_otherwise:
            count = len(self.skipped_otherwise)
            pages_word = "page" if count == 1 else "pages"
            return (
                ErrorCode.EMPTY_DOCUMENT,
                f"{empty_reason}; {count} {pages_word} not read: {self.skipped_otherwise[0]}",
            )
        return ErrorCode.EMPTY_DOCUMENT, empty_reason

    def _skipped(self, number: int, chars: int, reason: str, seconds: float = 0.0) -> PageReading:
        if not reason.startswith("OCR unavailable"):
            self.skipped_otherwise.append(reason)
        return PageReading(number, PageDecision.SKIPPED, chars, ocr_seconds=seconds, reason=reason)


class RenderFailed(Exception):
    """A page could not be made into an image; the message says why, in one line."""
