"""The one configuration type of the pipeline, shared by the CLI, the Spark jobs and the DAG.

A pydantic-settings object. Sources, later ones winning:

1. the defaults below (the embedded set-up: Spark ``local[*]``, embedded PostgreSQL);
2. a TOML file (``--config conf/prod.toml``), one table per section;
3. environment variables ``REFACTX__<SECTION>__<FIELD>`` (``REFACTX__PG__DSN=postgresql://...``);
   lists are comma-separated, vocabularies ``name=path``, tables JSON;
4. overrides ``{"section.field": value}`` (the CLI's ``--set section.field=value``).

Every value is validated once, here: types, ``Literal`` choices, bounds and the rules that
span fields (``input.enwiki_page`` and ``input.enwiki_page_props`` go together, vocabulary
names are unique...). An error is a ``ConfigError`` naming each bad key. A built ``Config``
is immutable (``updated()`` returns a new, re-validated one); the embedded PostgreSQL's DSN
is passed to the stages that need it, not written into the config.
"""

from __future__ import annotations

import argparse
import codecs
import contextvars
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from refactx_index.errors import ConfigError
from refactx_index.tree.memory import (
    DEFAULT_MAX_SUBTREE_TOKENS,
    DEFAULT_SUBTREE_THRESHOLD,
    pack_bounds,
)
from refactx_index.tree.pg import DEFAULT_SCHEMA, DEFAULT_STATEMENT_TIMEOUT_MS

