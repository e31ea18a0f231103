"""A DSN for the configured PostgreSQL, starting an embedded server when none is given.

The embedded server is ``pgserver`` (PostgreSQL binaries shipped in a wheel) with its
data directory under ``cfg.pg.embedded_dir`` (project-local, ``.pgdata`` by default).
It is stopped on exit only if this process started it, so a DAG run's tasks and a
CLI session can share one embedded server one after another.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Iterator

from refactx_pipeline.config import Config
from refactx_index.errors import ConfigError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def pg_dsn(cfg: Config) -> Iterator[str]:
    """Yield the DSN of ``cfg.pg.dsn``, or of an embedded server started for the block."""
    if cfg.pg.dsn:
        yield cfg.pg.dsn
        return
    try:
        import pgserver  # optional extra "embedded"
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "no PostgreSQL DSN configured (pg.dsn / REFACTX__PG__DSN) and the embedded "
            "server is not installed: pip install 'refactx_index[embedded]'"
        ) from exc
    datadir = Path(cfg.pg.embedded_dir).resolve()
    datadir.mkdir(parents=True, exist_ok=True)
    # pgserver asks platformdirs for a runtime dir; keep it inside the project
    os.environ.setdefault("XDG_RUNTIME_DIR", str(datadir.parent / ".pgrun"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    log.info("starting embedded PostgreSQL in %s", datadir)
    server = pgserver.get_server(datadir, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
