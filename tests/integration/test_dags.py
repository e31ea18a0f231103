"""The DAGs of dags/: real Airflow parsing (DagBag), the task chain, rendered templates,
and every per-environment config file loading through Config.

The harness (a temporary AIRFLOW_HOME set before Airflow is imported, parsing, rendering) is
tests/dag_harness.py, shared with tests/integration/test_graph_dag.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..dag_harness import (  # noqa: F401 - first: it sets AIRFLOW_HOME before Airflow is imported
    AIRFLOW_HOME,
    DAGS,
    REGEN_GOLDEN,
    ROOT,
    RUN_ID,
    SUBMIT,
    SparkSubmitOperator,
    command,
    golden_view as _golden_view,
    rendered,
)
from ..dag_harness import parse_dags as _parse_dags

from refactx_pipeline.config import Config  # noqa: E402
from refactx_pipeline.jvm import jar_path  # noqa: E402

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
    "REFACTX_DUMP_POKE_SECONDS",
    "REFACTX_DUMP_WAIT_SECONDS",
    "REFACTX_JAR",
    "REFACTX_PY_FILES",
    "REFACTX_SPARK_CONN_ID",
    "REFACTX_SPARK_SUBMIT",
    "REFACTX_TASK_RETRIES",
    "PYSPARK_PYTHON",
)
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "refactx_build.json"


def parse_dags(monkeypatch: pytest.MonkeyPatch, **env: str):
    """A DagBag of dags/ parsed with exactly ``env`` as the DAG environment."""
    return _parse_dags(monkeypatch, DAG_ENV, **env)


@pytest.fixture()
def dagbag(monkeypatch):
    return parse_dags(monkeypatch)


def run_xcoms(config: Path, dump_date: str = "20260105") -> dict:
    """The XComs find_dump and vocabularies push for ``config`` (their real code), and the
    build ids each branch's load would return (ids 41, 42...)."""
    from refactx_pipeline.scheduling.dagtasks import branches

    vocabularies = branches(str(config))
    return {
        "find_dump": {"config": str(config), "dump_date": dump_date,
                      "dumps": [f"/data/dumps/wikidata/{dump_date}/wikidata-{dump_date}-truthy-BETA.nt.bz2"]},
        "vocabularies": vocabularies,
        "vocabulary.load": [{b["name"]: 41 + i} for i, b in enumerate(vocabularies)],
    }


def golden_view(dag, xcoms: dict) -> dict:
    """The harness's golden view with this DAG's machine paths replaced by placeholders."""
    replacements = [
        (str(jar_path()), "<jar>"),
        (str(SUBMIT.parent.parent), "<site-packages>"),
        (str(Path(sys.executable).parent), "<venv-bin>"),
        (str(ROOT), "<project>"),
    ]
    return _golden_view(dag, xcoms, replacements)


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


def test_every_rendered_command_matches_the_golden_file(monkeypatch):
    """Golden test: regenerate with ``REFACTX_REGEN_GOLDEN=1 ./dev test tests/integration/test_dags.py``
    and review the diff of tests/golden/refactx_build.json."""
    monkeypatch.setenv("AIRFLOW_CONN_REFACTX_SPARK",
                       json.dumps({"conn_type": "spark", "host": "spark://spark-master", "port": 7077}))
    dag = parse_dags(monkeypatch).dags["refactx_build"]
    view = golden_view(dag, run_xcoms(ROOT / "conf" / "prod.toml"))
    if REGEN_GOLDEN:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(view, indent=2, sort_keys=True) + "\n")
    assert view == json.loads(GOLDEN.read_text()), "rendered tasks differ from tests/golden/refactx_build.json"


def test_each_stage_has_its_operator_and_its_place(dagbag):
    from refactx_pipeline.orchestration.pipeline import PER_VOCABULARY_STAGES, stage

    dag = dagbag.dags["refactx_build"]
    for name in FULL_CHAIN:
        task = dag.get_task(f"vocabulary.{name}" if name in PER_VOCABULARY_STAGES else name)
        if stage(name).needs_spark:
            assert isinstance(task, SparkSubmitOperator), name
            assert Path(task.application) == SUBMIT and "site-packages" in SUBMIT.parts
            assert task._conn_id == "refactx_spark"
            assert Path(task._spark_binary) == Path(sys.executable).parent / "spark-submit"
            assert task.jars == str(jar_path())
            assert task.conf == {"spark.yarn.maxAppAttempts": "1"}  # Airflow owns retries
        else:
            assert task.python_callable.__name__ == "run_stage", name
        assert task.retries == 1
        # one branch per vocabulary: the group is mapped, the shared stages are not
        assert (task.task_group.group_id == "vocabulary") == (name in PER_VOCABULARY_STAGES)
    assert type(dag.task_group_dict["vocabulary"]).__name__ == "MappedTaskGroup"
    # tokenize's staging is shared by the branches of a run: one at a time
    assert dag.get_task("vocabulary.tokenize").max_active_tis_per_dagrun == 1


def test_the_sensor_reschedules_and_skips_the_run_when_no_dump_lands(monkeypatch):
    dag = parse_dags(monkeypatch, REFACTX_DUMP_POKE_SECONDS="60", REFACTX_DUMP_WAIT_SECONDS="3600").dags["refactx_build"]
    sensor = dag.get_task("find_dump")
    assert (sensor.mode, sensor.poke_interval, sensor.timeout, sensor.soft_fail) == ("reschedule", 60, 3600, True)
    assert not sensor.upstream_task_ids
    assert dag.catchup is False and dag.max_active_runs == 1
    assert dag.schedule == "@daily"


