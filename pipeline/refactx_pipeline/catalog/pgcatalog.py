"""The PostgreSQL catalog, shared by load, validate and activate.

Statements live in ``sql/*.sql``; this module substitutes identifiers with
``psycopg.sql`` (never string formatting of values) and runs them one by one.

A build's life: ``loading`` (fresh unattached table ``tree_b<build_id>``, COPY) ->
``loaded`` (unique index, ANALYZE, CHECK + ATTACH) -> ``validated`` -> ``active`` ->
``retired``, or ``failed`` with a message. While a load runs, its process holds a
session advisory lock on the build id; a ``loading`` build whose lock is free was
left by a killed process, which is how :func:`clean_leftovers` tells it from a load
still running elsewhere.
"""

from __future__ import annotations

import logging
import re
import uuid
from functools import lru_cache
from typing import Any, Mapping, Sequence

import psycopg
from psycopg.rows import dict_row
from psycopg import sql

from refactx_index.tree import format as fmt
from refactx_pipeline.errors import ConfigError, LoadError
from refactx_pipeline.resources import sql_text

log = logging.getLogger(__name__)

# advisory lock namespaces (the first key of pg_advisory_lock(int, int))
LOCK_SCHEMA = 0x52465830  # "RFX0": schema creation
LOCK_LOADING = 0x52465831  # "RFX1": a load in progress, second key = build id
LOCK_ACTIVATE = 0x52465832  # "RFX2": activation/retention of an index name
_TABLE_RE = re.compile(r"^(?:tree|provenance)_b(\d+)$")


@lru_cache(maxsize=None)
def _statements_text(name: str) -> tuple[str, ...]:
    text = sql_text(name)
    # our SQL files hold no "--" or ";" inside string literals, so this split is exact
    body = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return tuple(s.strip() for s in body.split(";") if s.strip())


def statements(name: str, schema: str, **names: Any) -> list[sql.Composed]:
    """The statements of ``sql/<name>``: ``{schema}`` and identifier placeholders substituted.

    ``names`` values that are ``int`` become literals, ``str`` become identifiers.
    """
    subst: dict[str, sql.Composable] = {"schema": sql.Identifier(schema)}
    for key, value in names.items():
        subst[key] = sql.Literal(value) if isinstance(value, int) else sql.Identifier(value)
    return [sql.SQL(s).format(**subst) for s in _statements_text(name)]


