"""Property: random facts -> Spark prefix rows -> binary COPY into PostgreSQL -> the rows,
walked from the root, give every prefix the children, leaf counts and ends of a plain
in-memory trie (tests/pipeline/test_prefix_rows.py: ReferenceTrie, check_rows_against_trie)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_prefix_rows import check_rows_against_trie, decoded_content  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

BIG = st.integers(min_value=65_536, max_value=2**31 - 1)  # ids above 65,535
SMALL = st.integers(min_value=0, max_value=6)  # few distinct tokens: shared prefixes
TOKEN = st.one_of(SMALL, SMALL, BIG)


@st.composite
def fact_sets(draw) -> list[list[int]]:
    stems = draw(st.lists(st.lists(TOKEN, min_size=1, max_size=6), min_size=1, max_size=4))
    facts: list[list[int]] = []
    for _ in range(draw(st.integers(1, 40))):
        stem = draw(st.sampled_from(stems))
        tail = draw(st.lists(TOKEN, max_size=8))
        facts.append(stem + tail)
    if draw(st.booleans()):  # a long fact (up to 200 tokens)
        facts.append(draw(st.sampled_from(stems)) + draw(st.lists(TOKEN, min_size=150, max_size=194)))
    if draw(st.booleans()):  # skew: many facts below one stem (split across partitions)
        stem = draw(st.sampled_from(stems))
        facts += [stem + [i % 7, i // 7] for i in range(draw(st.integers(20, 120)))]
    extra = []
    for f in facts:
        kind = draw(st.sampled_from(["none", "none", "duplicate", "prefix"]))
        if kind == "duplicate":
            extra.append(list(f))
        elif kind == "prefix" and len(f) > 1:
            extra.append(f[: draw(st.integers(1, len(f) - 1))])
    return facts + extra


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(facts=fact_sets(), threshold=st.integers(1, 5), max_tokens=st.integers(1, 60),
       per_partition=st.integers(1, 50),
       pack=st.one_of(st.just((0, 0)), st.tuples(st.integers(2, 300), st.integers(1, 10))))
def test_pg_tree_equals_reference_trie(spark, pg_dsn, facts, threshold, max_tokens, per_partition, pack):
    from refactx_pipeline.stages import load, prefix_rows, validate
    from refactx_pipeline.catalog import pgcatalog
    from refactx_pipeline.stages.schemas import TOKENS
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_index.tree import format as fmt
    from refactx_index.tree.memory import build_rows as reference_rows, compress_rows
    from refactx_pipeline.stages.contract import StageContext

    cfg = Config().updated({
        "paths.build_root": tempfile.mkdtemp(prefix="refactx_prop_"),
        "tokenize.vocabularies": [VocabularyConfig(name="prop", path="")],
        "tree.subtree_threshold": threshold,
        "tree.max_subtree_tokens": max_tokens,
        "tree.facts_per_partition": per_partition,
        "tree.pack_facts": pack[0],
        "tree.pack_child_facts": pack[1],
    })
    vocab_dir = cfg.stage_dir("tokenize") / "prop"
    spark.createDataFrame([(i, f) for i, f in enumerate(facts)], TOKENS).write.parquet(
        str(vocab_dir / "tokens")
    )
    (vocab_dir / "meta.json").write_text(json.dumps({"name": "prop", "sha256": "0" * 64, "vocab_size": 2**31 - 1}))
    prefix_rows.run(StageContext(cfg, spark=spark))
    info = load.load_all(cfg, pg_dsn)["vocabularies"]["prop"]

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        stored = conn.execute(
            f"SELECT prefix, node FROM {cfg.pg.schema}.{info['table_name']}"
        ).fetchall()
        rows = {bytes(p): bytes(n) for p, n in stored}
        assert len(rows) == len(stored) == info["rows"]
        dictionary = pgcatalog.build_dictionary(conn, cfg.pg.schema, info["build_id"])
        check_rows_against_trie(rows, facts, threshold, max_tokens, dictionary, *pack)
        # the previous row format's decoded content, prefix for prefix (the same children, leaf
        # counts and ends), and the reference's rows compressed the same way, byte for byte
        previous = reference_rows(facts, threshold=threshold, max_subtree_tokens=max_tokens)
        if pack == (0, 0):
            assert set(previous) == set(rows)
            for key, node in previous.items():
                new, old = fmt.decode_fragment(rows[key], fmt.FORMAT_VERSION, dictionary), fmt.decode_fragment(node)
                for field in ("tokens", "child_count", "ends", "external", "leaves"):
                    assert getattr(new, field).tolist() == getattr(old, field).tolist()
        # packed rows or not, every prefix reads as in the plain layout
        assert decoded_content(rows, dictionary) == decoded_content(previous)
        packed = reference_rows(facts, threshold=threshold, max_subtree_tokens=max_tokens,
                                pack_facts=pack[0], pack_child_facts=pack[1])
        assert (rows, dictionary) == compress_rows(packed)
        # the validator agrees (every fact walked, counts consistent)
        distinct = {tuple(f) for f in facts}
        result = validate.validate_build(
            conn, cfg.pg.schema, info["build_id"], expected_rows=len(rows),
            expected_facts=len(distinct), sample=[list(f) for f in distinct],
        )
        assert result["walked"] == len(distinct)
        # never activated: free the name for the next example (one build per name at a time)
        pgcatalog.release_name(conn, cfg.pg.schema, info["build_id"])
