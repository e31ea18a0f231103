"""The stages of docs/architecture.md bound to their code, and how one or all of them run.

One ``Stage`` per stage module: its entry of the stage table (``orchestration/table.py``:
name, whether it needs Spark and the database) and the module's ``run``, imported here (not
looked up by name). The CLI (``refactx-index build``, ``demo``) runs the selected stages in
one Spark application (``run_pipeline``); the Airflow DAG runs each one as its own
``spark-submit`` of ``refactx_pipeline/submit.py``, which calls ``run_stage_main``. Both take
the stage list and the selection rule from here, so they cannot drift.

A stage module's ``run`` is ``run(spark, cfg)``, or ``run(spark, cfg, dsn)`` for a database
stage, or ``run(spark, cfg, dsn, build_ids)`` for a stage that works on the builds a load made
(validate, activate: ``Stage.takes_builds``); ``spark`` is None for a stage that does not need
it. ``build_ids`` maps each configured vocabulary to its build: ``run_pipeline`` hands on what
its load returned, a stage run on its own takes ``--build-id`` (the DAG renders the load task's
XCom into it). Every run first claims its work directory
(``refactx_pipeline.orchestration.workdir``): a second run of the same dump date is refused
before it writes anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from refactx_pipeline.config import Config, add_config_arguments, config_from_args
from refactx_pipeline.errors import ConfigError
from refactx_pipeline.graph import stage as graph_stage
from refactx_pipeline.orchestration.table import (  # noqa: F401 - the table's names, here too
    BUILD_STAGES,
    PER_VOCABULARY_STAGES,
    SPECS,
    STAGE_NAMES,
    StageSpec,
    parse_build_ids,
    require_build_ids,
    select_stages,
)
from refactx_pipeline.stages import (
    activate,
    labels,
    load,
    parse,
    paths,
    prefix_rows,
    sitelinks,
    tokenize,
    validate,
    verbalize,
)

log = logging.getLogger(__name__)


# the code of each stage: its module's run
RUNS: dict[str, Callable[..., dict[str, Any]]] = {
    "graph": graph_stage.run,
    "parse": parse.run,
    "sitelinks": sitelinks.run,
    "labels": labels.run,
    "verbalize": verbalize.run,
    "paths": paths.run,
    "tokenize": tokenize.run,
    "prefix_rows": prefix_rows.run,
    "load": load.run,
    "validate": validate.run,
    "activate": activate.run,
}


@dataclass(frozen=True)
class Stage(StageSpec):
    """A stage of the table with the ``run`` of its module."""

    runner: Callable[..., dict[str, Any]] | None = None

    def run(self, cfg: Config, *, spark=None, dsn: str | None = None,
            build_ids: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Run the stage once; its counts are also in ``<stage dir>/counts.json``.

        ``build_ids`` (vocabulary -> build id, what the load returned) is required by a stage
        that ``takes_builds`` and refused by any other."""
        if self.needs_spark and spark is None:
            raise ConfigError(f"stage {self.name} needs a Spark session")
        if build_ids and not self.takes_builds:
            raise ConfigError(f"stage {self.name} takes no build id (only {', '.join(BUILD_STAGES)} do)")
        run = self.runner
        if self.needs_database:
            if not dsn:
                raise ConfigError(f"stage {self.name} needs a PostgreSQL DSN")
            if self.takes_builds:
                return run(spark if self.needs_spark else None, cfg, dsn, require_build_ids(self.name, cfg, build_ids))
            return run(spark if self.needs_spark else None, cfg, dsn)
        return run(spark, cfg)


# execution order: the table's, each entry bound to its code
STAGES: tuple[Stage, ...] = tuple(
    Stage(s.name, s.description, s.needs_spark, s.needs_database, s.takes_builds, runner=RUNS[s.name])
    for s in SPECS
)
_BY_NAME = {s.name: s for s in STAGES}


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


