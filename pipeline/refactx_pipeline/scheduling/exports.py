"""Which export of a team's graph a run of the ``refactx_graph`` DAG builds.

The contract with whatever writes the exports (``[graph]`` config):

- ``graph.exports_root`` holds one folder per export, named by its date ``YYYYMMDD`` (the
  layout and the rule of the Wikidata dumps root, ``refactx_pipeline/scheduling/dumps.py``);
- an export is complete once its folder holds the marker file ``graph.export_marker``
  (default ``_EXPORTED``), written after every other file. With the marker set to ``""`` an
  export is complete once every input the config names is there (``graph.triples``,
  ``graph.labels``, ``graph.predicate_labels``, relative to the folder; a glob must match a
  file): then the exporter must write each file under another name and rename it into place,
  or a half-written file can be read;
- the inputs of an export are the config's input paths, relative to its folder
  (``graph.export_dir``, which the DAG sets for every stage of the run).

A scheduled run takes the newest complete export that is newer than every export already
built (the run history, ``runs.built_dump_dates``: an export's date is its ``dump_date``);
an older export is never built after a newer one. An export marked complete whose inputs are
missing is an error, not a wait. Nothing here imports Airflow.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable

from refactx_index.errors import ConfigError

from refactx_pipeline.config import Config, GraphConfig
from refactx_pipeline.scheduling.dumps import DATE_FOLDER, newest_unbuilt
from refactx_pipeline.graph.rules import input_paths

log = logging.getLogger(__name__)


def _inputs_present(gcfg: GraphConfig, folder: Path) -> bool:
    try:
        input_paths(gcfg.model_copy(update={"export_dir": str(folder)}))
    except ConfigError:
        return False
    return True


def complete_exports(gcfg: GraphConfig) -> list[str]:
    """The dated folders under ``graph.exports_root`` that are complete, oldest first."""
    root = Path(gcfg.exports_root)
    if not root.is_dir():
        return []
    folders = sorted(p for p in root.iterdir() if DATE_FOLDER.match(p.name) and p.is_dir())
    if gcfg.export_marker:
        return [p.name for p in folders if (p / gcfg.export_marker).is_file()]
    return [p.name for p in folders if _inputs_present(gcfg, p)]


def choose_export(cfg: Config, built: Iterable[str], export: str | None = None) -> dict[str, Any] | None:
    """``{dump_date, export_dir}`` of the export a run builds, or None while there is none
    (yet): ``export`` when given and complete, else the newest complete one newer than every
    ``built`` one. ConfigError: no exports root, or a complete export lacking an input."""
    gcfg = cfg.graph
    if not gcfg.format:
        raise ConfigError("graph.format is empty: the graph DAG needs a [graph] config")
    if not gcfg.exports_root:
        raise ConfigError("graph.exports_root is not set: the graph DAG takes its exports from there")
    complete = complete_exports(gcfg)
    if export:
        if not DATE_FOLDER.match(export):
            raise ConfigError(f"export {export!r}: expected a folder name YYYYMMDD")
        found = export if export in complete else None
    else:
        found = newest_unbuilt(complete, built)
    if found is None:
        return None
    folder = Path(gcfg.exports_root).resolve() / found  # the stages may run elsewhere than the sensor
    input_paths(gcfg.model_copy(update={"export_dir": str(folder)}))  # ConfigError naming what is missing
    return {"dump_date": found, "export_dir": str(folder)}


def find_export(config: str, export: str | None = None) -> dict[str, Any] | None:
    """The sensor's body: what the run builds (``config``, ``dump_date``, ``export_dir``), or
    None: nothing to build yet. The exports already built are read from the run history, for
    a scheduled run only (an explicit ``export`` is built whether or not it was before)."""
    from refactx_pipeline.catalog.embedded import pg_dsn
    from refactx_pipeline.scheduling.history import built_dump_dates

    cfg = Config.load(config)
    built: list[str] = []
    if not export:
        with pg_dsn(cfg) as dsn:
            built = built_dump_dates(dsn, cfg.pg.schema, cfg.paths.source)
    found = choose_export(cfg, built, export)
    if found is None:
        log.info("no export to build under %s (built: %s)", cfg.graph.exports_root, built[-3:])
        return None
    log.info("building export %s: %s", found["dump_date"], found["export_dir"])
    return {"config": config, **found}


def config_file(env: dict[str, str]) -> str:
    """The graph DAG's config file: ``REFACTX_GRAPH_CONFIG`` (required; the Wikidata DAG's
    ``REFACTX_CONFIG`` names another build)."""
    path = env.get("REFACTX_GRAPH_CONFIG")
    if not path:
        raise ConfigError("REFACTX_GRAPH_CONFIG is not set: the graph DAG needs a config file with a "
                          "[graph] section (graph.format, graph.exports_root, the inputs)")
    return str(Path(path).resolve())
