"""Run the stages of DESIGN.md in order, in one Spark session.

The Airflow DAG runs the same stage modules one ``spark-submit`` each; this
module is the in-process equivalent used by the CLI (``refactx-index build``,
``refactx-index demo``) and the end-to-end tests.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from refactx_index.config import Config
from refactx_index.embedded import pg_dsn

from jobs.common import run_job_main

log = logging.getLogger(__name__)

# (stage name, module under jobs/); order is execution order
STAGES: tuple[tuple[str, str], ...] = (
    ("parse", "jobs.parse"),
    ("sitelinks", "jobs.sitelinks"),
    ("labels", "jobs.labels"),
    ("verbalize", "jobs.verbalize"),
    ("tokenize", "jobs.tokenize_facts"),  # not "tokenize": that would shadow the stdlib module
    ("prefix_rows", "jobs.prefix_rows"),
    ("load", "jobs.load"),
    ("validate", "jobs.validate"),
    ("activate", "jobs.activate"),
)
STAGE_NAMES = tuple(name for name, _ in STAGES)
DATABASE_STAGES = frozenset({"load", "validate", "activate"})


@dataclass
class StageResult:
    stage: str
    seconds: float
    counts: dict[str, Any]


def stage_module(stage: str) -> str:
    """The module implementing ``stage`` (``jobs.<module>``)."""
    module = dict(STAGES).get(stage)
    if module is None:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGE_NAMES)}")
    return module


def stage_runner(stage: str) -> Callable[[Any, Config], dict[str, Any]]:
    return importlib.import_module(stage_module(stage)).run


def select_stages(cfg: Config, only: Iterable[str] | None = None) -> list[str]:
    """The stages to run: ``only`` in pipeline order, or all that the config enables."""
    wanted = list(only) if only else list(STAGE_NAMES)
    unknown = [s for s in wanted if s not in STAGE_NAMES]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGE_NAMES)}")
    has_sql_dumps = any((cfg.input.enwiki_page, cfg.input.wb_items_per_site))
    return [s for s in STAGE_NAMES if s in wanted and (s != "sitelinks" or has_sql_dumps)]


def run_pipeline(
    spark,
    cfg: Config,
    stages: Sequence[str] | None = None,
    on_stage: Callable[[str, StageResult | None], None] | None = None,
) -> list[StageResult]:
    """Run ``stages`` (default: all enabled) and return their counts.

    ``on_stage(stage, None)`` is called before a stage and ``on_stage(stage, result)``
    after it (the CLI's progress display). When no DSN is configured and a database
    stage is selected, one embedded PostgreSQL serves all of them.
    """
    selected = select_stages(cfg, stages)
    results: list[StageResult] = []

    def run_all() -> None:
        for stage in selected:
            if on_stage:
                on_stage(stage, None)
            started = time.monotonic()
            counts = stage_runner(stage)(spark, cfg)
            result = StageResult(stage, time.monotonic() - started, counts)
            log.info("stage %s done in %.1fs", stage, result.seconds)
            results.append(result)
            if on_stage:
                on_stage(stage, result)

    if DATABASE_STAGES & set(selected) and not cfg.pg.dsn:
        with pg_dsn(cfg) as dsn:
            cfg.pg.dsn = dsn
            try:
                run_all()
            finally:
                cfg.pg.dsn = ""
    else:
        run_all()
    return results


def _run_all_stages(spark, cfg: Config) -> dict[str, Any]:
    return {r.stage: r.counts for r in run_pipeline(spark, cfg)}


def main(argv: Sequence[str] | None = None) -> int:
    return run_job_main("pipeline", "Run every stage of the build in one Spark application.", _run_all_stages, argv)


if __name__ == "__main__":
    sys.exit(main())
