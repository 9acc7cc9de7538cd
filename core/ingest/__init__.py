"""Ingestion: the pipeline's stages, the worker loop, parsing (in killable parser
processes), chunking and embedding.

Deliberately empty: a parser child imports :mod:`core.ingest.parsing` alone and must
not pay for SQLAlchemy, which the pipeline and the worker load.
"""
