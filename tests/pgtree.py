"""Test helper: load a tree built in Python (``build_rows``) into a real PostgreSQL
database the way the loader does -- catalog schema, a builds row, a partition table
with a unique key, attached to the parent, then activation. The catalog steps are the
pipeline's: tests that import this module need the pipeline wheel (tests/integration, and
the runtime tests that write a PostgreSQL build, which skip without it)."""

from __future__ import annotations

from typing import Iterable, Sequence

import psycopg
from psycopg import sql

from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.stages.activate import activate_build
from refactx_index.tree.format import FORMAT_VERSION
from refactx_index.tree.memory import build_rows, compress_rows, deepest_row

from .treedata import as_version_2, as_version_4


def load_tree(
    dsn: str,
    name: str,
    sequences: Iterable[Sequence[int]],
    *,
    schema: str = "refactx",
    threshold: int = 4,
    max_subtree_tokens: int = 4096,
    vocabulary: str = "test-vocab",
    vocabulary_sha256: str = "0" * 64,
    vocab_size: int = 1000,
    fact_prefix: str = " ",
    format_version: int = FORMAT_VERSION,
    activate: bool = True,
    reader_role: str = "",
    max_shrink: float | None = None,
    dictionary: bool = True,
    old_columns: bool = False,
) -> int:
    """Build rows with the cut rule, load them as a new build of ``name``; return its build id.

    The catalog steps are the loader's own (``refactx_pipeline.catalog.pgcatalog``, ``refactx_pipeline.stages.activate``); only
    the rows come from Python (``build_rows``) through a plain COPY instead of Parquet.
    Validation is skipped: an activated build goes straight from ``loaded`` to ``validated``.
    ``old_columns``: the build row names its vocabulary in the columns ``tokenizer`` and
    ``tokenizer_hash``, as catalogs created before 0.2.0 have them (the caller gives the
    catalog that shape: :func:`as_old_catalog`).
    """
    seqs = {tuple(int(t) for t in s) for s in sequences}
    rows = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_subtree_tokens)
    preset = None
    if format_version == 2:  # a build as format version 2 wrote it: the same rows, no dictionary
        rows = {key: as_version_2(node) for key, node in rows.items()}
    elif dictionary:  # as the pipeline writes versions 4 and 5: compressed against the build's dictionary
        rows, preset = compress_rows(rows)
        if format_version == 4:  # a build as format version 4 wrote it: 4-byte token ids
            rows = {key: as_version_4(node, preset) for key, node in rows.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not old_columns:
            pgcatalog.apply_schema(conn, schema)
        pgcatalog.grant_reader(conn, schema, reader_role)
        names = ("tokenizer", "tokenizer_hash") if old_columns else ("vocabulary", "vocabulary_sha256")
        build_id = pgcatalog.create_build(conn, schema, {
            "name": name, names[0]: vocabulary, names[1]: vocabulary_sha256,
            "vocab_size": vocab_size, "source": "test", "dump_date": "test", "depth": deepest_row(rows),
            "subtree_threshold": threshold, "format_version": format_version,
            "fact_prefix": fact_prefix, "fact_suffix": "",
        })
        try:
            pgcatalog.claim_name(conn, schema, name, build_id)
            if preset is not None:
                pgcatalog.store_dictionary(conn, schema, build_id, preset.data)
            ident = sql.Identifier(schema, pgcatalog.table_name(build_id))
            with conn.transaction(), conn.cursor().copy(
                sql.SQL("COPY {} (build_id, prefix, node) FROM STDIN").format(ident)
            ) as copy:
                for key, node in rows.items():
                    copy.write_row((build_id, key, node))
            pgcatalog.attach(conn, schema, build_id)
            pgcatalog.grant_reader(conn, schema, reader_role, pgcatalog.table_name(build_id))
            pgcatalog.set_status(conn, schema, build_id, "loaded", facts=len(seqs), rows=len(rows))
        finally:
            pgcatalog.release_loading_lock(conn, build_id)
        if activate:
            pgcatalog.set_status(conn, schema, build_id, "validated")
            activate_build(conn, schema, build_id, max_shrink=max_shrink, reader_role=reader_role)
    return build_id


def as_old_catalog(dsn: str, schema: str = "refactx") -> None:
    """Create the catalog, then give its builds table the shape of catalogs created before
    0.2.0: the vocabulary in columns ``tokenizer`` and ``tokenizer_hash`` (the same types,
    places and constraints)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pgcatalog.apply_schema(conn, schema)
        builds = sql.Identifier(schema, "builds")
        conn.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN vocabulary TO tokenizer").format(builds))
        conn.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN vocabulary_sha256 TO tokenizer_hash").format(builds))


def store_provenance_rows(dsn: str, build_id: int, rows: Iterable[Sequence], *, schema: str = "refactx",
                          layout_named: bool = False) -> int:
    """Give a loaded build its provenance in layout ``rows`` (one text row per source ``(fact_id,
    kind, subject, property, object, value)`` in a partition of ``provenance``, a B-tree on
    fact_id): the layout the runtime reads beside ``blocks``. ``layout_named`` False leaves the
    catalog's ``provenance_layout`` null, as a catalog that names no layout has it. Returns the
    rows stored."""
    table = pgcatalog.provenance_table_name(build_id)
    ident = sql.Identifier(schema, table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if pgcatalog.is_attached(conn, schema, table, "provenance_blocks"):
            conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                sql.Identifier(schema, "provenance_blocks"), ident))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        conn.execute(sql.SQL("CREATE TABLE {} (LIKE {})").format(ident, sql.Identifier(schema, "provenance")))
        n = 0
        with conn.transaction(), conn.cursor().copy(sql.SQL(
                "COPY {} (build_id, fact_id, kind, subject, property, object, value) FROM STDIN").format(ident)) as copy:
            for row in rows:
                copy.write_row((build_id, *row))
                n += 1
        conn.execute(sql.SQL("CREATE INDEX {} ON {} (fact_id)").format(sql.Identifier(f"{table}_fact_id_idx"), ident))
        conn.execute(sql.SQL("ANALYZE {}").format(ident))
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (build_id = {})").format(
            ident, sql.Identifier(f"{table}_build_id_check"), sql.Literal(int(build_id))))
        conn.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
            sql.Identifier(schema, "provenance"), ident, sql.Literal(int(build_id))))
        conn.execute(sql.SQL("UPDATE {} SET provenance_rows = %s, provenance_layout = %s, provenance_block_bits = NULL "
                             "WHERE build_id = %s").format(sql.Identifier(schema, "builds")),
                     (n, "rows" if layout_named else None, build_id))
    return n