def test_parsing_reads_no_config_file(monkeypatch, tmp_path):
    """Configuration is read when tasks run: a missing or broken file does not break parsing."""
    for config in (tmp_path / "absent.toml", tmp_path / "broken.toml"):
        if config.name == "broken.toml":
            config.write_text("[input]\nno_such_key = 1\n")
        bag = parse_dags(monkeypatch, REFACTX_CONFIG=str(config), REFACTX_BUILD_SCHEDULE="none")
        assert bag.import_errors == {}
        assert bag.dags["refactx_build"].schedule is None


def test_branches_restrict_the_config_to_their_vocabulary(dagbag):
    """What each branch's job sees: the rendered arguments parsed by the stages' own parser."""
    import argparse

    from refactx_pipeline.config import add_config_arguments, config_from_args

    dag = dagbag.dags["refactx_build"]
    xcoms = run_xcoms(ROOT / "conf" / "local.toml", "20180101")
    xcoms["vocabularies"] = [*xcoms["vocabularies"], {"name": "gpt2", "vocabulary": "gpt2=/t/gpt2",
                                                       "counts_file": "counts.gpt2.json"}]
    xcoms["vocabulary.load"] = [{"qwen2.5": 7}, {"gpt2": 8}]
    for index, name in enumerate(["qwen2.5", "gpt2"]):
        task = rendered(dag.get_task("vocabulary.prefix_rows"), xcoms, index)
        assert task.name == f"refactx_prefix_rows_{name}_20180101"
        args = task.application_args
        assert args[0] == "prefix_rows"
        cfg = config_from_args(add_config_arguments(argparse.ArgumentParser()).parse_known_args(args[1:])[0])
        assert [v.name for v in cfg.tokenize.vocabularies] == [name]
        assert cfg.paths.counts_file == f"counts.{name}.json"
        assert cfg.paths.dump_date == "20180101" and cfg.build_dir().name == "20180101"
        assert cfg.input.dumps == tuple(xcoms["find_dump"]["dumps"])


def test_validate_and_activate_are_handed_their_branch_s_build(dagbag):
    """The load task's XCom (its build per vocabulary) becomes the --build-id of the same
    branch's validate and activate, parsed by the stages' own parser; every stage gets the run id."""
    from refactx_pipeline.config import config_from_args
    from refactx_pipeline.orchestration.pipeline import parse_build_ids, stage_parser

    dag = dagbag.dags["refactx_build"]
    xcoms = run_xcoms(ROOT / "conf" / "local.toml", "20180101")
    xcoms["vocabularies"] = [*xcoms["vocabularies"], {"name": "gpt2", "vocabulary": "gpt2=/t/gpt2",
                                                       "counts_file": "counts.gpt2.json"}]
    xcoms["vocabulary.load"] = [{"qwen2.5": 7}, {"gpt2": 8}]
    for index, (name, build_id) in enumerate([("qwen2.5", 7), ("gpt2", 8)]):
        for stage in ("validate", "activate"):
            argv = command(dag.get_task(f"vocabulary.{stage}"), xcoms, index)
            argv = argv[argv.index(stage) + 1:]
            args = stage_parser(stage).parse_args(argv)
            assert args.run_id == RUN_ID
            assert parse_build_ids(args.build_id, config_from_args(args)) == {name: build_id}
        args = stage_parser("load").parse_args(command(dag.get_task("vocabulary.load"), xcoms, index)[2:])
        assert args.run_id == RUN_ID and not hasattr(args, "build_id")


def test_sitelinks_runs_only_when_the_config_names_wikipedia_dumps(tmp_path):
    from refactx_pipeline.scheduling.dagtasks import wants_sitelinks

    assert wants_sitelinks(str(ROOT / "conf" / "local.toml"))
    config = tmp_path / "no-sql.toml"
    config.write_text('[input]\ndumps = ["a.nt"]\n')
    assert not wants_sitelinks(str(config))


def test_config_file_of_the_environment():
    from refactx_pipeline.scheduling.dagtasks import config_file

    assert config_file(ROOT, {}) == str(ROOT / "conf" / "local.toml")
    assert config_file(ROOT, {"REFACTX_ENV": "prod"}) == str(ROOT / "conf" / "prod.toml")
    assert config_file(ROOT, {"REFACTX_CONFIG": "/etc/r.toml", "REFACTX_ENV": "prod"}) == "/etc/r.toml"


def test_params_reject_a_dump_date_that_is_not_a_path_component(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["refactx_build"]
    for bad in ({"dump_date": "../../etc"}, {"dumps": []}):
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError):
            params.update(bad)
            params.validate()
    params = copy.deepcopy(dag.params)
    params.update({"dump_date": "20180328", "dumps": ["/d/a.nt.bz2"]})
    assert params.validate() == {"dump_date": "20180328", "dumps": ["/d/a.nt.bz2"]}


@pytest.mark.parametrize("stage", FULL_CHAIN)
def test_entry_point_reaches_every_stage(stage, tmp_path):
    """What spark-submit runs: the installed `refactx_pipeline/submit.py <stage> ...` as a file,
    from another directory. `--help` makes the stage's argument parser answer without Spark."""
    from refactx_pipeline.orchestration.pipeline import stage as stage_named

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
    assert "--config" in result.stdout and "--set" in result.stdout and "--run-id" in result.stdout
    assert ("--build-id" in result.stdout) == (stage in ("validate", "activate"))


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
    assert cfg.input.dumps or cfg.graph.triples or cfg.input.facts, f"{path.name} names no input"
    # a graph's conf may leave the vocabulary to the command line (--vocabulary, --set
    # tokenize.vocabularies=NAME=PATH): the model's own directory differs by machine
    assert cfg.tokenize.vocabularies or cfg.graph.format, f"{path.name} names no vocabulary"
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
