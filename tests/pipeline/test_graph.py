"""Corporate graphs (``[graph]``): every input format with hostile rows, the label rule, the
Python rendering against docs/verbalize.md, and the two builds (Spark through PostgreSQL, and
in process into an in-memory index) giving the same facts, token sequences and rows."""

from __future__ import annotations

import csv
import json

import pytest

from refactx_pipeline.config import Config
from refactx_index.errors import ConfigError

from ..conftest import tokenizer_dir

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
    elif fmt == "turtle":
        (tmp_path / "graph.ttl").write_text("\ufeff" + TURTLE, encoding="utf-8")
        settings.update({"graph.triples": [str(tmp_path / "graph.ttl")], "graph.namespace": "http://ex.test/"})
        return Config().updated(settings)
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


# the GOOD and HOSTILE rows in Turtle: prefixes, `;` and `,` lists, a long string with a line
# break and quotes, a raw tab, a blank node subject ([]), labels in two languages
TURTLE = """@prefix ex: <http://ex.test/> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix schema: <http://schema.org/> .

ex:CO1 ex:owns ex:CO2 ;
    ex:incorporated_on "1999-05-01"^^xsd:date ;
    ex:motto "We lend, you grow\tdaily" .
ex:CO2 ex:motto \"\"\"line one
line "two\\"\"\"\" .

ex:CO3 ex:owns ex:CO1 .                    # CO3 has no label
ex:CO1 ex:frobnicates ex:CO2 ;             # no predicate label
    ex:motto "   "^^xsd:string ;           # blank once cleaned
    ex:owns ex:CO2 .                       # said before
[] ex:owns ex:CO2 .                        # a blank node
ex:CO2 ex:share "abc"^^ex:weird .

ex:CO1 rdfs:label "Acme Bank"@en, "Acme Bank (fr)"@fr ; schema:description "bank in Oslo"@en .
ex:CO2 rdfs:label "Beta, Holdings"@en, "Beta, Holdings (fr)"@fr .
ex:CO9 rdfs:label ""@en, " (fr)"@fr ; schema:description "no label"@en .
ex:owns rdfs:label "owns" .
ex:incorporated_on rdfs:label "incorporated on" .
ex:motto rdfs:label "motto" .
"""


def _expected_rejects(fmt: str) -> dict[str, int]:
    expected = {reason: 1 for *_, reason in HOSTILE}
    # a row of 5 fields, a line cut short (Parquet has no such row; Turtle: a file that does
    # not parse is an error, below)
    expected["malformed_row"] = 1 if fmt not in ("parquet", "turtle") else 0
    return {k: v for k, v in expected.items() if v}


