"""PostgreSQL search folds diacritics, as SQLite's does: ``cafe`` finds ``café``

SQLite's FTS5 tokenizer (unicode61) removes diacritics from what it indexes and from
the query, so ``cafe``, ``creme`` and ``ecole`` find ``café``, ``crème`` and ``ÉCOLE``;
PostgreSQL's ``simple`` configuration kept them, and found nothing. This makes a text
search configuration, ``ingestdesk_search``: ``simple`` with the ``unaccent``
dictionary before it for every kind of word that can hold a letter beyond ASCII. The
search column is generated through it, and queries and snippets use it too, so the
index, the query and the marked words are folded by one rule.

Why a configuration with the ``unaccent`` extension rather than ``translate()`` over
a map of accented letters: ``ts_headline`` marks a word only when its own parse of
the chunk normalises it as the query was normalised, and only a configuration does
that on the original text; with ``translate()`` the snippet of ``cafe`` would mark
nothing in ``café``. ``to_tsvector(regconfig, text)`` is immutable, as a generated
column needs, without wrapping ``unaccent()`` (which is only stable) in a function
that claims otherwise. ``unaccent`` ships with PostgreSQL (Debian's ``postgresql-N``
package has it) and is a trusted extension since PostgreSQL 13: a database owner may
create it. Where the ledger's role may not, an administrator runs
``CREATE EXTENSION unaccent`` in the ledger's database first.

``unaccent`` folds a little more than unicode61 (ligatures: ``strasse`` finds
``Straße``, ``aero`` finds ``Ærø``); every word SQLite finds, PostgreSQL finds.

The column is dropped and added again (PostgreSQL 15 cannot change a generated
column's expression): the table is rewritten once, under an exclusive lock.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The parser's token types that can hold a letter beyond ASCII (the ascii* types
# cannot, and unaccent would only pass them on).
FOLDED_TOKENS = "word, hword, hword_part, numword, numhword, hword_numpart"

POSTGRES_UP = [
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    "CREATE TEXT SEARCH CONFIGURATION ingestdesk_search (COPY = simple)",
    # unaccent is a filtering dictionary: it hands the folded word on to simple,
    # which lowercases it.
    f"ALTER TEXT SEARCH CONFIGURATION ingestdesk_search ALTER MAPPING FOR {FOLDED_TOKENS} "
    "WITH unaccent, simple",
    "DROP INDEX ix_chunks_search",
    "ALTER TABLE chunks DROP COLUMN search",
    "ALTER TABLE chunks ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('ingestdesk_search'::regconfig, text)) STORED",
    "CREATE INDEX ix_chunks_search ON chunks USING gin (search)",
]
POSTGRES_DOWN = [
    "DROP INDEX ix_chunks_search",
    "ALTER TABLE chunks DROP COLUMN search",
    "ALTER TABLE chunks ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED",
    "CREATE INDEX ix_chunks_search ON chunks USING gin (search)",
    "DROP TEXT SEARCH CONFIGURATION ingestdesk_search",
    # The extension stays: something else in the database may use it.
]


def upgrade() -> None:
    # SQLite's FTS5 already folds diacritics (unicode61's default).
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_UP:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_DOWN:
            op.execute(statement)
