"""What every Spark stage shares: the Spark session, staging clean-up, the counts JSON, the
check that an earlier stage's output is there."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from refactx_pipeline.config import Config
from refactx_pipeline.errors import StageInputMissing

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _stderr_into(path: Path) -> Iterator[None]:
    """File descriptor 2 appended to ``path`` meanwhile: a process started meanwhile (the
    JVM) keeps writing its stderr there; this process's own stderr is back afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as target:
            os.dup2(target.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def spark_session(cfg: Config, app_name: str = "refactx_index", *, jvm_stderr: Path | None = None):
    """A SparkSession for ``cfg.spark`` (``local[*]`` by default).

    ``jvm_stderr``: a file the JVM's own stderr goes to instead of this process's, for a
    command whose stderr is for people: the JDK's incubator-module note, Hadoop's
    native-library warning and log4j's banner are written before any log level applies.
    No effect under spark-submit, whose JVM is already running.

    A JVM started here runs with ``spark.java_options`` (ParallelGC by default: G1's
    concurrent threads take CPU the Python workers need on a small machine).

    Python workers run the driver's interpreter, so Arrow UDFs see the same
    virtual environment (and the pinned pyspark) as the driver. The project jar
    (``refactx_pipeline.jvm``, the parse stage's lexer) is on the classpath; under
    ``spark-submit`` the JVM is already running, so the submit must pass it too
    (``--jars``, as ``dags/refactx_build.py`` does).
    """
    from pyspark.sql import SparkSession

    from refactx_pipeline.jvm import jar_path

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Under spark-submit (the DAG's tasks, submit.py) the JVM already runs with the submit's
    # --master (and --name): that one is used. Setting the config's master here would override it and
    # quietly run a cluster submit in local mode.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if cfg.spark.master.startswith("local") and not submitted:
        # local mode talks to itself: skip the hostname lookup and its warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    if not submitted:
        builder = builder.master(cfg.spark.master).appName(app_name)
    else:
        from pyspark import SparkConf, SparkContext

        # the submit's --name too (the DAG's names its stage, vocabulary and dump date); without
        # one spark-submit names the application after its file, and the stage's name is better.
        # SparkConf reads the submit's settings only through the gateway, so connect it first.
        SparkContext._ensure_initialized()
        if SparkConf().get("spark.app.name", "") in ("", Path(sys.argv[0]).name):
            builder = builder.appName(app_name)
    builder = (
        builder.config("spark.driver.memory", cfg.spark.driver_memory)
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # the CLI shows its own progress
        .config("spark.sql.session.timeZone", "UTC")
    )
    if not submitted and cfg.spark.java_options:
        # read when the JVMs start: the driver's now, the executors' when a cluster starts them
        builder = builder.config("spark.driver.extraJavaOptions", cfg.spark.java_options).config(
            "spark.executor.extraJavaOptions", cfg.spark.java_options)
    jars = [str(jar_path())]
    for key, value in cfg.spark.conf.items():
        if key == "spark.jars":
            jars.append(value)
        else:
            builder = builder.config(key, value)
    builder = builder.config("spark.jars", ",".join(jars))
    with _stderr_into(jvm_stderr) if jvm_stderr is not None else contextlib.nullcontext():
        spark = builder.getOrCreate()  # launches the JVM, which inherits file descriptor 2
    spark.sparkContext.setLogLevel(cfg.spark.log_level)
    if submitted and spark.sparkContext.master != cfg.spark.master:
        log.info("spark-submit's master %s is used (the config's spark.master %s applies only when "
                 "the pipeline starts Spark itself)", spark.sparkContext.master, cfg.spark.master)
    # A wide projection (verbalize's literal rendering) can exceed the JVM's 64 KB method
    # limit; Spark then falls back to interpreted evaluation (spark.sql.codegen.fallback),
    # but first logs the whole compiler trace at ERROR. The fallback is the expected path,
    # so that one logger is silenced; a query that fails without codegen still raises.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator", jvm.org.apache.logging.log4j.Level.OFF
    )
    return spark


@contextlib.contextmanager
def spark_started(cfg: Config, app_name: str, *, jvm_stderr: Path | None = None) -> Iterator[Any]:
    """``spark_session(cfg, app_name, jvm_stderr=...)`` for the block, stopped after it however
    it ends (a build that started Spark itself stops it)."""
    spark = spark_session(cfg, app_name, jvm_stderr=jvm_stderr)
    try:
        yield spark
    finally:
        spark.stop()


def remove_tree(spark, path: str | Path) -> None:
    """Delete a staging directory through Hadoop's FileSystem (local or distributed)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(str(path))
    hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(hadoop_path, True)


def move_tree(spark, source: str | Path, target: str | Path) -> None:
    """Rename a written directory through Hadoop's FileSystem (``target`` must not exist): a
    staged output that needs no second pass becomes the output without being rewritten."""
    jvm = spark.sparkContext._jvm
    src = jvm.org.apache.hadoop.fs.Path(str(source))
    fs = src.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.rename(src, jvm.org.apache.hadoop.fs.Path(str(target))):
        raise OSError(f"could not move {source} to {target}")


class ObservedCounts(NamedTuple):
    """What ``observe_outcomes`` counted: rows per outcome, and all rows."""

    by_outcome: dict[str, int]
    rows: int


def observe_outcomes(frame, outcomes: Mapping[str, Any], *,
                     exhaustive: bool = False) -> tuple[Any, Callable[[], ObservedCounts]]:
    """``frame`` with its rows counted by outcome (name -> boolean Column) during the next
    action that runs it anyway (a write), and a function that returns those counts once that
    action is done: a count that needs no Spark job of its own, nor another scan of its input.

    Sums of one condition each (``count_if`` cost twice as much in parse's lex).
    ``exhaustive``: every row has exactly one outcome; counts
    that do not add up to the rows are a bug in the caller's list (RuntimeError)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    names = tuple(outcomes)
    metrics = [F.sum(F.when(condition, F.lit(1)).otherwise(F.lit(0))).alias(f"o{i}")
               for i, condition in enumerate(outcomes.values())]
    observation = Observation()
    observed = frame.observe(observation, *metrics, F.count(F.lit(1)).alias("rows"))

    def counted() -> ObservedCounts:
        got = observation.get  # a sum over no rows is null
        counts = ObservedCounts({name: got[f"o{i}"] or 0 for i, name in enumerate(names)}, got["rows"] or 0)
        if exhaustive and sum(counts.by_outcome.values()) != counts.rows:
            raise RuntimeError(f"{counts.rows} rows but {sum(counts.by_outcome.values())} counted by outcome "
                               f"({', '.join(names)}): a row has an outcome not in the list")
        return counts

    return observed, counted


def write_counts(cfg: Config, stage: str, counts: dict[str, Any], name: str | None = None) -> Path:
    """Write a stage's counts next to its outputs (atomically: tmp file + rename); ``name``
    defaults to ``paths.counts_file`` (``counts.json``)."""
    out = cfg.stage_dir(stage)
    path = out / (name or cfg.paths.counts_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(counts, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path


def read_counts(cfg: Config, stage: str, name: str | None = None) -> dict[str, Any]:
    path = cfg.stage_dir(stage) / (name or cfg.paths.counts_file)
    return json.loads(path.read_text()) if path.exists() else {}


def ingest_stage(cfg: Config) -> str:
    """The stage that writes what parse and labels write: ``graph`` for a team's own graph."""
    return "graph" if cfg.graph.format else "parse"


# the preset dictionary of a vocabulary's rows (format version 4), written by the prefix rows
# stage beside its rows (``prefix_rows/<vocab>/``) and stored in the catalog by the load stage
DICTIONARY_FILE = "dictionary.bin"


def stage_input(cfg: Config, stage: str, needs: str, *parts: str, written_by: str | None = None) -> Path:
    """The output ``parts`` of stage ``needs`` that ``stage`` reads, or ``StageInputMissing``
    naming the stage to run first (``written_by``, when another stage writes that directory:
    the graph stage writes parse's and labels' outputs)."""
    path = cfg.stage_dir(needs).joinpath(*parts)
    if not path.exists():
        raise StageInputMissing(stage, written_by or needs, path)
    return path
