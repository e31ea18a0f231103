"""Runs: who may write a dump date's work directory, and the history of runs.

A run's stages write under one work directory, ``<build_root>/<source>/<dump_date>/``. Two
runs of the same dump date (a manual trigger beside the scheduled run, a CLI build beside the
DAG) would overwrite each other's stage outputs, so every run claims the directory before its
first stage writes (:func:`claim_work_dir`, the file ``run.json`` in it) and a second run is
refused with :class:`RunConflict`, having written nothing. A run with an id (the DAG passes
its run id to every stage) keeps the claim across its tasks and its last task releases it
(:func:`release_work_dir`, in ``record_run``); a run without one (a CLI build) holds it for
its process, and a claim whose process died is taken over.

Run history: one row per pipeline run in ``{schema}.runs`` (``sql/runs.sql``). The Airflow
DAG's last task gathers the counts every stage wrote for the run's dump date
(:func:`run_counts`) and records them (:func:`record_run`); ``refactx-index builds`` prints
the recent runs (:func:`recent_runs`), and the DAG's sensor asks which dump dates were
already built (:func:`built_dump_dates`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

import psycopg
from psycopg import sql

from refactx_index.errors import RefactxError
from refactx_pipeline import pgcatalog
from refactx_pipeline.common import read_counts
from refactx_pipeline.config import Config
from refactx_pipeline.pipeline import PER_VOCABULARY_STAGES, STAGE_NAMES

log = logging.getLogger(__name__)

CLAIM_FILE = "run.json"


class RunConflict(RefactxError):
    """Another run of the same dump date holds its work directory."""


def claim_path(cfg: Config) -> Path:
    return cfg.build_dir() / CLAIM_FILE


@contextlib.contextmanager
def _directory_locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on the directory itself, held while a claim is read and written."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read_claim(path: Path) -> dict[str, Any] | None:
    try:
        claim = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunConflict(f"{path} cannot be read ({exc}): if no run of {path.parent} is under way, "
                          "remove it") from None
    if not isinstance(claim, dict) or not isinstance(claim.get("run_id"), str):
        raise RunConflict(f"{path} is not a run claim: if no run of {path.parent} is under way, remove it")
    return claim


def _process_gone(claim: dict[str, Any]) -> bool:
    """A process's claim (a run without id) whose process on this host no longer exists."""
    pid = claim.get("pid")
    if not isinstance(pid, int) or claim.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _describe_claim(claim: dict[str, Any]) -> str:
    who = f"run {claim['run_id']!r} (since {claim.get('since')}"
    if claim.get("pid") is not None:
        who += f", process {claim['pid']} on {claim.get('host')}"
    return who + ")"


def claim_work_dir(cfg: Config, run_id: str | None) -> dict[str, Any]:
    """Claim the dump date's work directory for ``run_id`` (None: for this process) before
    any stage writes there; returns the claim. Claimed already by this run: nothing changes.
    Held by another live run: ``RunConflict``, and nothing was written."""
    path = claim_path(cfg)
    host = socket.gethostname()
    mine = run_id or f"process-{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with _directory_locked(path.parent):
        held = _read_claim(path)
        if held is not None and held["run_id"] == mine:
            return held
        if held is not None:
            if not _process_gone(held):
                release = ("its last task (record_run) releases it" if held.get("pid") is None
                           else "it releases it when it ends")
                raise RunConflict(
                    f"{path.parent} is in use by {_describe_claim(held)}: two runs of "
                    f"{cfg.paths.source} dump {cfg.paths.dump_date} would overwrite each other's stage "
                    f"outputs. Let that run finish ({release}); if it died, remove {path}")
            log.warning("%s: %s is gone; this run takes the work directory over", path.parent,
                        _describe_claim(held))
        claim = {
            "run_id": mine,
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": host,
            "pid": None if run_id else os.getpid(),  # a process's own claim: gone when it is
            "source": cfg.paths.source,
            "dump_date": cfg.paths.dump_date,
        }
        tmp = path.with_name(f".{CLAIM_FILE}.{mine.replace('/', '_')}.tmp")
        tmp.write_text(json.dumps(claim, indent=2) + "\n")
        tmp.replace(path)
    log.info("work directory %s claimed by run %s", path.parent, mine)
    return claim


def release_work_dir(cfg: Config, run_id: str) -> bool:
    """End ``run_id``'s claim on the dump date's work directory (False: it held none)."""
    path = claim_path(cfg)
    if not path.parent.exists():
        return False
    with _directory_locked(path.parent):
        held = _read_claim(path)
        if held is None or held["run_id"] != run_id:
            return False
        path.unlink()
    log.info("work directory %s released by run %s", path.parent, run_id)
    return True


@contextlib.contextmanager
def work_dir_claim(cfg: Config, run_id: str | None) -> Iterator[dict[str, Any]]:
    """The work directory claimed for the block. A run with an id keeps it afterwards (its
    other stages run in other processes; its last task releases it); a process's own claim
    (``run_id`` None) ends with the block, however it ends."""
    claim = claim_work_dir(cfg, run_id)
    try:
        yield claim
    finally:
        if run_id is None:
            release_work_dir(cfg, claim["run_id"])

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
    with psycopg.connect(dsn, autocommit=True) as conn:
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
    with psycopg.connect(dsn, autocommit=True) as conn:
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
