"""Run history: one row per pipeline run in ``{schema}.runs`` (``sql/runs.sql``).

The Airflow DAG's last task gathers the counts every stage wrote for the run's dump date
(:func:`run_counts`) and records them (:func:`record_run`); ``refactx-pipeline builds`` prints
the recent runs (:func:`recent_runs`), and the DAG's sensor asks which dump dates were
already built (:func:`built_dump_dates`). Who may write a dump date's work directory is
``refactx_pipeline.orchestration.workdir``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable

import psycopg
from psycopg import sql

from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.common import read_counts
from refactx_pipeline.config import Config
from refactx_pipeline.db import connect
from refactx_pipeline.orchestration.table import PER_VOCABULARY_STAGES, STAGE_NAMES

log = logging.getLogger(__name__)

SHARED_STAGES = tuple(s for s in STAGE_NAMES if s not in PER_VOCABULARY_STAGES)


def branch_counts_file(vocabulary: str) -> str:
    """The counts file of a stage run for one vocabulary (``paths.counts_file`` of a DAG branch):
    branches share their stage directories, so each writes its own file there."""
    return f"counts.{vocabulary}.json"


def run_counts(cfg: Config, vocabularies: Iterable[str]) -> dict[str, Any]:
    """The counts of a run's stages as written under the build directory: the shared stages'
    ``counts.json``, and per vocabulary the branch stages' ``counts.<vocabulary>.json``
    (a stage that did not run is absent)."""
    shared = {s: c for s in SHARED_STAGES if (c := read_counts(cfg, s, "counts.json"))}
    branches = {
        v: {s: c for s in PER_VOCABULARY_STAGES if (c := read_counts(cfg, s, branch_counts_file(v)))}
        for v in vocabularies
    }
    return {"stages": shared, "vocabularies": branches}


def run_status(counts: dict[str, Any]) -> str:
    """success: every vocabulary activated; partial: some; failed: none."""
    branches = counts["vocabularies"].values()
    activated = sum("activate" in b for b in branches)
    if branches and activated == len(branches):
        return "success"
    return "partial" if activated else "failed"


def apply_runs_schema(conn: psycopg.Connection, schema: str) -> None:
    with conn.transaction():
        for stmt in pgcatalog.statements("runs.sql", schema):
            conn.execute(stmt)


def record_run(dsn: str, cfg: Config, dag_run_id: str, counts: dict[str, Any]) -> dict[str, Any]:
    """Insert the run's row; returns it (``run_id``, ``status``...)."""
    status = run_status(counts)
    with connect(dsn, autocommit=True) as conn:
        apply_runs_schema(conn, cfg.pg.schema)
        run_id = conn.execute(
            sql.SQL("INSERT INTO {}.runs (dag_run_id, source, dump_date, status, counts) "
                    "VALUES (%s, %s, %s, %s, %s) RETURNING run_id").format(sql.Identifier(cfg.pg.schema)),
            (dag_run_id, cfg.paths.source, cfg.paths.dump_date, status, json.dumps(counts, default=str)),
        ).fetchone()[0]
    return {"run_id": int(run_id), "dag_run_id": dag_run_id, "dump_date": cfg.paths.dump_date, "status": status}


def _has_runs_table(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.runs",)).fetchone()[0]


def built_dump_dates(dsn: str, schema: str, source: str) -> list[str]:
    """The dump dates of ``source`` some run has recorded, whatever its outcome (a failed
    dump is rebuilt on demand, not retried by every scheduled run)."""
    with connect(dsn, autocommit=True) as conn:
        if not _has_runs_table(conn, schema):
            return []
        rows = conn.execute(
            sql.SQL("SELECT DISTINCT dump_date FROM {}.runs WHERE source = %s").format(sql.Identifier(schema)),
            (source,),
        ).fetchall()
    return sorted(r[0] for r in rows)


def recent_runs(conn: psycopg.Connection, schema: str, limit: int = 10) -> list[dict[str, Any]]:
    """The newest ``limit`` runs, newest first (none when no run was ever recorded)."""
    if not _has_runs_table(conn, schema):
        return []
    rows = conn.execute(
        sql.SQL("SELECT run_id, dag_run_id, source, dump_date, status, counts, finished_at "
                "FROM {}.runs ORDER BY run_id DESC LIMIT %s").format(sql.Identifier(schema)),
        (limit,),
    ).fetchall()
    keys = ("run_id", "dag_run_id", "source", "dump_date", "status", "counts", "finished_at")
    return [dict(zip(keys, row)) for row in rows]


def describe_run(run: dict[str, Any]) -> str:
    """One line of history: when, which dump, the outcome, and per vocabulary how far it got
    (``qwen2.5: active build 7, 3828 facts``; ``gpt2: failed before tokenize``)."""
    parts = []
    for vocab, stages in sorted(run["counts"].get("vocabularies", {}).items()):
        if "activate" in stages:
            loaded = stages.get("load", {}).get("vocabularies", {}).get(vocab, {})
            build = stages["activate"].get("vocabularies", {}).get(vocab, {}).get("build_id")
            parts.append(f"{vocab}: active build {build}, {loaded.get('facts')} facts")
        else:
            missing = next(s for s in PER_VOCABULARY_STAGES if s not in stages)
            parts.append(f"{vocab}: failed at {missing}")
    finished = run["finished_at"].strftime("%Y-%m-%d %H:%M:%S")
    return (f"{run['run_id']:>5} {finished}  {run['dump_date']}  {run['status']:<8} "
            f"{'; '.join(parts)}  ({run['dag_run_id']})")
