"""The bare baseline as a whole process: extract the text of every page of the PDFs
named in a list file with pypdf or pypdfium2 (any other file is decoded as UTF-8: a
Markdown note's bare reading), and nothing else. Timed from outside like a worker
process (interpreter start-up and imports included on both sides).

Run: ``python -m bench.bare_extract pypdf|pdfium LIST_FILE``.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path


def extract_pypdf(data: bytes) -> int:
    from pypdf import PdfReader

    return sum(len(page.extract_text()) for page in PdfReader(io.BytesIO(data)).pages)


def extract_pdfium(data: bytes) -> int:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(data)
    try:
        chars = 0
        for page in pdf:
            textpage = page.get_textpage()
            chars += len(textpage.get_text_range())
            textpage.close()
            page.close()
        return chars
    finally:
        pdf.close()


def main(argv: list[str]) -> int:
    parser, listing = argv
    extract = {"pypdf": extract_pypdf, "pdfium": extract_pdfium}[parser]
    chars = 0
    for line in Path(listing).read_text(encoding="utf-8").splitlines():
        data = Path(line).read_bytes()
        chars += extract(data) if line.endswith(".pdf") else len(data.decode("utf-8"))
    print(chars)
    return 0 if chars > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
