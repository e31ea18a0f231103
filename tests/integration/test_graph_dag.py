"""The graph DAG (dags/refactx_graph.py): real Airflow parsing, every task's rendered command
against tests/golden/refactx_graph.json, which export the sensor takes, and one run end to
end (`airflow dags test refactx_graph`) on the financial example through PostgreSQL.

The harness (a temporary AIRFLOW_HOME set before Airflow is imported, parsing, rendering) is
tests/dag_harness.py, shared with tests/integration/test_dags.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import ROOT, airflow_home, tokenizer_dir
from ..dag_harness import (  # first: it sets AIRFLOW_HOME before Airflow is imported
    DAGS,
    REGEN_GOLDEN,
    RUN_ID,
    SUBMIT,
    SparkSubmitOperator,
    command,
    golden_view,
    parse_dags,
)

from refactx_pipeline.config import Config  # noqa: E402
from refactx_pipeline.jvm import jar_path  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "refactx_graph.json"
DAG_ENV = ("REFACTX_GRAPH_CONFIG", "REFACTX_GRAPH_SCHEDULE", "REFACTX_EXPORT_POKE_SECONDS",
           "REFACTX_EXPORT_WAIT_SECONDS", "REFACTX_JAR", "REFACTX_PY_FILES", "REFACTX_SPARK_CONN_ID",
           "REFACTX_SPARK_SUBMIT", "REFACTX_TASK_RETRIES", "PYSPARK_PYTHON")
CHAIN = ["find_export", "vocabularies", "graph", "verbalize", "vocabulary.tokenize", "vocabulary.prefix_rows",
         "vocabulary.load", "vocabulary.validate", "vocabulary.activate", "record_run"]


def parse_dag(monkeypatch: pytest.MonkeyPatch, **env: str):
    bag = parse_dags(monkeypatch, DAG_ENV, DAGS / "refactx_graph.py", **env)
    assert bag.import_errors == {}
    return bag.dags["refactx_graph"]


def graph_config(path: Path, exports_root: Path, vocabularies: dict[str, Path], build_root: Path,
                 marker: str = "_EXPORTED") -> Path:
    """A graph DAG config: the financial example's file names under each export."""
    from refactx_testing.finance_example import INVERSE_LABELS

    vocab = ", ".join(f'{{ name = "{n}", path = "{p}" }}' for n, p in vocabularies.items())
    inverse = ", ".join(f'{k} = "{v}"' for k, v in INVERSE_LABELS.items())
    path.write_text(f"""
[paths]
build_root = "{build_root}"
source = "finance"

[graph]
format = "csv"
triples = ["triples.csv"]
labels = "labels.csv"
predicate_labels = "predicate_labels.csv"
exports_root = "{exports_root}"
export_marker = "{marker}"

[verbalize]
inverse = true
inverse_labels = {{ {inverse} }}

[tokenize]
vocabularies = [{vocab}]

[tree]
subtree_threshold = 16

[spark]
master = "local[2]"
driver_memory = "1g"
shuffle_partitions = 4
""")
    return path


def run_xcoms(config: Path, export: str = "20260105") -> dict:
    from refactx_pipeline.scheduling.dagtasks import branches

    cfg = Config.load(config, env={})
    vocabularies = branches(str(config))
    return {
        "find_export": {"config": str(config), "dump_date": export,
                        "export_dir": str(Path(cfg.graph.exports_root) / export)},
        "vocabularies": vocabularies,
        "vocabulary.load": [{b["name"]: 41 + i} for i, b in enumerate(vocabularies)],
    }


def test_every_rendered_command_matches_the_golden_file(monkeypatch, tmp_path):
    """Golden test: regenerate with ``REFACTX_REGEN_GOLDEN=1 ./dev test tests/integration/test_graph_dag.py -k golden``
    and review the diff of tests/golden/refactx_graph.json."""
    monkeypatch.setenv("AIRFLOW_CONN_REFACTX_SPARK",
                       json.dumps({"conn_type": "spark", "host": "spark://spark-master", "port": 7077}))
    dag = parse_dag(monkeypatch)
    config = graph_config(tmp_path / "graph.toml", Path("/data/exports/finance"),
                          {"qwen2.5": Path("/models/qwen2.5"), "gpt2": Path("/models/gpt2")}, Path("/data/build"))
    replacements = [(str(jar_path()), "<jar>"), (str(SUBMIT.parent.parent), "<site-packages>"),
                    (str(Path(sys.executable).parent), "<venv-bin>"), (str(tmp_path), "<tmp>")]
    view = golden_view(dag, run_xcoms(config), replacements)
    if REGEN_GOLDEN:
        GOLDEN.write_text(json.dumps(view, indent=2, sort_keys=True) + "\n")
    assert view == json.loads(GOLDEN.read_text()), "rendered tasks differ from tests/golden/refactx_graph.json"


