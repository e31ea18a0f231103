"""Building from fact texts someone already has (``input.facts``, the facts stage): text and
Parquet inputs, rejects with their reasons, duplicates counted, and the index served holding
exactly the distinct cleaned texts."""

from __future__ import annotations

import bz2

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ..conftest import tokenizer_dir

pytestmark = [pytest.mark.spark]

TEXTS = [
    " <Danny Boyle> <date of birth> <1956-10-20> .",
    "<Danny Boyle>   <occupation>\t<film director> .",  # whitespace runs: one space
    "",  # a blank line: rejected as empty
    "   ",  # blank after trimming: empty
    "<Danny Boyle> <date of birth> <1956-10-20> .",  # the first text again once cleaned
    "<Radcliffe> <country> <United Kingdom> .",
    "x" * 10_001,  # too long to be a fact
]
EXPECTED = {
    "<Danny Boyle> <date of birth> <1956-10-20> .",
    "<Danny Boyle> <occupation> <film director> .",
    "<Radcliffe> <country> <United Kingdom> .",
}


def write_inputs(tmp_path):
    text = tmp_path / "facts.txt.bz2"
    text.write_bytes(bz2.compress("\n".join(TEXTS[:4]).encode() + b"\n"))
    table = pa.table({"id": list(range(3)), "sentence": TEXTS[4:]})
    parquet = tmp_path / "more.parquet"
    pq.write_table(table, parquet)
    return text, parquet


def test_the_facts_stage_cleans_rejects_and_dedupes_text_and_parquet_inputs(spark, cfg, tmp_path):
    import pyarrow.dataset as ds

    from refactx_index.tree.provenance import fact_id
    from refactx_pipeline.stages import facts
    from refactx_pipeline.stages.contract import StageContext

    text, parquet = write_inputs(tmp_path)
    cfg = cfg.updated({"input.facts": [str(text), str(parquet)], "input.facts_column": "sentence"})
    counts = facts.run(StageContext(cfg, spark=spark))
    assert counts["texts_in"] == len(TEXTS)
    assert counts["rejected"] == {"empty": 2, "too_long": 1}
    assert counts["duplicates"] == 1 and counts["distinct_texts"] == 3 and counts["facts"] == 3
    # every text read is a fact, a duplicate or a reject
    assert counts["texts_in"] == counts["facts"] + counts["duplicates"] + sum(counts["rejected"].values())

    written = ds.dataset(str(cfg.stage_dir("facts") / "facts"), format="parquet").to_table().to_pylist()
    assert {row["text"] for row in written} == EXPECTED
    assert all(row["kind"] == "text" and row["property"] is None for row in written)
    assert all(row["fact_id"] == fact_id(row["text"]) for row in written)  # verbalize's id
    rejects = ds.dataset(str(cfg.stage_dir("facts") / "rejects"), format="parquet").to_table().to_pylist()
    assert sorted(r["reason"] for r in rejects) == ["empty", "empty", "too_long"]
    assert all(r["source"] for r in rejects)


def test_a_parquet_input_without_the_column_is_a_clear_error(spark, cfg, tmp_path):
    from refactx_pipeline.errors import ConfigError
    from refactx_pipeline.stages import facts
    from refactx_pipeline.stages.contract import StageContext

    _, parquet = write_inputs(tmp_path)
    with pytest.raises(ConfigError, match=r"no string column 'text'.*sentence \(string\)"):
        facts.run(StageContext(cfg.updated({"input.facts": [str(parquet)]}), spark=spark))
    with pytest.raises(ConfigError, match="no such file"):
        facts.run(StageContext(cfg.updated({"input.facts": [str(tmp_path / "nope.txt")]}), spark=spark))


def test_fact_texts_and_a_graph_are_refused_together():
    from refactx_pipeline.config import Config
    from refactx_pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="input.facts and graph.format"):
        Config().updated({"input.facts": "a.txt", "graph.format": "csv", "graph.triples": "t",
                          "graph.labels": "l", "graph.predicate_labels": "p"})
    with pytest.raises(ConfigError, match="path_index.enabled needs statements"):
        Config().updated({"input.facts": "a.txt", "path_index.enabled": True})


def test_select_stages_reads_fact_texts_instead_of_a_dump():
    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.table import select_stages

    cfg = Config().updated({"input.facts": "a.txt"})
    assert select_stages(cfg) == ["facts", "tokenize", "prefix_rows", "load", "validate", "activate"]
    assert "facts" not in select_stages(Config())


@pytest.mark.pg
def test_an_index_built_from_fact_texts_serves_exactly_them(spark, cfg, tmp_path, pg_dsn):
    from refactx_index.tree.pg import open_index
    from refactx_index.vocab import decode_continuation, open_tokenizer

    from refactx_pipeline.orchestration.pipeline import build

    from ..integration.test_end_to_end import _enumerate

    text, parquet = write_inputs(tmp_path)
    vocab = tokenizer_dir("qwen2.5")
    cfg = cfg.updated({"input.facts": [str(text), str(parquet)], "input.facts_column": "sentence",
                       "paths.source": "team", "tokenize.vocabularies": f"qwen={vocab}"})
    results = build(cfg, spark=spark, dsn=pg_dsn)
    assert [r.stage for r in results] == ["facts", "tokenize", "prefix_rows", "load", "validate", "activate"]
    tokenizer = open_tokenizer(str(vocab / "tokenizer.json"))
    with open_index(pg_dsn, "team-qwen") as index:
        served = {decode_continuation(tokenizer, seq).strip() for seq in _enumerate(index)}
        assert index.info.provenance_rows is None  # fact texts name no entities
    assert served == EXPECTED
