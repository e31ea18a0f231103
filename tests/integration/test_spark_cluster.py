"""The pipeline on a real Spark standalone cluster: a master and two workers started here as
processes (pyspark's own classes), the whole pipeline run through `spark-submit` against
`spark://127.0.0.1:<port>`, and the index it serves equal to a `local[2]` build's; then the
Airflow DAG with its Spark connection pointed at that master, the same.

Waiting for the cluster reads the master's log as it is written (a reader thread and a
queue with a deadline), never sleeps.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pyarrow.dataset as ds
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

VOCAB = "example"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LogWatcher:
    """Lines of a process's output, in a queue filled by a daemon thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # EOF: the process ended

    def wait_for(self, text: str, count: int = 1, timeout_s: float = 120.0) -> None:
        found = sum(text in line for line in self.seen)
        while found < count:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                raise AssertionError(f"no {text!r} within {timeout_s} s:\n{''.join(self.seen[-30:])}") from None
            if line == "":
                raise AssertionError(f"the process ended before {text!r}:\n{''.join(self.seen[-30:])}")
            self.seen.append(line)
            found += text in line


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A standalone master and two 1-core workers on localhost; yields the master URL and
    the master's log."""
    import pyspark

    base = tmp_path_factory.mktemp("spark-cluster")
    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false", SPARK_LOG_DIR=str(base / "logs"))
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([spark_class, *args], env=env, cwd=base, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return proc

    try:
        master = LogWatcher(start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(port), "--webui-port", "0"))
        master.wait_for("I have been elected leader")
        for n in range(2):
            start("org.apache.spark.deploy.worker.Worker", url, "--cores", "1", "--memory", "1500m",
                  "--host", "127.0.0.1", "--webui-port", "0", "--work-dir", str(base / f"work{n}"))
        master.wait_for("Registering worker", count=2)
        yield url, master
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def rows_of(build_root: Path, dump_date: str = "cluster") -> set[tuple[bytes, bytes]]:
    path = build_root / "wikidata" / dump_date / "prefix_rows" / VOCAB / "rows"
    table = ds.dataset(str(path), format="parquet").to_table(columns=["prefix", "node"])
    return set(zip(table.column("prefix").to_pylist(), table.column("node").to_pylist()))


# small rows, so the tree has many and a shuffle moves them between executors
TREE = ["--set", "tree.subtree_threshold=2", "--set", "tree.facts_per_partition=500"]


@pytest.fixture(scope="module")
def example_vocabulary(tmp_path_factory) -> Path:
    from refactx_pipeline.cli.vocabulary import train_example_vocabulary
    from refactx_pipeline.resources import example_graph

    return train_example_vocabulary(example_graph(), tmp_path_factory.mktemp("vocab")).parent