def stage_builds(conn: psycopg.Connection, cfg, build_ids: Mapping[str, int], *, stage: str,
                 statuses: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The catalog rows of the builds a validate or activate run was handed (vocabulary ->
    build id), each checked to be what this run's config says: a build of the vocabulary's
    index name, loaded from this source and dump date, not dropped, in one of ``statuses``.
    Anything else is a ``LoadError`` that says which build, what it is, and what was expected."""
    builds: dict[str, dict[str, Any]] = {}
    for vocab, build_id in build_ids.items():
        build = get_build(conn, cfg.pg.schema, build_id)
        name = cfg.index_name(vocab)
        where = f"stage {stage}: build {build_id} (given for vocabulary {vocab})"
        if build is None:
            raise LoadError(f"{where} does not exist in {cfg.pg.schema}.builds")
        if build["name"] != name:
            raise LoadError(f"{where} is a build of index {build['name']!r}, not of {name!r}")
        if (build["source"], build["dump_date"]) != (cfg.paths.source, cfg.paths.dump_date):
            raise LoadError(f"{where} was loaded from {build['source']} dump {build['dump_date']}, "
                            f"this run builds {cfg.paths.source} dump {cfg.paths.dump_date}")
        if build["dropped_at"] is not None:
            raise LoadError(f"{where} was dropped at {build['dropped_at']:%Y-%m-%d %H:%M:%S %Z}")
        if build["status"] not in statuses:
            why = f" ({build['message']})" if build["message"] else ""
            hint = {"loading": "its load has not finished", "loaded": "validate it first",
                    "active": "it serves already", "retired": "it has served already"}.get(
                build["status"], "load a new build")
            raise LoadError(f"{where} of index {name!r} is {build['status']}{why}; {stage} takes a "
                            f"{' or '.join(statuses)} build: {hint}")
        builds[vocab] = build
    return builds


def table_name(build_id: int) -> str:
    """Bare table name of a build's partition (what ``builds.table_name`` stores)."""
    return f"tree_b{int(build_id)}"


def provenance_table_name(build_id: int) -> str:
    """Bare table name of a build's provenance partition."""
    return f"provenance_b{int(build_id)}"


# catalog columns renamed in 0.2.0 (old name -> new name): the vocabulary of a build is
# ``vocabulary`` (its name) and ``vocabulary_sha256`` (its tokenizer.json's sha256), as in
# refactx_index's IndexInfo
RENAMED_BUILD_COLUMNS = (("tokenizer", "vocabulary"), ("tokenizer_hash", "vocabulary_sha256"))


def apply_schema(conn: psycopg.Connection, schema: str) -> None:
    """Create or upgrade the catalog (idempotent; serialized against concurrent loaders)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_SCHEMA,))
        rename_build_columns(conn, schema)
        for stmt in statements("schema.sql", schema):
            conn.execute(stmt)


def rename_build_columns(conn: psycopg.Connection, schema: str) -> list[str]:
    """Give a catalog created before 0.2.0 the columns' new names (``RENAMED_BUILD_COLUMNS``),
    keeping their values: idempotent, a no-op on a new or already renamed catalog. Readers of
    either release serve the renamed catalog's builds only from 0.2.0 on (they read either
    shape); returns the columns renamed."""
    found = {row[0] for row in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'builds'",
        (schema,))}
    renamed = []
    for old, new in RENAMED_BUILD_COLUMNS:
        if old in found and new not in found:
            conn.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(
                sql.Identifier(schema, "builds"), sql.Identifier(old), sql.Identifier(new)))
            renamed.append(f"{old} -> {new}")
    if renamed:
        log.info("catalog %s.builds: renamed columns %s", schema, ", ".join(renamed))
    return renamed


def create_build(conn: psycopg.Connection, schema: str, fields: dict[str, Any]) -> int:
    """Insert a ``loading`` build row and create its empty, unattached table.

    The caller's session then holds the build's loading lock until it finishes.
    """
    with conn.transaction():
        cols = list(fields) + ["table_name", "status"]
        # table_name needs the id: insert a placeholder unique name, then set it
        row = conn.execute(
            sql.SQL("INSERT INTO {}.builds ({}) VALUES ({}) RETURNING build_id").format(
                sql.Identifier(schema),
                sql.SQL(", ").join(map(sql.Identifier, cols)),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            ),
            [*fields.values(), f"pending-{uuid.uuid4().hex}", "loading"],
        ).fetchone()
        build_id = int(row[0])
        table = table_name(build_id)
        conn.execute(
            sql.SQL("UPDATE {}.builds SET table_name = %s WHERE build_id = %s").format(
                sql.Identifier(schema)
            ),
            (table, build_id),
        )
        conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_LOADING, build_id))
        for stmt in statements("create_build_table.sql", schema, table=table,
                               provenance_table=provenance_table_name(build_id)):
            conn.execute(stmt)
    return build_id


def release_loading_lock(conn: psycopg.Connection, build_id: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_LOADING, build_id))


def attach(conn: psycopg.Connection, schema: str, build_id: int) -> None:
    """Unique B-tree on prefix and ANALYZE, then CHECK + ATTACH in one short transaction."""
    table = table_name(build_id)
    _attach(conn, schema, build_id, "attach.sql", table, f"{table}_prefix_key")


def attach_provenance(conn: psycopg.Connection, schema: str, build_id: int) -> None:
    """Unique B-tree on block and ANALYZE, then CHECK + ATTACH to the provenance_blocks parent."""
    table = provenance_table_name(build_id)
    _attach(conn, schema, build_id, "attach_provenance.sql", table, f"{table}_block_key")


def _attach(conn: psycopg.Connection, schema: str, build_id: int, sql_file: str, table: str,
            index: str) -> None:
    create_index, analyze, check, attach_stmt = statements(
        sql_file, schema, table=table, index=index, check=f"{table}_build_id_check", build_id=int(build_id),
    )
    conn.execute(create_index)
    conn.execute(analyze)
    with conn.transaction():
        conn.execute(check)
        conn.execute(attach_stmt)


def is_attached(conn: psycopg.Connection, schema: str, table: str, parent: str = "tree") -> bool:
    row = conn.execute(
        """SELECT EXISTS (
               SELECT 1 FROM pg_inherits i
               JOIN pg_class c ON c.oid = i.inhrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_class p ON p.oid = i.inhparent
              WHERE n.nspname = %s AND c.relname = %s AND p.relname = %s)""",
        (schema, table, parent),
    ).fetchone()
    return bool(row[0])


def drop_build_table(conn: psycopg.Connection, schema: str, build_id: int,
                     lock_timeout_ms: int | None = None) -> bool:
    """Detach (when attached) and drop a build's tree and provenance tables; mark the build
    row dropped.

    With ``lock_timeout_ms``, a table that a reader's open transaction holds is left alone
    (returns False, logged): a later run drops it, and nothing waits behind it meanwhile.
    """
    table = table_name(build_id)
    provenance = provenance_table_name(build_id)
    detach, drop, detach_provenance_rows, detach_provenance_blocks, drop_provenance, mark = statements(
        "retire.sql", schema, table=table, provenance_table=provenance, build_id=int(build_id))
    try:
        with conn.transaction():
            if lock_timeout_ms is not None:
                conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(f"{int(lock_timeout_ms)}ms")))
            if is_attached(conn, schema, table):
                conn.execute(detach)
            conn.execute(drop)
            if is_attached(conn, schema, provenance, "provenance"):
                conn.execute(detach_provenance_rows)
            if is_attached(conn, schema, provenance, "provenance_blocks"):
                conn.execute(detach_provenance_blocks)
            conn.execute(drop_provenance)
            conn.execute(mark)
    except psycopg.errors.LockNotAvailable:
        log.warning("build %d: %s is locked by another session; left for a later run to drop",
                    build_id, table)
        return False
    return True


_IN_FLIGHT = ("loading", "loaded", "validated")


def name_holder(conn: psycopg.Connection, schema: str, name: str) -> dict[str, Any] | None:
    """The build in flight for ``name`` (claimed, and still loading/loaded/validated), or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            sql.SQL("SELECT g.build_id, g.since, b.status FROM {s}.building g "
                    "JOIN {s}.builds b USING (build_id) WHERE g.name = %s").format(s=sql.Identifier(schema)),
            (name,),
        ).fetchone()
    return row if row and row["status"] in _IN_FLIGHT else None


