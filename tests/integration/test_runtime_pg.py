"""The PostgreSQL-backed index against a real server: answers, round trips, faults."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..conftest import tokenizer_dir
from ..pgtree import load_tree
from ..treedata import expected_next, random_sequences
from refactx_pipeline.catalog import pgcatalog
from refactx_index import (
    DatabaseUnavailable,
    FormatError,
    IndexNotFound,
    QueryTimeout,
    VocabularyMismatch,
    open_index,
)
from refactx_index.tree.format import FORMAT_VERSION
from refactx_index.tree.index import tokenizer_sha256
from refactx_index.tree.memory import build_rows, deepest_row

pytestmark = pytest.mark.pg


def all_prefixes(seqs):
    return sorted({s[:i] for s in seqs for i in range(len(s) + 1)})


def as_dict(answer):
    return dict(zip(answer.tokens.tolist(), answer.leaves.tolist())), answer.ends


def count_fetches(index):
    calls = []
    real = index._fetch

    def counting(build, keys):
        calls.append(list(keys))
        return real(build, keys)

    index._fetch = counting
    return calls


@pytest.mark.parametrize("max_tokens,threshold", [(20, 4), (1, 1), (4096, 64)])
def test_every_prefix_answers_like_brute_force(pg_dsn, max_tokens, threshold):
    seqs = random_sequences(seed=threshold)
    load_tree(pg_dsn, "kg", seqs, threshold=threshold, max_subtree_tokens=max_tokens)
    with open_index(pg_dsn, "kg") as index:
        rows = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_tokens)
        assert index.info.depth == deepest_row(rows) and index.info.facts == len(seqs)
        prefixes = all_prefixes(seqs)
        for p in prefixes:
            assert as_dict(index.next_tokens(p)) == expected_next(seqs, p), p
        # outside the tree: empty, not an error (also below an external node)
        for p in [(999,), (1, 999), prefixes[-1] + (5, 5, 5, 5, 5, 5, 5, 5)]:
            answer = index.next_tokens(p)
            assert answer.empty and answer.tokens.size == 0 and not answer.ends


def test_batch_is_one_round_trip_and_warm_needs_none(pg_dsn):
    seqs = random_sequences(seed=7, n=500)
    load_tree(pg_dsn, "kg", seqs, threshold=2)
    with open_index(pg_dsn, "kg") as index:
        calls = count_fetches(index)
        prefixes = [p for p in all_prefixes(seqs) if len(p) >= 2][:200]
        answers = index.next_tokens_batch(prefixes)
        assert len(calls) == 1  # every row of every level in one statement
        assert [as_dict(a) for a in answers] == [expected_next(seqs, p) for p in prefixes]
        index.next_tokens_batch(prefixes)
        assert len(calls) == 1  # warm: served from the cache
        assert index.cache.hits > 0 and index.cache.nbytes <= index.cache.max_bytes


def test_one_key_or_range_and_many_fetch_the_same_rows(pg_dsn):
    # a single key or range has statements of its own (no array parameter): the same rows
    seqs = random_sequences(seed=5, n=400)
    load_tree(pg_dsn, "kg", seqs, threshold=2)
    with psycopg.connect(pg_dsn) as conn:
        table = conn.execute("SELECT table_name FROM refactx.builds").fetchone()[0]
        stored = {bytes(k): bytes(v) for k, v in conn.execute(f"SELECT prefix, node FROM refactx.{table}")}
    keys = sorted(stored)[1::7]  # not the root: every row lies below its empty key
    below = {k: {p: v for p, v in stored.items() if p.startswith(k)} for k in keys}
    assert any(len(rows) > 1 for rows in below.values())
    with open_index(pg_dsn, "kg") as index:
        build = index._serving()
        for key in keys:
            assert build.fetch_rows([key]) == {key: stored[key]}
            assert build.fetch_below([key]) == below[key]
        assert build.fetch_rows(keys) == {k: stored[k] for k in keys}
        assert build.fetch_below(keys[:5]) == {p: v for k in keys[:5] for p, v in below[k].items()}
        assert build.fetch_rows([b"\xff\xff\xff\xff"]) == {}  # no such row: nothing, not an error
        assert build.fetch_below([b"", keys[0]]) == {b"": stored[b""], **below[keys[0]]}


def test_statements_rendered_once_quote_an_unusual_schema_name(pg_dsn):
    # the row statements are rendered to bytes once, outside any connection: a schema name
    # that must be quoted (capitals, a space, a double quote, non-ASCII) still reads its rows
    schema = 'Ré "faits" x'
    seqs = random_sequences(seed=6, n=300)
    load_tree(pg_dsn, "kg", seqs, threshold=2, schema=schema)
    with psycopg.connect(pg_dsn) as conn:
        table = conn.execute(sql.SQL("SELECT table_name FROM {}.builds").format(sql.Identifier(schema))).fetchone()[0]
        stored = {bytes(k): bytes(v) for k, v in conn.execute(
            sql.SQL("SELECT prefix, node FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))}
    keys = sorted(stored)[1::5]
    with open_index(pg_dsn, "kg", schema=schema) as index:
        build = index._serving()
        assert build.fetch_rows([keys[0]]) == {keys[0]: stored[keys[0]]}
        assert build.fetch_rows(keys) == {k: stored[k] for k in keys}
        assert build.fetch_below([keys[1]]) == {p: v for p, v in stored.items() if p.startswith(keys[1])}
        for fact in sorted(seqs)[:20]:
            for k in range(len(fact) + 1):
                assert as_dict(index.next_tokens(fact[:k])) == expected_next(seqs, fact[:k])


def walk_cold(index, fact):
    """Walk ``fact`` with cursors from a cold cache; the answers met on the way."""
    build = index._serving()
    build.cache.clear()
    build.ahead.clear()
    cur, answers = index.root(), []
    for tok in fact:
        answers.append(as_dict(cur.next_tokens()))
        cur = index.advance(cur, tok)
    answers.append(as_dict(cur.next_tokens()))
    return answers


def test_a_cursor_fetches_a_small_subtree_whole(pg_dsn):
    seqs = random_sequences(seed=11, n=500)
    load_tree(pg_dsn, "kg", seqs, threshold=1)  # every fact in a row of its own: deep chains of rows
    sample = sorted(seqs)[::25]
    expected = [[expected_next(seqs, f[:k]) for k in range(len(f) + 1)] for f in sample]
    trips = {}
    for prefetch in (0, 40, 10**9):
        with open_index(pg_dsn, "kg", prefetch_leaves=prefetch, prefetch_in_background=False) as index:
            per_fact = []
            for fact, want in zip(sample, expected):
                before = index.stats.round_trips
                assert walk_cold(index, fact) == want, (prefetch, fact)
                per_fact.append(index.stats.round_trips - before)
            trips[prefetch] = per_fact
    # unbounded: the root, then everything below the first external node in one statement
    assert all(t <= 2 for t in trips[10**9])
    assert sum(trips[10**9]) < sum(trips[40]) < sum(trips[0])


def test_a_step_waits_for_its_own_row_only_and_the_rows_below_come_in_the_background(pg_dsn):
    """prefetch_in_background: a step that crosses into a small subtree fetches its own row; the rows
    below come on another connection. No step pays more than one round trip, and once the
    background fetch has arrived the rest of the walk pays none."""
    seqs = random_sequences(seed=11, n=500)
    load_tree(pg_dsn, "kg", seqs, threshold=1)  # deep chains of one-fact rows
    with open_index(pg_dsn, "kg", prefetch_leaves=10**9, prefetch_in_background=True) as index:
        calls = count_fetches(index)
        for fact in sorted(seqs)[::25]:
            build = index.serving_build()
            build.cache.clear()
            build.ahead.clear()
            cur = index.root()
            trips_after_first = None
            for k, tok in enumerate(fact):
                assert as_dict(cur.next_tokens()) == expected_next(seqs, fact[:k])
                before = len(calls)
                cur = index.advance(cur, tok)
                assert len(calls) - before <= 1, (fact, k)  # its own row at most
                if k == 0:
                    assert index.wait_prefetched(30)  # what the background fetched has landed
                    trips_after_first = len(calls)
            assert as_dict(cur.next_tokens()) == expected_next(seqs, fact)
            assert len(calls) == trips_after_first, fact  # the rest of the walk came ahead
        assert index.stats.ahead_round_trips > 0 and index.stats.ahead_rows > 0


def test_cache_bound_holds_and_answers_stay_right(pg_dsn):
    seqs = random_sequences(seed=3, n=400)
    load_tree(pg_dsn, "kg", seqs, threshold=1)
    with open_index(pg_dsn, "kg", cache_bytes=4000) as index:
        for p in all_prefixes(seqs):
            assert as_dict(index.next_tokens(p)) == expected_next(seqs, p)
            assert index.cache.nbytes <= 4000


def test_threads_share_one_index(pg_dsn):
    seqs = random_sequences(seed=11, n=400)
    load_tree(pg_dsn, "kg", seqs, threshold=3)
    prefixes = all_prefixes(seqs)
    errors: list[BaseException] = []
    with open_index(pg_dsn, "kg", pool_size=3, cache_bytes=20_000) as index:

        def worker(offset: int) -> None:
            try:
                for p in prefixes[offset::4]:
                    assert as_dict(index.next_tokens(p)) == expected_next(seqs, p)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_open_index_leaves_the_global_random_alone(pg_dsn):
    """A caller's seeded ``random`` gives the same sequence whether an index opened its
    connections meanwhile or not (the pool draws its expiry jitter from it)."""
    import random

    load_tree(pg_dsn, "kg", {(1, 2), (1, 3)})
    random.seed(7)
    alone = [random.random() for _ in range(3)]
    random.seed(7)
    with open_index(pg_dsn, "kg", pool_size=2) as index:
        assert index.next_tokens((1,)).tokens.tolist() == [2, 3]
        beside = [random.random() for _ in range(3)]
    assert beside == alone


def test_connections_are_read_only_autocommit_and_never_idle_in_transaction(pg_dsn):
    load_tree(pg_dsn, "kg", random_sequences(seed=1), threshold=2)
    with open_index(pg_dsn, "kg", statement_timeout_ms=1234) as index:
        index.next_tokens((1,))
        with index._pool.connection() as conn:
            assert conn.autocommit
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1234ms"
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute("CREATE TABLE refactx.should_fail (x int)")
        with psycopg.connect(pg_dsn) as admin:
            states = admin.execute(
                "SELECT state FROM pg_stat_activity WHERE application_name = 'refactx_index:kg'"
            ).fetchall()
        assert states and all(s == "idle" for (s,) in states)


def test_the_dsn_s_own_options_are_kept_and_the_reader_s_settings_win(pg_dsn):
    """One DSN policy for both wheels (refactx_index.connection, refactx_pipeline.db): the DSN's
    options reach the session, the reader's read-only and statement timeout are added after them
    (and win where the DSN names the same setting), a DSN's application_name is kept."""
    from refactx_pipeline.db import connect as pipeline_connect

    load_tree(pg_dsn, "kg", random_sequences(seed=1), threshold=2)
    dsn = (f"{pg_dsn} application_name=mine "
           "options='-c search_path=refactx,public -c statement_timeout=99 -c default_transaction_read_only=off'")
    with open_index(dsn, "kg", statement_timeout_ms=1234, follow=False) as index:
        assert index.next_tokens(()).leaves.sum() > 0
        with index._pool.connection() as conn:
            assert conn.execute("SHOW search_path").fetchone()[0] == "refactx,public"
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1234ms"
            assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
            assert conn.execute("SHOW application_name").fetchone()[0] == "mine"
    with pipeline_connect(dsn, autocommit=True, statement_timeout_ms=4321) as conn:
        assert conn.execute("SHOW search_path").fetchone()[0] == "refactx,public"
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "4321ms"
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "off"


