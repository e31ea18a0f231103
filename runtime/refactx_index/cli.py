"""``refactx``: the serving side's command, installed with the runtime wheel alone.

``refactx explore`` answers the questions a step-by-step graph explorer asks, from a
served index (an active PostgreSQL build, or an index file) and its vocabulary::

    refactx explore --index-file sample.rfx --vocabulary DIR entities "North"
    REFACTX_DSN=postgresql://... refactx explore --index wikidata-qwen2.5 --vocabulary DIR relations "Germany"
    refactx explore ... objects "Germany" "capital"
    refactx explore ... facts "<Germany> <" --offset 0 --limit 20

Each prints one label (or fact) a line with its fact count, or ``--json``. Exit status 3
when nothing matches.

``refactx complete TEXT`` lists how a text continues in the tree (token by token, with fact
counts) and the first whole facts below it::

    refactx complete --index-file sample.rfx --vocabulary DIR " <Northern Ireland> <"

``refactx ask QUESTION...`` answers with constrained generation (the ``generation``
extra): the model reasons, writes ``Fact:`` lines that may only be stored facts, and
answers from them::

    refactx ask --index-file sample.rfx "What is the capital of Germany?"

``refactx facts lookup TEXT`` prints where a stored fact comes from, one source a line
(exit 3 when the text is not a stored fact; docs/provenance.md)::

    refactx facts lookup --dsn postgresql://... --index wikidata-smollm2 "<Germany> <capital> <Berlin> ."

``refactx eval QUESTIONS...`` answers question files (JSONL, or MetaQA's) constrained and unconstrained
(the same prompt and decoding) and scores both (:mod:`refactx_index.qa.evaluation`; the plot
needs the ``eval`` extra)::

    refactx eval questions.jsonl --index-file finance.rfx --out eval/finance
    refactx eval metaqa/1-hop/qa_dev.txt metaqa/2-hop/qa_dev.txt --index-file metaqa.rfx --sample-per-hop 50

``refactx serve`` starts the fact server (:mod:`refactx_index.server`; the ``server`` and
``generation`` extras)::

    refactx serve --index-file sample=sample.rfx --port 8000
    REFACTX_DSN=postgresql://reader@db/refactx refactx serve --index wikidata-smollm2 --model smollm2

``refactx paths`` lists the reasoning paths (GCR's KG-Trie, docs/paths.md) of 1..L edges
from seed entities over a graph's facts (a facts file, or an index file's facts), and with
``--out`` writes their path index; ``refactx ask --paths SEED`` answers over that per-question
path index, after ``Path:``::

    refactx paths --facts facts.txt --seed Germany --hops 2
    refactx ask --index-file sample.rfx --paths Germany "What is the capital of Germany?"

``--vocabulary`` names the index's vocabulary: a ``tokenizer.json``, a tokenizer or model
directory, or a GGUF file (``--tokenizer`` is its deprecated alias).

Building indexes is the pipeline's (``refactx-pipeline build``; ``refactx-pipeline path-index``).

Each subcommand imports its modules when it runs, not at the top of this module: ``refactx
--help`` and shell completion (which run this module's parser) then load neither numpy,
psycopg, tokenizers nor torch. docs/benchmarks.md has the import time.
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import InputRefused, RefactxError

# typing's own constant, without importing typing: `refactx --help` imports argparse and this
# module's errors only (json, logging, time and the rest come with the subcommand that uses them)
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Sequence

    from .vocab import Vocabulary

NOTHING = 3
# written out rather than read from qa.models.MODEL_NAMES, whose import loads numpy (a test keeps them equal)
MODEL_HELP = "smollm2, smollm2-135m, gemma3-270m (packaged), a .gguf file or a transformers directory"


def _open(args: argparse.Namespace, vocabulary: "Vocabulary | None" = None):
    """The index of --index-file, or the active build of --index on --dsn (checked against
    ``vocabulary`` when one is given)."""
    from .tree.memory import MemoryTreeIndex
    from .tree.pg import open_index

    if args.index_file:
        return MemoryTreeIndex.load(args.index_file, vocabulary=vocabulary)
    dsn = args.dsn or os.environ.get("REFACTX_DSN")
    if not dsn or not args.index:
        raise SystemExit("refactx: give --index-file FILE, or --dsn (or REFACTX_DSN) and --index NAME")

    return open_index(dsn, args.index, vocabulary=vocabulary)


def open_vocabulary_argument(path: str) -> "Vocabulary":
    """The vocabulary ``--vocabulary`` names: a ``tokenizer.json``, a tokenizer's directory, a
    model directory (with its end ids), a hub name, or a GGUF file (its converted model
    directory's: :func:`refactx_index.qa.models.model_directory`)."""
    from .vocab import as_vocabulary, open_model_vocabulary

    if path.endswith(".gguf") and os.path.isfile(path):
        from .qa.models import model_directory

        return open_model_vocabulary(model_directory(path))
    return as_vocabulary(path)


def _vocabulary(args: argparse.Namespace, command: str, required: bool = True) -> "Vocabulary | None":
    if not args.vocabulary:
        if required:
            raise SystemExit(f"refactx {command}: give --vocabulary (a tokenizer.json, a tokenizer or model "
                             "directory, or a GGUF file): the index's vocabulary")
        return None
    return open_vocabulary_argument(args.vocabulary)


def cmd_explore(args: argparse.Namespace) -> int:
    import json

    from .tree import explore

    vocabulary = _vocabulary(args, "explore")
    with _open(args, vocabulary) as index:
        if args.what == "facts":
            if len(args.text) != 1:
                raise SystemExit("refactx explore facts takes one text (the start of the facts)")
            found = explore.facts_page(index, vocabulary, args.text[0], offset=args.offset, limit=args.limit)
            rows = [{"fact": f} for f in found]
        else:
            wanted = {"entities": 1, "relations": 1, "objects": 2}[args.what]
            if len(args.text) != wanted:
                raise SystemExit(f"refactx explore {args.what} takes {wanted} text(s), got {len(args.text)}")
            call = {"entities": explore.entities, "relations": explore.relations, "objects": explore.objects}
            labels = call[args.what](index, vocabulary, *args.text, limit=args.limit)
            rows = [{"label": x.label, "facts": x.facts} for x in labels]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
    else:
        for row in rows:
            print(row["fact"] if "fact" in row else f"{row['facts']:>8}  {row['label']}")
    return 0 if rows else NOTHING


def cmd_complete(args: argparse.Namespace) -> int:
    from .display import format_completions, quoted_head

    # a PostgreSQL build is opened with the vocabulary checked (tokenizer.json's sha256): a
    # wrong one would tokenize the text into ids the tree does not hold and show nothing
    vocabulary = _vocabulary(args, "complete")
    with _open(args, vocabulary) as index:
        completions, shown = format_completions(index, vocabulary, args.text, args.limit)
    sys.stdout.write(completions)
    if shown == 0:
        where = args.index_file or args.index
        sys.stderr.write(f"refactx: no fact of index {where!r} starts with {quoted_head(args.text)}\n")
        return NOTHING
    return 0


def source_line(fact_id: int, source) -> str:
    """One source of a fact: id, kind, subject, property, then the object id or the quoted value."""
    import json

    obj = source.object if source.object is not None else json.dumps(source.value, ensure_ascii=False)
    return f"{fact_id}\t{source.kind}\t{source.subject}\t{source.property or '-'}\t{obj}"


def cmd_facts(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    text = args.text.strip()  # a fact as the tree spells it (with its leading fact_prefix) works too
    with _open(args) as index:
        found = index.provenance([text])
        name = index.info.name
    if found is None:
        sys.stderr.write(f"refactx: index {name!r} has no provenance (an index file, or a build loaded "
                         "before provenance existed): provenance unavailable\n")
        return NOTHING
    (provenance,) = found
    if args.json:
        print(json.dumps(asdict(provenance), ensure_ascii=False, indent=1))
    elif provenance.sources:
        for source in provenance.sources:
            print(source_line(provenance.fact_id, source))
    else:
        sys.stderr.write(f"refactx: {text!r} is not a stored fact of index {name!r}\n")
    return 0 if provenance.sources else NOTHING


def _path_graph(args: argparse.Namespace, vocabulary: "Vocabulary | None"):
    """The graph of ``--facts``, else of the facts of the index ``_open`` opens."""
    from .prompting import paths

    if args.facts:
        return paths.PathGraph.from_fact_texts(paths.read_fact_texts(args.facts))
    if vocabulary is None:
        raise SystemExit("refactx: --facts FILE, or an index and --vocabulary to read its facts")
    with _open(args) as index:
        return paths.graph_of_index(index, vocabulary)


def _path_caps(args: argparse.Namespace):
    from .prompting.paths import PathCaps

    return PathCaps(args.hops, args.max_fanout, args.max_paths)


def _seeds(args: argparse.Namespace, seeds: Sequence[str]) -> list[str]:
    from .prompting.paths import read_id_labels, seed_labels

    return seed_labels(seeds, read_id_labels(args.labels) if args.labels else None)


def cmd_paths(args: argparse.Namespace) -> int:
    import json
    import time

    vocabulary = _vocabulary(args, "paths", required=False)
    graph = _path_graph(args, vocabulary)
    seeds = _seeds(args, args.seed)
    started = time.perf_counter()
    if args.out:
        if vocabulary is None:
            raise SystemExit("refactx paths --out needs --vocabulary (the vocabulary of the path index)")
        index, found = graph.index(seeds, vocabulary, _path_caps(args))
        index.save(args.out)
    else:
        found = graph.paths(seeds, _path_caps(args))
    seconds = time.perf_counter() - started
    summary = {"paths": len(found.paths), "by_hops": found.by_hops, "capped": found.capped,
               "not_simple": found.not_simple, "unknown_seeds": found.unknown_seeds,
               "seconds": round(seconds, 4)}
    if args.json:
        print(json.dumps({**summary, "texts": found.paths}, ensure_ascii=False, indent=1))
    else:
        for text in found.paths:
            print(text)
        print(json.dumps(summary, ensure_ascii=False), file=sys.stderr)
    return 0 if found.paths else NOTHING


# written out rather than read from qa.policies.POLICIES, whose import loads numpy (a test keeps them equal)
POLICY_NAMES = ("prefill-fact", "entities-first", "relations-first", "grounded", "named-relations-only", "plain-end")
BEST_POLICY_NAMES = ("prefill-fact", "entities-first", "relations-first", "grounded")
_POLICY_FLAGS = {"prefill_fact": "prefill-fact", "entities_first": "entities-first",
                 "relations_first": "relations-first", "grounded": "grounded",
                 "named_relations_only": "named-relations-only"}


def _policies(args: argparse.Namespace, default):
    """The answer policies the options name: --plain (none), or those of --policies and of
    the policy flags together, or ``default`` when none is given."""
    from .qa.policies import PLAIN, parse_policies

    named = [name for dest, name in _POLICY_FLAGS.items() if getattr(args, dest)]
    if args.policies:
        named += args.policies.split(",")
    if args.plain:
        if named:
            raise InputRefused("--plain answers with no policy: it takes no --policies or policy flag")
        return PLAIN
    return parse_policies(named) if named else default


def cmd_ask(args: argparse.Namespace) -> int:
    import contextlib
    import json
    import time

    from .display import format_answer
    from .prompting.prompt import Prompt
    from .qa.ask import ask
    from .qa.models import load_model
    from .tree.index import check_vocabulary

    # None: the index's kind decides (Fact: and the fact prompt, or Path: over a path index)
    prompt = Prompt.from_file(args.prompt_file) if args.prompt_file else None
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        loaded = load_model(args.model)
        load_s = time.perf_counter() - started
        if args.paths:
            graph = _path_graph(args, loaded.vocabulary)
            index, _ = graph.index(_seeds(args, args.paths.split(",")), loaded.vocabulary,
                                   _path_caps(args))
        else:
            index = stack.enter_context(_open(args))
            check_vocabulary(index, loaded.vocabulary)
        answers = ask(args.question, index, loaded, prompt=prompt, num_beams=args.beams,
                      max_new_tokens=args.max_new_tokens, constrained=not args.unconstrained,
                      policies=_policies(args, None))
    for answer in answers:
        answer.timings["load_s"] = round(load_s, 3)
    if args.json:
        docs = [a.to_json() for a in answers]
        print(json.dumps(docs if len(docs) > 1 else docs[0], indent=2, ensure_ascii=False))
    else:
        for answer in answers:
            sys.stdout.write(format_answer(answer))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import logging
    import time

    from .prompting.prompt import Prompt, fitted_prompt, question_prompt
    from .qa.evaluation import evaluate, markdown_table, read_question_file, stratified_sample, write_outputs
    from .qa.models import load_model
    from .tree.index import check_vocabulary

    questions, rejected = [], []
    for path in args.questions:
        read = read_question_file(path, args.format)
        questions += read.questions
        rejected += read.rejected
    for r in rejected[:20]:
        logging.getLogger(__name__).warning("%s:%d: %s", r.source, r.line, r.reason)
    if args.sample_per_hop:
        questions = stratified_sample(questions, args.sample_per_hop, args.seed)
    if args.limit:
        questions = questions[:args.limit]
    prompt = Prompt.from_file(args.prompt_file) if args.prompt_file else None
    modes = ["constrained"] if args.constrained_only else ["constrained", "unconstrained"]
    from .qa.policies import PLAIN, policy_names

    policies = _policies(args, PLAIN)
    with _open(args) as index:
        loaded = load_model(args.model)
        check_vocabulary(index, loaded.vocabulary)
        if prompt is None:
            prompt = (question_prompt(index, loaded.vocabulary) if args.examples == "per-question"
                      else fitted_prompt(index, loaded.vocabulary))
        started = time.perf_counter()
        results = evaluate(questions, index, loaded, modes=modes, batch_size=args.batch_size,
                           num_beams=args.beams, max_new_tokens=args.max_new_tokens, prompt=prompt, policies=policies)
        index_name = index.info.name
    meta = {"questions_files": [str(p) for p in args.questions], "questions": len(questions),
            "rejected_lines": len(rejected),
            "rejected": [{"source": r.source, "line": r.line, "reason": r.reason} for r in rejected[:100]],
            "sample_per_hop": args.sample_per_hop, "seed": args.seed, "index": index_name,
            "model": args.model, "beams": args.beams, "max_new_tokens": args.max_new_tokens,
            "batch_size": args.batch_size, "policies": policy_names(policies), "prompt": {"system": prompt.system,
                                                               "examples": [list(e) for e in prompt.examples]},
            "seconds": round(time.perf_counter() - started, 1)}
    summary = write_outputs(results, args.out, meta, plot_png=not args.no_plot)
    if rejected:
        print(f"{len(rejected)} lines are no question (in {args.out}.json; the first: {rejected[0].source}:"
              f"{rejected[0].line}: {rejected[0].reason})")
    print(markdown_table(summary), end="")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .qa.models import load_model, model_directory
    from .server.app import ServerSettings, create_app
    from .server.backend_transformers import TransformersEngine
    from .server.backend_vllm import VllmEngine
    from .server.connections import uvicorn_config
    from .tree.index import check_vocabulary
    from .tree.memory import MemoryTreeIndex
    from .tree.pg import open_index
    from .vocab import open_model_vocabulary

    api_key, allowed_hosts = _serve_access(args)
    indexes, specs = {}, {}  # opened here; what vLLM's worker opens (file path or DSN)
    for spec in args.index_file or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"refactx: --index-file takes NAME=PATH, not {spec!r}")

        indexes[name], specs[name] = MemoryTreeIndex.load(path), os.path.abspath(path)
    if args.index:
        dsn = args.dsn or os.environ.get("REFACTX_DSN")
        if not dsn:
            raise SystemExit("refactx: --index needs --dsn (or REFACTX_DSN)")

        for name in args.index:
            indexes[name], specs[name] = open_index(dsn, name, follow=True), dsn
    if not indexes:
        raise SystemExit("refactx: give at least one --index-file NAME=PATH or --index NAME")
    default = args.default_index or next(iter(indexes))
    if default not in indexes:
        raise SystemExit(f"refactx: --default-index {default!r} is not among {sorted(indexes)}")
    if args.engine == "vllm":
        model_dir = str(model_directory(args.model))
        vocabulary = open_model_vocabulary(model_dir)  # the server's one load of the tokenizer
        for index in indexes.values():  # before vLLM starts (its worker checks again)
            check_vocabulary(index, vocabulary)
        engine = VllmEngine(model_dir, specs, indexes, vocabulary, max_batch=args.max_batch,
                            max_model_len=args.max_model_len,
                            gpu_memory_utilization=args.gpu_memory_utilization,
                            enforce_eager=args.enforce_eager, dtype=args.dtype)
    else:
        loaded = load_model(args.model)
        for index in indexes.values():  # a model that does not write an index's ids is refused here
            check_vocabulary(index, loaded.vocabulary)
        engine = TransformersEngine(loaded, indexes, max_batch=args.max_batch)
    settings = ServerSettings(model_name=args.model_name or args.model, default_index=default,
                              max_new_tokens=args.max_new_tokens, max_prompt_tokens=args.max_prompt_tokens,
                              max_concurrent=args.max_concurrent, max_body_bytes=args.max_body_bytes,
                              request_timeout_s=args.request_timeout, api_key=api_key,
                              allowed_hosts=allowed_hosts)
    app = create_app(engine, settings)
    app.router.on_startup.append(lambda: print(
        f"refactx: serving {sorted(indexes)} with {settings.model_name} ({args.engine}, end ids "
        f"{list(engine.vocabulary.eos_ids)}) on http://{args.host}:{args.port}"
        + ("" if api_key else " without an API key"),
        file=sys.stderr, flush=True))

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            # SIGINT/SIGTERM: the running batch ends at its next step, so the graceful
            # shutdown below finds its requests answered (503) instead of waiting for them
            begin = getattr(engine, "begin_shutdown", None)
            if begin is not None:
                begin()
            super().handle_exit(sig, frame)

    try:
        Server(uvicorn_config(app, keep_alive_timeout_s=args.keep_alive_timeout,
                              header_timeout_s=args.header_timeout, max_connections=args.max_connections,
                              host=args.host, port=args.port, timeout_graceful_shutdown=5,
                              log_level="info" if args.verbose else "warning")).run()
    finally:
        engine.close()
    return 0


def _serve_access(args: argparse.Namespace) -> tuple[str | None, tuple[str, ...]]:
    """The API key (--api-key, else $REFACTX_API_KEY) and the Host names served: without a key
    the server binds only to a loopback address unless --no-api-key says a proxy in front
    authenticates; on loopback only the loopback names are served by default (DNS rebinding)."""

    from .server.app import LOOPBACK_HOSTS

    api_key = args.api_key or os.environ.get("REFACTX_API_KEY") or None
    loopback = args.host in LOOPBACK_HOSTS or args.host.startswith("127.")
    if api_key is None and not loopback and not args.no_api_key:
        raise SystemExit(f"refactx: serving on {args.host} needs an API key: --api-key or REFACTX_API_KEY "
                         "(or --no-api-key behind a proxy that authenticates)")
    if args.allowed_hosts:
        hosts = tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip())
    else:
        hosts = (*LOOPBACK_HOSTS, args.host) if loopback else ("*",)
    return api_key, hosts


