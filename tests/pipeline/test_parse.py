"""Stage 1 (parse) on the real extracts and on hand-written hostile lines."""

from __future__ import annotations

import bz2
import json
import random
from collections import Counter

import pytest

from refactx_pipeline.stages import parse
from refactx_pipeline.stages.contract import StageContext
from refactx_pipeline.stages.schemas import PROPERTIES, REJECTS, STATEMENTS, TERMS
from refactx_index.errors import ConfigError
from tests import ntriples_grammar as grammar
from tests.conftest import shared_path

E = "http://www.wikidata.org/entity/"
D = "http://www.wikidata.org/prop/direct/"
LABEL = "<http://www.w3.org/2000/01/rdf-schema#label>"

GOOD = [
    f"<{E}Q1> <{D}P31> <{E}Q5> .",
    # every escape, uppercase hex, a non-BMP character
    f'<{E}Q1> {LABEL} "t\\tq\\"b\\\\s\\u00E9\\U0001F600n\\nr\\r"@en .',
    # a literal holding " . " and an escaped quote
    f'<{E}Q2> <{D}P1448> "a . b \\" c"@en .',
    # raw UTF-8 inside an IRI
    f"<{E}Q3> <{D}P856> <http://example.org/пример> .",
    # a 100 KB literal
    f'<{E}Q4> <{D}P1545> "{"x" * 100_000}" .',
    f'<{E}Q5> <http://schema.org/description> "desc"@en .',
    f"<{E}P31> <http://wikiba.se/ontology-beta#propertyType> <http://wikiba.se/ontology-beta#WikibaseItem> .",
    f"<{E}P856> <http://wikiba.se/ontology#propertyType> <http://wikiba.se/ontology#Url> .",
    f"<{E}Q6> <{D}P2> _:b1 .",  # unknown value: skipped, counted
    f"<{E}Q6> <{D}P3> <http://www.wikidata.org/.well-known/genid/0a1b> .",  # unknown value too
]
HOSTILE = {
    f"<{E}Q1> <{D}P31> <{E}Q5>": "missing_final_dot",
    f'<{E}Q1> <{D}P31> "never closed .': "unterminated_literal",
    f'<{E}Q1> <{D}P31> "bad \\x escape" .': "bad_escape",
    f'<{E}Q1> <{D}P31> "bare " quote" .': "unescaped_quote",
    f'<{E}Q1> <{D}P31> "lone \\uD800 high" .': "lone_surrogate",
    f'<{E}Q1> <{D}P31> "x"@ .': "bad_language_or_datatype",
    f"<{E}Q1> <{D}P31>": "too_few_terms",
    f"<{E}Q 1> <{D}P31> <{E}Q5> .": "bad_subject",  # a space inside an IRI
    f'<{E}Q1> "p" <{E}Q5> .': "bad_predicate",
    f"<{E}Q1> <{D}P31> <{E}Q{{5}}> .": "bad_object",
    f'"lit" <{D}P31> <{E}Q5> .': "bad_subject",
}
GARBAGE = b"\xff\xfe\x00\x80\x81garbage <x> .\n"


def _run(spark, cfg, paths):
    cfg = cfg.updated({"input.dumps": [str(p) for p in paths]})
    counts = parse.run(StageContext(cfg, spark=spark))
    out = cfg.stage_dir("parse")
    frames = {n: spark.read.parquet(str(out / n)) for n in ("statements", "terms", "properties", "rejects")}
    return counts, frames