def ensure_name_free(conn: psycopg.Connection, schema: str, name: str, build_id: int | None = None) -> None:
    """A ``LoadError`` naming the build in flight for ``name``, unless there is none (or it is
    ``build_id``): one build per index name at a time."""
    holder = name_holder(conn, schema, name)
    if holder is not None and holder["build_id"] != build_id:
        raise LoadError(
            f"index {name!r}: build {holder['build_id']} ({holder['status']}, since "
            f"{holder['since']:%Y-%m-%d %H:%M:%S %Z}) is being built; one build per index name at a "
            f"time. Let it finish, or if its run died, release it: refactx-pipeline builds --release {name}"
        )


def claim_name(conn: psycopg.Connection, schema: str, name: str, build_id: int) -> None:
    """Make ``build_id`` the one build in flight for ``name`` (``ensure_name_free`` under the
    name's lock); the claim ends when the build is activated, fails or is released."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_ACTIVATE, name))
        ensure_name_free(conn, schema, name, build_id)
        conn.execute(
            sql.SQL("INSERT INTO {}.building (name, build_id) VALUES (%s, %s) ON CONFLICT (name) "
                    "DO UPDATE SET build_id = EXCLUDED.build_id, since = now()").format(sql.Identifier(schema)),
            (name, build_id),
        )


def release_name(conn: psycopg.Connection, schema: str, build_id: int) -> None:
    """End ``build_id``'s claim on its name (activated, failed or abandoned)."""
    conn.execute(sql.SQL("DELETE FROM {}.building WHERE build_id = %s").format(sql.Identifier(schema)),
                 (build_id,))


def release_claim(conn: psycopg.Connection, schema: str, name: str) -> int | None:
    """An operator's way out when the run holding ``name`` died after its load: the build in
    flight is marked failed, its table dropped and the name freed. Returns its id (None: none)."""
    holder = name_holder(conn, schema, name)
    if holder is None:
        conn.execute(sql.SQL("DELETE FROM {}.building WHERE name = %s").format(sql.Identifier(schema)), (name,))
        return None
    build_id = int(holder["build_id"])
    set_status(conn, schema, build_id, "failed", message="released by an operator (refactx-pipeline builds --release)")
    release_name(conn, schema, build_id)
    drop_build_table(conn, schema, build_id)
    return build_id


