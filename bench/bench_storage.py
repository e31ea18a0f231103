"""PostgreSQL storage choices for a build's rows, measured rather than assumed.

Builds the rows of ``--facts`` Wikidata-like facts (``bench_walk.realistic_facts``, Qwen2.5
tokens, the default cut rule), loads them as the loader does (``tests.pgtree.load_tree``),
then copies the partition into variants that differ in one storage choice each and prints,
per variant, table and B-tree bytes per fact and the time to read random rows by key (one
statement per key, as a cursor's step does; same keys, same order, every variant):

* ``as loaded``: the loader's table (bytea ``node`` in ``EXTENDED`` storage, pglz, the default
  ``toast_tuple_target`` of ~2 kB, a B-tree at the default fill factor 90);
* ``btree fillfactor 100``: the key's B-tree packed full (the partition is never written after
  its load);
* ``lz4``: ``node`` compressed with lz4 instead of pglz where PostgreSQL compresses it;
* ``inline pglz`` / ``inline lz4``: ``toast_tuple_target=128`` and ``STORAGE MAIN``, so
  PostgreSQL tries to compress every row above 128 bytes inline (rows are already
  zlib-compressed by the format when that is smaller, so this measures what is left);
* ``no compression``: ``STORAGE EXTERNAL`` (out of line, never compressed) for comparison;
* ``no dictionary``: the same facts loaded again with rows compressed one by one (format
  version 2's bodies; versions 3 and 4 compress them against the build's preset dictionary), with
  the decode cost per row of both builds (``format.decode_fragment`` over every row, best of
  3 interleaved passes).

Run: .venv/bin/python bench/bench_storage.py [--facts 300000] [--reads 3000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_walk import realistic_facts  # noqa: E402

VARIANTS = {
    "as loaded": None,
    "btree fillfactor 100": ("", "", "WITH (fillfactor = 100)"),
    "lz4": ("", "ALTER TABLE {t} ALTER COLUMN node SET COMPRESSION lz4", ""),
    "inline pglz": ("WITH (toast_tuple_target = 128)", "ALTER TABLE {t} ALTER COLUMN node SET STORAGE MAIN", ""),
    "inline lz4": ("WITH (toast_tuple_target = 128)",
                   "ALTER TABLE {t} ALTER COLUMN node SET STORAGE MAIN, ALTER COLUMN node SET COMPRESSION lz4", ""),
    "no compression": ("", "ALTER TABLE {t} ALTER COLUMN node SET STORAGE EXTERNAL", ""),
}


def dictionary_figures(conn: psycopg.Connection, build_id: int, plain_id: int, n: int) -> dict:
    """Size and decode cost of the build with its preset dictionary against the same rows
    compressed one by one (same facts, same run)."""
    from refactx_index.tree import format as fmt
    from refactx_pipeline.catalog import pgcatalog

    dictionary = pgcatalog.build_dictionary(conn, "refactx", build_id)
    out = {"dictionary_bytes": len(dictionary.data) if dictionary else 0}
    builds = {"no dictionary": (plain_id, None), "dictionary": (build_id, dictionary)}
    rows = {}
    for name, (bid, _) in builds.items():
        table = f"refactx.tree_b{bid}"
        tbytes, ibytes, node_bytes = conn.execute(
            f"SELECT pg_table_size('{table}'::regclass), pg_indexes_size('{table}'::regclass), "
            f"(SELECT sum(length(node)) FROM {table})").fetchone()
        rows[name] = [bytes(node) for (node,) in conn.execute(f"SELECT node FROM {table} ORDER BY prefix")]
        out[name] = {"node_bytes_per_fact": node_bytes / n, "table_bytes_per_fact": tbytes / n,
                     "btree_bytes_per_fact": ibytes / n, "total_bytes_per_fact": (tbytes + ibytes) / n}
    best = {name: float("inf") for name in builds}
    for _ in range(3):  # interleaved: a busy neighbour slows both alike
        for name, (_, preset) in builds.items():
            t0 = time.perf_counter()
            for node in rows[name]:
                fmt.decode_fragment(node, 3, preset)
            best[name] = min(best[name], (time.perf_counter() - t0) / len(rows[name]) * 1e6)
    for name in builds:
        out[name]["decode_us_per_row"] = best[name]
        out[name]["rows"] = len(rows[name])
        print(f"{name:<14} rows {len(rows[name]):,}  node {out[name]['node_bytes_per_fact']:.1f} B/fact  "
              f"table {out[name]['table_bytes_per_fact']:.1f}  B-tree {out[name]['btree_bytes_per_fact']:.1f}  "
              f"total {out[name]['total_bytes_per_fact']:.1f} B/fact  decode {best[name]:.1f} µs/row", flush=True)
    print(f"preset dictionary: {out['dictionary_bytes']:,} bytes", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=300_000)
    parser.add_argument("--reads", type=int, default=3000, help="rows read by key per variant")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server where a scratch database may be created and dropped")
    parser.add_argument("--json")
    args = parser.parse_args()

    from refactx_index.tree.memory import DEFAULT_MAX_SUBTREE_TOKENS, DEFAULT_SUBTREE_THRESHOLD
    from refactx_index.vocab import encode_facts, open_tokenizer
    from tests.pgtree import fresh_database, load_tree

    texts = realistic_facts(args.facts)
    tok = open_tokenizer(str(ROOT.parent / "shared" / "tokenizers" / "qwen2.5"))
    encoded = encode_facts(tok, texts, ())
    seqs = [tuple(encoded.ids(i)) for i in range(len(texts))]
    n = len(seqs)
    figures: dict = {"facts": n, "variants": {}}
    with fresh_database(args.dsn, "refactx_bench_storage") as dsn:
        build_id = load_tree(dsn, "storage", seqs, threshold=DEFAULT_SUBTREE_THRESHOLD,
                             max_subtree_tokens=DEFAULT_MAX_SUBTREE_TOKENS, vocab_size=151_665)
        plain_id = load_tree(dsn, "storage_plain", seqs, threshold=DEFAULT_SUBTREE_THRESHOLD,
                             max_subtree_tokens=DEFAULT_MAX_SUBTREE_TOKENS, vocab_size=151_665,
                             dictionary=False)
        base = f"refactx.tree_b{build_id}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            figures["dictionary"] = dictionary_figures(conn, build_id, plain_id, n)
            rows, raw, over_2k = conn.execute(
                f"SELECT count(*), sum(length(node)), count(*) FILTER (WHERE length(node) > 2000) FROM {base}"
            ).fetchone()
            keys = [k for (k,) in conn.execute(f"SELECT prefix FROM {base}")]
            rng = np.random.default_rng(0)
            reads = [keys[i] for i in rng.integers(0, len(keys), args.reads)]
            figures.update(rows=rows, node_bytes_per_fact=raw / n, rows_over_2kB=over_2k)
            print(f"{n:,} facts, {rows:,} rows ({rows / n:.3f}/fact), row bodies {raw / n:.1f} B/fact as encoded, "
                  f"{over_2k:,} rows over 2 kB", flush=True)
            print(f"{'variant':<22}{'table B/fact':>13}{'B-tree B/fact':>15}{'total':>8}{'read µs/row':>13}")
            for name, spec in VARIANTS.items():
                table = base
                if spec is not None:
                    with_table, alter, with_index = spec
                    table = f"refactx.v_{name.replace(' ', '_')}"
                    conn.execute(f"CREATE TABLE {table} (LIKE {base}) {with_table}")
                    if alter:
                        conn.execute(alter.format(t=table))
                    conn.execute(f"INSERT INTO {table} SELECT * FROM {base}")
                    conn.execute(f"CREATE UNIQUE INDEX ON {table} (prefix) {with_index}")
                    conn.execute(f"VACUUM ANALYZE {table}")
                tbytes, ibytes = conn.execute("SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                                              (table, table)).fetchone()
                query = f"SELECT node FROM {table} WHERE prefix = %s"
                for key in reads[:200]:  # warm the buffers: the reads measure decompression, not the disk
                    conn.execute(query, (key,), prepare=True).fetchone()
                t0 = time.perf_counter()
                for key in reads:
                    conn.execute(query, (key,), prepare=True).fetchone()
                read_us = (time.perf_counter() - t0) / len(reads) * 1e6
                row = {"table_bytes_per_fact": tbytes / n, "btree_bytes_per_fact": ibytes / n,
                       "total_bytes_per_fact": (tbytes + ibytes) / n, "read_us_per_row": read_us}
                figures["variants"][name] = row
                print(f"{name:<22}{row['table_bytes_per_fact']:>13.1f}{row['btree_bytes_per_fact']:>15.1f}"
                      f"{row['total_bytes_per_fact']:>8.1f}{read_us:>13.1f}", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
