"""Provenance: every stored fact traced to its source, from verbalize to the served answer.

The shared sample (verbalized once per session) is tokenized for SmolLM2, loaded and
activated; its provenance blocks are checked against the verbalize stage's dataset and the
parse stage's statements, read back through the runtime (one round trip for all facts) beside
the same sources in layout ``rows``, by ``refactx facts lookup``, and with the facts SmolLM2
writes in ``refactx ask --json`` and in the server's ``facts``; damaged blocks are errors.
"""

from __future__ import annotations

import json

import pytest

from refactx_pipeline.config import VocabularyConfig

from ..conftest import fresh_database

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

SOURCE_COLUMNS = ("fact_id", "kind", "subject", "property", "object", "value")


@pytest.fixture(scope="module")
def module_db(pg_server):
    with fresh_database(pg_server, "refactx_provenance") as dsn:
        yield dsn


@pytest.fixture(scope="module")
def built(spark, sample_verbalized, module_db):
    """The shared sample's SmolLM2 build, active in ``module_db``."""
    pytest.importorskip("torch")
    from refactx_index.qa.models import model_directory
    from refactx_pipeline.orchestration.pipeline import build

    cfg = sample_verbalized.updated({
        "tokenize.vocabularies": [VocabularyConfig(name="smollm2", path=str(model_directory("smollm2")))],
    })
    results = {r.stage: r.counts for r in build(
        cfg, ["tokenize", "prefix_rows", "load", "validate", "activate"], spark=spark, dsn=module_db)}
    return cfg, results["load"]["vocabularies"]["smollm2"]


def _rows(frame) -> set[tuple]:
    return {tuple(r[c] for c in SOURCE_COLUMNS) for r in frame.collect()}


def _sources_by_fact(spark, cfg) -> dict[int, set[tuple]]:
    """verbalize/provenance: fact id -> its sources ``(kind, subject, property, object, value)``."""
    expected: dict[int, set[tuple]] = {}
    for row in spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).collect():
        expected.setdefault(row["fact_id"], set()).add(tuple(row[c] for c in SOURCE_COLUMNS[1:]))
    return expected


def _texts(spark, cfg) -> dict[int, str]:
    return {r["fact_id"]: r["text"] for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).collect()}


def test_stored_provenance_is_the_verbalize_stages_and_names_real_statements(spark, built, module_db):
    import psycopg
    from pyspark.sql import functions as F

    from refactx_index.tree.provenance import block_keys, fact_id

    cfg, load = built
    verbalized = spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance"))
    counts = json.loads((cfg.stage_dir("verbalize") / "counts.json").read_text())
    bits = counts["provenance_blocks"]["bits"]
    with psycopg.connect(module_db) as conn:
        keys = [k for (k,) in conn.execute("SELECT block FROM refactx.provenance_blocks WHERE build_id = %s "
                                           "ORDER BY block", (load["build_id"],))]
        catalog = conn.execute("SELECT provenance_rows, provenance_layout, provenance_block_bits FROM refactx.builds "
                               "WHERE build_id = %s", (load["build_id"],)).fetchone()
    assert catalog == (load["provenance"]["rows"], "blocks", bits) and catalog[0] == verbalized.count()
    # a block for every key, those no fact falls in too
    assert keys == list(block_keys(bits)) and load["provenance"]["blocks"] == len(keys)
    assert counts["provenance_blocks"]["facts"] == counts["facts"]
    assert counts["provenance_blocks"]["sources"] == counts["provenance_rows"]
    # every fact has a source, and only facts have sources
    texts = _texts(spark, cfg)
    assert {r["fact_id"] for r in verbalized.select("fact_id").distinct().collect()} == set(texts)
    # the runtime computes verbalize's fact id from the text, for every fact of the build
    assert [fact_id(t) for t in texts.values()] == list(texts)
    # a statement's (or inverse's) ids are a statement the parse stage kept
    statements = spark.read.parquet(str(cfg.stage_dir("parse") / "statements")).select(
        "subject", "property", F.col("object_item").alias("object"),
        F.when(F.col("object_kind") != "item", F.col("object_value")).alias("value"))
    from_statements = verbalized.where(F.col("kind").isin("statement", "inverse"))
    unmatched = from_statements.join(
        statements, (from_statements.subject == statements.subject)
        & (from_statements.property == statements.property)
        & from_statements.object.eqNullSafe(statements.object)
        & from_statements.value.eqNullSafe(statements.value), "left_anti")
    assert from_statements.count() > 0 and unmatched.count() == 0
    # the kinds and the ids' shapes
    stored = [tuple(r[c] for c in SOURCE_COLUMNS) for r in verbalized.collect()]
    kinds = {row[1] for row in stored}
    assert {"statement", "description"} <= kinds <= {"statement", "inverse", "description", "short_description"}
    assert all(row[2].startswith("Q") for row in stored)
    assert all((row[4] is None) != (row[5] is None) for row in stored if row[1] == "statement")
    assert load["provenance"]["table_bytes"] > 0 and load["provenance"]["index_bytes"] > 0