def require_role(conn: psycopg.Connection, role: str) -> None:
    """A ``ConfigError`` naming ``pg.reader_role`` when ``role`` does not exist on the server
    (a GRANT to it would fail with a driver error)."""
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is None:
        raise ConfigError(f"pg.reader_role: role {role!r} does not exist on this server; create it "
                          f"(CREATE ROLE {role} LOGIN) or set pg.reader_role to the role that serves")


def grant_reader(conn: psycopg.Connection, schema: str, role: str, table: str | None = None) -> None:
    """Least privilege for the serving role: USAGE on the schema and SELECT on the catalog
    (``table`` None), or SELECT on one build's table. Readers need nothing more."""
    if not role:
        return
    require_role(conn, role)
    who = sql.Identifier(role)
    if table is None:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), who))
        conn.execute(sql.SQL("GRANT SELECT ON {s}.builds, {s}.active, {s}.build_dictionaries TO {r}").format(
            s=sql.Identifier(schema), r=who))
    else:
        conn.execute(sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
            sql.Identifier(schema), sql.Identifier(table), who))


def store_dictionary(conn: psycopg.Connection, schema: str, build_id: int, dictionary: bytes) -> None:
    """A build's preset dictionary (format versions 3 and 4), beside its catalog row."""
    conn.execute(sql.SQL("INSERT INTO {}.build_dictionaries (build_id, dictionary) VALUES (%s, %s)").format(
        sql.Identifier(schema)), (int(build_id), dictionary))


def build_dictionary(conn: psycopg.Connection, schema: str, build_id: int) -> fmt.PresetDictionary | None:
    """A build's preset dictionary as readers get it (None: the build has none)."""
    found = conn.execute(sql.SQL("SELECT dictionary FROM {}.build_dictionaries WHERE build_id = %s").format(
        sql.Identifier(schema)), (int(build_id),)).fetchone()
    return fmt.PresetDictionary(bytes(found[0])) if found else None


def table_readers(conn: psycopg.Connection, schema: str, table: str) -> list[str]:
    """The roles granted SELECT on a build's table, its owner aside (PUBLIC is no role to check)."""
    rows = conn.execute(
        "SELECT DISTINCT r.rolname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN LATERAL aclexplode(c.relacl) a "
        "JOIN pg_roles r ON r.oid = a.grantee "
        "WHERE n.nspname = %s AND c.relname = %s AND a.privilege_type = 'SELECT' "
        "AND a.grantee <> c.relowner ORDER BY 1",
        (schema, table),
    ).fetchall()
    return [role for (role,) in rows]


def missing_reader_privileges(conn: psycopg.Connection, schema: str, role: str, table: str) -> list[str]:
    """What ``role`` lacks to serve the build whose table is ``table`` (empty: nothing): the
    privileges ``grant_reader`` gives, whether granted to it or to a role it belongs to."""
    needed = [
        (f"USAGE on schema {schema}", "has_schema_privilege(%(role)s::name, %(schema)s::text, 'USAGE')"),
        (f"SELECT on {schema}.builds", "has_table_privilege(%(role)s::name, format('%%I.builds', %(schema)s::text), 'SELECT')"),
        (f"SELECT on {schema}.active", "has_table_privilege(%(role)s::name, format('%%I.active', %(schema)s::text), 'SELECT')"),
        (f"SELECT on {schema}.build_dictionaries",
         "has_table_privilege(%(role)s::name, format('%%I.build_dictionaries', %(schema)s::text), 'SELECT')"),
        (f"SELECT on {schema}.{table}",
         "has_table_privilege(%(role)s::name, format('%%I.%%I', %(schema)s::text, %(table)s::text), 'SELECT')"),
    ]
    granted = conn.execute("SELECT " + ", ".join(check for _, check in needed),
                           {"role": role, "schema": schema, "table": table}).fetchone()
    return [what for (what, _), has in zip(needed, granted) if not has]


def set_status(
    conn: psycopg.Connection, schema: str, build_id: int, status: str, **fields: Any
) -> None:
    """Update a build's status and any other columns (``message``, counts, times)."""
    assignments = [sql.SQL("status = %s")]
    values: list[Any] = [status]
    for key, value in fields.items():
        assignments.append(sql.SQL("{} = %s").format(sql.Identifier(key)))
        values.append(value)
    conn.execute(
        sql.SQL("UPDATE {}.builds SET {} WHERE build_id = %s").format(
            sql.Identifier(schema), sql.SQL(", ").join(assignments)
        ),
        [*values, build_id],
    )


