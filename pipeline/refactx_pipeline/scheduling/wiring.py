"""The wiring both Airflow DAGs share (``dags/refactx_build.py``, ``dags/refactx_graph.py``).

A DAG file keeps only what is its own: its sensor, its params and the chain of its first
stages. Everything after them is the same in both and written once here: the stage tasks
(spark-submit of ``refactx_pipeline/submit.py`` for a Spark stage, a Python task for the others),
their templated arguments, the ``vocabularies`` task, the ``vocabulary`` task group mapped over
the configured vocabularies (tokenize -> prefix_rows -> load -> validate -> activate) and
``record_run``, the DAG's only leaf. ``Wiring`` holds what differs: the sensor's task id, the
arguments that point a stage at the run's input, the prefix of the Spark application names.

This is the one module of the package that imports Airflow; only the DAG files import it.

Per environment (read when a DAG file is parsed):
- ``REFACTX_SPARK_CONN_ID``: the Airflow connection naming the Spark master (``refactx_spark``).
- ``REFACTX_PY_FILES``, ``REFACTX_SPARK_SUBMIT``, ``REFACTX_JAR``, ``PYSPARK_PYTHON``: see
  docs/airflow.md. ``REFACTX_TASK_RETRIES``: retries per task (default 1).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import TriggerRule, chain, task, task_group

from refactx_pipeline.jvm import jar_path
from refactx_pipeline.orchestration.table import PER_VOCABULARY_STAGES
from refactx_pipeline.orchestration.table import spec as pipeline_stage

# the installed file spark-submit runs for every stage; located without importing it
STAGE_ENTRY_POINT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)

# Jinja expressions of what earlier tasks of the run handed on
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


def schedule(variable: str, default: str) -> str | None:
    """The DAG's schedule from ``variable`` (``default`` when unset); ``none`` disables it."""
    value = os.environ.get(variable, default).strip()
    return None if value.lower() in ("", "none") else value


def dag_arguments() -> dict[str, Any]:
    """What both DAGs are built with besides their id, schedule, params and text: one run at
    a time (two runs of one dump date would share its stage directories; a build of it from
    elsewhere is refused at its first stage, refactx_pipeline/orchestration/workdir.py), no
    catch-up, Airflow's retries."""
    return {
        "start_date": pendulum.datetime(2025, 1, 1, tz="UTC"),
        "catchup": False,
        "max_active_runs": 1,
        "default_args": {
            "retries": int(os.environ.get("REFACTX_TASK_RETRIES", "1")),
            "retry_delay": timedelta(minutes=5),
        },
        "tags": ["refactx"],
    }


@task
def run_stage(stage: str, argv: list[str]) -> dict | None:
    """A stage that needs no Spark, in the task's own process (``Stage.needs_spark`` False);
    returns (XCom) what the branch's later tasks are handed: the load's build ids."""
    from refactx_pipeline.scheduling.dagtasks import run_stage as run

    return run(stage, argv)


@task
def vocabularies(found: dict) -> list[dict]:
    from refactx_pipeline.scheduling.dagtasks import branches

    return branches(found["config"])


