"""The bodies of the Airflow DAG's Python tasks (``dags/refactx_build.py`` only wires them).

Nothing here imports Airflow. Every function reads the configuration when the task runs, from
the file the run found (``config_file``), so parsing the DAG reads no config.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

from refactx_pipeline.config import Config
from refactx_pipeline.scheduling.dumps import choose_dump

log = logging.getLogger(__name__)


def config_file(project_root: Path, env: dict[str, str] | None = None) -> str:
    """This environment's config file: ``REFACTX_CONFIG``, else ``conf/<REFACTX_ENV>.toml``
    (``local``) under ``project_root``."""
    env = os.environ if env is None else env
    explicit = env.get("REFACTX_CONFIG")
    if explicit:
        return str(Path(explicit).resolve())
    return str(project_root / "conf" / f"{env.get('REFACTX_ENV', 'local')}.toml")


def find_dump(config: str, dump_date: str | None = None, dumps: Sequence[str] | None = None) -> dict[str, Any] | None:
    """What the run builds (``config``, ``dump_date``, ``dumps``), or None: nothing to build yet.

    The dump dates already built come from the run history (``runs``), read only for a
    scheduled run (an explicit ``dump_date`` is built whether or not it was before).
    """
    from refactx_pipeline.catalog.embedded import pg_dsn
    from refactx_pipeline.scheduling.history import built_dump_dates

    cfg = Config.load(config)
    built: list[str] = []
    if not dump_date:
        with pg_dsn(cfg) as dsn:
            built = built_dump_dates(dsn, cfg.pg.schema, cfg.paths.source)
    found = choose_dump(cfg, built, dump_date=dump_date, dumps=dumps)
    if found is None:
        log.info("no dump to build under %s (built: %s)", cfg.input.dumps_root, built[-3:])
        return None
    log.info("building dump %s: %s", found.dump_date, ", ".join(found.dumps))
    return {"config": config, **found.to_dict()}


def wants_sitelinks(config: str) -> bool:
    """Whether the sitelinks stage runs (the config names Wikipedia SQL dumps)."""
    return bool(Config.load(config).input.sitelinks_source())


def branches(config: str) -> list[dict[str, str]]:
    """One entry per configured vocabulary: what its branch of the DAG passes to the stages."""
    from refactx_pipeline.scheduling.history import branch_counts_file

    return [
        {"name": v.name, "vocabulary": f"{v.name}={v.path}", "counts_file": branch_counts_file(v.name)}
        for v in Config.load(config).tokenize.vocabularies
    ]


def run_stage(stage: str, argv: Sequence[str]) -> dict[str, int] | None:
    """A stage that needs no Spark, in the task's own process (``build`` for it, as a
    spark-submit of a stage runs it); returns what later tasks of the branch are handed
    (XCom): for the load, the build it made per vocabulary."""
    from refactx_pipeline.orchestration.pipeline import run_stage_command
    from refactx_pipeline.stages.load import build_ids_of

    counts = run_stage_command(stage, argv)
    return build_ids_of(counts) if stage == "load" else None


def record_run(found: dict[str, Any], vocabularies: Sequence[str], dag_run_id: str) -> dict[str, Any]:
    """Record the run's counts in ``runs`` (see ``refactx_pipeline.scheduling.history``) and release
    the dump date's work directory, which the run's stages claimed; returns the run's row."""
    from refactx_pipeline.catalog.embedded import pg_dsn
    from refactx_pipeline.orchestration.workdir import release_work_dir
    from refactx_pipeline.scheduling.history import record_run as insert_run, run_counts

    cfg = Config.load(found["config"]).updated({"paths.dump_date": found["dump_date"]})
    try:
        counts = run_counts(cfg, vocabularies)
        with pg_dsn(cfg) as dsn:
            row = insert_run(dsn, cfg, dag_run_id, counts)
    finally:
        release_work_dir(cfg, dag_run_id)
    log.info("run recorded: %s", row)
    return row
