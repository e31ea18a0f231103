"""Stage 7 -- load: Parquet prefix rows -> a fresh PostgreSQL partition per build.

Per vocabulary: apply ``sql/schema.sql``; clean leftovers of killed loads; insert a
``loading`` build; create ``{schema}.tree_b<build_id>`` (no index); bulk binary COPY
from the Parquet files, the files dealt over ``cfg.pg.load_workers`` connections,
with the PGCOPY stream pre-encoded by numpy per Arrow batch; then the unique B-tree,
ANALYZE, CHECK + ATTACH (``refactx_pipeline.catalog.pgcatalog.attach``); record counts and bytes, status
``loaded``. The build's provenance blocks (``verbalize/provenance_blocks``) take the same
path into ``{schema}.provenance_b<build_id>``, with an empty block for every key no fact falls
in (a unique B-tree on block, attached to ``{schema}.provenance_blocks`` before the tree is
attached); a work directory without them loads the tree alone (``provenance_rows`` null:
lookups answer "provenance unavailable").
The served index is never touched: activation is a separate step, and
validate and activate are handed the build ids this stage returns (``build_ids_of``).
A load killed half-way leaves an unattached table and a ``loading`` row whose lock is
free; the next run fails and drops them. Re-running a load makes a new build.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.common import DICTIONARY_FILE, stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_index.tree import format as fmt
from refactx_index.tree import provenance as prov
from refactx_pipeline.config import Config, VocabularyConfig
from refactx_pipeline.db import STAGE_STATEMENT_TIMEOUT_MS, connect
from refactx_pipeline.errors import ConfigError, LoadError
from refactx_index.errors import FormatError
from refactx_index.vocab import open_vocabulary

log = logging.getLogger(__name__)

STAGE = "load"
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)
COPY_SQL = "COPY {schema}.{table} (build_id, prefix, node) FROM STDIN (FORMAT BINARY)"
COPY_PROVENANCE_SQL = "COPY {schema}.{table} (build_id, block, data) FROM STDIN (FORMAT BINARY)"
BATCH_ROWS = 65536


# --------------------------------------------------------------------------- PGCOPY


_HEAD = np.dtype([("fields", ">i2"), ("id_len", ">i4"), ("build_id", ">i8"), ("prefix_len", ">i4")])


def _fixed_width_binary(raw: np.ndarray, width: int) -> pa.Array:
    """A binary array whose every element is ``width`` consecutive bytes of ``raw``."""
    n = raw.nbytes // width
    offsets = np.arange(n + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def encode_copy_rows(build_id: int, prefix: pa.Array, node: pa.Array) -> memoryview:
    """PGCOPY binary tuples ``(build_id int8, prefix bytea, node bytea)`` for a batch.

    Vectorized: the fixed fields of all rows are one numpy structured array, and Arrow's
    element-wise binary join lays out ``head | prefix | node length | node`` per row in
    one contiguous buffer, which is the COPY stream (64-bit offsets: no 2 GiB batch
    limit). No header/trailer.
    """
    if prefix.null_count or node.null_count:
        raise LoadError("prefix/node columns must not contain nulls")
    n = len(prefix)
    head = np.empty(n, dtype=_HEAD)
    head["fields"], head["id_len"], head["build_id"] = 3, 8, build_id
    head["prefix_len"] = pc.binary_length(prefix).to_numpy(zero_copy_only=False)
    node_len = pc.binary_length(node).to_numpy(zero_copy_only=False).astype(">i4")
    rows = pc.binary_join_element_wise(
        _fixed_width_binary(head.view(np.uint8), _HEAD.itemsize),
        prefix.cast(pa.large_binary()),
        _fixed_width_binary(node_len.view(np.uint8), 4),
        node.cast(pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),
    )
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset : rows.offset + n + 1]
    return memoryview(rows.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


_BLOCK_HEAD = np.dtype([("fields", ">i2"), ("id_len", ">i4"), ("build_id", ">i8"),
                        ("block_len", ">i4"), ("block", ">i8"), ("data_len", ">i4")])


def encode_block_rows(build_id: int, block: pa.Array, data: pa.Array) -> memoryview:
    """PGCOPY binary tuples ``(build_id int8, block int8, data bytea)`` for a batch of
    provenance blocks; vectorized like :func:`encode_copy_rows`. No header/trailer."""
    if block.null_count or data.null_count:
        raise LoadError("provenance block/data columns must not contain nulls")
    n = len(block)
    head = np.empty(n, dtype=_BLOCK_HEAD)
    head["fields"], head["id_len"], head["build_id"], head["block_len"] = 3, 8, build_id, 8
    head["block"] = block.to_numpy(zero_copy_only=False)
    head["data_len"] = pc.binary_length(data).to_numpy(zero_copy_only=False)
    rows = pc.binary_join_element_wise(
        _fixed_width_binary(head.view(np.uint8), _BLOCK_HEAD.itemsize), data.cast(pa.large_binary()),
        pa.scalar(b"", pa.large_binary()),
    )
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset : rows.offset + n + 1]
    return memoryview(rows.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


def parquet_batches(paths: list[Path], columns: list[str], batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The ``columns`` of Parquet files, batch by batch."""
    for path in paths:
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns)


