"""The whole path on the real extract: N-Triples -> ... -> PostgreSQL -> refactx_index.

One build with two different vocabularies (Qwen2.5 and Mistral, which adds BOS by
default); every check runs for both.
"""

from __future__ import annotations

import numpy as np
import pytest

from refactx_pipeline.config import Config, VocabularyConfig
from refactx_index.tree.format import decode_fragment, encode_prefix
from refactx_pipeline.catalog import pgcatalog

from ..conftest import fresh_database, sample_config, tokenizer_dir

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

VOCABS = ["qwen2.5", "mistral-7b-v0.1"]


@pytest.fixture(scope="module")
def module_db(pg_server):
    with fresh_database(pg_server, "refactx_e2e") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def built(spark, module_db, tmp_path_factory):
    from refactx_pipeline.orchestration.pipeline import build

    cfg = sample_config(tmp_path_factory.mktemp("e2e") / "build", {
        "tokenize.vocabularies": [VocabularyConfig(name=v, path=str(tokenizer_dir(v))) for v in VOCABS],
        "tree.subtree_threshold": 16,
    })
    results = {r.stage: r.counts for r in build(cfg, spark=spark, dsn=module_db)}
    return cfg, results


def _tokens_by_fact(spark, cfg: Config, vocab: str) -> dict[int, tuple[int, ...]]:
    rows = spark.read.parquet(str(cfg.stage_dir("tokenize") / vocab / "tokens")).collect()
    return {r.fact_id: tuple(r.token_ids) for r in rows}


def _facts_text(spark, cfg: Config) -> dict[int, str]:
    rows = spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).select("fact_id", "text").collect()
    return {r.fact_id: r.text for r in rows}


def _open(cfg: Config, dsn: str, vocab: str):
    from refactx_index.tree.pg import open_index

    return open_index(dsn, cfg.index_name(vocab), schema=cfg.pg.schema)


def _enumerate(index) -> set[tuple[int, ...]]:
    """Every stored sequence, walking the served tree from its root through next_tokens."""
    found: set[tuple[int, ...]] = set()
    stack: list[tuple[int, ...]] = [()]
    while stack:
        prefix = stack.pop()
        step = index.next_tokens(list(prefix))
        if step.ends:
            found.add(prefix)
        assert int(step.leaves.sum()) + int(step.ends) >= 1
        stack.extend(prefix + (int(t),) for t in step.tokens)
    return found


def test_every_stage_reported_counts(built):
    cfg, results = built
    for stage in ("parse", "labels", "verbalize", "tokenize", "prefix_rows", "load", "validate", "activate"):
        assert stage in results, f"stage {stage} did not run"
        assert (cfg.stage_dir(stage) / "counts.json").exists()


@pytest.mark.parametrize("vocab", VOCABS)
def test_tree_holds_exactly_the_tokenized_facts(spark, built, module_db, vocab):
    from refactx_index.vocab import decode_continuation, forbidden_token_ids, load_tokenizer, resolve_tokenizer_file

    cfg, _ = built
    by_fact = _tokens_by_fact(spark, cfg, vocab)
    texts = _facts_text(spark, cfg)
    expected = set(by_fact.values())
    assert len(expected) > 1000, "the real extract should give thousands of facts"
    with _open(cfg, module_db, vocab) as index:
        stored = _enumerate(index)
    assert stored == expected

    file = resolve_tokenizer_file(str(tokenizer_dir(vocab)))
    tok = load_tokenizer(file)
    forbidden = set(forbidden_token_ids(tok, file))
    assert forbidden, "every real vocabulary has special tokens"
    pre, post = cfg.tokenize.fact_prefix, cfg.tokenize.fact_suffix
    for fact_id, ids in by_fact.items():
        assert not forbidden & set(ids), f"special token in {texts[fact_id]!r}"
        # every stored sequence decodes back to exactly its fact text
        assert decode_continuation(tok, ids) == pre + texts[fact_id] + post


@pytest.mark.parametrize("vocab", VOCABS)
def test_rows_are_unique_and_leaf_counts_add_up(built, module_db, vocab):
    import psycopg

    cfg, _ = built
    schema = cfg.pg.schema
    name = cfg.index_name(vocab)
    with psycopg.connect(module_db) as conn:
        build_id, table, facts = conn.execute(
            f"SELECT build_id, b.table_name, b.facts FROM {schema}.active a JOIN {schema}.builds b "
            "USING (build_id) WHERE a.name = %s",
            (name,),
        ).fetchone()
        rows = conn.execute(f"SELECT prefix, node FROM {schema}.{table}").fetchall()
        dictionary = pgcatalog.build_dictionary(conn, schema, build_id)
    prefixes = [bytes(p) for p, _ in rows]
    assert len(prefixes) == len(set(prefixes)), "a prefix key appears twice"
    row_leaves: dict[bytes, int] = {}
    external_leaves: dict[bytes, int] = {}
    for prefix, node in rows:
        frag = decode_fragment(node, dictionary=dictionary)
        row_leaves[bytes(prefix)] = int(frag.leaves[0])
        parent = np.concatenate(([-1], np.repeat(np.arange(frag.n_nodes), frag.child_count)))
        for i in range(frag.n_nodes):
            if frag.external[i]:
                # its children live in the row keyed by its full prefix: checked below
                path, j = [], i
                while j > 0:
                    path.append(int(frag.tokens[j]))
                    j = int(parent[j])
                external_leaves[bytes(prefix) + encode_prefix(path[::-1])] = int(frag.leaves[i])
                continue
            _, child_leaves = frag.children(i)
            assert int(child_leaves.sum()) + int(frag.ends[i]) == int(frag.leaves[i])
    assert row_leaves[b""] == facts
    # every external node has its row, with the same leaf count; every other row is the root
    assert external_leaves == {k: v for k, v in row_leaves.items() if k != b""}


def test_llama_style_bos_never_stored(spark, built):
    cfg, _ = built
    by_fact = _tokens_by_fact(spark, cfg, "mistral-7b-v0.1")
    firsts = np.array([ids[0] for ids in by_fact.values()])
    assert not np.any(firsts == 1), "Mistral's BOS (id 1) leaked into stored sequences"
