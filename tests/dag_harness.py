"""The one harness of the DAG tests (tests/integration/test_dags.py, tests/integration/test_graph_dag.py): Airflow
imported under a temporary AIRFLOW_HOME, DAG files parsed with exactly the environment a test
gives, and every task's command rendered as a running task instance would.

Airflow reads AIRFLOW_HOME when it is first imported, so this module points it at a
temporary directory before importing anything from airflow: the tests never touch
~/airflow. Parsing DAG files needs no metadata database in Airflow 3, and rendering
templates needs none either when the context is given explicitly.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
AIRFLOW_HOME = tempfile.mkdtemp(prefix="refactx-airflow-home-")

if "airflow" in sys.modules:  # pragma: no cover - only when another module imported it first
    pytest.fail("airflow was imported before tests/dag_harness.py could set AIRFLOW_HOME", pytrace=False)
os.environ["AIRFLOW_HOME"] = AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)

# Importing airflow configures logging: a root StreamHandler on the sys.stdout of that
# moment, which under pytest is a capture file closed at the end of the session; py4j's
# log lines at interpreter exit would then fail to write. Put the root logger back.
_root = logging.getLogger()
_root_state = (list(_root.handlers), _root.level)

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402

_root.handlers[:], _root.level = _root_state[0], _root_state[1]

SUBMIT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)
RUN_ID = "scheduled__2026-01-05T00:00:00+00:00"
REGEN_GOLDEN = os.environ.get("REFACTX_REGEN_GOLDEN") == "1"


def parse_dags(monkeypatch: pytest.MonkeyPatch, dag_env: Iterable[str], path: Path = DAGS, **env: str) -> DagBag:
    """A DagBag of ``path`` (dags/ or one DAG file) parsed with exactly ``env`` as the
    variables of ``dag_env`` (the DAG environment)."""
    for name in dag_env:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return DagBag(dag_folder=str(path))


class RunTaskInstance:
    """What the templates read of a running task instance: its map index and the XComs of
    the sensor, vocabularies and (per map index) the branch's load."""

    def __init__(self, xcoms: dict, map_index: int = -1):
        self.xcoms, self.map_index = xcoms, map_index

    def xcom_pull(self, task_ids: str, key: str = "return_value", map_indexes=None, **_):
        assert key == "return_value"
        value = self.xcoms[task_ids]
        return value if map_indexes is None else value[map_indexes]


def rendered(task, xcoms: dict, map_index: int = -1):
    """A copy of ``task`` with every templated field rendered (rendering mutates in place)."""
    ti = RunTaskInstance(xcoms, map_index)
    task = copy.deepcopy(task)
    task.render_template_fields({"ti": ti, "task_instance": ti, "params": {}, "run_id": RUN_ID})
    return task


def command(task, xcoms: dict, map_index: int) -> list[str] | None:
    """What a task runs, rendered: spark-submit's command line, or the stage call of a Python
    stage task (None for the DAG's own Python tasks)."""
    if isinstance(task, SparkSubmitOperator):
        task = rendered(task, xcoms, map_index)
        return task._get_hook()._build_spark_submit_command(task.application)
    if task.python_callable.__name__ == "run_stage":
        task = rendered(task, xcoms, map_index)
        stage, argv = task.op_args
        return ["run_stage_main", stage, *argv]
    return None


def normalized(value, replacements: list[tuple[str, str]]):
    if value is None:
        return None
    if isinstance(value, list):
        return [normalized(v, replacements) for v in value]
    for old, new in replacements:
        value = value.replace(old, new)
    return value


def golden_view(dag, xcoms: dict, replacements: list[tuple[str, str]]) -> dict:
    """Every task (each map index of the vocabulary branches) with its operator, upstream tasks,
    trigger rule and rendered command, machine paths replaced by placeholders."""
    view = {}
    for task in sorted(dag.tasks, key=lambda t: t.task_id):
        mapped = task.task_id.startswith("vocabulary.")
        for index in range(len(xcoms["vocabularies"])) if mapped else [-1]:
            key = f"{task.task_id}[{index}]" if mapped else task.task_id
            view[key] = {
                "operator": type(task).__name__,
                "upstream": sorted(task.upstream_task_ids),
                "trigger_rule": str(getattr(task.trigger_rule, "value", task.trigger_rule)),
                "command": normalized(command(task, xcoms, index), replacements),
            }
    return view