def _copy_batches(dsn: str, schema: str, table: str, copy_sql: str, batches: Iterable[pa.RecordBatch],
                  encode) -> int:
    """COPY Arrow batches into ``table`` over one connection, one COPY statement and one
    transaction, each batch encoded by ``encode(batch)``; returns the rows copied."""
    stmt = psycopg.sql.SQL(copy_sql).format(
        schema=psycopg.sql.Identifier(schema), table=psycopg.sql.Identifier(table)
    )
    rows = 0
    with connect(dsn, statement_timeout_ms=STAGE_STATEMENT_TIMEOUT_MS) as conn, conn.cursor() as cur:
        with cur.copy(stmt) as copy:
            copy.write(COPY_HEADER)
            for batch in batches:
                copy.write(encode(batch))
                rows += batch.num_rows
            copy.write(COPY_TRAILER)
        if cur.rowcount != rows:
            raise LoadError(f"COPY stored {cur.rowcount} rows, expected {rows}")
    return rows


def copy_files(dsn: str, schema: str, build_id: int, paths: list[Path], batch_rows: int = BATCH_ROWS) -> int:
    """COPY Parquet prefix rows into the build's tree table; returns the rows copied."""
    return _copy_batches(dsn, schema, pgcatalog.table_name(build_id), COPY_SQL,
                         parquet_batches(paths, ["prefix", "node"], batch_rows),
                         lambda batch: encode_copy_rows(build_id, batch.column(0), batch.column(1)))


def copy_provenance_blocks(dsn: str, schema: str, build_id: int, batches: Iterable[pa.RecordBatch]) -> int:
    """COPY provenance blocks (``block``, ``data`` batches) into the build's provenance table;
    returns the blocks copied."""
    return _copy_batches(dsn, schema, pgcatalog.provenance_table_name(build_id), COPY_PROVENANCE_SQL, batches,
                         lambda batch: encode_block_rows(build_id, batch.column("block"), batch.column("data")))


def copy_in_parallel(cfg: Config, files: list[Path], copy_group: "Callable[[list[Path]], int]") -> int:
    """Rows copied by ``copy_group`` over ``files`` split into ``pg.load_workers`` groups, one
    connection each (the tree's rows and the provenance rows load the same way)."""
    workers = max(1, min(cfg.pg.load_workers, len(files)))
    with ThreadPoolExecutor(workers, thread_name_prefix="copy") as pool:
        return sum(pool.map(copy_group, split_files(files, workers)))


