"""``refactx-pipeline``: build indexes and keep their catalog.

Commands:
  demo         build an index from a real Wikidata extract, print facts read back from
               PostgreSQL and answer a question constrained to the index
  build        run the pipeline (all stages, or --stages) for a config
  builds       list the builds in the catalog, their bytes on disk, and which one serves each name
  path-index   build a reasoning-path index (GCR's KG-Trie) from a built graph
  graph-index  build an in-memory index file of a team's own graph ([graph] config), no Spark
  questions    template questions with gold answers from a build's facts (for refactx eval)

Reading a built index (ask, complete, explore, facts, eval, serve, paths) is the runtime
wheel's command, ``refactx``; no subcommand is in both. The demo's question needs the
``generation`` extra (torch, transformers). Beside this module: the build's progress display
(``progress``), a failure as one line (``failures``) and the small BPE vocabulary of the
examples (``vocabulary``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from refactx_index.display import format_answer, format_completions
from refactx_index.errors import RefactxError
from refactx_index.vocab import open_tokenizer

from refactx_pipeline.config import Config, add_config_arguments, config_from_args
from refactx_pipeline.catalog.embedded import pg_dsn
from refactx_pipeline.resources import example_graph
from refactx_pipeline.cli.failures import describe_failure, redact_text
from refactx_pipeline.cli.progress import BuildProgress, summary
from refactx_pipeline.cli.vocabulary import train_example_vocabulary

log = logging.getLogger("refactx_pipeline.cli")

JVM_LOG = "spark-jvm.log"  # the JVM's stderr, under the dump date's build directory (without -v)


# --------------------------------------------------------------------------- helpers


def _config_from(args: argparse.Namespace, **overrides: Any) -> Config:
    """The command's Config: file, environment, ``--set``, then ``--dsn`` and ``overrides``."""
    if getattr(args, "dsn", None):
        overrides["pg.dsn"] = args.dsn
    cfg = config_from_args(args, **overrides)
    if not args.verbose and "log_level" not in cfg.spark.model_fields_set:
        # a failed task's Java trace would flood the terminal: the failure is reported in
        # one line (describe_failure); -v, or spark.log_level set anywhere, shows Spark's log
        cfg = cfg.updated({"spark.log_level": "OFF"})
    return cfg


def _run_build(cfg: Config, stages: Sequence[str] | None, dsn: str | None = None,
               build_ids: dict[str, int] | None = None, *, verbose: int = 0) -> list[Any]:
    """``build`` with the progress display on stderr."""
    from refactx_pipeline.orchestration.pipeline import build, select_stages

    # the bar's length only: build selects the stages for itself
    with BuildProgress(select_stages(cfg, stages)) as progress:
        return build(cfg, stages, dsn=dsn, build_ids=build_ids, on_stage=progress.on_stage,
                     # the JVM's start-up notes (JDK, Hadoop, log4j) are kept off the terminal unless -v
                     jvm_stderr=None if verbose else cfg.build_dir() / JVM_LOG)


# --------------------------------------------------------------------------- commands


def cmd_build(args: argparse.Namespace) -> int:
    cfg = _config_from(args)
    stages = [s.strip() for s in args.stages.split(",")] if args.stages else None
    from refactx_pipeline.orchestration.pipeline import parse_build_ids

    results = _run_build(cfg, stages, build_ids=parse_build_ids(args.build_id, cfg), verbose=args.verbose)
    if args.json:  # stdout holds this one document and nothing else
        report: dict[str, Any] = {r.stage: r.counts for r in results}
        report["seconds"] = {r.stage: round(r.seconds, 3) for r in results}  # no stage is named so
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    sys.stderr.write(f"build outputs under {cfg.build_dir()}\n")
    return 0