FORMATS = ["csv", "tsv", "parquet", "ntriples", "turtle"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_counts_hostile_rows_and_keeps_the_good_ones(tmp_path, fmt):
    from refactx_pipeline.graph.rules import load_graph
    from refactx_pipeline.graph.index import graph_facts

    cfg = write_hostile_graph(tmp_path, fmt)
    graph = load_graph(cfg)
    counts = graph.counts
    assert counts["rejected_by_reason"] == _expected_rejects(fmt)
    assert counts["triples"] == len(GOOD)
    assert counts["triples_in"] == counts["triples"] + counts["rejected"]
    assert counts["label_rows_by_outcome"]["empty_label"] == 1  # CO9
    assert {(s.subject, s.predicate, s.object) for s in graph.statements} == {r[:3] for r in GOOD}
    if fmt in ("ntriples", "turtle"):
        assert counts["skipped_by_reason"]["other_language"] == 3
    facts, _ = graph_facts(graph, cfg.verbalize)
    assert set(facts) == EXPECTED_FACTS
    # every rejected row is kept with its reason, as read
    assert sorted(r for _, _, r in graph.rejects) == sorted(
        r for r, n in _expected_rejects(fmt).items() for _ in range(n))


def _spark_graph(spark, cfg):
    """What the Spark stage wrote: (counts, statements, labels, descriptions, reject reasons)
    in the in-process build's terms."""
    from refactx_pipeline.graph import stage as graph_stage
    from refactx_pipeline.graph.rules import ENTITY_PREFIX
    from refactx_pipeline.stages.contract import StageContext

    counts = graph_stage.run(StageContext(cfg, spark=spark))
    assert counts.pop("format") == cfg.graph.format
    e = len(ENTITY_PREFIX)
    parse = cfg.stage_dir("parse")
    statements = {(r.subject[e:], r.property, r.object_kind, r.object_item[e:] if r.object_item else r.object_value)
                  for r in spark.read.parquet(str(parse / "statements")).collect()}
    labels = {r.entity[e:]: (r.label, r.label_source) for r in spark.read.parquet(str(cfg.stage_dir("labels") / "labels")).collect()}
    descriptions = {r.entity[e:]: r.value for r in spark.read.parquet(str(parse / "terms")).collect()}
    properties = {r.property: r.label for r in spark.read.parquet(str(parse / "properties")).collect()}
    reasons = sorted(r.reason for r in spark.read.parquet(str(cfg.stage_dir("graph") / "rejects")).collect())
    return counts, statements, labels, descriptions, properties, reasons


def assert_same_graph(spark, cfg):
    """The Spark stage and the in-process rules agree on everything they keep and count."""
    from refactx_pipeline.graph.rules import load_graph

    graph = load_graph(cfg)
    counts, statements, labels, descriptions, properties, reasons = _spark_graph(spark, cfg)
    assert counts == graph.counts
    assert statements == {(s.subject, s.predicate, s.kind, s.object) for s in graph.statements}
    assert labels == graph.labels
    assert descriptions == graph.descriptions
    assert properties == {p: graph.predicate_labels[p] for p in {s.predicate for s in graph.statements}}
    assert reasons == sorted(r for _, _, r in graph.rejects)
    return graph


@pytest.mark.spark
@pytest.mark.parametrize("fmt", FORMATS)
def test_spark_stage_reads_each_format_as_the_in_process_build_does(spark, tmp_path, fmt):
    cfg = write_hostile_graph(tmp_path, fmt)
    graph = assert_same_graph(spark, cfg)
    assert graph.counts["rejected_by_reason"] == _expected_rejects(fmt)


def _csv_twin_of_turtle(tmp_path, extra_ttl: str = "") -> tuple[Config, Config]:
    """The financial example as CSV, and the same graph written as Turtle."""
    from refactx_testing.finance_example import write_example, write_turtle

    config = write_example(tmp_path / "csv", companies=40, people=30)
    csv_cfg = Config.load(config, env={})
    ttl = write_turtle(tmp_path / "graph.ttl", companies=40, people=30)
    if extra_ttl:
        with open(ttl, "a", encoding="utf-8") as fh:
            fh.write(extra_ttl)
    ttl_cfg = csv_cfg.updated({"graph.format": "turtle", "graph.triples": [str(ttl)], "graph.labels": "",
                               "graph.predicate_labels": "", "graph.namespace": "urn:finance:",
                               "paths.build_root": str(tmp_path / "ttl-build")})
    return csv_cfg, ttl_cfg


def test_turtle_and_csv_forms_of_one_graph_give_the_same_facts(tmp_path):
    from refactx_pipeline.graph.rules import load_graph
    from refactx_pipeline.graph.index import graph_facts

    csv_cfg, ttl_cfg = _csv_twin_of_turtle(tmp_path)
    from_csv, from_ttl = load_graph(csv_cfg), load_graph(ttl_cfg)
    assert sorted(from_ttl.statements, key=repr) == sorted(from_csv.statements, key=repr)
    assert from_ttl.labels == from_csv.labels
    assert from_ttl.counts["rejected_by_reason"] == from_csv.counts["rejected_by_reason"]
    assert graph_facts(from_ttl, ttl_cfg.verbalize)[0] == graph_facts(from_csv, csv_cfg.verbalize)[0]


def test_a_turtle_file_that_does_not_parse_is_an_error_naming_it(tmp_path):
    from refactx_pipeline.graph.rules import load_graph

    cfg = write_hostile_graph(tmp_path, "turtle")
    with open(tmp_path / "graph.ttl", "a", encoding="utf-8") as fh:
        fh.write("ex:CO1 ex:owns .\n")
    line = TURTLE.count("\n") + 1
    with pytest.raises(ConfigError, match=rf"graph.ttl: not valid Turtle: at line {line}: Bad syntax"):
        load_graph(cfg)


@pytest.mark.spark
def test_spark_stage_stops_on_a_turtle_file_that_does_not_parse(spark, tmp_path):
    from refactx_pipeline.graph import stage as graph_stage
    from refactx_pipeline.stages.contract import StageContext

    cfg = write_hostile_graph(tmp_path, "turtle")
    with open(tmp_path / "graph.ttl", "a", encoding="utf-8") as fh:
        fh.write('ex:CO1 ex:motto "unterminated .\n')
    with pytest.raises(ConfigError, match="graph.ttl: not valid Turtle"):
        graph_stage.run(StageContext(cfg, spark=spark))


@pytest.mark.spark
def test_backslash_escapes_globs_and_an_export_dir_in_both_builds(spark, tmp_path):
    """A CSV export quoting with backslash escapes, its triples split into part files found by
    a glob, paths relative to graph.export_dir; latin-1 text."""
    export = tmp_path / "exports" / "20260105"
    export.mkdir(parents=True)
    rows = [("CO1", "motto", 'say \\"hi\\", twice', "string"), ("CO1", "owns", "CO2", ""),
            ("CO2", "motto", "Caf\u00e9", "string")]
    for i, row in enumerate(rows):
        (export / f"part-{i:05d}.csv").write_bytes(
            ("subject,predicate,object,datatype\n" + ",".join(
                f'"{v}"' if "," in v or '"' in v else v for v in row) + "\n").encode("latin-1"))
    (export / "labels.csv").write_bytes("id,label\nCO1,Acme\nCO2,Caf\u00e9 Co\n".encode("latin-1"))
    (export / "predicates.csv").write_text("id,label\nmotto,motto\nowns,owns\n", encoding="latin-1")
    cfg = Config().updated({
        "graph.format": "csv", "graph.triples": ["part-*.csv"], "graph.labels": "labels.csv",
        "graph.predicate_labels": "predicates.csv", "graph.escape_char": "\\", "graph.encoding": "latin-1",
        "graph.export_dir": str(export), "paths.build_root": str(tmp_path / "build"),
    })
    graph = assert_same_graph(spark, cfg)
    assert {s.object for s in graph.statements} == {'say "hi", twice', "CO2", "Caf\u00e9"}
    assert graph.counts["rejected"] == 0


@pytest.mark.spark
def test_typed_parquet_columns_read_alike_in_both_builds(spark, tmp_path):
    """Parquet objects that are not text (doubles, floats, decimals, dates, timestamps,
    integers, booleans; one triples file per type) become the same literal text in both."""
    import datetime as dt
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {
        "double": (pa.float64(), [1.5, 1e20, 12345678.9, 0.001, -2.5e-7], "decimal"),
        "float": (pa.float32(), [1.1, 16777216.0, 3.25], "decimal"),
        "decimal": (pa.decimal128(10, 3), [decimal.Decimal("12.500"), decimal.Decimal("-0.001")], "decimal"),
        "int": (pa.int64(), [7, -42, 10**12], "integer"),
        "date": (pa.date32(), [dt.date(1999, 5, 1), dt.date(2024, 2, 29)], "date"),
        "timestamp": (pa.timestamp("us", tz="UTC"), [dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)],
                      "datetime"),
        "naive": (pa.timestamp("ms"), [dt.datetime(2002, 3, 4, 5, 6, 7, 890000)], "datetime"),
        "bool": (pa.bool_(), [True, False], "string"),
    }
    for name, (kind, values, datatype) in columns.items():
        n = len(values)
        pq.write_table(pa.table({
            "subject": ["CO1"] * n, "predicate": [f"p_{name}"] * n, "object": pa.array(values, type=kind),
            "datatype": [datatype] * n}), tmp_path / f"triples-{name}.parquet")
    pq.write_table(pa.table({"id": ["CO1"], "label": ["Acme"]}), tmp_path / "labels.parquet")
    pq.write_table(pa.table({"id": [f"p_{n}" for n in columns], "label": list(columns)}),
                   tmp_path / "predicates.parquet")
    cfg = Config().updated({
        "graph.format": "parquet", "graph.triples": [str(tmp_path / "triples-*.parquet")],
        "graph.labels": str(tmp_path / "labels.parquet"), "graph.predicate_labels": str(tmp_path / "predicates.parquet"),
        "paths.build_root": str(tmp_path / "build"),
    })
    graph = assert_same_graph(spark, cfg)
    objects = {(s.predicate, s.object) for s in graph.statements}
    assert {("p_double", "1.0E20"), ("p_double", "1.23456789E7"), ("p_float", "1.1"), ("p_float", "1.6777216E7"),
            ("p_decimal", "12.500"), ("p_date", "2024-02-29"), ("p_timestamp", "2001-02-03T04:05:06"),
            ("p_naive", "2002-03-04T05:06:07"), ("p_bool", "true"), ("p_int", "1000000000000")} <= objects
    assert graph.counts["rejected"] == 0