@pytest.fixture(scope="module")
def local_rows(tmp_path_factory, example_vocabulary) -> set[tuple[bytes, bytes]]:
    """The rows of the example graph built in ``local[2]`` with the tree settings both
    cluster builds use: what each of them must equal (built once for the module)."""
    from refactx_pipeline.resources import example_graph

    work = tmp_path_factory.mktemp("local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    local = subprocess.run(
        [sys.executable, "-m", "refactx_pipeline.cli", "build", "--stages",
         "parse,labels,verbalize,tokenize,prefix_rows", "--set", f"input.dumps={example_graph()}",
         "--set", "paths.dump_date=local", "--set", f"tokenize.vocabularies={VOCAB}={example_vocabulary}",
         "--set", "spark.driver_memory=1g", *TREE, "--set", "spark.master=local[2]",
         "--set", f"paths.build_root={work}"],
        cwd=work, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert local.returncode == 0, local.stderr[-5000:]
    rows = rows_of(work, "local")
    assert len(rows) > 20
    return rows


def test_whole_pipeline_on_a_standalone_cluster_equals_a_local_build(spark_cluster, pg_dsn, tmp_path,
                                                                     example_vocabulary, local_rows):
    url, master = spark_cluster
    from refactx_pipeline.jvm import jar_path
    from refactx_pipeline.resources import example_graph

    common = ["--set", f"input.dumps={example_graph()}", "--set", "paths.dump_date=cluster",
              "--set", f"tokenize.vocabularies={VOCAB}={example_vocabulary}", "--set", "spark.driver_memory=1g",
              *TREE]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    submit = subprocess.run(
        [str(Path(sys.executable).with_name("spark-submit")), "--master", url,
         "--jars", str(jar_path()), "--conf", "spark.executor.memory=1g", "--conf", "spark.cores.max=2",
         str(Path(__import__("refactx_pipeline.submit", fromlist=["x"]).__file__)), "all", *common,
         "--set", f"spark.master={url}", "--set", f"paths.build_root={tmp_path / 'cluster'}",
         "--set", f"pg.dsn={pg_dsn}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert submit.returncode == 0, submit.stderr[-5000:]
    # the work ran on the workers: the master launched executors on both
    master.wait_for("Launching executor", count=2, timeout_s=10)
    assert rows_of(tmp_path / "cluster") == local_rows

    # the cluster's build was loaded, validated and activated: the served rows are those rows
    with psycopg.connect(pg_dsn) as conn:
        table = conn.execute("SELECT b.table_name FROM refactx.active a JOIN refactx.builds b USING (build_id) "
                             "WHERE a.name = %s", (f"wikidata-{VOCAB}",)).fetchone()[0]
        served = {(bytes(p), bytes(n)) for p, n in conn.execute(f"SELECT prefix, node FROM refactx.{table}")}
    assert served == local_rows


def test_the_dag_on_the_standalone_cluster_equals_a_local_build(spark_cluster, pg_dsn, tmp_path,
                                                               example_vocabulary, local_rows,
                                                               migrated_airflow_db):
    """`airflow dags test refactx_build` with its Spark connection pointed at the cluster: every
    Spark stage is an application of that master (the config says ``local[2]``, and spark-submit's
    master wins), and the index it activates equals a ``local[2]`` build's."""
    import json

    from refactx_pipeline.resources import example_graph

    from .test_dag_run import airflow_env, dags_test

    url, master = spark_cluster
    date = "20260101"
    dumps = tmp_path / "dumps" / date
    dumps.mkdir(parents=True)
    (dumps / "graph.nt").symlink_to(example_graph())
    (dumps / "_IMPORTED").write_text("")
    vocab = example_vocabulary
    config = tmp_path / "dag.toml"
    config.write_text(f"""
[paths]
build_root = "{tmp_path / 'cluster'}"

[input]
dumps_root = "{tmp_path / 'dumps'}"
dump_files = "*.nt"

[tokenize]
vocabularies = [{{ name = "{VOCAB}", path = "{vocab}" }}]

[tree]
subtree_threshold = 2
facts_per_partition = 500

[spark]
master = "local[2]"
driver_memory = "1g"
shuffle_partitions = 4
""")
    env = airflow_env(tmp_path, config, pg_dsn, migrated_airflow_db)
    host, port = url.rsplit(":", 1)
    env.update(AIRFLOW_CONN_REFACTX_SPARK=json.dumps({"conn_type": "spark", "host": host, "port": int(port)}),
               SPARK_LOCAL_IP="127.0.0.1")
    log = dags_test(env, "2026-01-05", tmp_path)
    assert "DagRun Finished" in log and "state=success" in log, log[-5000:]
    # every Spark stage ran as an application of the cluster, its branch's ones included
    for app in ("parse", "labels", "verbalize", f"tokenize_{VOCAB}", f"prefix_rows_{VOCAB}",
                f"validate_{VOCAB}"):
        master.wait_for(f"Registering app refactx_{app}_{date}", timeout_s=10)

    assert rows_of(tmp_path / "cluster", date) == local_rows
    with psycopg.connect(pg_dsn) as conn:
        table = conn.execute("SELECT b.table_name FROM refactx.active a JOIN refactx.builds b USING (build_id) "
                             "WHERE a.name = %s", (f"wikidata-{VOCAB}",)).fetchone()[0]
        served = {(bytes(p), bytes(n)) for p, n in conn.execute(f"SELECT prefix, node FROM refactx.{table}")}
    assert served == local_rows
