"""Load, validate, activate, retain: real Spark output, real PostgreSQL (a fresh database per test)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from refactx_index.tree import format as fmt
from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.common import DICTIONARY_FILE
from refactx_pipeline.config import VocabularyConfig
from refactx_index.errors import FormatError
from refactx_pipeline.errors import LoadError, ValidationFailed

pytestmark = [pytest.mark.spark, pytest.mark.pg]

POLL_PAUSE_S = 0.05  # between two looks at the server's state: the look decides, not the pause

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("REFACTX_SHARED", ROOT.parent / "shared"))

VOCAB = "toy"
FACTS = [
    [1, 2, 3],
    [1, 2],
    [1, 2, 4, 5, 6, 7, 8, 9],
    [1, 7],
    [1, 8, 9],
    [70000, 1, 2],
    [70000, 1, 3],
    [5],
    [5, 5, 5, 5, 5, 5, 5, 5, 5],
    [6, 1],
]


def make_cfg(cfg, overrides=None, *, threshold=1):
    """``cfg`` with the toy vocabulary and tree shape, plus dotted ``overrides``."""
    return cfg.updated({
        "pg.validate_sample": 50,
        "tokenize.vocabularies": [VocabularyConfig(name=VOCAB, path="")],
        "tree.subtree_threshold": threshold,
        **(overrides or {}),
    })


def write_tokens(spark, cfg, facts):
    from refactx_pipeline.stages.schemas import TOKENS

    vocab_dir = cfg.stage_dir("tokenize") / VOCAB
    spark.createDataFrame([(i, f) for i, f in enumerate(facts)], TOKENS).write.mode(
        "overwrite"
    ).parquet(str(vocab_dir / "tokens"))
    meta = {"name": VOCAB, "path": "", "sha256": "0" * 64, "vocab_size": 100000,
            "fact_prefix": " ", "fact_suffix": ""}
    (vocab_dir / "meta.json").write_text(json.dumps(meta))


def build(spark, cfg, dsn, facts=FACTS, *, activate=True) -> int:
    """tokens -> prefix rows -> load -> validate -> activate into ``dsn``; returns the build id."""
    from refactx_pipeline.stages import activate as activate_job
    from refactx_pipeline.stages import load, prefix_rows, validate
    from refactx_pipeline.stages.contract import StageContext

    write_tokens(spark, cfg, facts)
    prefix_rows.run(StageContext(cfg, spark=spark))
    build_ids = load.run(StageContext(cfg, dsn=dsn))["build_ids"]
    if activate:
        validate.run(StageContext(cfg, spark=spark, dsn=dsn, build_ids=build_ids))
        activate_job.run(StageContext(cfg, dsn=dsn, build_ids=build_ids))
    return build_ids[VOCAB]


def read_active(dsn, schema, name):
    """The reader's contract: the active build, then rows by prefix from its table."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT a.build_id, b.table_name FROM {schema}.active a "
            f"JOIN {schema}.builds b USING (build_id) WHERE a.name = %s",
            (name,),
        ).fetchone()
        if row is None:
            return None, None
        build_id, table = row
        nodes = conn.execute(
            f"SELECT prefix, node FROM {schema}.{table} WHERE prefix = ANY(%s)", ([b""],)
        ).fetchall()
        dictionary = pgcatalog.build_dictionary(conn, schema, build_id)
    return build_id, fmt.decode_fragment(nodes[0][1], dictionary=dictionary)


def builds(dsn, schema):
    with psycopg.connect(dsn) as conn:
        conn.row_factory = psycopg.rows.dict_row
        return {r["build_id"]: r for r in conn.execute(f"SELECT * FROM {schema}.builds ORDER BY build_id")}


def tables(dsn, schema):
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE nspname = %s AND relname LIKE 'tree_b%%' AND relkind = 'r'", (schema,))}


