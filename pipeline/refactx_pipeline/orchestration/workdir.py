"""Who may write a dump date's work directory.

A run's stages write under one work directory, ``<build_root>/<source>/<dump_date>/``. Two
runs of the same dump date (a manual trigger beside the scheduled run, a CLI build beside the
DAG) would overwrite each other's stage outputs, so every run claims the directory before its
first stage writes (:func:`claim_work_dir`, the file ``run.json`` in it) and a second run is
refused with :class:`~refactx_pipeline.errors.RunConflict`, having written nothing. A run with
an id (the DAG passes its run id to every stage) keeps the claim across its tasks and its last
task releases it (:func:`release_work_dir`, in the DAG's ``record_run``); a run without one (a
CLI build) holds it for its process, and a claim whose process died is taken over.
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
from typing import Any, Iterator

from refactx_pipeline.config import Config
from refactx_pipeline.errors import RunConflict

__all__ = ["CLAIM_FILE", "RunConflict", "claim_path", "claim_work_dir", "release_work_dir", "work_dir_claim"]

log = logging.getLogger(__name__)

CLAIM_FILE = "run.json"


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