def test_runtime_reads_every_facts_provenance_in_one_round_trip(spark, built, module_db):
    from refactx_index.tree.pg import open_index

    cfg, load = built
    facts, expected = _texts(spark, cfg), _sources_by_fact(spark, cfg)
    texts = list(facts.values()) + ["<Nowhere> <capital> <Nothing> ."]
    with open_index(module_db, cfg.index_name("smollm2")) as index:
        assert index.info.provenance_rows == load["provenance"]["rows"]
        before = index.stats.round_trips
        found = index.provenance(texts)
        assert index.stats.round_trips == before + 1
    assert found[-1].sources == ()  # not stored: no source
    for (fid, text), provenance in zip(facts.items(), found):
        assert provenance.fact_id == fid, text
        got = {(s.kind, s.subject, s.property, s.object, s.value) for s in provenance.sources}
        assert got == expected[fid], text


@pytest.mark.parametrize("layout_named", [False, True], ids=["catalog-without-layout", "rows"])
def test_a_rows_layout_build_gives_every_fact_the_sources_the_blocks_give(spark, built, module_db, layout_named):
    """The same provenance in layout ``rows`` (a text row per source, as builds loaded before the
    blocks store it) serves beside the blocks: every fact's sources the same, in one round trip."""
    from refactx_index.tree.pg import open_index

    from ..pgtree import load_tree, store_provenance_rows

    cfg, _ = built
    facts = _texts(spark, cfg)
    rows = [tuple(r[c] for c in SOURCE_COLUMNS)
            for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).collect()]
    name = f"rows-layout-{layout_named}"
    build_id = load_tree(module_db, name, [(1, 2, 3)])
    assert store_provenance_rows(module_db, build_id, rows, layout_named=layout_named) == len(rows)
    texts = list(facts.values()) + ["<Nowhere> <capital> <Nothing> ."]
    with open_index(module_db, cfg.index_name("smollm2")) as blocks, open_index(module_db, name) as old:
        before = old.stats.round_trips
        from_rows = old.provenance(texts)
        assert old.stats.round_trips == before + 1
        from_blocks = blocks.provenance(texts)
    assert from_rows == from_blocks and from_rows[-1].sources == ()
    assert sum(len(p.sources) for p in from_rows) == len(rows)


def _copy_of_the_blocks(conn, load: dict, name: str) -> int:
    """A build of ``name`` that serves a copy of the sample build's provenance blocks (its
    provenance table, made unattached with the build, filled and attached)."""
    from refactx_pipeline.catalog import pgcatalog

    from ..pgtree import load_tree

    dsn = conn.info.dsn
    build_id = load_tree(dsn, name, [(1, 2, 3)])
    table = pgcatalog.provenance_table_name(build_id)
    conn.execute(f"INSERT INTO refactx.{table} SELECT %s, block, data FROM refactx.provenance_blocks "
                 "WHERE build_id = %s", (build_id, load["build_id"]))
    conn.execute(f"ALTER TABLE refactx.provenance_blocks ATTACH PARTITION refactx.{table} FOR VALUES IN ({build_id})")
    conn.execute("UPDATE refactx.builds SET provenance_rows = %s, provenance_layout = 'blocks', "
                 "provenance_block_bits = %s WHERE build_id = %s",
                 (load["provenance"]["rows"], load["provenance"]["block_bits"], build_id))
    return build_id


