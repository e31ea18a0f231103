"""Benchmark: what validation costs beside the build it checks.

Two inputs, one Spark session (``--master``, default ``local[*]``), one PostgreSQL server:

* ``--facts N`` synthetic facts with realistic shared prefixes (``bench_load.synthetic_facts``)
  written as a tokenize output, then the stages prefix_rows, load and validate, each timed;
  validate is split into its Spark pass over every Parquet row, its PostgreSQL checks (counts,
  bytes, root, the sampled walk) and the fact sample. The build here is only prefix rows +
  load: the whole build (parse ... tokenize before them) costs more, so the share printed
  is an upper bound of validation's share of a build.
* the whole pipeline (parse ... activate, Qwen2.5 from ../shared), every stage timed: on the
  shared extract (``truthy-2018-sample500-en.nt``; ``--no-sample`` skips it), and on a
  generated dump (``--dump DIR``: a folder written by ``python -m refactx_testing.dumpgen``,
  its ``*truthy*.nt.bz2`` and enwiki ``page``/``page_props`` SQL dumps).

    .venv/bin/python bench/bench_validate.py [--facts 1000000] [--dump DIR] [--dsn postgresql://...] [--no-sample]

PostgreSQL: ``--dsn`` (an admin database) or 127.0.0.1:5432; a temporary database is
created and dropped. Prints one JSON line per input and a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_load import VOCAB, synthetic_facts  # noqa: E402
from refactx_pipeline.stages import load, prefix_rows, validate  # noqa: E402
from refactx_pipeline.common import spark_session  # noqa: E402
from refactx_pipeline.config import Config, VocabularyConfig  # noqa: E402
from tests.pgtree import fresh_database  # noqa: E402

SHARED = ROOT.parent / "shared"


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - started


def synthetic(spark, cfg: Config, dsn: str, n: int) -> dict:
    table = synthetic_facts(n)
    tok_dir = cfg.stage_dir("tokenize") / VOCAB
    (tok_dir / "tokens").mkdir(parents=True)
    pq.write_table(table, tok_dir / "tokens" / "part-0.parquet")
    (tok_dir / "meta.json").write_text(json.dumps({"name": VOCAB, "sha256": "0" * 64, "vocab_size": 150_000}))
    tree, rows_s = timed(prefix_rows.run, spark, cfg)
    loaded, load_s = timed(load.run, None, cfg, dsn)
    checked, validate_s = timed(validate.run, spark, cfg, dsn, loaded["build_ids"])
    v = checked[VOCAB]
    build_s = rows_s + load_s
    return {
        "input": f"synthetic {n:,} facts", "facts": tree["vocabularies"][VOCAB]["distinct_facts"],
        "rows": v["rows"], "max_nodes": v["max_nodes"],
        "prefix_rows_s": round(rows_s, 2), "load_s": round(load_s, 2), "validate_s": round(validate_s, 2),
        "validate_spark_s": v["spark_seconds"], "validate_pg_s": v["pg_seconds"],
        "validate_other_s": round(validate_s - v["spark_seconds"] - v["pg_seconds"], 2),  # the fact sample
        "build_s": round(build_s, 2), "validate_share": round(validate_s / (build_s + validate_s), 3),
    }


def whole_pipeline(spark, cfg: Config, dsn: str, label: str, dump: str, page: str, page_props: str) -> dict:
    from refactx_pipeline.orchestration.pipeline import build

    cfg = cfg.updated({
        "input.dumps": [dump], "input.enwiki_page": page, "input.enwiki_page_props": page_props,
        "tokenize.vocabularies": [VocabularyConfig(name="qwen2.5", path=str(SHARED / "tokenizers" / "qwen2.5"))],
    })
    results = build(cfg, spark=spark, dsn=dsn)
    seconds = {r.stage: round(r.seconds, 2) for r in results}
    v = next(r.counts for r in results if r.stage == "validate")["qwen2.5"]
    total = sum(seconds.values())
    return {
        "input": label, "facts": v["root_leaves"], "rows": v["rows"], "max_nodes": v["max_nodes"],
        "stages_s": seconds, "validate_s": seconds["validate"],
        "validate_spark_s": v["spark_seconds"], "validate_pg_s": v["pg_seconds"],
        "build_s": round(total - seconds["validate"], 2), "validate_share": round(seconds["validate"] / total, 3),
    }


def one(folder: Path, pattern: str) -> str:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"{folder}: expected one {pattern}, found {[f.name for f in found]}")
    return str(found[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--no-sample", dest="sample", action="store_false", help="skip the shared sample")
    parser.add_argument("--dump", help="a generated dump's folder (refactx_testing.dumpgen): the whole pipeline on it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_validate_") as work, fresh_database(args.dsn, "bench_validate") as dsn:
        cfg = Config().updated({
            "paths.build_root": work,
            "spark.master": args.master,
            "spark.shuffle_partitions": 8,
            "pg.validate_sample": 1000,
            "tokenize.vocabularies": [VocabularyConfig(name=VOCAB, path="")],
        })
        spark = spark_session(cfg, "bench_validate")
        try:
            out = []
            if args.sample and SHARED.exists():
                data = SHARED / "data"
                out.append(whole_pipeline(
                    spark, cfg.updated({"paths.build_root": f"{work}/sample", "paths.dump_date": "sample"}), dsn,
                    "shared sample (whole pipeline)", str(data / "wikidata" / "truthy-2018-sample500-en.nt"),
                    str(data / "wikipedia" / "enwiki-20150112-page.head1MiB.sql"),
                    str(data / "wikipedia" / "enwiki-20150112-page_props.head1MiB.sql")))
                print(json.dumps(out[-1]), flush=True)
            if args.dump:
                folder = Path(args.dump)
                out.append(whole_pipeline(
                    spark, cfg.updated({"paths.build_root": f"{work}/dump", "paths.dump_date": "generated"}), dsn,
                    "generated dump (whole pipeline)", one(folder, "*truthy*.nt.bz2"),
                    one(folder, "*-page.sql*"), one(folder, "*-page_props.sql*")))
                print(json.dumps(out[-1]), flush=True)
            if args.facts:
                out.append(synthetic(spark, cfg, dsn, args.facts))
                print(json.dumps(out[-1]), flush=True)
        finally:
            spark.stop()
    print(f"\n{'input':<32} {'facts':>9} {'rows':>9} {'build s':>8} {'validate s':>10} "
          f"{'(spark':>7} {'pg':>6} {'sample)':>8} {'share':>6}")
    for r in out:
        other = r.get("validate_other_s", round(r["validate_s"] - r["validate_spark_s"] - r["validate_pg_s"], 2))
        print(f"{r['input']:<32} {r['facts']:>9,} {r['rows']:>9,} {r['build_s']:>8.1f} {r['validate_s']:>10.1f} "
              f"{r['validate_spark_s']:>7.1f} {r['validate_pg_s']:>6.1f} {other:>8.1f} {r['validate_share']:>6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
