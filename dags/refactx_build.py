"""Airflow DAG ``refactx_build``: build the fact indexes of a new dump, one branch per vocabulary.

Wiring only; what each task does lives in ``refactx_pipeline`` (stages: ``stages/<stage>.py`` and
``orchestration/pipeline.py``; dump finding: ``scheduling/dumps.py``; the Python tasks' bodies:
``scheduling/dagtasks.py``; run history: ``scheduling/history.py``)::

    find_dump -> vocabularies -> parse -> sitelinks_wanted -> [sitelinks] -> labels -> verbalize
      -> vocabulary[i]: tokenize -> prefix_rows -> load -> validate -> activate   (one per vocabulary)
      -> record_run

- ``find_dump``: a sensor in reschedule mode. Scheduled, it takes the newest complete dump
  under the config's ``input.dumps_root`` (dated folders ``YYYYMMDD`` holding the completion
  marker ``input.dump_marker``) that is newer than every dump already built; until one lands it
  pokes again, and when none lands before its timeout it is skipped and so is the whole run.
  On demand (params ``dump_date``, optionally ``dumps``) it takes that dump.
- ``vocabularies``: the configured vocabularies, which the ``vocabulary`` task group is mapped
  over; a failing vocabulary fails its own branch only.
- Spark stages run through ``SparkSubmitOperator`` (``refactx_pipeline/submit.py <stage>``);
  the stages that need no Spark (load, activate) run as Python tasks. Airflow owns retries:
  Spark's own application re-attempts are off.
- Every stage gets the DAG run's id (``--run-id``): the first claims the dump date's work
  directory for this run, and a run of the same dump date beside it is refused before it
  writes (``refactx_pipeline/orchestration/workdir.py``); ``record_run`` releases it.
- The load task returns the build it made (XCom); the branch's validate and activate are
  handed it (``--build-id <vocabulary>=<id>``), so they work on that build and no other.
- ``record_run``: the run's counts into the catalog's ``runs`` table (``refactx-index builds``);
  it fails the run when a vocabulary was not activated.

Nothing is read from the config when this file is parsed: ``find_dump`` resolves the config
file of the environment when it runs and hands it on (XCom) to every task.

Per environment (read when the file is parsed; Airflow knobs, not the pipeline's config):
- ``REFACTX_CONFIG`` / ``REFACTX_ENV``: the config file (read by the tasks, when they run);
  ``REFACTX__<SECTION>__<FIELD>`` variables override it in every task.
- ``REFACTX_SPARK_CONN_ID``: the Airflow connection naming the Spark master (``refactx_spark``).
- ``REFACTX_BUILD_SCHEDULE``: when to look for a new dump (``@daily``); ``none`` disables it.
- ``REFACTX_DUMP_POKE_SECONDS`` (1800) and ``REFACTX_DUMP_WAIT_SECONDS`` (82800): how often
  and how long ``find_dump`` looks before the run is skipped.
- ``REFACTX_PY_FILES``, ``REFACTX_SPARK_SUBMIT``, ``REFACTX_JAR``, ``PYSPARK_PYTHON``: see
  docs/airflow.md. ``REFACTX_TASK_RETRIES``: retries per task (default 1).
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

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# the installed file spark-submit runs for every stage; located without importing it
STAGE_ENTRY_POINT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)
DAG_ID = "refactx_build"

# Jinja expressions of what earlier tasks of the run handed on
FOUND = "ti.xcom_pull(task_ids='find_dump')"  # {config, dump_date, dumps}
BRANCH = "ti.xcom_pull(task_ids='vocabularies')[ti.map_index]"  # {name, vocabulary, counts_file}
# {vocabulary: build id} of this branch's load
LOADED = "ti.xcom_pull(task_ids='vocabulary.load', map_indexes=ti.map_index)"


def spark_submit() -> str:
    """The spark-submit of this environment: the pinned pyspark's, beside the interpreter."""
    explicit = os.environ.get("REFACTX_SPARK_SUBMIT")
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


def schedule() -> str | None:
    value = os.environ.get("REFACTX_BUILD_SCHEDULE", "@daily").strip()
    return None if value.lower() in ("", "none") else value


def stage_args(stage: str, branch: bool) -> list[str]:
    """The stage's arguments: the run's config file, dump and run id, in a branch its
    vocabulary, and for validate and activate the build the branch's load made (``--set``
    comes last in Config.load, so it wins over the file and the environment)."""
    args = [
        stage,
        "--config", f"{{{{ {FOUND}['config'] }}}}",
        "--set", f"paths.dump_date={{{{ {FOUND}['dump_date'] }}}}",
        "--set", f"input.dumps={{{{ {FOUND}['dumps'] | join(',') }}}}",
        "--run-id", "{{ run_id }}",
    ]
    if branch:
        args += [
            "--set", f"tokenize.vocabularies={{{{ {BRANCH}['vocabulary'] }}}}",
            # branches share the stage directories: each writes counts.<vocabulary>.json there
            "--set", f"paths.counts_file={{{{ {BRANCH}['counts_file'] }}}}",
        ]
    if pipeline_stage(stage).takes_builds:
        args += ["--build-id", f"{{{{ {BRANCH}['name'] }}}}={{{{ {LOADED}[{BRANCH}['name']] }}}}"]
    return args


