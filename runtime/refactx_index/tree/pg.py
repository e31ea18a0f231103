"""The PostgreSQL-backed index: the active build of an index name, read one row per key.

Connections come from a ``psycopg_pool.ConnectionPool``; each is autocommit (a
lookup is one statement, so no connection is ever left idle in a transaction),
read-only, and has a server-side ``statement_timeout``, all set as connection
options after the DSN's own (no extra round trip; :mod:`refactx_index.connection`). A lost connection is retried once on a fresh one;
a second failure raises :class:`DatabaseUnavailable`. A cancelled statement raises
:class:`QueryTimeout`. A missing row is neither: the prefix is simply outside the
tree (or, when a parent row promised it, a :class:`FormatError`). Every other driver error
is mapped to a :class:`~refactx_index.errors.RefactxError` subclass; none escapes raw.

Builds come and go under a served index. Each build is served through its own
:class:`~refactx_index.tree.index.ServedBuild` (catalog facts, row query, cache), taken once per
lookup, so a lookup reads one build and a build's rows never answer for another. With
``follow=True`` (the default) a background thread ``LISTEN``s on ``refactx_active`` --
activation notifies it -- and re-reads the catalog every ``check_interval_s`` as a fallback;
the index then serves the new build from the next lookup on. A lookup whose build was dropped
under it retries on the served build whenever that differs from the one that failed (after its
own ``refresh()``: the follower or another thread may have switched already). A cursor (one
generation) stays on its build and gets :class:`BuildRetired`; the index has then switched, so
the retried generation's ``root()`` reads the active build, with ``follow`` on or off.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import psycopg
from psycopg import errors, sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ..connection import connection_kwargs, connect, first_connection, scrub
from ..errors import (
    BuildRetired,
    DatabaseError,
    DatabaseUnavailable,
    FormatError,
    IndexNotFound,
    InputRefused,
    PermissionDenied,
    QueryTimeout,
    RefactxError,
)
from .cache import ByteLRUCache
from .format import READABLE_VERSIONS, PresetDictionary
from .index import (
    Cursor,
    IndexInfo,
    NextTokens,
    RowTreeIndex,
    ServedBuild,
    check_vocabulary,
    PREFETCH_LEAVES,
    _as_tuple,
    fragment_nbytes,
    key_successor,
)
from .provenance import LAYOUT_BLOCKS, LAYOUT_ROWS, Provenance, sources_from_blocks

if TYPE_CHECKING:
    from ..vocab import VocabularyLike

log = logging.getLogger(__name__)

DEFAULT_CACHE_BYTES = 256 << 20

_CATALOG_COLUMNS = (
    "build_id, b.name, table_name, "
    # the vocabulary's name and sha256 under the column names of either catalog shape: catalogs
    # created before 0.2.0 name them tokenizer and tokenizer_hash until a load renames them
    # (refactx_pipeline's rename_build_columns); a reader cannot rename them (it is read-only)
    "coalesce(to_jsonb(b) ->> 'vocabulary', to_jsonb(b) ->> 'tokenizer'), "
    "coalesce(to_jsonb(b) ->> 'vocabulary_sha256', to_jsonb(b) ->> 'tokenizer_hash'), vocab_size, depth, "
    "subtree_threshold, format_version, fact_prefix, fact_suffix, facts, rows, "
    # read through to_jsonb: a catalog that no loader with provenance has upgraded yet lacks
    # the column, and its builds still serve (without provenance)
    "(to_jsonb(b) ->> 'provenance_rows')::bigint, "
    "to_jsonb(b) ->> 'provenance_layout', (to_jsonb(b) ->> 'provenance_block_bits')::integer, "
    # the same for index_kind: a catalog from before path indexes holds facts only
    "coalesce(to_jsonb(b) ->> 'index_kind', 'facts')"
)


# what the pipeline's pg section defaults to as well (refactx_pipeline.config.PgConfig)
DEFAULT_SCHEMA = "refactx"
DEFAULT_STATEMENT_TIMEOUT_MS = 5000
# activation sends NOTIFY on this channel with the index name as payload
ACTIVATION_CHANNEL = "refactx_active"
# a lookup chases at most this many dropped builds in a row (each retry needs a newer active
# build than the one that failed, so only retention outpacing the lookup itself reaches it)
MAX_BUILD_SWITCHES = 8


@functools.lru_cache(maxsize=None)
def _private_jitter_pool() -> type:
    """psycopg_pool's ``ConnectionPool``, its connections' expiry jitter drawn from a generator
    of its own. The pool draws it from Python's global ``random`` whenever one of its threads
    opens a connection, which moved a caller's seeded sequence by a number of draws that
    differed from process to process."""

    class PrivateJitterPool(ConnectionPool):
        _rng = random.Random()

        @classmethod
        def _jitter(cls, value: float, min_pc: float, max_pc: float) -> float:
            return value * (1.0 + ((max_pc - min_pc) * cls._rng.random()) + min_pc)

    return PrivateJitterPool


def open_index(
    dsn: str,
    name: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    vocabulary: "VocabularyLike | None" = None,
    pool_size: int = 4,
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    connect_timeout_s: float = 10.0,
    follow: bool = True,
    check_interval_s: float = 30.0,
    prefetch_leaves: int = PREFETCH_LEAVES,
    prefetch_in_background: bool = False,
) -> "PgTreeIndex":
    """Open the build that serves ``name`` (see ``{schema}.active``).

    ``vocabulary``: ``None`` (no check), a vocabulary name or sha256, or anything
    :func:`~refactx_index.tree.index.check_vocabulary` takes (a vocabulary, a tokenizer, a path);
    a mismatch raises :class:`VocabularyMismatch`. Raises :class:`IndexNotFound`
    when no build is active under ``name``, :class:`FormatError` when the build was
    written in another format version, :class:`DatabaseUnavailable` when the server
    cannot be reached within ``connect_timeout_s`` (at once, with the server's words, for a
    wrong password, user or database name: waiting would not fix them). ``follow``: switch to a newly activated
    build by itself (``LISTEN``, plus a catalog check every ``check_interval_s``).
    ``prefetch_leaves``: a cursor reaching a row with at most this many facts below it
    fetches every row below (0: only the row itself); ``prefetch_in_background`` (with a
    ``pool_size`` of 2 or more): the step that reaches it waits for that row only, and the
    rows below come on another pooled connection while the walk goes on -- a step pays at most
    its own row's round trip. Off (the default: bench_walk measured it slower on 2 cores, see
    docs/runtime.md): they come in the same round trip as the row.
    """

    if pool_size < 1:
        raise InputRefused("pool_size must be >= 1")
    connect_kwargs = connection_kwargs(
        dsn, statement_timeout_ms=statement_timeout_ms, read_only=True, connect_timeout_s=connect_timeout_s,
        application_name=f"refactx_index:{name}", autocommit=True,
        # the statements' identifiers are quoted once, for UTF-8 (PgTreeIndex._read_served)
        client_encoding="utf8")
    # one attempt of our own first: a wrong password or database name fails here at once with
    # the server's words, where the pool would retry it for connect_timeout_s and then report
    # only its timeout
    first_failure = first_connection(dsn, connect_kwargs)
    pool = _private_jitter_pool()(
        dsn,
        min_size=1,
        max_size=pool_size,
        kwargs=connect_kwargs,
        open=False,
        name=f"refactx_index:{name}",
        timeout=connect_timeout_s,
        reconnect_timeout=max(connect_timeout_s, 30.0),
    )
    quiet, pool_log = _QuietPool(), logging.getLogger("psycopg.pool")
    pool_log.addFilter(quiet)
    try:
        pool.open(wait=True, timeout=connect_timeout_s)
    except PoolTimeout as exc:
        pool.close()
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL within {connect_timeout_s:g} s: {scrub(str(exc), dsn)}"
            + (f"; first attempt: {first_failure}" if first_failure else "")
        ) from None
    finally:
        pool_log.removeFilter(quiet)
    try:
        index = PgTreeIndex(pool, name, schema=schema, cache_bytes=cache_bytes,
                            statement_timeout_ms=statement_timeout_ms,
                            connect_timeout_s=connect_timeout_s, prefetch_leaves=prefetch_leaves,
                            prefetch_in_background=prefetch_in_background and pool_size >= 2)
        check_vocabulary(index, vocabulary)
        if follow:
            index.follow_activations(dsn, check_interval_s)
    except BaseException:
        pool.close()
        raise
    return index


class _QuietPool(logging.Filter):
    """Holds back the pool's warning for each failed attempt while :func:`open_index` waits:
    the one error after the wait names the cause."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