def test_a_damaged_or_missing_block_is_an_error_never_a_wrong_source(spark, built, module_db):
    import psycopg

    from refactx_index.errors import FormatError
    from refactx_index.tree.pg import open_index
    from refactx_index.tree.provenance import block_of

    cfg, load = built
    bits = load["provenance"]["block_bits"]
    assert bits >= 1  # several blocks: one damaged, another missing, the rest intact
    facts, expected = _texts(spark, cfg), _sources_by_fact(spark, cfg)
    by_block: dict[int, list[int]] = {}
    for fid in facts:
        by_block.setdefault(block_of(fid, bits), []).append(fid)
    damaged, missing, intact = sorted(by_block)[:3]
    with psycopg.connect(module_db, autocommit=True) as conn:
        build_id = _copy_of_the_blocks(conn, load, "damaged")
        table = f"refactx.provenance_b{build_id}"
        # one bit flipped in the block's zstd frame; the other block deleted
        conn.execute(f"UPDATE {table} SET data = set_byte(data, length(data) - 5, get_byte(data, length(data) - 5) # 1) "
                     "WHERE block = %s", (damaged,))
        conn.execute(f"DELETE FROM {table} WHERE block = %s", (missing,))
    with open_index(module_db, "damaged") as index:
        fid = by_block[intact][0]
        (found,) = index.provenance([facts[fid]])
        assert {(s.kind, s.subject, s.property, s.object, s.value) for s in found.sources} == expected[fid]
        with pytest.raises(FormatError, match=rf"provenance block {damaged}: .*(checksum|zstd)"):
            index.provenance([facts[by_block[damaged][0]], facts[fid]])
        with pytest.raises(FormatError, match=rf"provenance block {missing} missing"):
            index.provenance([facts[by_block[missing][0]]])


def test_facts_lookup_prints_each_source_and_says_when_a_text_is_not_stored(spark, built, module_db, capsys):
    from refactx_index.cli import main

    cfg, _ = built
    row = spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).where("kind = 'statement'") \
        .orderBy("fact_id").first()
    text = spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).where(f"fact_id = {row['fact_id']}") \
        .first()["text"]
    where = ["--dsn", module_db, "--index", cfg.index_name("smollm2")]
    assert main(["facts", "lookup", *where, text]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{row['fact_id']}\tstatement\t{row['subject']}\t{row['property']}\t" \
           f"{row['object'] if row['object'] else json.dumps(row['value'], ensure_ascii=False)}" in lines
    assert main(["facts", "lookup", *where, "<Nowhere> <capital> <Nothing> ."]) == 3
    assert "is not a stored fact" in capsys.readouterr().err


def test_ask_json_gives_each_generated_fact_the_ids_of_the_fact_it_wrote(spark, built, module_db, capsys):
    from refactx_index.cli import main

    cfg, _ = built
    sources: dict[str, set[tuple]] = {}
    facts = {r["fact_id"]: r["text"] for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).collect()}
    for row in spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).collect():
        sources.setdefault(facts[row["fact_id"]], set()).add(
            (row["fact_id"], row["kind"], row["subject"], row["property"], row["object"], row["value"]))
    assert main(["ask", "--dsn", module_db, "--index", cfg.index_name("smollm2"), "--beams", "1",
                 "--max-new-tokens", "40", "--json", "What is the capital of Germany?"]) == 0
    answer = json.loads(capsys.readouterr().out)
    stored = [f for f in answer["facts"] if f["stored"]]
    assert stored, answer["reply"]
    for fact in stored:
        p = fact["provenance"]
        got = {(p["fact_id"], s["kind"], s["subject"], s["property"], s["object"], s["value"]) for s in p["sources"]}
        assert got == sources[fact["text"]], fact["text"]


def test_the_servers_facts_carry_the_provenance_of_each_stored_fact(spark, built, module_db):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from refactx_index.qa.models import load_model
    from refactx_index.tree.pg import open_index
    from refactx_index.server.app import ServerSettings, create_app
    from refactx_index.server.backend_transformers import TransformersEngine

    cfg, _ = built
    facts = {r["fact_id"]: r["text"] for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).collect()}
    sources: dict[str, set[tuple]] = {}
    for row in spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).collect():
        sources.setdefault(facts[row["fact_id"]], set()).add(tuple(row[c] for c in SOURCE_COLUMNS))
    index = open_index(module_db, cfg.index_name("smollm2"), follow=False)
    engine = TransformersEngine(load_model("smollm2"), {"prov": index}, max_batch=1)
    try:
        with TestClient(create_app(engine, ServerSettings(default_index="prov", max_new_tokens=40))) as client:
            reply = client.post("/v1/chat/completions", json={
                "model": "smollm2", "max_tokens": 40, "temperature": 0,
                "messages": [{"role": "user", "content": "What is the capital of Germany?"}]})
    finally:
        engine.close()
        index.close()
    assert reply.status_code == 200, reply.text
    stored = [f for f in reply.json()["facts"] if f["stored"]]
    assert stored, reply.json()
    for fact in stored:
        p = fact["provenance"]
        got = {(p["fact_id"], s["kind"], s["subject"], s["property"], s["object"], s["value"]) for s in p["sources"]}
        assert got == sources[fact["text"]], fact["text"]


