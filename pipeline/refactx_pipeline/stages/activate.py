"""Stage 8 -- activate: switch the build serving an index name, then apply retention.

The switch (``sql/activate.sql``) is one transaction: the previous build becomes
``retired``, ``active`` points at the new one, which becomes ``active``, and a NOTIFY on
``refactx_index.tree.pg.ACTIVATION_CHANNEL`` tells served indexes to switch. Readers look up
``active`` then query the build's own table, so they see the old build or the new one,
never a half-loaded one. Two checks come first, under the name's lock: a build far smaller
than the served one is refused (``pg.max_shrink``), and so is a build that a role reading
the served build, or ``pg.reader_role``, could not read (its lookups would all fail with
``PermissionDenied``). A refusal (``ActivationRefused``) leaves the served build serving and
releases the name, so the next build of it is not held up; the refused build stays
``validated`` and can still be activated once the cause is dealt with. Retention keeps the builds that served last (``pg.retention``, the
active one included) and any that stopped serving within ``pg.retention_grace_s``; it drops
older ones and builds that never served; a drop waits at most ``pg.lock_timeout_ms``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import psycopg
from psycopg import sql

from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.common import write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.config import Config
from refactx_pipeline.db import STAGE_STATEMENT_TIMEOUT_MS, connect
from refactx_pipeline.errors import ActivationRefused, ConfigError, LoadError
from refactx_index.tree.pg import ACTIVATION_CHANNEL

log = logging.getLogger(__name__)

STAGE = "activate"
ACTIVATES = ("validated", "active")  # an active build again: a retried task changes nothing


def activate_build(conn: psycopg.Connection, schema: str, build_id: int, *,
                   max_shrink: float | None = None, reader_role: str = "") -> int | None:
    """Make ``build_id`` (status ``validated``) serve its name; returns the previous build.

    Refused (``ActivationRefused``, the name released) when ``max_shrink`` is given and the
    build has fewer facts than the one it replaces by more than this share (0.2: a fifth) --
    a dump cut short, a filter gone wrong -- or when a role that reads the served build, or
    ``reader_role``, cannot read it.
    """
    build = pgcatalog.get_build(conn, schema, build_id)
    if build is None:
        raise LoadError(f"build {build_id} does not exist")
    if build["status"] not in ACTIVATES:
        raise LoadError(
            f"build {build_id} has status {build['status']!r}; only a validated build is activated"
        )
    name = build["name"]
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pgcatalog.LOCK_ACTIVATE, name))
            previous = pgcatalog.active_build(conn, schema, name)
            if previous != build_id:  # an active build again: a retried task changes nothing
                served = pgcatalog.get_build(conn, schema, previous) if previous is not None else None
                if max_shrink is not None:
                    check_shrink(served, build, max_shrink)
                check_readers(conn, schema, served, build, reader_role)
            for stmt in pgcatalog.statements("activate.sql", schema):
                conn.execute(stmt, {"name": name, "build_id": build_id, "channel": ACTIVATION_CHANNEL})
            pgcatalog.release_name(conn, schema, build_id)  # the name is free for the next build
    except (ActivationRefused, ConfigError):
        with conn.transaction():  # the refusal rolled the switch back; the claim goes too
            pgcatalog.release_name(conn, schema, build_id)
        raise
    log.info("index %s: build %d active (previous %s)", name, build_id, previous)
    return previous


def _not_activated(served: dict[str, Any] | None, build_id: int) -> str:
    """What a refusal leaves, and the command that activates the refused build later."""
    serving = f"build {served['build_id']} still serves" if served else "nothing serves the name yet"
    return (f"Not activated: {serving} and the name is free for the next build. "
            f"To activate build {build_id} later: refactx-pipeline build --stages activate --build-id {build_id}")


def check_shrink(served: dict[str, Any] | None, new: dict[str, Any], max_shrink: float) -> None:
    """The shrink guard: a new build far smaller than the served one is not activated."""
    if not served or not served.get("facts") or new.get("facts") is None:
        return
    floor = served["facts"] * (1.0 - max_shrink)
    if new["facts"] < floor:
        raise ActivationRefused(
            f"index {new['name']!r}: build {new['build_id']} has {new['facts']} facts, "
            f"{1 - new['facts'] / served['facts']:.0%} fewer than the served build {served['build_id']} "
            f"({served['facts']}); pg.max_shrink allows {max_shrink:.0%}. Check the input and build "
            f"again. {_not_activated(served, new['build_id'])} --set pg.max_shrink=1"
        )


def check_readers(conn: psycopg.Connection, schema: str, served: dict[str, Any] | None,
                  new: dict[str, Any], reader_role: str) -> None:
    """Every role granted SELECT on the served build's table, and ``reader_role``, can read
    the new build: a build loaded without the grant (``pg.reader_role`` empty, or another
    role) would answer every lookup of those readers with ``PermissionDenied``."""
    readers = set(pgcatalog.table_readers(conn, schema, served["table_name"])) if served else set()
    if reader_role:
        pgcatalog.require_role(conn, reader_role)
        readers.add(reader_role)
    for role in sorted(readers):
        missing = pgcatalog.missing_reader_privileges(conn, schema, role, new["table_name"])
        if missing:
            why = (f"which reads the served build {served['build_id']}" if served and role != reader_role
                   else "pg.reader_role")
            raise ActivationRefused(
                f"index {new['name']!r}: role {role!r} ({why}) cannot read build {new['build_id']}: "
                f"it lacks {', '.join(missing)}, so its lookups would fail with PermissionDenied. "
                f"Load again with --set pg.reader_role={role}, or grant it what it lacks. "
                f"{_not_activated(served, new['build_id'])}"
            )


def apply_retention(conn: psycopg.Connection, schema: str, name: str, keep: int, *,
                    grace_s: float = 0.0, lock_timeout_ms: int | None = None) -> list[int]:
    """Drop the tables of builds of ``name`` that no reader should need any more.

    Kept: the active build and the newest ``keep - 1`` builds that served before it, and any
    build that stopped serving less than ``grace_s`` ago (a generation may still read it).
    Dropped: older served builds, and builds that never served -- failed, or loaded and
    validated but superseded by a newer activation. Never the active build. A table a
    reader holds is skipped under ``lock_timeout_ms`` and dropped by a later run.
    """
    if keep < 1:
        raise LoadError(f"pg.retention must be at least 1, got {keep}")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pgcatalog.LOCK_ACTIVATE, name))
        active = pgcatalog.active_build(conn, schema, name)
        rows = conn.execute(
            sql.SQL(
                "SELECT b.build_id, b.activated_at IS NOT NULL AS served, "
                "       coalesce(b.retired_at > now() - make_interval(secs => %s), false) AS in_grace "
                "FROM {s}.builds b "
                "WHERE b.name = %s AND b.dropped_at IS NULL AND b.status <> 'loading' "
                "AND b.build_id IS DISTINCT FROM %s "
                "ORDER BY b.activated_at DESC NULLS LAST, b.build_id DESC"
            ).format(s=sql.Identifier(schema)),
            (float(grace_s), name, active),
        ).fetchall()
    kept_served = 0
    to_drop = []
    for build_id, served, in_grace in rows:
        if served:
            kept_served += 1
            if kept_served < keep or in_grace:  # the active build takes one of the places
                continue
        elif active is None or build_id > active:
            continue  # loaded after the active build: activation may still come
        to_drop.append(int(build_id))
    dropped = [b for b in to_drop if pgcatalog.drop_build_table(conn, schema, b, lock_timeout_ms)]
    if dropped:
        log.info("index %s: retention dropped builds %s", name, dropped)
    return dropped


def activate_all(cfg: Config, dsn: str, build_ids: Mapping[str, int]) -> dict[str, Any]:
    """Activate the builds a load made (``build_ids``: vocabulary -> build id), which
    validation has passed."""
    result: dict[str, Any] = {}
    with connect(dsn, autocommit=True, statement_timeout_ms=STAGE_STATEMENT_TIMEOUT_MS) as conn:
        builds = pgcatalog.stage_builds(conn, cfg, build_ids, stage=STAGE, statuses=ACTIVATES)
        for vocab, info in builds.items():
            build_id = int(info["build_id"])
            previous = activate_build(conn, cfg.pg.schema, build_id, max_shrink=cfg.pg.max_shrink,
                                      reader_role=cfg.pg.reader_role)
            dropped = apply_retention(conn, cfg.pg.schema, info["name"], cfg.pg.retention,
                                      grace_s=cfg.pg.retention_grace_s,
                                      lock_timeout_ms=cfg.pg.lock_timeout_ms)
            result[vocab] = {"build_id": build_id, "name": info["name"], "previous": previous,
                             "dropped": dropped}
    write_counts(cfg, STAGE, {"vocabularies": result})
    return result


def run(ctx: StageContext) -> StageCounts:
    """The stage: the database does the work, in ``ctx.dsn``, no Spark; ``ctx.build_ids`` names
    the builds to activate (vocabulary -> build id, what the load returned)."""
    return activate_all(ctx.cfg, ctx.dsn, ctx.build_ids)
