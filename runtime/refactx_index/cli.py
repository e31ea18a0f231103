"""``refactx``: the serving side's command, installed with the runtime wheel alone.

``refactx explore`` answers the questions a step-by-step graph explorer asks, from a
served index (an active PostgreSQL build, or an index file) and its vocabulary::

    refactx explore --index-file sample.rfx --tokenizer DIR entities "North"
    refactx explore --dsn postgresql://... --index wikidata-qwen2.5 --tokenizer DIR relations "Germany"
    refactx explore ... objects "Germany" "capital"
    refactx explore ... facts "<Germany> <" --offset 0 --limit 20

Each prints one label (or fact) a line with its fact count, or ``--json``. Exit status 3
when nothing matches.

``refactx ask QUESTION...`` answers with constrained generation (the ``generation``
extra): the model reasons, writes ``Fact:`` lines that may only be stored facts, and
answers from them::

    refactx ask --index-file sample.rfx "What is the capital of Germany?"

``refactx eval QUESTIONS.jsonl`` answers a question file constrained and unconstrained
(the same prompt and decoding) and scores both (:mod:`refactx_index.evaluation`; the plot
needs the ``eval`` extra)::

    refactx eval questions.jsonl --index-file finance.rfx --out eval/finance

``refactx serve`` starts the fact server (:mod:`refactx_index.server`; the ``server`` and
``generation`` extras)::

    refactx serve --index-file sample=sample.rfx --port 8000
    refactx serve --dsn postgresql://reader@db/refactx --index wikidata-smollm2 --model smollm2

Building indexes is the pipeline's (``refactx-index build``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Sequence

from .errors import RefactxError

log = logging.getLogger(__name__)

NOTHING = 3


def _open(args: argparse.Namespace):
    if args.index_file:
        from .memory import MemoryTreeIndex

        return MemoryTreeIndex.load(args.index_file)
    dsn = args.dsn or os.environ.get("REFACTX_DSN")
    if not dsn or not args.index:
        raise SystemExit("refactx: give --index-file FILE, or --dsn (or REFACTX_DSN) and --index NAME")
    from .pg import open_index

    return open_index(dsn, args.index, tokenizer=args.tokenizer)


def cmd_explore(args: argparse.Namespace) -> int:
    from . import explore
    from .vocab import open_tokenizer

    tokenizer = open_tokenizer(args.tokenizer)
    with _open(args) as index:
        if args.what == "facts":
            if len(args.text) != 1:
                raise SystemExit("refactx explore facts takes one text (the start of the facts)")
            found = explore.facts_page(index, tokenizer, args.text[0], offset=args.offset, limit=args.limit)
            rows = [{"fact": f} for f in found]
        else:
            wanted = {"entities": 1, "relations": 1, "objects": 2}[args.what]
            if len(args.text) != wanted:
                raise SystemExit(f"refactx explore {args.what} takes {wanted} text(s), got {len(args.text)}")
            call = {"entities": explore.entities, "relations": explore.relations, "objects": explore.objects}
            labels = call[args.what](index, tokenizer, *args.text, limit=args.limit)
            rows = [{"label": x.label, "facts": x.facts} for x in labels]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
    else:
        for row in rows:
            print(row["fact"] if "fact" in row else f"{row['facts']:>8}  {row['label']}")
    return 0 if rows else NOTHING


def print_answer(answer, out=None) -> None:
    """The reply with its facts marked (checked against the index), and the final answer."""
    out = out or sys.stdout
    print(f"question: {answer.question}", file=out)
    print("reply:", file=out)
    facts = list(answer.facts)
    for line in answer.reply.splitlines() or [""]:
        mark = ""
        fact = next((f for f in facts if f.text and f.text in line), None)
        if fact is not None:
            facts.remove(fact)
            mark = "   [stored]" if fact.stored else (
                "   [incomplete]" if not fact.complete else "   [NOT STORED]")
        print(f"  {line}{mark}", file=out)
    stored = sum(f.stored for f in answer.facts)
    print(f"facts: {stored} of {len(answer.facts)} stored in the index", file=out)
    print(f"answer: {answer.answer or '(no Answer: line)'}", file=out)
    t = answer.timings
    steps = max(int(t.get("steps", 0)), 1)
    print(f"({answer.prompt_tokens} prompt tokens, {answer.generated_tokens} generated; model load "
          f"{t.get('load_s', 0):.1f} s, generation {t['generate_s']:.1f} s, {t['ms_per_step']:.0f} ms/step, "
          f"of which the fact constraint {1000 * t['processor_s'] / steps:.1f} ms/step)", file=out)


def cmd_ask(args: argparse.Namespace) -> int:
    import time

    from .ask import ask, check_model_vocabulary
    from .models import load_model
    from .prompt import Prompt
    from .vocab import file_sha256

    prompt = Prompt.from_file(args.prompt_file) if args.prompt_file else Prompt()
    with _open(args) as index:
        started = time.perf_counter()
        loaded = load_model(args.model)
        load_s = time.perf_counter() - started
        check_model_vocabulary(index, loaded.tokenizer, file_sha256(loaded.tokenizer_file))
        answers = ask(args.question, index, loaded, prompt=prompt, num_beams=args.beams,
                      max_new_tokens=args.max_new_tokens, constrained=not args.unconstrained)
    for answer in answers:
        answer.timings["load_s"] = round(load_s, 3)
    if args.json:
        docs = [a.to_json() for a in answers]
        print(json.dumps(docs if len(docs) > 1 else docs[0], indent=2, ensure_ascii=False))
    else:
        for answer in answers:
            print_answer(answer)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import time

    from .ask import check_model_vocabulary
    from .evaluation import evaluate, markdown_table, read_questions, write_outputs
    from .models import load_model
    from .prompt import Prompt
    from .vocab import file_sha256

    questions = read_questions(args.questions)
    if args.limit:
        questions = questions[:args.limit]
    prompt = Prompt.from_file(args.prompt_file) if args.prompt_file else Prompt()
    modes = ["constrained"] if args.constrained_only else ["constrained", "unconstrained"]
    with _open(args) as index:
        loaded = load_model(args.model)
        check_model_vocabulary(index, loaded.tokenizer, file_sha256(loaded.tokenizer_file))
        started = time.perf_counter()
        results = evaluate(questions, index, loaded, modes=modes, batch_size=args.batch_size,
                           num_beams=args.beams, max_new_tokens=args.max_new_tokens, prompt=prompt)
        index_name = index.info.name
    meta = {"questions_file": str(args.questions), "questions": len(questions), "index": index_name,
            "model": args.model, "beams": args.beams, "max_new_tokens": args.max_new_tokens,
            "batch_size": args.batch_size, "seconds": round(time.perf_counter() - started, 1)}
    summary = write_outputs(results, args.out, meta, plot_png=not args.no_plot)
    print(markdown_table(summary), end="")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .engines.core import check_index_vocabulary
    from .models import load_model
    from .server.app import ServerSettings, create_app
    from .server.engine import TransformersEngine

    indexes = {}
    for spec in args.index_file or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"refactx: --index-file takes NAME=PATH, not {spec!r}")
        from .memory import MemoryTreeIndex

        indexes[name] = MemoryTreeIndex.load(path)
    if args.index:
        dsn = args.dsn or os.environ.get("REFACTX_DSN")
        if not dsn:
            raise SystemExit("refactx: --index needs --dsn (or REFACTX_DSN)")
        from .pg import open_index

        for name in args.index:
            indexes[name] = open_index(dsn, name, follow=True)
    if not indexes:
        raise SystemExit("refactx: give at least one --index-file NAME=PATH or --index NAME")
    loaded = load_model(args.model)
    for name, index in indexes.items():  # a model that does not write an index's ids is refused here
        check_index_vocabulary(index, name, str(loaded.tokenizer_file), loaded.tokenizer)
    default = args.default_index or next(iter(indexes))
    if default not in indexes:
        raise SystemExit(f"refactx: --default-index {default!r} is not among {sorted(indexes)}")
    settings = ServerSettings(model_name=args.model_name or args.model, default_index=default,
                              max_new_tokens=args.max_new_tokens, max_concurrent=args.max_concurrent,
                              max_body_bytes=args.max_body_bytes, request_timeout_s=args.request_timeout)
    engine = TransformersEngine(loaded, indexes, max_batch=args.max_batch)
    app = create_app(engine, settings)
    app.router.on_startup.append(lambda: print(
        f"refactx: serving {sorted(indexes)} with {settings.model_name} on http://{args.host}:{args.port}",
        file=sys.stderr, flush=True))
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning")
    finally:
        engine.close()
    return 0


def _index_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("index")
    where.add_argument("--index-file", help="an index file (.rfx)")
    where.add_argument("--dsn", help="PostgreSQL (default: $REFACTX_DSN)")
    where.add_argument("--index", help="the index name (its active build is read)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="refactx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO, tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explore", help="entities, relations, objects and facts of a served index",
                        description="Labels that continue a text, with the facts behind each, from the "
                                    "tree's leaf counts (a count never enumerates the facts below).")
    ex.add_argument("what", choices=["entities", "relations", "objects", "facts"],
                    help="entities TEXT: subjects whose label starts with TEXT; relations ENTITY; "
                         "objects ENTITY RELATION; facts TEXT: the facts starting with TEXT, paged")
    ex.add_argument("text", nargs="+")
    _index_arguments(ex)
    ex.add_argument("--tokenizer", required=True,
                    help="the index's vocabulary: tokenizer.json or its directory (checked against a PostgreSQL build)")
    ex.add_argument("--limit", type=int, default=20, help="at most this many lines (default 20)")
    ex.add_argument("--offset", type=int, default=0, help="facts: skip this many first")
    ex.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ex.set_defaults(func=cmd_explore)

    ak = sub.add_parser("ask", help="answer questions with a model that may only write stored facts",
                        description="Answer each QUESTION (one batch) with constrained generation; the index is "
                                    "an index file or an active PostgreSQL build built with the model's own "
                                    "tokenizer.json.")
    ak.add_argument("question", nargs="+")
    _index_arguments(ak)
    ak.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or a transformers directory")
    ak.add_argument("--beams", type=int, default=3, help="beam search width (default 3; 1 is greedy)")
    ak.add_argument("--max-new-tokens", type=int, default=128)
    ak.add_argument("--prompt-file", help="system message and worked examples (format: refactx_index/prompt.py)")
    ak.add_argument("--unconstrained", action="store_true", help="without the fact constraint (to compare)")
    ak.add_argument("--json", action="store_true", help="the answers as JSON (reply, facts, answer, timings)")
    ak.set_defaults(func=cmd_ask, tokenizer=None)

    ev = sub.add_parser("eval", help="score answers to a question file, with the fact constraint and without",
                        description="Answer every question of QUESTIONS (JSONL: question, answers with aliases, "
                                    "optional type and fact_ids) constrained and unconstrained, with the same prompt "
                                    "and decoding, in batches; score A and P by exact match after normalization "
                                    "(docs/evaluation.md); write OUT.json, OUT.md and OUT.png (the eval extra) "
                                    "and print the table.")
    ev.add_argument("questions", help="the question file (JSONL; refactx-index questions writes them)")
    _index_arguments(ev)
    ev.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or a transformers directory")
    ev.add_argument("--beams", type=int, default=3, help="beam search width (default 3; 1 is greedy)")
    ev.add_argument("--max-new-tokens", type=int, default=128)
    ev.add_argument("--batch-size", type=int, default=8, help="questions generated together (default 8)")
    ev.add_argument("--limit", type=int, help="only the first LIMIT questions")
    ev.add_argument("--prompt-file", help="system message and worked examples (format: refactx_index/prompt.py)")
    ev.add_argument("--constrained-only", action="store_true", help="skip the unconstrained answers")
    ev.add_argument("--out", default="eval", help="path prefix of the JSON, Markdown and PNG outputs (default: eval)")
    ev.add_argument("--no-plot", action="store_true", help="no PNG (without the eval extra's matplotlib)")
    ev.set_defaults(func=cmd_eval, tokenizer=None)

    sv = sub.add_parser("serve", help="the OpenAI-compatible fact server",
                        description="An OpenAI-compatible HTTP server (chat and completions, streaming) whose "
                                    "model may only write stored facts after 'Fact:'; requests name the index in "
                                    '"refactx": {"index": NAME}. See docs/runtime.md.')
    sv.add_argument("--index-file", action="append", metavar="NAME=PATH", help="serve an index file (repeatable)")
    sv.add_argument("--index", action="append", metavar="NAME",
                    help="serve the active PostgreSQL build of NAME, following activations (repeatable)")
    sv.add_argument("--dsn", help="PostgreSQL for --index (default: $REFACTX_DSN)")
    sv.add_argument("--default-index", help="the index of requests that name none (default: the first)")
    sv.add_argument("--model", default="smollm2", help="smollm2, a .gguf file or a transformers directory")
    sv.add_argument("--model-name", help="the model id clients send and /v1/models lists (default: --model)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--max-batch", type=int, default=16, help="requests generated together (default 16)")
    sv.add_argument("--max-new-tokens", type=int, default=256, help="the largest max_tokens a request may ask")
    sv.add_argument("--max-concurrent", type=int, default=32, help="requests in flight before 429")
    sv.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger bodies get 413")
    sv.add_argument("--request-timeout", type=float, default=300.0, help="seconds before 504")
    sv.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (RefactxError, OSError, ValueError) as exc:
        if args.verbose:
            raise
        sys.stderr.write(f"refactx: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
