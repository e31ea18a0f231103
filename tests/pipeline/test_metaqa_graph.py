"""A graph whose names are its ids (``graph.format = "names"``, MetaQA's ``kb.txt``): read in
process and by the Spark stage alike, relation and inverse labels from the config, shared
names and case-only differences counted, and the real kb.txt read whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refactx_index.errors import ConfigError
from refactx_pipeline.config import Config

from .test_graph import assert_same_graph

KB = Path(__file__).resolve().parents[3] / "shared" / "data" / "metaqa" / "kb.txt"

LINES = [
    "Kismet|directed_by|William Dieterle",
    "Kismet|starred_actors|Marlene Dietrich",
    "Kismet|has_genre|War",
    "War|directed_by|Andy Warhol",  # a film named as a genre is: one name, one entity
    "Kismet|has_tags|marlene dietrich",  # a tag that differs from a person's name only in case
    "Kismet|release_year|1944",
    "  Kismet |directed_by| William Dieterle",  # trimmed: the first line again
    "Kismet|has_genre",  # two fields
    "Kismet|has_tags|a|b",  # a name holding the delimiter: four fields
    "",  # a blank line is no row
    "|directed_by|Nobody",  # an empty name
    "Kismet|in_language|   ",  # an empty object
]
RELATIONS = {"directed_by": "directed by", "starred_actors": "starring", "has_genre": "genre"}
INVERSES = {"directed_by": "directed", "has_genre": "genre of"}


def names_config(tmp_path, lines=LINES) -> Config:
    path = tmp_path / "kb.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Config().updated({
        "graph.format": "names", "graph.triples": [str(path)], "graph.relation_labels": RELATIONS,
        "verbalize.inverse": True, "verbalize.inverse_labels": INVERSES,
        "paths.build_root": str(tmp_path / "build"), "paths.source": "metaqa"})


def test_names_are_ids_and_labels_relations_labelled_by_the_config(tmp_path):
    from refactx_pipeline.graph.index import graph_facts
    from refactx_pipeline.graph.rules import load_graph

    cfg = names_config(tmp_path)
    graph = load_graph(cfg)
    counts = graph.counts
    assert counts["rejected_by_reason"] == {"malformed_row": 2, "malformed_id": 1, "empty_value": 1,
                                            "duplicate": 1}
    assert counts["triples_in"] == counts["triples"] + counts["rejected"] == 11
    # Kismet, William Dieterle, Marlene Dietrich, War, Andy Warhol, marlene dietrich, 1944
    assert counts["names"] == {"entities": 7, "differing_only_in_case": 2, "subject_and_object": 1}
    facts, _ = graph_facts(graph, cfg.verbalize)
    assert set(facts) == {
        "<Kismet> <directed by> <William Dieterle> .", "<William Dieterle> <directed> <Kismet> .",
        "<Kismet> <starring> <Marlene Dietrich> .",
        "<Kismet> <genre> <War> .", "<War> <genre of> <Kismet> .",
        "<War> <directed by> <Andy Warhol> .", "<Andy Warhol> <directed> <War> .",
        "<Kismet> <has tags> <marlene dietrich> .",  # no label configured: the id, underscores as spaces
        "<Kismet> <release year> <1944> .",
    }


def test_a_tsv_of_names_and_labels_or_predicate_tables_refused(tmp_path):
    from refactx_pipeline.graph.rules import load_graph

    path = tmp_path / "kb.tsv"
    path.write_text("Kismet\tdirected_by\tWilliam Dieterle\nKismet\tbad\n", encoding="utf-8")
    cfg = Config().updated({"graph.format": "names", "graph.triples": [str(path)], "graph.delimiter": "\t"})
    graph = load_graph(cfg)
    assert graph.counts["triples"] == 1 and graph.counts["rejected_by_reason"] == {"malformed_row": 1}
    with pytest.raises(ConfigError, match="the names are the labels"):
        Config().updated({"graph.format": "names", "graph.triples": [str(path)], "graph.labels": "x.csv"})


@pytest.mark.spark
def test_spark_stage_reads_names_as_the_in_process_build_does(spark, tmp_path):
    graph = assert_same_graph(spark, names_config(tmp_path))
    assert graph.counts["names"]["differing_only_in_case"] == 2


@pytest.mark.skipif(not KB.is_file(), reason="MetaQA's kb.txt is not in ../shared")
def test_the_real_kb_is_read_whole_with_its_case_variants_counted(tmp_path):
    from refactx_pipeline.graph.rules import load_graph

    triples, names = set(), set()
    for line in KB.read_text(encoding="utf-8").splitlines():
        s, r, o = line.split("|")
        triples.add((s, r, o))
        names |= {s, o}
    lowered: dict[str, int] = {}
    for name in names:
        lowered[name.lower()] = lowered.get(name.lower(), 0) + 1
    cfg = Config.load(str(Path(__file__).resolve().parents[2] / "conf" / "metaqa.toml"), env={}).updated(
        {"graph.triples": [str(KB)]})
    counts = load_graph(cfg).counts
    assert counts["triples"] == len(triples) and counts["rejected"] == 0
    assert counts["predicates"] == 9
    assert counts["names"]["entities"] == len(names)
    assert counts["names"]["differing_only_in_case"] == sum(1 for n in names if lowered[n.lower()] > 1) > 3000
    json.dumps(counts)