def test_the_chain_the_operators_and_the_sensor(monkeypatch):
    from refactx_pipeline.orchestration.pipeline import stage

    dag = parse_dag(monkeypatch, REFACTX_EXPORT_POKE_SECONDS="60", REFACTX_EXPORT_WAIT_SECONDS="600")
    assert sorted(dag.task_ids) == sorted(CHAIN)
    for upstream, downstream in zip(CHAIN, CHAIN[1:]):
        assert upstream in dag.get_task(downstream).upstream_task_ids, (upstream, downstream)
    for task_id in CHAIN[2:-1]:
        task = dag.get_task(task_id)
        if stage(task_id.split(".")[-1]).needs_spark:
            assert isinstance(task, SparkSubmitOperator) and Path(task.application) == SUBMIT
            assert task.conf == {"spark.yarn.maxAppAttempts": "1"} and task.jars == str(jar_path())
        else:  # the Wikidata DAG's task body: refactx_pipeline.dagtasks.run_stage
            assert task.python_callable.__name__ == "run_stage"
    assert type(dag.task_group_dict["vocabulary"]).__name__ == "MappedTaskGroup"
    assert dag.get_task("vocabulary.tokenize").max_active_tis_per_dagrun == 1
    sensor = dag.get_task("find_export")
    assert (sensor.mode, sensor.poke_interval, sensor.timeout, sensor.soft_fail) == ("reschedule", 60, 600, True)
    assert dag.catchup is False and dag.max_active_runs == 1 and dag.schedule == "@hourly"
    assert dag.get_task("record_run").trigger_rule == "all_done"
    assert parse_dag(monkeypatch, REFACTX_GRAPH_SCHEDULE="none", REFACTX_GRAPH_CONFIG="/absent.toml").schedule is None


def test_stage_arguments_parse_into_the_export_s_config(monkeypatch, tmp_path):
    """What a branch's stage sees: the rendered arguments parsed by the stages' own parser."""
    from refactx_pipeline.config import config_from_args
    from refactx_pipeline.orchestration.pipeline import parse_build_ids, stage_parser

    dag = parse_dag(monkeypatch)
    config = graph_config(tmp_path / "graph.toml", tmp_path / "exports", {"qwen2.5": Path("/m/q"), "gpt2": Path("/m/g")},
                          tmp_path / "build")
    xcoms = run_xcoms(config, "20260107")
    for index, name in enumerate(["qwen2.5", "gpt2"]):
        argv = command(dag.get_task("vocabulary.validate"), xcoms, index)
        argv = argv[argv.index("validate") + 1:]
        args = stage_parser("validate").parse_args(argv)
        cfg = config_from_args(args)
        assert args.run_id == RUN_ID and parse_build_ids(args.build_id, cfg) == {name: 41 + index}
        assert [v.name for v in cfg.tokenize.vocabularies] == [name]
        assert cfg.graph.export_dir == str(tmp_path / "exports" / "20260107")
        assert cfg.build_dir() == tmp_path / "build" / "finance" / "20260107"
    argv = command(dag.get_task("graph"), xcoms, -1)
    cfg = config_from_args(stage_parser("graph").parse_args(argv[argv.index("graph") + 1:]))
    assert cfg.graph.export_dir == str(tmp_path / "exports" / "20260107") and cfg.paths.dump_date == "20260107"


def test_the_sensor_takes_the_newest_complete_export_newer_than_every_built_one(tmp_path):
    from refactx_index.errors import ConfigError
    from refactx_pipeline.scheduling.exports import choose_export, complete_exports
    from refactx_testing.finance_example import write_example

    root = tmp_path / "exports"
    for date in ("20260101", "20260102", "20260103"):
        write_example(root / date, companies=30, people=30)
    (root / "20260101" / "_EXPORTED").write_text("")
    (root / "20260102" / "_EXPORTED").write_text("")  # 20260103: still being written
    (root / "notes").mkdir()
    cfg = Config.load(graph_config(tmp_path / "g.toml", root, {"q": Path("/m")}, tmp_path / "b"), env={})
    assert complete_exports(cfg.graph) == ["20260101", "20260102"]
    assert choose_export(cfg, []) == {"dump_date": "20260102", "export_dir": str(root / "20260102")}
    assert choose_export(cfg, ["20260102"]) is None  # nothing newer than what was built
    assert choose_export(cfg, ["20260105"]) is None  # never an older one after a newer one
    assert choose_export(cfg, ["20260102"], export="20260101")["dump_date"] == "20260101"  # on demand
    assert choose_export(cfg, [], export="20260103") is None  # not complete yet
    # no marker configured: complete once every input file is there
    unmarked = cfg.updated({"graph.export_marker": ""})
    assert complete_exports(unmarked.graph) == ["20260101", "20260102", "20260103"]
    (root / "20260103" / "labels.csv").unlink()
    assert complete_exports(unmarked.graph) == ["20260101", "20260102"]
    # marked complete but an input is missing: an error naming it, not a wait
    (root / "20260102" / "triples.csv").unlink()
    with pytest.raises(ConfigError, match="triples.csv is not a file"):
        choose_export(cfg, [])
    with pytest.raises(ConfigError, match="graph.exports_root is not set"):
        choose_export(cfg.updated({"graph.exports_root": ""}), [])