@dataclass(frozen=True)
class Wiring:
    """What one DAG's shared tasks need to know of it."""

    sensor: str  # the task id of the sensor whose XCom is {config, dump_date, ...}
    # the stage arguments, after the config and dump date, that point it at the run's input
    # (Jinja templates; the word FOUND in them stands for the sensor's XCom)
    input_args: tuple[str, ...]
    application_prefix: str  # Spark application names: <prefix><stage>[_<vocabulary>]_<dump date>
    nothing_taken: str  # why record_run skips when the sensor took nothing

    @property
    def found(self) -> str:
        """The Jinja expression of the sensor's XCom."""
        return f"ti.xcom_pull(task_ids='{self.sensor}')"

    def stage_args(self, stage: str, branch: bool) -> list[str]:
        """The stage's arguments: the run's config file, input and run id, in a branch its
        vocabulary, and for validate and activate the build the branch's load made (``--set``
        comes last in Config.load, so it wins over the file and the environment)."""
        found = self.found
        args = [
            stage,
            "--config", f"{{{{ {found}['config'] }}}}",
            "--set", f"paths.dump_date={{{{ {found}['dump_date'] }}}}",
            *(arg.replace("FOUND", found) for arg in self.input_args),
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

    def stage_task(self, stage: str, branch: bool = False, **task_args):
        """The task of one stage: spark-submit when it needs Spark, else a Python task."""
        args = self.stage_args(stage, branch)
        if not pipeline_stage(stage).needs_spark:
            return run_stage.override(task_id=stage, **task_args)(stage, args[1:])
        suffix = f"_{{{{ {BRANCH}['name'] }}}}" if branch else ""
        return SparkSubmitOperator(
            task_id=stage,
            application=str(STAGE_ENTRY_POINT),
            application_args=args,
            conn_id=os.environ.get("REFACTX_SPARK_CONN_ID", "refactx_spark"),
            spark_binary=spark_submit(),
            name=f"{self.application_prefix}{stage}{suffix}_{{{{ {self.found}['dump_date'] }}}}",
            py_files=os.environ.get("REFACTX_PY_FILES") or None,
            # the project jar must be on the driver's classpath, which a running JVM cannot
            # extend: spark-submit's --jars
            jars=os.environ.get("REFACTX_JAR") or str(jar_path()),
            # Airflow retries the task; Spark must not re-attempt the application on its own
            conf={"spark.yarn.maxAppAttempts": "1"},
            env_vars={"PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
            **task_args,
        )

    def vocabulary_branches(self, branches) -> Any:
        """The ``vocabulary`` task group, mapped over ``branches`` (the ``vocabularies`` task):
        the per-vocabulary stages in order; a failing vocabulary fails its own branch only."""

        @task_group(group_id="vocabulary")
        def vocabulary_branch(branch: dict) -> None:
            # ``branch`` (an element of ``vocabularies``) is what the group is mapped over; the
            # tasks read it through BRANCH in their templates, which spark-submit's arguments need
            chain(*(
                # tokenize's staging and rejects datasets are shared by the branches: one at a time
                self.stage_task(s, branch=True, **({"max_active_tis_per_dagrun": 1} if s == "tokenize" else {}))
                for s in PER_VOCABULARY_STAGES
            ))

        return vocabulary_branch.expand(branch=branches)

    def record_run(self):
        """The DAG's only leaf: record the run (when the sensor took something), then fail when
        any task of the run failed, so its state is the run's."""
        sensor, nothing_taken = self.sensor, self.nothing_taken

        @task(trigger_rule=TriggerRule.ALL_DONE)
        def record_run(ti=None, run_id=None) -> dict | None:
            """Record the run (when a dump or export was taken), then fail when any task of the
            run failed: this is the DAG's only leaf, so its state is the run's."""
            from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

            from refactx_pipeline.scheduling.dagtasks import record_run as record

            found = ti.xcom_pull(task_ids=sensor)
            vocabs = [b["name"] for b in ti.xcom_pull(task_ids="vocabularies") or []]
            row = record(found, vocabs, run_id) if found else None
            if ti.get_ti_count(dag_id=ti.dag_id, run_ids=[run_id], states=["failed", "upstream_failed"]):
                raise AirflowFailException(f"a task of this run failed (run recorded: {row})")
            if row is None:
                raise AirflowSkipException(nothing_taken)
            return row

        return record_run()

    def finish(self, last_shared, branches) -> None:
        """Wire what follows the DAG's own first stages: after ``last_shared`` (verbalize) the
        vocabulary branches, mapped over ``branches`` (the ``vocabularies`` task), then
        ``record_run``."""
        last_shared >> self.vocabulary_branches(branches) >> self.record_run()
