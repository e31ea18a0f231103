"""Airflow DAG ``refactx_graph``: rebuild a team's graph index on each new export, one branch per vocabulary.

Wiring only, as ``dags/refactx_build.py`` (the Wikidata DAG) is: which export to take lives
in ``refactx_pipeline/scheduling/exports.py``, the stages in ``refactx_pipeline`` (``graph/stage.py``
and the stages the Wikidata build shares, ``stages/``; the stage table: ``orchestration/pipeline.py``),
the Python tasks' bodies in ``scheduling/dagtasks.py`` (the same functions the Wikidata DAG calls: ``branches``, ``run_stage``,
``record_run``)::

    find_export -> vocabularies -> graph -> verbalize
      -> vocabulary[i]: tokenize -> prefix_rows -> load -> validate -> activate   (one per vocabulary)
      -> record_run

- ``find_export``: a sensor in reschedule mode. Scheduled, it takes the newest complete export
  under ``graph.exports_root`` (dated folders ``YYYYMMDD``, complete once they hold
  ``graph.export_marker``, or, with no marker configured, every configured input file) that is
  newer than every export already built; until one lands it pokes again, and when none lands
  before its timeout the run is skipped. On demand (param ``export``) it takes that export.
- Every stage gets the run's config file, ``paths.dump_date`` (the export's date) and
  ``graph.export_dir`` (its folder: the config's relative input paths are under it), and the
  DAG run's id, as the Wikidata DAG's stages do; a branch its vocabulary, validate and
  activate the build the branch's load made.
- ``record_run``: the run's counts into the catalog's ``runs`` table (``refactx-index
  builds``); it fails the run when any task failed.

Nothing is read from the config when this file is parsed.

Per environment (read when the file is parsed; Airflow knobs):
- ``REFACTX_GRAPH_CONFIG``: the config file (read by the tasks when they run; required);
  ``REFACTX__<SECTION>__<FIELD>`` variables override it in every task.
- ``REFACTX_GRAPH_SCHEDULE``: when to look for a new export (``@hourly``); ``none`` disables it.
- ``REFACTX_EXPORT_POKE_SECONDS`` (300) and ``REFACTX_EXPORT_WAIT_SECONDS`` (3300): how often
  and how long ``find_export`` looks before the run is skipped.
- ``REFACTX_SPARK_CONN_ID``, ``REFACTX_PY_FILES``, ``REFACTX_SPARK_SUBMIT``, ``REFACTX_JAR``,
  ``PYSPARK_PYTHON``, ``REFACTX_TASK_RETRIES``: as for the Wikidata DAG (docs/airflow.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, PokeReturnValue, TriggerRule, chain, task, task_group

from refactx_pipeline.jvm import jar_path
from refactx_pipeline.orchestration.pipeline import PER_VOCABULARY_STAGES
from refactx_pipeline.orchestration.pipeline import stage as pipeline_stage

STAGE_ENTRY_POINT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)
DAG_ID = "refactx_graph"

# Jinja expressions of what earlier tasks of the run handed on
FOUND = "ti.xcom_pull(task_ids='find_export')"  # {config, dump_date, export_dir}
BRANCH = "ti.xcom_pull(task_ids='vocabularies')[ti.map_index]"  # {name, vocabulary, counts_file}
LOADED = "ti.xcom_pull(task_ids='vocabulary.load', map_indexes=ti.map_index)"  # {vocabulary: build id}


def spark_submit() -> str:
    """The spark-submit of this environment: the pinned pyspark's, beside the interpreter."""
    explicit = os.environ.get("REFACTX_SPARK_SUBMIT")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def schedule() -> str | None:
    value = os.environ.get("REFACTX_GRAPH_SCHEDULE", "@hourly").strip()
    return None if value.lower() in ("", "none") else value


def stage_args(stage: str, branch: bool) -> list[str]:
    """The stage's arguments: the run's config file, export and run id, in a branch its
    vocabulary, for validate and activate the build the branch's load made."""
    args = [
        stage,
        "--config", f"{{{{ {FOUND}['config'] }}}}",
        "--set", f"paths.dump_date={{{{ {FOUND}['dump_date'] }}}}",
        "--set", f"graph.export_dir={{{{ {FOUND}['export_dir'] }}}}",
        "--run-id", "{{ run_id }}",
    ]
    if branch:
        args += [
            "--set", f"tokenize.vocabularies={{{{ {BRANCH}['vocabulary'] }}}}",
            "--set", f"paths.counts_file={{{{ {BRANCH}['counts_file'] }}}}",
        ]
    if pipeline_stage(stage).takes_builds:
        args += ["--build-id", f"{{{{ {BRANCH}['name'] }}}}={{{{ {LOADED}[{BRANCH}['name']] }}}}"]
    return args


