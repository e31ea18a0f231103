"""Airflow DAG ``refactx_build``: build the fact indexes of a new dump, one branch per vocabulary.

Wiring only, and only what is this DAG's own (its sensor, its params, the chain of its first
stages): the stage tasks, the vocabulary branches and ``record_run`` are wired once for both
DAGs in ``refactx_pipeline/scheduling/wiring.py``. What each task does lives in
``refactx_pipeline`` (stages: ``stages/<stage>.py`` and ``orchestration/pipeline.py``; dump
finding: ``scheduling/dumps.py``; the Python tasks' bodies: ``scheduling/dagtasks.py``; run
history: ``scheduling/history.py``)::

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
- ``record_run``: the run's counts into the catalog's ``runs`` table (``refactx-pipeline builds``);
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

import os
from pathlib import Path

from airflow.sdk import DAG, Param, PokeReturnValue, TriggerRule, chain, task

from refactx_pipeline.scheduling.wiring import Wiring, dag_arguments, schedule, vocabularies

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DAG_ID = "refactx_build"

WIRING = Wiring(
    sensor="find_dump",
    input_args=("--set", "input.dumps={{ FOUND['dumps'] | join(',') }}"),
    application_prefix="refactx_",
    nothing_taken="no dump was taken: nothing to record",
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


@task.branch
def sitelinks_wanted(found: dict) -> str:
    from refactx_pipeline.scheduling.dagtasks import wants_sitelinks

    return "sitelinks" if wants_sitelinks(found["config"]) else "labels"


with DAG(
    dag_id=DAG_ID,
    description="Build the refactx fact indexes of each new Wikidata truthy dump",
    schedule=schedule("REFACTX_BUILD_SCHEDULE", "@daily"),
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
    doc_md=__doc__,
    **dag_arguments(),
) as dag:
    found = find_dump()
    branches = vocabularies(found)
    choose = sitelinks_wanted(found)
    parse, sitelinks, verbalize = (WIRING.stage_task(s) for s in ("parse", "sitelinks", "verbalize"))
    labels = WIRING.stage_task("labels", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)  # sitelinks may be skipped
    chain(branches, parse, choose, [sitelinks, labels])
    chain(sitelinks, labels, verbalize)
    WIRING.finish(verbalize, branches)
