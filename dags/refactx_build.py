"""Airflow DAG ``refactx_build``: one ``spark-submit`` per stage of DESIGN.md.

Wiring only: which jobs run, in which order, with which config file and run date.
Each task is ``spark-submit dags/spark_stage.py <stage> --config ... --set ...``, which
runs ``jobs.<stage>.main``; what each stage does lives in ``jobs/<stage>.py``. The stage
order, and the rule that ``sitelinks`` runs only when the config names SQL dumps, come from
``jobs.pipeline``: the code the CLI runs, so the DAG and ``refactx-index build`` cannot drift.
The project must be installed (``pip install -e .``) where the DAG is parsed.

Per environment (read when the DAG file is parsed):
- ``REFACTX_CONFIG``: a config file; else ``conf/${REFACTX_ENV:-local}.toml``.
  ``REFACTX__<SECTION>__<FIELD>`` variables still override it inside each job.
- ``REFACTX_SPARK_CONN_ID``: the Airflow connection naming the Spark master
  (``refactx_spark``; set it with ``AIRFLOW_CONN_REFACTX_SPARK``).
- ``REFACTX_BUILD_SCHEDULE``: a cron expression or preset (``@weekly``); ``none`` disables it.
- ``REFACTX_PY_FILES``: an archive of ``refactx_index`` + ``jobs`` for clusters whose
  executors do not have the package installed.
- ``REFACTX_SPARK_SUBMIT``: the spark-submit to run (default: the one installed with the
  pinned pyspark beside this interpreter, else ``spark-submit`` on the PATH).
- ``REFACTX_JAR``: the project jar (the parse stage's lexer); default: the one
  ``python -m jobs.jvm`` (run by ``./dev setup`` and the Docker image) builds for these sources.
- ``REFACTX_TASK_RETRIES``: retries per task (default 1; every stage is safe to re-run).
- ``PYSPARK_PYTHON``: the interpreter of Python workers (default: this interpreter).

Per run (trigger form or ``airflow dags test -c '{...}'``): ``dump_date`` (default: the
run's ``ds_nodash``) and ``dumps`` (default: the dumps of the config file).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, chain

from jobs.jvm import jar_path
from jobs.pipeline import select_stages
from refactx_index.config import Config

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# the entry point that runs jobs.<stage> as a module (why: see its docstring)
STAGE_ENTRY_POINT = Path(__file__).resolve().with_name("spark_stage.py")
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
            # extend: spark-submit's --jars (not built here: DAG parsing stays cheap)
            jars=os.environ.get("REFACTX_JAR") or str(jar_path(build=False)),
            env_vars={
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
                # jobs/<stage>.py imports `jobs.*` and `refactx_index`: the project root
                # must be importable even where the package is not installed
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
                ),
            },
        )
        for stage in select_stages(CONFIG)
    ]
    chain(*stage_tasks)
