"""The shared Config type: defaults, TOML, environment overrides, clear errors."""

from __future__ import annotations

import pytest

from refactx_index.config import Config, VocabularyConfig
from refactx_index.errors import ConfigError


def test_defaults_are_the_embedded_setup():
    cfg = Config()
    assert cfg.spark.master == "local[*]"
    assert cfg.pg.dsn == ""
    assert cfg.filter.languages == ["en"]
    assert cfg.tokenize.fact_prefix == " "


def test_toml_then_environment_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[paths]\ndump_date = "20240408"\n[tree]\ndepth = 6\n'
        '[[tokenize.vocabularies]]\nname = "gpt2"\npath = "/tok/gpt2"\n'
    )
    env = {"REFACTX__TREE__DEPTH": "7", "REFACTX__FILTER__LANGUAGES": "en,de", "OTHER": "x"}
    cfg = Config.load(path, env=env, overrides={"pg.retention": "5"})
    assert cfg.paths.dump_date == "20240408"
    assert cfg.tree.depth == 7
    assert cfg.filter.languages == ["en", "de"]
    assert cfg.pg.retention == 5
    assert cfg.tokenize.vocabularies == [VocabularyConfig("gpt2", "/tok/gpt2")]
    assert Config.from_json(cfg.to_json()) == cfg


def test_vocabularies_from_environment():
    cfg = Config.load(env={"REFACTX__TOKENIZE__VOCABULARIES": "a=/x/a,b=/x/b"})
    assert [v.name for v in cfg.tokenize.vocabularies] == ["a", "b"]


@pytest.mark.parametrize(
    "text, env",
    [
        ("[tree]\ndepht = 3\n", {}),
        ("[nosuch]\nx = 1\n", {}),
        ("[tree]\ndepth = 'deep'\n", {}),
        ("", {"REFACTX__TREE__NOPE": "1"}),
        ("", {"REFACTX__TREE": "1"}),
        ("not toml [", {}),
    ],
)
def test_bad_configuration_is_a_clear_error(tmp_path, text, env):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        Config.load(path, env=env)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "absent.toml")