def test_the_config_file_comes_from_the_environment():
    from refactx_index.errors import ConfigError
    from refactx_pipeline.scheduling.exports import config_file

    assert config_file({"REFACTX_GRAPH_CONFIG": "/etc/g.toml"}) == "/etc/g.toml"
    with pytest.raises(ConfigError, match="REFACTX_GRAPH_CONFIG"):
        config_file({"REFACTX_CONFIG": "/etc/wikidata.toml"})


# ---------------------------------------------------------------- end to end


@pytest.mark.spark
@pytest.mark.pg
@pytest.mark.slow
def test_a_new_export_is_built_and_served_end_to_end(pg_dsn, tmp_path, migrated_airflow_db):
    """`airflow dags test refactx_graph`: the sensor takes the complete export, never the
    half-written one; graph, verbalize and one vocabulary's branch run as spark-submits and
    Python tasks; the index serves the export's facts and the run is recorded."""
    import psycopg

    from refactx_testing.finance_example import write_example

    root = tmp_path / "exports"
    write_example(root / "20260105", companies=30, people=30)
    (root / "20260105" / "_EXPORTED").write_text("")
    write_example(root / "20260106", companies=30, people=30)  # half-written: no marker
    config = graph_config(tmp_path / "graph.toml", root, {"qwen2.5": tokenizer_dir("qwen2.5")}, tmp_path / "build")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "AIRFLOW"))}
    env.update(
        AIRFLOW_HOME=str(airflow_home(tmp_path / "airflow", migrated_airflow_db)),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_REFACTX_SPARK=json.dumps({"conn_type": "spark", "host": "local[2]"}),
        REFACTX_GRAPH_CONFIG=str(config),
        REFACTX_TASK_RETRIES="0",
        REFACTX__PG__DSN=pg_dsn,
    )
    airflow = str(Path(sys.executable).with_name("airflow"))
    run = subprocess.run([airflow, "dags", "test", "refactx_graph", "2026-01-05"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    log = run.stdout + run.stderr
    (tmp_path / "dags-test.log").write_text(log)
    assert "DagRun Finished" in log and "state=success" in log, log[-5000:]
    assert "new_state=failed" not in log, log[-5000:]

    build = tmp_path / "build" / "finance"
    assert sorted(p.name for p in build.iterdir()) == ["20260105"]
    assert not (build / "20260105" / "run.json").exists()  # the run's claim, released by record_run
    graph = json.loads((build / "20260105" / "graph" / "counts.json").read_text())
    assert graph["triples_in"] == graph["triples"] + graph["rejected"] and graph["format"] == "csv"
    with psycopg.connect(pg_dsn) as conn:
        served = conn.execute("SELECT a.name, b.status, b.dump_date FROM refactx.active a "
                              "JOIN refactx.builds b USING (build_id)").fetchall()
        runs = conn.execute("SELECT dump_date, status, counts FROM refactx.runs").fetchall()
    assert served == [("finance-qwen2.5", "active", "20260105")]
    assert [(d, s) for d, s, _ in runs] == [("20260105", "success")]
    assert set(runs[0][2]["stages"]) == {"graph", "verbalize"}

    # the served index holds the facts the in-process build makes of the same export
    from refactx_index.tree.pg import open_index
    from refactx_pipeline.graph.index import build_graph_index

    from .test_end_to_end import _enumerate

    cfg = Config.load(config, env={}).updated({"graph.export_dir": str(root / "20260105")})
    built = build_graph_index(cfg)
    with open_index(pg_dsn, "finance-qwen2.5") as index:
        assert _enumerate(index) == {tuple(ids) for ids in built.sequences.values()}
