"""Corporate graphs (``[graph]``): every input format with hostile rows, the label rule, the
Python rendering against docs/verbalize.md, and the two builds (Spark through PostgreSQL, and
in process into an in-memory index) giving the same facts, token sequences and rows."""

from __future__ import annotations

import csv
import json

import pytest

from refactx_pipeline.config import Config
from refactx_index.errors import ConfigError

from .conftest import tokenizer_dir

# (subject, predicate, object, datatype): the good rows first, then one hostile row each
GOOD = [
    ("CO1", "owns", "CO2", ""),
    ("CO1", "incorporated_on", "1999-05-01", "date"),
    ("CO1", "motto", "We lend, you grow\tdaily", "string"),  # the delimiters of CSV and TSV inside
    ("CO2", "motto", 'line one\nline "two"', "string"),  # a line break and quotes inside
]
HOSTILE = [
    ("CO3", "owns", "CO1", "", "missing_label"),  # CO3 has no label row
    ("CO1", "frobnicates", "CO2", "", "unknown_predicate"),
    ("CO1", "motto", "   ", "string", "empty_value"),
    ("CO1", "owns", "CO2", "", "duplicate"),
    ("bad id", "owns", "CO2", "", "malformed_id"),
    ("CO2", "share", "abc", "weird", "unknown_datatype"),
]
LABELS = [("CO1", "Acme Bank", "bank in Oslo"), ("CO2", "Beta, Holdings", ""), ("CO9", "", "no label")]
PREDICATES = [("owns", "owns"), ("incorporated_on", "incorporated on"), ("motto", "motto")]
EXPECTED_FACTS = {
    "<Acme Bank> <owns> <Beta, Holdings> .",
    "<Acme Bank> <incorporated on> <1999-05-01> .",
    "<Acme Bank> <motto> <We lend, you grow daily> .",
    '<Beta, Holdings> <motto> <line one line "two"> .',
    "<Acme Bank> <description> <bank in Oslo> .",
}


def _write_delimited(path, header, rows, delimiter, bom=True, extra=()):
    with open(path, "w", encoding="utf-8", newline="") as fh:
        if bom:
            fh.write("\ufeff")
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
        writer.writerows(extra)


def _nt_term(value: str, datatype: str) -> str:
    if not datatype:
        return f"<http://ex.test/{value}>"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"^^<http://www.w3.org/2001/XMLSchema#{datatype}>'


