"""Answer quality: ``refactx eval`` constrained and unconstrained with one model
(SmolLM2-135M-Instruct unless ``--model``), on MetaQA's dev questions or on the two committed
question sets.

    .venv/bin/python bench/bench_eval.py --sets metaqa [--per-hop 50] [--hops 1,2] [--seed 0]
        [--variants free,prefill,entities,grounded,relations-grounded] [--constrained-only]
        [--llm-only free] [--prompt fitted|per-question] [--index-file metaqa.rfx]
        [--name eval-metaqa-dev] [--beams 1] [--max-new-tokens 128]
    .venv/bin/python bench/bench_eval.py --sets finance,wikidata-sample500 [--limit N] [--beams 3]

MetaQA (``../shared/data/metaqa``): its ``kb.txt`` built in process into an index with the
model's vocabulary (``conf/metaqa.toml``); a fixed, seeded sample of ``--per-hop`` dev
questions of each hop (``refactx_index.qa.evaluation.stratified_sample``); each variant of
``--variants`` answered in both modes with the same prompt (drawn from the index,
``refactx_index.prompting.prompt.fitted_prompt``, or with ``--prompt per-question`` chosen per
question from a pool by its relation words, ``question_prompt``): ``free`` (the paper's: the
model may answer without a fact), ``prefill`` (every reply opens with ``Fact:``), ``entities``
(``prefill`` and the question's own entities only at a fact's subject), ``grounded``
(``prefill`` and the answer an object of a stored fact written, or "I don't know"),
``entities-grounded`` (both), ``relations`` (``entities`` and the question's relation words
followed: ``refactx_index.qa.ask.RelationsFirst``, which makes a question of two relations
write a chain of two facts), ``relations-grounded`` (and the answer grounded),
``relations-grounded-named`` (and "I don't know" unless a fact's relation is one the
question names). ``--llm-only``
names the variants also answered LLM-only (default: all). Written: ``docs/figures/<name>.json``
(date, commit, machine, command, every variant's summary and answers, rewritten after each
variant), ``.md`` and ``.png`` (every variant and mode: ``constrained free``, ``LLM-only free``, ...).

1. the indexes, built with the model's own tokenizer: the finance example in process
   (``build_graph_index``), the shared Wikidata sample by the pipeline's stages (Spark
   ``local[2]``, parse ... verbalize into ``build/bench-eval``) as an in-memory index;
2. each set (``bench/questions/finance.jsonl``, ``bench/questions/wikidata-sample500.jsonl``,
   or their first ``--limit`` questions) answered and scored by ``refactx_index.qa.evaluation``;
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
METAQA = SHARED / "data" / "metaqa"
SETS = {"finance": ROOT / "bench" / "questions" / "finance.jsonl",
        "wikidata-sample500": ROOT / "bench" / "questions" / "wikidata-sample500.jsonl"}
# each variant's answer policies (refactx_index.qa.policies), by name
VARIANTS = {"free": "plain", "prefill": "prefill-fact",
            "entities": "prefill-fact,entities-first",
            "grounded": "prefill-fact,grounded",
            "entities-grounded": "prefill-fact,entities-first,grounded",
            "relations": "prefill-fact,entities-first,relations-first",
            "relations-grounded": "prefill-fact,entities-first,relations-first,grounded",
            "relations-grounded-named": "prefill-fact,entities-first,relations-first,grounded,named-relations-only"}
PROMPTS = ("fitted", "per-question")


def metaqa_index(tokenizer_dir: Path):
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index

    cfg = Config.load(str(ROOT / "conf" / "metaqa.toml"), env={}).updated(
        {"graph.triples": [str(METAQA / "kb.txt")]})
    return build_graph_index(cfg, VocabularyConfig.parse(f"model={tokenizer_dir}")).index


def _machine() -> str:
    import platform

    return f"{platform.node() or 'host'}: {os.cpu_count()} cores, {platform.machine()}, load {os.getloadavg()[0]:.1f}"


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_metaqa(args, loaded) -> None:
    from refactx_index.qa.evaluation import (evaluate, markdown_table, read_question_file, report, stratified_sample,
                                          write_outputs)
    from refactx_index.prompting.prompt import fitted_prompt, question_prompt

    mark = time.perf_counter()
    if args.index_file:
        from refactx_index.tree.memory import MemoryTreeIndex

        index = MemoryTreeIndex.load(args.index_file)
    else:
        index = metaqa_index(Path(loaded.tokenizer_file).parent)
    print(f"metaqa: index of {index.info.facts} facts in {time.perf_counter() - mark:.1f} s", file=sys.stderr)
    questions = []
    for hop in args.hops.split(","):
        questions += read_question_file(METAQA / f"{hop}-hop" / "qa_dev.txt").questions
    questions = stratified_sample(questions, args.per_hop, args.seed)
    if args.slice:  # K/N: every N-th question from the K-th, one hold of a run split up (bench/merge_eval.py)
        k, n = map(int, args.slice.split("/"))
        questions = questions[k - 1::n]
    prompt = (question_prompt(index, loaded.tokenizer) if args.prompt == "per-question"
              else fitted_prompt(index, loaded.tokenizer))
    llm_only = None if args.llm_only is None else set(args.llm_only.split(","))
    doc = {"benchmark": "MetaQA dev", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "commit": _commit(), "machine": _machine(), "command": " ".join(["bench/bench_eval.py", *sys.argv[1:]]),
           "model": args.model, "beams": args.beams, "max_new_tokens": args.max_new_tokens,
           "batch_size": args.batch_size, "per_hop": args.per_hop, "hops": args.hops, "seed": args.seed,
           "slice": args.slice, "questions": len(questions), "index_facts": index.info.facts,
           "prompt": {"choice": args.prompt, "system": prompt.system, "examples": [list(e) for e in prompt.examples],
                      "pool": len(getattr(prompt, "pool", ()))}, "variants": {}}
    out = Path(args.out)
    combined: dict[str, list] = {}
    for variant in args.variants.split(","):
        both = not args.constrained_only and (llm_only is None or variant in llm_only)
        modes = ["unconstrained", "constrained"] if both else ["constrained"]  # the baseline first
        mark = time.perf_counter()
        results = evaluate(questions, index, loaded, modes=modes, batch_size=args.batch_size, num_beams=args.beams,
                           max_new_tokens=args.max_new_tokens, prompt=prompt, policies=VARIANTS[variant])
        seconds = round(time.perf_counter() - mark, 1)
        summary = report(results)
        from dataclasses import asdict

        doc["variants"][variant] = {"policies": VARIANTS[variant], "seconds": seconds, "summary": summary,
                                    "answers": {m: [asdict(r) for r in rows] for m, rows in results.items()}}
        print(f"## {variant}: {len(questions)} questions in {seconds} s\n", flush=True)
        print(markdown_table(summary), flush=True)
        for mode, rows in results.items():
            combined[f"{'LLM-only' if mode == 'unconstrained' else 'constrained'} {variant}"] = rows
        # the figure so far: a run stopped half way still leaves the variants it finished
        write_outputs(combined, out / args.name, {k: v for k, v in doc.items() if k != "variants"},
                      plot_groups=["all", *(f"{h}-hop" for h in args.hops.split(","))])
        (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def finance_index(tokenizer_dir: Path, work: Path):
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index
    from refactx_testing.finance_example import write_example

    cfg = Config.load(str(write_example(work / "finance")), env={})
    return build_graph_index(cfg, VocabularyConfig.parse(f"model={tokenizer_dir}")).index


def wikidata_index(tokenizer_file: Path, work: Path):
    import pyarrow.dataset as ds

    from refactx_index.tree.memory import MemoryTreeIndex
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
    parser.add_argument("--limit", type=int, help="only the first LIMIT questions of each committed set")
    parser.add_argument("--sets", default="metaqa", help=f"comma-separated, of metaqa, {', '.join(SETS)}")
    parser.add_argument("--per-hop", type=int, default=50, help="metaqa: questions sampled per hop (default 50)")
    parser.add_argument("--hops", default="1,2", help="metaqa: the hops sampled (default 1,2)")
    parser.add_argument("--seed", type=int, default=0, help="metaqa: the sample's seed")
    parser.add_argument("--variants", default="free", help=f"metaqa: comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--constrained-only", action="store_true", help="metaqa: no LLM-only answers")
    parser.add_argument("--llm-only", help="metaqa: comma-separated variants that are also answered LLM-only "
                        "(default: every variant)")
    parser.add_argument("--prompt", choices=PROMPTS, default="fitted",
                        help="metaqa: the examples drawn from the index once (fitted) or chosen per question "
                        "from a pool by the question's relation words (per-question)")
    parser.add_argument("--slice", help="metaqa: K/N, only the sample's K-th of N interleaved slices (parts of one "
                        "run, joined by bench/merge_eval.py)")
    parser.add_argument("--index-file", help="metaqa: the index built from kb.txt with conf/metaqa.toml "
                        "(refactx-pipeline graph-index), instead of building it")
    parser.add_argument("--name", default="eval-metaqa-dev", help="metaqa: the figure's file name (no suffix)")
    parser.add_argument("--beams", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", default=str(ROOT / "docs" / "figures"), help="where the figures go")
    args = parser.parse_args(argv)

    from refactx_index.qa.evaluation import evaluate, markdown_table, read_questions, write_outputs
    from refactx_index.qa.models import load_model

    started = time.perf_counter()
    loaded = load_model(args.model)
    print(f"model {args.model} loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    work = ROOT / "build" / "bench-eval"
    builders = {"finance": lambda: finance_index(Path(loaded.tokenizer_file).parent, work),
                "wikidata-sample500": lambda: wikidata_index(Path(loaded.tokenizer_file), work)}
    out = Path(args.out)
    combined = {}
    for name in args.sets.split(","):
        if name == "metaqa":
            run_metaqa(args, loaded)
            continue
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
    if combined:
        (out / "eval.json").write_text(json.dumps(combined, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
