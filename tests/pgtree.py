"""Test helper: load a tree built in Python (``build_rows``) into a real PostgreSQL
database the way the loader does -- catalog schema, a builds row, a partition table
with a unique key, attached to the parent, then activation."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import psycopg
from psycopg import sql

from refactx_index.format import FORMAT_VERSION
from refactx_index.memory import build_rows

SCHEMA_SQL = Path(__file__).resolve().parents[1] / "sql" / "schema.sql"


def apply_schema(conn: psycopg.Connection, schema: str = "refactx") -> None:
    conn.execute(SCHEMA_SQL.read_text().replace("{schema}", schema))


def load_tree(
    dsn: str,
    name: str,
    sequences: Iterable[Sequence[int]],
    *,
    schema: str = "refactx",
    depth: int = 3,
    threshold: int = 4,
    tokenizer: str = "test-vocab",
    tokenizer_hash: str = "0" * 64,
    vocab_size: int = 1000,
    fact_prefix: str = " ",
    format_version: int = FORMAT_VERSION,
    activate: bool = True,
) -> int:
    """Build rows with the cut rule, load them as a new build of ``name``; return its build id."""
    seqs = {tuple(int(t) for t in s) for s in sequences}
    rows = build_rows(seqs, depth, threshold)
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_schema(conn, schema)
        with conn.transaction():
            build_id = conn.execute(
                sql.SQL(
                    "INSERT INTO {}.builds (name, table_name, tokenizer, tokenizer_hash, "
                    "vocab_size, source, dump_date, depth, subtree_threshold, format_version, "
                    "fact_prefix, fact_suffix, facts, rows, status) VALUES "
                    "(%s, 'pending_' || md5(random()::text), %s, %s, %s, 'test', 'test', %s, %s,"
                    " %s, %s, '', %s, %s, 'loaded') RETURNING build_id"
                ).format(sql.Identifier(schema)),
                (name, tokenizer, tokenizer_hash, vocab_size, depth, threshold, format_version,
                 fact_prefix, len(seqs), len(rows)),
            ).fetchone()[0]
            table = f"tree_{build_id}"
            conn.execute(
                sql.SQL("UPDATE {}.builds SET table_name = %s WHERE build_id = %s").format(
                    sql.Identifier(schema)), (table, build_id))
            ident = sql.Identifier(schema, table)
            conn.execute(sql.SQL(
                "CREATE TABLE {} (build_id bigint NOT NULL, prefix bytea NOT NULL, "
                "node bytea NOT NULL)").format(ident))
            with conn.cursor().copy(
                sql.SQL("COPY {} (build_id, prefix, node) FROM STDIN").format(ident)
            ) as copy:
                for key, node in rows.items():
                    copy.write_row((build_id, key, node))
            conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK (build_id = {})").format(
                ident, sql.Identifier(f"{table}_build"), sql.Literal(build_id)))
            conn.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (prefix)").format(ident))
            conn.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
                sql.Identifier(schema, "tree"), ident, sql.Literal(build_id)))
            conn.execute(sql.SQL("ANALYZE {}").format(ident))
        if activate:
            activate_build(conn, name, build_id, schema=schema)
    return build_id


def activate_build(conn: psycopg.Connection, name: str, build_id: int, *,
                   schema: str = "refactx") -> None:
    with conn.transaction():
        conn.execute(sql.SQL(
            "INSERT INTO {}.active (name, build_id) VALUES (%s, %s) ON CONFLICT (name) "
            "DO UPDATE SET build_id = EXCLUDED.build_id, since = now()").format(
                sql.Identifier(schema)), (name, build_id))
        conn.execute(sql.SQL("UPDATE {}.builds SET status = 'active' WHERE build_id = %s").format(
            sql.Identifier(schema)), (build_id,))


def expected_next(seqs: set[tuple[int, ...]], prefix: Sequence[int]) -> tuple[dict[int, int], bool]:
    """Brute-force answer: {child token: leaves}, ends -- what every index must return."""
    p = tuple(prefix)
    children: dict[int, int] = {}
    for s in seqs:
        if len(s) > len(p) and s[: len(p)] == p:
            children[s[len(p)]] = children.get(s[len(p)], 0) + 1
    return children, p in seqs


def random_sequences(seed: int, n: int = 300, alphabet: int = 6, max_len: int = 7) -> set[tuple[int, ...]]:
    """Small random facts over a tiny alphabet: many shared prefixes, facts that are
    prefixes of other facts, wide and deep nodes."""
    import random

    rng = random.Random(seed)
    return {tuple(rng.randrange(alphabet) * 37 + 1 for _ in range(rng.randint(1, max_len)))
            for _ in range(n)}
