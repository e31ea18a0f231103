"""The stages of DESIGN.md, what each needs, and how one or all of them run.

One ``Stage`` per module: its name, the module whose ``run`` does the work, and whether it
needs Spark and the database. The CLI (``refactx-index build``, ``demo``) runs the selected
stages in one Spark application (``run_pipeline``); the Airflow DAG runs each one as its own
``spark-submit`` of ``refactx_pipeline/submit.py``, which calls ``run_stage_main``. Both take
the stage list and the selection rule from here, so they cannot drift.

A stage module's ``run`` is ``run(spark, cfg)``, or ``run(spark, cfg, dsn)`` for a database
stage; ``spark`` is None for a stage that does not need it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from refactx_index.errors import ConfigError

from refactx_pipeline.config import Config, add_config_arguments, config_from_args

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str
    module: str  # the module under refactx_pipeline whose run() does the work
    description: str
    needs_spark: bool = True
    needs_database: bool = False

    def run(self, cfg: Config, *, spark=None, dsn: str | None = None) -> dict[str, Any]:
        """Run the stage once; its counts are also in ``<stage dir>/counts.json``."""
        if self.needs_spark and spark is None:
            raise ConfigError(f"stage {self.name} needs a Spark session")
        run = importlib.import_module(self.module).run
        if self.needs_database:
            if not dsn:
                raise ConfigError(f"stage {self.name} needs a PostgreSQL DSN")
            return run(spark if self.needs_spark else None, cfg, dsn)
        return run(spark, cfg)


# execution order
STAGES: tuple[Stage, ...] = (
    # a team's own graph (graph.format set) replaces parse, sitelinks and labels
    Stage("graph", "refactx_pipeline.graph_stage", "Read a graph's triples and labels tables into parse and labels outputs"),
    Stage("parse", "refactx_pipeline.parse", "Parse truthy N-Triples into statements, terms and properties"),
    Stage("sitelinks", "refactx_pipeline.sitelinks", "English Wikipedia titles per item from MySQL dumps"),
    Stage("labels", "refactx_pipeline.labels", "One display label per entity"),
    Stage("verbalize", "refactx_pipeline.verbalize", "Verbalize statements and descriptions into facts"),
    # the module is not "tokenize": run as a script it would shadow the stdlib module
    Stage("tokenize", "refactx_pipeline.tokenize_facts", "Tokenize the facts for every vocabulary"),
    Stage("prefix_rows", "refactx_pipeline.prefix_rows", "Prefix rows: each vocabulary's tree, sorted and cut into bounded rows"),
    Stage("load", "refactx_pipeline.load", "COPY prefix rows into a new PostgreSQL partition",
          needs_spark=False, needs_database=True),
    Stage("validate", "refactx_pipeline.validate", "Validate loaded builds before activation",
          needs_database=True),
    Stage("activate", "refactx_pipeline.activate", "Activate validated builds and apply retention",
          needs_spark=False, needs_database=True),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)
# the stages that work per vocabulary: the Airflow DAG runs them once per vocabulary, each run
# restricted to it; the stages before them run once for all vocabularies
PER_VOCABULARY_STAGES = ("tokenize", "prefix_rows", "load", "validate", "activate")
_BY_NAME = {stage.name: stage for stage in STAGES}


@dataclass
class StageResult:
    stage: str
    seconds: float
    counts: dict[str, Any]


def stage(name: str) -> Stage:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown stage {name!r}; stages: {', '.join(STAGE_NAMES)}") from None


def select_stages(cfg: Config, only: Iterable[str] | None = None) -> list[str]:
    """The stages to run: ``only`` in pipeline order, or all that the config enables
    (``sitelinks`` only when ``input`` names sitelinks dumps; ``graph`` instead of parse,
    sitelinks and labels when ``graph.format`` is set)."""
    wanted = list(only) if only else list(STAGE_NAMES)
    for name in wanted:
        stage(name)
    if cfg.graph.format:
        skipped = {"parse", "sitelinks", "labels"}
    else:
        skipped = {"graph"} | (set() if cfg.input.sitelinks_source() else {"sitelinks"})
    return [s for s in STAGE_NAMES if s in wanted and s not in skipped]


def run_pipeline(
    spark,
    cfg: Config,
    stages: Sequence[str] | None = None,
    on_stage: Callable[[str, StageResult | None], None] | None = None,
    dsn: str | None = None,
) -> list[StageResult]:
    """Run ``stages`` (default: all enabled) and return their counts.

    ``on_stage(stage, None)`` is called before a stage and ``on_stage(stage, result)`` after
    it (the CLI's progress display). The database stages use ``dsn``, else ``pg.dsn``, else
    one embedded PostgreSQL started for all of them.
    """
    from refactx_pipeline.embedded import pg_dsn

    selected = [stage(name) for name in select_stages(cfg, stages)]
    results: list[StageResult] = []
    with contextlib.ExitStack() as stack:
        if dsn is None and any(s.needs_database for s in selected):
            dsn = stack.enter_context(pg_dsn(cfg))
        for current in selected:
            if on_stage:
                on_stage(current.name, None)
            started = time.monotonic()
            counts = current.run(cfg, spark=spark if current.needs_spark else None, dsn=dsn)
            result = StageResult(current.name, time.monotonic() - started, counts)
            log.info("stage %s done in %.1fs", current.name, result.seconds)
            results.append(result)
            if on_stage:
                on_stage(current.name, result)
    return results


ALL_STAGES = "all"  # run_stage_main's name for every enabled stage in one application


def run_stage_main(name: str, argv: Sequence[str] | None = None) -> int:
    """The whole ``main()`` of one stage run on its own (``spark-submit`` from the DAG), or of
    every enabled stage in one Spark application (``name`` ``all``): parse the config, start
    Spark and the database only when needed, run, log counts."""
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.embedded import pg_dsn

    selected = [stage(s) for s in STAGE_NAMES] if name == ALL_STAGES else [stage(name)]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    description = "Every enabled stage, in order" if name == ALL_STAGES else selected[0].description
    parser = add_config_arguments(argparse.ArgumentParser(prog=f"refactx stage {name}", description=description))
    cfg = config_from_args(parser.parse_args(argv))
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        spark = spark_session(cfg, f"refactx:{name}") if any(s.needs_spark for s in selected) else None
        if spark is not None:
            stack.callback(spark.stop)
        dsn = stack.enter_context(pg_dsn(cfg)) if any(s.needs_database for s in selected) else None
        if name == ALL_STAGES:
            counts = {r.stage: r.counts for r in run_pipeline(spark, cfg, dsn=dsn)}
        else:
            counts = selected[0].run(cfg, spark=spark if selected[0].needs_spark else None, dsn=dsn)
    log.info("%s done in %.1fs: %s", name, time.monotonic() - started, json.dumps(counts, default=str))
    return 0
