"""The project jar (jobs/jvm): built from its sources, named after them, clear when it cannot be built."""

from __future__ import annotations

import zipfile

import pytest

from jobs import jvm
from refactx_index.errors import ConfigError


def test_jar_holds_the_lexer_and_is_named_after_its_sources():
    jar = jvm.jar_path()
    assert jar.exists() and jar.parent == jvm.BUILD
    assert "org/refactx/ntriples/NTriplesLexer.class" in zipfile.ZipFile(jar).namelist()
    assert jar == jvm.jar_path(build=False)
    assert jar.name == f"refactx-jvm-{jvm._sources_hash()}.jar"


def test_changed_sources_get_a_new_jar(monkeypatch, tmp_path):
    src = tmp_path / "src" / "demo"
    src.mkdir(parents=True)
    (src / "Hello.java").write_text("package demo; public final class Hello { public static int one() { return 1; } }\n")
    monkeypatch.setattr(jvm, "SOURCES", tmp_path / "src")
    monkeypatch.setattr(jvm, "BUILD", tmp_path / "build")
    first = jvm.jar_path()
    assert "demo/Hello.class" in zipfile.ZipFile(first).namelist()
    (src / "Hello.java").write_text("package demo; public final class Hello { public static int one() { return 2; } }\n")
    second = jvm.jar_path()
    assert second != first and second.exists()
    assert not first.exists()  # the stale jar is removed


def test_a_compile_error_or_a_missing_javac_is_a_config_error(monkeypatch, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "Broken.java").write_text("class Broken { int x = ; }\n")
    monkeypatch.setattr(jvm, "SOURCES", tmp_path / "src")
    monkeypatch.setattr(jvm, "BUILD", tmp_path / "build")
    with pytest.raises(ConfigError, match="javac failed"):
        jvm.jar_path()
    monkeypatch.setattr(jvm.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="install a JDK 17"):
        jvm.jar_path()