def run_pipeline(
    spark,
    cfg: Config,
    stages: Sequence[str] | None = None,
    on_stage: Callable[[str, StageResult | None], None] | None = None,
    dsn: str | None = None,
    build_ids: Mapping[str, int] | None = None,
    run_id: str | None = None,
) -> list[StageResult]:
    """Run ``stages`` (default: all enabled) and return their counts.

    ``on_stage(stage, None)`` is called before a stage and ``on_stage(stage, result)`` after
    it (the CLI's progress display). The database stages use ``dsn``, else ``pg.dsn``, else
    one embedded PostgreSQL started for all of them. Validate and activate work on the builds
    the load of this call made, else on ``build_ids`` (vocabulary -> build id).

    The run claims its work directory first (``workdir.claim_work_dir``; ``run_id`` None: for
    this process, released at the end): a run of the same dump date already under way makes
    this one fail before it writes anything.
    """
    from refactx_pipeline.catalog.embedded import pg_dsn
    from refactx_pipeline.stages.load import build_ids_of
    from refactx_pipeline.orchestration.workdir import work_dir_claim

    selected = [stage(name) for name in select_stages(cfg, stages)]
    results: list[StageResult] = []
    builds = dict(build_ids or {})
    if not any(s.name == "load" for s in selected):  # no load to make them: given, or refused now
        for current in selected:
            if current.takes_builds:
                require_build_ids(current.name, cfg, builds)
    with contextlib.ExitStack() as stack:
        stack.enter_context(work_dir_claim(cfg, run_id))
        if dsn is None and any(s.needs_database for s in selected):
            dsn = stack.enter_context(pg_dsn(cfg))
        for current in selected:
            if on_stage:
                on_stage(current.name, None)
            started = time.monotonic()
            counts = current.run(cfg, spark=spark if current.needs_spark else None, dsn=dsn,
                                 build_ids=builds if current.takes_builds else None)
            if current.name == "load":
                builds = build_ids_of(counts)  # what validate and activate then work on
            result = StageResult(current.name, time.monotonic() - started, counts)
            log.info("stage %s done in %.1fs", current.name, result.seconds)
            results.append(result)
            if on_stage:
                on_stage(current.name, result)
    return results


ALL_STAGES = "all"  # run_stage_main's name for every enabled stage in one application


def stage_parser(name: str) -> argparse.ArgumentParser:
    """The arguments of ``submit.py <name>``: the config, ``--run-id``, and ``--build-id`` for
    a stage that works on the builds of a load (validate, activate)."""
    selected = None if name == ALL_STAGES else stage(name)
    description = "Every enabled stage, in order" if selected is None else selected.description
    parser = add_config_arguments(argparse.ArgumentParser(prog=f"refactx stage {name}", description=description))
    parser.add_argument("--run-id", help="the run this stage belongs to (the DAG passes its run id): the "
                        "run's first stage claims the dump date's work directory for it, its other stages "
                        "find it theirs, another run is refused (default: a claim for this process only)")
    if selected is not None and selected.takes_builds:
        parser.add_argument("--build-id", action="append", default=[], metavar="[VOCABULARY=]ID",
                            help="the build the load stage made, per vocabulary (required; repeatable or "
                            "comma-separated; a bare ID when the config names one vocabulary)")
    return parser


def run_stage(name: str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """One stage run on its own, or every enabled stage (``name`` ``all``), from its command
    line: parse it, claim the work directory, start Spark and the database only when needed,
    run; returns the counts."""
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.catalog.embedded import pg_dsn
    from refactx_pipeline.orchestration.workdir import work_dir_claim

    selected = [stage(s) for s in STAGE_NAMES] if name == ALL_STAGES else [stage(name)]
    args = stage_parser(name).parse_args(argv)
    cfg = config_from_args(args)
    build_ids = parse_build_ids(args.build_id, cfg) if hasattr(args, "build_id") else None
    if name != ALL_STAGES and selected[0].takes_builds:
        require_build_ids(name, cfg, build_ids)  # before Spark starts
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if name != ALL_STAGES:  # run_pipeline claims for itself
            stack.enter_context(work_dir_claim(cfg, args.run_id))
        spark = spark_session(cfg, f"refactx:{name}") if any(s.needs_spark for s in selected) else None
        if spark is not None:
            stack.callback(spark.stop)
        dsn = stack.enter_context(pg_dsn(cfg)) if any(s.needs_database for s in selected) else None
        if name == ALL_STAGES:
            counts = {r.stage: r.counts for r in run_pipeline(spark, cfg, dsn=dsn, run_id=args.run_id)}
        else:
            counts = selected[0].run(cfg, spark=spark if selected[0].needs_spark else None, dsn=dsn,
                                     build_ids=build_ids)
    log.info("%s done in %.1fs: %s", name, time.monotonic() - started, json.dumps(counts, default=str))
    return counts


def run_stage_main(name: str, argv: Sequence[str] | None = None) -> int:
    """The whole ``main()`` of one stage run on its own (``spark-submit`` from the DAG), or of
    every enabled stage in one Spark application (``name`` ``all``): ``run_stage`` with
    logging set up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_stage(name, argv)
    return 0
