"""Ingestion: the pipeline's stages, the worker loop, parsing (in killable parser
processes), content sniffing, chunking and embedding.

Deliberately empty: a parser child imports :mod:`core.ingest.parsing` (with
:mod:`~core.ingest.sniffing`, :mod:`~core.ingest.chunker` and
:mod:`~core.ingest.parser_warnings`, all standard library only) and must not pay for
SQLAlchemy, which the pipeline and the worker load.
"""