def write_hostile_graph(tmp_path, fmt: str) -> Config:
    """The GOOD and HOSTILE rows in ``fmt``, with a byte order mark where the format has one."""
    triples = [r for r in GOOD] + [r[:4] for r in HOSTILE]
    settings = {"graph.format": fmt, "paths.build_root": str(tmp_path / "build"), "paths.source": "acme"}
    if fmt in ("csv", "tsv"):
        delimiter = "," if fmt == "csv" else "\t"
        ext = fmt
        _write_delimited(tmp_path / f"triples.{ext}", ["subject", "predicate", "object", "datatype"], triples,
                         delimiter, extra=[("CO1", "owns", "CO2", "", "one field too many")])
        _write_delimited(tmp_path / f"labels.{ext}", ["id", "label", "description"], LABELS, delimiter)
        _write_delimited(tmp_path / f"predicates.{ext}", ["id", "label"], PREDICATES, delimiter, bom=False)
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        ext = fmt
        columns = list(zip(*triples))
        pq.write_table(pa.table({"subject": columns[0], "predicate": columns[1],
                                 "object": [None if not v.strip() else v for v in columns[2]],
                                 "datatype": columns[3]}), tmp_path / "triples.parquet")
        cols = list(zip(*LABELS))
        pq.write_table(pa.table({"id": cols[0], "label": cols[1], "description": cols[2]}), tmp_path / "labels.parquet")
        cols = list(zip(*PREDICATES))
        pq.write_table(pa.table({"id": cols[0], "label": cols[1]}), tmp_path / "predicates.parquet")
    else:
        ext = "nt"
        lines = []
        for s, p, o, d in triples:
            subject = "_:b1" if s == "bad id" else f"<http://ex.test/{s}>"
            term = _nt_term(o, d) if d != "weird" else f'"{o}"^^<http://ex.test/weird>'
            lines.append(f"{subject} <http://ex.test/{p}> {term} .")
        lines.append("<http://ex.test/CO1> <http://ex.test/owns> .")  # malformed
        rdfs = "<http://www.w3.org/2000/01/rdf-schema#label>"
        for ident, label, description in LABELS:
            lines.append(f'<http://ex.test/{ident}> {rdfs} "{label}"@en .')
            lines.append(f'<http://ex.test/{ident}> {rdfs} "{label} (fr)"@fr .')
            if description:
                lines.append(f'<http://ex.test/{ident}> <http://schema.org/description> "{description}"@en .')
        for ident, label in PREDICATES:
            lines.append(f'<http://ex.test/{ident}> {rdfs} "{label}" .')
        (tmp_path / "graph.nt").write_text("\ufeff" + "\n".join(lines) + "\n", encoding="utf-8")
        settings.update({"graph.triples": [str(tmp_path / "graph.nt")], "graph.namespace": "http://ex.test/"})
        return Config().updated(settings)
    settings.update({"graph.triples": [str(tmp_path / f"triples.{ext}")],
                     "graph.labels": str(tmp_path / f"labels.{ext}"),
                     "graph.predicate_labels": str(tmp_path / f"predicates.{ext}")})
    return Config().updated(settings)


def _expected_rejects(fmt: str) -> dict[str, int]:
    expected = {reason: 1 for *_, reason in HOSTILE}
    expected["malformed_row"] = 1 if fmt != "parquet" else 0  # a row of 5 fields, a line cut short
    return {k: v for k, v in expected.items() if v}


@pytest.mark.parametrize("fmt", ["csv", "tsv", "parquet", "ntriples"])
def test_each_format_counts_hostile_rows_and_keeps_the_good_ones(tmp_path, fmt):
    from refactx_pipeline.graph import load_graph
    from refactx_pipeline.graph_index import graph_facts

    cfg = write_hostile_graph(tmp_path, fmt)
    graph = load_graph(cfg)
    counts = graph.counts
    assert counts["rejected_by_reason"] == _expected_rejects(fmt)
    assert counts["triples"] == len(GOOD)
    assert counts["triples_in"] == counts["triples"] + counts["rejected"]
    assert counts["label_rows_by_outcome"]["empty_label"] == 1  # CO9
    assert {(s.subject, s.predicate, s.object) for s in graph.statements} == {r[:3] for r in GOOD}
    if fmt == "ntriples":
        assert counts["skipped_by_reason"]["other_language"] == 3
    facts, _ = graph_facts(graph, cfg.verbalize)
    assert set(facts) == EXPECTED_FACTS
    # every rejected row is kept with its reason, as read
    assert sorted(r for _, _, r in graph.rejects) == sorted(
        r for r, n in _expected_rejects(fmt).items() for _ in range(n))


def test_label_rule_qualifies_collisions_and_drops_what_stays_ambiguous():
    from refactx_pipeline.graph import display_labels

    labels = {
        "A": ("Northwind  Capital", "asset manager in Oslo"),
        "B": ("Northwind Capital", "bank in Lagos"),
        "C": ("Jana Novak", ""),  # collides, no description: dropped
        "D": ("Jana Novak", "person born 1970"),
        "E": ("Solo", "whatever"),
        "F": ("Twin", "same"),  # collides, and so does its qualified label: both dropped
        "G": ("Twin", "same"),
    }
    chosen, dropped = display_labels([*labels, "H"], labels)
    assert chosen == {
        "A": ("Northwind Capital (asset manager in Oslo)", "label_description"),
        "B": ("Northwind Capital (bank in Lagos)", "label_description"),
        "D": ("Jana Novak (person born 1970)", "label_description"),
        "E": ("Solo", "label"),
    }
    assert dropped == {"C": "ambiguous_label", "F": "ambiguous_label", "G": "ambiguous_label", "H": "missing_label"}