def test_copy_encoder_matches_write_row(pg_dsn):
    """The numpy-built PGCOPY stream stores exactly what write_row stores."""
    from refactx_pipeline.stages.load import COPY_HEADER, COPY_TRAILER, encode_copy_rows

    rng = np.random.default_rng(1)
    prefixes = [b""] + [rng.bytes(4 * int(rng.integers(1, 5))) for _ in range(300)]
    nodes = [rng.bytes(int(rng.integers(1, 400))) for _ in prefixes]
    arr_p, arr_n = pa.array(prefixes, pa.binary()), pa.array(nodes, pa.binary())
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE a (build_id bigint, prefix bytea, node bytea)")
        conn.execute("CREATE TABLE b (LIKE a)")
        with conn.cursor().copy("COPY a FROM STDIN (FORMAT BINARY)") as cp:
            cp.write(COPY_HEADER)
            # a sliced batch too: Arrow offsets that do not start at 0
            cp.write(encode_copy_rows(7, arr_p.slice(0, 100), arr_n.slice(0, 100)))
            cp.write(encode_copy_rows(7, arr_p.slice(100), arr_n.slice(100)))
            cp.write(COPY_TRAILER)
        with conn.cursor().copy("COPY b FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(["int8", "bytea", "bytea"])
            for p, n in zip(prefixes, nodes):
                cp.write_row((7, p, n))
        a = conn.execute("SELECT * FROM a ORDER BY prefix, node").fetchall()
        b = conn.execute("SELECT * FROM b ORDER BY prefix, node").fetchall()
    assert a == b and len(a) == len(prefixes)


def test_load_validate_activate_and_switch(spark, cfg, pg_dsn):
    cfg = make_cfg(cfg)
    schema, name = cfg.pg.schema, f"{cfg.paths.source}-{VOCAB}"
    first = build(spark, cfg, pg_dsn)
    active, root = read_active(pg_dsn, schema, name)
    assert active == first
    assert root.leaves[0] == len(FACTS)
    b = builds(pg_dsn, schema)[first]
    assert b["status"] == "active" and b["table_name"] == f"tree_b{first}"
    assert b["facts"] == len(FACTS) and b["rows"] > 1 and b["table_bytes"] > 0 and b["index_bytes"] > 0
    # depth: the deepest row's prefix length (lookups speculate no deeper)
    from refactx_index.tree.memory import build_rows, deepest_row

    assert b["depth"] == deepest_row(build_rows(FACTS, threshold=1)) and b["subtree_threshold"] == 1 and b["format_version"] == fmt.FORMAT_VERSION
    load_counts = json.loads((cfg.stage_dir("load") / "counts.json").read_text())
    assert load_counts["vocabularies"][VOCAB]["build_id"] == first and load_counts["build_ids"] == {VOCAB: first}

    more = FACTS + [[9, 9, 9]]
    second = build(spark, cfg, pg_dsn, more)
    active, root = read_active(pg_dsn, schema, name)
    assert active == second and root.leaves[0] == len(more)
    assert builds(pg_dsn, schema)[first]["status"] == "retired"
    with psycopg.connect(pg_dsn) as conn:  # attached, with the CHECK that made ATTACH cheap
        parts = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'tree' ORDER BY 1"
        ).fetchall()
        assert [p[0] for p in parts] == sorted([f"tree_b{first}", f"tree_b{second}"])
        assert conn.execute(f"SELECT count(DISTINCT build_id) FROM {schema}.tree").fetchone()[0] == 2


def test_validation_failure_keeps_previous_build(spark, cfg, pg_dsn):
    from refactx_pipeline.stages import activate as activate_job
    from refactx_pipeline.stages import validate
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    schema, name = cfg.pg.schema, f"{cfg.paths.source}-{VOCAB}"
    first = build(spark, cfg, pg_dsn)
    second = build(spark, cfg, pg_dsn, activate=False)
    # corrupt one child row: drop a fact from its subtree so its leaves disagree with the parent
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(
            f"UPDATE {schema}.tree_b{second} SET node = %s WHERE prefix = %s",
            (fmt.encode_subtree([[2]]), fmt.encode_prefix([1])),
        )
    with pytest.raises(ValidationFailed, match="leaves"):
        validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: second}))
    b = builds(pg_dsn, schema)[second]
    assert b["status"] == "failed" and "sum(child_leaves)" in b["message"]
    with pytest.raises(LoadError, match="validated"):
        activate_job.run(StageContext(cfg, dsn=pg_dsn, build_ids={VOCAB: second}))
    active, root = read_active(pg_dsn, schema, name)
    assert active == first and root.leaves[0] == len(FACTS)


