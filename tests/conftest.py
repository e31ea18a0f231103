"""Shared fixtures: real Spark (local mode), a real PostgreSQL database per test
module, real tokenizer files from ../shared. Tests that need ../shared skip with
a clear message when it is absent."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Mapping

import pytest

from .pgdb import fresh_database

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REFACTX_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"
TOKENIZERS = SHARED / "tokenizers"
VOCABULARIES = ["qwen2.5", "llama3", "mistral-7b-v0.1", "phi-3-mini", "gpt2"]

# A server for tests: REFACTX_TEST_PG (a DSN to an admin database), else the local
# PostgreSQL at 127.0.0.1:5432 (README.md, "Try it"), else an embedded one started for the session.
LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
# the shared sample's verbalized facts, sorted (fixture sample_fact_texts)
SAMPLE_FACTS = ROOT / "tests" / "golden" / "sample_facts.txt"
# tests of the runtime that start no JVM: conftest refuses them the Spark fixture
RUNTIME_TESTS = "tests/runtime/"


# Longest files first. Under pytest-xdist's --dist loadfile (pytest.ini) files are handed to
# the workers in collection order: starting the long ones first keeps a long file from being
# the last one left running. How long a file takes is what it took when it last ran whole
# (recorded in pytest's cache, .pytest_cache, under FILE_SECONDS_KEY); a file with no record
# yet goes first if it has a test marked slow, else last.
FILE_SECONDS_KEY = "refactx/file_seconds"
_file_seconds: dict[str, float] = {}  # this run's seconds per file (setup, call and teardown)
_partial_files: set[str] = set()  # files this run did not run whole
PARTIAL_FILES_OUTPUT = "refactx_partial_files"  # a worker's _partial_files, sent to the controller


def _file_of(nodeid: str) -> str:
    return nodeid.partition("::")[0]


def pytest_collection_modifyitems(config, items):
    for arg in config.args:  # a test named by its node id runs alone: its file runs in part
        if "::" in arg:
            with contextlib.suppress(ValueError):
                _partial_files.add(Path(arg.partition("::")[0]).resolve().relative_to(config.rootpath).as_posix())
    recorded = config.cache.get(FILE_SECONDS_KEY, {}) if getattr(config, "cache", None) else {}
    slow = {_file_of(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def order(item) -> float:
        path = _file_of(item.nodeid)
        if path in recorded:
            return -float(recorded[path])
        return -float("inf") if path in slow else 0.0

    items.sort(key=order)  # stable: each file keeps its own order
    jvm = [item.nodeid for item in items if item.nodeid.startswith(RUNTIME_TESTS)
           and ("spark" in item.fixturenames or item.get_closest_marker("spark"))]
    if jvm:
        raise pytest.UsageError(f"{RUNTIME_TESTS} starts no JVM, but these tests ask for Spark "
                                f"(move them to tests/pipeline or tests/integration): {jvm}")


def pytest_deselected(items):
    """A file run in part (-k, a node id) does not record its time: it would read as short."""
    _partial_files.update(_file_of(item.nodeid) for item in items)


def pytest_runtest_logreport(report):
    # under xdist the controller gets every worker's reports: each file's time is summed there
    path = _file_of(report.nodeid)
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # under xdist the workers collect (and deselect): each tells the controller what it ran in part
    _partial_files.update(getattr(node, "workeroutput", {}).get(PARTIAL_FILES_OUTPUT, []))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):  # a worker: the controller records
        config.workeroutput[PARTIAL_FILES_OUTPUT] = sorted(_partial_files)
        return
    if getattr(config, "cache", None) is None or session.shouldstop or session.shouldfail or exitstatus == pytest.ExitCode.INTERRUPTED:
        return  # a run cut short: its files' times are partial
    measured = {path: round(s, 2) for path, s in _file_seconds.items() if path not in _partial_files}
    if measured:
        config.cache.set(FILE_SECONDS_KEY, {**config.cache.get(FILE_SECONDS_KEY, {}), **measured})


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the test when it is missing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared not beside the project)")
    return path


def tokenizer_dir(name: str) -> Path:
    return shared_path("tokenizers", name)


def sample_config(build_root: Path, overrides: Mapping[str, Any] | None = None):
    """A Config for the shared sample extract with its enwiki page + page_props heads;
    ``overrides`` (dotted keys, e.g. ``{"tree.subtree_threshold": 16}``) are applied on top."""
    from refactx_pipeline.config import Config

    return Config().updated({
        "paths.build_root": str(build_root),
        "paths.dump_date": "2018-sample500",
        "input.dumps": [str(shared_path("data", "wikidata", "truthy-2018-sample500-en.nt"))],
        "input.enwiki_page": str(shared_path("data", "wikipedia", "enwiki-20150112-page.head1MiB.sql")),
        "input.enwiki_page_props": str(shared_path("data", "wikipedia", "enwiki-20150112-page_props.head1MiB.sql")),
        **(overrides or {}),
    })


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from refactx_pipeline.config import Config
    from refactx_pipeline.common import spark_session

    cfg = Config().updated({
        "spark.master": "local[2]",
        "spark.shuffle_partitions": 4,
        "spark.driver_memory": "2g",
        "spark.conf": {
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
            "spark.default.parallelism": "4",
        },
    })
    session = spark_session(cfg, "refactx_index-tests")
    yield session
    session.stop()


def _server_dsn(tmp_path_factory) -> tuple[str, object | None]:
    import psycopg

    for dsn in filter(None, [os.environ.get("REFACTX_TEST_PG"), LOCAL_PG]):
        try:
            with psycopg.connect(dsn, connect_timeout=3):
                return dsn, None
        except psycopg.OperationalError:
            continue
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    return server.get_uri(), server


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    dsn, server = _server_dsn(tmp_path_factory)
    yield dsn
    if server is not None:
        server.cleanup()


@pytest.fixture()
def pg_dsn(pg_server):
    """A fresh database for one test, dropped afterwards."""
    with fresh_database(pg_server) as dsn:
        yield dsn


@pytest.fixture()
def cfg(tmp_path):
    """A Config rooted in a temporary build directory (immutable: a test that needs other
    values takes ``cfg.updated({...})``)."""
    from refactx_pipeline.config import Config

    return Config().updated({
        "paths.build_root": str(tmp_path / "build"),
        "spark.master": "local[2]",
        "spark.shuffle_partitions": 4,
    })


@pytest.fixture(scope="session")
def sample_verbalized(spark, tmp_path_factory):
    """The Config of a work directory where the shared sample went through parse, sitelinks,
    labels and verbalize (once per session; later stages may be run on it, never these again)."""
    from refactx_pipeline.orchestration.pipeline import build

    cfg = sample_config(tmp_path_factory.mktemp("facts") / "build")
    build(cfg, ["parse", "sitelinks", "labels", "verbalize"], spark=spark)
    return cfg


def verbalized_fact_texts(cfg) -> list[str]:
    """The fact texts the verbalize stage wrote in ``cfg``'s work directory."""
    import pyarrow.dataset as ds

    table = ds.dataset(str(cfg.stage_dir("verbalize") / "facts"), format="parquet").to_table(columns=["text"])
    return table.column("text").to_pylist()