class PgTreeIndex(RowTreeIndex):
    """An index served from a PostgreSQL partition; use :func:`open_index`."""

    def __init__(
        self,
        pool: Any,
        name: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        connect_timeout_s: float = 10.0,
        prefetch_leaves: int = PREFETCH_LEAVES,
        prefetch_in_background: bool = False,
    ) -> None:
        self._pool = pool
        self._name = name
        self._schema = schema
        self._timeout_ms = statement_timeout_ms
        self._connect_timeout_s = connect_timeout_s
        self._cache_bytes = cache_bytes
        self._switched = threading.Condition()  # held while switching; notified after
        self._follower: _ActivationFollower | None = None
        super().__init__(self._read_served(), prefetch_leaves=prefetch_leaves,
                         prefetch_in_background=prefetch_in_background)

    # ------------------------------------------------------------------ catalog
    def _read_dictionary(self, build_id: int) -> PresetDictionary | None:
        """A format version 3 or 4 build's preset dictionary, read once per build opened (None: the
        build has none; a row that needs one is then a ``FormatError`` naming it)."""

        query = sql.SQL("SELECT dictionary FROM {}.build_dictionaries WHERE build_id = %s").format(
            sql.Identifier(self._schema))
        try:
            found = self._execute(query, (build_id,), binary=True)
        except DatabaseError as exc:
            if exc.sqlstate == "42P01":  # no loader of version 3 has upgraded this catalog
                return None
            raise
        return PresetDictionary(bytes(found[0][0])) if found else None

    def _read_served(self) -> ServedBuild:
        """The active build of this index name, with a fresh cache of its own."""

        query = sql.SQL(
            "SELECT " + _CATALOG_COLUMNS + " FROM {schema}.active a "
            "JOIN {schema}.builds b USING (build_id) WHERE a.name = %s"
        ).format(schema=sql.Identifier(self._schema))
        try:
            found = self._execute(query, (self._name,))
        except DatabaseError as exc:
            if exc.sqlstate in ("42P01", "3F000"):  # undefined table / schema
                raise IndexNotFound(
                    f"no refactx_index catalog in schema {self._schema!r}: {exc}"
                ) from exc
            raise
        if not found:
            raise IndexNotFound(
                f"no active build serves index {self._name!r} in schema {self._schema!r}"
            )
        (build_id, name, table, vocab, digest, vocab_size, depth, threshold, version,
         fact_prefix, fact_suffix, facts, rows, provenance_rows, provenance_layout, provenance_block_bits,
         index_kind) = found[0]
        if version not in READABLE_VERSIONS:
            raise FormatError(
                f"index {name!r} (build {build_id}) is in format version {version}; "
                f"this runtime reads versions {', '.join(map(str, READABLE_VERSIONS))}"
            )
        info = IndexInfo(
            name=name, vocabulary=vocab, vocabulary_sha256=digest, vocab_size=int(vocab_size),
            depth=int(depth), subtree_threshold=int(threshold), format_version=int(version),
            fact_prefix=fact_prefix, fact_suffix=fact_suffix, facts=facts, rows=rows,
            build_id=int(build_id), provenance_rows=provenance_rows, index_kind=index_kind,
            dictionary=self._read_dictionary(int(build_id)) if version >= 3 else None,
        )

        def statement(text: str, relation: str) -> bytes:
            """``text`` with ``{}.{}`` naming ``relation`` in this index's schema, rendered to
            bytes once: psycopg would compose a sql.Composed, escaping its identifiers, on every
            execute, ~15-20 µs of a ~110 µs round trip on loopback (docs/runtime.md, "Session
            16"). Without a connection the identifiers are quoted for UTF-8, the encoding the
            pool's connections ask for (open_index)."""
            return sql.SQL(text).format(sql.Identifier(self._schema), sql.Identifier(relation)).as_bytes(None)

        rows_query = statement("SELECT prefix, node FROM {}.{} WHERE prefix = ANY(%s)", table)
        # One key or one range is the usual fetch (a walk's first touch of a row, a cursor's
        # prefetch of one subtree). Its own statement, with no array parameter, is ~60-70 µs
        # shorter per round trip on loopback (docs/runtime.md, "A round trip"): psycopg adapts a
        # list to bytea[] and the server unpacks it, both per call.
        row_query = statement("SELECT prefix, node FROM {}.{} WHERE prefix = %s", table)
        range_query = statement("SELECT prefix, node FROM {}.{} WHERE prefix >= %s AND prefix < %s", table)
        # every row below each key: one primary-key range scan per key ([key, successor))
        below_query = statement("SELECT t.prefix, t.node FROM unnest(%s::bytea[], %s::bytea[]) AS r(lo, hi) "
                                "JOIN {}.{} AS t ON t.prefix >= r.lo AND t.prefix < r.hi", table)

        def read(query: Any, params: tuple) -> list[tuple]:
            try:
                return self._execute(query, params, binary=True)
            except DatabaseError as exc:
                if exc.sqlstate == "42P01":  # the build's table is gone: retention dropped it
                    raise BuildRetired(
                        f"index {self._name!r}: build {info.build_id} ({table}) was dropped while "
                        "being read (retention); lookups switch to the active build, a generation "
                        "in progress must be retried (its new root() reads the active build)",
                        build_id=info.build_id,
                    ) from exc
                raise

        def run(query: Any, params: tuple) -> dict[bytes, bytes]:
            return {bytes(k): bytes(v) for k, v in read(query, params)}

        fetch_provenance = None
        provenance_table = f"provenance_b{int(build_id)}"
        # a catalog that names no layout has the rows layout (builds loaded before blocks)
        if provenance_rows is not None and (provenance_layout or LAYOUT_ROWS) == LAYOUT_ROWS:
            provenance_query = statement(
                "SELECT fact_id, kind, subject, property, object, value FROM {}.{} WHERE fact_id = ANY(%s::bigint[])",
                provenance_table)

            def fetch_provenance(texts: Mapping[int, str]) -> list[tuple]:
                return read(provenance_query, (sorted(texts),))
        elif provenance_rows is not None:
            blocks_query = statement("SELECT block, data FROM {}.{} WHERE block = ANY(%s::bigint[])",
                                     provenance_table)
            where = f"index {name!r} (build {build_id}, {provenance_table})"

            def fetch_provenance(texts: Mapping[int, str]) -> list[tuple]:
                if provenance_layout != LAYOUT_BLOCKS or provenance_block_bits is None:
                    raise FormatError(f"{where}: provenance layout {provenance_layout!r} with block bits "
                                      f"{provenance_block_bits}; this runtime reads {LAYOUT_ROWS!r} and "
                                      f"{LAYOUT_BLOCKS!r} (with bits)")
                return sources_from_blocks(texts, int(provenance_block_bits),
                                           lambda keys: read(blocks_query, (keys,)), where)

        def fetch_rows(keys: list[bytes]) -> dict[bytes, bytes]:
            if len(keys) == 1:
                return run(row_query, (keys[0],))
            return run(rows_query, (keys,))

        def fetch_below(keys: list[bytes]) -> dict[bytes, bytes]:
            bounded = [(k, key_successor(k)) for k in keys]
            # a key without a successor (the root's empty key, all 0xff bytes): its own row only
            unbounded = [k for k, hi in bounded if hi is None]
            found = fetch_rows(unbounded) if unbounded else {}
            ranges = [(k, hi) for k, hi in bounded if hi is not None]
            if len(ranges) == 1:
                found.update(run(range_query, ranges[0]))
            elif ranges:
                found.update(run(below_query, ([k for k, _ in ranges], [hi for _, hi in ranges])))
            return found

        return ServedBuild(info, ByteLRUCache(self._cache_bytes, fragment_nbytes), fetch_rows, fetch_below,
                           fetch_provenance)

    def refresh(self) -> bool:
        """Re-read the catalog; if another build became active, serve it from the next lookup
        on (with a cache of its own: the old build's rows can never answer for it).

        Returns whether the build changed.
        """
        with self._switched:  # one catalog read at a time; lookups never wait on it
            served = self._read_served()
            old = self._build
            if served.info.build_id == old.info.build_id:
                return False
            self._build = served
            self._switched.notify_all()
        log.info("index %r: build %s -> %s", self._name, old.info.build_id, served.info.build_id)
        return True

    def wait_for_build(self, build_id: int, timeout_s: float) -> bool:
        """Block until this index serves ``build_id`` (or a newer build); False on timeout.
        For a deployment step that must not go on before readers serve what it activated."""
        with self._switched:
            return self._switched.wait_for(lambda: self._build.info.build_id >= build_id, timeout_s)

    def follow_activations(self, dsn: str, check_interval_s: float = 30.0) -> None:
        """Switch builds by themselves: LISTEN for activations, and check the catalog every
        ``check_interval_s`` in case a notification was missed (idempotent)."""
        if self._follower is None:
            self._follower = _ActivationFollower(self, dsn, check_interval_s)
            self._follower.start()

    # ------------------------------------------------------------------ lookups
    def next_tokens_batch(self, prefixes: Sequence[Sequence[int]], *,
                          build: ServedBuild | None = None) -> list[NextTokens]:
        if build is not None:  # the caller's request reads this build only (serving_build)
            with self._switch_if_dropped():
                return super().next_tokens_batch(prefixes, build=build)
        prefs = [_as_tuple(p) for p in prefixes]
        self.stats.lookups += len(prefs)
        build = self._serving()
        for _ in range(MAX_BUILD_SWITCHES):
            try:
                return self._next_tokens_on(build, prefs)
            except BuildRetired as exc:
                # retention dropped the build this lookup read. Whether our own refresh() or
                # the follower's (or another lookup's) switched does not matter: what matters
                # is that the served build is not the one that failed
                build = self._switch_from(exc)
        raise BuildRetired(
            f"index {self._name!r}: {MAX_BUILD_SWITCHES} builds in a row were dropped while this "
            "lookup read them (retention faster than a lookup: raise pg.retention_grace_s)",
            build_id=build.info.build_id,
        )

    def provenance(self, texts: Sequence[str], *,
                   build: ServedBuild | None = None) -> "list[Provenance] | None":
        if build is not None:  # the caller's request reads this build only (serving_build)
            with self._switch_if_dropped():
                return super().provenance(texts, build=build)
        for _ in range(MAX_BUILD_SWITCHES):
            try:
                return super().provenance(texts)
            except BuildRetired as exc:  # read the served build's provenance instead
                self._switch_from(exc)
        raise BuildRetired(
            f"index {self._name!r}: {MAX_BUILD_SWITCHES} builds in a row were dropped while their "
            "provenance was read (retention faster than a lookup: raise pg.retention_grace_s)",
            build_id=self._build.info.build_id,
        )

    def advance_batch(self, moves: Sequence[tuple[Cursor | None, int]], *,
                      build: ServedBuild | None = None) -> list[Cursor | None]:
        if build is not None:  # roots of the caller's build only (serving_build)
            with self._switch_if_dropped():
                return super().advance_batch(moves, build=build)
        for _ in range(MAX_BUILD_SWITCHES):
            try:
                return super().advance_batch(moves)
            except BuildRetired as exc:
                if any(cur is not None and cur.build.info.build_id == exc.build_id for cur, _ in moves):
                    # cursors stay on their build: their generation must be retried
                    self._leave(exc)
                    raise
                # only new generations (root requests) read the dropped build: nothing of it is
                # in use yet, so they start on the active build instead
                self._switch_from(exc)
        raise BuildRetired(
            f"index {self._name!r}: {MAX_BUILD_SWITCHES} builds in a row were dropped while a "
            "generation started (retention faster than a lookup: raise pg.retention_grace_s)",
            build_id=self._build.info.build_id,
        )

    @contextlib.contextmanager
    def _switch_if_dropped(self):
        """A request pinned to a build gets :class:`BuildRetired` when that build is dropped
        (it must not be answered from another build); the index itself moves on."""
        try:
            yield
        except BuildRetired as exc:
            self._leave(exc)
            raise

    def _leave(self, exc: BuildRetired) -> None:
        """Switch now if the index still serves the dropped build (follow may be off), so
        that the retried request's ``serving_build()``/``root()`` reads the active build."""
        if self._build.info.build_id == exc.build_id:
            self._switch_from(exc)

    def _switch_from(self, exc: BuildRetired) -> ServedBuild:
        """The build to retry on after build ``exc.build_id`` was dropped: the served one once
        the catalog is re-read. Raises ``exc`` again when the catalog still names that build."""
        self.refresh()
        current = self._build
        if current.info.build_id == exc.build_id:
            raise exc
        log.info("index %r: build %s was dropped under a lookup; retrying on build %s",
                 self._name, exc.build_id, current.info.build_id)
        return current

    def ping(self, timeout_s: float = 2.0) -> None:
        """Check that the database answers: one ``SELECT 1`` on a pooled connection, waiting
        at most ``timeout_s`` for one. Raises :class:`DatabaseUnavailable` naming the cause."""

        for attempt in (1, 2):  # a pooled connection that died with an earlier server: once more
            try:
                with self._pool.connection(timeout=timeout_s) as conn:
                    conn.execute("SELECT 1")
                return
            except PoolTimeout as exc:
                raise DatabaseUnavailable(f"index {self._name!r}: no PostgreSQL connection within "
                                          f"{timeout_s:g} s") from exc
            except psycopg.OperationalError as exc:
                if attempt == 2:
                    raise DatabaseUnavailable(f"index {self._name!r}: PostgreSQL does not answer: "
                                              f"{' '.join(str(exc).split())}") from exc
            except psycopg.Error as exc:
                raise DatabaseUnavailable(f"index {self._name!r}: PostgreSQL does not answer: "
                                          f"{' '.join(str(exc).split())}") from exc

    # ------------------------------------------------------------------ rows
    def _execute(self, query: Any, params: Sequence[Any], *, binary: bool = False) -> list[tuple]:
        """Run one statement on a pooled connection: retry a lost connection once; map every
        driver error to a refactx error."""

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
            except errors.InsufficientPrivilege as exc:
                raise PermissionDenied(
                    f"index {self._name!r}: the database role may not read it ({str(exc).strip()}); "
                    "the loader grants the configured reader role (pg.reader_role) USAGE on the "
                    "schema and SELECT on the catalog and on every build table"
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
            except psycopg.Error as exc:
                raise DatabaseError(
                    f"index {self._name!r}: PostgreSQL error {exc.sqlstate}: {str(exc).strip()}",
                    sqlstate=exc.sqlstate,
                ) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Stop following activations and close the pool (idempotent)."""
        if self._follower is not None:
            self._follower.stop()
            self._follower = None
        super().close()  # the background fetcher, before its connections go
        self._pool.close()


class _ActivationFollower(threading.Thread):
    """LISTEN for activations of the index's name; refresh on one, or every interval."""

    def __init__(self, index: PgTreeIndex, dsn: str, check_interval_s: float) -> None:
        super().__init__(name=f"refactx-follow:{index._name}", daemon=True)
        self._index = index
        self._dsn = dsn
        self._interval_s = max(0.05, float(check_interval_s))
        self._stopping = threading.Event()
        self._conn: Any = None

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=5.0)

    def run(self) -> None:
        next_check = time.monotonic() + self._interval_s
        while not self._stopping.is_set():
            try:
                with connect(self._dsn, autocommit=True, statement_timeout_ms=None,
                             connect_timeout_s=self._index._connect_timeout_s,
                             application_name=f"refactx_index:follow:{self._index._name}") as conn:
                    conn.execute(f"LISTEN {ACTIVATION_CHANNEL}")
                    self._refresh()  # whatever was activated before LISTEN took effect
                    while not self._stopping.is_set():
                        wait = max(0.0, min(0.5, next_check - time.monotonic()))
                        names = {n.payload for n in conn.notifies(timeout=wait)}
                        if self._index._name in names or time.monotonic() >= next_check:
                            next_check = time.monotonic() + self._interval_s
                            self._refresh()
            except psycopg.Error as exc:
                log.warning("index %r: activation listener lost its connection (%s); retrying",
                            self._index._name, str(exc).strip())
                self._stopping.wait(min(self._interval_s, 5.0))

    def _refresh(self) -> None:
        try:
            self._index.refresh()
        except RefactxError as exc:  # the lookups report it; keep serving the current build
            log.warning("index %r: catalog check failed: %s", self._index._name, exc)