def test_label_rule_qualifies_collisions_and_drops_what_stays_ambiguous():
    from refactx_pipeline.graph.rules import display_labels

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
    from refactx_pipeline.stages.render import render_literal

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
    from refactx_pipeline.graph.rules import load_graph

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
    from refactx_pipeline.orchestration.pipeline import select_stages

    assert "graph" not in select_stages(Config())
    stages = select_stages(write_hostile_graph(tmp_path, "csv"))
    assert stages[:2] == ["graph", "verbalize"] and not {"parse", "sitelinks", "labels"} & set(stages)


# ---------------------------------------------------------------- the two builds


def _example_config(tmp_path) -> Config:
    """A small financial graph with literal edge cases appended (unparseable, exponent, point)."""
    from refactx_testing.finance_example import write_example

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
    from refactx_index.tree.pg import open_index
    from refactx_pipeline.graph.index import build_graph_index
    from refactx_pipeline.orchestration.pipeline import build

    from ..integration.test_end_to_end import _enumerate

    cfg = _example_config(tmp_path)
    results = {r.stage: r.counts for r in build(cfg, spark=spark, dsn=pg_dsn)}
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
    from refactx_index.tree.memory import MemoryTreeIndex

    built.index.save(tmp_path / "finance.rfx")
    loaded = MemoryTreeIndex.load(tmp_path / "finance.rfx", vocabulary=str(tokenizer_dir("qwen2.5")))
    assert _enumerate(loaded) == sequences
    counts = json.loads((cfg.stage_dir("graph") / "counts.json").read_text())
    assert counts["triples_in"] == counts["triples"] + counts["rejected"]


def test_finance_example_is_deterministic_and_about_ten_thousand_triples(tmp_path):
    from refactx_testing.finance_example import generate

    triples, labels = generate()
    assert triples == generate()[0]
    assert 9_000 <= len(triples) <= 12_000
    predicates = {p for _, p, _, _ in triples}
    assert {"owns", "controls", "subsidiary_of", "director_of", "share_percentage", "acquired_on"} <= predicates


def test_graph_index_command_writes_an_index_file_that_loads(tmp_path, capsys):
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_pipeline.cli.commands import main

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
    index = MemoryTreeIndex.load(out, vocabulary=str(vocab))
    assert index.info.name == "acme-qwen2.5" and index.info.facts == len(EXPECTED_FACTS)