def test_builds_shows_the_trees_and_the_provenances_bytes_and_their_total(built, module_db, capsys):
    """``refactx-pipeline builds``: a build's bytes are its two partitions' (found here through
    the rows they hold), table and index per part and in total, with bytes per fact; the
    partitioned parents themselves read 0."""
    import psycopg

    from refactx_pipeline.cli.commands import main

    cfg, load = built
    schema, build_id, facts = cfg.pg.schema, load["build_id"], load["facts"]
    common = ["--dsn", module_db, "--set", f"pg.schema={schema}"]
    assert main(["builds", *common, "--json"]) == 0
    (shown,) = [b for b in json.loads(capsys.readouterr().out)["builds"] if b["build_id"] == build_id]
    with psycopg.connect(module_db) as conn:
        on_disk = {}
        # the provenance partition hangs under `provenance` or `provenance_blocks` by its layout:
        # found by its name; the tree's through the rows it holds
        (tree_partition,) = conn.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {schema}.tree "
                                         "WHERE build_id = %s", (build_id,)).fetchone()
        for part, partition in (("tree", tree_partition), ("provenance", f"{schema}.provenance_b{build_id}")):
            on_disk[part] = conn.execute(
                "SELECT pg_table_size(r), pg_indexes_size(r), pg_total_relation_size(r) FROM (SELECT %s::regclass AS r) p",
                (partition,)).fetchone()
        for parent in ("tree", "provenance", "provenance_blocks"):
            assert conn.execute("SELECT pg_total_relation_size(%s::regclass)", (f"{schema}.{parent}",)).fetchone() == (0,)
    disk = shown["disk"]
    for part, (table, index, total) in on_disk.items():
        assert (disk[part]["table"], disk[part]["index"], disk[part]["bytes"]) == (table, index, total), part
        assert table > 0 and index > 0 and disk[part]["bytes_per_fact"] == round(total / facts, 1)
    both = sum(t for _, _, t in on_disk.values())
    assert disk["total"]["bytes"] == both and disk["total"]["bytes_per_fact"] == round(both / facts, 1)
    assert disk["total"]["table"] + disk["total"]["index"] == both

    assert main(["builds", *common]) == 0
    text = capsys.readouterr().out
    lines = text.split("bytes on disk per build")[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == [str(build_id), "tree"])
    assert [line.split()[0] for line in lines[start + 1:start + 3]] == ["provenance", "total"]
    assert lines[start + 2].split()[-1] == f"{both / facts:.1f}"


def test_a_build_without_provenance_serves_and_says_provenance_is_unavailable(pg_dsn, capsys):
    from refactx_index.cli import main
    from refactx_index.tree.pg import open_index

    from ..pgtree import load_tree

    load_tree(pg_dsn, "no-provenance", [(1, 2, 3), (1, 4)])  # loaded as builds were before provenance
    with open_index(pg_dsn, "no-provenance") as index:
        assert index.next_tokens([1]).tokens.tolist() == [2, 4]
        assert index.info.provenance_rows is None and index.provenance(["<a> <b> <c> ."]) is None
    assert main(["facts", "lookup", "--dsn", pg_dsn, "--index", "no-provenance", "<a> <b> <c> ."]) == 3
    assert "provenance unavailable" in capsys.readouterr().err


def test_retention_drops_a_builds_provenance_with_its_tree(pg_dsn):
    import psycopg

    from refactx_pipeline.catalog import pgcatalog

    from ..pgtree import load_tree

    build_id = load_tree(pg_dsn, "dropped", [(1, 2)], activate=False)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        table = pgcatalog.provenance_table_name(build_id)
        exists = "SELECT to_regclass(%s) IS NOT NULL"
        assert conn.execute(exists, (f"refactx.{table}",)).fetchone()[0]  # made with the tree's table
        assert pgcatalog.drop_build_table(conn, "refactx", build_id)
        assert not conn.execute(exists, (f"refactx.{table}",)).fetchone()[0]


