"""The pipeline's one way to open a PostgreSQL connection: ``connect(dsn)``.

Every connection the pipeline opens (the stages, the run history, the DAG's sensors, the
CLI's catalog commands) comes from here, with two bounds a dead or stuck database cannot
get around:

- a connect timeout (``CONNECT_TIMEOUT_S``): an unreachable server fails the caller in
  seconds instead of hanging it (the dump sensor asks the run history on every poke);
- a server-side statement timeout: ``CATALOG_STATEMENT_TIMEOUT_MS`` by default, for the short
  queries of the catalog and the run history; a stage's own work (COPY of a build, its
  indexes, validation's reads) passes ``STAGE_STATEMENT_TIMEOUT_MS``, long enough for the
  largest build and still an end to a statement that hangs.

The DSN policy (its own options and connect timeout kept, ours added) is the runtime's, one
for both wheels: ``refactx_index.connection``. Errors are psycopg's
(``psycopg.OperationalError`` when the server cannot be reached); the CLI turns them into one line.
"""

from __future__ import annotations

from typing import Any

import psycopg
from refactx_index.connection import connect as connect_with_policy

CONNECT_TIMEOUT_S = 10
CATALOG_STATEMENT_TIMEOUT_MS = 60_000  # one minute: a catalog query never takes that long
STAGE_STATEMENT_TIMEOUT_MS = 12 * 3600 * 1000  # twelve hours: a stage's statements on a full build
APPLICATION_NAME = "refactx_pipeline"


def connect(dsn: str, *, autocommit: bool = False, statement_timeout_ms: int = CATALOG_STATEMENT_TIMEOUT_MS,
            connect_timeout_s: float = CONNECT_TIMEOUT_S, application_name: str = APPLICATION_NAME,
            **kwargs: Any) -> psycopg.Connection:
    """A connection to ``dsn`` with the pipeline's connect and statement timeouts (see the module),
    under the runtime's DSN policy (``refactx_index.connection``: the DSN's own options and
    connect timeout are kept, the statement timeout added after them)."""
    return connect_with_policy(dsn, autocommit=autocommit, statement_timeout_ms=statement_timeout_ms,
                               connect_timeout_s=connect_timeout_s, application_name=application_name, **kwargs)
