"""Stage 8 -- activate: switch the build serving an index name, then apply retention.

The switch (``sql/activate.sql``) is one transaction: the previous build becomes
``retired``, ``active`` points at the new one, which becomes ``active``. Readers look
up ``active`` then query the build's own table, so they see the old build or the new
one, never a half-loaded one. Retention keeps the newest ``cfg.pg.retention`` builds
per name that still have a table (the active one always) and drops the rest.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from refactx_pipeline import pgcatalog
from refactx_pipeline.common import write_counts
from refactx_pipeline.config import Config
from refactx_index.errors import LoadError

log = logging.getLogger(__name__)

STAGE = "activate"


def activate_build(conn: psycopg.Connection, schema: str, build_id: int) -> int | None:
    """Make ``build_id`` (status ``validated``) serve its name; returns the previous build."""
    build = pgcatalog.get_build(conn, schema, build_id)
    if build is None:
        raise LoadError(f"build {build_id} does not exist")
    if build["status"] not in ("validated", "active"):
        raise LoadError(
            f"build {build_id} has status {build['status']!r}; only a validated build is activated"
        )
    name = build["name"]
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pgcatalog.LOCK_ACTIVATE, name))
        previous = pgcatalog.active_build(conn, schema, name)
        for stmt in pgcatalog.statements("activate.sql", schema):
            conn.execute(stmt, {"name": name, "build_id": build_id})
    log.info("index %s: build %d active (previous %s)", name, build_id, previous)
    return previous


def apply_retention(conn: psycopg.Connection, schema: str, name: str, keep: int) -> list[int]:
    """Drop the tables of all but the newest ``keep`` builds of ``name`` (never the active one)."""
    if keep < 1:
        raise LoadError(f"pg.retention must be at least 1, got {keep}")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pgcatalog.LOCK_ACTIVATE, name))
        rows = conn.execute(
            sql.SQL(
                "SELECT b.build_id FROM {s}.builds b "
                "WHERE b.name = %s AND b.dropped_at IS NULL AND b.status <> 'loading' "
                "AND NOT EXISTS (SELECT 1 FROM {s}.active a WHERE a.build_id = b.build_id) "
                "ORDER BY b.build_id DESC OFFSET %s"
            ).format(s=sql.Identifier(schema)),
            # the active build takes one of the kept places
            (name, max(keep - (1 if pgcatalog.active_build(conn, schema, name) else 0), 0)),
        ).fetchall()
    dropped = []
    for (build_id,) in rows:
        pgcatalog.drop_build_table(conn, schema, build_id)
        dropped.append(int(build_id))
    if dropped:
        log.info("index %s: retention dropped builds %s", name, dropped)
    return dropped


def activate_all(cfg: Config, dsn: str) -> dict[str, Any]:
    """Activate the builds named in ``load/counts.json`` (which validation has passed)."""
    loaded = pgcatalog.loaded_builds(cfg)
    result: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for vocab, info in loaded.items():
            build_id = int(info["build_id"])
            previous = activate_build(conn, cfg.pg.schema, build_id)
            dropped = apply_retention(conn, cfg.pg.schema, info["name"], cfg.pg.retention)
            result[vocab] = {"build_id": build_id, "name": info["name"], "previous": previous,
                             "dropped": dropped}
    write_counts(cfg, STAGE, {"vocabularies": result})
    return result


def run(spark, cfg: Config, dsn: str) -> dict:
    """The stage: ``spark`` is None (the database does the work), ``dsn`` the target database."""
    del spark
    return activate_all(cfg, dsn)
