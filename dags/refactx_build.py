"""Airflow DAG ``refactx_build``: one ``spark-submit`` per stage of DESIGN.md.

Wiring only: which jobs run, in which order, with which config file and run date.
Each task is ``spark-submit refactx_pipeline/submit.py <stage> --config ... --set ...``, which
runs the stage module's ``main``; what each stage does lives in ``refactx_pipeline/<stage>.py``.
The stage order, and the rule that ``sitelinks`` runs only when the config names SQL dumps,
come from ``refactx_pipeline.pipeline``: the code the CLI runs, so the DAG and
``refactx-index build`` cannot drift. The ``refactx-pipeline`` wheel must be installed where
the DAG is parsed and where its tasks run.

Per environment (read when the DAG file is parsed):
- ``REFACTX_CONFIG``: a config file; else ``conf/${REFACTX_ENV:-local}.toml``.
  ``REFACTX__<SECTION>__<FIELD>`` variables still override it inside each job.
- ``REFACTX_SPARK_CONN_ID``: the Airflow connection naming the Spark master
  (``refactx_spark``; set it with ``AIRFLOW_CONN_REFACTX_SPARK``).
- ``REFACTX_BUILD_SCHEDULE``: a cron expression or preset (``@weekly``); ``none`` disables it.
- ``REFACTX_PY_FILES``: an archive of ``refactx_index`` + ``refactx_pipeline`` for clusters
  whose executors do not have the wheels installed.
- ``REFACTX_SPARK_SUBMIT``: the spark-submit to run (default: the one installed with the
  pinned pyspark beside this interpreter, else ``spark-submit`` on the PATH).
- ``REFACTX_JAR``: the project jar (the parse stage's lexer); default: the one
  ``python -m refactx_pipeline.jvm`` (run by ``./dev setup`` and the Docker image) builds for these sources.
- ``REFACTX_TASK_RETRIES``: retries per task (default 1; every stage is safe to re-run).
- ``PYSPARK_PYTHON``: the interpreter of Python workers (default: this interpreter).

Per run (trigger form or ``airflow dags test -c '{...}'``): ``dump_date`` (default: the
run's ``ds_nodash``) and ``dumps`` (default: the dumps of the config file).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, chain

from refactx_pipeline.jvm import jar_path
from refactx_pipeline.pipeline import select_stages
from refactx_pipeline.config import Config

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# the installed file spark-submit runs for every stage (why a file of its own: its docstring);
# located without importing it, so DAG parsing stays cheap
STAGE_ENTRY_POINT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)
DAG_ID = "refactx_build"


def config_path() -> Path:
    """The config file of this environment (``REFACTX_CONFIG`` or ``conf/<REFACTX_ENV>.toml``)."""
    explicit = os.environ.get("REFACTX_CONFIG")
    if explicit:
        return Path(explicit).resolve()
    return PROJECT_ROOT / "conf" / f"{os.environ.get('REFACTX_ENV', 'local')}.toml"


def spark_submit() -> str:
    """The spark-submit of this environment: the pinned pyspark's, beside the interpreter."""
    explicit = os.environ.get("REFACTX_SPARK_SUBMIT")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def schedule() -> str | None:
    value = os.environ.get("REFACTX_BUILD_SCHEDULE", "@weekly").strip()
    return None if value.lower() in ("", "none") else value


CONFIG_FILE = config_path()
# Loading the config is standard-library TOML parsing: cheap enough for every parse, and a
# broken config file shows up as an import error of this DAG instead of a failed run.
CONFIG = Config.load(CONFIG_FILE)

# Every job gets the same arguments: the environment's config file, then the run's values.
# `--set` overrides come last in Config.load, so they win over the file and the environment.
JOB_ARGS = [
    "--config",
    str(CONFIG_FILE),
    "--set",
    "paths.dump_date={{ params.dump_date or ds_nodash }}",
    "--set",
    "input.dumps={{ params.dumps | join(',') }}",
]

with DAG(
    dag_id=DAG_ID,
    description="Rebuild the refactx fact indexes from a Wikidata truthy dump",
    schedule=schedule(),
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two builds of one dump date would overwrite each other's stages
    default_args={
        "retries": int(os.environ.get("REFACTX_TASK_RETRIES", "1")),
        "retry_delay": timedelta(minutes=5),
    },
    params={
        "dump_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^[0-9A-Za-z_-]+$",
            description="Dump date keying the build directory; empty: the run's date (YYYYMMDD)",
        ),
        "dumps": Param(
            list(CONFIG.input.dumps),
            type="array",
            items={"type": "string"},
            minItems=1,
            description="N-Triples dumps: files, directories or globs (.nt, .nt.gz, .nt.bz2)",
        ),
    },
    tags=["refactx"],
    doc_md=__doc__,
) as dag:
    stage_tasks = [
        SparkSubmitOperator(
            task_id=stage,
            application=str(STAGE_ENTRY_POINT),
            application_args=[stage, *JOB_ARGS],
            conn_id=os.environ.get("REFACTX_SPARK_CONN_ID", "refactx_spark"),
            spark_binary=spark_submit(),
            name=f"refactx_{stage}_{{{{ params.dump_date or ds_nodash }}}}",
            py_files=os.environ.get("REFACTX_PY_FILES") or None,
            # the project jar must be on the driver's classpath, which a running JVM cannot
            # extend: spark-submit's --jars
            jars=os.environ.get("REFACTX_JAR") or str(jar_path()),
            env_vars={
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            },
        )
        for stage in select_stages(CONFIG)
    ]
    chain(*stage_tasks)