@pytest.mark.parametrize("collision_check", [False, True], ids=["no-collision", "collision-path"])
def test_graph_build_provenance_gives_the_input_rows_ids(spark, tmp_path, monkeypatch, collision_check):
    """``collision-path``: verbalize is told an id collides, and takes the path that drops
    collision losers (none here) before it writes the provenance and its blocks."""
    import csv

    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.pipeline import build
    from refactx_pipeline.stages import verbalize
    from refactx_testing.finance_example import write_example

    cfg = Config.load(write_example(tmp_path, companies=40, people=30), env={}).updated({
        "spark.master": "local[2]", "spark.shuffle_partitions": 4})
    if collision_check:
        monkeypatch.setattr(verbalize, "has_id_collision", lambda facts: True)
    build(cfg, ["graph", "verbalize"], spark=spark)
    with open(tmp_path / "triples.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    entities = {r["id"] for r in csv.DictReader(open(tmp_path / "labels.csv", encoding="utf-8"))}
    triples = {(r["subject"], r["predicate"], r["object"]) for r in rows}
    provenance = spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance")).collect()
    statements = [r for r in provenance if r["kind"] in ("statement", "inverse")]
    assert statements and {r["kind"] for r in statements} == {"statement", "inverse"}
    for r in statements:  # the ids as the input rows wrote them (no "E:" prefix)
        assert (r["subject"], r["property"], r["object"] if r["object"] is not None else r["value"]) in triples, r
    described = [r for r in provenance if r["kind"] == "description"]
    assert described and all(r["subject"] in entities for r in described)
    # the blocks hold the graph's own ids (as strings) and give every fact its sources
    from refactx_index.tree.provenance import sources_from_blocks

    bits = json.loads((cfg.stage_dir("verbalize") / "counts.json").read_text())["provenance_blocks"]["bits"]
    blocks = {r["block"]: bytes(r["data"])
              for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "provenance_blocks")).collect()}
    texts = {r["fact_id"]: r["text"] for r in spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts")).collect()}
    got = sources_from_blocks(texts, bits, lambda keys: [(k, blocks[k]) for k in keys if k in blocks], "graph")
    assert sorted(got, key=repr) == sorted((tuple(r[c] for c in SOURCE_COLUMNS) for r in provenance), key=repr)


EDGE_SOURCES = [  # (text, kind, subject, property, object, value): every code of a block
    ("<a> <b> <c> .", "statement", "Q1", "P31", "Q5", None),
    ("<a> <b> <c> .", "inverse", "Q999999999999999999", "P1", "Q42", None),  # 18 digits: a number
    ("<a> <b> <c> .", "statement", "Q1234567890123456789", "P7", None, "c"),  # 19: a string
    ("<Paris> <description> <ville française: «Paris» 🗼> .", "description", "Q90", None, None,
     "ville française: «Paris» 🗼"),
    ("<x> <short description> <> .", "short_description", "Q3", None, None, ""),
    ("<x> <y> <1952-03-11> .", "statement", "Q007", "P569", None, "+1952-03-11T00:00:00Z"),  # "Q007": a string
    ("<acme> <owns> <beta> .", "statement", "acme", "owns", "beta", None),
    ("<acme> <owns> <beta> .", "statement", "Q42\n", "p31", "", None),  # a newline, a lower-case letter, empty
    ("<q> <r> <s> .", "statement", "L1", "P5", "Z26", "> ."),  # ends its text, but not after "> <"
    ("<k> <l> <a> <b> .", "statement", "Q9", "Q9", None, "a> <b"),  # in its text, holding "> <"
    ("<k> <l> <a> <b> .", "description", "P9", None, None, "b"),  # after the text's last "> <"
]


@pytest.mark.parametrize("bits", [0, 1, 3])
def test_spark_packs_every_kind_of_source_into_blocks_that_decode_to_it(spark, bits):
    """Wikidata ids and others, nulls, empty and non-ASCII values, values rebuilt from the
    text, facts with several sources and fact ids at both ends of the range, through the
    verbalize stage's Spark packing and the runtime's decoder."""
    from pyspark.sql import functions as F

    from refactx_index.tree.provenance import sources_from_blocks
    from refactx_pipeline.stages.verbalize import provenance_blocks

    sources = [(t, *rest) for t, *rest in EDGE_SOURCES]
    texts = sorted({s[0] for s in sources}) + [f"<filler {i}> <p> <o> ." for i in range(40)]
    sources += [(t, "statement", f"Q{i + 2}", "P1", f"Q{i}", None) for i, t in enumerate(texts[-40:])]
    facts = spark.createDataFrame([(t,) for t in texts], "text string").select(F.xxhash64("text").alias("fact_id"),
                                                                              "text")
    provenance = spark.createDataFrame(sources, "text string, kind string, subject string, property string, "
                                                "object string, value string").select(
        F.xxhash64("text").alias("fact_id"), *SOURCE_COLUMNS[1:])
    # the extreme ids as facts of their own (their texts do not hash to them: joined by id)
    ends = spark.createDataFrame([(-(2 ** 63), "<min> <p> <v> ."), (2 ** 63 - 1, "<max> <p> <v> .")],
                                 "fact_id long, text string")
    end_sources = spark.createDataFrame([(-(2 ** 63), "statement", "Q1", "P2", None, "v"),
                                         (2 ** 63 - 1, "description", "Q2", None, None, "v")],
                                        "fact_id long, kind string, subject string, property string, "
                                        "object string, value string")
    with_text = provenance.unionByName(end_sources).join(facts.unionByName(ends), "fact_id")
    blocks = provenance_blocks(with_text, bits).collect()
    stored = {r["block"]: bytes(r["data"]) for r in blocks}
    assert len(stored) == len(blocks) and sum(r["sources"] for r in blocks) == len(sources) + 2
    by_id = {r["fact_id"]: r["text"] for r in facts.unionByName(ends).collect()}
    got = sources_from_blocks(by_id, bits, lambda keys: [(k, stored[k]) for k in keys if k in stored], "test")
    expected = {(r["fact_id"], *(r[c] for c in SOURCE_COLUMNS[1:]))
                for r in provenance.unionByName(end_sources).collect()}
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_block_copy_encoder_stores_what_the_batch_holds(pg_dsn):
    """Negative and extreme keys, an empty and a large block, a sliced batch: stored as given."""
    import psycopg
    import pyarrow as pa

    from refactx_pipeline.stages.load import COPY_HEADER, COPY_TRAILER, encode_block_rows

    rows = [(-(2 ** 63), b""), (2 ** 63 - 1, bytes(range(256)) * 300), (0, b"\x00"), (-1, "é".encode())] * 3
    batch = pa.RecordBatch.from_pydict({"block": pa.array([r[0] for r in rows], pa.int64()),
                                        "data": pa.array([r[1] for r in rows], pa.binary())})
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE b (build_id bigint, block bigint, data bytea)")
        with conn.cursor().copy("COPY b FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(COPY_HEADER)
            cp.write(encode_block_rows(7, batch.column("block").slice(0, 5), batch.column("data").slice(0, 5)))
            cp.write(encode_block_rows(7, batch.column("block").slice(5), batch.column("data").slice(5)))
            cp.write(COPY_TRAILER)
        stored = conn.execute("SELECT build_id, block, data FROM b").fetchall()
    assert sorted(stored, key=repr) == sorted(((7, k, d) for k, d in rows), key=repr)


def test_runtime_fact_id_is_sparks_xxhash64(spark):
    """Every length class of XXH64 (under 4, 8, 32 bytes, several 32-byte stripes) and
    multi-byte UTF-8, against Spark itself."""
    from pyspark.sql import functions as F

    from refactx_index.tree.provenance import fact_id

    texts = ["", "a", "abc", "abcd", "abcdefg", "abcdefgh", "x" * 31, "y" * 32, "z" * 33, "w" * 200,
             "<Zürich> <名前> <😀> .", "<Danny Boyle> <date of birth> <1956-10-20> ."]
    rows = spark.createDataFrame([(t,) for t in texts], "text string").select(
        "text", F.xxhash64("text").alias("id")).collect()
    assert [(r["text"], fact_id(r["text"])) for r in rows] == [(r["text"], r["id"]) for r in rows]


def test_the_checked_in_sample_facts_are_what_the_stages_write(sample_verbalized):
    """tests/golden/sample_facts.txt, the facts the runtime's tests build their indexes from, is
    the verbalize stage's output on the shared sample (checked here, where the sample is verbalized
    anyway). Regenerate it with
    ``REFACTX_REGEN_GOLDEN=1 ./dev test tests/pipeline/test_provenance.py -k sample_facts`` and review the diff."""
    import os

    from ..conftest import SAMPLE_FACTS, verbalized_fact_texts

    written = "".join(f"{text}\n" for text in sorted(verbalized_fact_texts(sample_verbalized)))
    if os.environ.get("REFACTX_REGEN_GOLDEN"):
        SAMPLE_FACTS.write_text(written, encoding="utf-8")
    assert written == SAMPLE_FACTS.read_text(encoding="utf-8"), f"the verbalize stage no longer writes {SAMPLE_FACTS.name}"
