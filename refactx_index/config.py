"""The one configuration type, shared by the CLI, the Spark jobs and the DAGs.

Sources, later ones winning:
1. the defaults below (the embedded set-up: Spark ``local[*]``, embedded PostgreSQL);
2. a TOML file (``--config conf/prod.toml``), sections named like the dataclasses;
3. environment variables ``REFACTX__<SECTION>__<FIELD>`` (for example
   ``REFACTX__PG__DSN=postgresql://...``); lists are comma-separated.

Only the standard library is used, so the slim runtime can import it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, get_type_hints

from .errors import ConfigError

ENV_PREFIX = "REFACTX__"


@dataclass
class PathsConfig:
    build_root: str = "build"  # <build_root>/<source>/<dump_date>/<stage>/...
    source: str = "wikidata"
    dump_date: str = "sample"


@dataclass
class InputConfig:
    # N-Triples: files, directories or globs; .nt, .nt.gz, .nt.bz2
    dumps: list[str] = field(default_factory=list)
    # English Wikipedia MySQL dumps (optional): page + page_props, or wb_items_per_site
    enwiki_page: str = ""
    enwiki_page_props: str = ""
    wb_items_per_site: str = ""
    # optional property table (CSV: id,label,datatype) for extracts lacking propertyType lines
    property_table: str = ""
    # IRI namespaces of entities (Q/P ids) and of direct claims (wdt:): a Wikibase's concept URI
    entity_namespace: str = "http://www.wikidata.org/entity/"
    direct_claim_namespace: str = "http://www.wikidata.org/prop/direct/"

    def sitelinks_source(self) -> str:
        """Which sitelinks dumps the sitelinks stage reads: "enwiki_page_props" (page +
        page_props, preferred), "wb_items_per_site", or "" when none is configured."""
        if self.enwiki_page and self.enwiki_page_props:
            return "enwiki_page_props"
        if self.wb_items_per_site:
            return "wb_items_per_site"
        return ""


@dataclass
class FilterConfig:
    keep_datatypes: list[str] = field(
        default_factory=lambda: [
            "WikibaseItem",
            "String",
            "Quantity",
            "Time",
            "GlobeCoordinate",
            "Monolingualtext",
        ]
    )
    allow_properties: list[str] = field(default_factory=list)  # empty: all
    deny_properties: list[str] = field(default_factory=list)
    exclude_classes: list[str] = field(default_factory=list)  # e.g. Q13442814 via P31
    languages: list[str] = field(default_factory=lambda: ["en"])


@dataclass
class LabelsConfig:
    collision_policy: str = "keep"  # keep | drop | qualify


@dataclass
class VerbalizeConfig:
    descriptions: bool = True
    short_descriptions: bool = True
    inverse: bool = False
    # property id -> inverse label, e.g. {"P40": "child of"}
    inverse_labels: dict[str, str] = field(default_factory=dict)


@dataclass
class VocabularyConfig:
    name: str = "qwen2.5"
    path: str = ""  # a directory holding tokenizer.json, or a hub name

    @classmethod
    def parse(cls, text: str) -> "VocabularyConfig":
        """``name=path`` (from the environment or the CLI)."""
        name, sep, path = text.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"vocabulary {text!r}: expected name=path")
        return cls(name=name.strip(), path=path.strip())


@dataclass
class TokenizeConfig:
    vocabularies: list[VocabularyConfig] = field(default_factory=list)
    fact_prefix: str = " "
    fact_suffix: str = ""
    max_tokens: int = 256
    reuse_from: str = ""  # token dataset root of an earlier build (incremental)


@dataclass
class TreeConfig:
    depth: int = 8  # D: rows stored for prefixes shorter than this
    subtree_threshold: int = 64  # T: a prefix with at most T facts stores its whole subtree


@dataclass
class PgConfig:
    dsn: str = ""  # empty: start an embedded PostgreSQL under embedded_dir
    embedded_dir: str = ".pgdata"
    schema: str = "refactx"
    retention: int = 3  # builds kept per index name
    load_workers: int = 2
    validate_sample: int = 1000
    statement_timeout_ms: int = 5000
    # index name served per vocabulary; {source} and {vocabulary} are substituted
    index_name: str = "{source}-{vocabulary}"


@dataclass
class SparkConfig:
    master: str = "local[*]"
    driver_memory: str = "4g"
    shuffle_partitions: int = 8
    # Spark's own log level; WARN shows codegen fallbacks (harmless, very long)
    log_level: str = "ERROR"
    conf: dict[str, str] = field(default_factory=dict)


@dataclass
class Config:
    paths: PathsConfig = field(default_factory=PathsConfig)
    input: InputConfig = field(default_factory=InputConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    labels: LabelsConfig = field(default_factory=LabelsConfig)
    verbalize: VerbalizeConfig = field(default_factory=VerbalizeConfig)
    tokenize: TokenizeConfig = field(default_factory=TokenizeConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    pg: PgConfig = field(default_factory=PgConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)

    # ------------------------------------------------------------------ paths
    def build_dir(self) -> Path:
        p = self.paths
        return Path(p.build_root) / p.source / p.dump_date

    def stage_dir(self, stage: str) -> Path:
        return self.build_dir() / stage

    # ------------------------------------------------------------------ io
    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> "Config":
        data: dict[str, Any] = {}
        if path:
            try:
                with open(path, "rb") as fh:
                    data = tomllib.load(fh)
            except FileNotFoundError as exc:
                raise ConfigError(f"config file not found: {path}") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        cfg = from_dict(cls, data)
        apply_env(cfg, os.environ if env is None else env)
        for dotted, value in (overrides or {}).items():
            section, _, name = dotted.partition(".")
            set_field(cfg, section, name, value)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Config":
        return from_dict(cls, json.loads(text))


def from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    """Build a (nested) dataclass from plain data, rejecting unknown keys."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} keys: {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{cls.__name__}.{name}")
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = getattr(tp, "__origin__", None)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, str) and hasattr(tp, "parse"):
            return tp.parse(value)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table")
        return from_dict(tp, value)
    if origin is list:
        (item_tp,) = tp.__args__
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list")
        return [_coerce(item_tp, v, where) for v in value]
    if origin is dict:
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table")
        return {str(k): str(v) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, str):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off", ""):
                return False
            raise ConfigError(f"{where} must be a boolean, got {value!r}")
        return bool(value)
    if tp is int:
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where} must be an integer, got {value!r}") from exc
    if tp is str:
        return str(value)
    return value


def set_field(cfg: Config, section: str, name: str, value: Any) -> None:
    try:
        sub = getattr(cfg, section)
    except AttributeError as exc:
        raise ConfigError(f"unknown config section {section!r}") from exc
    hints = get_type_hints(type(sub))
    if name not in hints:
        raise ConfigError(f"unknown config key {section}.{name}")
    setattr(sub, name, _coerce(hints[name], value, f"{section}.{name}"))


def apply_env(cfg: Config, env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if not key.startswith(ENV_PREFIX):
            continue
        parts = key[len(ENV_PREFIX):].lower().split("__")
        if len(parts) != 2:
            raise ConfigError(f"{key}: expected {ENV_PREFIX}<SECTION>__<FIELD>")
        set_field(cfg, parts[0], parts[1], value)


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--config FILE`` and repeatable ``--set SECTION.FIELD=VALUE`` (CLI and jobs alike)."""
    parser.add_argument("--config", help="TOML config file (see conf/); REFACTX__SECTION__FIELD env vars override it")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override one config field, e.g. --set tree.depth=6 (repeatable)")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    """The Config named by ``add_config_arguments``' options."""
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected SECTION.FIELD=VALUE")
        overrides[key.strip()] = value
    return Config.load(args.config, overrides=overrides)
