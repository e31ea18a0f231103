"""Stage 3 (labels): sources, drops, collisions and their policies."""

from __future__ import annotations

import pytest

from refactx_pipeline.stages import labels, parse
from refactx_pipeline.stages.contract import StageContext
from tests.conftest import shared_path

E = "http://www.wikidata.org/entity/"
D = "http://www.wikidata.org/prop/direct/"
L = "<http://www.w3.org/2000/01/rdf-schema#label>"
DESC = "<http://schema.org/description>"

DUMP = [
    f"<{E}Q1> <{D}P31> <{E}Q2> .",
    f"<{E}Q1> <{D}P17> <{E}Q4> .",
    f'<{E}Q1> {L} "Paris"@en .',
    f'<{E}Q1> {DESC} "capital of France"@en .',
    f'<{E}Q2> {L} "city"@en .',  # label, no description, no title: dropped
    f"<{E}Q3> <{D}P31> <{E}Q2> .",
    f'<{E}Q3> {L} "Paris"@en .',
    f'<{E}Q3> {DESC} "capital of France"@en .',  # the same label (description) as Q1
    f'<{E}Q4> {L} "France"@en .',  # dropped, but its label names Q1's country
    f"<{E}Q6> <{D}P31> <{E}Q7> .",
    f'<{E}Q6> {L} "Paris"@en .',
    f'<{E}Q6> {DESC} "capital of France"@en .',  # a third one, a village
    f'<{E}Q7> {L} "village"@en .',  # dropped
    f'<{E}P31> {L} "instance of"@en .',
    f'<{E}P17> {L} "country"@en .',
    f'<{E}P17> {DESC} "sovereign state of this item"@en .',
    f'<{E}P495> {L} "country"@en .',  # two properties labelled "country"
    f'<{E}P495> {DESC} "country of origin"@en .',
]
PARIS = "Paris (capital of France)"


@pytest.fixture(scope="module")
def parsed_dump(spark, tmp_path_factory):
    """The dump above, parsed once: a Config whose parse outputs are there (each policy then
    runs the labels stage alone, on a copy of them)."""
    from refactx_pipeline.config import Config

    root = tmp_path_factory.mktemp("collisions")
    dump = root / "d.nt"
    dump.write_text("\n".join(DUMP) + "\n")
    cfg = Config().updated({"paths.build_root": str(root / "build"), "spark.master": "local[2]",
                            "spark.shuffle_partitions": 4, "input.dumps": [str(dump)]})
    parse.run(StageContext(cfg, spark=spark))
    return cfg


def _run(spark, parsed, tmp_path, policy):
    import shutil

    cfg = parsed.updated({"paths.build_root": str(tmp_path / "build"), "labels.collision_policy": policy})
    shutil.copytree(parsed.stage_dir("parse"), cfg.stage_dir("parse"))
    counts = labels.run(StageContext(cfg, spark=spark))
    rows = spark.read.parquet(str(cfg.stage_dir("labels") / "labels")).collect()
    return cfg, counts, {r["entity"]: (r["label"], r["label_source"]) for r in rows}


@pytest.mark.parametrize(
    "policy,expected,outcome",
    [
        # the default tells the three apart (Q1 and Q3 are both cities: Q1
        # by its country, Q3 by its id; Q6 is a village), the two properties by description
        ("disambiguate",
         {"Q1": f"{PARIS} (country: France)", "Q3": f"{PARIS} (Q3)", "Q6": f"{PARIS} (instance of: village)",
          "P17": "country (sovereign state of this item)", "P495": "country (country of origin)"},
         {"description": 2, "entity_id": 1, "property": 2}),
        ("keep", {"Q1": PARIS, "Q3": PARIS, "Q6": PARIS, "P17": "country", "P495": "country"},
         {"kept_shared": 5}),
        ("drop", {}, {"dropped": 5}),
        ("qualify", {"Q1": f"{PARIS} (Q1)", "Q3": f"{PARIS} (Q3)", "Q6": f"{PARIS} (Q6)",
                     "P17": "country (P17)", "P495": "country (P495)"}, {"entity_id": 5}),
    ],
)
def test_collision_policies(spark, parsed_dump, tmp_path, policy, expected, outcome):
    cfg, counts, got = _run(spark, parsed_dump, tmp_path, policy)
    assert {k: v[0] for k, v in got.items() if k != "P31"} == expected
    assert got["P31"] == ("instance of", "label")
    assert counts["colliding_labels"] == 2 and counts["colliding_entities"] == 5
    assert counts["collision_outcome"] == outcome
    assert counts["labels_still_shared"] == (2 if policy == "keep" else 0)
    assert counts["dropped_without_label"] == 3  # Q2, Q4, Q7
    collisions = spark.read.parquet(str(cfg.stage_dir("labels") / "collisions")).collect()
    assert sorted((c["label"], list(c["entities"])) for c in collisions) == [
        (PARIS, ["Q1", "Q3", "Q6"]), ("country", ["P17", "P495"])]


def test_the_default_policy_is_disambiguate(cfg):
    assert cfg.labels.collision_policy == "disambiguate"


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
    parse.run(StageContext(cfg, spark=spark))
    sitelinks.run(StageContext(cfg, spark=spark))
    counts = labels.run(StageContext(cfg, spark=spark))
    rows = {r["entity"]: r for r in spark.read.parquet(str(cfg.stage_dir("labels") / "labels")).collect()}
    assert rows["Q42"]["label"] == "Douglas Adams" and rows["Q42"]["label_source"] == "wikipedia"
    assert rows["Q145"]["label"] == "United Kingdom (country in Europe)"
    assert rows["P569"]["label"] == "date of birth"
    assert set(counts["labels_by_source"]) == {"wikipedia", "label_description", "label"}
    assert counts["labels"] == sum(counts["labels_by_source"].values())
