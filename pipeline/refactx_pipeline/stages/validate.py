"""Stage 9 -- validate a loaded build before activation.

Every row is checked in Spark, over the prefix rows Parquet the build was loaded from
(:func:`check_parquet`): ``mapInArrow`` decodes each row with ``format.decode_fragment`` and
emits the row's own key and leaf count, and the full key (row prefix + path) and leaf count
of every node flagged external in it; one group-by per key then checks them together, and
one aggregate sums them up. Nothing is collected but the summary and one example per kind of
fault. The checks follow the format, not the cut rule that chose the rows:

* every row decodes within the format's bounds (sizes against the header before anything is
  allocated, the checksum, node and level limits) as a row of the build's format version (a
  version 1 row, which has no checksum, is refused inside a version 2 build), its key is whole tokens and no longer than
  a fact may be, its own node is not external, its ``depth`` and ``leaves`` columns agree
  with its key and its fragment;
* every external node has its row, with the same leaf count (``sum(child_leaves) + ends =
  leaves`` across rows; inside a row the decoder recomputes leaves bottom-up); every row but
  the root is the external node of exactly one row, so no row is an orphan and every row is
  reachable from the root (an external node's key is longer than its row's);
* one root, whose leaves equal the distinct facts; the deepest row is the catalog's depth.

In PostgreSQL, on the build's table (:func:`check_table`, :func:`walk_facts`): the row count
and the bytes of keys and fragments equal the Parquet's (``octet_length`` reads no TOAST),
the root row is the Parquet's, and a sample of facts from the tokens Parquet walks from the
root to its end -- one batched ``prefix = ANY(...)`` query per row level, leaf counts checked
where the walk crosses into a row.

A failure sets status ``failed`` with the reason (the active build is untouched) and raises
``ValidationFailed``; success sets ``validated``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.common import stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.load import parquet_files, parquet_row_count
from refactx_index.tree import format as fmt
from refactx_pipeline.config import Config
from refactx_pipeline.db import STAGE_STATEMENT_TIMEOUT_MS, connect
from refactx_index.errors import FormatError
from refactx_pipeline.errors import LoadError, ValidationFailed

log = logging.getLogger(__name__)

VALIDATES = ("loaded", "validated")  # a validated build again: a retried task
_MAX_TOKEN = 2**32 - 1


class _Invalid(Exception):
    """A validation finding (becomes the build's failure message)."""


def _key(prefix: bytes) -> str:
    """A row key as its tokens, for messages."""
    if not prefix:
        return "[] (the root)"
    if len(prefix) % 4:
        return f"0x{prefix.hex()}"
    tokens = fmt.decode_prefix(prefix).tolist()
    return str(tokens) if len(tokens) <= 16 else f"[{', '.join(map(str, tokens[:16]))}, ... {len(tokens)} tokens]"


# --------------------------------------------------------------------------- per row (executors)


def external_keys(prefix: bytes, frag: fmt.Fragment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The full keys of a fragment's external nodes (row prefix + path from the row's node),
    as concatenated key bytes and their lengths, and the nodes' leaf counts. Vectorized: one
    step per level of the deepest external node. (Node 0 flagged external is a fault of the
    row itself, not an external node.)"""
    ext = np.flatnonzero(frag.external[1:]) + 1
    if ext.size == 0:
        return np.empty(0, np.uint8), np.empty(0, np.int64), np.empty(0, np.int64)
    parent = np.empty(frag.n_nodes, dtype=np.int64)
    parent[0] = 0
    parent[1:] = np.repeat(np.arange(frag.n_nodes), frag.child_count)
    steps = []  # steps[s][i]: token of external node i's ancestor s levels up (s = 0: itself), -1 above
    cur = ext
    while np.any(cur > 0):
        steps.append(np.where(cur > 0, frag.tokens[cur], -1))
        cur = parent[cur]
    up = np.stack(steps)
    depth = (up >= 0).sum(axis=0)
    paths = np.zeros((ext.size, up.shape[0]), dtype=">u4")  # shallowest token first
    s, i = np.nonzero(up >= 0)
    paths[i, depth[i] - 1 - s] = up[s, i]
    head = len(prefix)
    keys = np.empty((ext.size, head + 4 * up.shape[0]), dtype=np.uint8)
    keys[:, :head] = np.frombuffer(prefix, dtype=np.uint8)
    keys[:, head:] = paths.view(np.uint8).reshape(ext.size, -1)
    lengths = head + 4 * depth
    return keys[np.arange(keys.shape[1]) < lengths[:, None]], lengths, frag.leaves[ext]


def _row_check(prefix: bytes, node: bytes, depth: int, leaves: int, max_tokens: int,
               format_version: int, dictionary: fmt.PresetDictionary | None = None,
               ) -> tuple[fmt.Fragment | None, str | None]:
    """One row's own invariants: its fragment (None when it does not decode) and the fault, if
    any. A row of another format version than the build's is a fault: a version 1 row has no
    checksum, so one inside a version 2 build would hide a flipped bit."""
    if len(prefix) % 4:
        return None, f"a key of {len(prefix)} bytes is not whole tokens"
    if len(prefix) // 4 > max_tokens:
        return None, f"a key of {len(prefix) // 4} tokens is longer than any fact ({max_tokens})"
    try:
        frag = fmt.decode_fragment(node, format_version, dictionary)
    except FormatError as exc:
        return None, f"does not decode: {exc}"
    if frag.n_nodes > 1 and int(frag.tokens[1:].max()) > _MAX_TOKEN:
        return frag, "holds a token id past 2**32 - 1"
    if frag.external[0]:
        return frag, "its own node is flagged external"
    if depth != len(prefix) // 4:
        return frag, f"its depth column says {depth}, its key has {len(prefix) // 4} tokens"
    if leaves != int(frag.leaves[0]):
        return frag, f"its leaves column says {leaves}, its fragment {int(frag.leaves[0])}"
    return frag, None


def _facts_of_rows(batches: Iterator[pa.RecordBatch], max_tokens: int,
                   format_version: int, dictionary: bytes | None = None) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: prefix rows in, ``ROW_FACTS`` out -- one record per row (its key,
    leaves, fault, size) and one per external node in it (its full key, leaves, the row's key).
    ``dictionary``: the build's preset dictionary as the catalog holds it (format versions 3 and 4)."""
    preset = fmt.PresetDictionary(dictionary) if dictionary else None
    for batch in batches:
        prefixes = batch.column("prefix").to_pylist()
        nodes = batch.column("node").to_pylist()
        depths = batch.column("depth").to_numpy(zero_copy_only=False)
        leaf_col = batch.column("leaves").to_numpy(zero_copy_only=False)
        n = batch.num_rows
        row_leaves = np.zeros(n, dtype=np.int64)
        row_nodes = np.zeros(n, dtype=np.int32)
        row_bytes = np.zeros(n, dtype=np.int64)
        errors: list[str | None] = [None] * n
        digests: list[str | None] = [None] * n
        ext_keys, ext_lengths, ext_leaves, ext_parent = [], [], [], []
        for r in range(n):
            prefix, node = prefixes[r], nodes[r]
            frag, errors[r] = _row_check(prefix, node, int(depths[r]), int(leaf_col[r]), max_tokens,
                                        format_version, preset)
            row_bytes[r] = len(prefix) + len(node)
            if not prefix:
                digests[r] = hashlib.sha256(node).hexdigest()
            if frag is None:
                row_leaves[r] = leaf_col[r]
                continue
            row_leaves[r] = frag.leaves[0]
            row_nodes[r] = frag.n_nodes
            keys, lengths, leaves = external_keys(prefix, frag)
            if lengths.size:
                ext_keys.append(keys)
                ext_lengths.append(lengths)
                ext_leaves.append(leaves)
                ext_parent.extend([prefix] * lengths.size)
        lengths = np.concatenate(ext_lengths) if ext_lengths else np.empty(0, np.int64)
        m = lengths.size
        offsets = np.zeros(m + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        child_keys = pa.Array.from_buffers(pa.binary(), m, [
            None, pa.py_buffer(offsets), pa.py_buffer(np.concatenate(ext_keys) if ext_keys else b"")])
        yield pa.RecordBatch.from_arrays([
            pa.concat_arrays([pa.array(prefixes, pa.binary()), child_keys]),
            pa.array(np.concatenate([row_leaves, np.concatenate(ext_leaves) if ext_leaves else np.empty(0, np.int64)])),
            pa.array(np.concatenate([np.ones(n, bool), np.zeros(m, bool)])),
            pa.array([None] * n + ext_parent, pa.binary()),
            pa.array(errors + [None] * m, pa.string()),
            pa.array(np.concatenate([row_nodes, np.zeros(m, np.int32)])),
            pa.array(np.concatenate([row_bytes, np.zeros(m, np.int64)])),
            pa.array(digests + [None] * m, pa.string()),
        ], schema=_ROW_FACTS_ARROW)


_ROW_FACTS_ARROW = pa.schema([
    ("key", pa.binary()), ("leaves", pa.int64()), ("is_row", pa.bool_()), ("parent", pa.binary()),
    ("error", pa.string()), ("nodes", pa.int32()), ("bytes", pa.int64()), ("digest", pa.string()),
])


# --------------------------------------------------------------------------- Spark


FAULTS = {  # kind -> how a message names it (count, then examples)
    "undecodable": "rows fail their own checks",
    "duplicate_row": "keys hold more than one row",
    "duplicate_reference": "keys are an external node of more than one row",
    "missing_row": "external nodes have no row",
    "orphan_row": "rows are no row's external node (unreachable from the root)",
    "leaf_mismatch": "rows disagree with their parent's leaf count (sum(child_leaves) + ends != leaves)",
}


def _example(kind: str, ex: Any) -> str:
    key, parent = bytes(ex["key"]), ex["parent"]
    if kind == "undecodable":
        return f"row {_key(key)}: {ex['error']}"
    if kind == "missing_row":
        return f"{_key(key)}, external in row {_key(bytes(parent))}"
    if kind == "leaf_mismatch":
        return (f"row {_key(key)}: {ex['row_leaves']} leaves, its parent row {_key(bytes(parent))} "
                f"says {ex['ref_leaves']}")
    return _key(key)


def check_parquet(spark, rows_dir: str | Path, *, max_tokens: int,
                  format_version: int = fmt.FORMAT_VERSION,
                  dictionary: fmt.PresetDictionary | None = None) -> dict[str, Any]:
    """Every row of a prefix rows dataset checked in Spark (see the module docstring), each
    row decoded as a row of a ``format_version`` build (the build's own version) with the
    build's preset ``dictionary`` (the catalog's: the one readers will use); returns
    its summary (rows, bytes, root leaves and digest, deepest row, largest fragment) or raises
    ``_Invalid`` naming the faults found, with examples."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (BinaryType, BooleanType, IntegerType, LongType, StringType,
                                   StructField, StructType)

    schema = StructType([
        StructField("key", BinaryType(), False), StructField("leaves", LongType(), False),
        StructField("is_row", BooleanType(), False), StructField("parent", BinaryType(), True),
        StructField("error", StringType(), True), StructField("nodes", IntegerType(), False),
        StructField("bytes", LongType(), False), StructField("digest", StringType(), True),
    ])
    facts = (spark.read.parquet(str(rows_dir)).select("prefix", "node", "depth", "leaves")
             .mapInArrow(functools.partial(_facts_of_rows, max_tokens=max_tokens,
                                           format_version=format_version,
                                           dictionary=dictionary.data if dictionary else None), schema))
    is_row, ref = F.col("is_row"), ~F.col("is_row")
    per_key = facts.groupBy("key").agg(
        F.count(F.when(is_row, 1)).alias("n_rows"),
        F.count(F.when(ref, 1)).alias("n_refs"),
        F.max(F.when(is_row, F.col("leaves"))).alias("row_leaves"),
        F.max(F.when(ref, F.col("leaves"))).alias("ref_leaves"),
        F.max("parent").alias("parent"),
        F.max("error").alias("error"),
        F.max("nodes").alias("nodes"),
        F.sum("bytes").alias("bytes"),
        F.max("digest").alias("digest"),
    )
    root = F.length("key") == 0
    kind = (F.when(F.col("error").isNotNull(), "undecodable")
            .when(F.col("n_rows") > 1, "duplicate_row")
            .when(F.col("n_refs") > 1, "duplicate_reference")
            .when(F.col("n_rows") == 0, "missing_row")
            .when(~root & (F.col("n_refs") == 0), "orphan_row")
            .when(~root & (F.col("row_leaves") != F.col("ref_leaves")), "leaf_mismatch"))
    per_key = per_key.withColumn("fault", kind)
    example = F.struct("key", "parent", "row_leaves", "ref_leaves", "error")
    summary = per_key.agg(
        F.sum("n_rows").alias("rows"),
        F.sum("bytes").alias("bytes"),
        F.sum(F.when(root, F.col("n_rows"))).alias("roots"),
        F.max(F.when(root, F.col("row_leaves"))).alias("root_leaves"),
        F.max(F.when(root, F.col("digest"))).alias("root_digest"),
        F.max(F.when(F.col("n_rows") > 0, F.length("key"))).alias("max_key_bytes"),
        F.max("nodes").alias("max_nodes"),
        *[F.count(F.when(F.col("fault") == k, 1)).alias(f"n_{k}") for k in FAULTS],
        # one example per kind, the smallest key: bounded whatever the number of faults
        *[F.min(F.when(F.col("fault") == k, example)).alias(f"ex_{k}") for k in FAULTS],
    ).collect()[0]
    faults = [f"{summary[f'n_{k}']} {text} (for example {_example(k, summary[f'ex_{k}'])})"
              for k, text in FAULTS.items() if summary[f"n_{k}"]]
    if summary["roots"] != 1 and not summary["n_duplicate_row"]:
        faults.append("no root row (prefix '')")
    if faults:
        raise _Invalid("the prefix rows Parquet: " + "; ".join(faults))
    return {
        "rows": int(summary["rows"]),
        "bytes": int(summary["bytes"]),
        "root_leaves": int(summary["root_leaves"]),
        "root_digest": summary["root_digest"],
        "max_depth": int(summary["max_key_bytes"]) // 4,
        "max_nodes": int(summary["max_nodes"]),
    }


# --------------------------------------------------------------------------- PostgreSQL


def check_table(conn: psycopg.Connection, schema: str, table: str, parquet: Mapping[str, Any]) -> dict[str, int]:
    """The build's table against the Parquet's summary: row count and root row (the bytes are
    compared after the walk, whose findings say more)."""
    ident = sql.Identifier(schema, table)
    rows, key_bytes, node_bytes = conn.execute(
        sql.SQL("SELECT count(*), coalesce(sum(octet_length(prefix)), 0), "
                "coalesce(sum(octet_length(node)), 0) FROM {}").format(ident)
    ).fetchone()
    if rows != parquet["rows"]:
        raise _Invalid(f"{rows} rows in PostgreSQL, the Parquet holds {parquet['rows']}")
    root = conn.execute(sql.SQL("SELECT node FROM {} WHERE prefix = ''").format(ident)).fetchone()
    if root is None:
        raise _Invalid("no root row (prefix '') in PostgreSQL")
    if hashlib.sha256(bytes(root[0])).hexdigest() != parquet["root_digest"]:
        raise _Invalid("the root row in PostgreSQL differs from the Parquet's")
    return {"rows": int(rows), "bytes": int(key_bytes) + int(node_bytes)}


def walk_facts(
    conn: psycopg.Connection, schema: str, table: str, facts: Sequence[Sequence[int]],
    format_version: int = fmt.FORMAT_VERSION, dictionary: fmt.PresetDictionary | None = None,
) -> int:
    """Walk every fact from the root to its end, every row read as a row of a
    ``format_version`` build; returns how many walked (all, or raises).
    Where a fact crosses from an external node into that node's row, the row's leaves must
    be the node's."""
    query = sql.SQL("SELECT prefix, node FROM {}.{} WHERE prefix = ANY(%s)").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    # per fact: the length of the prefix whose row it continues in, and what its parent row
    # says of that row's leaves (None for the root)
    todo: dict[int, tuple[int, int | None]] = {i: (0, None) for i in range(len(facts))}
    while todo:
        keys = {fmt.encode_prefix(facts[i][:r]) for i, (r, _) in todo.items()}
        found = {bytes(p): bytes(n) for p, n in conn.execute(query, (list(keys),)).fetchall()}
        frags = {}
        for key, node in found.items():
            try:
                frags[key] = fmt.decode_fragment(node, format_version, dictionary)
            except FormatError as exc:
                raise _Invalid(f"row {_key(key)} in PostgreSQL does not decode: {exc}") from None
        nxt: dict[int, tuple[int, int | None]] = {}
        for i, (r, expected) in todo.items():
            fact = facts[i]
            key = fmt.encode_prefix(fact[:r])
            if key not in frags:
                raise _Invalid(f"fact {list(fact)}: no row for its prefix {list(fact[:r])}")
            frag = frags[key]
            if expected is not None and int(frag.leaves[0]) != expected:
                raise _Invalid(
                    f"row {_key(key)}: {int(frag.leaves[0])} leaves, its parent row says {expected} "
                    "(sum(child_leaves) + ends != leaves)")
            node, pos = 0, r
            while True:
                if node and frag.external[node]:
                    nxt[i] = (pos, int(frag.leaves[node]))
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


# --------------------------------------------------------------------------- the stage


def validate_build(
    conn: psycopg.Connection,
    schema: str,
    build_id: int,
    *,
    expected_rows: int,
    expected_facts: int | None,
    sample: Sequence[Sequence[int]],
    spark=None,
    rows_dir: str | Path | None = None,
    max_tokens: int = fmt.MAX_FRAGMENT_LEVELS,
) -> dict[str, Any]:
    """Validate one build against the Parquet it was loaded from (``rows_dir``, default the
    ``parquet_path`` its load recorded; ``spark`` default the active session); sets
    ``validated``, or ``failed`` and raises ``ValidationFailed``."""
    build = pgcatalog.get_build(conn, schema, build_id)
    if build is None or build["dropped_at"] is not None:
        raise LoadError(f"build {build_id} does not exist or was dropped")
    if build["status"] not in VALIDATES:
        raise LoadError(f"build {build_id} has status {build['status']!r}; validate a loaded build")
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise LoadError("validation checks every row in Spark: no Spark session is active")
    rows_dir = rows_dir or build["parquet_path"]
    if not rows_dir:
        raise LoadError(f"build {build_id} records no Parquet path: give the rows directory")
    table = build["table_name"]
    timings: dict[str, float] = {}
    try:
        try:
            dictionary = pgcatalog.build_dictionary(conn, schema, build_id)
        except FormatError as exc:
            raise _Invalid(f"the build's preset dictionary in the catalog: {exc}") from None
        started = time.monotonic()
        parquet = check_parquet(spark, rows_dir, max_tokens=max_tokens,
                                format_version=build["format_version"], dictionary=dictionary)
        timings["spark_seconds"] = time.monotonic() - started
        if parquet["rows"] != expected_rows or (build["rows"] is not None and build["rows"] != expected_rows):
            raise _Invalid(f"the Parquet holds {parquet['rows']} rows, its metadata {expected_rows}, "
                           f"the load recorded {build['rows']}")
        if expected_facts is not None and parquet["root_leaves"] != expected_facts:
            raise _Invalid(f"root has {parquet['root_leaves']} facts, the prefix rows counted {expected_facts}")
        if build["depth"] != parquet["max_depth"]:
            raise _Invalid(f"the deepest row has {parquet['max_depth']} tokens, the catalog says {build['depth']}")
        started = time.monotonic()
        found = check_table(conn, schema, table, parquet)
        walked = walk_facts(conn, schema, table, sample, build["format_version"], dictionary)
        if found["bytes"] != parquet["bytes"]:
            raise _Invalid(f"PostgreSQL holds {found['bytes']} bytes of keys and fragments, the Parquet "
                           f"{parquet['bytes']}: some row differs")
        timings["pg_seconds"] = time.monotonic() - started
    except _Invalid as exc:
        message = f"validation failed: {exc}"
        pgcatalog.set_status(conn, schema, build_id, "failed", message=message[:2000])
        pgcatalog.release_name(conn, schema, build_id)
        log.error("build %d: %s", build_id, message)
        raise ValidationFailed(f"build {build_id}: {message}") from None
    pgcatalog.set_status(conn, schema, build_id, "validated", message=None)
    result = {"build_id": build_id, "rows": found["rows"], "bytes": found["bytes"],
              "root_leaves": parquet["root_leaves"], "max_depth": parquet["max_depth"],
              "max_nodes": parquet["max_nodes"], "walked": walked,
              **{k: round(v, 3) for k, v in timings.items()}}
    log.info("build %d validated: %s", build_id, result)
    return result


def sample_facts(spark, cfg: Config, vocab_name: str, n: int, total: int | None) -> list[list[int]]:
    """About ``n`` valid facts drawn at random from the tokens Parquet (a sample, not the data)."""
    from pyspark.sql import functions as F

    from refactx_pipeline.stages.prefix_rows import reject_reason

    tokens = spark.read.parquet(str(stage_input(cfg, "validate", "tokenize", vocab_name, "tokens"))).select("token_ids")
    if total and total > n:  # sampled first: the reject rule runs on the sample only
        tokens = tokens.sample(fraction=min(1.0, 3.0 * n / total), seed=17)
    valid = tokens.where(reject_reason().isNull())
    return [list(r[0]) for r in valid.orderBy(F.rand(17)).limit(n).collect()]


def validate_all(spark, cfg: Config, dsn: str, build_ids: Mapping[str, int]) -> dict[str, Any]:
    """Validate the builds a load made (``build_ids``: vocabulary -> build id), each against
    this run's Parquet of its vocabulary."""
    result: dict[str, Any] = {}
    with connect(dsn, autocommit=True, statement_timeout_ms=STAGE_STATEMENT_TIMEOUT_MS) as conn:
        builds = pgcatalog.stage_builds(conn, cfg, build_ids, stage="validate", statuses=VALIDATES)
        for vocab, info in builds.items():
            tree_counts = json.loads(stage_input(cfg, "validate", "prefix_rows", vocab, "counts.json").read_text())
            rows_dir = stage_input(cfg, "validate", "prefix_rows", vocab, "rows")
            if info["parquet_path"] and Path(info["parquet_path"]).resolve() != rows_dir.resolve():
                raise LoadError(f"stage validate: build {info['build_id']} was loaded from {info['parquet_path']}, "
                                f"this run's prefix rows of {vocab} are {rows_dir}")
            sample = sample_facts(spark, cfg, vocab, cfg.pg.validate_sample, tree_counts.get("facts"))
            result[vocab] = validate_build(
                conn, cfg.pg.schema, int(info["build_id"]),
                expected_rows=parquet_row_count(parquet_files(rows_dir)),
                expected_facts=tree_counts.get("distinct_facts"),
                sample=sample, spark=spark, rows_dir=rows_dir, max_tokens=cfg.tokenize.max_tokens,
            )
    write_counts(cfg, "validate", {"vocabularies": result})
    return result


def run(ctx: StageContext) -> StageCounts:
    """The stage: Spark checks every row of the Parquet and samples facts, ``ctx.dsn`` holds
    the builds ``ctx.build_ids`` names (vocabulary -> build id, what the load returned)."""
    return validate_all(ctx.spark, ctx.cfg, ctx.dsn, ctx.build_ids)
