"""The stage table: every stage's name, what it needs, the order they run in, which of them
the config enables, and the build ids a stage that works on a load's builds is handed.

Data and rules only, no stage code: the DAG files (through ``scheduling/wiring.py``) and the
run history read it when Airflow parses a DAG or a sensor pokes, without importing Spark or
any stage. ``orchestration/pipeline.py`` binds each entry to the ``run`` of its stage module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from refactx_pipeline.config import INDEX_STAGES, Config
from refactx_pipeline.errors import ConfigError


@dataclass(frozen=True)
class StageSpec:
    name: str
    description: str
    needs_spark: bool = True
    needs_database: bool = False
    # works on the builds a load made: its StageContext's build_ids, given explicitly
    takes_builds: bool = False


# execution order
SPECS: tuple[StageSpec, ...] = (
    # a team's own graph (graph.format set) replaces parse, sitelinks and labels
    StageSpec("graph", "Read a graph's triples and labels tables into parse and labels outputs"),
    StageSpec("parse", "Parse truthy N-Triples into statements, terms and properties"),
    StageSpec("sitelinks", "English Wikipedia titles per item from MySQL dumps"),
    StageSpec("labels", "One display label per entity"),
    StageSpec("verbalize", "Verbalize statements and descriptions into facts"),
    # fact texts someone already has (input.facts) replace parse ... verbalize
    StageSpec("facts", "Read fact texts (input.facts) into facts, with rejects and duplicates counted"),
    # a path build (path_index.enabled): its texts, not verbalize's, go on to tokenize
    StageSpec("paths", "Enumerate and verbalize reasoning paths from seed entities"),
    StageSpec("tokenize", "Tokenize the facts for every vocabulary"),
    StageSpec("prefix_rows", "Prefix rows: each vocabulary's tree, sorted and cut into bounded rows"),
    StageSpec("load", "COPY prefix rows into a new PostgreSQL partition", needs_spark=False, needs_database=True),
    StageSpec("validate", "Validate loaded builds before activation", needs_database=True, takes_builds=True),
    StageSpec("activate", "Activate validated builds and apply retention",
              needs_spark=False, needs_database=True, takes_builds=True),
)
STAGE_NAMES = tuple(s.name for s in SPECS)
BUILD_STAGES = tuple(s.name for s in SPECS if s.takes_builds)
# the stages that work per vocabulary: the Airflow DAG runs them once per vocabulary, each run
# restricted to it; the stages before them run once for all vocabularies
PER_VOCABULARY_STAGES = INDEX_STAGES
_BY_NAME = {s.name: s for s in SPECS}


def spec(name: str) -> StageSpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"unknown stage {name!r}; stages: {', '.join(STAGE_NAMES)}") from None


def select_stages(cfg: Config, only: Iterable[str] | None = None) -> list[str]:
    """The stages to run: ``only`` in pipeline order, or all that the config enables
    (``sitelinks`` only when ``input`` names sitelinks dumps; ``graph`` instead of parse,
    sitelinks and labels when ``graph.format`` is set; ``facts`` instead of parse ... verbalize
    when ``input.facts`` is set; ``paths`` only for a path build)."""
    wanted = list(only) if only else list(STAGE_NAMES)
    for name in wanted:
        spec(name)
    if cfg.input.facts:
        skipped = {"graph", "parse", "sitelinks", "labels", "verbalize"}
    elif cfg.graph.format:
        skipped = {"parse", "sitelinks", "labels", "facts"}
    else:
        skipped = {"graph", "facts"} | (set() if cfg.input.sitelinks_source() else {"sitelinks"})
    if not cfg.path_index.enabled:
        skipped.add("paths")
    return [s for s in STAGE_NAMES if s in wanted and s not in skipped]


def parse_build_ids(values: Iterable[str], cfg: Config) -> dict[str, int]:
    """``--build-id`` values: ``ID`` (the config names one vocabulary) or ``VOCABULARY=ID``,
    repeated or comma-separated, into vocabulary -> build id."""
    names = [v.name for v in cfg.tokenize.vocabularies]
    ids: dict[str, int] = {}
    for item in (part.strip() for value in values for part in value.split(",")):
        if not item:
            continue
        vocab, sep, number = item.rpartition("=")
        if not sep:
            if len(names) != 1:
                raise ConfigError(f"--build-id {item}: the config names {len(names)} vocabularies "
                                  f"({', '.join(names)}); give VOCABULARY=ID for each")
            vocab = names[0]
        try:
            ids[vocab.strip()] = int(number)
        except ValueError:
            raise ConfigError(f"--build-id {item!r}: expected ID or VOCABULARY=ID, ID an integer") from None
    return ids


def require_build_ids(stage_name: str, cfg: Config, build_ids: Mapping[str, int] | None) -> dict[str, int]:
    """The build of every configured vocabulary, and of no other, or a ``ConfigError`` saying
    what is missing (whether each build is the right one is the stage's check, in the catalog)."""
    names = [v.name for v in cfg.tokenize.vocabularies]
    given = dict(build_ids or {})
    missing = [n for n in names if n not in given]
    if missing:
        raise ConfigError(
            f"stage {stage_name} works on the builds a load made, and was given none for "
            f"{', '.join(missing)}: run it after load in the same run, or pass --build-id "
            f"VOCABULARY=ID (the load's counts name the ids; refactx-pipeline builds lists them)")
    extra = sorted(set(given) - set(names))
    if extra:
        raise ConfigError(f"stage {stage_name}: --build-id names {', '.join(extra)}, not among the "
                          f"configured vocabularies ({', '.join(names)})")
    return {n: int(given[n]) for n in names}
