"""Stage 3 (labels): sources, drops, collisions and their policies."""

from __future__ import annotations

import pytest

from refactx_pipeline.stages import labels, parse
from tests.conftest import shared_path

E = "http://www.wikidata.org/entity/"
D = "http://www.wikidata.org/prop/direct/"
L = "<http://www.w3.org/2000/01/rdf-schema#label>"
DESC = "<http://schema.org/description>"

DUMP = [
    f"<{E}Q1> <{D}P31> <{E}Q2> .",
    f'<{E}Q1> {L} "Paris"@en .',
    f'<{E}Q1> {DESC} "capital of France"@en .',
    f'<{E}Q2> {L} "city"@en .',  # label, no description, no title: dropped
    f"<{E}Q3> <{D}P31> <{E}Q2> .",
    f'<{E}Q3> {L} "Paris"@en .',
    f'<{E}Q3> {DESC} "capital of France"@en .',  # the same label (description) as Q1
    f'<{E}P31> {L} "instance of"@en .',
]


def _run(spark, cfg, tmp_path, policy):
    dump = tmp_path / "d.nt"
    dump.write_text("\n".join(DUMP) + "\n")
    cfg = cfg.updated({"input.dumps": [str(dump)], "labels.collision_policy": policy})
    parse.run(spark, cfg)
    counts = labels.run(spark, cfg)
    rows = spark.read.parquet(str(cfg.stage_dir("labels") / "labels")).collect()
    return cfg, counts, {r["entity"]: (r["label"], r["label_source"]) for r in rows}


@pytest.mark.parametrize(
    "policy,expected_q",
    [
        ("keep", {"Q1": "Paris (capital of France)", "Q3": "Paris (capital of France)"}),
        ("drop", {}),
        ("qualify", {"Q1": "Paris (capital of France) (Q1)", "Q3": "Paris (capital of France) (Q3)"}),
    ],
)
def test_collision_policies(spark, cfg, tmp_path, policy, expected_q):
    cfg, counts, got = _run(spark, cfg, tmp_path, policy)
    assert {k: v[0] for k, v in got.items() if k.startswith("Q")} == expected_q
    assert got["P31"] == ("instance of", "label")
    assert counts["colliding_labels"] == 1 and counts["colliding_entities"] == 2
    assert counts["dropped_without_label"] == 1  # Q2
    collisions = spark.read.parquet(str(cfg.stage_dir("labels") / "collisions")).collect()
    assert [(c["label"], list(c["entities"])) for c in collisions] == [("Paris (capital of France)", ["Q1", "Q3"])]


def test_bad_policy_is_a_config_error(cfg):
    from refactx_index.errors import ConfigError

    with pytest.raises(ConfigError, match="labels.collision_policy"):
        cfg.updated({"labels.collision_policy": "merge"})


def test_sample500_with_real_page_heads(spark, cfg):
    from refactx_pipeline.stages import sitelinks

    cfg = cfg.updated({
        "input.dumps": [str(shared_path("data", "wikidata", "truthy-2018-sample500-en.nt"))],
        "input.enwiki_page": str(shared_path("data", "wikipedia", "enwiki-20150112-page.head1MiB.sql")),
        "input.enwiki_page_props": str(shared_path("data", "wikipedia", "enwiki-20150112-page_props.head1MiB.sql")),
    })
    parse.run(spark, cfg)
    sitelinks.run(spark, cfg)
    counts = labels.run(spark, cfg)
    rows = {r["entity"]: r for r in spark.read.parquet(str(cfg.stage_dir("labels") / "labels")).collect()}
    assert rows["Q42"]["label"] == "Douglas Adams" and rows["Q42"]["label_source"] == "wikipedia"
    assert rows["Q145"]["label"] == "United Kingdom (country in Europe)"
    assert rows["P569"]["label"] == "date of birth"
    assert set(counts["labels_by_source"]) == {"wikipedia", "label_description", "label"}
    assert counts["labels"] == sum(counts["labels_by_source"].values())
