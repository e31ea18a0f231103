"""The one Config type: defaults, TOML then environment then overrides, validation that names
every bad key, immutability."""

from __future__ import annotations

import pydantic
import pytest

from refactx_index.errors import ConfigError
from refactx_pipeline.config import Config, VocabularyConfig


def test_defaults_are_the_embedded_setup():
    cfg = Config.load(env={})
    assert cfg.spark.master == "local[*]"
    assert cfg.pg.dsn == ""
    assert cfg.pg.schema == "refactx"
    assert cfg.filter.languages == ("en",)
    assert cfg.tokenize.fact_prefix == " "
    assert cfg.index_name("qwen2.5") == "wikidata-qwen2.5"


def test_toml_then_environment_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[paths]\ndump_date = "20240408"\n[tree]\nmax_subtree_tokens = 600\nsubtree_threshold = 10\n'
        '[pg]\nschema = "idx"\n'
        '[[tokenize.vocabularies]]\nname = "gpt2"\npath = "/tok/gpt2"\n'
    )
    env = {"REFACTX__TREE__MAX_SUBTREE_TOKENS": "700", "REFACTX__FILTER__LANGUAGES": "en,DE", "OTHER": "x"}
    cfg = Config.load(path, env=env, overrides={"pg.retention": "5", "tree.max_subtree_tokens": 900})
    assert cfg.paths.dump_date == "20240408"
    assert cfg.tree.max_subtree_tokens == 900  # override beats environment beats file
    assert cfg.tree.subtree_threshold == 10  # the file's, untouched by the others
    assert cfg.filter.languages == ("en", "de")
    assert cfg.pg.retention == 5
    assert cfg.pg.schema == "idx"
    assert cfg.tokenize.vocabularies == (VocabularyConfig(name="gpt2", path="/tok/gpt2"),)
    assert Config.from_json(cfg.to_json()) == cfg


def test_process_environment_is_read_by_default(monkeypatch):
    monkeypatch.setenv("REFACTX__PG__DSN", "postgresql://db.internal/refactx")
    assert Config.load().pg.dsn == "postgresql://db.internal/refactx"


def test_vocabularies_from_environment():
    cfg = Config.load(env={"REFACTX__TOKENIZE__VOCABULARIES": "a=/x/a,b=/x/b"})
    assert [(v.name, v.path) for v in cfg.tokenize.vocabularies] == [("a", "/x/a"), ("b", "/x/b")]


def test_a_built_config_is_immutable_and_updated_returns_a_new_one():
    cfg = Config.load(env={})
    with pytest.raises(pydantic.ValidationError):
        cfg.pg.dsn = "postgresql://elsewhere"  # type: ignore[misc]
    other = cfg.updated({"pg.dsn": "postgresql://elsewhere", "tree.max_subtree_tokens": 400})
    assert (other.pg.dsn, other.tree.max_subtree_tokens) == ("postgresql://elsewhere", 400)
    assert (cfg.pg.dsn, cfg.tree.max_subtree_tokens) == ("", 32768)
    with pytest.raises(ConfigError, match="tree.max_subtree_tokens"):
        cfg.updated({"tree.max_subtree_tokens": 0})


