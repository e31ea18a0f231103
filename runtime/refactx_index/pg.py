"""The PostgreSQL-backed index: the active build of an index name, read one row per key.

Connections come from a ``psycopg_pool.ConnectionPool``; each is autocommit (a
lookup is one statement, so no connection is ever left idle in a transaction),
read-only, and has a server-side ``statement_timeout``, all set as connection
options (no extra round trip). A lost connection is retried once on a fresh one;
a second failure raises :class:`DatabaseUnavailable`. A cancelled statement raises
:class:`QueryTimeout`. A missing row is neither: the prefix is simply outside the
tree (or, when a parent row promised it, a :class:`FormatError`).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from .cache import ByteLRUCache
from .errors import DatabaseUnavailable, FormatError, IndexNotFound, QueryTimeout
from .format import FORMAT_VERSION
from .index import IndexInfo, RowTreeIndex, check_vocabulary, fragment_nbytes

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 256 << 20

_CATALOG_COLUMNS = (
    "build_id, b.name, table_name, tokenizer, tokenizer_hash, vocab_size, depth, "
    "subtree_threshold, format_version, fact_prefix, fact_suffix, facts, rows"
)


# what the pipeline's pg section defaults to as well (refactx_pipeline.config.PgConfig)
DEFAULT_SCHEMA = "refactx"
DEFAULT_STATEMENT_TIMEOUT_MS = 5000


def open_index(
    dsn: str,
    name: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    tokenizer: object | None = None,
    pool_size: int = 4,
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    connect_timeout_s: float = 10.0,
) -> "PgTreeIndex":
    """Open the build that serves ``name`` (see ``{schema}.active``).

    ``tokenizer``: ``None`` (no check), a path to ``tokenizer.json`` (compared by
    sha256), a vocabulary name or sha256, or a tokenizer object (compared by size);
    a mismatch raises :class:`VocabularyMismatch`. Raises :class:`IndexNotFound`
    when no build is active under ``name``, :class:`FormatError` when the build was
    written in another format version, :class:`DatabaseUnavailable` when the server
    cannot be reached within ``connect_timeout_s``.
    """
    from psycopg_pool import ConnectionPool, PoolTimeout

    if pool_size < 1:
        raise ValueError("pool_size must be >= 1")
    options = (
        f"-c statement_timeout={int(statement_timeout_ms)} "
        "-c default_transaction_read_only=on "
        # belt and braces: autocommit never idles in a transaction, but a server-side
        # limit also covers anything that might
        "-c idle_in_transaction_session_timeout=60000"
    )
    pool = ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs={
            "autocommit": True,
            "options": options,
            "connect_timeout": max(1, int(connect_timeout_s)),
            "application_name": f"refactx_index:{name}"[:63],
        },
        open=False,
        name=f"refactx_index:{name}",
        timeout=connect_timeout_s,
        reconnect_timeout=max(connect_timeout_s, 30.0),
    )
    try:
        pool.open(wait=True, timeout=connect_timeout_s)
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL within {connect_timeout_s:g} s: {exc}"
        ) from exc
    try:
        index = PgTreeIndex(pool, name, schema=schema, cache_bytes=cache_bytes,
                            statement_timeout_ms=statement_timeout_ms,
                            connect_timeout_s=connect_timeout_s)
        check_vocabulary(index.info, tokenizer)
    except BaseException:
        pool.close()
        raise
    return index


class PgTreeIndex(RowTreeIndex):
    """An index served from a PostgreSQL partition; use :func:`open_index`."""

    def __init__(
        self,
        pool: Any,
        name: str,
        *,
        schema: str = "refactx",
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        statement_timeout_ms: int = 5000,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self._pool = pool
        self._name = name
        self._schema = schema
        self._timeout_ms = statement_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        info, query = self._read_catalog()
        self._rows_query = query
        super().__init__(info, ByteLRUCache(cache_bytes, fragment_nbytes))

    # ------------------------------------------------------------------ catalog
    def _read_catalog(self) -> tuple[IndexInfo, Any]:
        from psycopg import errors, sql

        query = sql.SQL(
            "SELECT " + _CATALOG_COLUMNS + " FROM {schema}.active a "
            "JOIN {schema}.builds b USING (build_id) WHERE a.name = %s"
        ).format(schema=sql.Identifier(self._schema))
        try:
            found = self._execute(query, (self._name,))
        except (errors.UndefinedTable, errors.InvalidSchemaName) as exc:
            raise IndexNotFound(
                f"no refactx_index catalog in schema {self._schema!r}: {exc}"
            ) from exc
        if not found:
            raise IndexNotFound(
                f"no active build serves index {self._name!r} in schema {self._schema!r}"
            )
        (build_id, name, table, vocab, digest, vocab_size, depth, threshold, version,
         fact_prefix, fact_suffix, facts, rows) = found[0]
        if version != FORMAT_VERSION:
            raise FormatError(
                f"index {name!r} (build {build_id}) is in format version {version}; "
                f"this runtime reads version {FORMAT_VERSION}"
            )
        info = IndexInfo(
            name=name, tokenizer=vocab, tokenizer_hash=digest, vocab_size=int(vocab_size),
            depth=int(depth), subtree_threshold=int(threshold), format_version=int(version),
            fact_prefix=fact_prefix, fact_suffix=fact_suffix, facts=facts, rows=rows,
            build_id=int(build_id),
        )
        rows_query = sql.SQL("SELECT prefix, node FROM {}.{} WHERE prefix = ANY(%s)").format(
            sql.Identifier(self._schema), sql.Identifier(table)
        )
        return info, rows_query

    def refresh(self) -> bool:
        """Re-read the catalog; if another build became active, serve it (cache dropped).

        Returns whether the build changed.
        """
        info, query = self._read_catalog()
        if info.build_id == self._info.build_id:
            return False
        log.info("index %r: build %s -> %s", self._name, self._info.build_id, info.build_id)
        self._info, self._rows_query = info, query
        self._cache.clear()
        return True

    # ------------------------------------------------------------------ rows
    def _fetch_rows(self, keys: list[bytes]) -> dict[bytes, bytes]:
        return {bytes(k): bytes(v) for k, v in self._execute(self._rows_query, (keys,),
                                                              binary=True)}

    def _execute(self, query: Any, params: Sequence[Any], *, binary: bool = False) -> list[tuple]:
        """Run one statement on a pooled connection: retry a lost connection once."""
        import psycopg
        from psycopg import errors
        from psycopg_pool import PoolTimeout

        for attempt in (1, 2):
            try:
                with self._pool.connection() as conn:
                    return conn.execute(query, params, binary=binary, prepare=True).fetchall()
            except errors.QueryCanceled as exc:
                raise QueryTimeout(
                    f"index {self._name!r}: statement exceeded {self._timeout_ms} ms "
                    f"(statement_timeout): {exc}"
                ) from exc
            except PoolTimeout as exc:
                raise DatabaseUnavailable(
                    f"index {self._name!r}: no PostgreSQL connection within "
                    f"{self._connect_timeout_s:g} s: {exc}"
                ) from exc
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if attempt == 2:
                    raise DatabaseUnavailable(
                        f"index {self._name!r}: PostgreSQL connection lost and the retry "
                        f"failed: {exc}"
                    ) from exc
                log.warning("index %r: connection lost (%s); retrying once", self._name,
                            str(exc).strip())
                # other pooled connections may have died with this one (server restart)
                self._pool.check()
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the pool (idempotent)."""
        self._pool.close()