def test_validation_walk_catches_a_missing_fact(spark, cfg, pg_dsn):
    """Leaf counts can be consistent while a fact is unreachable: the sampled walk finds it."""
    from refactx_pipeline.stages import validate
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    build_id = build(spark, cfg, pg_dsn, activate=False)
    with psycopg.connect(pg_dsn) as conn:
        # same shape and counts, other tokens: [6, 1] becomes [6, 2]
        conn.execute(
            f"UPDATE {cfg.pg.schema}.tree_b{build_id} SET node = %s WHERE prefix = %s",
            (fmt.encode_subtree([[2]]), fmt.encode_prefix([6])),
        )
    with pytest.raises(ValidationFailed, match="not in the tree"):
        validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: build_id}))


def test_retention_drops_oldest_builds(spark, cfg, pg_dsn):
    cfg = make_cfg(cfg, {"pg.retention": 2, "pg.retention_grace_s": 0})
    schema = cfg.pg.schema
    ids = [build(spark, cfg, pg_dsn, FACTS + [[100 + i]]) for i in range(4)]
    b = builds(pg_dsn, schema)
    assert [b[i]["dropped_at"] is not None for i in ids] == [True, True, False, False]
    assert tables(pg_dsn, schema) == {f"tree_b{ids[2]}", f"tree_b{ids[3]}"}
    assert b[ids[3]]["status"] == "active" and b[ids[2]]["status"] == "retired"


def _synthetic_rows(path: Path, n_rows: int, n_files: int) -> None:
    """Many unique rows (keys 1..n) so that a COPY lasts long enough to be interrupted."""
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for f, chunk in enumerate(np.array_split(np.arange(1, n_rows + 1), n_files)):
        keys = chunk.astype(">u4").tobytes()
        offsets = np.arange(chunk.size + 1, dtype=np.int32) * 4
        prefix = pa.Array.from_buffers(pa.binary(), chunk.size, [None, pa.py_buffer(offsets), pa.py_buffer(keys)])
        node_len = 48
        nodes = pa.Array.from_buffers(
            pa.binary(), chunk.size,
            [None, pa.py_buffer(np.arange(chunk.size + 1, dtype=np.int32) * node_len),
             pa.py_buffer(rng.bytes(chunk.size * node_len))],
        )
        depth = pa.array(np.ones(chunk.size, dtype=np.int32))
        leaves = pa.array(np.ones(chunk.size, dtype=np.int64))
        pq.write_table(pa.table({"prefix": prefix, "node": nodes, "depth": depth, "leaves": leaves}),
                       path / f"part-{f:05d}.parquet")


def test_killed_load_leaves_active_build_serving_and_rerun_completes(spark, cfg, pg_dsn, tmp_path):
    from refactx_pipeline.stages import activate as activate_job
    from refactx_pipeline.stages import load, validate
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg, {"pg.load_workers": 1})
    schema, name = cfg.pg.schema, f"{cfg.paths.source}-{VOCAB}"
    first = build(spark, cfg, pg_dsn)
    rows_dir = cfg.stage_dir("prefix_rows") / VOCAB / "rows"
    real_rows = tmp_path / "real_rows"
    rows_dir.rename(real_rows)
    _synthetic_rows(rows_dir, 600_000, 3)

    params = conninfo_to_dict(pg_dsn)
    params["application_name"] = "refactx_killed_loader"
    loader_dsn = make_conninfo(**params)
    code = ("import sys; from refactx_pipeline.config import Config; from refactx_pipeline.stages.load import load_all; "
            "load_all(Config.from_json(sys.argv[1]), sys.argv[2])")
    proc = subprocess.Popen([sys.executable, "-c", code, cfg.to_json(), loader_dsn],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    dbname = params["dbname"]
    deadline = time.monotonic() + 120
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # the server's COPY progress decides; between two looks, the wait is on the loader
        # itself (it returns at once if the loader exits before its COPY starts)
        while not conn.execute(
            "SELECT coalesce(max(p.tuples_processed), 0) > 0 FROM pg_stat_progress_copy p "
            "JOIN pg_database d ON d.oid = p.datid WHERE d.datname = %s", (dbname,)
        ).fetchone()[0]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL_PAUSE_S)
                pytest.fail("the loader exited before its COPY started: " + proc.stdout.read().decode()[-3000:])
            assert time.monotonic() < deadline, "the loader's COPY never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # the server notices the dead client's connections (pg_stat_activity decides)
        paused = threading.Event()  # never set: its wait is a bounded pause between two looks
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'refactx_killed_loader'"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, "the killed loader's sessions did not go away"
            paused.wait(POLL_PAUSE_S)

    b = builds(pg_dsn, schema)
    killed = max(b)
    assert killed != first and b[killed]["status"] == "loading"
    active, root = read_active(pg_dsn, schema, name)
    assert active == first and root.leaves[0] == len(FACTS)

    # re-run with the real rows: cleans the leftovers, completes, activates
    rows_dir_tmp = tmp_path / "synthetic"
    rows_dir.rename(rows_dir_tmp)
    real_rows.rename(rows_dir)
    counts = load.run(StageContext(cfg, dsn=pg_dsn))["vocabularies"][VOCAB]
    assert counts["cleaned"]["interrupted_builds"] == [killed]
    b = builds(pg_dsn, schema)
    assert b[killed]["status"] == "failed" and "interrupted" in b[killed]["message"]
    assert f"tree_b{killed}" not in tables(pg_dsn, schema)
    validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: counts["build_id"]}))
    activate_job.run(StageContext(cfg, dsn=pg_dsn, build_ids={VOCAB: counts["build_id"]}))
    active, root = read_active(pg_dsn, schema, name)
    assert active == counts["build_id"] and root.leaves[0] == len(FACTS)


