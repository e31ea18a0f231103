"""Benchmark: what provenance costs a build on disk, in both layouts, and its serving lookup.

Runs the pipeline's parse, sitelinks, labels and verbalize stages on one input (a generated
dump, ``--preset realistic`` by default, or a real Wikidata N-Triples extract with ``--nt``),
then stores the same provenance twice in one temporary database: layout ``rows`` (a text row
per source, a B-tree on fact_id) and layout ``blocks`` (the load stage's own path:
``verbalize/provenance_blocks`` with an empty block for each key no fact falls in, a unique
B-tree on block). Prints, per layout, bytes per fact (pg_table_size, which counts TOAST, +
pg_indexes_size), and the serving lookup, ``PgTreeIndex.provenance`` of 5 facts (an answer's
worth), first and warm; the seconds of packing the blocks (run again on their own from the
sources and texts cached, as verbalize packs them, so that a work directory is reused) beside
the stages'; and whether both layouts give every fact the same sources.

    .venv/bin/python bench/bench_provenance.py [--preset realistic] [--lines 300000] [--json out.json]
    .venv/bin/python bench/bench_provenance.py --nt ../shared/data/wikidata/truthy-2018-sample500-en.nt
    .venv/bin/python bench/bench_provenance.py --nt ../shared/data/wikidata/truthy-2018-head10k.nt \
        --nt ../shared/data/wikidata/truthy-2018-sample500-en.nt

PostgreSQL: ``--dsn`` (an admin database) or 127.0.0.1:5432; a temporary database is created
and dropped. ``--work``: where the dump and the stage outputs go (reused when present).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_index.tree import provenance as prov  # noqa: E402
from refactx_pipeline.catalog import pgcatalog  # noqa: E402
from refactx_pipeline.stages import load, verbalize  # noqa: E402
from tests.pgtree import fresh_database, load_tree, store_provenance_rows  # noqa: E402

SHARED = ROOT.parent / "shared"
ANSWER_FACTS = 5
ANSWERS = 200


def input_config(args: argparse.Namespace, work: Path):
    """The config of the stages' run: a generated dump's, or an N-Triples extract's."""
    from refactx_pipeline.config import Config

    spark = {"spark.master": "local[2]", "spark.shuffle_partitions": 8, "spark.driver_memory": "4g",
             "spark.conf": {"spark.ui.showConsoleProgress": "false"}}
    if args.nt:
        return Config().updated({**spark, "paths.build_root": str(work / "build"), "paths.dump_date": "extract",
                                 "input.dumps": [str(Path(nt).resolve()) for nt in args.nt]})
    from refactx_testing import dumpgen

    dump = work / f"dump-{args.preset}-{args.lines}"
    if not (dump / "manifest.json").exists():
        dumpgen.generate(dump, lines=args.lines, seed=0, preset=args.preset)
    manifest = json.loads((dump / "manifest.json").read_text())
    return Config().updated({
        **spark, "paths.build_root": str(work / "build"), "paths.dump_date": f"{args.preset}-{args.lines}",
        "input.dumps": [str(dump / manifest["truthy"])], "input.enwiki_page": str(dump / manifest["page"]),
        "input.enwiki_page_props": str(dump / manifest["page_props"]),
    })


def verbalized(cfg) -> dict[str, Any]:
    """Run the stages up to verbalize (unless their outputs are there), then pack the blocks
    again on their own with this code; the seconds of each."""
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.orchestration.pipeline import build

    spark = spark_session(cfg, "bench_provenance")
    try:
        seconds: dict[str, float] = {}
        marks: dict[str, float] = {}

        def on_stage(name: str, result) -> None:
            if result is None:
                marks[name] = time.monotonic()
            else:
                seconds[name] = round(time.monotonic() - marks[name], 2)

        if not (cfg.stage_dir("verbalize") / "counts.json").exists():
            build(cfg, ["parse", "sitelinks", "labels", "verbalize"], spark=spark, on_stage=on_stage)
        out = cfg.stage_dir("verbalize")
        counts = json.loads((out / "counts.json").read_text())
        # the sources with their texts, cached as verbalize has them when it packs
        with_text = spark.read.parquet(str(out / "provenance")).join(
            spark.read.parquet(str(out / "facts")).select("fact_id", "text"), "fact_id").persist()
        with_text.count()
        started = time.monotonic()
        counts["provenance_blocks"] = verbalize.write_provenance_blocks(
            with_text, out / "provenance_blocks", prov.block_bits(counts["facts"]))
        seconds["pack_blocks"] = round(time.monotonic() - started, 2)
        with_text.unpersist()
        (out / "counts.json").write_text(json.dumps(counts, indent=1))
    finally:
        spark.stop()
    return seconds


def lookups(dsn: str, name: str, answers: list[list[str]]) -> tuple[dict[str, float], list]:
    """Milliseconds of ``index.provenance`` per answer (first, median and max of the rest)."""
    from refactx_index.tree.pg import open_index

    timings, found = [], []
    with open_index(dsn, name, follow=False) as index:
        for answer in answers:
            started = time.perf_counter()
            found.append(index.provenance(answer))
            timings.append(time.perf_counter() - started)
    return ({"first": round(1000 * timings[0], 2), "median": round(1000 * statistics.median(timings[1:]), 3),
             "max": round(1000 * max(timings[1:]), 2)}, found)


