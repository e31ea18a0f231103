"""The package's data files, read through importlib.resources (never found by walking up from
``__file__``): the catalog's SQL, the example graph. The lexer's jar is ``jvm.jar_path()``."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def sql_text(name: str) -> str:
    """The text of ``sql/<name>`` (the catalog's statements, ``{schema}`` placeholders intact)."""
    return (files("refactx_pipeline") / "sql" / name).read_text(encoding="utf-8")


def example_graph() -> Path:
    """``examples/mini-graph.nt``: a small hand-written graph in the truthy dump's shape. A
    filesystem path, because Spark reads it; the package is installed as files, not zipped."""
    return Path(str(files("refactx_pipeline") / "examples" / "mini-graph.nt"))
