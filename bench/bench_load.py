"""Benchmark: prefix rows + PostgreSQL load on synthetic facts with realistic shared prefixes.

Prints, per (T, B): rows, rows per fact, Parquet node bytes, PostgreSQL table + index bytes
per fact (pg_table_size + pg_indexes_size = pg_total_relation_size), and COPY rows/s of the
pre-encoded path beside a one-``write_row``-per-row COPY of the same rows in the same run.

    .venv/bin/python bench/bench_load.py [--facts 1000000] [--configs 64:4096,16:1024]

PostgreSQL: ``--dsn`` (an admin database) or 127.0.0.1:5432; a temporary database is
created and dropped. Facts look like ``<subject> <property> <object> .``: a subject of
2-5 tokens shared by ~8 facts, one of 300 properties, an object of 1-6 tokens.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_pipeline.stages import load, prefix_rows  # noqa: E402
from refactx_pipeline.stages.contract import StageContext  # noqa: E402
from refactx_pipeline.common import spark_session  # noqa: E402
from refactx_pipeline.config import Config, VocabularyConfig  # noqa: E402
from tests.pgtree import fresh_database  # noqa: E402

VOCAB = "bench"


def synthetic_facts(n: int, seed: int = 0) -> pa.Table:
    """``n`` token sequences ' <S> <P> <O> .' built with numpy (vocabulary of 150k ids)."""
    rng = np.random.default_rng(seed)
    vocab = 150_000
    lt, gt, dot = 366, 29, 13  # ' <', '>', ' .' stand-ins shared by every fact
    n_subj = max(n // 8, 1)
    subj_len = rng.integers(2, 6, n_subj)
    subj_tok = [rng.integers(1000, vocab, l) for l in subj_len]
    # Zipf-ish first subject tokens: many subjects share their first token(s)
    first = (rng.zipf(1.3, n_subj) % 5000) + 1000
    for s, f in zip(subj_tok, first):
        s[0] = f
    props = [rng.integers(1000, vocab, l) for l in rng.integers(2, 5, 300)]
    subj = rng.integers(0, n_subj, n)
    prop = (rng.zipf(1.5, n) - 1) % 300
    obj_len = rng.integers(1, 7, n)
    obj_vals = rng.integers(1000, vocab, int(obj_len.sum()))
    obj_off = np.concatenate(([0], np.cumsum(obj_len)))
    seqs = []
    for i in range(n):  # assembling the input only; not part of what is measured
        seqs.append(np.concatenate(([lt], subj_tok[subj[i]], [gt, lt], props[prop[i]], [gt, lt],
                                    obj_vals[obj_off[i]:obj_off[i + 1]], [gt, dot])))
    lengths = np.fromiter((s.size for s in seqs), np.int64, n)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = pa.array(np.concatenate(seqs).astype(np.int32))
    tokens = pa.ListArray.from_arrays(pa.array(offsets), values)
    return pa.table({"fact_id": pa.array(np.arange(n, dtype=np.int64)), "token_ids": tokens})


def write_row_copy(dsn: str, files: list[Path]) -> tuple[int, float]:
    """The baseline: the same rows through one ``write_row`` call per row."""
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE baseline (build_id bigint, prefix bytea, node bytea)")
        conn.commit()
        rows, started = 0, time.monotonic()
        with conn.cursor().copy("COPY baseline (build_id, prefix, node) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["int8", "bytea", "bytea"])
            for f in files:
                for batch in pq.ParquetFile(f).iter_batches(columns=["prefix", "node"]):
                    for p, nd in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                        cp.write_row((1, p, nd))
                        rows += 1
        conn.commit()
        elapsed = time.monotonic() - started
        conn.execute("DROP TABLE baseline")
    return rows, elapsed


def single_copy(dsn: str, files: list[Path], schema: str) -> tuple[int, float]:
    """The pre-encoded path on one connection (same rows, for a like-for-like rate)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {schema}.tree_b999999 (LIKE {schema}.tree)")
    started = time.monotonic()
    rows = load.copy_files(dsn, schema, 999999, files)
    elapsed = time.monotonic() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {schema}.tree_b999999")
    return rows, elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--facts", type=int, default=1_000_000)
    ap.add_argument("--configs", default="64:4096", help="comma-separated T:B pairs (tree.subtree_threshold:tree.max_subtree_tokens)")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    configs = [tuple(int(x) for x in c.split(":")) for c in args.configs.split(",")]

    work = Path(tempfile.mkdtemp(prefix="refactx_bench_load_"))
    try:
        with fresh_database(args.dsn, "refactx_bench") as dsn:
            run_configs(args, configs, work, dsn)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def run_configs(args, configs: list[tuple[int, int]], work: Path, dsn: str) -> None:
    """Build and load every (D, T) into the database ``dsn``, printing the figures."""
    spark = None
    try:
        t0 = time.monotonic()
        table = synthetic_facts(args.facts)
        cfg = Config().updated({
            "paths.build_root": str(work),
            "pg.load_workers": args.workers,
            "spark.master": "local[*]",
            "spark.shuffle_partitions": 8,
            "spark.conf": {"spark.ui.showConsoleProgress": "false"},
            "tokenize.vocabularies": [VocabularyConfig(name=VOCAB, path="")],
        })
        tok_dir = cfg.stage_dir("tokenize") / VOCAB
        (tok_dir / "tokens").mkdir(parents=True)
        pq.write_table(table, tok_dir / "tokens" / "part-0.parquet")
        (tok_dir / "meta.json").write_text(json.dumps({"name": VOCAB, "sha256": "0" * 64, "vocab_size": 150_000}))
        mean_len = float(np.mean(np.diff(table.column("token_ids").chunk(0).offsets.to_numpy())))
        print(f"facts: {args.facts:,} (mean {mean_len:.1f} tokens), generated in {time.monotonic() - t0:.1f}s")
        spark = spark_session(cfg, "bench_load")

        results = []
        for threshold, max_tokens in configs:
            # one index name per configuration: builds are loaded side by side, never activated
            cfg = cfg.updated({"tree.subtree_threshold": threshold, "tree.max_subtree_tokens": max_tokens,
                               "pg.index_name": f"{{source}}-{{vocabulary}}-t{threshold}-b{max_tokens}"})
            t = time.monotonic()
            tree = prefix_rows.run(StageContext(cfg, spark=spark))["vocabularies"][VOCAB]
            spark_s = time.monotonic() - t
            info = load.load_all(cfg, dsn)["vocabularies"][VOCAB]
            # pg_table_size + pg_indexes_size is pg_total_relation_size by definition
            total = info["table_bytes"] + info["index_bytes"]
            facts = tree["distinct_facts"]
            res = {
                "T": threshold, "B": max_tokens, "rows": tree["rows"],
                "rows/fact": tree["rows"] / facts,
                "parquet node B/fact": tree["node_bytes"] / facts,
                "pg B/fact": total / facts,
                "table B/fact": info["table_bytes"] / facts,
                "index B/fact": info["index_bytes"] / facts,
                "spark s": spark_s, "copy rows/s": info["rows_per_second"],
            }
            results.append(res)
            print(json.dumps(res))
            # the same rows through both COPY paths, one connection each
            files = load.parquet_files(cfg.stage_dir("prefix_rows") / VOCAB / "rows")
            n1, s1 = single_copy(dsn, files, cfg.pg.schema)
            n2, s2 = write_row_copy(dsn, files)
            print(f"COPY, {tree['rows']:,} rows, one connection: pre-encoded {n1 / s1:,.0f} rows/s "
                  f"({s1:.2f}s) vs write_row per row {n2 / s2:,.0f} rows/s ({s2:.2f}s): "
                  f"{s2 / s1:.1f}x; pre-encoded with {args.workers} workers: "
                  f"{info['rows_per_second']:,} rows/s")
        print()
        print(f"{'D':>3} {'T':>5} {'rows':>10} {'rows/fact':>10} {'node B/f':>9} {'table B/f':>10} "
              f"{'index B/f':>10} {'total B/f':>10} {'spark s':>8}")
        for r in results:
            print(f"{r['D']:>3} {r['T']:>5} {r['rows']:>10,} {r['rows/fact']:>10.3f} "
                  f"{r['parquet node B/fact']:>9.1f} {r['table B/fact']:>10.1f} {r['index B/fact']:>10.1f} "
                  f"{r['pg B/fact']:>10.1f} {r['spark s']:>8.1f}")
    finally:
        if spark is not None:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
