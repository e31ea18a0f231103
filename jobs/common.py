"""What every job shares: the Spark session, stage paths, the counts JSON."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from refactx_index.config import Config, add_config_arguments, config_from_args

log = logging.getLogger(__name__)


def spark_session(cfg: Config, app_name: str = "refactx_index"):
    """A SparkSession for ``cfg.spark`` (``local[*]`` by default).

    Python workers run the driver's interpreter, so Arrow UDFs see the same
    virtual environment (and the pinned pyspark) as the driver. The project jar
    (``jobs.jvm``, the parse stage's lexer) is on the classpath; under
    ``spark-submit`` the JVM is already running, so the submit must pass it too
    (``--jars``, as ``dags/refactx_build.py`` does).
    """
    from pyspark.sql import SparkSession

    from jobs.jvm import jar_path

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if cfg.spark.master.startswith("local"):
        # local mode talks to itself: skip the hostname lookup and its warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(cfg.spark.master)
        .config("spark.driver.memory", cfg.spark.driver_memory)
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # the CLI shows its own progress
        .config("spark.sql.session.timeZone", "UTC")
    )
    jars = [str(jar_path())]
    for key, value in cfg.spark.conf.items():
        if key == "spark.jars":
            jars.append(value)
        else:
            builder = builder.config(key, value)
    builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(cfg.spark.log_level)
    # A wide projection (verbalize's literal rendering) can exceed the JVM's 64 KB method
    # limit; Spark then falls back to interpreted evaluation (spark.sql.codegen.fallback),
    # but first logs the whole compiler trace at ERROR. The fallback is the expected path,
    # so that one logger is silenced; a query that fails without codegen still raises.
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator", jvm.org.apache.logging.log4j.Level.OFF
    )
    return spark


def remove_tree(spark, path: str | Path) -> None:
    """Delete a staging directory through Hadoop's FileSystem (local or distributed)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(str(path))
    hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(hadoop_path, True)


def write_counts(cfg: Config, stage: str, counts: dict[str, Any], name: str = "counts.json") -> Path:
    """Write a stage's counts next to its outputs (atomically: tmp file + rename)."""
    out = cfg.stage_dir(stage)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(counts, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path


def read_counts(cfg: Config, stage: str, name: str = "counts.json") -> dict[str, Any]:
    path = cfg.stage_dir(stage) / name
    return json.loads(path.read_text()) if path.exists() else {}


def job_arg_parser(description: str) -> argparse.ArgumentParser:
    return add_config_arguments(argparse.ArgumentParser(description=description))


def run_job_main(
    stage: str, description: str, run, argv: Sequence[str] | None = None, *, needs_spark: bool = True
) -> int:
    """The whole ``main()`` of a job: parse config, start Spark (when ``needs_spark``), run, log counts.

    A job that only talks to PostgreSQL (load, activate) passes ``needs_spark=False``:
    its ``run`` gets ``spark=None`` and no JVM is started.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = job_arg_parser(description).parse_args(argv)
    cfg = config_from_args(args)
    spark = spark_session(cfg, f"refactx_index:{stage}") if needs_spark else None
    started = time.monotonic()
    try:
        counts = run(spark, cfg)
    finally:
        if spark is not None:
            spark.stop()
    log.info("%s done in %.1fs: %s", stage, time.monotonic() - started, json.dumps(counts, default=str))
    return 0
