"""Airflow DAG ``refactx_graph``: rebuild a team's graph index on each new export, one branch per vocabulary.

Wiring only, and only what is this DAG's own (its sensor, its params, the chain of its first
stages), as ``dags/refactx_build.py`` (the Wikidata DAG) is; the rest is wired once for both in
``refactx_pipeline/scheduling/wiring.py``. Which export to take lives in
``refactx_pipeline/scheduling/exports.py``, the stages in ``refactx_pipeline`` (``graph/stage.py``
and the stages the Wikidata build shares, ``stages/``; the stage table:
``orchestration/pipeline.py``), the Python tasks' bodies in ``scheduling/dagtasks.py`` (the same
functions the Wikidata DAG calls: ``branches``, ``run_stage``, ``record_run``)::

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
- ``record_run``: the run's counts into the catalog's ``runs`` table (``refactx-pipeline
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

import os

from airflow.sdk import DAG, Param, PokeReturnValue, chain, task

from refactx_pipeline.scheduling.wiring import Wiring, dag_arguments, schedule, vocabularies

DAG_ID = "refactx_graph"

WIRING = Wiring(
    sensor="find_export",
    input_args=("--set", "graph.export_dir={{ FOUND['export_dir'] }}"),
    application_prefix="refactx_graph_",
    nothing_taken="no export was taken: nothing to record",
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


with DAG(
    dag_id=DAG_ID,
    description="Rebuild the refactx fact indexes of a team's graph on each new export",
    schedule=schedule("REFACTX_GRAPH_SCHEDULE", "@hourly"),
    params={
        "export": Param(
            None,
            type=["null", "string"],
            pattern=r"^[0-9]{8}$",
            description="Build this export (a folder YYYYMMDD under graph.exports_root) now; empty: the "
                        "newest new complete export",
        ),
    },
    doc_md=__doc__,
    **dag_arguments(),
) as dag:
    found = find_export()
    branches = vocabularies(found)
    graph, verbalize = WIRING.stage_task("graph"), WIRING.stage_task("verbalize")
    chain(branches, graph, verbalize)
    WIRING.finish(verbalize, branches)