def test_hostile_lines_become_rejects_and_good_lines_survive(spark, cfg, tmp_path):
    dump = tmp_path / "hostile.nt"
    with dump.open("wb") as fh:
        for i, good in enumerate(GOOD):
            fh.write(good.encode() + (b"\r\n" if i % 2 else b"\n"))  # CRLF and LF mixed
        for bad in HOSTILE:
            fh.write(bad.encode() + b"\n")
        fh.write(GARBAGE)
    empty = tmp_path / "empty.nt"
    empty.write_bytes(b"")
    counts, frames = _run(spark, cfg, [dump, empty])

    rejects = {r["line"]: r["reason"] for r in frames["rejects"].collect()}
    for line, reason in HOSTILE.items():
        assert rejects.get(line) == reason, line
    assert counts["rejected_by_reason"]["invalid_utf8"] == 1
    assert counts["rejected"] == len(HOSTILE) + 1
    assert counts["lines_in"] == len(GOOD) + len(HOSTILE) + 1
    assert counts["skipped_by_reason"]["unknown_value"] == 2

    stmts = {(r["subject"], r["property"]): r for r in frames["statements"].collect()}
    assert stmts[("Q1", "P31")]["object_item"] == "Q5"
    assert stmts[("Q2", "P1448")]["object_value"] == 'a . b " c'
    assert stmts[("Q2", "P1448")]["object_lang"] == "en"
    assert len(stmts[("Q4", "P1545")]["object_value"]) == 100_000
    # P856 is declared Url by the dump: dropped by the default datatype filter, and counted
    assert ("Q3", "P856") not in stmts
    assert counts["statements_filtered_by_reason"] == {"datatype_Url": 1}

    terms = {(r["entity"], r["kind"]): r["value"] for r in frames["terms"].collect()}
    assert terms[("Q1", "label")] == 't\tq"b\\s\u00e9\U0001f600n\nr\r'
    assert terms[("Q5", "description")] == "desc"

    props = {r["property"]: r["datatype"] for r in frames["properties"].collect()}
    assert props["P31"] == "WikibaseItem"  # ontology-beta# namespace
    assert props["P856"] == "Url"  # ontology# namespace
    assert props["P1545"] == "String"  # inferred from a plain literal
    assert counts["property_types_declared"] == 2


def test_contract_schemas(spark, cfg, tmp_path):
    dump = tmp_path / "one.nt"
    dump.write_text(GOOD[0] + "\n")
    _, frames = _run(spark, cfg, [dump])
    for name, schema in (("statements", STATEMENTS), ("terms", TERMS), ("properties", PROPERTIES),
                         ("rejects", REJECTS)):
        got = [(f.name, f.dataType) for f in frames[name].schema.fields]
        assert got == [(f.name, f.dataType) for f in schema.fields], name
    assert json.loads((cfg.stage_dir("parse") / "counts.json").read_text())["statements"] == 1


def test_sample500_without_property_lines_infers_datatypes(spark, cfg):
    counts, frames = _run(spark, cfg, [shared_path("data", "wikidata", "truthy-2018-sample500-en.nt")])
    assert counts["lines_in"] == 21147
    assert counts["rejected"] == 0
    assert counts["property_types_declared"] == 0
    assert counts["datatype_inferred"] > 50
    assert counts["statements"] > 3000
    # objects that are properties (WikibaseProperty) are not kept by default
    assert counts["statements_filtered_by_reason"].get("datatype_WikibaseProperty", 0) > 0
    facts = {(r["subject"], r["property"], r["object_item"]) for r in frames["statements"].collect()}
    assert ("Q26", "P17", "Q145") in facts
    props = {r["property"]: r for r in frames["properties"].collect()}
    assert props["P569"]["label"] == "date of birth"
    terms = {(r["entity"], r["kind"], r["value"]) for r in frames["terms"].collect()}
    assert ("Q27", "alias", "\u00c9ire") in terms
    assert {r["lang"] for r in frames["terms"].select("lang").distinct().collect()} == {"en"}


def test_2024_dump_and_bz2_input(spark, cfg, tmp_path):
    src = shared_path("data", "wikidata", "truthy-2024-Q42-Q37599471-Q24628793.nt")
    packed = tmp_path / "t.nt.bz2"
    packed.write_bytes(bz2.compress(src.read_bytes()))
    counts, frames = _run(spark, cfg, [packed])
    assert counts["lines_in"] == 1340
    assert counts["rejected"] == 0
    kinds = {r["object_kind"] for r in frames["statements"].collect()}
    assert {"item", "time", "string", "monolingual"} <= kinds
    q42 = {(r["property"], r["object_item"]) for r in frames["statements"].where("subject = 'Q42'").collect()}
    assert ("P31", "Q5") in q42


def test_head10k_2018_skips_other_languages(spark, cfg):
    counts, frames = _run(spark, cfg, [shared_path("data", "wikidata", "truthy-2018-head10k.nt")])
    assert counts["lines_in"] == 10000 and counts["rejected"] == 0
    assert counts["skipped_by_reason"]["other_language"] > 1000
    labels = {r["value"] for r in frames["terms"].where("entity = 'Q26' and kind = 'label'").collect()}
    assert labels == {"Northern Ireland"}