def test_unknown_name_and_missing_catalog_raise_index_not_found(pg_dsn):
    with pytest.raises(IndexNotFound, match="catalog"):
        open_index(pg_dsn, "kg")
    load_tree(pg_dsn, "kg", random_sequences(seed=1))
    with pytest.raises(IndexNotFound, match="no active build serves index 'nope'"):
        open_index(pg_dsn, "nope")
    load_tree(pg_dsn, "inactive", random_sequences(seed=2), activate=False)
    with pytest.raises(IndexNotFound):
        open_index(pg_dsn, "inactive")


def test_other_vocabulary_raises_vocabulary_mismatch(pg_dsn):
    gpt2, llama = tokenizer_dir("gpt2"), tokenizer_dir("llama3")
    load_tree(pg_dsn, "kg", random_sequences(seed=1), vocabulary="gpt2",
              vocabulary_sha256=tokenizer_sha256(gpt2), vocab_size=50257)
    with open_index(pg_dsn, "kg", vocabulary=gpt2) as index:  # same file: accepted
        assert index.info.vocabulary == "gpt2"
    with open_index(pg_dsn, "kg", vocabulary="gpt2"):
        pass
    with pytest.raises(VocabularyMismatch, match="gpt2"):
        open_index(pg_dsn, "kg", vocabulary=llama)
    with pytest.raises(VocabularyMismatch):
        open_index(pg_dsn, "kg", vocabulary="llama3")
    from tokenizers import Tokenizer

    with pytest.raises(VocabularyMismatch, match="50257"):
        open_index(pg_dsn, "kg", vocabulary=Tokenizer.from_file(str(llama / "tokenizer.json")))