@task
def run_stage(stage: str, argv: list[str]) -> dict | None:
    """A stage that needs no Spark, in the task's own process; returns (XCom) the load's builds."""
    from refactx_pipeline.scheduling.dagtasks import run_stage as run

    return run(stage, argv)


def stage_task(stage: str, branch: bool = False, **task_args):
    """The task of one stage: spark-submit when it needs Spark, else a Python task."""
    args = stage_args(stage, branch)
    if not pipeline_stage(stage).needs_spark:
        return run_stage.override(task_id=stage, **task_args)(stage, args[1:])
    suffix = f"_{{{{ {BRANCH}['name'] }}}}" if branch else ""
    return SparkSubmitOperator(
        task_id=stage,
        application=str(STAGE_ENTRY_POINT),
        application_args=args,
        conn_id=os.environ.get("REFACTX_SPARK_CONN_ID", "refactx_spark"),
        spark_binary=spark_submit(),
        name=f"refactx_graph_{stage}{suffix}_{{{{ {FOUND}['dump_date'] }}}}",
        py_files=os.environ.get("REFACTX_PY_FILES") or None,
        jars=os.environ.get("REFACTX_JAR") or str(jar_path()),
        conf={"spark.yarn.maxAppAttempts": "1"},  # Airflow owns retries
        env_vars={"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
        **task_args,
    )


@task.sensor(
    task_id="find_export",
    mode="reschedule",  # frees the worker slot between pokes
    poke_interval=float(os.environ.get("REFACTX_EXPORT_POKE_SECONDS", "300")),
    timeout=float(os.environ.get("REFACTX_EXPORT_WAIT_SECONDS", "3300")),
    soft_fail=True,  # no new export: the run is skipped, not failed
)
def find_export(params=None) -> PokeReturnValue:
    from refactx_pipeline.scheduling import exports

    found = exports.find_export(exports.config_file(dict(os.environ)), params.get("export"))
    return PokeReturnValue(is_done=found is not None, xcom_value=found)


@task
def vocabularies(found: dict) -> list[dict]:
    from refactx_pipeline.scheduling.dagtasks import branches

    return branches(found["config"])


@task_group(group_id="vocabulary")
def vocabulary_branch(branch: dict) -> None:
    chain(*(
        # tokenize's staging and rejects datasets are shared by the branches: one at a time
        stage_task(s, branch=True, **({"max_active_tis_per_dagrun": 1} if s == "tokenize" else {}))
        for s in PER_VOCABULARY_STAGES
    ))


@task(trigger_rule=TriggerRule.ALL_DONE)
def record_run(ti=None, run_id=None) -> dict | None:
    """Record the run (when an export was taken), then fail when any task of the run failed."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from refactx_pipeline.scheduling.dagtasks import record_run as record

    found = ti.xcom_pull(task_ids="find_export")
    row = record(found, [b["name"] for b in ti.xcom_pull(task_ids="vocabularies") or []], run_id) if found else None
    if ti.get_ti_count(dag_id=ti.dag_id, run_ids=[run_id], states=["failed", "upstream_failed"]):
        raise AirflowFailException(f"a task of this run failed (run recorded: {row})")
    if row is None:
        raise AirflowSkipException("no export was taken: nothing to record")
    return row


with DAG(
    dag_id=DAG_ID,
    description="Rebuild the refactx fact indexes of a team's graph on each new export",
    schedule=schedule(),
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two runs of one export would share its stage directories
    default_args={
        "retries": int(os.environ.get("REFACTX_TASK_RETRIES", "1")),
        "retry_delay": timedelta(minutes=5),
    },
    params={
        "export": Param(
            None,
            type=["null", "string"],
            pattern=r"^[0-9]{8}$",
            description="Build this export (a folder YYYYMMDD under graph.exports_root) now; empty: the "
                        "newest new complete export",
        ),
    },
    tags=["refactx"],
    doc_md=__doc__,
) as dag:
    found = find_export()
    branches = vocabularies(found)
    graph, verbalize = stage_task("graph"), stage_task("verbalize")
    chain(branches, graph, verbalize)
    verbalize >> vocabulary_branch.expand(branch=branches) >> record_run()
