"""Test helper: a database of its own for each test, on the tests' PostgreSQL server."""

from __future__ import annotations

import contextlib
import uuid
from typing import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@contextlib.contextmanager
def fresh_database(server_dsn: str, prefix: str = "refactx_test") -> Iterator[str]:
    """Create a uniquely named database on the server, yield its DSN, drop it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_dsn)
    params["dbname"] = name
    try:
        yield make_conninfo(**params)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def pipeline_tree_loader():
    """``load_tree`` of tests/pgtree.py, which writes a build with the pipeline's catalog: for the
    few runtime tests that serve a PostgreSQL build. Skips the test where the pipeline is not
    installed (the runtime wheel alone: tests/integration/test_runtime_wheel.py)."""
    needs_pipeline()
    from .pgtree import load_tree

    return load_tree


def needs_pipeline() -> None:
    """Skip the calling test where the pipeline wheel is not installed (the runtime wheel alone)."""
    import pytest

    pytest.importorskip("refactx_pipeline", reason="the pipeline wheel builds this test's index; "
                                                   "the runtime wheel alone does not have it")