def test_other_format_version_is_refused(pg_dsn):
    load_tree(pg_dsn, "kg", random_sequences(seed=1), format_version=99)
    with pytest.raises(FormatError, match="version 99"):
        open_index(pg_dsn, "kg")


def _backend_pids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as admin:
        return [r[0] for r in admin.execute(
            # this test's database only: another test's index "kg" may still be closing
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'refactx_index:kg' "
            "AND datname = current_database()")]


def test_terminated_backend_is_retried_transparently(pg_dsn, caplog):
    seqs = random_sequences(seed=5)
    load_tree(pg_dsn, "kg", seqs, threshold=1)
    with open_index(pg_dsn, "kg", pool_size=1) as index:
        index.next_tokens(())
        (pid,) = _backend_pids(pg_dsn)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        index.cache.clear()  # force a round trip on the dead connection
        p = next(iter(seqs))[:2]
        assert as_dict(index.next_tokens(p)) == expected_next(seqs, p)
        assert _backend_pids(pg_dsn) and pid not in _backend_pids(pg_dsn)
        assert "connection lost" in caplog.text and "retrying once" in caplog.text


def test_lost_server_after_retry_raises_database_unavailable(pg_dsn, pg_server):
    load_tree(pg_dsn, "kg", random_sequences(seed=5), threshold=1)
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with open_index(pg_dsn, "kg", pool_size=1, connect_timeout_s=1) as index:
        index.next_tokens(())
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            try:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE application_name = 'refactx_index:kg'")
                index.cache.clear()
                with pytest.raises(DatabaseUnavailable):
                    index.next_tokens((1,))
            finally:
                admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')