ENV_PREFIX = "REFACTX__"
DEFAULT_LANGUAGES = ("en",)
# names that end up in index names, table comments and paths: no separators, no quoting
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# the stages that index a build's texts, once per vocabulary (orchestration/table.py)
INDEX_STAGES = ("tokenize", "prefix_rows", "load", "validate", "activate")


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _split_list(value: Any) -> Any:
    """A comma-separated string (environment, ``--set``) is a list."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _json_table(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"expected a JSON object: {exc}") from exc
    return value


class PathsConfig(Section):
    build_root: str = "build"  # <build_root>/<source>/<dump_date>/<stage>/...
    source: str = Field("wikidata", pattern=NAME_PATTERN)
    dump_date: str = Field("sample", pattern=NAME_PATTERN)
    # the file each stage writes its counts to in its directory; a run of one vocabulary
    # beside others (the DAG's branches share the stage directories) names it per vocabulary
    counts_file: str = Field("counts.json", pattern=NAME_PATTERN)


class InputConfig(Section):
    # N-Triples: files, directories or globs; .nt, .nt.gz, .nt.bz2
    dumps: tuple[str, ...] = ()
    # Where new dumps land (the Airflow DAG's sensor; refactx_pipeline.scheduling.dumps): one folder per
    # dump named YYYYMMDD, complete once it holds dump_marker; a build reads its dump_files
    dumps_root: str = ""
    dump_marker: str = Field("_IMPORTED", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")  # a file name
    dump_files: str = "*truthy*.nt*"  # a glob inside the dated folder
    # English Wikipedia MySQL dumps (optional): page + page_props, or wb_items_per_site
    enwiki_page: str = ""
    enwiki_page_props: str = ""
    wb_items_per_site: str = ""
    # optional property table (CSV: id,label,datatype) for extracts lacking propertyType lines
    property_table: str = ""
    # IRI namespaces of entities (Q/P ids) and of direct claims (wdt:): a Wikibase's concept URI
    entity_namespace: str = "http://www.wikidata.org/entity/"
    direct_claim_namespace: str = "http://www.wikidata.org/prop/direct/"
    # Fact texts someone already has (the facts stage, instead of parse ... verbalize): text
    # files (one fact a line; .gz, .bz2) or Parquet (the string column facts_column); globs
    facts: tuple[str, ...] = ()
    facts_column: str = "text"

    _split_dumps = field_validator("dumps", "facts", mode="before")(_split_list)

    @model_validator(mode="after")
    def _page_and_page_props_together(self) -> "InputConfig":
        if bool(self.enwiki_page) != bool(self.enwiki_page_props):
            given, missing = (("enwiki_page", "enwiki_page_props") if self.enwiki_page
                              else ("enwiki_page_props", "enwiki_page"))
            raise ValueError(f"input.{given} is set but input.{missing} is not: the sitelinks stage "
                             "reads page and page_props together")
        return self

    def sitelinks_source(self) -> str:
        """Which sitelinks dumps the sitelinks stage reads: "enwiki_page_props" (page +
        page_props, preferred), "wb_items_per_site", or "" (no sitelinks stage)."""
        if self.enwiki_page:  # page_props comes with it (validated above)
            return "enwiki_page_props"
        if self.wb_items_per_site:
            return "wb_items_per_site"
        return ""


DATATYPES = Literal["WikibaseItem", "String", "Quantity", "Time", "GlobeCoordinate", "Monolingualtext",
                    "ExternalId", "Url", "CommonsMedia", "Math", "MusicalNotation", "TabularData",
                    "GeoShape", "WikibaseProperty", "WikibaseLexeme", "WikibaseForm", "WikibaseSense",
                    "EntitySchema"]


class FilterConfig(Section):
    keep_datatypes: tuple[DATATYPES, ...] = (
        "WikibaseItem", "String", "Quantity", "Time", "GlobeCoordinate", "Monolingualtext",
    )
    allow_properties: tuple[str, ...] = ()  # empty: all
    deny_properties: tuple[str, ...] = ()
    exclude_classes: tuple[str, ...] = ()  # e.g. Q13442814 via P31
    # label and description languages, preferred first; the first also names properties
    languages: tuple[str, ...] = Field(DEFAULT_LANGUAGES, min_length=1)

    _split = field_validator("keep_datatypes", "allow_properties", "deny_properties", "exclude_classes",
                             "languages", mode="before")(_split_list)

    @field_validator("allow_properties", "deny_properties", "exclude_classes")
    @classmethod
    def _entity_ids(cls, value: tuple[str, ...], info) -> tuple[str, ...]:
        kind, example = ("Q", "Q5") if info.field_name == "exclude_classes" else ("P", "P31")
        bad = [v for v in value if not re.fullmatch(rf"{kind}[1-9][0-9]*", v)]
        if bad:
            raise ValueError(f"expected ids like {example}, got {', '.join(map(repr, bad))}")
        return value

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]+)*", v)]
        if bad:
            raise ValueError(f"expected language codes like en or pt-br, got {', '.join(map(repr, bad))}")
        return tuple(v.lower() for v in value)


class LabelsConfig(Section):
    # what to do with a label several entities share (refactx_pipeline/stages/labels.py)
    collision_policy: Literal["disambiguate", "keep", "drop", "qualify"] = "disambiguate"
    # the properties `disambiguate` may tell entities apart by, first tried first: instance of,
    # country, located in, occupation, date of birth, inception, publication date, subclass of
    distinguishing_properties: tuple[str, ...] = ("P31", "P17", "P131", "P106", "P569", "P571", "P577", "P279")

    _split = field_validator("distinguishing_properties", mode="before")(_split_list)

    @field_validator("distinguishing_properties")
    @classmethod
    def _property_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not re.fullmatch(r"P[1-9][0-9]*", v)]
        if bad:
            raise ValueError(f"expected ids like P31, got {', '.join(map(repr, bad))}")
        return value


class VerbalizeConfig(Section):
    descriptions: bool = True
    short_descriptions: bool = True
    inverse: bool = False
    # property id -> inverse label, e.g. {"P40": "child of"}
    inverse_labels: dict[str, str] = Field(default_factory=dict)

    _table = field_validator("inverse_labels", mode="before")(_json_table)


def _index_name_template(value: str) -> str:
    fields = set(re.findall(r"{([^{}]*)}", value))
    if not fields <= {"source", "vocabulary"} or "vocabulary" not in fields:
        raise ValueError("must contain {vocabulary} and no placeholder but {source} and {vocabulary}, "
                         f"got {value!r}")
    return value


class PathIndexConfig(Section):
    """A reasoning-path index (GCR's KG-Trie) instead of a fact index: the ``paths`` stage
    enumerates simple paths from seed entities over the kept statements (docs/paths.md) and
    tokenize ... activate index the path texts, under ``index_name``, with the catalog's
    ``index_kind`` ``paths``. Seeds: the ids of ``seeds_file``, the ids under
    ``questions_field`` of every line of ``questions_file`` (JSON Lines), and, with
    ``min_facts`` > 0, every entity that is the subject of at least that many kept statements."""

    enabled: bool = False
    max_hops: int = Field(2, ge=1, le=4)  # L: paths of 1..L edges
    seeds_file: str = ""  # one entity id per line
    questions_file: str = ""  # JSON Lines
    questions_field: str = "entities"  # a list of entity ids per question
    min_facts: int = Field(0, ge=0)  # 0: no seeds by degree
    # per node, only its first max_fanout out-edges by (relation label, target label, target
    # id) are followed; per seed and hop, only the first paths by text up to max_paths in all
    max_fanout: int = Field(100, ge=1)
    max_paths: int = Field(10_000, ge=1)
    separator: str = " -> "  # between an entity and a relation: A -> r -> B
    end: str = " ."  # closes every path: a path whose last entity has more paths must still end
    # index name per vocabulary; {source} and {vocabulary} are substituted
    index_name: str = "{source}-paths-{vocabulary}"

    @field_validator("separator")
    @classmethod
    def _separator_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a path separator must hold a visible character")
        return value

    _index_name = field_validator("index_name")(_index_name_template)


GRAPH_FORMATS = Literal["", "csv", "tsv", "parquet", "ntriples", "turtle", "names"]


class GraphConfig(Section):
    """A team's own graph instead of the Wikidata dump (``refactx_pipeline.graph.rules``): triples
    with a labels table and a predicate labels table (CSV, TSV or Parquet), or N-Triples or
    Turtle with ``rdfs:label``/``schema:description``; or ``names``: one triple a line,
    ``subject|relation|object``, whose names are their ids (MetaQA's ``kb.txt``; ``delimiter``
    tab for a TSV of names), relation labels from ``relation_labels``. ``format`` empty: no
    graph (the Wikidata stages run). Inverse facts use ``verbalize.inverse`` and ``verbalize.inverse_labels`` keyed
    by predicate id."""

    format: GRAPH_FORMATS = ""
    # files or glob patterns (N-Triples/Turtle: labels and descriptions may be in them too);
    # relative ones are under export_dir when it is set
    triples: tuple[str, ...] = ()
    labels: str = ""  # id, label, optional description (CSV/TSV/Parquet; N-Triples/Turtle: optional)
    predicate_labels: str = ""  # id, label
    delimiter: str = ""  # empty: "," for csv, tab for tsv, "|" for names
    quote_char: str = '"'
    escape_char: str = '"'  # escapes a quote inside a quoted field: '"' doubles it (RFC 4180)
    encoding: str = "utf-8"  # CSV/TSV (N-Triples and Turtle are UTF-8); a BOM is skipped
    # the export being built: relative input paths are under it (the graph DAG sets it per run)
    export_dir: str = ""
    # the graph DAG's exports: dated folders (YYYYMMDD) under exports_root, each complete once
    # it holds export_marker (empty: once every input file named by triples/labels/
    # predicate_labels is there) -- refactx_pipeline/scheduling/exports.py
    exports_root: str = ""
    export_marker: str = "_EXPORTED"
    subject_column: str = "subject"
    predicate_column: str = "predicate"
    object_column: str = "object"
    # empty or missing in a row: the object is an entity id; else the literal's datatype
    # (string, date, datetime, decimal, integer, coordinate or their xsd:/IRI spellings)
    datatype_column: str = "datatype"
    id_column: str = "id"
    label_column: str = "label"
    description_column: str = "description"
    # what a valid entity or predicate id looks like (a Python regular expression, whole id)
    id_pattern: str = r"[^\s<>\"{}|^`\\]+"
    # N-Triples: the IRI prefix cut from entity and predicate IRIs to give their ids
    namespace: str = ""
    allow_predicates: tuple[str, ...] = ()  # empty: all
    deny_predicates: tuple[str, ...] = ()
    # names: relation id -> label ({directed_by = "directed by"}); a relation not listed is
    # labelled by its id with underscores as spaces
    relation_labels: dict[str, str] = Field(default_factory=dict)

    _split = field_validator("triples", "allow_predicates", "deny_predicates", mode="before")(_split_list)
    _relations = field_validator("relation_labels", mode="before")(_json_table)

    @field_validator("delimiter", "quote_char", "escape_char")
    @classmethod
    def _one_character(cls, value: str, info) -> str:
        if len(value) > 1 or (info.field_name != "delimiter" and len(value) != 1):
            raise ValueError(f"expected one character, got {value!r}")
        return value

    @field_validator("encoding", "id_pattern")
    @classmethod
    def _usable(cls, value: str, info) -> str:
        import codecs

        try:
            codecs.lookup(value) if info.field_name == "encoding" else re.compile(value)
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r}") from None
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _inputs_named(self) -> "GraphConfig":
        if not self.format:
            return self
        missing = [name for name in ("triples", "labels", "predicate_labels")
                   if not getattr(self, name) and (self.format not in ("ntriples", "turtle", "names")
                                                   or name == "triples")]
        if missing:
            raise ValueError(f"graph.format is {self.format!r} but graph.{' and graph.'.join(missing)} "
                             "not set")
        if self.format in ("ntriples", "turtle", "names") and codecs.lookup(self.encoding).name != "utf-8":
            raise ValueError(f"graph.encoding is {self.encoding!r} but {self.format} is UTF-8 text "
                             "(graph.encoding applies to csv and tsv)")
        if self.format == "names" and (self.labels or self.predicate_labels):
            raise ValueError("graph.format is 'names': the names are the labels (no graph.labels) and "
                             "graph.relation_labels labels the relations (no graph.predicate_labels)")
        return self


class VocabularyConfig(Section):
    name: str = Field("qwen2.5", pattern=NAME_PATTERN)
    path: str = ""  # a directory holding tokenizer.json, or a hub name

    @classmethod
    def parse(cls, text: str) -> "VocabularyConfig":
        """``name=path`` (from the environment or the CLI)."""
        name, sep, path = text.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"vocabulary {text!r}: expected name=path")
        return cls(name=name.strip(), path=path.strip())


def _vocabularies(value: Any) -> Any:
    if isinstance(value, str):
        value = [item for item in value.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            if isinstance(item, str):
                name, sep, path = item.partition("=")
                if not sep or not name.strip():
                    raise ValueError(f"{item!r}: expected name=path")
                item = {"name": name.strip(), "path": path.strip()}
            out.append(item)
        return tuple(out)
    return value


class TokenizeConfig(Section):
    vocabularies: tuple[VocabularyConfig, ...] = ()
    fact_prefix: str = " "
    fact_suffix: str = ""
    max_tokens: int = Field(256, ge=4, le=4096)  # refactx_index.tree.format.MAX_FRAGMENT_LEVELS
    reuse_from: str = ""  # token dataset root of an earlier build (incremental)

    _vocab = field_validator("vocabularies", mode="before")(_vocabularies)

    @field_validator("vocabularies")
    @classmethod
    def _unique_names(cls, value: tuple[VocabularyConfig, ...]) -> tuple[VocabularyConfig, ...]:
        names = [v.name for v in value]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"vocabulary names must be unique: {', '.join(repeated)} repeated")
        return value


class TreeConfig(Section):
    # a prefix with at most T facts below it, and at most B tokens after it in those facts,
    # stores its whole subtree in one row; any other is expanded (docs/tree.md)
    # defaults by measurement (docs/scale.md, "Index size"): 1024 facts and 32768 tokens give
    # the generated dump's 39-token facts about 31 bytes each (256 and 8192: 36) with a
    # generation's walk as fast (mean 42 µs a step, p99 0.7 ms)
    subtree_threshold: int = Field(DEFAULT_SUBTREE_THRESHOLD, ge=1)  # T
    max_subtree_tokens: int = Field(DEFAULT_MAX_SUBTREE_TOKENS, ge=1)  # B
    # packed rows: an expanded prefix of at most pack_facts facts (and pack_facts x B / T
    # tokens) stores whole, in its own row, its children of at most pack_child_facts facts,
    # so a row of a few facts does not pay a row's overhead on its own (docs/tree.md).
    # Unset: 4 x T and T / 16, none below T = 64 (memory.pack_bounds); 0: every child of an
    # expanded prefix is a row
    pack_facts: int | None = Field(None, ge=0)
    pack_child_facts: int | None = Field(None, ge=0)
    # the prefix rows job sorts facts into range partitions of at most this many (one per task)
    facts_per_partition: int = Field(200_000, ge=1)

    def pack_bounds(self) -> tuple[int, int]:
        """(pack_facts, pack_child_facts), the defaults derived from T where unset."""
        facts, child = pack_bounds(self.subtree_threshold)
        return (facts if self.pack_facts is None else self.pack_facts,
                child if self.pack_child_facts is None else self.pack_child_facts)


class PgConfig(Section):
    dsn: str = ""  # empty: start an embedded PostgreSQL under embedded_dir
    embedded_dir: str = ".pgdata"
    schema_: str = Field(DEFAULT_SCHEMA, alias="schema", pattern=r"^[a-z_][a-z0-9_]*$")
    retention: int = Field(3, ge=1)  # builds that served, kept per index name (the active one included)
    # a build that stopped serving is kept this long whatever retention says: readers may still use it
    retention_grace_s: float = Field(300.0, ge=0)
    # DETACH/DROP of an old build waits at most this long for a reader's lock (then a later run drops it)
    lock_timeout_ms: int = Field(2000, ge=1)
    # activation refuses a build with fewer facts than the served one by more than this share (1: off)
    max_shrink: float = Field(0.2, ge=0, le=1)
    # the role the runtime serves as: USAGE on the schema, SELECT on the catalog and each build table
    reader_role: str = Field("", pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$")
    load_workers: int = Field(2, ge=1, le=64)
    validate_sample: int = Field(1000, ge=0)
    statement_timeout_ms: int = Field(DEFAULT_STATEMENT_TIMEOUT_MS, ge=1)
    # index name served per vocabulary; {source} and {vocabulary} are substituted
    index_name: str = "{source}-{vocabulary}"

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @property
    def schema(self) -> str:  # "schema" shadows a BaseModel attribute, hence the alias
        return self.schema_

    _index_name = field_validator("index_name")(_index_name_template)


class SparkConfig(Section):
    master: str = "local[*]"
    driver_memory: str = Field("4g", pattern=r"^[0-9]+[kmgtKMGT]?$")
    shuffle_partitions: int = Field(8, ge=1)
    # The JVM options of the driver and executors of a Spark the pipeline starts itself (not
    # under spark-submit, whose JVM already runs). ParallelGC: the JDK's default G1 runs
    # concurrent threads that take CPU from the Python workers; on 2 cores the realistic
    # 1M-fact build was 5-9% faster with ParallelGC in paired runs, about the spread between
    # runs (docs/scale.md, "Where the time goes"). A spark.driver.extraJavaOptions or
    # spark.executor.extraJavaOptions in conf replaces it.
    java_options: str = "-XX:+UseParallelGC"
    # Spark's own log level; WARN shows codegen fallbacks (harmless, very long)
    log_level: Literal["ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN"] = "ERROR"
    conf: dict[str, str] = Field(default_factory=dict)

    _table = field_validator("conf", mode="before")(_json_table)


# Where Config.load's sources come from during one load (pydantic-settings builds its sources
# per class; these say which file and which environment this load reads).
_SOURCES: contextvars.ContextVar[tuple[Path | None, Mapping[str, str]]] = contextvars.ContextVar("_SOURCES")


class Config(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    paths: PathsConfig = PathsConfig()
    input: InputConfig = InputConfig()
    filter: FilterConfig = FilterConfig()
    labels: LabelsConfig = LabelsConfig()
    verbalize: VerbalizeConfig = VerbalizeConfig()
    graph: GraphConfig = GraphConfig()
    path_index: PathIndexConfig = PathIndexConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    tree: TreeConfig = TreeConfig()
    pg: PgConfig = PgConfig()
    spark: SparkConfig = SparkConfig()

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise config_error(exc) from None

    @model_validator(mode="after")
    def _one_source_of_facts(self) -> "Config":
        if self.input.facts and self.graph.format:
            raise ValueError("input.facts and graph.format are both set: a build reads fact texts or "
                             "a graph, not both")
        if self.input.facts and self.path_index.enabled:
            raise ValueError("path_index.enabled needs statements (parse or graph), and input.facts "
                             "holds fact texts only")
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        toml_path, env = _SOURCES.get((None, {}))
        sources: list[PydanticBaseSettingsSource] = [init_settings, PrefixedEnvSource(settings_cls, env)]
        if toml_path is not None:
            sources.append(TomlFileSource(settings_cls, toml_path))
        return tuple(sources)

    # ------------------------------------------------------------------ building
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> "Config":
        """The config of a TOML file, then ``REFACTX__*`` variables of ``env`` (default: the
        process environment), then dotted ``overrides``."""
        token = _SOURCES.set((Path(path) if path else None, os.environ if env is None else env))
        try:
            return cls(**nest(overrides or {}))
        finally:
            _SOURCES.reset(token)

    def updated(self, overrides: Mapping[str, Any]) -> "Config":
        """A new Config: this one with dotted ``overrides`` applied and everything re-validated."""
        # outside load() the sources are empty: only these values are validated
        return type(self)(**deep_merge(self.to_dict(), nest(overrides)))

    # ------------------------------------------------------------------ derived values
    def build_dir(self) -> Path:
        p = self.paths
        return Path(p.build_root) / p.source / p.dump_date

    def stage_dir(self, stage: str) -> Path:
        """A stage's directory; a path build's index stages (tokenize ... activate) have their
        own under ``path_index/``, so that it never overwrites the fact index's."""
        if self.path_index.enabled and stage in INDEX_STAGES:
            return self.build_dir() / "path_index" / stage
        return self.build_dir() / stage

    @property
    def index_kind(self) -> str:
        """What the index holds, recorded in the catalog: ``facts`` or ``paths``."""
        return "paths" if self.path_index.enabled else "facts"

    def index_name(self, vocabulary: str) -> str:
        """The index name a vocabulary's build is served under (``pg.index_name``, or
        ``path_index.index_name`` for a path build)."""
        template = self.path_index.index_name if self.path_index.enabled else self.pg.index_name
        return template.format(source=self.paths.source, vocabulary=vocabulary)

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        return cls(**json.loads(text))


class TomlFileSource(PydanticBaseSettingsSource):
    """The TOML config file; a missing or broken file is a ConfigError naming it."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        super().__init__(settings_cls)
        try:
            with open(path, "rb") as fh:
                self.data = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc

    def get_field_value(self, field, field_name):  # pragma: no cover - __call__ is used
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


class PrefixedEnvSource(PydanticBaseSettingsSource):
    """``REFACTX__<SECTION>__<FIELD>`` variables of one mapping; a malformed name is an error."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.data: dict[str, Any] = {}
        for key, value in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            parts = key[len(ENV_PREFIX):].lower().split("__")
            if len(parts) != 2 or not all(parts):
                raise ConfigError(f"{key}: expected {ENV_PREFIX}<SECTION>__<FIELD>")
            self.data.setdefault(parts[0], {})[parts[1]] = value

    def get_field_value(self, field, field_name):  # pragma: no cover - __call__ is used
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


def nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"pg.dsn": x}`` -> ``{"pg": {"dsn": x}}``; a key that is not ``section.field`` is an error."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        section, sep, name = key.partition(".")
        if not sep or not section or not name or "." in name:
            raise ConfigError(f"{key!r}: expected SECTION.FIELD, e.g. tree.subtree_threshold")
        out.setdefault(section, {})[name] = value
    return out


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def config_error(exc: ValidationError) -> ConfigError:
    """One line per bad key: ``tree.subtree_threshold: Input should be ... (got 'many')``."""
    lines = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"] if not isinstance(part, int))
        loc = loc.replace("schema_", "schema")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key"
            got = ""
        else:
            got = f" (got {error['input']!r})" if "input" in error and not isinstance(error["input"], dict) else ""
        lines.append(f"{loc or 'config'}: {message}{got}")
    return ConfigError("invalid configuration:\n  " + "\n  ".join(lines))


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--config FILE`` and repeatable ``--set SECTION.FIELD=VALUE`` (CLI and jobs alike)."""
    parser.add_argument("--config", help="TOML config file (see conf/); REFACTX__SECTION__FIELD env vars override it")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override one config field, e.g. --set tree.subtree_threshold=16 (repeatable)")
    return parser


def overrides_from_args(args: argparse.Namespace) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected SECTION.FIELD=VALUE")
        overrides[key.strip()] = value
    return overrides


def config_from_args(args: argparse.Namespace, **extra: Any) -> Config:
    """The Config named by ``add_config_arguments``' options (``extra``: more dotted overrides)."""
    return Config.load(args.config, overrides={**overrides_from_args(args), **extra})
