"""The DAG as Airflow runs it: `airflow dags test refactx_build` on the real extract.

Every task is a real `spark-submit …/refactx_pipeline/submit.py <stage> …`, chained by Airflow,
loading into a fresh database of the test server. Runs in subprocesses with their own
AIRFLOW_HOME (SQLite metadata), so it shares no Airflow state with tests/test_dags.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from .conftest import ROOT, shared_path

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]


def test_dags_test_runs_every_stage_and_activates_the_index(pg_dsn, tmp_path):
    shared_path("data", "wikidata", "truthy-2018-sample500-en.nt")  # conf/local.toml reads it
    airflow = str(Path(sys.executable).with_name("airflow"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "AIRFLOW"))}
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_REFACTX_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        REFACTX_TASK_RETRIES="0",
        REFACTX__PATHS__BUILD_ROOT=str(tmp_path / "build"),
        REFACTX__PG__DSN=pg_dsn,
        REFACTX__SPARK__MASTER="local[2]",
    )
    migrate = subprocess.run([airflow, "db", "migrate"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    run = subprocess.run([airflow, "dags", "test", "refactx_build", "2026-01-05"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1200)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-5000:]
    assert "state=success" in log and "new_state=failed" not in log

    build = tmp_path / "build" / "wikidata" / "20260105"  # paths.dump_date = the run's ds_nodash
    for stage in ("parse", "sitelinks", "labels", "verbalize", "tokenize", "prefix_rows", "load",
                  "validate", "activate"):
        assert (build / stage / "counts.json").exists(), f"{stage} wrote no counts"
    facts = json.loads((build / "prefix_rows" / "qwen2.5" / "counts.json").read_text())["distinct_facts"]
    with psycopg.connect(pg_dsn) as conn:
        status, stored = conn.execute(
            "SELECT b.status, b.facts FROM refactx.active a JOIN refactx.builds b USING (build_id) "
            "WHERE a.name = 'wikidata-qwen2.5'"
        ).fetchone()
    assert status == "active" and stored == facts > 1000