def test_orphaned_table_is_dropped(cfg, pg_dsn):
    from refactx_pipeline.catalog import pgcatalog

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pgcatalog.apply_schema(conn, cfg.pg.schema)
        conn.execute(f"CREATE TABLE {cfg.pg.schema}.tree_b999 (LIKE {cfg.pg.schema}.tree)")
        cleaned = pgcatalog.clean_leftovers(conn, cfg.pg.schema)
    assert cleaned["orphaned_tables"] == [999]
    assert tables(pg_dsn, cfg.pg.schema) == set()


def test_tokenizer_meta_computed_from_real_tokenizer(cfg):
    from refactx_pipeline.stages.load import tokenizer_meta

    path = SHARED / "tokenizers" / "gpt2"
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared not beside the project)")
    meta = tokenizer_meta(cfg, VocabularyConfig(name="gpt2", path=str(path)))
    assert meta["vocab_size"] == 50257 and len(meta["sha256"]) == 64


def test_a_second_load_of_a_name_in_flight_is_refused_and_writes_nothing(spark, cfg, pg_dsn):
    from refactx_pipeline.stages import load
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    first = build(spark, cfg, pg_dsn, activate=False)  # loaded, awaiting validation
    before = builds(pg_dsn, cfg.pg.schema)
    with pytest.raises(LoadError, match=f"build {first} .*one build per index name"):
        load.run(StageContext(cfg, dsn=pg_dsn))
    assert builds(pg_dsn, cfg.pg.schema).keys() == before.keys()  # no build row, no table


