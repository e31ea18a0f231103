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