def test_serializer_fixtures_with_configured_namespaces(spark, cfg):
    cfg = cfg.updated({
        "input.entity_namespace": "http://acme.test/",
        "input.direct_claim_namespace": "http://acme.test/prop/direct/",
        "filter.keep_datatypes": cfg.filter.keep_datatypes + ("Url", "CommonsMedia"),
    })
    base = shared_path("data", "wikidata", "wikibase-serializer")
    counts, frames = _run(spark, cfg, [base / "P2_all.nt", base / "Q4_truthy_statements.nt"])
    assert counts["rejected"] == 0
    props = {r["property"]: r["datatype"] for r in frames["properties"].collect()}
    assert props["P2"] == "String"  # declared, although its object is an item: the dump wins
    stmts = {(r["property"], r["object_kind"], r["object_value"]) for r in frames["statements"].collect()}
    assert ("P4", "coordinate", "Point(67 12)") in stmts
    assert ("P5", "monolingual", "\u043f\u0440\u0435\u0432\u0435\u0434") not in stmts  # ru is not configured
    assert ("P6", "quantity", "+19.768000000000000682121026329696178436279296875") in stmts
    assert ("P8", "time", "-0199-01-01T00:00:00Z") in stmts
    assert ("P9", "other", "http://url.acme.test%5Cbadurl?chars=%5C\u043f\u0440\u0438\u0432\u0435\u0442%3C%20%3E%22") in stmts
    assert counts["skipped_by_reason"]["unknown_value"] == 1
    assert counts["skipped_by_reason"]["no_value"] == 1


def test_filters_allow_deny_and_excluded_classes(spark, cfg, tmp_path):
    dump = tmp_path / "f.nt"
    dump.write_text(
        "\n".join(
            [
                f"<{E}Q1> <{D}P31> <{E}Q13442814> .",
                f"<{E}Q1> <{D}P50> <{E}Q9> .",
                f"<{E}Q2> <{D}P31> <{E}Q5> .",
                f"<{E}Q2> <{D}P19> <{E}Q9> .",
                f"<{E}Q2> <{D}P20> <{E}Q9> .",
            ]
        )
        + "\n"
    )
    cfg = cfg.updated({"filter.exclude_classes": ["Q13442814"], "filter.deny_properties": ["P20"]})
    counts, frames = _run(spark, cfg, [dump])
    kept = {(r["subject"], r["property"]) for r in frames["statements"].collect()}
    assert kept == {("Q2", "P31"), ("Q2", "P19")}
    assert counts["statements_filtered_by_reason"] == {"excluded_class": 2, "denied_property": 1}


def test_property_table_supplies_datatypes(spark, cfg, tmp_path):
    dump = tmp_path / "p.nt"
    dump.write_text(f'<{E}Q1> <{D}P214> "113230702" .\n<{E}Q1> <{D}P1476> "A title" .\n')
    table = tmp_path / "props.csv"
    table.write_text("id,label,datatype\nP214,VIAF ID,external-id\nP1476,title,String\n")
    cfg = cfg.updated({"input.property_table": str(table)})
    counts, frames = _run(spark, cfg, [dump])
    props = {r["property"]: (r["datatype"], r["label"]) for r in frames["properties"].collect()}
    assert props["P214"] == ("ExternalId", "VIAF ID")
    assert counts["datatype_source"] == {"table": 2}
    assert [r["property"] for r in frames["statements"].collect()] == ["P1476"]
    # a reason named after a datatype only the table knows: counted while the statements are written
    assert counts["statements_filtered_by_reason"] == {"datatype_ExternalId": 1}
    assert counts["statements"] == 1 and counts["terms"] == 0


