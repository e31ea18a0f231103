"""Reasoning paths: an independent oracle (a plain breadth-first enumeration over
the kept statements, with its own reading of the parse and labels outputs and its own caps)
against the Spark ``paths`` stage and the runtime's per-question ``PathGraph``, on a
hand-made graph (a 2- and a 3-cycle, a self-loop, a capped hub, literals, inverse edges)
and on the shared sample; then the matcher over a path index (a dead end ends the path) and
constrained generation with the real SmolLM2 (every path written is stored, verbatim).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ..conftest import tokenizer_dir

pytestmark = pytest.mark.spark

SEP, END = " -> ", " ."


# ---------------------------------------------------------------- the oracle
def _clean(text: str | None) -> str | None:
    from refactx_pipeline.stages.render import clean_text

    return clean_text(text) if text is not None else None


def oracle_edges(statements: list[dict], labels: dict[str, str], properties: dict[str, str],
                 inverse_labels: dict[str, str] | None = None) -> dict[str, set[tuple[str, str | None, str]]]:
    """src id -> {(relation, dst id or None for a literal, dst label)} of the kept statements:
    subject, property and item object labelled, a literal that renders."""
    from refactx_pipeline.stages.render import render_literal

    edges: dict[str, set[tuple[str, str | None, str]]] = {}
    for st in statements:
        subject, relation = labels.get(st["subject"]), properties.get(st["property"])
        if subject is None or relation is None:
            continue
        if st["object_kind"] == "item":
            dst, obj = st["object_item"], labels.get(st["object_item"])
        else:
            dst, obj = None, render_literal(st["object_kind"], st["object_value"] or "")
        if obj is None:
            continue
        edges.setdefault(st["subject"], set()).add((relation, dst, obj))
        inverse = (inverse_labels or {}).get(st["property"])
        if dst is not None and inverse:
            edges.setdefault(dst, set()).add((inverse.strip(), st["subject"], subject))
    return edges


def oracle_paths(edges, labels: dict[str, str], seeds, hops: int, fanout: int, budget: int):
    """(path texts, {"fanout", "max_paths", "not_simple"}) by breadth-first enumeration."""
    ordered = {src: sorted(out, key=lambda e: (e[0], e[2], e[1] is not None, e[1] or ""))
               for src, out in edges.items()}
    paths: list[str] = []
    counts = {"fanout": 0, "max_paths": 0, "not_simple": 0}
    for seed in sorted(set(seeds)):
        if seed not in labels:
            continue
        level = [([seed], labels[seed])]
        held = 0
        for _ in range(hops):
            found = []
            for nodes, text in level:
                out = ordered.get(nodes[-1], []) if nodes[-1] is not None else []
                counts["fanout"] += max(0, len(out) - fanout)
                for relation, dst, label in out[:fanout]:
                    if dst is not None and dst in nodes:
                        counts["not_simple"] += 1
                        continue
                    found.append((nodes + [dst], f"{text}{SEP}{relation}{SEP}{label}"))
            found.sort(key=lambda p: p[1])
            room = budget - held
            counts["max_paths"] += max(0, len(found) - room)
            level = found[:room]
            held += len(level)
            paths += [text for _, text in level]
    return paths, counts


def hops_of(text: str) -> int:
    return text.count(SEP) // 2


# ---------------------------------------------------------------- a hand-made graph
ENTITIES = {"Q1": "Alpha", "Q2": "Beta", "Q3": "Gamma", "Q4": "Hub", "Q10": "Self",
            **{f"Q{i}": f"Leaf {i}" for i in range(5, 10)}, "Q42": "Douglas Adams", "Q43": "Dirk Gently"}
PROPERTIES = {"P1": "knows", "P2": "part of", "P3": "born", "P1559": "name in native language",
              "P742": "pseudonym"}


def _st(subject, prop, item=None, kind="item", value=None):
    return {"subject": subject, "property": prop, "object_kind": kind, "object_item": item,
            "object_value": value, "object_datatype": None, "object_lang": None}


STATEMENTS = [
    _st("Q1", "P1", "Q2"), _st("Q2", "P1", "Q1"),  # a 2-cycle
    _st("Q2", "P2", "Q3"), _st("Q3", "P2", "Q1"),  # a 3-cycle with Q1 -> Q2
    _st("Q10", "P1", "Q10"),  # a self-loop
    _st("Q1", "P2", "Q4"), *[_st("Q4", "P1", f"Q{i}") for i in range(5, 10)],  # a hub of 6 edges
    _st("Q4", "P3", kind="time", value="+1952-03-11T00:00:00Z"),
    _st("Q2", "P3", kind="quantity", value="+10"),
    _st("Q9", "P1", "Q1"),
    _st("Q3", "P1", "Q404"),  # an object without a label: not a kept statement
    # literals equal to an entity's label: the subject's own, another entity's with edges
    _st("Q42", "P1559", kind="monolingual", value="Douglas Adams"),
    _st("Q42", "P742", kind="string", value="Dirk Gently"),
    _st("Q43", "P1", "Q3"),
]
SEEDS = ["Q1", "Q10", "Q4", "Q42", "Q404"]
INVERSE = {"P2": "has part"}
FANOUT, BUDGET = 3, 7


@pytest.fixture(scope="module")
def tiny(spark, tmp_path_factory):
    """The hand-made graph through verbalize (with inverse facts) and paths, L = 3; the
    Config and the stage's counts."""
    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.pipeline import build
    from refactx_pipeline.stages.schemas import LABELS, STATEMENTS as STATEMENTS_SCHEMA

    root = tmp_path_factory.mktemp("tiny")
    seeds = root / "seeds.txt"
    seeds.write_text("\n".join(SEEDS) + "\n\n")
    cfg = Config().updated({
        "paths.build_root": str(root / "build"),
        "verbalize.inverse": True, "verbalize.inverse_labels": INVERSE,
        "path_index.enabled": True, "path_index.seeds_file": str(seeds), "path_index.max_hops": 3,
        "path_index.max_fanout": FANOUT, "path_index.max_paths": BUDGET,
    })
    for stage, name, schema, rows in [
        ("parse", "statements", STATEMENTS_SCHEMA, STATEMENTS),
        ("labels", "labels", LABELS, [{"entity": e, "label": label, "label_source": "label"}
                                      for e, label in {**ENTITIES, **PROPERTIES}.items()]),
    ]:
        out = cfg.stage_dir(stage) / name
        out.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(
            [pa.field(f.name, pa.string(), f.nullable) for f in schema.fields])), out / "part-0.parquet")
    results = build(cfg, ["verbalize", "paths"], spark=spark)
    return cfg, results[-1].counts