def test_statement_timeout_raises_query_timeout_then_recovers(pg_dsn):
    seqs = random_sequences(seed=9)
    build_id = load_tree(pg_dsn, "kg", seqs, threshold=1)
    with open_index(pg_dsn, "kg", statement_timeout_ms=200) as index:
        with psycopg.connect(pg_dsn) as locker:  # not autocommit: holds the lock
            locker.execute(f"LOCK TABLE refactx.{pgcatalog.table_name(build_id)} IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(QueryTimeout, match="200 ms"):
                index.next_tokens((1,))
            locker.rollback()
        assert as_dict(index.next_tokens(())) == expected_next(seqs, ())


def test_refresh_serves_the_newly_activated_build(pg_dsn):
    load_tree(pg_dsn, "kg", {(1, 2), (1, 3)})
    with open_index(pg_dsn, "kg", follow=False) as index:
        assert index.next_tokens((1,)).tokens.tolist() == [2, 3]
        assert index.refresh() is False
        load_tree(pg_dsn, "kg", {(1, 4)})
        assert index.refresh() is True
        assert index.next_tokens((1,)).tokens.tolist() == [4]


@pytest.mark.parametrize("wrong,cause", [
    ("dbname", 'database "refactx_absent_[0-9a-f]+" does not exist'),
    ("user", 'role "refactx_absent_[0-9a-f]+" does not exist'),
])
def test_a_wrong_database_or_user_fails_at_once_with_its_cause(pg_server, caplog, wrong, cause):
    """No waiting out connect_timeout_s through the pool's retries for
    what waiting cannot fix, and the server's own words in the error."""
    params = conninfo_to_dict(pg_server)
    params[wrong] = f"refactx_absent_{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match=cause):
        open_index(make_conninfo(**params), "kg", connect_timeout_s=30)
    assert time.monotonic() - started < 10  # the pool alone would have waited 30 s
    assert "error connecting" not in caplog.text  # no pool retries were logged


def test_connection_failures_are_told_apart_by_what_psycopg_and_the_socket_give(pg_server):
    """A failed connection carries no SQLSTATE (psycopg 3.3, libpq 18: the session never
    existed), so connect_failure reads the error class, pgconn, and the address's socket: a
    refused port, a missing socket directory, a host name that does not exist and an invalid
    option are permanent without reading libpq's text; a wrong database or role is the server's
    FATAL (its words are the only source); a server that answers is not refused."""
    from refactx_index.connection import connect_failure

    def failure(**changes) -> psycopg.OperationalError:
        params = {**conninfo_to_dict(pg_server), "connect_timeout": 5, **changes}
        with pytest.raises(psycopg.Error) as caught:
            psycopg.connect(make_conninfo(**params)).close()
        return caught.value

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = failure(host="127.0.0.1", port=port)
    assert refused.sqlstate is None and refused.pgconn is not None  # what psycopg gives
    assert "connection refused" in connect_failure(refused, "")
    assert "no PostgreSQL socket" in connect_failure(failure(host="/nonexistent-refactx-dir"), "")
    dsn = "host=no-such-host.invalid user=postgres"
    unresolved = failure(host="no-such-host.invalid")
    assert unresolved.pgconn is None and "does not resolve" in connect_failure(unresolved, dsn)
    assert "invalid value" in connect_failure(failure(port="abc"), "")
    for wrong in ("dbname", "user"):
        absent = failure(**{wrong: f"refactx_absent_{uuid.uuid4().hex[:8]}"})
        assert absent.sqlstate is None and connect_failure(absent, "") == "the server refused the session"


def test_a_version_1_row_forged_into_a_version_2_build_is_refused(pg_dsn):
    """A row without a checksum must not pass inside a build whose rows all
    carry one (there a flipped bit would be a silent wrong answer)."""
    from refactx_index.tree.format import decode_prefix

    seqs = random_sequences(seed=5)
    build_id = load_tree(pg_dsn, "kg", seqs, threshold=1)
    table = pgcatalog.table_name(build_id)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        key, node = conn.execute(
            f"SELECT prefix, node FROM refactx.{table} WHERE prefix <> ''::bytea "
            "ORDER BY prefix LIMIT 1").fetchone()
        v1 = bytes([1]) + bytes(node[1:10]) + bytes(node[14:])  # the same row in version 1
        conn.execute(f"UPDATE refactx.{table} SET node = %s WHERE prefix = %s", (v1, key))
    with open_index(pg_dsn, "kg", follow=False) as index:
        with pytest.raises(FormatError, match=f"version 1 row inside a format version {FORMAT_VERSION} build"):
            index.next_tokens(decode_prefix(bytes(key)).tolist())


def test_a_version_2_build_and_a_version_3_build_are_both_served(pg_dsn):
    """Builds loaded before format version 3 serve on beside dictionary builds, each decoded
    with its own dictionary (and its own cache), with the same answers."""
    seqs = random_sequences(seed=7)
    load_tree(pg_dsn, "old", seqs, format_version=2)
    load_tree(pg_dsn, "new", seqs)
    with open_index(pg_dsn, "old", follow=False) as old, open_index(pg_dsn, "new", follow=False) as new:
        assert old.info.format_version == 2 and old.info.dictionary is None
        assert new.info.format_version == FORMAT_VERSION and new.info.dictionary is not None
        for seq in sorted(seqs)[::7]:
            for k in range(len(seq) + 1):
                a, b = old.next_tokens(seq[:k]), new.next_tokens(seq[:k])
                assert a.tokens.tolist() == b.tokens.tolist()
                assert a.leaves.tolist() == b.leaves.tolist() and a.ends == b.ends


def test_a_version_4_build_serves_beside_a_version_5_build_with_the_same_answers(pg_dsn):
    """A build loaded as format version 4 wrote it (token ids 4 bytes wide) serves on beside
    a version 5 build of the same facts (ids below 2**24 in 3 bytes): every prefix of every
    fact gives the same children, leaf counts and ends."""
    seqs = {tuple(70_000 + 997 * t for t in seq) for seq in random_sequences(seed=11)}
    old_id = load_tree(pg_dsn, "old", seqs, format_version=4)
    load_tree(pg_dsn, "new", seqs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        widths = {bytes(node)[:3] for (node,) in conn.execute(
            f"SELECT node FROM refactx.{pgcatalog.table_name(old_id)}").fetchall()}
    assert {w[0] for w in widths} == {4} and 4 in {w[2] for w in widths}
    with open_index(pg_dsn, "old", follow=False) as old, open_index(pg_dsn, "new", follow=False) as new:
        assert old.info.format_version == 4 and new.info.format_version == FORMAT_VERSION == 5
        for seq in sorted(seqs):
            for k in range(len(seq) + 1):
                a, b = old.next_tokens(list(seq[:k])), new.next_tokens(list(seq[:k]))
                assert a.tokens.tolist() == b.tokens.tolist()
                assert a.leaves.tolist() == b.leaves.tolist() and a.ends == b.ends


def test_a_dictionary_row_without_its_dictionary_or_with_another_is_a_format_error(pg_dsn):
    seqs = random_sequences(seed=7)
    build_id = load_tree(pg_dsn, "kg", seqs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        (stored,) = conn.execute("SELECT dictionary FROM refactx.build_dictionaries WHERE build_id = %s",
                                 (build_id,)).fetchone()
        stored = bytes(stored)
        conn.execute("UPDATE refactx.build_dictionaries SET dictionary = %s WHERE build_id = %s",
                     (stored[:-1] + bytes([stored[-1] ^ 1]), build_id))
    with open_index(pg_dsn, "kg", follow=False) as index:
        with pytest.raises(FormatError, match="checksum mismatch.*preset dictionary"):
            walk_all(index, seqs)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM refactx.build_dictionaries WHERE build_id = %s", (build_id,))
    with open_index(pg_dsn, "kg", follow=False) as index:
        with pytest.raises(FormatError, match="read without one"):
            walk_all(index, seqs)


def walk_all(index, seqs) -> None:
    """Every prefix of every fact (some row on the way is compressed with the dictionary)."""
    for seq in sorted(seqs):
        for k in range(len(seq) + 1):
            index.next_tokens(seq[:k])


@pytest.fixture()
def password_server(tmp_path):
    """A private PostgreSQL (pgserver, the embedded one) whose role ``refactx_owner`` logs in
    with a password (scram-sha-256): the shared test server trusts every local connection, so
    a wrong password could not fail there."""
    pgserver = pytest.importorskip("pgserver")
    server = pgserver.get_server(tmp_path / "pgdata", cleanup_mode="stop")
    try:
        uri = server.get_uri()
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute("CREATE ROLE refactx_owner LOGIN PASSWORD 'right-password'")
            hba = conn.execute("SHOW hba_file").fetchone()[0]
            with open(hba, encoding="utf-8") as fh:
                rules = fh.read()
            with open(hba, "w", encoding="utf-8") as fh:  # first match wins
                fh.write("local all refactx_owner scram-sha-256\n" + rules)
            conn.execute("SELECT pg_reload_conf()")
        yield uri
    finally:
        server.cleanup()


def test_a_wrong_password_fails_at_once_with_its_cause(password_server, caplog):
    params = conninfo_to_dict(password_server)
    params.update(user="refactx_owner", password="right-password", dbname="postgres")
    with psycopg.connect(make_conninfo(**params)):  # the right one logs in
        pass
    params["password"] = "wrong-password"
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="password authentication failed"):
        open_index(make_conninfo(**params), "kg", connect_timeout_s=30)
    assert time.monotonic() - started < 10
    assert "error connecting" not in caplog.text


def test_a_refused_port_fails_at_once_and_a_silent_server_is_waited_for(caplog):
    """Nothing listening on the port cannot be cured by waiting: one error at once, naming the
    cause. A server that accepts but does not answer (starting, overloaded) may be: the pool
    waits connect_timeout_s, without a warning per attempt, and the error quotes the first
    attempt's cause."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DatabaseUnavailable, match=r"refused.*not retried"):
        open_index(f"postgresql://postgres@127.0.0.1:{port}/postgres", "kg", connect_timeout_s=30)
    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(DatabaseUnavailable, match=r"within 1 s: .*first attempt: .*timeout"):
            open_index(f"postgresql://postgres@127.0.0.1:{port}/postgres", "kg", connect_timeout_s=1)
    assert "error connecting" not in caplog.text