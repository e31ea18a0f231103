"""Do the generator's facts compress like real Wikidata facts?

Verbalizes the real extract (../shared/data/wikidata/truthy-2018-sample500-en.nt, with its
enwiki page + page_props heads) and generated dumps of each ``--presets`` preset (seeds
``--seeds``) with the pipeline's own stages (parse, sitelinks, labels, verbalize: one local
Spark application), then measures every fact set with
``refactx_testing.dumpgen.floor.compression_floor`` at the SAME fact count: the real
sample's facts, and whole subjects drawn from each generated fact set until that count
(``--subsets`` draws per dump). Per-fact compressed size falls as a corpus grows, so only
floors at one count compare. Where a dump has 4x, 16x ... as many facts, the floor is
measured there too (``larger``): how it falls as the corpus grows. Prints a table and writes
``--json`` (default docs/figures/realism.json). Dumps and stage outputs under ``--work`` are
reused when there: delete them after changing the generator.

    .venv/bin/python bench/bench_realism.py [--lines 40000] [--seeds 0,1] [--subsets 3] \\
        [--presets dense,realistic] [--drop-properties LABELS] [--json docs/figures/realism.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
KEYS = ("zstd_text_bytes_per_fact", "zstd_token_bytes_per_fact", "tokens_per_fact", "chars_per_fact",
        "words_per_fact", "distinct_subjects_per_fact", "distinct_objects_per_fact", "top10_objects_share",
        "distinct_words_per_fact")


def _config(build_root: Path, name: str, dump: str, page: str, page_props: str):
    from refactx_pipeline.config import Config

    return Config().updated({
        "paths.build_root": str(build_root),
        "paths.dump_date": name,
        "input.dumps": [dump],
        "input.enwiki_page": page,
        "input.enwiki_page_props": page_props,
        "spark.master": "local[2]",
        "spark.shuffle_partitions": 4,
        "spark.conf": {"spark.ui.showConsoleProgress": "false"},
    })


def verbalized_texts(cfg, spark) -> list[str]:
    import pyarrow.dataset as ds

    from refactx_pipeline.orchestration.pipeline import build

    facts = cfg.stage_dir("verbalize") / "facts"
    if not (cfg.stage_dir("verbalize") / "counts.json").exists():
        build(cfg, ["parse", "sitelinks", "labels", "verbalize"], spark=spark)
    return ds.dataset(str(facts), format="parquet").to_table(columns=["text"]).column("text").to_pylist()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=40_000, help="lines of each generated dump (default 40,000)")
    parser.add_argument("--seeds", default="0,1", help="generator seeds (default 0,1)")
    parser.add_argument("--subsets", type=int, default=3, help="whole-subject draws per generated dump (default 3)")
    parser.add_argument("--presets", default="dense,realistic")
    parser.add_argument("--drop-properties", default="",
                        help="comma-separated property labels whose facts are left out of the real sample "
                             "(e.g. 'diplomatic relation,shares border with': the country-to-country "
                             "facts that make up 62%% of it)")
    parser.add_argument("--work", default=str(ROOT / "build" / "realism"), help="dumps and stage outputs (reused)")
    parser.add_argument("--json", default=str(ROOT / "docs" / "figures" / "realism.json"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from tokenizers import Tokenizer

    from refactx_pipeline.common import spark_session
    from refactx_testing import dumpgen
    from refactx_testing.dumpgen.floor import compression_floor, split_fact, whole_subjects

    work = Path(args.work)
    tokenizer = Tokenizer.from_file(str(SHARED / "tokenizers" / "qwen2.5" / "tokenizer.json"))
    wikipedia = SHARED / "data" / "wikipedia"
    real_cfg = _config(work / "stages", "real-sample500",
                       str(SHARED / "data" / "wikidata" / "truthy-2018-sample500-en.nt"),
                       str(wikipedia / "enwiki-20150112-page.head1MiB.sql"),
                       str(wikipedia / "enwiki-20150112-page_props.head1MiB.sql"))
    started = time.monotonic()
    spark = spark_session(real_cfg, "refactx:bench_realism")
    try:
        real = verbalized_texts(real_cfg, spark)
        dropped = {p.strip() for p in args.drop_properties.split(",") if p.strip()}
        if dropped:
            real = [t for t in real if (split_fact(t) or ("", "", ""))[1] not in dropped]
        target = len(set(real))
        curve: list[dict] = []
        source = "real: truthy-2018-sample500-en" + (f" without {', '.join(sorted(dropped))}" if dropped else "")
        rows = [{"source": source, "facts_in_set": target,
                 **compression_floor(real, tokenizer)}]
        for preset in [p.strip() for p in args.presets.split(",") if p.strip()]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                out = work / f"dump-{preset}-{args.lines}-{seed}"
                if not (out / dumpgen.MANIFEST_FILE).exists():
                    dumpgen.generate(out, args.lines, seed=seed, preset=preset, workers=1)
                manifest = json.loads((out / dumpgen.MANIFEST_FILE).read_text())
                cfg = _config(work / "stages", out.name, str(out / manifest["truthy"]),
                              str(out / manifest["page"]), str(out / manifest["page_props"]))
                texts = verbalized_texts(cfg, spark)
                # the same measure on larger subsets of the same dump: how the floor falls as
                # the corpus grows (a vocabulary that saturates falls faster)
                count = target * 4
                while count <= len(set(texts)):
                    curve.append({"preset": preset, "seed": seed, "facts_wanted": count,
                                  **compression_floor(whole_subjects(texts, count, seed=0), tokenizer)})
                    count *= 4
                for subset in range(args.subsets):
                    sample = whole_subjects(texts, target, seed=subset)
                    if len(sample) < target:
                        raise SystemExit(f"{out}: {len(set(texts)):,} facts, fewer than the real "
                                         f"{target:,}: raise --lines")
                    rows.append({"source": f"generated: {preset}", "preset": preset, "seed": seed,
                                 "subset": subset, "lines": manifest["lines"], "facts_in_set": len(set(texts)),
                                 **compression_floor(sample, tokenizer)})
    finally:
        spark.stop()

    summary = {}
    for source in dict.fromkeys(r["source"] for r in rows):
        group = [r for r in rows if r["source"] == source]
        summary[source] = {"runs": len(group), "facts": round(statistics.mean(r["facts"] for r in group)),
                           **{k: round(statistics.mean(r[k] for r in group), 3) for k in KEYS}}
    result = {"date": time.strftime("%Y-%m-%d"), "seconds": round(time.monotonic() - started, 1),
              "args": vars(args), "tokenizer": "qwen2.5", "zstd_level": rows[0]["zstd_level"],
              "load_avg": os.getloadavg(), "summary": summary, "runs": rows, "larger": curve}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")

    cols = ("facts", *KEYS[:5], "distinct_objects_per_fact", "top10_objects_share")
    heads = ("facts", "zstd text B/f", "zstd ids B/f", "tokens/f", "chars/f", "words/f", "objects/f", "top10 obj")
    sys.stdout.write("| source | " + " | ".join(heads) + " |\n|---|" + "---|" * len(heads) + "\n")
    for source, s in summary.items():
        sys.stdout.write(f"| {source} ({s['runs']}) | " + " | ".join(f"{s[c]:,}" if c == "facts" else f"{s[c]}"
                                                                  for c in cols) + " |\n")
    for c in curve:
        sys.stdout.write(f"{c['preset']} seed {c['seed']} at {c['facts']:,} facts: zstd text "
                         f"{c['zstd_text_bytes_per_fact']} B/fact, ids {c['zstd_token_bytes_per_fact']} B/fact, "
                         f"{c['tokens_per_fact']} tokens/fact\n")
    sys.stdout.write(f"written {args.json}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
