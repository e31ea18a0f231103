"""The in-process build of a small graph: ``[graph]`` inputs -> an in-memory index file.

No Spark, no database: the graph is read and checked by ``refactx_pipeline.graph.rules`` (the
rules the Spark stage ``graph`` applies as DataFrame operations), verbalized by
``refactx_pipeline.stages.render`` (the Python twins of the verbalize stage's expressions), tokenized by
``refactx_index.vocab.encode_facts`` (what the tokenize stage calls) and cut into rows by
``refactx_index.tree.memory.build_rows`` (the reference the prefix_rows job agrees with). The
same graph and config give the same facts and token sequences as the Spark pipeline
(``tests/pipeline/test_graph.py``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from refactx_index.errors import ConfigError
from refactx_index.tree.memory import MemoryTreeIndex
from refactx_index.vocab import ENCODED_OK, ENCODED_REJECT_REASON, encode_facts, open_vocabulary

from refactx_pipeline.config import Config, VerbalizeConfig, VocabularyConfig
from refactx_pipeline.graph.rules import Graph, load_graph
from refactx_pipeline.stages.render import DESCRIPTION_LABEL, KIND_ORDER, clean_text, fact_text, render_literal

log = logging.getLogger(__name__)


def graph_facts(graph: Graph, vcfg: VerbalizeConfig) -> tuple[dict[str, str], dict[str, Any]]:
    """(fact text -> kind, counts) of the verbalize stage's rules on ``graph``: statement facts,
    inverse facts of item statements whose predicate has an inverse label (``verbalize.inverse``),
    description facts of the entities kept statements mention (``verbalize.descriptions``);
    a text made twice keeps the first kind of ``KIND_ORDER``."""
    candidates: list[tuple[str, str]] = []
    dropped: Counter = Counter()
    described: dict[str, str] = {}
    inverse = {p: label.strip() for p, label in vcfg.inverse_labels.items()} if vcfg.inverse else {}
    for s in graph.statements:
        subject = graph.labels[s.subject][0]
        predicate = graph.predicate_labels[s.predicate]
        if s.kind == "item":
            obj: str | None = graph.labels[s.object][0]
        else:
            obj = render_literal(s.kind, s.object)
            if obj is None:
                dropped["empty_object" if s.kind == "string" else f"unparseable_{s.kind}"] += 1
                continue
        candidates.append((fact_text(subject, predicate, obj), "statement"))
        described.setdefault(s.subject, subject)
        if s.kind == "item":
            described.setdefault(s.object, obj)
            if s.predicate in inverse:
                candidates.append((fact_text(obj, inverse[s.predicate], subject), "inverse"))
    if vcfg.descriptions:
        for entity, label in described.items():
            value = clean_text(graph.descriptions.get(entity, ""))
            if value:
                candidates.append((fact_text(label, DESCRIPTION_LABEL, value), "description"))
    order = {kind: i for i, kind in enumerate(KIND_ORDER)}
    facts: dict[str, str] = {}
    for text, kind in candidates:
        if text not in facts or order[kind] < order[facts[text]]:
            facts[text] = kind
    counts = {
        "statements_in": len(graph.statements),
        "statements_kept": len(graph.statements) - sum(dropped.values()),
        "dropped": dict(sorted(dropped.items())),
        "facts": len(facts),
        "by_kind": dict(sorted(Counter(facts.values()).items())),
    }
    return facts, counts


@dataclass
class GraphIndexBuild:
    index: MemoryTreeIndex
    facts: dict[str, str]  # text -> kind
    sequences: dict[str, list[int]]  # text -> token ids, the stored facts only
    counts: dict[str, Any]


def build_graph_index(cfg: Config, vocabulary: VocabularyConfig | None = None, name: str | None = None
                      ) -> GraphIndexBuild:
    """Build the in-memory index of ``cfg.graph`` for one vocabulary (default: the only one of
    ``tokenize.vocabularies``), with ``tokenize``'s prefix, suffix and limit and ``tree``'s cut."""
    if vocabulary is None:
        if len(cfg.tokenize.vocabularies) != 1:
            raise ConfigError("name the vocabulary: tokenize.vocabularies has "
                              f"{len(cfg.tokenize.vocabularies)} (expected one)")
        vocabulary = cfg.tokenize.vocabularies[0]
    if cfg.tree.subtree_threshold < 1:  # memory.build_rows stores a subtree of at least one fact
        raise ConfigError("tree.subtree_threshold must be at least 1 for an in-memory index")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    graph = load_graph(cfg)
    timings["read_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    facts, verbalized = graph_facts(graph, cfg.verbalize)
    timings["verbalize_s"] = time.perf_counter() - mark

    mark = time.perf_counter()
    tcfg = cfg.tokenize
    vocab = open_vocabulary(vocabulary.name, vocabulary.path)
    texts = list(facts)
    encoded = encode_facts(vocab.tokenizer(), texts, vocab.forbidden_ids, tcfg.fact_prefix, tcfg.fact_suffix)
    rejected: Counter = Counter()
    sequences: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        ids = encoded.ids(i)
        status = int(encoded.status[i])
        if status != ENCODED_OK:
            rejected[ENCODED_REJECT_REASON.get(status, "unknown_status")] += 1
        elif len(ids) > tcfg.max_tokens:
            rejected["over_max_tokens"] += 1
        else:
            sequences[text] = ids
    timings["tokenize_s"] = time.perf_counter() - mark
    if not sequences:
        raise ConfigError("the graph has no fact to index (see the counts: every row was rejected)")

    mark = time.perf_counter()
    index = MemoryTreeIndex.from_sequences(
        sequences.values(), name=name or cfg.index_name(vocab.name), vocabulary=vocab.name,
        vocabulary_sha256=vocab.sha256, vocab_size=vocab.vocab_size, max_subtree_tokens=cfg.tree.max_subtree_tokens,
        threshold=cfg.tree.subtree_threshold, fact_prefix=tcfg.fact_prefix, fact_suffix=tcfg.fact_suffix,
        pack=cfg.tree.pack_bounds(),
    )
    timings["tree_s"] = time.perf_counter() - mark
    counts = {
        "graph": graph.counts,
        "verbalize": verbalized,
        "tokenize": {"vocabulary": vocab.name, "facts_written": len(sequences),
                     "rejected": dict(sorted(rejected.items()))},
        "index": {"facts": index.info.facts, "rows": index.info.rows},
        "seconds": {k: round(v, 3) for k, v in timings.items()},
    }
    return GraphIndexBuild(index, facts, sequences, counts)
