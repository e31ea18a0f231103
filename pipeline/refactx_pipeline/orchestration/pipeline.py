"""The stages of docs/architecture.md bound to their code, and ``build``, the one way they run.

One ``Stage`` per stage module: its entry of the stage table (``orchestration/table.py``:
name, whether it needs Spark and the database, whether it works on a load's builds) and the
module's ``run``, imported here (not looked up by name). Every stage's ``run`` is
``run(ctx: StageContext) -> StageCounts`` (``stages/contract.py``); ``Stage.run`` is the one
place that checks the context against the table before the stage gets it.

``build`` owns the order of a run, whoever starts it: the CLI (``refactx-pipeline build``,
``demo``, ``paths``: it adds progress), spark-submit of ``refactx_pipeline/submit.py`` (one
stage, or ``all``, through ``run_stage_main``) and the Airflow DAG's Python stage tasks
(``scheduling/dagtasks.py``, through ``run_stage_command``). ``build_ids`` maps each
configured vocabulary to its build: ``build`` hands on what its load returned; a run of
validate or activate without the load takes ``--build-id`` (the DAG renders the load task's
XCom into it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from refactx_pipeline.catalog.embedded import pg_dsn
from refactx_pipeline.common import spark_started
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
from refactx_pipeline.orchestration.workdir import work_dir_claim
from refactx_pipeline.stages import (
    activate,
    facts,
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
from refactx_pipeline.stages.contract import StageContext, StageCounts

log = logging.getLogger(__name__)

StageRun = Callable[[StageContext], StageCounts]

# the code of each stage: its module's run
RUNS: dict[str, StageRun] = {
    "graph": graph_stage.run,
    "parse": parse.run,
    "sitelinks": sitelinks.run,
    "labels": labels.run,
    "verbalize": verbalize.run,
    "facts": facts.run,
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

    runner: StageRun | None = None

    def run(self, ctx: StageContext) -> StageCounts:
        """Run the stage once; its counts are also in ``<stage dir>/counts.json``.

        The context is checked against the table first: a Spark session for a stage that
        needs Spark, a DSN for a database stage, and ``build_ids`` (vocabulary -> build id,
        what the load returned) for every configured vocabulary of a stage that
        ``takes_builds``, for no other stage."""
        if self.needs_spark and ctx.spark is None:
            raise ConfigError(f"stage {self.name} needs a Spark session")
        if ctx.build_ids and not self.takes_builds:
            raise ConfigError(f"stage {self.name} takes no build id (only {', '.join(BUILD_STAGES)} do)")
        if self.needs_database and not ctx.dsn:
            raise ConfigError(f"stage {self.name} needs a PostgreSQL DSN")
        if self.takes_builds:
            ctx = replace(ctx, build_ids=require_build_ids(self.name, ctx.cfg, ctx.build_ids))
        return self.runner(ctx)


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
    counts: StageCounts


def stage(name: str) -> Stage:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown stage {name!r}; stages: {', '.join(STAGE_NAMES)}") from None


def build(
    cfg: Config,
    stages: Sequence[str] | None = None,
    *,
    spark=None,
    dsn: str | None = None,
    build_ids: Mapping[str, int] | None = None,
    run_id: str | None = None,
    on_stage: Callable[[str, StageResult | None], None] | None = None,
    app_name: str = "refactx:build",
    jvm_stderr: Path | None = None,
) -> list[StageResult]:
    """Run ``stages`` (default: all the config enables) in order and return their counts.

    The order, whoever calls: select the stages (``select_stages``: ``stages`` in pipeline
    order, those the config leaves out skipped) -> check the build ids of validate and
    activate when no load runs before them -> claim the dump date's work directory
    (``workdir.work_dir_claim``; ``run_id`` None: for this process, released at the end) ->
    start Spark (``app_name``; ``jvm_stderr``: where the JVM's own stderr goes) when a selected
    stage needs it and no ``spark`` is given, stopped at the end -> the database (``dsn``,
    else ``pg.dsn``, else one embedded PostgreSQL) when a selected stage needs it -> the
    stages, validate and activate on the builds this call's load made, else on ``build_ids``.
    A refused run (unknown stage, build ids missing, the work directory claimed by another
    run) fails before it starts Spark and before any stage writes.

    ``on_stage(stage, None)`` is called before a stage and ``on_stage(stage, result)`` after
    it (the CLI's progress display).
    """
    selected = [stage(name) for name in select_stages(cfg, stages)]
    if stages:
        left_out = [name for name in stages if name not in {s.name for s in selected}]
        if left_out:
            log.warning("stages %s are not enabled by this config: skipped", ", ".join(left_out))
    builds = dict(build_ids or {})
    if not any(s.name == "load" for s in selected):  # no load to make them: given, or refused now
        for current in selected:
            if current.takes_builds:
                require_build_ids(current.name, cfg, builds)
    results: list[StageResult] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(work_dir_claim(cfg, run_id))
        if spark is None and any(s.needs_spark for s in selected):
            spark = stack.enter_context(spark_started(cfg, app_name, jvm_stderr=jvm_stderr))
        if dsn is None and any(s.needs_database for s in selected):
            dsn = stack.enter_context(pg_dsn(cfg))
        for current in selected:
            if on_stage:
                on_stage(current.name, None)
            started = time.monotonic()
            # each stage is handed what the table says it needs, and nothing else
            ctx = StageContext(cfg, spark=spark if current.needs_spark else None,
                               dsn=dsn if current.needs_database else None,
                               build_ids=builds if current.takes_builds else None)
            counts = current.run(ctx)
            if current.name == "load":
                builds = load.build_ids_of(counts)  # what validate and activate then work on
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


def run_stage_command(name: str, argv: Sequence[str] | None = None) -> StageCounts:
    """One stage run on its own, or every enabled stage (``name`` ``all``), from its command
    line (``stage_parser``): ``build`` for it; returns the stage's counts (for ``all``: the
    counts of each stage, by name)."""
    args = stage_parser(name).parse_args(argv)
    cfg = config_from_args(args)
    build_ids = parse_build_ids(args.build_id, cfg) if hasattr(args, "build_id") else None
    started = time.monotonic()
    results = build(cfg, None if name == ALL_STAGES else [name], build_ids=build_ids, run_id=args.run_id,
                    app_name=f"refactx:{name}")
    if name == ALL_STAGES:
        counts = {r.stage: r.counts for r in results}
    else:
        counts = results[0].counts if results else {}
    log.info("%s done in %.1fs: %s", name, time.monotonic() - started, json.dumps(counts, default=str))
    return counts


def run_stage_main(name: str, argv: Sequence[str] | None = None) -> int:
    """The whole ``main()`` of one stage run on its own (``spark-submit`` from the DAG), or of
    every enabled stage in one Spark application (``name`` ``all``): ``run_stage_command``
    with logging set up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_stage_command(name, argv)
    return 0