def cmd_path_index(args: argparse.Namespace) -> int:
    """A path build: ``build`` with ``path_index.enabled`` and the seeds and caps given here,
    running paths ... activate (verbalize's inputs must exist: ``build`` ran before)."""
    overrides: dict[str, Any] = {"path_index.enabled": True}
    for option, key in [("seeds_file", "seeds_file"), ("questions_file", "questions_file"),
                        ("min_facts", "min_facts"), ("hops", "max_hops"), ("max_fanout", "max_fanout"),
                        ("max_paths", "max_paths")]:
        value = getattr(args, option)
        if value is not None:
            overrides[f"path_index.{key}"] = value
    cfg = _config_from(args, **overrides)
    stages = [s.strip() for s in args.stages.split(",")] if args.stages else [
        "paths", "tokenize", "prefix_rows", "load", "validate", "activate"]
    results = _run_build(cfg, stages)
    if args.json:
        json.dump({r.stage: r.counts for r in results}, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    sys.stderr.write(f"path index outputs under {cfg.stage_dir('paths')} and {cfg.build_dir() / 'path_index'}\n")
    return 0


def _demo_config(args: argparse.Namespace) -> tuple[Config, str]:
    """The demo's config: the real extract and Qwen2.5 from ../shared, or the example graph
    with a vocabulary trained here when ../shared is absent."""
    shared = Path(args.shared).resolve()
    demo = {"paths.build_root": args.build_root, "paths.source": "wikidata"}
    sample = shared / "data" / "wikidata" / "truthy-2018-sample500-en.nt"
    if sample.exists() and not args.offline_vocabulary:
        demo.update({"paths.dump_date": "2018-sample500", "input.dumps": [str(sample)]})
        # English Wikipedia titles: the enwiki page + page_props heads cover 106 of its items
        wikipedia = shared / "data" / "wikipedia"
        page = wikipedia / "enwiki-20150112-page.head1MiB.sql"
        page_props = wikipedia / "enwiki-20150112-page_props.head1MiB.sql"
        if page.exists() and page_props.exists():
            demo.update({"input.enwiki_page": str(page), "input.enwiki_page_props": str(page_props)})
        vocab = args.vocabulary or f"qwen2.5={shared / 'tokenizers' / 'qwen2.5'}"
        demo["tokenize.vocabularies"] = [vocab, *_model_vocabulary(args)]
        return _config_from(args, **demo), args.prefix or ""
    example = example_graph()
    log.warning("%s not found: using %s and a vocabulary trained on it", sample, example)
    demo.update({"paths.dump_date": "example", "input.dumps": [str(example)]})
    cfg = _config_from(args, **demo)
    if args.vocabulary:
        vocabularies = [args.vocabulary]
    else:
        vocab_dir = Path(cfg.build_dir()) / "demo-vocabulary"
        train_example_vocabulary(example, vocab_dir)
        vocabularies = [f"example-bpe={vocab_dir}"]
    return cfg.updated({"tokenize.vocabularies": vocabularies + _model_vocabulary(args)}), args.prefix or ""


DEMO_QUESTION = "Which country is Northern Ireland part of?"
ASK_VOCABULARY = "smollm2"


def _model_vocabulary(args: argparse.Namespace) -> list[str]:
    """The vocabulary of the model the demo's question is asked with (its tokenizer.json),
    or none when the question is skipped or the generation extra is missing."""
    if args.no_question:
        return []
    try:
        from refactx_index.qa.models import model_directory

        return [f"{ASK_VOCABULARY}={model_directory('smollm2')}"]
    except (ImportError, RefactxError) as exc:
        log.warning("the demo's question is skipped: %s", exc)
        args.no_question = True
        return []


def display_label(cfg: Config, entity: str) -> str | None:
    """The display label the labels stage chose for ``entity`` (None when it has none)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    path = cfg.stage_dir("labels") / "labels"
    if not path.exists():
        return None
    table = ds.dataset(str(path), format="parquet").to_table(
        columns=["label"], filter=pc.field("entity") == entity
    )
    return table.column("label")[0].as_py() if table.num_rows else None


def cmd_demo(args: argparse.Namespace) -> int:
    from refactx_pipeline.common import read_counts

    from refactx_index.tree.pg import open_index

    cfg, prefix_text = _demo_config(args)
    vocab = cfg.tokenize.vocabularies[0]
    print(f"refactx-pipeline demo: {', '.join(cfg.input.dumps)} with vocabularies "
          f"{', '.join(f'{v.name} ({v.path})' for v in cfg.tokenize.vocabularies)}")
    print(f"outputs under {cfg.build_dir()}; PostgreSQL: "
          f"{redact_text(cfg.pg.dsn) if cfg.pg.dsn else 'embedded in ' + cfg.pg.embedded_dir}")
    sys.stdout.flush()
    with pg_dsn(cfg) as dsn:
        results = _run_build(cfg, None, dsn=dsn, verbose=args.verbose)
        print("\nstage counts:")
        for r in results:
            print(f"  {r.stage:<12} {r.seconds:6.1f}s  {summary(r.counts)}")
        if not prefix_text:
            # Northern Ireland (Q26) under whatever display label the labels stage gave it
            prefix_text = f" <{display_label(cfg, 'Q26') or 'Northern Ireland'}> <"
        name = cfg.index_name(vocab.name)
        tokenizer = open_tokenizer(vocab.path)
        print(f"\nreading back index {name!r} from PostgreSQL through refactx_index.open_index:")
        with open_index(dsn, name, schema=cfg.pg.schema, statement_timeout_ms=cfg.pg.statement_timeout_ms) as index:
            completions, shown = format_completions(index, tokenizer, prefix_text, args.limit)
            print(completions, end="")
            if shown == 0:
                # the prefix is not in this graph: show the first subject's facts instead
                from refactx_index.tree.explore import enumerate_facts

                first = next(iter(enumerate_facts(index, tokenizer, "", 1)), None)
                if first is not None:
                    text = first[0]
                    alt = " " + text[: text.index("> <") + 3] if "> <" in text else text
                    print(format_completions(index, tokenizer, alt, args.limit)[0], end="")
        print(f"\nstage JSON files: {cfg.build_dir()}/<stage>/counts.json")
        validate = read_counts(cfg, "validate")
        if validate:
            print(f"validation: {summary(validate)}")
        if not args.no_question:
            from refactx_index.qa.policies import BEST_POLICIES, policy_names

            ask_name = cfg.index_name(ASK_VOCABULARY)
            print(f"\nasking SmolLM2-135M-Instruct, constrained to index {ask_name!r} after 'Fact:', with the "
                  f"best answer policies ({policy_names(BEST_POLICIES)}; {args.beams} beams; refactx ask --help):")
            sys.stdout.flush()
            with open_index(dsn, ask_name, schema=cfg.pg.schema,
                            statement_timeout_ms=cfg.pg.statement_timeout_ms) as index:
                for answer in _answer(index, [args.question], args.beams, 128, BEST_POLICIES):
                    print(format_answer(answer), end="")
                    print(format_provenance(answer), end="")
    return 0


def format_provenance(answer) -> str:
    """Where each fact the reply wrote comes from: the fact, then one line a source (its kind,
    the Wikidata ids of its subject, property and object, or its literal value)."""
    lines = ["where the facts come from:"]
    for fact in answer.facts:
        lines.append(f"  {fact.text}")
        if not fact.stored:
            lines.append("    (not a stored fact)")
        elif fact.provenance is None:
            lines.append("    (no provenance in this build)")
        else:
            for source in fact.provenance.sources:
                what = source.object if source.object is not None else json.dumps(source.value, ensure_ascii=False)
                lines.append(f"    {source.kind}: {source.subject} {source.property or '-'} {what}"
                             f"   (fact id {fact.provenance.fact_id})")
    if not answer.facts:
        lines.append("  (no fact written)")
    return "\n".join(lines) + "\n"


def _answer(index, questions: list[str], beams: int, max_new_tokens: int, policies=None) -> list:
    """Load the demo's model, check it writes the index's ids, answer ``questions`` in one batch
    with ``policies`` (None: ask's default, the best measured)."""
    from refactx_index.qa.ask import ask
    from refactx_index.tree.index import check_vocabulary
    from refactx_index.qa.models import load_model

    started = time.perf_counter()
    loaded = load_model("smollm2")
    load_s = time.perf_counter() - started
    # before any generation: the model must write the ids the index stores
    check_vocabulary(index, loaded.vocabulary)
    answers = ask(questions, index, loaded, num_beams=beams, max_new_tokens=max_new_tokens, policies=policies)
    for answer in answers:
        answer.timings["load_s"] = round(load_s, 3)
    return answers


def human_bytes(n: int) -> str:
    """``n`` bytes in decimal units (kB, MB, GB), as sizes are quoted in the docs."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def build_disk(parts: dict[str, tuple[int, int]], facts: int | None) -> dict[str, Any]:
    """One build's bytes per part (tree, provenance) and in total: table, index, their sum,
    and bytes per fact of each (None without a fact count)."""
    from refactx_pipeline.catalog.pgcatalog import BUILD_PARTS

    disk: dict[str, Any] = {}
    for part in (*BUILD_PARTS, "total"):
        table, index = ((sum(parts[p][0] for p in parts), sum(parts[p][1] for p in parts)) if part == "total"
                        else parts.get(part, (0, 0)))
        disk[part] = {"table": table, "index": index, "bytes": table + index,
                      "bytes_per_fact": round((table + index) / facts, 1) if facts else None}
    return disk


def cmd_builds(args: argparse.Namespace) -> int:
    from refactx_pipeline.catalog.pgcatalog import BUILD_PARTS, build_bytes
    from refactx_pipeline.db import connect
    from refactx_pipeline.scheduling.history import describe_run, recent_runs

    cfg = _config_from(args)
    schema = cfg.pg.schema
    with pg_dsn(cfg) as dsn, connect(dsn, autocommit=True) as conn:
        if args.release:
            from refactx_pipeline.catalog.pgcatalog import release_claim

            released = release_claim(conn, schema, args.release)
            sys.stderr.write(f"index {args.release!r}: " + (
                f"build {released} marked failed and dropped; the name is free\n" if released is not None
                else "no build in flight; the name is free\n"))
        rows = conn.execute(
            # the vocabulary column of either shape: a catalog from before 0.2.0 names it
            # tokenizer until a load upgrades it (pgcatalog.rename_build_columns)
            f"SELECT b.build_id, b.name, coalesce(to_jsonb(b) ->> 'vocabulary', to_jsonb(b) ->> 'tokenizer'), b.status, b.facts, b.rows, b.created_at, "
            f"a.build_id IS NOT NULL FROM {schema}.builds b "
            f"LEFT JOIN {schema}.active a ON a.build_id = b.build_id ORDER BY b.build_id"
        ).fetchall()
        sizes = build_bytes(conn, schema)
        runs = recent_runs(conn, schema)
    builds = [{"build_id": bid, "name": name, "vocabulary": vocabulary, "status": status, "facts": facts,
               "rows": nrows, "created_at": created.isoformat(), "active": active,
               "disk": build_disk(sizes[bid], facts) if bid in sizes else None}
              for bid, name, vocabulary, status, facts, nrows, created, active in rows]
    if args.json:  # stdout holds this one document and nothing else
        json.dump({"builds": builds}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{'id':>5} {'name':<28} {'vocabulary':<16} {'status':<10} {'facts':>10} {'rows':>10} {'on disk':>10}  active")
    for b in builds:
        on_disk = human_bytes(b["disk"]["total"]["bytes"]) if b["disk"] else "dropped"
        print(f"{b['build_id']:>5} {b['name']:<28} {b['vocabulary']:<16} {b['status']:<10} {b['facts'] or 0:>10} "
              f"{b['rows'] or 0:>10} {on_disk:>10}  {'*' if b['active'] else ''}")
    on_disk = [b for b in builds if b["disk"]]
    if on_disk:
        print("\nbytes on disk per build (its partitions; table includes TOAST; B/fact over the build's facts):")
        print(f"{'id':>5} {'part':<11} {'table':>10} {'index':>10} {'total':>10} {'B/fact':>8}")
        for b in on_disk:
            for i, part in enumerate((*BUILD_PARTS, "total")):
                d = b["disk"][part]
                per_fact = f"{d['bytes_per_fact']:.1f}" if d["bytes_per_fact"] is not None else "-"
                print(f"{b['build_id'] if i == 0 else '':>5} {part:<11} {human_bytes(d['table']):>10} "
                      f"{human_bytes(d['index']):>10} {human_bytes(d['bytes']):>10} {per_fact:>8}")
        totals = {part: sum(b["disk"][part]["bytes"] for b in on_disk) for part in (*BUILD_PARTS, "total")}
        print("all builds: " + " + ".join(f"{part} {human_bytes(totals[part])}" for part in BUILD_PARTS)
              + f" = {human_bytes(totals['total'])}")
    if runs:
        print(f"\nruns (newest first; the Airflow DAG records one per run):\n{'id':>5} {'finished':<19}  "
              f"{'dump':<8}  {'status':<8} vocabularies")
        for run in runs:
            print(describe_run(run))
    return 0


def cmd_graph_index(args: argparse.Namespace) -> int:
    from refactx_pipeline.config import VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index

    cfg = _config_from(args)
    vocabulary = VocabularyConfig.parse(args.vocabulary) if args.vocabulary else None
    started = time.perf_counter()
    built = build_graph_index(cfg, vocabulary)
    built.index.save(args.out)
    built.counts["seconds"]["total_s"] = round(time.perf_counter() - started, 3)
    if args.json:
        json.dump(built.counts, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        g, v = built.counts["graph"], built.counts["verbalize"]
        print(f"graph: {g['triples_in']} triples read, {g['triples']} kept, rejected {g['rejected_by_reason']}; "
              f"{g['entities']} entities labelled {g['labels_by_source']}, dropped {g['entities_dropped_by_reason']}")
        print(f"facts: {v['facts']} {v['by_kind']}, literals dropped {v['dropped']}; tokenize "
              f"{built.counts['tokenize']}")
        print(f"index {built.index.info.name!r}: {built.index.info.facts} facts, {built.index.info.rows} rows "
              f"-> {args.out} in {built.counts['seconds']['total_s']:.2f} s")
    return 0


def cmd_questions(args: argparse.Namespace) -> int:
    from refactx_pipeline.common import spark_started
    from refactx_pipeline.questions import run

    cfg = _config_from(args)
    with spark_started(cfg, "refactx:questions") as spark:
        questions = run(spark, cfg, count=args.count, seed=args.seed, templates=args.templates,
                        max_answers=args.max_answers, only_templated=args.only_templated)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        for question in questions:
            fh.write(json.dumps(question, ensure_ascii=False) + "\n")
    by_type: dict[str, int] = {}
    for question in questions:
        by_type[question["type"]] = by_type.get(question["type"], 0) + 1
    print(f"{len(questions)} questions {by_type} -> {out}")
    return 0


# --------------------------------------------------------------------------- parser


def _add_common(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p)
    p.add_argument("--dsn", help="PostgreSQL DSN (default: pg.dsn, else an embedded server in pg.embedded_dir)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="refactx-pipeline",
        description="Build prefix-tree indexes of knowledge-graph facts (Spark + PostgreSQL) and keep their "
        "catalog. Reading a built index (ask, complete, explore, facts, eval, serve, paths) is refactx's.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="build an index from a real extract and show facts read back",
                          description="Build an index from ../shared's real Wikidata extract with the Qwen2.5 "
                          "vocabulary (or, without ../shared, from examples/mini-graph.nt with a vocabulary "
                          "trained on it), load it into PostgreSQL and print stage counts and completions.")
    _add_common(demo)
    demo.add_argument("--shared", default="../shared",
                      help="the shared data folder (default: ../shared, beside the directory it runs in)")
    demo.add_argument("--build-root", default="build/demo", help="where the stage outputs go (default: build/demo)")
    demo.add_argument("--vocabulary", help="NAME=PATH of a tokenizer directory or hub name (default: qwen2.5 from --shared)")
    demo.add_argument("--prefix", help="text prefix to complete (default: ' <LABEL> <' for Northern Ireland, Q26)")
    demo.add_argument("--limit", type=int, default=10, help="how many completions and facts to print")
    demo.add_argument("--question", default=DEMO_QUESTION,
                      help=f"asked at the end with SmolLM2 constrained to the index (default: {DEMO_QUESTION!r})")
    demo.add_argument("--beams", type=int, default=3, help="beam search width for the question (default 3)")
    demo.add_argument("--no-question", action="store_true",
                      help="skip the question (and the SmolLM2 vocabulary's index)")
    demo.add_argument("--offline-vocabulary", action="store_true", help=argparse.SUPPRESS)
    demo.set_defaults(func=cmd_demo)

    build = sub.add_parser("build", help="run the pipeline for a config",
                           description="Run the stages parse, sitelinks, labels, verbalize, tokenize, prefix_rows, "
                           "load, validate, activate (or --stages) in one Spark application.")
    _add_common(build)
    build.add_argument("--stages", help="comma-separated subset of stages to run, in pipeline order")
    build.add_argument("--json", action="store_true", help="print all stage counts as JSON on stdout")
    build.add_argument("--build-id", action="append", default=[], metavar="[VOCABULARY=]ID",
                       help="validate/activate without load in --stages: the build the load made, per "
                       "vocabulary (a bare ID when the config names one)")
    build.set_defaults(func=cmd_build)

    paths = sub.add_parser("path-index", help="build a reasoning-path index (GCR's KG-Trie) from a built graph",
                           description="Enumerate the simple paths of 1..L edges from seed entities over the "
                           "kept statements of an earlier build of the same config, then tokenize, load, validate "
                           "and activate them as the index path_index.index_name ({source}-paths-{vocabulary}); "
                           "see docs/paths.md. Options set the path_index section's keys.")
    _add_common(paths)
    paths.add_argument("--seeds-file", help="entity ids, one a line (path_index.seeds_file)")
    paths.add_argument("--questions-file", help="JSON Lines whose path_index.questions_field (default "
                       "'entities') lists each question's entity ids")
    paths.add_argument("--min-facts", type=int, help="also every entity with at least this many kept statements")
    paths.add_argument("--hops", type=int, help="L, the longest path in edges, 1 to 4 (default 2)")
    paths.add_argument("--max-fanout", type=int, help="edges followed per node (default 100)")
    paths.add_argument("--max-paths", type=int, help="paths per seed (default 10000)")
    paths.add_argument("--stages", help="comma-separated stages (default: paths to activate)")
    paths.add_argument("--json", action="store_true", help="print all stage counts as JSON on stdout")
    paths.set_defaults(func=cmd_path_index)

    builds = sub.add_parser("builds", help="list builds in the catalog, with their bytes on disk",
                            description="List every build in the catalog with its status, counts and bytes on "
                            "disk; '*' marks the active build of its name. Per build still on disk: its tree's and "
                            "its provenance's table bytes (TOAST included) and index bytes, read now from its "
                            "partitions, their total, and bytes per fact of each (docs/tree.md). Then the recent "
                            "pipeline runs the Airflow DAG recorded (dump date, outcome per vocabulary).")
    _add_common(builds)
    builds.add_argument("--json", action="store_true",
                        help="print the builds (with their bytes, exact) as one JSON document on stdout")
    builds.add_argument("--release", metavar="NAME",
                        help="free an index name whose build run died between load and activation "
                        "(one build per name at a time): its build is marked failed and dropped")
    builds.set_defaults(func=cmd_builds)

    graph = sub.add_parser(
        "graph-index", help="build an in-memory index file of a graph (no Spark, no database)",
        description="Read the [graph] inputs of the config (triples, labels, predicate labels), apply the "
        "graph rules and the verbalize stage's rendering, tokenize with one vocabulary and write an "
        "in-memory index file (MemoryTreeIndex) that 'ask --index-file' and refactx_index read.")
    add_config_arguments(graph)
    graph.add_argument("--vocabulary", help="NAME=PATH of the tokenizer (default: the config's only "
                       "tokenize.vocabularies entry)")
    graph.add_argument("--out", required=True, help="the index file to write")
    graph.add_argument("--json", action="store_true", help="print the counts as JSON on stdout")
    graph.set_defaults(func=cmd_graph_index)
    qs = sub.add_parser(
        "questions", help="template questions with gold answers from a build's facts",
        description="Read the build's parse, labels and verbalize datasets (the config's paths; the verbalize "
        "stage has run), keep the statements whose fact is stored, and write about COUNT questions as JSONL "
        "(forward, inverse, yes/no, two-hop; stratified by type and property with --seed) with gold answers, "
        "aliases and fact ids, for 'refactx eval'. Templates: docs/questions.md.")
    add_config_arguments(qs)
    qs.add_argument("--count", type=int, default=200, help="how many questions (default 200)")
    qs.add_argument("--seed", type=int, default=23, help="the sampling seed (default 23)")
    qs.add_argument("--templates", help="a JSON file of templates laid over the packaged ones")
    qs.add_argument("--only-templated", action="store_true",
                    help="only properties with templates of their own (not the default 'What is the P of S?')")
    qs.add_argument("--max-answers", type=int, default=10, help="leave out questions with more gold answers")
    qs.add_argument("--out", required=True, help="the JSONL file to write")
    qs.set_defaults(func=cmd_questions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        return args.func(args)
    except Exception as exc:  # one line for the user; the traceback with -v
        message = describe_failure(exc)
        if message is None or args.verbose:
            raise
        sys.stderr.write(f"refactx-pipeline: error: {message}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
