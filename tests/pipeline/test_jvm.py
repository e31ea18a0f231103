"""The project jar: compiled by the package build, shipped inside the installed wheel."""

from __future__ import annotations

import struct
import zipfile

import pytest

import refactx_pipeline
from refactx_index.errors import ConfigError
from refactx_pipeline import jvm


def test_the_installed_package_ships_the_lexer_jar():
    jar = jvm.jar_path()
    package_dir = jar.parents[1]
    assert package_dir.samefile(next(iter(refactx_pipeline.__path__)))
    names = zipfile.ZipFile(jar).namelist()
    assert "org/refactx/ntriples/NTriplesLexer.class" in names
    # every packaged Java source was compiled into the jar
    sources = list(jar.parent.rglob("*.java"))
    assert sources, "the Java sources are package data"
    for source in sources:
        cls = source.relative_to(jar.parent).with_suffix(".class").as_posix()
        assert cls in names, cls


def test_the_jar_targets_java_17():
    with zipfile.ZipFile(jvm.jar_path()) as zf:
        head = zf.read("org/refactx/ntriples/NTriplesLexer.class")[:8]
    magic, _minor, major = struct.unpack(">IHH", head)
    assert magic == 0xCAFEBABE and major == 61  # class file version 61: --release 17


def test_a_package_without_its_jar_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(jvm, "JAR_NAME", "no-such.jar")
    with pytest.raises(ConfigError, match="install the package from its wheel"):
        jvm.jar_path()
