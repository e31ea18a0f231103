"""Stage 9 -- validate a loaded build before activation.

Checks, on the build's own table:

* every row decodes; every node obeys ``sum(child_leaves) + ends = leaves`` (the
  fragment decoder recomputes leaves bottom-up, so this reduces to: each external node's
  leaf count equals the leaf count of the row keyed by its prefix);
* every external node has its row and every row but the root is some row's external
  node (one pass in key order holding only the pending external nodes);
* the row count equals the Parquet's, the root's leaves equal the distinct facts;
* a sample of facts from the tokens Parquet walks from the root to its end, one
  batched ``prefix = ANY(...)`` query per tree level.

A failure sets status ``failed`` with the reason (the active build is untouched) and
raises ``ValidationFailed``; success sets ``validated``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import psycopg
from psycopg import sql

from refactx_pipeline import pgcatalog
from refactx_pipeline.common import read_counts, write_counts
from refactx_pipeline.load import parquet_files, parquet_row_count
from refactx_index import format as fmt
from refactx_pipeline.config import Config
from refactx_index.errors import FormatError, LoadError, ValidationFailed

log = logging.getLogger(__name__)

FETCH_ROWS = 10000
VALIDATES = ("loaded", "validated")  # a validated build again: a retried task


class _Invalid(Exception):
    """A validation finding (becomes the build's failure message)."""


def _external_keys(prefix: bytes, frag: fmt.Fragment) -> tuple[list[bytes], np.ndarray]:
    """Full prefix keys and leaf counts of a fragment's external nodes."""
    ext = np.flatnonzero(frag.external)
    if ext.size == 0:
        return [], ext
    n = frag.n_nodes
    parent = np.full(n, -1, dtype=np.int64)
    parent[1:] = np.repeat(np.arange(n), frag.child_count)
    # climb from each external node to node 0, collecting tokens (deepest first)
    paths: list[np.ndarray] = []
    cur = ext.copy()
    while np.any(cur > 0):
        paths.append(np.where(cur > 0, frag.tokens[np.maximum(cur, 0)], -1))
        cur = np.where(cur > 0, parent[np.maximum(cur, 0)], 0)
    steps = np.stack(paths[::-1], axis=1)  # shallowest first, -1 before a shallower node's start
    keys = []
    for row in steps:
        keys.append(prefix + fmt.encode_prefix(row[row >= 0]))
    return keys, frag.leaves[ext]


def check_rows(conn: psycopg.Connection, schema: str, table: str) -> dict[str, int]:
    """Stream every row in key order; check decoding, leaf counts and reachability."""
    pending: dict[bytes, int] = {}  # external node prefix -> its leaves, row not seen yet
    rows = 0
    root_leaves = None
    max_depth = 0
    with conn.transaction(), conn.cursor(name="validate_rows") as cur:
        cur.itersize = FETCH_ROWS
        cur.execute(
            sql.SQL("SELECT prefix, node FROM {}.{} ORDER BY prefix").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
        )
        for prefix, node in cur:
            prefix = bytes(prefix)
            rows += 1
            if len(prefix) % 4:
                raise _Invalid(f"row key of {len(prefix)} bytes is not a multiple of 4")
            try:
                frag = fmt.decode_fragment(node)
            except FormatError as exc:
                raise _Invalid(f"row {prefix.hex()} does not decode: {exc}") from exc
            if frag.external[0]:
                raise _Invalid(f"row {prefix.hex()}: its own node is marked external")
            leaves = int(frag.leaves[0])
            if prefix == b"":
                root_leaves = leaves
            else:
                expected = pending.pop(prefix, None)
                if expected is None:
                    raise _Invalid(f"row {prefix.hex()} is not an external node of any row")
                if expected != leaves:
                    raise _Invalid(
                        f"row {prefix.hex()}: {leaves} leaves, its parent says {expected} "
                        "(sum(child_leaves) + ends != leaves)"
                    )
            max_depth = max(max_depth, len(prefix) // 4)
            keys, ext_leaves = _external_keys(prefix, frag)
            pending.update(zip(keys, ext_leaves.tolist()))
    if root_leaves is None:
        raise _Invalid("no root row (prefix '')")
    if pending:
        some = next(iter(pending)).hex()
        raise _Invalid(f"{len(pending)} external nodes have no row (for example {some})")
    return {"rows": rows, "root_leaves": root_leaves, "max_depth": max_depth}


def walk_facts(
    conn: psycopg.Connection, schema: str, table: str, facts: Sequence[Sequence[int]]
) -> int:
    """Walk every fact from the root to its end; returns how many walked (all, or raises)."""
    query = sql.SQL("SELECT prefix, node FROM {}.{} WHERE prefix = ANY(%s)").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    # per fact: the length of the prefix whose row it continues in
    todo = {i: 0 for i in range(len(facts))}
    while todo:
        keys = {fmt.encode_prefix(facts[i][:r]) for i, r in todo.items()}
        found = {bytes(p): bytes(n) for p, n in conn.execute(query, (list(keys),)).fetchall()}
        frags = {k: fmt.decode_fragment(v) for k, v in found.items()}
        nxt: dict[int, int] = {}
        for i, r in todo.items():
            fact = facts[i]
            key = fmt.encode_prefix(fact[:r])
            if key not in frags:
                raise _Invalid(f"fact {list(fact)}: no row for its prefix {list(fact[:r])}")
            frag = frags[key]
            node, pos = 0, r
            while True:
                if node and frag.external[node]:
                    nxt[i] = pos
                    break
                if pos == len(fact):
                    if not frag.ends[node]:
                        raise _Invalid(f"fact {list(fact)}: the tree does not end it")
                    break
                node = frag.child(node, int(fact[pos]))
                if node < 0:
                    raise _Invalid(f"fact {list(fact)}: token {fact[pos]} at {pos} is not in the tree")
                pos += 1
        todo = nxt
    return len(facts)


def validate_build(
    conn: psycopg.Connection,
    schema: str,
    build_id: int,
    *,
    expected_rows: int,
    expected_facts: int | None,
    sample: Sequence[Sequence[int]],
) -> dict[str, Any]:
    """Validate one build; sets ``validated`` or ``failed`` (and raises ``ValidationFailed``)."""
    build = pgcatalog.get_build(conn, schema, build_id)
    if build is None or build["dropped_at"] is not None:
        raise LoadError(f"build {build_id} does not exist or was dropped")
    if build["status"] not in VALIDATES:
        raise LoadError(f"build {build_id} has status {build['status']!r}; validate a loaded build")
    table = build["table_name"]
    try:
        found = check_rows(conn, schema, table)
        if found["rows"] != expected_rows or (build["rows"] is not None and build["rows"] != expected_rows):
            raise _Invalid(f"{found['rows']} rows in PostgreSQL, the Parquet holds {expected_rows}")
        if expected_facts is not None and found["root_leaves"] != expected_facts:
            raise _Invalid(f"root has {found['root_leaves']} facts, the prefix rows counted {expected_facts}")
        found["walked"] = walk_facts(conn, schema, table, sample)
    except _Invalid as exc:
        message = f"validation failed: {exc}"
        pgcatalog.set_status(conn, schema, build_id, "failed", message=message[:2000])
        pgcatalog.release_name(conn, schema, build_id)
        log.error("build %d: %s", build_id, message)
        raise ValidationFailed(f"build {build_id}: {message}") from None
    pgcatalog.set_status(conn, schema, build_id, "validated", message=None)
    log.info("build %d validated: %s", build_id, found)
    return {"build_id": build_id, **found}


def sample_facts(spark, cfg: Config, vocab_name: str, n: int, total: int | None) -> list[list[int]]:
    """About ``n`` valid facts drawn at random from the tokens Parquet (a sample, not the data)."""
    from pyspark.sql import functions as F

    from refactx_pipeline.prefix_rows import reject_reason

    tokens = spark.read.parquet(str(cfg.stage_dir("tokenize") / vocab_name / "tokens"))
    valid = tokens.where(reject_reason().isNull())
    if total and total > n:
        valid = valid.sample(fraction=min(1.0, 3.0 * n / total), seed=17)
    return [list(r[0]) for r in valid.select("token_ids").orderBy(F.rand(17)).limit(n).collect()]


def validate_all(spark, cfg: Config, dsn: str, build_ids: Mapping[str, int]) -> dict[str, Any]:
    """Validate the builds a load made (``build_ids``: vocabulary -> build id), each against
    this run's Parquet of its vocabulary."""
    result: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        builds = pgcatalog.stage_builds(conn, cfg, build_ids, stage="validate", statuses=VALIDATES)
        for vocab, info in builds.items():
            tree_counts = read_counts(cfg, "prefix_rows", f"{vocab}/counts.json")
            rows_dir = cfg.stage_dir("prefix_rows") / vocab / "rows"
            sample = sample_facts(spark, cfg, vocab, cfg.pg.validate_sample, tree_counts.get("facts"))
            result[vocab] = validate_build(
                conn, cfg.pg.schema, int(info["build_id"]),
                expected_rows=parquet_row_count(parquet_files(rows_dir)),
                expected_facts=tree_counts.get("distinct_facts"),
                sample=sample,
            )
    write_counts(cfg, "validate", {"vocabularies": result})
    return result


def run(spark, cfg: Config, dsn: str, build_ids: Mapping[str, int]) -> dict:
    """The stage: Spark samples facts from the Parquet, ``dsn`` holds the builds ``build_ids``
    names (vocabulary -> build id, what the load returned)."""
    return validate_all(spark, cfg, dsn, build_ids)
