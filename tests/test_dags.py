"""The DAGs of dags/: real Airflow parsing (DagBag), the task chain, rendered templates,
and every per-environment config file loading through Config.

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
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
AIRFLOW_HOME = tempfile.mkdtemp(prefix="refactx-airflow-home-")

if "airflow" in sys.modules:  # pragma: no cover - only when another module imported it first
    pytest.fail("airflow was imported before tests/test_dags.py could set AIRFLOW_HOME", pytrace=False)
os.environ["AIRFLOW_HOME"] = AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)

# Importing airflow configures logging: a root StreamHandler on the sys.stdout of that
# moment, which under pytest is a capture file closed at the end of the session; py4j's
# log lines at interpreter exit would then fail to write. Put the root logger back.
_root = logging.getLogger()
_root_state = (list(_root.handlers), _root.level)

import pendulum  # noqa: E402
from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402

from refactx_pipeline.jvm import jar_path  # noqa: E402

SUBMIT = Path(importlib.util.find_spec("refactx_pipeline.submit").origin)
from refactx_pipeline.config import Config  # noqa: E402

_root.handlers[:], _root.level = _root_state[0], _root_state[1]

FULL_CHAIN = [
    "parse",
    "sitelinks",
    "labels",
    "verbalize",
    "tokenize",
    "prefix_rows",
    "load",
    "validate",
    "activate",
]
# Variables of the DAG's environment that change what the DAG file builds
DAG_ENV = (
    "REFACTX_CONFIG",
    "REFACTX_ENV",
    "REFACTX_BUILD_SCHEDULE",
    "REFACTX_PY_FILES",
    "REFACTX_SPARK_CONN_ID",
    "REFACTX_SPARK_SUBMIT",
    "REFACTX_TASK_RETRIES",
)


def parse_dags(monkeypatch: pytest.MonkeyPatch, **env: str) -> DagBag:
    """A DagBag of dags/ parsed with exactly ``env`` as the DAG environment."""
    for name in DAG_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return DagBag(dag_folder=str(DAGS))


@pytest.fixture()
def dagbag(monkeypatch):
    return parse_dags(monkeypatch)


def linear_order(dag) -> list[str]:
    """The task ids of a DAG that must be one straight chain, in order."""
    roots = [t for t in dag.tasks if not t.upstream_task_ids]
    assert len(roots) == 1, f"expected one first task, got {[t.task_id for t in roots]}"
    order, task = [], roots[0]
    while True:
        order.append(task.task_id)
        assert len(task.downstream_task_ids) <= 1, f"{task.task_id} fans out: {task.downstream_task_ids}"
        if not task.downstream_task_ids:
            break
        task = dag.get_task(next(iter(task.downstream_task_ids)))
    assert len(order) == len(dag.tasks), "some tasks are not on the chain"
    return order


def run_context(dag, ds: str, conf: dict | None = None) -> dict:
    """The template context of a run: validated params (defaults merged with ``conf``) and dates."""
    params = copy.deepcopy(dag.params)
    params.update(conf or {})
    logical_date = pendulum.parse(ds)
    return {
        "dag": dag,
        "params": params.validate(),
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "logical_date": logical_date,
        "data_interval_start": logical_date,
        "data_interval_end": logical_date.add(weeks=1),
        "run_id": f"scheduled__{ds}",
    }


def rendered(task, context: dict):
    """A copy of ``task`` with every templated field rendered (rendering mutates in place)."""
    task = copy.deepcopy(task)
    task.render_template_fields(context)
    return task


def set_values(args: list[str]) -> dict[str, str]:
    values = {}
    for flag, value in zip(args, args[1:]):
        if flag == "--set":
            key, _, val = value.partition("=")
            values[key] = val
    return values


def test_airflow_home_is_temporary():
    from airflow import settings

    assert Path(settings.AIRFLOW_HOME).resolve() == Path(AIRFLOW_HOME).resolve()
    assert Path(settings.AIRFLOW_HOME).resolve() != (Path.home() / "airflow").resolve()


def test_every_dag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert dagbag.size() >= 1
    assert "refactx_build" in dagbag.dags
    for dag_id, dag in dagbag.dags.items():
        assert dag.tasks, f"{dag_id} has no tasks"
        assert Path(dag.fileloc).resolve().parent == DAGS


def test_build_chains_the_stages_in_pipeline_order(dagbag):
    dag = dagbag.dags["refactx_build"]
    # conf/local.toml names the enwiki page + page_props dumps, so sitelinks is on the chain
    assert linear_order(dag) == FULL_CHAIN
    for task in dag.tasks:
        assert isinstance(task, SparkSubmitOperator)
        # the installed package's entry point, not a file of the checkout
        assert Path(task.application) == SUBMIT
        assert "site-packages" in SUBMIT.parts
        assert task.application_args[0] == task.task_id
        assert task._conn_id == "refactx_spark"
        assert task.retries == 1
        # the spark-submit of the pinned pyspark, not whatever is first on the PATH
        assert Path(task._spark_binary) == Path(sys.executable).parent / "spark-submit"
        assert Path(task._spark_binary).exists()
        # the project jar (the parse lexer) goes to the driver's classpath with --jars
        assert task.jars == str(jar_path())


def test_schedule_is_weekly_without_catchup(dagbag):
    dag = dagbag.dags["refactx_build"]
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    assert dag.schedule == "@weekly"
    assert type(dag.timetable).__name__ == "CronTriggerTimetable"


def test_sitelinks_is_skipped_without_sql_dumps(monkeypatch, tmp_path):
    config = tmp_path / "no-sql.toml"
    config.write_text('[input]\ndumps = ["a.nt"]\n')
    dag = parse_dags(monkeypatch, REFACTX_CONFIG=str(config), REFACTX_BUILD_SCHEDULE="none").dags["refactx_build"]
    assert linear_order(dag) == [s for s in FULL_CHAIN if s != "sitelinks"]
    assert dag.schedule is None
    assert dag.params["dumps"] == ["a.nt"]
    args = rendered(dag.get_task("parse"), run_context(dag, "2026-03-02")).application_args
    assert args[:3] == ["parse", "--config", str(config)]


def test_every_templated_field_renders_with_the_run_date(dagbag):
    dag = dagbag.dags["refactx_build"]
    context = run_context(dag, "2026-01-05")
    for task in dag.tasks:
        task_r = rendered(task, context)
        for field in task_r.template_fields:
            assert "{{" not in str(getattr(task_r, field)), f"{task.task_id}.{field} left unrendered"
        args = task_r.application_args
        assert args[:3] == [task.task_id, "--config", str(ROOT / "conf" / "local.toml")]
        values = set_values(args)
        assert values["paths.dump_date"] == "20260105"
        assert values["input.dumps"] == "../shared/data/wikidata/truthy-2018-sample500-en.nt"
        assert task_r.name == f"refactx_{task.task_id}_20260105"
        assert Path(task_r.env_vars["PYSPARK_PYTHON"]).name.startswith("python")
        # the installed wheels are imported, not the checkout
        assert "PYTHONPATH" not in task_r.env_vars
        # what the job will see: the rendered arguments parsed by the stages' own parser
        import argparse

        from refactx_pipeline.config import add_config_arguments, config_from_args

        cfg = config_from_args(add_config_arguments(argparse.ArgumentParser()).parse_args(args[1:]))
        assert cfg.build_dir() == Path("build") / "wikidata" / "20260105"
        assert cfg.input.dumps == ("../shared/data/wikidata/truthy-2018-sample500-en.nt",)


def test_params_override_dump_date_and_dumps(dagbag):
    dag = dagbag.dags["refactx_build"]
    context = run_context(dag, "2026-01-05", {"dump_date": "20180328", "dumps": ["/d/a.nt.bz2", "/d/b/"]})
    values = set_values(rendered(dag.get_task("tokenize"), context).application_args)
    assert values["paths.dump_date"] == "20180328"
    assert values["input.dumps"] == "/d/a.nt.bz2,/d/b/"


def test_params_reject_a_dump_date_that_is_not_a_path_component(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["refactx_build"]
    with pytest.raises(ParamValidationError):
        run_context(dag, "2026-01-05", {"dump_date": "../../etc"})
    with pytest.raises(ParamValidationError):
        run_context(dag, "2026-01-05", {"dumps": []})


def test_broken_config_is_an_import_error(monkeypatch, tmp_path):
    config = tmp_path / "broken.toml"
    config.write_text("[input]\nno_such_key = 1\n")
    bag = parse_dags(monkeypatch, REFACTX_CONFIG=str(config))
    assert "refactx_build" not in bag.dags
    (error,) = bag.import_errors.values()
    assert "no_such_key" in error


@pytest.mark.parametrize("stage", FULL_CHAIN)
def test_entry_point_reaches_every_stage(stage, tmp_path):
    """What spark-submit runs: the installed `refactx_pipeline/submit.py <stage> ...` as a file,
    from another directory. `--help` makes the stage's argument parser answer without Spark."""
    from refactx_pipeline.pipeline import stage as stage_named

    assert stage_named(stage).name == stage
    result = subprocess.run(
        [sys.executable, str(SUBMIT), stage, "--help"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--config" in result.stdout and "--set" in result.stdout


def test_entry_point_prints_its_own_path(tmp_path):
    result = subprocess.run([sys.executable, "-m", "refactx_pipeline.submit", "--path"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == SUBMIT


def test_entry_point_rejects_an_unknown_stage(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SUBMIT), "no_such_stage"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "parse,sitelinks,labels" in result.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "conf").glob("*.toml")), ids=lambda p: p.name)
def test_every_conf_file_loads(path):
    cfg = Config.load(path, env={})
    assert cfg.input.dumps, f"{path.name} names no dump"
    assert cfg.tokenize.vocabularies, f"{path.name} names no vocabulary"
    assert cfg.spark.master


def test_local_conf_points_at_the_shared_sample():
    cfg = Config.load(ROOT / "conf" / "local.toml", env={})
    assert cfg.pg.dsn == ""  # embedded PostgreSQL
    assert cfg.spark.master.startswith("local")
    # relative to the project root, where the CLI and `airflow dags test` run
    for path in [*cfg.input.dumps, cfg.input.enwiki_page, cfg.input.enwiki_page_props]:
        assert path.startswith("../shared/")
    assert [(v.name, v.path) for v in cfg.tokenize.vocabularies] == [("qwen2.5", "../shared/tokenizers/qwen2.5")]
    shared = ROOT.parent / "shared"
    if shared.exists():
        for path in [*cfg.input.dumps, cfg.input.enwiki_page, cfg.input.enwiki_page_props, cfg.tokenize.vocabularies[0].path]:
            assert (ROOT / path).exists(), path