@task
def run_stage(stage: str, argv: list[str]) -> dict | None:
    """A stage that needs no Spark, in the task's own process (``Stage.needs_spark`` False);
    returns (XCom) what the branch's later tasks are handed: the load's build ids."""
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
        name=f"refactx_{stage}{suffix}_{{{{ {FOUND}['dump_date'] }}}}",
        py_files=os.environ.get("REFACTX_PY_FILES") or None,
        # the project jar must be on the driver's classpath, which a running JVM cannot
        # extend: spark-submit's --jars
        jars=os.environ.get("REFACTX_JAR") or str(jar_path()),
        # Airflow retries the task; Spark must not re-attempt the application on its own
        conf={"spark.yarn.maxAppAttempts": "1"},
        env_vars={"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
        **task_args,
    )


@task.sensor(
    task_id="find_dump",
    mode="reschedule",  # frees the worker slot between pokes
    poke_interval=float(os.environ.get("REFACTX_DUMP_POKE_SECONDS", "1800")),
    timeout=float(os.environ.get("REFACTX_DUMP_WAIT_SECONDS", str(23 * 3600))),
    soft_fail=True,  # no new dump: the run is skipped, not failed
)
def find_dump(params=None) -> PokeReturnValue:
    from refactx_pipeline.scheduling import dagtasks

    found = dagtasks.find_dump(dagtasks.config_file(PROJECT_ROOT), params.get("dump_date"), params.get("dumps"))
    return PokeReturnValue(is_done=found is not None, xcom_value=found)


@task
def vocabularies(found: dict) -> list[dict]:
    from refactx_pipeline.scheduling.dagtasks import branches

    return branches(found["config"])


@task.branch
def sitelinks_wanted(found: dict) -> str:
    from refactx_pipeline.scheduling.dagtasks import wants_sitelinks

    return "sitelinks" if wants_sitelinks(found["config"]) else "labels"


@task_group(group_id="vocabulary")
def vocabulary_branch(branch: dict) -> None:
    # ``branch`` (an element of ``vocabularies``) is what the group is mapped over; the tasks
    # read it through BRANCH in their templates, which spark-submit's arguments need
    chain(*(
        # tokenize's staging and rejects datasets are shared by the branches: one at a time
        stage_task(s, branch=True, **({"max_active_tis_per_dagrun": 1} if s == "tokenize" else {}))
        for s in PER_VOCABULARY_STAGES
    ))


@task(trigger_rule=TriggerRule.ALL_DONE)
def record_run(ti=None, run_id=None) -> dict | None:
    """Record the run (when a dump was taken), then fail when any task of the run failed: this
    is the DAG's only leaf, so its state is the run's."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from refactx_pipeline.scheduling.dagtasks import record_run as record

    found = ti.xcom_pull(task_ids="find_dump")
    row = record(found, [b["name"] for b in ti.xcom_pull(task_ids="vocabularies") or []], run_id) if found else None
    if ti.get_ti_count(dag_id=ti.dag_id, run_ids=[run_id], states=["failed", "upstream_failed"]):
        raise AirflowFailException(f"a task of this run failed (run recorded: {row})")
    if row is None:
        raise AirflowSkipException("no dump was taken: nothing to record")
    return row


with DAG(
    dag_id=DAG_ID,
    description="Build the refactx fact indexes of each new Wikidata truthy dump",
    schedule=schedule(),
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    # one run at a time: two runs of one dump date would share its stage directories (a build of
    # it from elsewhere is refused at its first stage: refactx_pipeline/orchestration/workdir.py)
    max_active_runs=1,
    default_args={
        "retries": int(os.environ.get("REFACTX_TASK_RETRIES", "1")),
        "retry_delay": timedelta(minutes=5),
    },
    params={
        "dump_date": Param(
            None,
            type=["null", "string"],
            pattern=r"^[0-9A-Za-z_-]+$",
            description="Build this dump date now (empty: the newest new dump under input.dumps_root)",
        ),
        "dumps": Param(
            None,
            type=["null", "array"],
            items={"type": "string"},
            minItems=1,
            description="N-Triples files, directories or globs of that dump (empty: its folder "
                        "under input.dumps_root, else the config's input.dumps)",
        ),
    },
    tags=["refactx"],
    doc_md=__doc__,
) as dag:
    found = find_dump()
    branches = vocabularies(found)
    choose = sitelinks_wanted(found)
    parse, sitelinks, verbalize = stage_task("parse"), stage_task("sitelinks"), stage_task("verbalize")
    labels = stage_task("labels", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)  # sitelinks may be skipped
    chain(branches, parse, choose, [sitelinks, labels])
    chain(sitelinks, labels, verbalize)
    verbalize >> vocabulary_branch.expand(branch=branches) >> record_run()
