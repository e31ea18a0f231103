"""The DAG as Airflow runs it: `airflow dags test refactx_build` on the real extract.

Every Spark task is a real `spark-submit …/refactx_pipeline/submit.py <stage> …`, the database
stages run in Airflow's task processes, loading into a fresh database of the test server. The
dumps root holds two dated dumps of the shared sample; the newer one is half written (no
completion marker) at first. Runs in subprocesses with their own AIRFLOW_HOME (SQLite
metadata), so it shares no Airflow state with tests/integration/test_dags.py.

One test, two runs, in order (the second needs the first's served builds):

1. scheduled: the sensor takes 20180101, never the half-written 20180201; both vocabularies
   are built in their own branches and activated; the run is recorded in ``runs``.
2. 20180201 completes, and one vocabulary's tokenizer is broken: the sensor takes 20180201, the
   other vocabulary's branch activates its new build, the broken one's branch fails and its
   index still serves the 20180101 build; the run is recorded as partial and fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from ..conftest import ROOT, airflow_home, shared_path, tokenizer_dir

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

VOCABULARIES = ("qwen2.5", "gpt2")
FIRST, SECOND = "20180101", "20180201"
MARKER = "_IMPORTED"


def dumps_root(tmp_path: Path) -> Path:
    sample = shared_path("data", "wikidata", "truthy-2018-sample500-en.nt")
    root = tmp_path / "dumps"
    for date in (FIRST, SECOND):
        (root / date).mkdir(parents=True)
        (root / date / f"wikidata-{date}-truthy-BETA.nt").symlink_to(sample)
    (root / FIRST / MARKER).write_text("")  # SECOND: still being written
    return root


def write_config(tmp_path: Path, root: Path) -> Path:
    vocabularies = ", ".join(f'{{ name = "{v}", path = "{tokenizer_dir(v)}" }}' for v in VOCABULARIES)
    config = tmp_path / "dag.toml"
    # no Wikipedia dumps: the sitelinks task is skipped and labels runs without it
    config.write_text(f"""
[paths]
build_root = "{tmp_path / 'build'}"

[input]
dumps_root = "{root}"
dump_marker = "{MARKER}"
dump_files = "*-truthy-BETA.nt"

[tokenize]
vocabularies = [{vocabularies}]

[spark]
master = "local[2]"
driver_memory = "1g"
shuffle_partitions = 4
""")
    return config


def airflow_env(tmp_path: Path, config: Path, pg_dsn: str, migrated_db: Path) -> dict[str, str]:
    """The environment of ``airflow dags test`` in a fresh AIRFLOW_HOME under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "AIRFLOW"))}
    env.update(
        AIRFLOW_HOME=str(airflow_home(tmp_path / "airflow", migrated_db)),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_REFACTX_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        REFACTX_CONFIG=str(config),
        REFACTX_TASK_RETRIES="0",
        REFACTX__PG__DSN=pg_dsn,
    )
    return env


def dags_test(env: dict[str, str], logical_date: str, logs: Path) -> str:
    """The whole log of ``airflow dags test`` (also kept in ``logs``, pytest's tmp_path)."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    run = subprocess.run([airflow, "dags", "test", "refactx_build", logical_date], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    (logs / f"dags-test-{logical_date}.log").write_text(log)
    return log


def served(pg_dsn: str) -> dict[str, tuple[str, str]]:
    """index name -> (status, dump_date) of the build it serves."""
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT a.name, b.status, b.dump_date FROM refactx.active a JOIN refactx.builds b USING (build_id)"
        ).fetchall()
    return {name: (status, date) for name, status, date in rows}


def test_dump_sensor_and_one_branch_per_vocabulary(pg_dsn, tmp_path, migrated_airflow_db):
    root = dumps_root(tmp_path)
    config = write_config(tmp_path, root)
    env = airflow_env(tmp_path, config, pg_dsn, migrated_airflow_db)

    # 1. scheduled: the complete dump is taken, the half-written one is not
    log = dags_test(env, "2026-01-05", tmp_path)
    assert "DagRun Finished" in log and "state=success" in log, log[-5000:]
    assert "new_state=failed" not in log, log[-5000:]
    build = tmp_path / "build" / "wikidata"
    assert sorted(p.name for p in build.iterdir()) == [FIRST]
    assert not (build / FIRST / "run.json").exists()  # the run's claim, released by record_run
    for stage in ("parse", "labels", "verbalize"):
        assert (build / FIRST / stage / "counts.json").exists(), stage
    assert not (build / FIRST / "sitelinks").exists()  # no Wikipedia dumps configured
    for vocab in VOCABULARIES:
        for stage in ("tokenize", "prefix_rows", "load", "validate", "activate"):
            counts = json.loads((build / FIRST / stage / f"counts.{vocab}.json").read_text())
            if stage in ("load", "validate", "activate"):
                assert list(counts["vocabularies"]) == [vocab], (stage, counts)
        # validate and activate worked on the build their branch's load made (handed by XCom)
        loaded = json.loads((build / FIRST / "load" / f"counts.{vocab}.json").read_text())["build_ids"][vocab]
        for stage in ("validate", "activate"):
            counts = json.loads((build / FIRST / stage / f"counts.{vocab}.json").read_text())
            assert counts["vocabularies"][vocab]["build_id"] == loaded, (stage, counts)
    assert served(pg_dsn) == {f"wikidata-{v}": ("active", FIRST) for v in VOCABULARIES}

    # 2. the second dump completes; gpt2's tokenizer is broken for this run
    (root / SECOND / MARKER).write_text("")
    env["REFACTX__TOKENIZE__VOCABULARIES"] = (
        f"qwen2.5={tokenizer_dir('qwen2.5')},gpt2={tmp_path / 'no-such-tokenizer'}"
    )
    log = dags_test(env, "2026-01-06", tmp_path)
    assert "DagRun Finished" in log and "state=failed" in log, log[-5000:]
    failures = "\n".join(line for line in log.splitlines() if "Error" in line or "new_state=" in line)
    assert served(pg_dsn) == {"wikidata-qwen2.5": ("active", SECOND), "wikidata-gpt2": ("active", FIRST)}, failures
    assert json.loads((build / SECOND / "activate" / "counts.qwen2.5.json").read_text())
    assert not (build / SECOND / "prefix_rows" / "counts.gpt2.json").exists()

    from refactx_index.tree.pg import open_index

    with open_index(pg_dsn, "wikidata-gpt2") as index:  # the previous build still answers
        assert int(index.next_tokens([]).leaves.sum()) > 1000  # facts below the root

    with psycopg.connect(pg_dsn) as conn:
        runs = conn.execute("SELECT dump_date, status, counts FROM refactx.runs ORDER BY run_id").fetchall()
    assert [(d, s) for d, s, _ in runs] == [(FIRST, "success"), (SECOND, "partial")]
    first, second = runs[0][2], runs[1][2]
    assert set(first["stages"]) == {"parse", "labels", "verbalize"}
    assert set(first["vocabularies"]["gpt2"]) == {"tokenize", "prefix_rows", "load", "validate", "activate"}
    assert set(second["vocabularies"]["gpt2"]) == set()
    assert "activate" in second["vocabularies"]["qwen2.5"]

    history = subprocess.run(
        [str(Path(sys.executable).with_name("refactx-pipeline")), "builds", "--config", str(config)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert history.returncode == 0, history.stderr[-3000:]
    assert f"{SECOND}  partial" in history.stdout and f"{FIRST}  success" in history.stdout, history.stdout
