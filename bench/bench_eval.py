"""Answer quality on the two committed question sets: ``refactx eval`` in full, constrained and
unconstrained, with one model (SmolLM2-135M-Instruct unless ``--model``).

    .venv/bin/python bench/bench_eval.py [--model smollm2] [--limit N] [--beams 3] [--max-new-tokens 128]

1. the indexes, built with the model's own tokenizer: the finance example in process
   (``build_graph_index``), the shared Wikidata sample by the pipeline's stages (Spark
   ``local[2]``, parse ... verbalize into ``build/bench-eval``) as an in-memory index;
2. each set (``bench/questions/finance.jsonl``, ``bench/questions/wikidata-sample500.jsonl``,
   or their first ``--limit`` questions) answered and scored by ``refactx_index.evaluation``;
3. written: ``docs/figures/eval-<set>.json`` / ``.md`` / ``.png`` per set and
   ``docs/figures/eval.json`` (both summaries); ``--out`` elsewhere (a ``--limit`` run should
   not overwrite the committed figures).

Scoring rules: docs/evaluation.md. Time, with the defaults on the 2-core machine, alone
(2026-11-25, the full run): 60 minutes -- 1,312 s for the Wikidata sample's 199 questions in
both modes (3.3 s a question per mode; its index about 40 s before), 2,255 s for finance's 300
(3.6-3.9 s). Run it alone: at load average 5 one question took ten times longer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SETS = {"finance": ROOT / "bench" / "questions" / "finance.jsonl",
        "wikidata-sample500": ROOT / "bench" / "questions" / "wikidata-sample500.jsonl"}


def finance_index(tokenizer_dir: Path, work: Path):
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index
    from refactx_testing.finance_example import write_example

    cfg = Config.load(str(write_example(work / "finance")), env={})
    return build_graph_index(cfg, VocabularyConfig.parse(f"model={tokenizer_dir}")).index


def wikidata_index(tokenizer_file: Path, work: Path):
    import pyarrow.dataset as ds

    from refactx_index.memory import MemoryTreeIndex
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.pipeline import build

    data = SHARED / "data"
    cfg = Config().updated({
        "paths.build_root": str(work / "wikidata"), "paths.dump_date": "2018-sample500",
        "input.dumps": [str(data / "wikidata" / "truthy-2018-sample500-en.nt")],
        "input.enwiki_page": str(data / "wikipedia" / "enwiki-20150112-page.head1MiB.sql"),
        "input.enwiki_page_props": str(data / "wikipedia" / "enwiki-20150112-page_props.head1MiB.sql"),
        "spark.master": "local[2]", "spark.shuffle_partitions": 4, "spark.log_level": "OFF",
    })
    spark = spark_session(cfg, "bench-eval")
    try:
        build(cfg, ["parse", "sitelinks", "labels", "verbalize"], spark=spark)
    finally:
        spark.stop()
    texts = ds.dataset(str(cfg.stage_dir("verbalize") / "facts"), format="parquet").to_table(
        columns=["text"]).column("text").to_pylist()
    return MemoryTreeIndex.from_facts(texts, str(tokenizer_file))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or a transformers directory")
    parser.add_argument("--limit", type=int, help="only the first LIMIT questions of each set")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--beams", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures"), help="where the figures go")
    args = parser.parse_args(argv)

    from refactx_index.evaluation import evaluate, markdown_table, read_questions, write_outputs
    from refactx_index.models import load_model

    started = time.perf_counter()
    loaded = load_model(args.model)
    print(f"model {args.model} loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    work = ROOT / "build" / "bench-eval"
    builders = {"finance": lambda: finance_index(Path(loaded.tokenizer_file).parent, work),
                "wikidata-sample500": lambda: wikidata_index(Path(loaded.tokenizer_file), work)}
    out = Path(args.out)
    combined = {}
    for name in args.sets.split(","):
        questions = read_questions(SETS[name])[:args.limit]
        mark = time.perf_counter()
        index = builders[name]()
        print(f"{name}: index of {index.info.facts} facts in {time.perf_counter() - mark:.1f} s", file=sys.stderr)
        mark = time.perf_counter()
        results = evaluate(questions, index, loaded, batch_size=args.batch_size, num_beams=args.beams,
                           max_new_tokens=args.max_new_tokens)
        seconds = round(time.perf_counter() - mark, 1)
        meta = {"set": name, "questions_file": str(SETS[name].relative_to(ROOT)), "questions": len(questions),
                "model": args.model, "beams": args.beams, "max_new_tokens": args.max_new_tokens,
                "batch_size": args.batch_size, "seconds": seconds, "index_facts": index.info.facts,
                "date": time.strftime("%Y-%m-%d")}
        summary = write_outputs(results, out / f"eval-{name}", meta)
        combined[name] = {**meta, "summary": summary}
        print(f"## {name}: {len(questions)} questions, both modes in {seconds} s\n")
        print(markdown_table(summary))
    (out / "eval.json").write_text(json.dumps(combined, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