VOCABULARY_HELP = ("the index's vocabulary: a tokenizer.json, a tokenizer or model directory, or a "
                   "GGUF file")


class _DeprecatedAlias(argparse.Action):
    """An option kept under its old name: sets ``dest`` and notes the old name, which
    :func:`main` warns about once logging is set up."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        namespace.deprecated_options = [*getattr(namespace, "deprecated_options", []), option_string]


def _vocabulary_argument(parser: argparse.ArgumentParser, help: str = VOCABULARY_HELP) -> None:
    parser.add_argument("--vocabulary", metavar="PATH", help=help)
    # the option's name before 0.2.0 (CHANGELOG.md), hidden from --help
    parser.add_argument("--tokenizer", dest="vocabulary", action=_DeprecatedAlias, help=argparse.SUPPRESS)


def _index_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("index")
    where.add_argument("--index-file", help="an index file (.rfx)")
    where.add_argument("--dsn", help="PostgreSQL (default: $REFACTX_DSN)")
    where.add_argument("--index", help="the index name (its active build is read)")


def _path_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--facts", help="the graph as a facts file, one '<s> <r> <o> .' a line, optionally a tab and "
                                   "the object's kind, entity or literal (instead of the index's)")
    p.add_argument("--labels", help="an ID<TAB>LABEL file: seeds given as ids are read as their labels")
    p.add_argument("--hops", type=int, default=2, help="L, the longest path in edges, 1 to 4 (default 2)")
    p.add_argument("--max-fanout", type=int, default=100, help="edges followed per node (default 100)")
    p.add_argument("--max-paths", type=int, default=10_000, help="paths per seed (default 10000)")


def _policy_arguments(parser: argparse.ArgumentParser, default: str) -> None:
    """The answer policies (docs/runtime.md, "Answer policies"): a list by name, or a flag each."""
    group = parser.add_argument_group("answer policies", f"What a reply may write beyond the fact constraint; "
                                                         f"the flags and --policies add up ({default}).")
    group.add_argument("--policies", metavar="NAMES",
                       help=f"comma-separated, of {', '.join(POLICY_NAMES)}; best ({','.join(BEST_POLICY_NAMES)})")
    group.add_argument("--plain", action="store_true", help="no policy: the fact constraint alone (the paper's mode)")
    group.add_argument("--prefill-fact", action="store_true", help="every reply opens with 'Fact:' (written for it)")
    group.add_argument("--entities-first", action="store_true",
                       help="at a fact's subject, only the question's own entities (labels of the index found "
                            "in the question) while the reply follows one of them")
    group.add_argument("--relations-first", action="store_true",
                       help="follow the question's relation words: the relations it names come first, and a reply "
                            "chains another fact while a named relation is not yet written (with --grounded: "
                            "answers only from facts chained from a question entity)")
    group.add_argument("--grounded", action="store_true",
                       help="the text after 'Answer:' is a subject or object of a stored fact the reply wrote, "
                            "or I don't know.")
    group.add_argument("--named-relations-only", action="store_true",
                       help="with --grounded and --relations-first: I don't know unless a chained fact's relation "
                            "is one the question names")


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
    _vocabulary_argument(ex, VOCABULARY_HELP + " (required; checked against a PostgreSQL build)")
    ex.add_argument("--limit", type=int, default=20, help="at most this many lines (default 20)")
    ex.add_argument("--offset", type=int, default=0, help="facts: skip this many first")
    ex.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ex.set_defaults(func=cmd_explore)

    cp = sub.add_parser("complete", help="continuations of a text in a served index, with their fact counts",
                        description="The continuations of TEXT (token by token, most facts first) and the "
                                    "first whole facts below it. Exit status 3 when no fact starts with TEXT.")
    cp.add_argument("text", help="the start of facts, e.g. ' <Northern Ireland> <'")
    _index_arguments(cp)
    _vocabulary_argument(cp, VOCABULARY_HELP + " (required; checked against a PostgreSQL build)")
    cp.add_argument("--limit", type=int, default=10, help="how many continuations and facts to print (default 10)")
    cp.set_defaults(func=cmd_complete)

    ak = sub.add_parser("ask", help="answer questions with a model that may only write stored facts",
                        description="Answer each QUESTION (one batch) with constrained generation; the index is "
                                    "an index file or an active PostgreSQL build built with the model's own "
                                    "tokenizer.json.")
    ak.add_argument("question", nargs="+")
    _index_arguments(ak)
    ak.add_argument("--model", default="smollm2", help=MODEL_HELP)
    ak.add_argument("--beams", type=int, default=3, help="beam search width (default 3; 1 is greedy)")
    ak.add_argument("--max-new-tokens", type=int, default=128)
    ak.add_argument("--prompt-file", help="system message and worked examples (format: refactx_index/prompting/prompt.py)")
    ak.add_argument("--unconstrained", action="store_true", help="without the fact constraint (to compare)")
    ak.add_argument("--json", action="store_true", help="the answers as JSON (reply, facts, answer, timings)")
    ak.add_argument("--paths", metavar="SEED[,SEED]",
                    help="answer over the reasoning paths from these entities (labels, or ids with --labels) "
                         "of the index's facts or --facts, after 'Path:' (docs/paths.md)")
    _path_arguments(ak)
    _policy_arguments(ak, f"default: the best measured, {','.join(BEST_POLICY_NAMES)} (plain over a path "
                          "index); --plain for the constraint alone")
    ak.set_defaults(func=cmd_ask)

    fa = sub.add_parser("facts", help="where a stored fact comes from",
                        description="lookup TEXT: the fact id and every source of the stored fact TEXT "
                                    "(<subject> <property> <object> .), one a line: fact id, kind, subject id, "
                                    "property id, object id or quoted literal value. Exit 3 when TEXT is not "
                                    "stored or the build has no provenance.")
    fa.add_argument("what", choices=["lookup"])
    fa.add_argument("text")
    _index_arguments(fa)
    fa.add_argument("--json", action="store_true", help="one JSON document: fact_id and sources")
    fa.set_defaults(func=cmd_facts)

    pt = sub.add_parser("paths", help="reasoning paths from seed entities, and their path index",
                        description="The simple paths of 1..L edges from each --seed over the facts of --facts "
                                    "(or of an index file, with --vocabulary), capped as the pipeline's paths "
                                    "stage caps them (docs/paths.md); --out writes their path index file.")
    _index_arguments(pt)
    pt.add_argument("--seed", action="append", required=True, help="a seed entity's label (or id, with --labels)")
    _vocabulary_argument(pt, VOCABULARY_HELP + ": of the index read, and of --out")
    pt.add_argument("--out", help="write the paths' in-memory index file here")
    pt.add_argument("--json", action="store_true", help="one JSON document on stdout")
    _path_arguments(pt)
    pt.set_defaults(func=cmd_paths)

    ev = sub.add_parser("eval", help="score answers to question files, with the fact constraint and without",
                        description="Answer every question of QUESTIONS (JSONL: question, answers with aliases, "
                                    "optional type, fact_ids, topic and hop; or MetaQA's qa_*.txt with the qtype "
                                    "file beside it) constrained and unconstrained, with the same prompt and "
                                    "decoding, in batches; score Hits@1, A and P by exact match after normalization, "
                                    "per hop and question type, questions the index cannot answer apart "
                                    "(docs/evaluation.md); write OUT.json, OUT.md and OUT.png (the eval extra) "
                                    "and print the table. A line that is no question is counted and skipped.")
    ev.add_argument("questions", nargs="+", help="question files (JSONL, or MetaQA's qa_*.txt)")
    ev.add_argument("--format", default="auto", choices=["auto", "jsonl", "metaqa"],
                    help="the question files' format (default: told by each file's name and first line)")
    ev.add_argument("--sample-per-hop", type=int, help="a seeded sample of this many questions per hop")
    ev.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    ev.add_argument("--examples", choices=["fitted", "per-question"], default="fitted",
                    help="worked examples drawn from the index once (fitted, default) or chosen per question "
                         "from a pool by its relation words; ignored with --prompt-file")
    _policy_arguments(ev, "default: plain, the constraint alone; --policies best for the best measured")
    _index_arguments(ev)
    ev.add_argument("--model", default="smollm2", help=MODEL_HELP)
    ev.add_argument("--beams", type=int, default=3, help="beam search width (default 3; 1 is greedy)")
    ev.add_argument("--max-new-tokens", type=int, default=128)
    ev.add_argument("--batch-size", type=int, default=8, help="questions generated together (default 8)")
    ev.add_argument("--limit", type=int, help="only the first LIMIT questions")
    ev.add_argument("--prompt-file", help="system message and worked examples (format: refactx_index/prompting/prompt.py; "
                                          "default: examples drawn from the index's own facts)")
    ev.add_argument("--constrained-only", action="store_true", help="skip the unconstrained answers")
    ev.add_argument("--out", default="eval", help="path prefix of the JSON, Markdown and PNG outputs (default: eval)")
    ev.add_argument("--no-plot", action="store_true", help="no PNG (without the eval extra's matplotlib)")
    ev.set_defaults(func=cmd_eval)

    sv = sub.add_parser("serve", help="the OpenAI-compatible fact server",
                        description="An OpenAI-compatible HTTP server (chat and completions, streaming) whose "
                                    "model may only write stored facts after 'Fact:'; requests name the index in "
                                    '"refactx": {"index": NAME}. See docs/server-api.md.')
    sv.add_argument("--index-file", action="append", metavar="NAME=PATH", help="serve an index file (repeatable)")
    sv.add_argument("--index", action="append", metavar="NAME",
                    help="serve the active PostgreSQL build of NAME, following activations (repeatable)")
    sv.add_argument("--dsn", help="PostgreSQL for --index (default: $REFACTX_DSN, which keeps a password "
                                  "out of the process list)")
    sv.add_argument("--default-index", help="the index of requests that name none (default: the first)")
    sv.add_argument("--model", default="smollm2", help=MODEL_HELP)
    sv.add_argument("--model-name", help="the model id clients send and /v1/models lists (default: --model)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8000)
    sv.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                    help="transformers in this process (the CPU default), or vLLM (its AsyncLLM with the "
                         "refactx logits processor; vLLM must be installed)")
    sv.add_argument("--max-batch", type=int, default=16, help="requests generated together (default 16)")
    sv.add_argument("--max-model-len", type=int, default=4096, help="vLLM: the longest prompt + answer")
    sv.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                    help="vLLM: its share of the accelerator's memory (on a CPU: of its KV-cache space)")
    sv.add_argument("--enforce-eager", action="store_true", help="vLLM: no CUDA graphs / compilation")
    sv.add_argument("--dtype", default="auto", help="vLLM: the weights' dtype (default auto: the model's, "
                                                    "float32 models in 16 bits)")
    sv.add_argument("--max-new-tokens", type=int, default=256, help="the largest max_tokens a request may ask")
    sv.add_argument("--max-concurrent", type=int, default=32, help="requests in flight before 429")
    sv.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger bodies get 413")
    sv.add_argument("--max-prompt-tokens", type=int,
                    help="longer prompts get 413 (default: the model's context less --max-new-tokens)")
    sv.add_argument("--request-timeout", type=float, default=300.0,
                    help="seconds before 504 (a generation is stopped at its next token)")
    sv.add_argument("--keep-alive-timeout", type=float, default=5.0,
                    help="seconds an idle keep-alive connection is kept after a response (default 5)")
    sv.add_argument("--header-timeout", type=float, default=10.0,
                    help="seconds a connection has to send a request's headers, from its start or its "
                         "previous response, before it is closed (default 10)")
    sv.add_argument("--max-connections", type=int, default=256,
                    help="open connections (and requests) before a request gets 503 at once (default 256)")
    sv.add_argument("--api-key", help="require 'Authorization: Bearer KEY' on /v1/* and /metrics (default: "
                                      "$REFACTX_API_KEY; the environment keeps it out of the process list)")
    sv.add_argument("--no-api-key", action="store_true",
                    help="serve a non-loopback --host without an API key (behind a proxy that authenticates)")
    sv.add_argument("--allowed-hosts", metavar="HOST[,HOST]",
                    help="the Host header names served (default: the loopback names on a loopback --host, "
                         "any elsewhere; '*': any)")
    sv.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # --help and a usage error exit here, before logging is imported
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    for option in getattr(args, "deprecated_options", []):
        logging.getLogger(__name__).warning("%s is deprecated (since 0.2.0): use --vocabulary", option)
    try:
        return args.func(args)
    except (RefactxError, OSError, ValueError) as exc:
        if args.verbose:
            raise
        sys.stderr.write(f"refactx: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