def test_validate_and_activate_work_on_the_build_they_are_given_and_no_other(spark, cfg, pg_dsn):
    """The build id is an input of validate and activate: none given, one of another
    index, of another dump date, missing, or in the wrong state is refused with a message that
    says so, and changes nothing."""
    from refactx_pipeline.stages import activate as activate_job
    from refactx_pipeline.stages import validate
    from refactx_pipeline.orchestration.pipeline import build as run_build, stage
    from refactx_index.errors import ConfigError
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    schema = cfg.pg.schema
    first = build(spark, cfg, pg_dsn)  # active
    loaded = build(spark, cfg, pg_dsn, FACTS + [[9, 9, 9]], activate=False)
    before = builds(pg_dsn, schema)
    for name in ("validate", "activate"):
        with pytest.raises(ConfigError, match=f"stage {name} works on the builds a load made.*--build-id"):
            stage(name).run(StageContext(cfg, spark=spark, dsn=pg_dsn))
        with pytest.raises(ConfigError, match="not among the configured vocabularies"):
            stage(name).run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: loaded, "other": loaded}))
    with pytest.raises(ConfigError, match="takes no build id"):
        stage("load").run(StageContext(cfg, dsn=pg_dsn, build_ids={VOCAB: loaded}))
    with pytest.raises(ConfigError, match="stage validate works on the builds a load made"):
        run_build(cfg, ["validate", "activate"])  # refused before anything starts
    with pytest.raises(LoadError, match=r"build 999 \(given for vocabulary toy\) does not exist"):
        validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: 999}))
    other_index = cfg.updated({"pg.index_name": "other-{vocabulary}"})
    with pytest.raises(LoadError, match=f"build {loaded} .* is a build of index 'wikidata-toy', not of 'other-toy'"):
        validate.run(StageContext(other_index, spark=spark, dsn=pg_dsn, build_ids={VOCAB: loaded}))
    other_dump = cfg.updated({"paths.dump_date": "20990101"})
    with pytest.raises(LoadError, match="was loaded from wikidata dump sample, this run builds wikidata dump 20990101"):
        activate_job.run(StageContext(other_dump, dsn=pg_dsn, build_ids={VOCAB: loaded}))
    with pytest.raises(LoadError, match=f"build {loaded} .* is loaded; activate takes a validated or active build: validate it first"):
        activate_job.run(StageContext(cfg, dsn=pg_dsn, build_ids={VOCAB: loaded}))
    with pytest.raises(LoadError, match=f"build {first} .* is active; validate takes a loaded or validated build"):
        validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: first}))
    assert builds(pg_dsn, schema) == before  # nothing changed
    # the right build goes through
    validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids={VOCAB: loaded}))
    assert activate_job.run(StageContext(cfg, dsn=pg_dsn, build_ids={VOCAB: loaded}))[VOCAB]["previous"] == first