def store_blocks(dsn: str, build_id: int, out: Path) -> dict[str, Any]:
    """The load stage's own steps for the blocks of ``out`` (a verbalize directory)."""
    counts = json.loads((out / "counts.json").read_text())
    bits = counts["provenance_blocks"]["bits"]
    files = sorted((out / "provenance_blocks").glob("*.parquet"))
    written = pa.concat_tables(pq.read_table(f, columns=["block"]) for f in files)
    empty = load.empty_blocks(bits, written.column("block").to_numpy())
    started = time.perf_counter()
    blocks = load.copy_provenance_blocks(dsn, "refactx", build_id, load.parquet_batches(files, ["block", "data"]))
    blocks += load.copy_provenance_blocks(dsn, "refactx", build_id, [empty])
    copy_s = time.perf_counter() - started
    with psycopg.connect(dsn, autocommit=True) as conn:
        pgcatalog.attach_provenance(conn, "refactx", build_id)
        pgcatalog.set_status(conn, "refactx", build_id, "active", provenance_rows=counts["provenance_rows"],
                             provenance_layout=prov.LAYOUT_BLOCKS, provenance_block_bits=bits)
    return {"bits": bits, "blocks": blocks, "empty_blocks": empty.num_rows, "copy_s": round(copy_s, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="realistic", choices=["realistic", "dense"],
                        help="the dump generator's preset (ignored with --nt)")
    parser.add_argument("--lines", type=int, default=300_000, help="the generated dump's lines")
    parser.add_argument("--nt", action="append", help="a Wikidata N-Triples extract to run on instead of a "
                        "generated dump (again for more: an extract without property labels needs one with them)")
    parser.add_argument("--work", default=str(ROOT / "build" / "bench_provenance"))
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    work = Path(args.work) / ("+".join(Path(nt).stem for nt in args.nt) if args.nt else f"{args.preset}-{args.lines}")
    cfg = input_config(args, work)
    seconds = verbalized(cfg)
    out = cfg.stage_dir("verbalize")
    texts = {r["fact_id"]: r["text"] for r in pq.read_table(out / "facts", columns=["fact_id", "text"]).to_pylist()}
    rows = pq.read_table(out / "provenance").to_pylist()
    facts = len(texts)
    if not facts:
        raise SystemExit(f"{out}: verbalize wrote no facts (counts.json says why)")
    rng = random.Random(0)
    sample = rng.sample(sorted(texts.values()), min(len(texts), ANSWER_FACTS * ANSWERS))
    answers = [sample[i:i + ANSWER_FACTS] for i in range(0, len(sample), ANSWER_FACTS)]
    figures: dict[str, Any] = {"input": " + ".join(args.nt) if args.nt else f"dumpgen --preset {args.preset} --lines {args.lines}",
                               "facts": facts, "sources": len(rows), "stage_seconds": seconds,
                               "blocks_parquet_bytes": sum(f.stat().st_size for f in
                                                           (out / "provenance_blocks").glob("*.parquet"))}
    # the blocks themselves, without PostgreSQL's pages (what a tiny build's figure is mostly)
    block_bytes = json.loads((out / "counts.json").read_text())["provenance_blocks"]["bytes"]
    figures["block_bytes_per_fact"] = round(block_bytes / facts, 2)
    with fresh_database(args.dsn, "refactx_bench_prov") as dsn:
        layouts: dict[str, Any] = {}
        found = {}
        for layout in (prov.LAYOUT_ROWS, prov.LAYOUT_BLOCKS):
            build_id = load_tree(dsn, layout, [(1, 2)])
            started = time.perf_counter()
            if layout == prov.LAYOUT_ROWS:
                store_provenance_rows(dsn, build_id, (tuple(r[c] for c in ("fact_id", "kind", "subject", "property",
                                                                             "object", "value")) for r in rows),
                                      layout_named=True)
                extra: dict[str, Any] = {}
            else:
                extra = store_blocks(dsn, build_id, out)
            store_s = time.perf_counter() - started
            with psycopg.connect(dsn) as conn:
                table_bytes, index_bytes = pgcatalog.relation_bytes(conn, "refactx",
                                                                    pgcatalog.provenance_table_name(build_id))
            latency, found[layout] = lookups(dsn, layout, answers)
            layouts[layout] = {
                "bytes_per_fact": round((table_bytes + index_bytes) / facts, 2),
                "table_bytes_per_fact": round(table_bytes / facts, 2),
                "index_bytes_per_fact": round(index_bytes / facts, 2),
                "table_bytes": table_bytes, "index_bytes": index_bytes, "store_s": round(store_s, 2),
                f"lookup_{ANSWER_FACTS}_facts_ms": latency, **extra,
            }
        figures["layouts"] = layouts
        figures["same_sources"] = found[prov.LAYOUT_ROWS] == found[prov.LAYOUT_BLOCKS]
        figures["blocks_vs_rows_bytes"] = round(layouts["blocks"]["bytes_per_fact"]
                                                / layouts["rows"]["bytes_per_fact"], 3)
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    if not figures["same_sources"]:
        raise SystemExit("the two layouts gave different sources")


if __name__ == "__main__":
    main()