def split_files(files: list[Path], parts: int) -> list[list[Path]]:
    """Files dealt to ``parts`` workers, largest first, to the least loaded one."""
    groups: list[list[Path]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for f in sorted(files, key=lambda p: p.stat().st_size, reverse=True):
        i = sizes.index(min(sizes))
        groups[i].append(f)
        sizes[i] += f.stat().st_size
    return [g for g in groups if g]


# --------------------------------------------------------------------------- inputs


def provenance_files(cfg: Config) -> list[Path]:
    """The verbalize stage's provenance blocks (Parquet); none when it wrote none (a work
    directory verbalized before provenance was packed: the build loads without it)."""
    directory = cfg.stage_dir("verbalize") / "provenance_blocks"
    return sorted(p for p in directory.glob("*.parquet") if p.stat().st_size) if directory.is_dir() else []


def empty_blocks(bits: int, stored: np.ndarray) -> pa.RecordBatch:
    """A block without sources for every key of a build with ``bits`` that ``stored`` (the keys
    verbalize wrote, each once) lacks: every key has a block, so a lookup that finds none
    knows the build is damaged."""
    keys = prov.block_keys(bits)
    if len(np.unique(stored)) != len(stored):
        raise LoadError("verbalize/provenance_blocks holds a block key twice")
    if len(stored) and (int(stored.min()) < keys.start or int(stored.max()) >= keys.stop):
        raise LoadError(f"verbalize/provenance_blocks holds a block key outside the {bits} bits its counts say")
    missing = np.setdiff1d(np.arange(keys.start, keys.stop, dtype=np.int64), stored, assume_unique=True)
    empty = [prov.encode_block(int(k), bits, np.zeros(0, np.int64), np.zeros(0), np.zeros((3, 0)), np.zeros((3, 0)),
                               np.zeros(0), np.zeros(0), []) for k in missing]
    return pa.RecordBatch.from_pydict({"block": pa.array(missing, pa.int64()), "data": pa.array(empty, pa.binary())})


def parquet_files(rows_dir: Path) -> list[Path]:
    files = sorted(p for p in rows_dir.glob("*.parquet") if p.stat().st_size)
    if not files:
        raise LoadError(f"no Parquet files under {rows_dir}: run the prefix_rows stage first")
    return files


def parquet_row_count(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def tokenizer_meta(cfg: Config, vocab: VocabularyConfig) -> dict[str, Any]:
    """``tokenize/<vocab>/meta.json`` when the tokenize job wrote it, else computed here."""
    path = cfg.stage_dir("tokenize") / vocab.name / "meta.json"
    if path.exists():
        meta = json.loads(path.read_text())
        missing = {"sha256", "vocab_size"} - set(meta)
        if missing:
            raise LoadError(f"{path} lacks {', '.join(sorted(missing))}")
        return meta
    try:
        vocabulary = open_vocabulary(vocab.name, vocab.path)
    except ConfigError as exc:
        raise LoadError(f"{path} is absent and vocabulary {vocab.name!r} cannot be opened: {exc}") from exc
    return {
        "name": vocabulary.name,
        "path": vocabulary.path,
        "sha256": vocabulary.sha256,
        "vocab_size": vocabulary.vocab_size,
        "fact_prefix": cfg.tokenize.fact_prefix,
        "fact_suffix": cfg.tokenize.fact_suffix,
    }


# --------------------------------------------------------------------------- load


def rows_format(cfg: Config, vocab: str, tree_counts: dict[str, Any]) -> tuple[int, fmt.PresetDictionary | None]:
    """The format version of the rows the prefix rows stage wrote (its counts say; rows of a
    stage that did not say are version 2) and their preset dictionary, checked against the
    size and crc32 the counts recorded."""
    version = int(tree_counts.get("format_version", 2))
    if version not in fmt.READABLE_VERSIONS:
        raise LoadError(f"prefix rows of {vocab!r} are in format version {version}; this loader "
                        f"reads {fmt.READABLE_VERSIONS}")
    size = int(tree_counts.get("dictionary_bytes") or 0)
    if version < 3 or not size:
        return version, None
    path = stage_input(cfg, STAGE, "prefix_rows", vocab, DICTIONARY_FILE)
    try:
        dictionary = fmt.PresetDictionary(path.read_bytes())
    except FormatError as exc:
        raise LoadError(f"{path}: {exc}") from exc
    if len(dictionary.data) != size or dictionary.crc != tree_counts.get("dictionary_crc32"):
        raise LoadError(f"{path} is not the dictionary the prefix rows stage wrote: {len(dictionary.data)} "
                        f"bytes, crc32 {dictionary.crc:08x}; its counts say {size} bytes, crc32 "
                        f"{tree_counts.get('dictionary_crc32')}")
    return version, dictionary


def load_vocabulary(cfg: Config, dsn: str, vocab: VocabularyConfig) -> dict[str, Any]:
    """Load one vocabulary's rows as a new build (status ``loaded``, not active)."""
    schema = cfg.pg.schema
    rows_dir = stage_input(cfg, STAGE, "prefix_rows", vocab.name, "rows")
    tree_counts = json.loads(stage_input(cfg, STAGE, "prefix_rows", vocab.name, "counts.json").read_text())
    files = parquet_files(rows_dir)
    expected_rows = parquet_row_count(files)
    format_version, dictionary = rows_format(cfg, vocab.name, tree_counts)
    meta = tokenizer_meta(cfg, vocab)
    name = cfg.index_name(vocab.name)
    with connect(dsn, autocommit=True, statement_timeout_ms=STAGE_STATEMENT_TIMEOUT_MS) as conn:
        pgcatalog.apply_schema(conn, schema)
        pgcatalog.grant_reader(conn, schema, cfg.pg.reader_role)
        cleaned = pgcatalog.clean_leftovers(conn, schema)
        pgcatalog.ensure_name_free(conn, schema, name)  # refused before anything is written
        build_id = pgcatalog.create_build(
            conn,
            schema,
            {
                "name": name,
                "vocabulary": meta.get("name", vocab.name),
                "vocabulary_sha256": meta["sha256"],
                "vocab_size": int(meta["vocab_size"]),
                "source": cfg.paths.source,
                "dump_date": cfg.paths.dump_date,
                "depth": int(tree_counts["max_depth"]),  # the deepest row: lookups speculate no deeper
                "subtree_threshold": cfg.tree.subtree_threshold,
                "format_version": format_version,
                "fact_prefix": meta.get("fact_prefix", cfg.tokenize.fact_prefix),
                "fact_suffix": meta.get("fact_suffix", cfg.tokenize.fact_suffix),
                "parquet_path": str(rows_dir),
                "index_kind": cfg.index_kind,
            },
        )
        log.info("build %d (%s): loading %d rows from %d files", build_id, name, expected_rows, len(files))
        try:
            pgcatalog.claim_name(conn, schema, name, build_id)
            if dictionary is not None:
                pgcatalog.store_dictionary(conn, schema, build_id, dictionary.data)
            started = time.monotonic()
            copied = copy_in_parallel(cfg, files, lambda group: copy_files(dsn, schema, build_id, group))
            copy_s = time.monotonic() - started
            if copied != expected_rows:
                raise LoadError(f"copied {copied} rows, the Parquet holds {expected_rows}")
            provenance = load_provenance(cfg, dsn, conn, build_id)
            pgcatalog.attach(conn, schema, build_id)
            pgcatalog.grant_reader(conn, schema, cfg.pg.reader_role, pgcatalog.table_name(build_id))
            table_bytes, index_bytes = pgcatalog.relation_bytes(
                conn, schema, pgcatalog.table_name(build_id)
            )
            facts = tree_counts.get("distinct_facts")
            pgcatalog.set_status(
                conn, schema, build_id, "loaded",
                rows=copied, facts=facts, table_bytes=table_bytes, index_bytes=index_bytes,
                provenance_rows=provenance["rows"], provenance_layout=provenance.get("layout"),
                provenance_block_bits=provenance.get("block_bits"), loaded_at=_now(conn),
            )
        except BaseException as exc:
            # a clean failure: drop the table, keep the row as history
            pgcatalog.set_status(conn, schema, build_id, "failed", message=f"load failed: {exc}"[:2000])
            pgcatalog.release_name(conn, schema, build_id)
            pgcatalog.drop_build_table(conn, schema, build_id)
            raise
        finally:
            pgcatalog.release_loading_lock(conn, build_id)
    counts = {
        "build_id": build_id,
        "name": name,
        "table_name": pgcatalog.table_name(build_id),
        "rows": copied,
        "facts": facts,
        "table_bytes": table_bytes,
        "index_bytes": index_bytes,
        "bytes_per_fact": (table_bytes + index_bytes) / facts if facts else None,
        "copy_seconds": round(copy_s, 3),
        "rows_per_second": round(copied / copy_s) if copy_s > 0 else None,
        "provenance": provenance,
        "cleaned": cleaned,
    }
    log.info("build %d loaded: %s", build_id, counts)
    return counts


def load_provenance(cfg: Config, dsn: str, conn: psycopg.Connection, build_id: int) -> dict[str, Any]:
    """COPY the build's provenance blocks, index and attach them; their sources (``rows``),
    layout, block bits, blocks, bytes and seconds (rows None: the work directory has no
    provenance, the table stays empty and unattached and is dropped with the build)."""
    schema = cfg.pg.schema
    files = provenance_files(cfg)
    if not files and cfg.input.facts:  # fact texts name no entities: nothing to trace
        log.info("build %d: fact texts (input.facts) carry no provenance", build_id)
        return {"rows": None}
    if not files:
        log.warning("build %d: %s has no provenance blocks: loaded without provenance (facts lookup "
                    "answers 'provenance unavailable'; re-run verbalize to add it)",
                    build_id, cfg.stage_dir("verbalize"))
        return {"rows": None}
    counts_path = stage_input(cfg, STAGE, "verbalize", "counts.json")
    packed = json.loads(counts_path.read_text()).get("provenance_blocks")
    if not packed:
        raise LoadError(f"{counts_path} does not say how verbalize packed its provenance blocks: re-run verbalize")
    bits = int(packed["bits"])
    written = pa.concat_tables(pq.read_table(f, columns=["block", "sources"]) for f in files)
    sources = int(pc.sum(written.column("sources")).as_py() or 0)
    empty = empty_blocks(bits, written.column("block").to_numpy())
    started = time.monotonic()
    copied = copy_in_parallel(cfg, files, lambda group: copy_provenance_blocks(
        dsn, schema, build_id, parquet_batches(group, ["block", "data"])))
    copied += copy_provenance_blocks(dsn, schema, build_id, [empty])
    copy_s = time.monotonic() - started
    if copied != written.num_rows + empty.num_rows or copied != len(prov.block_keys(bits)):
        raise LoadError(f"copied {copied} provenance blocks, the build has {len(prov.block_keys(bits))}")
    pgcatalog.attach_provenance(conn, schema, build_id)
    table = pgcatalog.provenance_table_name(build_id)
    pgcatalog.grant_reader(conn, schema, cfg.pg.reader_role, table)
    table_bytes, index_bytes = pgcatalog.relation_bytes(conn, schema, table)
    return {"rows": sources, "layout": prov.LAYOUT_BLOCKS, "block_bits": bits, "blocks": copied,
            "empty_blocks": empty.num_rows, "table_bytes": table_bytes, "index_bytes": index_bytes,
            "copy_seconds": round(copy_s, 3), "attach_seconds": round(time.monotonic() - started - copy_s, 3)}


def _now(conn: psycopg.Connection):
    return conn.execute("SELECT now()").fetchone()[0]


def load_all(cfg: Config, dsn: str) -> dict[str, Any]:
    """Load every configured vocabulary and write ``load/counts.json``; ``build_ids`` in the
    result names the new build of each vocabulary (what validate and activate are given)."""
    loaded = {v.name: load_vocabulary(cfg, dsn, v) for v in cfg.tokenize.vocabularies}
    result = {"vocabularies": loaded, "build_ids": {v: c["build_id"] for v, c in loaded.items()}}
    write_counts(cfg, STAGE, result)
    return result


def build_ids_of(counts: dict[str, Any]) -> dict[str, int]:
    """The builds a load made (its returned counts), per vocabulary."""
    return {vocab: int(build_id) for vocab, build_id in counts["build_ids"].items()}


def run(ctx: StageContext) -> StageCounts:
    """The stage: the database does the work, in ``ctx.dsn``; no Spark."""
    return load_all(ctx.cfg, ctx.dsn)