def test_python_rendering_matches_the_documented_table():
    from refactx_pipeline.render import render_literal

    from .test_verbalize import doc_examples

    kinds = {"monolingual": "string"}
    mismatches = [(kind, value, expected, render_literal(kinds.get(kind, kind), value))
                  for kind, _, value, _, expected in doc_examples() if kind != "item"
                  if render_literal(kinds.get(kind, kind), value) != expected]
    assert not mismatches


def test_config_names_the_bad_graph_keys():
    with pytest.raises(ConfigError) as err:
        Config().updated({"graph.format": "csv", "graph.triples": "t.csv", "graph.delimiter": ";;",
                          "graph.encoding": "klingon", "graph.id_pattern": "("})
    text = str(err.value)
    for key in ("graph.delimiter", "graph.encoding", "graph.id_pattern"):
        assert key in text
    with pytest.raises(ConfigError, match="graph.labels and graph.predicate_labels"):
        Config().updated({"graph.format": "tsv", "graph.triples": "t.tsv"})


def test_wrong_encoding_and_missing_column_are_errors_naming_the_file(tmp_path):
    from refactx_pipeline.graph import load_graph

    cfg = write_hostile_graph(tmp_path, "csv")
    with pytest.raises(ConfigError, match="no column 'subj'"):
        load_graph(cfg.updated({"graph.subject_column": "subj"}))
    (tmp_path / "labels.csv").write_bytes("id,label\nCO1,Caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="labels.csv: not valid utf-8"):
        load_graph(cfg)
    # an export in one other encoding (graph.encoding applies to every file)
    for name in ("triples.csv", "predicates.csv"):
        path = tmp_path / name
        path.write_bytes(path.read_text(encoding="utf-8-sig").encode("latin-1"))
    assert load_graph(cfg.updated({"graph.encoding": "latin-1"})).labels["CO1"][0] == "Caf\u00e9"


def test_stage_selection_runs_graph_instead_of_parse_and_labels(tmp_path):
    from refactx_pipeline.pipeline import select_stages

    assert "graph" not in select_stages(Config())
    stages = select_stages(write_hostile_graph(tmp_path, "csv"))
    assert stages[:2] == ["graph", "verbalize"] and not {"parse", "sitelinks", "labels"} & set(stages)


# ---------------------------------------------------------------- the two builds


def _example_config(tmp_path) -> Config:
    """A small financial graph with literal edge cases appended (unparseable, exponent, point)."""
    from refactx_pipeline.finance_example import write_example

    path = write_example(tmp_path / "finance", companies=60, people=40)
    with open(tmp_path / "finance" / "triples.csv", "a", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([
            ("CO0001", "incorporated_on", "sometime in May", "date"),  # unparseable_time
            ("CO0002", "share_capital", "+1.50E+03", "decimal"),
            ("CO0003", "location", "Point(-5.84 54.590933333333)", "coordinate"),
            ("CO0004", "share_capital", "12 kg", "decimal"),  # unparseable_quantity
        ])
    with open(tmp_path / "finance" / "predicate_labels.csv", "a", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([("share_capital", "share capital"), ("location", "location")])
    return Config.load(path).updated({
        "tokenize.vocabularies": [f"qwen2.5={tokenizer_dir('qwen2.5')}"],
        "tree.subtree_threshold": 16,
        "spark.master": "local[2]", "spark.shuffle_partitions": 4,
    })


@pytest.mark.spark
@pytest.mark.pg
def test_spark_and_in_process_builds_give_the_same_index(spark, pg_dsn, tmp_path):
    from refactx_index.pg import open_index
    from refactx_pipeline.graph_index import build_graph_index
    from refactx_pipeline.pipeline import run_pipeline

    from .test_end_to_end import _enumerate

    cfg = _example_config(tmp_path)
    results = {r.stage: r.counts for r in run_pipeline(spark, cfg, dsn=pg_dsn)}
    assert list(results) == ["graph", "verbalize", "tokenize", "prefix_rows", "load", "validate", "activate"]
    built = build_graph_index(cfg)

    # the same rows rejected for the same reasons, the same literals dropped
    assert results["graph"]["rejected_by_reason"] == built.counts["graph"]["rejected_by_reason"]
    assert results["verbalize"]["dropped"] == built.counts["verbalize"]["dropped"] == {
        "unparseable_quantity": 1, "unparseable_time": 1}
    # the same facts of the same kinds
    facts = spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).select("text", "kind").collect()
    assert {r.text: r.kind for r in facts} == built.facts
    assert {"inverse", "description", "statement"} == set(built.facts.values())
    assert any(t.endswith("<location> <54.590933333333, -5.84> .") for t in built.facts)
    assert any(t.endswith("<share capital> <1.5e3> .") for t in built.facts)
    # the same token sequences, and the same tree rows
    tokens = spark.read.parquet(str(cfg.stage_dir("tokenize") / "qwen2.5" / "tokens")).collect()
    sequences = {tuple(r.token_ids) for r in tokens}
    assert sequences == {tuple(ids) for ids in built.sequences.values()}
    rows = spark.read.parquet(str(cfg.stage_dir("prefix_rows") / "qwen2.5" / "rows")).collect()
    assert {bytes(r.prefix): bytes(r.node) for r in rows} == dict(built.index.rows)

    # through PostgreSQL: the served build holds exactly those sequences
    assert results["validate"]
    with open_index(pg_dsn, cfg.index_name("qwen2.5"), schema=cfg.pg.schema) as index:
        assert _enumerate(index) == sequences
    # and the saved in-memory file answers alike
    from refactx_index.memory import MemoryTreeIndex

    built.index.save(tmp_path / "finance.rfx")
    loaded = MemoryTreeIndex.load(tmp_path / "finance.rfx", tokenizer=str(tokenizer_dir("qwen2.5")))
    assert _enumerate(loaded) == sequences
    counts = json.loads((cfg.stage_dir("graph") / "counts.json").read_text())
    assert counts["triples_in"] == counts["triples"] + counts["rejected"]


def test_finance_example_is_deterministic_and_about_ten_thousand_triples(tmp_path):
    from refactx_pipeline.finance_example import generate

    triples, labels = generate()
    assert triples == generate()[0]
    assert 9_000 <= len(triples) <= 12_000
    predicates = {p for _, p, _, _ in triples}
    assert {"owns", "controls", "subsidiary_of", "director_of", "share_percentage", "acquired_on"} <= predicates


def test_graph_index_command_writes_an_index_file_that_loads(tmp_path, capsys):
    from refactx_index.memory import MemoryTreeIndex
    from refactx_pipeline.cli import main

    cfg = write_hostile_graph(tmp_path, "csv")
    config = tmp_path / "graph.toml"
    g = cfg.graph
    config.write_text(f'[paths]\nsource = "acme"\n[graph]\nformat = "csv"\ntriples = {json.dumps(list(g.triples))}\n'
                      f"labels = {json.dumps(g.labels)}\npredicate_labels = {json.dumps(g.predicate_labels)}\n")
    out = tmp_path / "acme.rfx"
    vocab = tokenizer_dir("qwen2.5")
    assert main(["graph-index", "--config", str(config), "--vocabulary", f"qwen2.5={vocab}",
                 "--out", str(out), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["graph"]["rejected"] == len(HOSTILE) + 1 and counts["index"]["facts"] == len(EXPECTED_FACTS)
    index = MemoryTreeIndex.load(out, tokenizer=str(vocab))
    assert index.info.name == "acme-qwen2.5" and index.info.facts == len(EXPECTED_FACTS)