@pytest.fixture(scope="session")
def sample_fact_texts() -> list[str]:
    """The shared sample's facts as the pipeline's verbalize stage writes them, one a line in
    SAMPLE_FACTS: the runtime's tests build their indexes from them in process, with no JVM
    (tests/pipeline/test_provenance.py checks the file against the stage)."""
    return SAMPLE_FACTS.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="session")
def sample_fact_ids(sample_fact_texts) -> set[tuple[int, ...]]:
    """Every sample fact in SmolLM2's vocabulary, encoded as the tokenize stage encodes facts
    (independently of any index): what a constrained answer may write."""
    from refactx_index.qa.models import model_directory
    from refactx_index.vocab import encode_facts, open_tokenizer

    encoded = encode_facts(open_tokenizer(str(model_directory("smollm2") / "tokenizer.json")),
                           sample_fact_texts, ())
    return {tuple(encoded.ids(i)) for i in range(len(sample_fact_texts))}


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory) -> Path:
    """An Airflow metadata database (SQLite) made by ``airflow db migrate`` once per session:
    each test that runs ``airflow dags test`` starts from a copy (``airflow_home``)."""
    import subprocess
    import sys

    home = tmp_path_factory.mktemp("airflow-template")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX", "AIRFLOW"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"))
    migrate = subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], cwd=home,
                             env=env, capture_output=True, text=True, timeout=600)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return home / "airflow.db"


def airflow_home(path: Path, migrated_db: Path) -> Path:
    """A fresh AIRFLOW_HOME at ``path`` holding a copy of the session's migrated database."""
    import shutil

    path.mkdir(parents=True)
    shutil.copyfile(migrated_db, path / "airflow.db")
    return path