def test_outcomes_are_counted_by_the_write_and_a_missed_outcome_is_a_bug(spark, tmp_path):
    """``observe_outcomes``, which parse and labels count their outputs with: the counts come
    from the write that runs anyway (even one that projects the counted column away), and an
    exhaustive list that misses a row's outcome raises instead of returning short counts."""
    from pyspark.sql import functions as F

    from refactx_pipeline.common import observe_outcomes

    frame = spark.createDataFrame([("a", 1), ("a", 2), ("b", 3), (None, 4)], "kind string, n int")
    kind = F.col("kind")
    observed, counted = observe_outcomes(frame, {"a": kind == "a", "b": kind == "b", "": kind.isNull()},
                                         exhaustive=True)
    observed.select("n").write.parquet(str(tmp_path / "all"))
    assert counted() == ({"a": 2, "b": 1, "": 1}, 4)
    observed, counted = observe_outcomes(frame, {"a": kind == "a", "b": kind == "b"}, exhaustive=True)
    observed.write.parquet(str(tmp_path / "missed"))
    with pytest.raises(RuntimeError, match="4 rows but 3 counted by outcome"):
        counted()
    observed, counted = observe_outcomes(frame, {"a": kind == "a"})
    observed.where(kind == "b").write.parquet(str(tmp_path / "some"))
    assert counted() == ({"a": 2}, 4)  # counted before the filter the write applies


@pytest.mark.parametrize(
    "body,expected",
    [("a\\u00e9", "a\u00e9"), ("\\uD83D\\uDE00", "\U0001f600"), ("\\\\u0041", "\\u0041"), ("\\'", "'"),
     ("\\U0000D800", "\ufffd"), ("\\u0000", "\x00"), ("\\U0010FFFF", "\U0010ffff")],
)
def test_lexer_unescapes_literals(spark, body, expected):
    rows = [(f'<{E}Q1> <{D}P1476> "{body}" .', "mem")]
    staged = parse.lex_lines(spark.createDataFrame(rows, "value string, source string"), ["en"], E, D).collect()
    assert [(r["kind"], r["object_value"]) for r in staged] == [("statement", expected)]
    assert grammar.unescape_literal(body) == expected


# ---------------------------------------------------------------- the lexer's edges

MANY_ESCAPES = "\\u00e9" * 20_000
EDGE_GOOD = [
    # a surrogate pair as two \u escapes, lowercase hex
    f'<{E}Q10> {LABEL} "smile \\ud83d\\ude00"@en .',
    # an escaped backslash before "uD800" is text, not a surrogate escape
    f'<{E}Q11> {LABEL} "\\\\uD800"@en .',
    # tabs between terms, no space before the dot, blanks after it
    f"<{E}Q12>\t<{D}P31>\t\t<{E}Q5>.  \t",
    # 20,000 escapes in one literal
    f'<{E}Q13> <{D}P1545> "{MANY_ESCAPES}" .',
    # a typed literal, a language tag with a subtag that is not configured
    f'<{E}Q14> <{D}P569> "2001-01-01T00:00:00Z"^^<http://www.w3.org/2001/XMLSchema#dateTime> .',
    f'<{E}Q14> {LABEL} "colour"@en-GB .',
    # U+FFFD written as valid UTF-8: the lexer checks such a line's bytes strictly, and keeps it
    f'<{E}Q15> {LABEL} "replacement \ufffd character"@en .',
]
EDGE_HOSTILE = {
    f'<{E}Q1> {LABEL} "lone \\uDC00 low"@en .': "lone_surrogate",
    f'<{E}Q1> {LABEL} "high at end \\uD83D"@en .': "lone_surrogate",
    f"<{E}Q1> <{D}P31> <{E}Q5> .\u0085": "missing_final_dot",  # NEL is not a blank
    f'<{E}Q1> {LABEL} "x" @en .': "bad_language_or_datatype",
    f'<{E}Q1> <{D}P31> "bad \\U00110000 escape" .': "bad_escape",
}


def test_full_line_pattern_edges(spark, cfg, tmp_path):
    dump = tmp_path / "edges.nt"
    dump.write_text("\n".join(EDGE_GOOD + list(EDGE_HOSTILE)) + "\n", encoding="utf-8")
    counts, frames = _run(spark, cfg, [dump])
    rejects = {r["line"]: r["reason"] for r in frames["rejects"].collect()}
    assert rejects == EDGE_HOSTILE
    assert counts["lines_in"] == len(EDGE_GOOD) + len(EDGE_HOSTILE)
    terms = {r["entity"]: r["value"] for r in frames["terms"].collect()}
    assert terms == {"Q10": "smile \U0001f600", "Q11": "\\uD800", "Q15": "replacement \ufffd character"}
    stmts = {(r["subject"], r["property"]): r for r in frames["statements"].collect()}
    assert stmts[("Q12", "P31")]["object_item"] == "Q5"
    assert stmts[("Q13", "P1545")]["object_value"] == "\u00e9" * 20_000
    assert stmts[("Q14", "P569")]["object_kind"] == "time"
    assert counts["skipped_by_reason"] == {"other_language": 1}