def _texts(path: Path, column: str = "text") -> list[str]:
    return ds.dataset(str(path), format="parquet").to_table(columns=[column]).column(column).to_pylist()


def _runtime_graph(fact_texts):
    from refactx_index.prompting.paths import PathGraph

    return PathGraph.from_fact_texts(fact_texts)


def facts_file_lines(cfg) -> list[str]:
    """The verbalize stage's facts as a facts file with object kinds (``TEXT<TAB>KIND``, a
    line per kind), the kinds read from its provenance by the runtime's own readers."""
    from refactx_index.prompting.paths import object_kinds
    from refactx_index.tree.provenance import group_sources

    facts = ds.dataset(str(cfg.stage_dir("verbalize") / "facts"), format="parquet").to_table(
        columns=["fact_id", "text"]).to_pylist()
    columns = ["fact_id", "kind", "subject", "property", "object", "value"]
    sources = ds.dataset(str(cfg.stage_dir("verbalize") / "provenance"), format="parquet").to_table(
        columns=columns).to_pylist()
    found = group_sources([f["fact_id"] for f in facts], ([r[c] for c in columns] for r in sources))
    return [f"{f['text']}\t{kind}" for f, provenance in zip(facts, found) for kind in object_kinds(provenance)]


def test_tiny_graph_oracle_spark_and_runtime_agree_for_l_1_2_3(tiny):
    from refactx_index.prompting.paths import PathCaps

    cfg, counts = tiny
    edges = oracle_edges(STATEMENTS, ENTITIES, PROPERTIES, INVERSE)
    spark_texts = _texts(cfg.stage_dir("paths") / "paths")
    assert all(t.endswith(END) for t in spark_texts)
    spark_paths = sorted(t[:-len(END)] for t in spark_texts)
    graph = _runtime_graph(facts_file_lines(cfg))
    assert graph.rejected == 0
    for hops in (1, 2, 3):
        expected, expected_counts = oracle_paths(edges, ENTITIES, SEEDS, hops, FANOUT, BUDGET)
        assert len(expected) == len(set(expected))
        assert sorted(t for t in spark_paths if hops_of(t) <= hops) == sorted(expected), hops
        found = graph.paths([ENTITIES.get(s, s) for s in SEEDS], PathCaps(hops, FANOUT, BUDGET))
        assert sorted(found.paths) == sorted(expected), hops
        assert {**found.capped, "not_simple": found.not_simple} == expected_counts, hops
        assert found.unknown_seeds == ["Q404"]
    # the graph has what the test claims: cycles refused, the hub capped, the budget reached
    assert expected_counts["not_simple"] > 0 and expected_counts["fanout"] > 0 and expected_counts["max_paths"] > 0
    assert "Self" not in {t.split(SEP)[0] for t in expected}  # its only edge is the self-loop
    assert "Alpha -> part of -> Hub -> born -> 1952-03-11" in expected  # a literal ends a path
    # a literal equal to an entity's label is a literal: not a cycle, and the path ends there
    assert "Douglas Adams -> name in native language -> Douglas Adams" in expected
    assert "Douglas Adams -> pseudonym -> Dirk Gently" in expected
    assert not any(t.startswith("Douglas Adams -> pseudonym -> Dirk Gently -> ") for t in expected)
    assert {**counts["capped"], "not_simple": counts["not_simple"]} == expected_counts
    assert counts["seeds"] == {"given": 5, "used": 4, "unknown": 1, "malformed_question_lines": 0}
    assert counts["paths"] == len(expected) == counts["written"]


