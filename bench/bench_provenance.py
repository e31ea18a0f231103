"""Benchmark: what provenance costs a build, and its serving lookup.

Writes ``--facts`` Wikidata-like provenance rows (verbalize/provenance: Q ids of 2-9 digits,
P ids of 1-4 digits; 62% item objects, 23% literals of 10-25 characters, 15% descriptions
of 20-60 characters; 2% of the facts with a second source) as Parquet, loads them by the
load stage's own COPY path into a build's provenance table (B-tree on fact_id, attach), and
prints bytes per fact (pg_table_size + pg_indexes_size), COPY and index seconds, and the
serving lookup: ``PgTreeIndex.provenance`` of 5 facts (an answer's worth), cold and warm.

    .venv/bin/python bench/bench_provenance.py [--facts 1000000] [--json out.json]

PostgreSQL: ``--dsn`` (an admin database) or 127.0.0.1:5432; a temporary database is
created and dropped.
"""

from __future__ import annotations

import argparse
import json
import statistics
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

from refactx_index.provenance import fact_id  # noqa: E402
from refactx_pipeline.catalog import pgcatalog  # noqa: E402
from refactx_pipeline.stages import load  # noqa: E402
from refactx_pipeline.stages.schemas import PROVENANCE  # noqa: E402
from tests.pgtree import fresh_database, load_tree  # noqa: E402


def synthetic_provenance(n: int, seed: int = 0) -> tuple[pa.Table, list[str]]:
    """(provenance rows of ``n`` facts, the texts of the first 1000 of them)."""
    rng = np.random.default_rng(seed)
    texts = [f"<entity {i}> <property {i % 300}> <object {i * 7}> ." for i in range(n)]
    ids = np.fromiter((fact_id(t) for t in texts), dtype=np.int64, count=n)
    extra = rng.random(n) < 0.02
    fid = np.concatenate([ids, ids[extra]])
    m = len(fid)
    draw = rng.random(m)

    def qids() -> np.ndarray:  # Q ids of 2-9 digits
        return np.char.add("Q", rng.integers(1, 10 ** rng.integers(2, 10, m)).astype(str))

    subject, obj = qids(), qids()
    prop = np.char.add("P", rng.integers(1, 8000, m).astype(str))
    item, description = draw < 0.62, draw >= 0.85
    lengths = np.where(description, rng.integers(20, 61, m), rng.integers(10, 26, m))
    kind = np.where(description, "description", "statement")
    table = pa.table({
        "fact_id": pa.array(fid, pa.int64()),
        "kind": pa.array(kind.tolist(), pa.string()),
        "subject": pa.array(subject.tolist(), pa.string()),
        "property": pa.array(prop.tolist(), pa.string(), mask=description),
        "object": pa.array(obj.tolist(), pa.string(), mask=~item),
        "value": pa.array(["x" * int(k) for k in lengths], pa.string(), mask=item),
    }, schema=pa.schema([(f.name, pa.int64() if f.name == "fact_id" else pa.string()) for f in PROVENANCE]))
    return table, texts[:1000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    from refactx_index.pg import open_index

    table, texts = synthetic_provenance(args.facts)
    with tempfile.TemporaryDirectory() as tmp, fresh_database(args.dsn, "refactx_bench_prov") as dsn:
        files = []
        for i, start in enumerate(range(0, table.num_rows, 1 << 20)):
            path = Path(tmp) / f"part-{i}.parquet"
            pq.write_table(table.slice(start, 1 << 20), path)
            files.append(path)
        parquet_bytes = sum(f.stat().st_size for f in files)
        build_id = load_tree(dsn, "bench", [(1, 2)])  # a served build whose provenance we load
        started = time.perf_counter()
        rows = load.copy_provenance_files(dsn, "refactx", build_id, files)
        copy_s = time.perf_counter() - started
        with psycopg.connect(dsn, autocommit=True) as conn:
            started = time.perf_counter()
            pgcatalog.attach_provenance(conn, "refactx", build_id)
            index_s = time.perf_counter() - started
            conn.execute("UPDATE refactx.builds SET provenance_rows = %s WHERE build_id = %s", (rows, build_id))
            table_bytes, index_bytes = pgcatalog.relation_bytes(conn, "refactx", pgcatalog.provenance_table_name(build_id))
        with open_index(dsn, "bench", follow=False) as index:
            answers = [texts[i:i + 5] for i in range(0, 500, 5)]
            timings = []
            for batch in answers:
                started = time.perf_counter()
                found = index.provenance(batch)
                timings.append(time.perf_counter() - started)
                assert all(p.sources for p in found)
    figures = {
        "facts": args.facts, "rows": rows, "parquet_bytes": parquet_bytes,
        "table_bytes": table_bytes, "index_bytes": index_bytes,
        "bytes_per_fact": round((table_bytes + index_bytes) / args.facts, 1),
        "table_bytes_per_fact": round(table_bytes / args.facts, 1),
        "index_bytes_per_fact": round(index_bytes / args.facts, 1),
        "copy_s": round(copy_s, 2), "copy_rows_per_s": round(rows / copy_s),
        "index_attach_s": round(index_s, 2),
        "lookup_5_facts_ms": {"first": round(1000 * timings[0], 2),
                              "median": round(1000 * statistics.median(timings[1:]), 2),
                              "max": round(1000 * max(timings[1:]), 2)},
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