def test_build_id_arguments():
    from refactx_pipeline.config import Config
    from refactx_pipeline.orchestration.pipeline import parse_build_ids
    from refactx_index.errors import ConfigError

    one = Config().updated({"tokenize.vocabularies": [VocabularyConfig(name="a", path="")]})
    two = Config().updated({"tokenize.vocabularies": [VocabularyConfig(name="a", path=""),
                                                      VocabularyConfig(name="b.2", path="")]})
    assert parse_build_ids(["7"], one) == {"a": 7}
    assert parse_build_ids(["a=7"], one) == {"a": 7}
    assert parse_build_ids(["a=7,b.2=8"], two) == parse_build_ids(["a=7", "b.2=8"], two) == {"a": 7, "b.2": 8}
    assert parse_build_ids([], two) == {}
    with pytest.raises(ConfigError, match="names 2 vocabularies"):
        parse_build_ids(["7"], two)
    with pytest.raises(ConfigError, match="an integer"):
        parse_build_ids(["a=seven"], one)


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_second_run_of_a_dump_date_is_refused_before_it_writes(spark, cfg, tmp_path):
    """Two runs of one dump date share its work directory: the first claims it, the second
    (in this process, or a stage of it through the spark-submit entry point) is refused with
    a message naming the holder, and the first run's outputs are untouched."""
    from refactx_pipeline.stages import prefix_rows
    from refactx_pipeline.orchestration.pipeline import build as run_build
    from refactx_pipeline.orchestration.workdir import RunConflict, claim_path, claim_work_dir, release_work_dir
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    scheduled = "scheduled__2026-01-05T00:00:00+00:00"
    assert claim_work_dir(cfg, scheduled)["run_id"] == scheduled  # the DAG run's first stage
    write_tokens(spark, cfg, FACTS)
    prefix_rows.run(StageContext(cfg, spark=spark))
    first = _files(cfg.stage_dir("prefix_rows"))

    with pytest.raises(RunConflict, match=f"in use by run '{re.escape(scheduled)}'.*overwrite each other's "
                       "stage outputs.*record_run"):
        run_build(cfg, ["prefix_rows"], spark=spark)
    submit = subprocess.run(  # the installed entry point spark-submit runs, as the DAG's task would
        [sys.executable, importlib.util.find_spec("refactx_pipeline.submit").origin, "prefix_rows",
         "--set", f"paths.build_root={cfg.paths.build_root}", "--set", f"tokenize.vocabularies={VOCAB}=",
         "--run-id", "manual__2026-01-05T10:00:00+00:00"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert submit.returncode != 0 and "RunConflict" in submit.stderr and scheduled in submit.stderr, submit.stderr[-3000:]
    assert _files(cfg.stage_dir("prefix_rows")) == first  # nothing of the first run was overwritten

    assert claim_work_dir(cfg, scheduled)["run_id"] == scheduled  # the same run's later stages go on
    assert release_work_dir(cfg, scheduled) and not claim_path(cfg).exists()  # its record_run

    # a run of this process claims for itself and releases when it ends, however it ends
    seen = []
    run_build(cfg, ["prefix_rows"], spark=spark,
              on_stage=lambda s, r: seen.append(json.loads(claim_path(cfg).read_text())))
    assert {c["pid"] for c in seen} == {os.getpid()} and not claim_path(cfg).exists()

    # a process's claim whose process died is taken over
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claim_path(cfg).write_text(json.dumps({"run_id": "process-x", "pid": dead.pid, "host": socket.gethostname(),
                                           "since": "2026-01-05T00:00:00+00:00"}))
    assert claim_work_dir(cfg, None)["pid"] == os.getpid()


# --------------------------------------------------------------------------- validation in Spark


def rows_for_cut(facts, cut) -> dict[bytes, bytes]:
    """The rows of ``facts`` whose row prefixes are the root and ``cut`` -- any nodes of the
    trie, at any depths (whatever cut rule chose them): each row's fragment is the trie below
    its prefix, every node that is a row of its own flagged external with its leaf count."""
    facts = sorted({tuple(f) for f in facts})
    ends_at, cut = set(facts), {tuple(c) for c in cut}
    rows = {}
    for top in [(), *sorted(cut)]:
        tokens, counts, ends, external, ext_leaves = [], [], [], [], []
        queue, i = [top], 0
        while i < len(queue):
            node, i = queue[i], i + 1
            below = [f for f in facts if f[:len(node)] == node]
            if node != top and node in cut:
                counts.append(0), ends.append(False), external.append(True), ext_leaves.append(len(below))
                continue
            kids = sorted({f[len(node)] for f in below if len(f) > len(node)})
            counts.append(len(kids)), ends.append(node in ends_at), external.append(False)
            queue.extend(node + (t,) for t in kids)
            tokens.extend(kids)
        rows[fmt.encode_prefix(top)] = fmt.encode_fragment(tokens, counts, ends, external, ext_leaves)
    return rows


def write_rows(path: Path, rows: dict[bytes, bytes], depth=None, leaves=None) -> Path:
    """A prefix rows dataset (schema ROWS) of ``rows``; ``depth``/``leaves`` override columns per key."""
    depth, leaves = depth or {}, leaves or {}

    def leaves_of(node: bytes) -> int:
        try:
            return int(fmt.decode_fragment(node).leaves[0])
        except FormatError:
            return 1  # a corrupt row's column: whatever the job wrote

    keys = sorted(rows)
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "prefix": pa.array(keys, pa.binary()),
        "node": pa.array([rows[k] for k in keys], pa.binary()),
        "depth": pa.array([depth.get(k, len(k) // 4) for k in keys], pa.int32()),
        "leaves": pa.array([leaves.get(k, leaves_of(rows[k])) for k in keys], pa.int64()),
    }), path / "part-00000.parquet")
    return path


def random_tree(seed: int):
    rng = np.random.default_rng(seed)
    facts = {tuple(int(t) for t in rng.integers(0, 4, rng.integers(1, 7))) for _ in range(120)}
    prefixes = sorted({f[:k] for f in facts for k in range(1, len(f) + 1)})
    cut = [p for p in prefixes if rng.random() < 0.35]
    return facts, cut


@pytest.mark.parametrize("seed", range(4))
def test_spark_checks_accept_any_cut(spark, tmp_path, seed):
    """The checks follow the format, not a cut rule: external nodes at any levels of a row."""
    from refactx_pipeline.stages.validate import check_parquet

    facts, cut = random_tree(seed)
    rows = rows_for_cut(facts, cut)
    levels = {len(fmt.decode_prefix(k)) - len(fmt.decode_prefix(p)) for p, node in rows.items()
              for k in [fmt.encode_prefix(c) for c in cut] if k.startswith(p) and k != p}
    assert max(levels) > 1  # some rows hold external nodes below their first level
    summary = check_parquet(spark, write_rows(tmp_path / "rows", rows), max_tokens=16)
    assert summary["rows"] == len(rows) == len(cut) + 1
    assert summary["root_leaves"] == len(facts)
    assert summary["max_depth"] == max(len(c) for c in cut)
    assert summary["bytes"] == sum(len(k) + len(v) for k, v in rows.items())


def test_spark_checks_name_each_fault(spark, tmp_path):
    """Every kind of fault of the Parquet rows is found, counted and named with an example."""
    from refactx_pipeline.stages.validate import _Invalid, check_parquet

    facts, cut = random_tree(7)
    rows = rows_for_cut(facts, cut)
    deep = max(cut, key=len)
    deep_key = fmt.encode_prefix(deep)
    parent = max([c for c in cut if c != deep and deep[:len(c)] == c] + [()], key=len)  # its parent row

    def fails(name, rows, match, **columns):
        with pytest.raises(_Invalid, match=match):
            check_parquet(spark, write_rows(tmp_path / name, rows, **columns), max_tokens=16)

    flipped = bytearray(rows[deep_key])
    flipped[-1] ^= 0x01
    fails("flipped", {**rows, deep_key: bytes(flipped)}, rf"1 rows fail their own checks \(for example row "
          rf"{re.escape(str(list(deep)))}: does not decode: fragment checksum mismatch")
    fails("missing", {k: v for k, v in rows.items() if k != deep_key},
          rf"1 external nodes have no row \(for example {re.escape(str(list(deep)))}, external in row")
    suffixes = [f[len(deep):] for f in facts if f[:len(deep)] == deep]  # the deepest row: no external nodes
    fails("mismatch", {**rows, deep_key: fmt.encode_subtree(suffixes + [(9,)])},
          r"1 rows disagree with their parent's leaf count \(sum\(child_leaves\) \+ ends != leaves\) "
          rf"\(for example row {re.escape(str(list(deep)))}: {len(suffixes) + 1} leaves, its parent row "
          rf"{re.escape(str(list(parent)))}.* says {len(suffixes)}\)")
    fails("orphan", {**rows, fmt.encode_prefix((9, 9)): fmt.encode_subtree([[1]])},
          r"1 rows are no row's external node .*\(for example \[9, 9\]\)")
    fails("depth", rows, "its depth column says 0", depth={deep_key: 0})
    fails("leaves", rows, "its leaves column says 1000", leaves={deep_key: 1000})
    fails("own", {**rows, deep_key: fmt.encode_fragment([], [0], [False], [True], [1])}, "flagged external|leaf count")
    fails("noroot", {k: v for k, v in rows.items() if k}, "no root row")
    # the same row as format version 1 wrote it (no checksum) inside a version 2 build
    version_1 = bytes([1]) + rows[deep_key][1:10] + rows[deep_key][14:]
    fails("version1", {**rows, deep_key: version_1},
          f"does not decode: a format version 1 row inside a format version {fmt.FORMAT_VERSION} build")


def rewrite_rows(rows_dir: Path, change) -> str:
    """Replace a prefix rows dataset by what ``change(table)`` returns (one file), as a faulty
    job would write it; returns the reason validation should give."""
    path = rows_dir.parent / DICTIONARY_FILE  # the build's dictionary, beside its rows
    dictionary = fmt.PresetDictionary(path.read_bytes()) if path.exists() else None
    table, reason = change(pq.read_table(rows_dir), dictionary)
    for f in rows_dir.iterdir():
        f.unlink()
    pq.write_table(table, rows_dir / "part-00000.parquet")
    return reason


def _deepest_row(table: pa.Table) -> tuple[int, str]:
    """The deepest row (whichever cut chose the rows, an external node of some row) and its key
    as validation names it."""
    prefixes = table.column("prefix").to_pylist()
    i = max(range(len(prefixes)), key=lambda r: (len(prefixes[r]), prefixes[r]))
    return i, re.escape(str(fmt.decode_prefix(prefixes[i]).tolist()))


def _flip_a_byte(table: pa.Table, dictionary=None):
    i, key = _deepest_row(table)
    nodes = table.column("node").to_pylist()
    node = bytearray(nodes[i])
    node[len(node) // 2] ^= 0x10
    nodes[i] = bytes(node)
    return (table.set_column(1, "node", pa.array(nodes, pa.binary())),
            rf"row {key}: does not decode: fragment checksum mismatch")


def _drop_a_child_row(table: pa.Table, dictionary=None):
    i, key = _deepest_row(table)
    keep = np.ones(table.num_rows, dtype=bool)
    keep[i] = False
    return table.filter(pa.array(keep)), rf"1 external nodes have no row \(for example {key}, external in row \["


def _miscount_a_row(table: pa.Table, dictionary=None):
    """The deepest row holding one fact more than its parent's external node says (its own
    columns consistent)."""
    i, key = _deepest_row(table)
    nodes, leaves = table.column("node").to_pylist(), table.column("leaves").to_pylist()
    suffixes = [path for path, external in fmt.iter_suffixes(fmt.decode_fragment(nodes[i], dictionary=dictionary)) if not external]
    nodes[i], leaves[i] = fmt.encode_subtree(suffixes + [(99999,)]), len(suffixes) + 1
    return (table.set_column(1, "node", pa.array(nodes, pa.binary())).set_column(3, "leaves", pa.array(leaves, pa.int64())),
            rf"row {key}: {len(suffixes) + 1} leaves, its parent row \[.*\] says {len(suffixes)}")


@pytest.mark.parametrize("corrupt", [_flip_a_byte, _drop_a_child_row, _miscount_a_row],
                         ids=["flipped-byte", "missing-child-row", "leaf-count-mismatch"])
def test_validation_fails_on_faulty_parquet_rows(spark, cfg, pg_dsn, corrupt):
    """Prefix rows written wrong (and loaded as written: PostgreSQL agrees with the Parquet) fail
    the Spark checks: the build is failed with the reason, the served build is unchanged."""
    from refactx_pipeline.stages import load, prefix_rows, validate
    from refactx_pipeline.stages.contract import StageContext

    cfg = make_cfg(cfg)
    schema, name = cfg.pg.schema, f"{cfg.paths.source}-{VOCAB}"
    first = build(spark, cfg, pg_dsn)
    write_tokens(spark, cfg, FACTS + [[9, 9, 9]])
    prefix_rows.run(StageContext(cfg, spark=spark))
    reason = rewrite_rows(cfg.stage_dir("prefix_rows") / VOCAB / "rows", corrupt)
    build_ids = load.run(StageContext(cfg, dsn=pg_dsn))["build_ids"]
    with pytest.raises(ValidationFailed, match=reason):
        validate.run(StageContext(cfg, spark=spark, dsn=pg_dsn, build_ids=build_ids))
    b = builds(pg_dsn, schema)[build_ids[VOCAB]]
    assert b["status"] == "failed" and "the prefix rows Parquet" in b["message"]
    active, root = read_active(pg_dsn, schema, name)
    assert active == first and root.leaves[0] == len(FACTS)


def test_validation_reports_its_spark_and_database_time(spark, cfg, pg_dsn):
    cfg = make_cfg(cfg)
    build(spark, cfg, pg_dsn)
    counts = json.loads((cfg.stage_dir("validate") / "counts.json").read_text())["vocabularies"][VOCAB]
    assert counts["rows"] > 1 and counts["walked"] == len(FACTS) and counts["root_leaves"] == len(FACTS)
    # format versions 3 to 5: the prefix rows stage's dictionary is the one the catalog serves
    tree = json.loads((cfg.stage_dir("prefix_rows") / VOCAB / "counts.json").read_text())
    path = cfg.stage_dir("prefix_rows") / VOCAB / DICTIONARY_FILE
    with psycopg.connect(pg_dsn) as conn:
        stored = pgcatalog.build_dictionary(conn, cfg.pg.schema, counts["build_id"])
        version = builds(pg_dsn, cfg.pg.schema)[counts["build_id"]]["format_version"]
    assert version == tree["format_version"] == fmt.FORMAT_VERSION == 5
    assert (stored.data if stored else b"") == (path.read_bytes() if path.exists() else b"")
    assert tree["dictionary_bytes"] == len(stored.data if stored else b"")
    assert counts["spark_seconds"] > 0 and counts["pg_seconds"] > 0