def test_fact_texts_without_object_kinds_read_literals_by_their_labels(tiny):
    """Bare fact texts (a facts file without kinds, a build without provenance) say nothing of
    an object's kind: a literal is the node of its text, so the one equal to its subject's
    label is a cycle and the one equal to another entity's label goes on through it."""
    from refactx_index.prompting.paths import PathCaps

    cfg = tiny[0]
    found = _runtime_graph(_texts(cfg.stage_dir("verbalize") / "facts")).paths(["Douglas Adams"], PathCaps(2))
    assert found.paths == ["Douglas Adams -> pseudonym -> Dirk Gently",
                           "Douglas Adams -> pseudonym -> Dirk Gently -> knows -> Gamma"]
    assert found.not_simple == 1


def test_a_path_build_needs_seeds_and_tokenizes_its_own_texts(tiny):
    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.table import select_stages

    cfg = tiny[0]
    assert cfg.stage_dir("tokenize") == cfg.build_dir() / "path_index" / "tokenize"
    assert cfg.index_name("qwen2.5") == "wikidata-paths-qwen2.5" and cfg.index_kind == "paths"
    assert "paths" in select_stages(cfg) and "paths" not in select_stages(Config())


def test_a_path_build_is_served_as_a_paths_index(spark, tiny, pg_dsn):
    """tokenize ... activate, unchanged, over the paths: the catalog says it holds paths and
    the served tree holds every path text, tokenized as the tokenize stage does."""
    import psycopg

    from refactx_index.tree.pg import open_index
    from refactx_index.vocab import encode_facts, open_tokenizer
    from refactx_pipeline.orchestration.pipeline import build

    vocab = tokenizer_dir("qwen2.5")
    cfg = tiny[0].updated({"tokenize.vocabularies": [f"qwen2.5={vocab}"]})
    build(cfg, ["tokenize", "prefix_rows", "load", "validate", "activate"], spark=spark, dsn=pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        kinds = conn.execute("SELECT name, index_kind, status FROM refactx.builds").fetchall()
    assert kinds == [("wikidata-paths-qwen2.5", "paths", "active")]
    texts = _texts(cfg.stage_dir("paths") / "paths")
    encoded = encode_facts(open_tokenizer(str(vocab)), texts, ())
    with open_index(pg_dsn, "wikidata-paths-qwen2.5") as index:
        assert index.info.facts == len(texts)
        assert index.info.index_kind == "paths"  # so ask() writes after Path:, with the path prompt
        assert all(step.ends for step in index.next_tokens_batch([encoded.ids(i) for i in range(len(texts))]))


# ---------------------------------------------------------------- the shared sample
SAMPLE_MIN_FACTS, SAMPLE_FANOUT, SAMPLE_BUDGET = 25, 4, 30


@pytest.fixture(scope="module")
def sample_paths(spark, sample_verbalized):
    from refactx_pipeline.orchestration.pipeline import build

    cfg = sample_verbalized.updated({
        "path_index.enabled": True, "path_index.min_facts": SAMPLE_MIN_FACTS, "path_index.max_hops": 3,
        "path_index.max_fanout": SAMPLE_FANOUT, "path_index.max_paths": SAMPLE_BUDGET,
    })
    counts = build(cfg, ["paths"], spark=spark)[0].counts
    return cfg, counts


def _sample_oracle_inputs(cfg):
    def rows(stage, name):
        return ds.dataset(str(cfg.stage_dir(stage) / name), format="parquet").to_table().to_pylist()

    labels = {r["entity"]: _clean(r["label"]) for r in rows("labels", "labels") if _clean(r["label"])}
    properties = {r["property"]: _clean(r["label"]) for r in rows("parse", "properties") if _clean(r["label"])}
    properties.update({e: label for e, label in labels.items() if e.startswith("P")})
    return rows("parse", "statements"), labels, properties


def test_sample_oracle_spark_and_runtime_agree_for_l_1_2_3(sample_paths):
    from refactx_index.prompting.paths import PathCaps

    cfg, counts = sample_paths
    statements, labels, properties = _sample_oracle_inputs(cfg)
    edges = oracle_edges(statements, labels, properties)
    # the seeds by degree: subjects of at least k kept statements (a statement, not a distinct edge)
    kept_by_subject: dict[str, int] = {}
    for st in statements:
        if st["subject"] in edges and _kept(st, labels, properties):
            kept_by_subject[st["subject"]] = kept_by_subject.get(st["subject"], 0) + 1
    seeds = sorted(s for s, n in kept_by_subject.items() if n >= SAMPLE_MIN_FACTS)
    assert len(seeds) >= 5
    spark_paths = sorted(t[:-len(END)] for t in _texts(cfg.stage_dir("paths") / "paths"))
    graph = _runtime_graph(facts_file_lines(cfg))
    for hops in (1, 2, 3):
        expected, expected_counts = oracle_paths(edges, labels, seeds, hops, SAMPLE_FANOUT, SAMPLE_BUDGET)
        assert sorted(t for t in spark_paths if hops_of(t) <= hops) == sorted(expected), hops
        found = graph.paths([labels[s] for s in seeds], PathCaps(hops, SAMPLE_FANOUT, SAMPLE_BUDGET))
        assert sorted(found.paths) == sorted(expected), hops
        assert {**found.capped, "not_simple": found.not_simple} == expected_counts, hops
    assert expected_counts["fanout"] > 0 and expected_counts["max_paths"] > 0 and expected_counts["not_simple"] > 0
    assert {**counts["capped"], "not_simple": counts["not_simple"]} == expected_counts
    assert counts["seeds"]["used"] == len(seeds)


def _kept(st, labels, properties) -> bool:
    from refactx_pipeline.stages.render import render_literal

    if st["subject"] not in labels or st["property"] not in properties:
        return False
    if st["object_kind"] == "item":
        return st["object_item"] in labels
    return render_literal(st["object_kind"], st["object_value"] or "") is not None


# ---------------------------------------------------------------- generation over paths
def _matcher(index, tokenizer):
    from refactx_index.engines.core import trigger_variants
    from refactx_index.constraint.matcher import FactMatcher
    from refactx_index.prompting.paths import TRIGGER

    return FactMatcher(index, trigger_variants(tokenizer, TRIGGER), [0])


def test_a_dead_end_can_only_end_the_path():
    """At a path's last entity with nothing beyond it, the only continuation is the end
    (` .`): the row cannot write past the trie; where a path may go on, both are allowed."""
    from tokenizers import Tokenizer

    from refactx_index.prompting.paths import PathCaps, PathGraph
    from refactx_index.constraint.matcher import FACT, FREE

    file = tokenizer_dir("qwen2.5") / "tokenizer.json"
    tok = Tokenizer.from_file(str(file))
    graph = PathGraph.from_fact_texts(["<Alpha> <knows> <Beta> .", "<Alpha> <part of> <Hub> .",
                                       "<Hub> <knows> <Leaf> .", "<Alpha> <description> <a letter> ."])
    index, found = graph.index(["Alpha"], str(file), PathCaps(max_hops=2))
    assert sorted(found.paths) == ["Alpha -> knows -> Beta", "Alpha -> part of -> Hub",
                                   "Alpha -> part of -> Hub -> knows -> Leaf"]
    assert index.info.index_kind == "paths"
    matcher = _matcher(index, tok)
    prompt = tok.encode("Path:", add_special_tokens=False).ids
    end_ids = tok.encode("Path: Alpha -> knows -> Beta .", add_special_tokens=False).ids
    dead = tok.encode("Path: Alpha -> knows -> Beta", add_special_tokens=False).ids
    state = matcher.scan(dead, len(prompt))
    assert state.mode == FACT and not state.ends
    assert state.allowed.tolist() == [end_ids[len(dead)]]  # only the end: no free token, no " ->"
    at_end = matcher.scan(end_ids, len(prompt))
    assert at_end.mode == FACT and at_end.ends and at_end.allowed.size == 0
    closed = matcher.scan(end_ids + tok.encode("\n", add_special_tokens=False).ids, len(prompt))
    assert closed.mode == FREE and closed.done == (tuple(end_ids[len(prompt):]),)
    branching = matcher.scan(tok.encode("Path: Alpha -> part of -> Hub", add_special_tokens=False).ids,
                             len(prompt))
    assert branching.allowed.size == 2 and not branching.ends  # " ." or " ->"


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from refactx_index.qa.models import load_model

    return load_model("smollm2")


@pytest.mark.slow
def test_smollm2_writes_only_stored_paths_verbatim(smollm2, sample_fact_texts):
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.prompting.paths import TRIGGER, PathCaps, PathGraph
    from refactx_index.vocab import decode_continuation, encode_facts, open_tokenizer

    graph = PathGraph.from_fact_texts(sample_fact_texts)
    index, found = graph.index(["Germany"], str(smollm2.tokenizer_file), PathCaps(max_hops=2, max_fanout=20))
    stored_texts = {p + END for p in found.paths}
    fast = open_tokenizer(str(smollm2.tokenizer_file))
    encoded = encode_facts(fast, sorted(stored_texts), ())
    stored = {tuple(encoded.ids(i)) for i in range(len(stored_texts))}
    tok = smollm2.tokenizer
    messages = [{"role": "system", "content": "Answer with reasoning paths of a knowledge graph, one a line: "
                 "Path: Entity -> relation -> Entity -> relation -> Entity ."},
                {"role": "user", "content": "What is the capital of Germany?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + TRIGGER
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    processor = RefactxLogitsProcessor(index, tok, eos_token_id=smollm2.eos_token_ids, trigger=TRIGGER)
    with torch.inference_mode():
        out = smollm2.model.generate(**enc, logits_processor=LogitsProcessorList([processor]), do_sample=False,
                                     num_beams=1, max_new_tokens=40, pad_token_id=smollm2.eos_token_ids[0],
                                     eos_token_id=smollm2.eos_token_ids)
    row = out[0].tolist()
    width = enc["input_ids"].shape[1]
    state = processor.matcher.scan(row, width)
    written = list(state.done) + ([state.prefix] if state.prefix else [])
    assert state.done, tok.decode(row[width:])  # at least one whole path
    for path in state.done:
        assert path in stored
        assert decode_continuation(fast, path).strip() in stored_texts
    for partial in written[len(state.done):]:  # stopped inside a path: a prefix of a stored one
        assert any(s[:len(partial)] == partial for s in stored)
    reply = tok.decode(row[width:], skip_special_tokens=True)
    first = decode_continuation(fast, state.done[0]).strip()
    assert reply.lstrip().startswith(first)  # the text as the model wrote it, verbatim


def test_refactx_paths_command_lists_a_seeds_paths_and_names_a_missing_file(tmp_path, capsys):
    from refactx_index.cli import main

    facts = tmp_path / "facts.txt"
    facts.write_text("<Alpha> <knows> <Beta> .\n<Beta> <knows> <Gamma> .\nnot a fact\n", encoding="utf-8")
    labels = tmp_path / "labels.tsv"
    labels.write_text("Q1\tAlpha\n", encoding="utf-8")
    assert main(["paths", "--facts", str(facts), "--labels", str(labels), "--seed", "Q1", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["texts"] == ["Alpha -> knows -> Beta", "Alpha -> knows -> Beta -> knows -> Gamma"]
    assert out["by_hops"] == {"1": 1, "2": 1}
    assert main(["paths", "--facts", str(facts), "--seed", "Nobody"]) == 3
    assert main(["paths", "--facts", str(tmp_path / "absent.txt"), "--seed", "Alpha"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("refactx: facts file") and "absent.txt" in err[-1]


FIVE_FACTS = [  # Q42's native name is its label; a pseudonym equals a character's label
    ("<Douglas Adams> <name in native language> <Douglas Adams> .", "literal"),
    ("<Douglas Adams> <pseudonym> <Dirk Gently> .", "literal"),
    ("<Douglas Adams> <notable work> <The Hitchhiker's Guide to the Galaxy> .", "entity"),
    ("<Dirk Gently> <creator> <Douglas Adams> .", "entity"),
    ("<Dirk Gently> <occupation> <private investigator> .", "entity"),
]


def test_refactx_paths_command_ends_a_path_at_a_literal_equal_to_an_entitys_label(tmp_path, capsys):
    """With the objects' kinds in the facts file, a literal ends the path and is never a
    cycle; a line of an unknown kind is rejected. Without kinds, the same texts are read by
    their labels (docs/paths.md)."""
    import json

    from refactx_index.cli import main

    with_kinds, bare = tmp_path / "facts.tsv", tmp_path / "facts.txt"
    with_kinds.write_text("".join(f"{text}\t{kind}\n" for text, kind in FIVE_FACTS)
                          + "<Dirk Gently> <genre> <detective fiction> .\tsomething\n", encoding="utf-8")
    bare.write_text("".join(f"{text}\n" for text, _ in FIVE_FACTS), encoding="utf-8")
    assert main(["paths", "--facts", str(with_kinds), "--seed", "Douglas Adams", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["texts"] == ["Douglas Adams -> name in native language -> Douglas Adams",
                            "Douglas Adams -> notable work -> The Hitchhiker's Guide to the Galaxy",
                            "Douglas Adams -> pseudonym -> Dirk Gently"]
    assert out["not_simple"] == 0 and out["by_hops"] == {"1": 3, "2": 0}
    assert main(["paths", "--facts", str(bare), "--seed", "Douglas Adams", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["texts"] == ["Douglas Adams -> notable work -> The Hitchhiker's Guide to the Galaxy",
                            "Douglas Adams -> pseudonym -> Dirk Gently",
                            "Douglas Adams -> pseudonym -> Dirk Gently -> occupation -> private investigator"]
    assert out["not_simple"] == 2  # its native name, and Dirk Gently's creator
    from refactx_index.prompting.paths import PathGraph, read_fact_texts

    assert PathGraph.from_fact_texts(read_fact_texts(str(with_kinds))).rejected == 1


def test_the_graph_of_an_index_file_reads_objects_by_their_labels(tmp_path):
    """An index file holds no provenance: its graph is that of its bare fact texts."""
    from tokenizers import Tokenizer

    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import PathCaps, PathGraph, graph_of_index

    file = tokenizer_dir("qwen2.5") / "tokenizer.json"
    texts = [text for text, _ in FIVE_FACTS]
    MemoryTreeIndex.from_facts(texts, str(file)).save(tmp_path / "five.rfx")
    graph = graph_of_index(MemoryTreeIndex.load(tmp_path / "five.rfx"), Tokenizer.from_file(str(file)))
    found, bare = (g.paths(["Douglas Adams", "Dirk Gently"], PathCaps(3))
                   for g in (graph, PathGraph.from_fact_texts(texts)))
    assert found == bare and graph.nodes == 4
    assert "Douglas Adams -> pseudonym -> Dirk Gently -> occupation -> private investigator" in found.paths


# the sources of FIVE_FACTS as verbalize records them (kind, subject, property, object, value)
FIVE_SOURCES = [
    ("statement", "Q42", "P1559", None, "Douglas Adams"),
    ("statement", "Q42", "P742", None, "Dirk Gently"),
    ("statement", "Q42", "P800", "Q3107329", None),
    ("statement", "Q1229213", "P170", "Q42", None),
    ("statement", "Q1229213", "P106", "Q1058617", None),
]


@pytest.mark.pg
def test_the_graph_of_a_build_reads_each_objects_kind_from_its_provenance(pg_dsn):
    """A PostgreSQL build with provenance gives each object's kind: its graph is that of the
    facts file with kinds; the same build without provenance is read by labels."""
    from refactx_index.prompting.paths import PathCaps, PathGraph, graph_of_index
    from refactx_index.tree.pg import open_index
    from refactx_index.tree.provenance import fact_id
    from refactx_index.vocab import encode_facts, open_tokenizer

    from ..pgtree import load_tree, store_provenance_rows

    tokenizer = open_tokenizer(str(tokenizer_dir("qwen2.5")))
    texts = [text for text, _ in FIVE_FACTS]
    encoded = encode_facts(tokenizer, texts + ["<Dirk Gently> <description> <a fictional detective> ."], ())
    sequences = [encoded.ids(i) for i in range(len(texts) + 1)]
    with_provenance = load_tree(pg_dsn, "five-kinds", sequences, vocab_size=tokenizer.get_vocab_size())
    store_provenance_rows(pg_dsn, with_provenance, [(fact_id(text), *source) for text, source in zip(texts, FIVE_SOURCES)]
                          + [(fact_id("<Dirk Gently> <description> <a fictional detective> ."), "description",
                              "Q1229213", None, None, "a fictional detective")])
    load_tree(pg_dsn, "five-bare", sequences, vocab_size=tokenizer.get_vocab_size())
    seeds, caps = ["Douglas Adams", "Dirk Gently"], PathCaps(3)
    with open_index(pg_dsn, "five-kinds") as index:
        kinds = graph_of_index(index, tokenizer).paths(seeds, caps)
    with open_index(pg_dsn, "five-bare") as index:
        bare = graph_of_index(index, tokenizer).paths(seeds, caps)
    assert kinds == PathGraph.from_fact_texts(f"{text}\t{kind}" for text, kind in FIVE_FACTS).paths(seeds, caps)
    assert bare == PathGraph.from_fact_texts(texts).paths(seeds, caps) != kinds
    assert "Douglas Adams -> name in native language -> Douglas Adams" in kinds.paths


def test_seeds_from_a_question_file_count_its_malformed_lines(spark, tmp_path):
    from refactx_pipeline.config import PathIndexConfig
    from refactx_pipeline.stages.paths import read_seeds

    questions = tmp_path / "questions.jsonl"
    questions.write_text('{"question": "q1", "entities": ["Q1", " Q2 "]}\n{"question": "q2", "entities": []}\n'
                         'not json\n{"question": "q3", "entities": ["Q1"]}\n', encoding="utf-8")
    kept = spark.createDataFrame([("Q7",), ("Q7",), ("Q8",)], "subject string")
    seeds, malformed = read_seeds(spark, PathIndexConfig(questions_file=str(questions), min_facts=2), kept)
    assert sorted(r["seed"] for r in seeds.collect()) == ["Q1", "Q2", "Q7"]
    assert malformed == 1


# ---------------------------------------------------------------- per-question trie: ids by labels
def _tokenizer_files():
    """The shared vocabularies, and SmolLM2's when its package is installed (converted once)."""
    files = [pytest.param(tokenizer_dir(name) / "tokenizer.json", id=name)
             for name in ("qwen2.5", "gpt2", "llama3", "mistral-7b-v0.1", "phi-3-mini")]
    return files + [pytest.param("smollm2", id="smollm2")]


def _file(spec):
    if spec == "smollm2":
        pytest.importorskip("transformers")
        from refactx_index.errors import ConfigError
        from refactx_index.qa.models import model_directory

        try:
            return model_directory("smollm2") / "tokenizer.json"
        except ConfigError as exc:
            pytest.skip(str(exc))
    if not Path(spec).is_file():
        pytest.skip(f"{spec} is absent (../shared)")
    return spec


# labels that test a piece's edges: digits, contractions, punctuation runs, combining marks,
# scripts without spaces, inner spaces, the separator and end themselves, a special token
ODD_LABELS = ["Alpha", "Leaf 5", "1952-03-11", "O'Neil's", "U.S.", "C++", "A.", "x\u0301", "Zu\u0308rich",
              "\u6771\u4eac\u90fd", "100 km\u00b2", "a  b", "->", "a -> b", ".", "\U0001f389 party", "3.14",
              "'", "don't", "(band)", "\u0645\u0635\u0631", "tab\there"]


def _odd_graph():
    from refactx_index.prompting.paths import PathGraph

    n = len(ODD_LABELS)
    facts = [f"<{a}> <{r}> <{ODD_LABELS[(i + k) % n]}> ." for i, a in enumerate(ODD_LABELS)
             for r, k in (("knows", 1), ("part of", 5), ("'s", 7))]
    return PathGraph.from_fact_texts(facts)


@pytest.mark.parametrize("spec", _tokenizer_files())
def test_a_path_tries_ids_are_the_whole_texts_ids_for_real_vocabularies(spec, sample_fact_texts):
    """The rule of the per-question trie: a path's ids are exactly what the tokenize stage
    (``encode_facts``) gives its whole text, whether they were put together from its labels'
    ids (byte-level BPE with a known pre-tokenizer regex) or encoded whole (SentencePiece)."""
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import PathCaps, PathGraph, segments_concatenate
    from refactx_index.vocab import encode_facts, open_tokenizer

    file = _file(spec)
    tok = open_tokenizer(str(file))
    # byte-level BPE vocabularies put ids together; SentencePiece ones (Metaspace) cannot
    assert segments_concatenate(tok) == (Path(file).parent.name not in ("mistral-7b-v0.1", "phi-3-mini"))
    sample = PathGraph.from_fact_texts(sample_fact_texts)
    hubs = sorted({t[1:].split("> <", 1)[0] for t in sample_fact_texts}, key=lambda n: (-sample.degree(n), n))[:8]
    for graph, seeds, caps in [(sample, hubs, PathCaps(2, 20, 400)), (sample, hubs[:2], PathCaps(3, 6, 300)),
                               (_odd_graph(), ODD_LABELS, PathCaps(3, 3, 10_000))]:
        for _ in range(2):  # the second time, every label's ids come from the graph's store
            index, found = graph.index(seeds, str(file), caps)
            texts = [p + END for p in found.paths]
            whole = encode_facts(tok, texts, ())
            assert (whole.status == 0).all()
            store = graph._segments.get(id(graph._vocabulary(str(file))[2]))
            if store is not None and store.exact:
                values, offsets = store.path_ids(graph._walk(seeds, caps, SEP)[1], SEP, END, ())
                # the token ids equality itself, path by path
                assert offsets.tolist() == whole.offsets.tolist()
                assert values.tolist() == whole.values.tolist()
            reference = MemoryTreeIndex.from_facts(texts, str(file), name="paths", index_kind="paths", dictionary=False)
            assert index.rows == reference.rows
            assert index.info == reference.info
    assert (store is not None and store.exact) == segments_concatenate(tok)


def test_a_label_with_spaces_at_its_edge_or_a_special_token_is_handled_as_whole_texts():
    """A label whose piece boundary is not certain (a space at its edge) makes the question's
    paths encode whole; a label holding a special token is what ``from_facts`` makes of it:
    text with a vocabulary file (special tokens encoded as text), an error with a tokenizer
    object that matches special tokens."""
    from tokenizers import Tokenizer

    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import PathCaps, PathGraph

    file = str(tokenizer_dir("qwen2.5") / "tokenizer.json")
    graph = PathGraph({"Alpha": [("knows", " Beta "), ("is", "Gamma")], " Beta ": [("knows", "Gamma")]})
    index, found = graph.index(["Alpha"], file, PathCaps(2))
    assert index.rows == MemoryTreeIndex.from_facts([p + END for p in found.paths], file, name="paths", dictionary=False).rows
    assert index.info.index_kind == "paths"  # the whole-text build says so too
    special = PathGraph({"Alpha": [("knows", "Beta<|endoftext|>")]})
    texts = [p + END for p in special.paths(["Alpha"]).paths]
    assert special.index(["Alpha"], file)[0].rows == MemoryTreeIndex.from_facts(texts, file, name="paths", dictionary=False).rows
    tok = Tokenizer.from_file(file)
    with pytest.raises(ValueError, match="cannot be stored"):
        MemoryTreeIndex.from_facts(texts, tok)
    with pytest.raises(ValueError, match="cannot be stored"):
        special.index(["Alpha"], tok)


def test_a_prepared_graph_tokenizes_no_label_at_question_time():
    """``prepare`` tokenizes every label once; later questions add none and their tries are
    those of whole texts."""
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import PathCaps

    file = str(tokenizer_dir("qwen2.5") / "tokenizer.json")
    graph = _odd_graph()
    assert graph.prepare(file) == len(ODD_LABELS) + 3  # and the three relations
    store = graph._segments[id(graph._vocabulary(file)[2])]
    held = len(store.row)
    for seed in ODD_LABELS[:5]:
        index, found = graph.index([seed], file, PathCaps(2, 3, 100))
        assert index.rows == MemoryTreeIndex.from_facts([p + END for p in found.paths], file, name="paths", dictionary=False).rows
    assert "->" in ODD_LABELS and "." in ODD_LABELS  # the separator's and end's pieces too
    assert len(store.row) == held  # no question tokenized anything
    assert graph.prepare(file) == 0
    assert _odd_graph().prepare(str(tokenizer_dir("mistral-7b-v0.1") / "tokenizer.json")) == 0


def test_a_path_index_file_keeps_its_kind(tmp_path):
    """An .rfx file of a path index loads as a path index (``ask`` then writes after Path:)."""
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.paths import PathGraph

    file = str(tokenizer_dir("qwen2.5") / "tokenizer.json")
    index, _ = PathGraph({"Alpha": [("knows", "Beta")]}).index(["Alpha"], file)
    index.save(tmp_path / "paths.rfx")
    loaded = MemoryTreeIndex.load(tmp_path / "paths.rfx")
    assert loaded.info.index_kind == "paths" and loaded.info == index.info
    facts = MemoryTreeIndex.from_facts(["<Alpha> <knows> <Beta> ."], file)
    assert facts.info.index_kind == "facts"
