"""Shared fixtures: real Spark (local mode), a real PostgreSQL database per test
module, real tokenizer files from ../shared. Tests that need ../shared skip with
a clear message when it is absent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import pytest

from .pgtree import fresh_database

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REFACTX_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data"
TOKENIZERS = SHARED / "tokenizers"
VOCABULARIES = ["qwen2.5", "llama3", "mistral-7b-v0.1", "phi-3-mini", "gpt2"]

# A server for tests: REFACTX_TEST_PG (a DSN to an admin database), else the local
# PostgreSQL at 127.0.0.1:5432 (README.md, "Try it"), else an embedded one started for the session.
LOCAL_PG = "postgresql://postgres@127.0.0.1:5432/postgres"


# The suite's longest files, longest first (the --durations of a whole run). Under
# pytest-xdist's --dist loadfile (pytest.ini) files are handed to the workers in collection
# order: starting these first keeps a long file from being the last one left running.
LONGEST_FILES = ["test_dag_run", "test_spark_cluster", "test_graph_dag", "test_engine_vllm", "test_paths",
                 "test_questions", "test_generation_model", "test_server", "test_wheels", "test_tree_property",
                 "test_server_vllm", "test_demo", "test_verbalize", "test_end_to_end", "test_graph",
                 "test_runtime_wheel", "test_dumpgen"]


def pytest_collection_modifyitems(config, items):
    rank = {name: n for n, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each file keeps its order


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


@pytest.fixture(scope="session")
def sample_fact_texts(sample_verbalized) -> list[str]:
    """The shared sample's facts, verbalized by the pipeline's own stages (once per session)."""
    import pyarrow.dataset as ds

    cfg = sample_verbalized
    table = ds.dataset(str(cfg.stage_dir("verbalize") / "facts"), format="parquet").to_table(columns=["text"])
    return table.column("text").to_pylist()


@pytest.fixture(scope="session")
def sample_fact_ids(sample_fact_texts) -> set[tuple[int, ...]]:
    """Every sample fact in SmolLM2's vocabulary, encoded as the tokenize stage encodes facts
    (independently of any index): what a constrained answer may write."""
    from refactx_index.models import model_directory
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