# each bad value, and the key its error must name
BAD_VALUES = [
    ({"tree.max_subtree_tokens": "deep"}, "tree.max_subtree_tokens"),
    ({"tree.max_subtree_tokens": 0}, "tree.max_subtree_tokens"),
    ({"tree.subtree_threshold": -1}, "tree.subtree_threshold"),
    ({"labels.collision_policy": "merge"}, "labels.collision_policy"),
    ({"spark.log_level": "LOUD"}, "spark.log_level"),
    ({"spark.driver_memory": "lots"}, "spark.driver_memory"),
    ({"spark.shuffle_partitions": 0}, "spark.shuffle_partitions"),
    ({"pg.retention": 0}, "pg.retention"),
    ({"pg.load_workers": 0}, "pg.load_workers"),
    ({"pg.statement_timeout_ms": 0}, "pg.statement_timeout_ms"),
    ({"pg.schema": "Bad-Schema"}, "pg.schema"),
    ({"pg.index_name": "{source}-{model}"}, "pg.index_name"),
    ({"tokenize.max_tokens": 1}, "tokenize.max_tokens"),
    ({"tokenize.vocabularies": "a=/x,a=/y"}, "tokenize.vocabularies"),
    ({"tokenize.vocabularies": "no-path-given"}, "tokenize.vocabularies"),
    ({"tokenize.vocabularies": "bad/name=/x"}, "tokenize.vocabularies.name"),
    ({"filter.keep_datatypes": "WikibaseItem,Strnig"}, "filter.keep_datatypes"),
    ({"filter.allow_properties": "P31,instance of"}, "filter.allow_properties"),
    ({"filter.exclude_classes": "P31"}, "filter.exclude_classes"),
    ({"filter.languages": "english"}, "filter.languages"),
    ({"filter.languages": ""}, "filter.languages"),
    ({"paths.dump_date": "2024/01/01"}, "paths.dump_date"),
    ({"verbalize.descriptions": "maybe"}, "verbalize.descriptions"),
    ({"verbalize.inverse_labels": "{not json"}, "verbalize.inverse_labels"),
    ({"input.enwiki_page": "/dumps/page.sql"}, "input.enwiki_page_props"),
    ({"input.enwiki_page_props": "/dumps/page_props.sql"}, "input.enwiki_page"),
    ({"tree.depht": 3}, "tree.depht"),
    ({"nosuch.key": 1}, "nosuch"),
]


@pytest.mark.parametrize("overrides, key", BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_each_bad_value_is_named_in_the_error(overrides, key):
    with pytest.raises(ConfigError) as caught:
        Config.load(env={}, overrides=overrides)
    assert f"{key}" in str(caught.value)


def test_all_bad_keys_are_named_at_once():
    with pytest.raises(ConfigError) as caught:
        Config.load(env={"REFACTX__TREE__MAX_SUBTREE_TOKENS": "x", "REFACTX__PG__RETENTION": "-1"})
    assert "tree.max_subtree_tokens" in str(caught.value) and "pg.retention" in str(caught.value)


@pytest.mark.parametrize(
    "text, env, named",
    [
        ("[tree]\ndepht = 3\n", {}, "tree.depht: unknown key"),
        ("[nosuch]\nx = 1\n", {}, "nosuch: unknown key"),
        ("[tree]\nsubtree_threshold = 'deep'\n", {}, "tree.subtree_threshold"),
        ("", {"REFACTX__TREE__NOPE": "1"}, "tree.nope: unknown key"),
        ("", {"REFACTX__TREE": "1"}, "REFACTX__TREE"),
        ("not toml [", {}, "not valid TOML"),
    ],
)
def test_bad_configuration_files_and_variables_are_clear_errors(tmp_path, text, env, named):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("[", r"\[")):
        Config.load(path, env=env)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "absent.toml")


def test_sitelinks_source_follows_the_one_input_rule():
    assert Config.load(env={}).input.sitelinks_source() == ""
    both = Config.load(env={}, overrides={"input.enwiki_page": "p.sql", "input.enwiki_page_props": "pp.sql"})
    assert both.input.sitelinks_source() == "enwiki_page_props"
    wb = Config.load(env={}, overrides={"input.wb_items_per_site": "w.sql"})
    assert wb.input.sitelinks_source() == "wb_items_per_site"


def test_stage_selection_uses_the_same_rule():
    from refactx_pipeline.orchestration.pipeline import select_stages

    assert "sitelinks" not in select_stages(Config.load(env={}))
    both = Config.load(env={}, overrides={"input.enwiki_page": "p.sql", "input.enwiki_page_props": "pp.sql"})
    assert "sitelinks" in select_stages(both)
    with pytest.raises(ConfigError, match="unknown stage"):
        select_stages(both, ["parse", "tokenise"])


def test_project_config_files_are_valid():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[2] / "conf"
    files = sorted(conf.glob("*.toml"))
    assert files
    for path in files:
        Config.load(path, env={})