def get_build(conn: psycopg.Connection, schema: str, build_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            sql.SQL("SELECT * FROM {}.builds WHERE build_id = %s").format(sql.Identifier(schema)),
            (build_id,),
        )
        return cur.fetchone()


def active_build(conn: psycopg.Connection, schema: str, name: str) -> int | None:
    row = conn.execute(
        sql.SQL("SELECT build_id FROM {}.active WHERE name = %s").format(sql.Identifier(schema)),
        (name,),
    ).fetchone()
    return int(row[0]) if row else None


def relation_bytes(conn: psycopg.Connection, schema: str, table: str) -> tuple[int, int]:
    """(table bytes incl. TOAST, index bytes) of a build's table."""
    row = conn.execute(
        "SELECT pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, table),
    ).fetchone()
    return int(row[0]), int(row[1])


BUILD_PARTS = ("tree", "provenance")


def build_bytes(conn: psycopg.Connection, schema: str) -> dict[int, dict[str, tuple[int, int]]]:
    """Each build's bytes on disk now: ``{build_id: {"tree": (table, index), "provenance":
    (table, index)}}``, read from its partitions (table bytes include TOAST; index bytes are
    the partition's indexes). A part whose partition does not exist (a dropped build, a build
    loaded without provenance) is absent.

    The partitioned parents ``tree`` and ``provenance`` hold no rows of their own: their
    ``pg_total_relation_size`` is 0, so a build's size is its partitions' (docs/tree.md)."""
    rows = conn.execute(
        sql.SQL(
            "SELECT b.build_id, p.part, pg_table_size(c.oid), pg_indexes_size(c.oid) "
            "FROM {}.builds b "
            "CROSS JOIN LATERAL (VALUES ('tree', b.table_name), "
            "                           ('provenance', 'provenance_b' || b.build_id)) AS p(part, relname) "
            "JOIN pg_class c ON c.relname = p.relname AND c.relnamespace = %s::regnamespace"
        ).format(sql.Identifier(schema)),
        (sql.Identifier(schema).as_string(conn),),
    ).fetchall()
    sizes: dict[int, dict[str, tuple[int, int]]] = {}
    for build_id, part, table, index in rows:
        sizes.setdefault(int(build_id), {})[part] = (int(table), int(index))
    return sizes


def clean_leftovers(conn: psycopg.Connection, schema: str) -> dict[str, list[int]]:
    """Fail and drop builds left in ``loading`` by a dead process; drop orphaned tables.

    A ``loading`` build whose advisory lock can be taken has no live loader (the lock
    is a session lock: PostgreSQL releases it when the loader's connection dies).
    """
    s = sql.Identifier(schema)
    interrupted: list[int] = []
    loading = conn.execute(
        sql.SQL("SELECT build_id FROM {}.builds WHERE status = 'loading' ORDER BY build_id").format(s)
    ).fetchall()
    for (build_id,) in loading:
        got = conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_LOADING, build_id)
        ).fetchone()[0]
        if not got:
            continue  # a loader is alive
        try:
            set_status(conn, schema, build_id, "failed",
                       message="load interrupted (loader process gone); cleaned by a later run")
            drop_build_table(conn, schema, build_id)
            interrupted.append(int(build_id))
        finally:
            release_loading_lock(conn, build_id)
    orphans: list[int] = []
    tables = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^(tree|provenance)_b[0-9]+$'",
        (schema,),
    ).fetchall()
    for build_id in sorted({int(_TABLE_RE.match(table).group(1)) for (table,) in tables}):
        build = get_build(conn, schema, build_id)
        # a build's two tables are attached together (the provenance first): its tree table
        # attached means the build is whole; a provenance table alone is an orphan
        if build is not None and (build["status"] == "loading"
                                  or is_attached(conn, schema, table_name(build_id))):
            continue
        log.warning("dropping the orphaned tables of build %d in %s", build_id, schema)
        drop_build_table(conn, schema, build_id)  # not attached: no DETACH; marks a build row if any
        orphans.append(build_id)
    if interrupted or orphans:
        log.info("cleaned leftovers: interrupted builds %s, orphaned tables %s", interrupted, orphans)
    return {"interrupted_builds": interrupted, "orphaned_tables": orphans}
