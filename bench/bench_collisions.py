"""What each label collision policy does to the facts of a generated dump (docs/ingestion.md).

A realistic generated dump (``refactx_testing.dumpgen``, with its enwiki page and
page_props dumps) is parsed once (parse, sitelinks); then, for each policy of
``labels.collision_policy``, the labels and verbalize stages run on those outputs, and this
prints, per policy: the colliding labels and entities, what the policy did with them
(``collision_outcome``), the labels still shared afterwards, the facts written, and the
facts whose subject label several entities share (facts a model cannot tell whose they are).
The difference in facts against ``disambiguate`` is what the policy merges (``keep``:
identical texts of different entities become one fact) or loses (``drop``).

    .venv/bin/python bench/bench_collisions.py --lines 200000 --out docs/figures/collisions.json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POLICIES = ("disambiguate", "keep", "drop", "qualify")


def facts_under_shared_subjects(spark, cfg) -> int:
    """Facts whose subject is labelled with a label more than one entity carries."""
    from pyspark.sql import functions as F

    labels = spark.read.parquet(str(cfg.stage_dir("labels") / "labels"))
    shared = (labels.groupBy(F.substring("entity", 1, 1).alias("ns"), "label").count()
              .where(F.col("count") > 1).select(F.concat(F.lit("<"), "label", F.lit("> <")).alias("head")))
    facts = spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts"))
    return facts.join(shared, F.col("text").startswith(F.col("head"))).select("text").distinct().count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=300_000, help="dump lines to generate (default 300,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default=str(ROOT / "build" / "bench_collisions"), help="dump and build folder")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--out", help="write the figures as JSON here too")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from refactx_pipeline.common import spark_session
    from refactx_pipeline.config import Config
    from refactx_pipeline.stages import labels, parse, sitelinks, verbalize
    from refactx_testing import dumpgen
    from refactx_pipeline.stages.contract import StageContext

    work = Path(args.work)
    dump = work / f"dump-{args.lines}-{args.seed}"
    if not (dump / "manifest.json").exists():
        dumpgen.generate(dump, lines=args.lines, seed=args.seed)
    manifest = json.loads((dump / "manifest.json").read_text())
    base = Config().updated({
        "paths.build_root": str(work / "build"),
        "paths.dump_date": "parsed",
        "input.dumps": [str(dump / manifest["truthy"])],
        "input.enwiki_page": str(dump / manifest["page"]),
        "input.enwiki_page_props": str(dump / manifest["page_props"]),
        "spark.master": f"local[{args.cores}]",
        "spark.shuffle_partitions": 4 * args.cores,
        "spark.log_level": "ERROR",
    })
    spark = spark_session(base, "bench_collisions")
    results: dict[str, Any] = {"lines": manifest["lines"], "items": manifest["items"], "seed": args.seed,
                               "policies": {}}
    try:
        started = time.monotonic()
        parse.run(StageContext(base, spark=spark))
        sitelinks.run(StageContext(base, spark=spark))
        results["parse_seconds"] = round(time.monotonic() - started, 1)
        for policy in POLICIES:
            cfg = base.updated({"paths.dump_date": policy, "labels.collision_policy": policy})
            shutil.rmtree(cfg.build_dir(), ignore_errors=True)
            for stage in ("parse", "sitelinks"):
                shutil.copytree(base.stage_dir(stage), cfg.stage_dir(stage))
            started = time.monotonic()
            label_counts = labels.run(StageContext(cfg, spark=spark))
            fact_counts = verbalize.run(StageContext(cfg, spark=spark))
            results["policies"][policy] = {
                "seconds": round(time.monotonic() - started, 1),
                "labels": label_counts["labels"],
                "colliding_labels": label_counts["colliding_labels"],
                "colliding_entities": label_counts["colliding_entities"],
                "collision_outcome": label_counts["collision_outcome"],
                "labels_still_shared": label_counts["labels_still_shared"],
                "facts": fact_counts["facts"],
                "facts_under_shared_subjects": facts_under_shared_subjects(spark, cfg),
            }
            print(policy, json.dumps(results["policies"][policy]), flush=True)
    finally:
        spark.stop()
    reference = results["policies"]["disambiguate"]["facts"]
    print(f"\n{manifest['lines']:,} dump lines, {manifest['items']:,} items")
    print(f"{'policy':<13} {'facts':>9} {'vs disambiguate':>16} {'shared labels after':>20} "
          f"{'facts under shared subjects':>28}  outcome")
    for policy, r in results["policies"].items():
        print(f"{policy:<13} {r['facts']:>9,} {r['facts'] - reference:>+16,} {r['labels_still_shared']:>20,} "
              f"{r['facts_under_shared_subjects']:>28,}  {r['collision_outcome']}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
