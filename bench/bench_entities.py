"""Finding a question's entities (``refactx_index.qa.ask.question_entities``, under
``entities_first`` and ``relations_first``): the lookup as it runs against the full text walk,
in one run, on the same questions and index.

* ``lookup``: the spans no subject can start with ruled out in one batch lookup by their stored
  ids (vocabularies that encode facts by their pieces), and the text walk skipping the children
  of a wide node whose own text cannot continue the span;
* ``full walk``: every span walked by text, every child of a node decoded (the same function
  with both shortcuts off: ``_spans_off_tree`` finds nothing, ``_FEW_CHILDREN`` is unbounded).

Per model (``--models``, named models of ``refactx_index.qa.models``), over its MetaQA index
(``refactx-pipeline graph-index --config conf/metaqa.toml``, ``--index smollm2=PATH``) and a
seeded sample of MetaQA dev questions (``--per-hop`` of each of hops 1-3): seconds a question
each way, the ratio, and whether both found the same entities (the run fails if not). The
lookup's first call decodes the vocabulary's token texts once (``continuation_texts``): timed
apart as ``first_call_s``.

Run: .venv/bin/python bench/bench_entities.py --index smollm2=build/metaqa-smollm2.rfx \\
         --index gemma3-270m=build/metaqa-gemma3.rfx [--per-hop 10] [--json docs/figures/entities.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METAQA = ROOT.parent / "shared" / "data" / "metaqa"


def timed(find, questions: list[str]) -> tuple[float, list[list[str]]]:
    started = time.perf_counter()
    found = [find(q) for q in questions]
    return (time.perf_counter() - started) / max(len(questions), 1), found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", action="append", required=True, metavar="MODEL=PATH",
                        help="a model's MetaQA index file (repeat per model)")
    parser.add_argument("--per-hop", type=int, default=10, help="dev questions sampled per hop, hops 1-3 (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figure here")
    args = parser.parse_args(argv)

    import refactx_index.qa.ask as ask
    import refactx_index.tree.explore as explore
    from refactx_index.qa.evaluation import read_question_file, stratified_sample
    from refactx_index.qa.models import model_directory
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.vocab import as_vocabulary

    questions = []
    for hop in (1, 2, 3):
        questions += read_question_file(METAQA / f"{hop}-hop" / "qa_dev.txt").questions
    texts = [q.question for q in stratified_sample(questions, args.per_hop, args.seed)]
    rows = []
    for spec in args.index:
        model, _, path = spec.partition("=")
        index = MemoryTreeIndex.load(path)
        vocabulary = as_vocabulary(str(model_directory(model)))
        started = time.perf_counter()
        ask.question_entities(index, vocabulary, texts[0])
        first = time.perf_counter() - started
        fast, found = timed(lambda q: ask.question_entities(index, vocabulary, q), texts)
        off_tree, few = ask._spans_off_tree, explore._FEW_CHILDREN
        ask._spans_off_tree, explore._FEW_CHILDREN = (lambda *a: set()), 10**9
        try:
            slow, found_slow = timed(lambda q: ask.question_entities(index, vocabulary, q), texts)
        finally:
            ask._spans_off_tree, explore._FEW_CHILDREN = off_tree, few
        if found != found_slow:
            sys.exit(f"{model}: the lookup and the full walk found different entities")
        row = {"model": model, "vocab_size": vocabulary.vocab_size, "by_pieces": vocabulary.encodes_by_pieces,
               "questions": len(texts), "entities": sum(map(len, found)), "first_call_s": round(first, 2),
               "lookup_s_per_question": round(fast, 4), "full_walk_s_per_question": round(slow, 4),
               "speedup": round(slow / fast, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        from bench_eval import _commit, _machine  # this folder's scripts: the same "measured" fields

        doc = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(),
               "machine": _machine(), "command": " ".join(["bench/bench_entities.py", *sys.argv[1:]]), "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