def test_lex_lines_in_memory_rows(spark):
    """Rows not read from a file may hold a line feed: inside a literal it is a reject."""
    rows = [
        (f'<{E}Q1> <{D}P1476> "two\nlines" .', "mem"),
        (f"<{E}L1-F2> <{D}P5> <{E}P31> .", "mem"),
        (f"<{E}Q2> <{D}P5> <{E}L7-S3> .", "mem"),
        ("   ", "mem"),
        ("# a comment", "mem"),
    ]
    frame = spark.createDataFrame(rows, "value string, source string")
    staged = parse.name_rejects(parse.lex_lines(frame, ["en"], E, D)).collect()
    got = [(r["kind"], r["reason"], r["subject"], r["inferred_datatype"]) for r in staged]
    assert got == [
        ("reject", "bad_literal_character", None, None),
        ("skip", "non_item_subject", None, None),
        ("statement", None, "Q2", "WikibaseSense"),
        ("skip", "blank_or_comment", None, None),
        ("skip", "blank_or_comment", None, None),
    ]


# (valid pieces, broken pieces) of each part of a line
SUBJECTS = ([f"<{E}Q1>", f"<{E}Q42>", f"<{E}P5>", f"<{E}L1>", f"<{E}Q0>", f"<{E}Q01>", "_:b1", "_:b.1",
             "<http://x/y>", "<>", "<http://x/\u00e9>"],
            [f"<{E}Q 1>", f"<{E}Q12", "_:b1.", "_:-b", "_:", "<a{b>", '"lit"'])
PREDICATES = ([f"<{D}P31>", f"<{D}P569>", f"<{D}P0>", f"<{D}Q31>", LABEL, "<http://schema.org/description>",
               "<http://www.w3.org/2004/02/skos/core#altLabel>", "<http://wikiba.se/ontology#propertyType>",
               "<http://wikiba.se/ontology-beta#propertyType>", "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"],
              [f"<{D}P31", '"p"', "_:p"])
OBJECTS = ([f"<{E}Q5>", f"<{E}L1-F2>", f"<{E}P1-S3>", f"<{E}Q5-F1>", f"<{E}L1-X2>", f"<{E}P7>",
            "<http://wikiba.se/ontology#WikibaseItem>", "<http://wikiba.se/ontology-beta#Url>",
            "<http://wikiba.se/ontology#Foo-bar>", "<http://x/.well-known/genid/ab>",
            "<http://www.wikidata.org/prop/novalue/P5>", "<http://commons.wikimedia.org/wiki/Special:FilePath/a.jpg>",
            "<http://commons.wikimedia.org/data/main/Data:a.map>", "<http://commons.wikimedia.org/data/main/Data:b.tab>",
            "_:b", "_:b."],
           ["_:-b", "<a b>", "<a\\b>"])
BODY_PARTS = (["a", " . ", '\\"', "\\\\", "\\u00e9", "\\u00E9", "\\uD83D\\uDE00", "\\ud83d\\ude00", "\\U0001F600",
               "\\U0000D800", "\u00e9", "\t", "\U0001f600", "\\t\\n\\r\\b\\f\\'", "Point(67 12)", "+19.5"],
              ["\\uD800", "\\uDC00", "\\U00110000", "\\x", "\\", '"', "\\uD83D", "\\u12", "\\uFF10",
               "\\u\uff10\uff10\uff10\uff10"])
LITERAL_SUFFIXES = (["", "@en", "@en-GB", "@EN", "@fr", "@en-1a", "^^<http://www.w3.org/2001/XMLSchema#dateTime>",
                     "^^<http://www.w3.org/2001/XMLSchema#string>", "^^<http://www.w3.org/2001/XMLSchema#decimal>",
                     "^^<http://www.opengis.net/ont/geosparql#wktLiteral>", "^^<http://www.w3.org/1998/Math/MathML>",
                     "^^<http://x>"],
                    ["@", "@en-", "@e1", "^^", "^^<a b>", "^^x"])
SEPARATORS = ([" ", "\t", "  ", " \t"], ["", " \r"])
ENDINGS = ([" .", ".", " . ", " .\r", "\t.\t"], ["", " . x", " ..", " .\u0085"])


