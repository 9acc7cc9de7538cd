"""Images (PNG, JPEG, TIFF): every page read by OCR, each TIFF frame a page, with
Pillow (MIT-CMU licence) decoding and :mod:`core.ingest.formats.ocr` reading.

A PNG or JPEG is one page (an animated PNG's later frames are animation, not pages);
a TIFF has a page per frame. Each page gets a :class:`~.base.PageReading` and a
progress report. The guards come before decoding: an image or frame over
``MAX_IMAGE_PIXELS`` (a decompression bomb: a few kilobytes declaring a gigapixel)
and a TIFF of more than ``MAX_IMAGE_FRAMES`` frames end as ``parse_error``, and so
does a truncated or damaged image (Pillow never fills in what is missing here).
"""

from __future__ import annotations

import contextlib
import warnings as py_warnings
from collections.abc import Iterator
from io import BytesIO
from typing import TYPE_CHECKING

from core.ingest.chunker import Location
from core.ingest.formats.base import Extracted, Format, Prose
from core.ingest.limits import MAX_IMAGE_FRAMES, MAX_IMAGE_PIXELS, LimitExceeded
from core.states import DocumentKind, ErrorCode

if TYPE_CHECKING:
    from PIL.Image import Image

    from core.ingest.formats.base import ParseOptions
    from core.ingest.formats.ocr import Drawn
    from core.ingest.parser_warnings import WarningCollector

FORMAT_EMPTY_REASON = "OCR found no legible text in the image"
# Resolutions outside this range are not believed (a 1-dpi or 72-dpi "scan" is a
# missing or default header value): the page is taken for DEFAULT_IMAGE_DPI instead.
_PLAUSIBLE_DPI = range(100, 2401)  # dots per inch


def parse(data: bytes, request: ParseOptions, warnings: WarningCollector) -> Extracted:
    from core.ingest.failures import ParseFailure
    from core.ingest.formats.ocr import PageReader
    from core.ingest.parse_progress import report_units

    out = Extracted()
    with _opened(data) as image:
        pages = _page_count(image)
        reader = PageReader(pages=pages)
        for number, frame in enumerate(_frames(image, pages), start=1):
            text, reading = reader.read(number, "", ImagePage(*frame))
            out.units = number
            out.readings.append(reading)
            if text:
                out.blocks.append(Prose(text, Location(page=number)))
            report_units(number, pages)
    if not out.blocks:
        code, reason = reader.nothing_found(pages, FORMAT_EMPTY_REASON)
        raise ParseFailure(code, reason)
    return out