def generated_lines(count: int, seed: int = 7) -> list[str]:
    """Lines assembled from pieces of every part of the grammar, each piece broken
    one time in twenty: about half the lines are valid."""
    rng = random.Random(seed)

    def piece(choices: tuple[list[str], list[str]]) -> str:
        return rng.choice(choices[1] if rng.random() < 0.05 else choices[0])

    lines = []
    for _ in range(count):
        if rng.random() < 0.5:
            obj = '"' + "".join(piece(BODY_PARTS) for _ in range(rng.randint(0, 3))) + '"' + piece(LITERAL_SUFFIXES)
        else:
            obj = piece(OBJECTS)
        lines.append(rng.choice(["", "", " ", "\t"]) + piece(SUBJECTS) + piece(SEPARATORS) + piece(PREDICATES)
                     + piece(SEPARATORS) + obj + piece(ENDINGS))
    return lines


def test_lexer_accepts_exactly_the_grammar(spark):
    """The JVM lexer against the grammar written as one regex, on generated lines
    (valid and broken pieces of every part), the hostile lines and a real extract:
    the same lines accepted, the same ids and decoded literals."""
    lines = (generated_lines(6000) + GOOD + list(HOSTILE) + EDGE_GOOD + list(EDGE_HOSTILE)
             + shared_path("data", "wikidata", "truthy-2024-Q42-Q37599471-Q24628793.nt").read_text().splitlines())
    frame = spark.createDataFrame([(line, "mem") for line in lines], "value string, source string")
    oracle = {r["value"]: r for r in grammar.match_lines(frame, E, D).collect()}
    lexed = parse.lex_lines(frame, ["en"], E, D).collect()
    accepted = 0
    for line, row in zip(lines, lexed):
        expected = oracle[line]
        if row["kind"] == "skip" and row["reason"] == "blank_or_comment":
            assert not expected["ok"], line
            continue
        assert (row["kind"] != "reject") == expected["ok"], line
        accepted += expected["ok"]
        if row["kind"] in ("statement", "term"):
            assert row["subject"] == expected["sid"], line
            body = expected["body"] if expected["o"] == "" else None
            if body is not None:
                assert row["object_value"] == grammar.unescape_literal(body), line
        if row["kind"] == "statement":
            assert row["property"] == expected["pid"], line
            assert row["object_item"] == (expected["oitem"] or None), line
            assert row["object_lang"] == (expected["lang"].lower() or None), line
            assert row["object_datatype"] == (expected["dt"][1:-1] or None), line
    kinds = Counter(row["kind"] for row in lexed)
    # both sides of the grammar, and every kind of valid line, were exercised
    assert 1000 < accepted < len(lines) - 1000
    assert min(kinds[k] for k in ("statement", "term", "property_type", "skip")) > 10, kinds


@pytest.mark.parametrize("with_lines", [True, False])
def test_only_skipped_lines_or_an_empty_file(spark, cfg, tmp_path, with_lines):
    """Nothing staged (skipped lines are counted, not written): every output is empty, not an error."""
    dumps = [tmp_path / "empty.nt"]
    dumps[0].write_bytes(b"")
    if with_lines:
        dumps.append(tmp_path / "skips.nt")
        dumps[1].write_text(f'<{E}Q1> {LABEL} "Douglas"@fr .\n# comment\n\n'
                            f'<{E}Q1> <http://schema.org/version> "5" .\n')
    counts, frames = _run(spark, cfg, dumps)
    assert counts["lines_in"] == (4 if with_lines else 0)
    assert counts["skipped_by_reason"] == (
        {"other_language": 1, "blank_or_comment": 2, "other_predicate": 1} if with_lines else {})
    assert counts["statements"] == counts["terms"] == counts["rejected"] == 0
    assert all(frame.count() == 0 for frame in frames.values())


def test_lexer_missing_from_the_classpath_is_a_config_error(spark, monkeypatch):
    """Under spark-submit without --jars the class is absent: say so, and how to fix it."""
    monkeypatch.setattr(parse, "LEXER_CLASS", "org.refactx.ntriples.NoSuchLexer")
    with pytest.raises(ConfigError, match="--jars"):
        parse.lexer_function(spark, ["en"], E, D)