@contextlib.contextmanager
def _opened(data: bytes) -> Iterator[Image]:
    """The image, opened (its header read, nothing decoded) under the pixel limit."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    from core.ingest.failures import ParseFailure

    # Process-global, like every Pillow setting; a parser process does nothing else.
    PILImage.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    with py_warnings.catch_warnings():
        # Over MAX_IMAGE_PIXELS Pillow only warns (it refuses at twice that): here
        # the warning is the refusal.
        py_warnings.simplefilter("error", PILImage.DecompressionBombWarning)
        try:
            image = PILImage.open(BytesIO(data))
        except (PILImage.DecompressionBombWarning, PILImage.DecompressionBombError):
            raise LimitExceeded(_over_pixels()) from None
        except UnidentifiedImageError:
            raise ParseFailure(ErrorCode.PARSE_ERROR, "not a readable image") from None
        except Exception as exc:  # Pillow's plugins raise many types for bad input
            raise ParseFailure(ErrorCode.PARSE_ERROR, _damaged(exc)) from None
        try:
            yield image
        finally:
            image.close()


def _over_pixels() -> str:
    return f"image is over {MAX_IMAGE_PIXELS} pixels, like a decompression bomb (limit)"


def _damaged(exc: BaseException, page: int | None = None) -> str:
    from core.ingest.failures import OUT_OF_MEMORY_REASON

    if isinstance(exc, MemoryError):
        return OUT_OF_MEMORY_REASON
    where = "" if page is None else f" (page {page})"
    if "truncated" in str(exc).lower() or isinstance(exc, EOFError):
        return f"damaged image: truncated{where}"
    return f"damaged image{where}"


def _page_count(image: Image) -> int:
    from core.ingest.failures import ParseFailure

    if image.format != "TIFF":
        return 1
    try:
        frames = int(getattr(image, "n_frames", 1))
    except Exception as exc:  # a directory chain that breaks off
        raise ParseFailure(ErrorCode.PARSE_ERROR, _damaged(exc)) from None
    if frames > MAX_IMAGE_FRAMES:
        raise LimitExceeded(f"TIFF has {frames} frames (limit {MAX_IMAGE_FRAMES})")
    return frames


def _frames(image: Image, pages: int) -> Iterator[tuple[Image, int]]:
    """Each page decoded, with its resolution; one frame at a time is in memory."""
    from PIL import Image as PILImage

    from core.ingest.failures import ParseFailure
    from core.ingest.formats.ocr import DEFAULT_IMAGE_DPI, MAX_OCR_PIXELS, pixel_scale

    for index in range(pages):
        try:
            image.seek(index)
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                # Pillow checks the first frame when it opens a file, not the others.
                raise LimitExceeded(_over_pixels())
            dpi = _dpi(image.info.get("dpi"), DEFAULT_IMAGE_DPI)
            scale = pixel_scale(width, height, MAX_OCR_PIXELS)
            if scale < 1 and image.format == "JPEG":
                # JPEG decodes at 1/2, 1/4 or 1/8 size for the asking: far less memory.
                image.draft("L", (int(width * scale), int(height * scale)))
                dpi = max(1, round(dpi * image.size[0] / width))
            with py_warnings.catch_warnings():
                py_warnings.simplefilter("error", PILImage.DecompressionBombWarning)
                image.load()
            frame = image.copy() if pages > 1 else image
            # A phone stores a photo as its sensor saw it and says in EXIF how to turn
            # it; OCR reads lines as they are drawn, so the page is turned first.
            frame = _upright(frame)
        except LimitExceeded:
            raise
        except (PILImage.DecompressionBombWarning, PILImage.DecompressionBombError):
            raise LimitExceeded(_over_pixels()) from None
        except Exception as exc:  # MemoryError too: see _damaged
            raise ParseFailure(ErrorCode.PARSE_ERROR, _damaged(exc, index + 1)) from None
        yield frame, dpi
        del frame


def _upright(frame: Image) -> Image:
    """The frame turned as its EXIF orientation says (itself when it says nothing)."""
    from PIL import ImageOps

    orientation = frame.getexif().get(0x0112, 1)  # EXIF Orientation
    if orientation in (1, None) or not isinstance(orientation, int):
        return frame
    return ImageOps.exif_transpose(frame)


class ImagePage:
    """A decoded image page, as :class:`core.ingest.formats.ocr.PageReader` asks about it."""

    def __init__(self, image: Image, dpi: int) -> None:
        self._image = image
        self._dpi = dpi

    def drawn(self) -> Drawn:
        from core.ingest.formats.ocr import Drawn

        return Drawn.PICTURES

    def render(self) -> tuple[Image, int]:
        return self._image, self._dpi


def _dpi(declared: object, default: int) -> int:
    try:
        x = round(float(declared[0]))  # type: ignore[index]
    except (TypeError, ValueError, IndexError, OverflowError):
        return default
    return x if x in _PLAUSIBLE_DPI else default


def _format(kind: DocumentKind, name: str, recognised_by: str) -> Format:
    return Format(
        kind=kind,
        name=name,
        recognised_by=recognised_by,
        needs=("pillow", "tesserocr"),
        parse=parse,
        empty_reason=FORMAT_EMPTY_REASON,
    )


PNG = _format(DocumentKind.PNG, "PNG image", "the PNG signature and a non-empty IHDR header")
JPEG = _format(DocumentKind.JPEG, "JPEG image", "FF D8 FF followed by a JPEG marker")
TIFF = _format(
    DocumentKind.TIFF,
    "TIFF image (each frame a page)",
    "II*\\0 or MM\\0* with its first directory past the header",
)
FORMATS = (PNG, JPEG, TIFF)
