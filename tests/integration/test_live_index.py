"""A served index while builds come and go: switches never mix builds, activation is
followed by itself, retention never leaves a raw error, a reader role needs nothing more than
the loader grants, old builds are dropped without blocking, shrunken builds are refused."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from refactx_index import open_index
from refactx_index.errors import BuildRetired, ConfigError, PermissionDenied, RefactxError
from refactx_pipeline.catalog import pgcatalog
from refactx_pipeline.errors import ActivationRefused, LoadError
from refactx_pipeline.stages.activate import activate_build, apply_retention

from ..pgtree import load_tree
from ..treedata import expected_next, random_sequences

pytestmark = pytest.mark.pg


def as_dict(step) -> tuple[dict[int, int], bool]:
    return dict(zip(step.tokens.tolist(), step.leaves.tolist())), bool(step.ends)


def all_prefixes(seqs) -> list[tuple[int, ...]]:
    return sorted({s[:i] for s in seqs for i in range(len(s) + 1)})


def test_switches_under_concurrent_lookups_never_mix_builds(pg_dsn):
    """Readers in threads hammer the index while it switches 24 times between two trees.
    Every answer is one build's answer, and right after each switch every answer is the new
    build's: no row of the old build answers for the new one (each build has its own cache)."""
    trees = [random_sequences(seed=21, n=200), random_sequences(seed=22, n=200)]
    prefixes = sorted(set(all_prefixes(trees[0])) | set(all_prefixes(trees[1])))
    answers = [{p: expected_next(t, p) for p in prefixes} for t in trees]
    load_tree(pg_dsn, "kg", trees[0], threshold=2)
    stop = threading.Event()
    problems: list[str] = []
    lookups = [0]

    with open_index(pg_dsn, "kg", follow=False, cache_bytes=1 << 20) as index:
        def reader(offset: int) -> None:
            i = offset
            while not stop.is_set():
                batch = [prefixes[(i + k * 7) % len(prefixes)] for k in range(8)]
                i += 13
                try:
                    got = index.next_tokens_batch(batch)
                except RefactxError as exc:  # never raw; a retired build is switched away from
                    problems.append(f"error: {exc!r}")
                    continue
                for p, step in zip(batch, got):
                    if as_dict(step) not in (answers[0][p], answers[1][p]):
                        problems.append(f"mixed answer for {p}")
                lookups[0] += len(batch)

        threads = [threading.Thread(target=reader, args=(n * 31,)) for n in range(4)]
        for t in threads:
            t.start()
        try:
            for switch in range(1, 25):
                tree = trees[switch % 2]
                load_tree(pg_dsn, "kg", tree, threshold=2)
                assert index.refresh() is True
                wrong = [p for p, step in zip(prefixes, index.next_tokens_batch(prefixes))
                         if as_dict(step) != answers[switch % 2][p]]
                assert wrong == [], f"switch {switch}: {len(wrong)} answers from the old build"
        finally:
            stop.set()
            for t in threads:
                t.join()
    assert problems == []
    assert lookups[0] > 0


def test_a_served_index_follows_activation_by_itself(pg_dsn):
    load_tree(pg_dsn, "kg", {(1, 2)})
    # a check interval far longer than the test: only the NOTIFY can make it switch in time
    with open_index(pg_dsn, "kg", check_interval_s=3600) as index:
        assert index.next_tokens((1,)).tokens.tolist() == [2]
        new = load_tree(pg_dsn, "kg", {(1, 3)})
        assert index.wait_for_build(new, timeout_s=20)
        assert index.next_tokens((1,)).tokens.tolist() == [3]


def test_the_periodic_catalog_check_catches_a_switch_without_notify(pg_dsn):
    first = load_tree(pg_dsn, "kg", {(1, 2)})
    second = load_tree(pg_dsn, "kg", {(1, 3)}, activate=False)
    with open_index(pg_dsn, "kg", check_interval_s=0.2) as index:
        assert index.info.build_id == first
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a switch nobody announces
            conn.execute("UPDATE refactx.active SET build_id = %s WHERE name = 'kg'", (second,))
        assert index.wait_for_build(second, timeout_s=20)
        assert index.next_tokens((1,)).tokens.tolist() == [3]


def test_a_reader_across_retention_switches_or_gets_a_clear_error(pg_dsn):
    old_tree, new_tree = random_sequences(seed=5), random_sequences(seed=6)
    first = load_tree(pg_dsn, "kg", old_tree, threshold=1)
    with open_index(pg_dsn, "kg", follow=False) as index:
        cursor = index.root()  # a generation in progress, on the first build (root row cached)
        load_tree(pg_dsn, "kg", random_sequences(seed=7), threshold=1)
        newest = load_tree(pg_dsn, "kg", new_tree, threshold=1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert first in apply_retention(conn, "refactx", "kg", keep=1)
        # a lookup that needs a row of the dropped build: switches to the active one, answers
        token = min(t for (t, *_rest) in new_tree if (t,) in all_prefixes(old_tree))
        assert as_dict(index.next_tokens((token,))) == expected_next(new_tree, (token,))
        assert index.info.build_id == newest
        for p in all_prefixes(new_tree):
            assert as_dict(index.next_tokens(p)) == expected_next(new_tree, p)
        # the generation stays on its build, which is gone: a clear error, not UndefinedTable
        with pytest.raises(BuildRetired, match="dropped while being read"):
            index.advance(cursor, token)


def hold_next_fetch(index, build_id: int):
    """Hold the next row fetch of build ``build_id`` just before its statement runs, until
    released: a lookup deterministically in flight while the test activates and drops builds.
    The statement itself then runs on the real server."""
    reached, release = threading.Event(), threading.Event()
    real = index._fetch

    def held(build, keys):
        if build.info.build_id == build_id and not reached.is_set():
            reached.set()
            if not release.wait(60):
                raise RuntimeError("the test never released the held fetch")
        return real(build, keys)

    index._fetch = held
    return reached, release


@pytest.mark.parametrize("switcher", ["another thread", "the follower"])
def test_a_lookup_in_flight_across_an_activation_and_a_drop_answers_from_the_new_build(pg_dsn, switcher):
    """The lookup's build is dropped while it is in flight, and the index was
    already switched by someone else (another thread's refresh, or the follower): its own
    refresh finds nothing new, yet the served build differs from the one that failed, so it
    retries there and answers."""
    old_tree, new_tree = random_sequences(seed=5), random_sequences(seed=6)
    first = load_tree(pg_dsn, "kg", old_tree, threshold=1)
    follow = switcher == "the follower"
    prefix = sorted(new_tree)[0][:2]
    outcome: dict[str, object] = {}
    with open_index(pg_dsn, "kg", follow=follow, check_interval_s=3600) as index:
        reached, release = hold_next_fetch(index, first)

        def lookup() -> None:
            try:
                outcome["answer"] = index.next_tokens(prefix)
            except BaseException as exc:  # surfaced below
                outcome["error"] = exc

        reader = threading.Thread(target=lookup)
        reader.start()
        try:
            assert reached.wait(60)  # the lookup took build `first` and is about to read it
            newest = load_tree(pg_dsn, "kg", new_tree, threshold=1)
            if follow:
                assert index.wait_for_build(newest, timeout_s=20)
            else:
                assert index.refresh() is True
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                assert first in apply_retention(conn, "refactx", "kg", keep=1, grace_s=0)
        finally:
            release.set()
            reader.join(60)
        assert not reader.is_alive()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert as_dict(outcome["answer"]) == expected_next(new_tree, prefix)


def test_lookups_of_many_threads_failing_on_one_dropped_build_all_answer(pg_dsn):
    """Two lookups fail on the same dropped build: the first to refresh switches, the other's
    refresh finds the switch done; both retry on the active build (follow off)."""
    old_tree, new_tree = random_sequences(seed=5), random_sequences(seed=6)
    first = load_tree(pg_dsn, "kg", old_tree, threshold=1)
    prefixes = [p[:2] for p in sorted(new_tree)[:2]]
    with open_index(pg_dsn, "kg", follow=False, pool_size=2) as index:
        arrived = threading.Barrier(3)  # both lookups hold a fetch of `first`, and the test
        release = threading.Event()
        real = index._fetch

        def held(build, keys):
            if build.info.build_id == first:
                arrived.wait(60)
                if not release.wait(60):
                    raise RuntimeError("never released")
            return real(build, keys)

        index._fetch = held
        outcome: dict[int, object] = {}

        def lookup(i: int) -> None:
            try:
                outcome[i] = index.next_tokens(prefixes[i])
            except BaseException as exc:
                outcome[i] = exc

        readers = [threading.Thread(target=lookup, args=(i,)) for i in range(2)]
        for t in readers:
            t.start()
        try:
            arrived.wait(60)
            load_tree(pg_dsn, "kg", new_tree, threshold=1)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                assert first in apply_retention(conn, "refactx", "kg", keep=1, grace_s=0)
        finally:
            release.set()
            for t in readers:
                t.join(60)
    for i, p in enumerate(prefixes):
        assert not isinstance(outcome[i], BaseException), repr(outcome[i])
        assert as_dict(outcome[i]) == expected_next(new_tree, p)


def walk(index, fact):
    """A generation's walk of ``fact`` with cursors: the answers met on the way."""
    cur, answers = index.root(), []
    for tok in fact:
        answers.append(as_dict(cur.next_tokens()))
        cur = index.advance(cur, tok)
    answers.append(as_dict(cur.next_tokens()))
    return answers


def test_with_follow_off_a_generation_retried_after_build_retired_reads_the_active_build(pg_dsn):
    """With follow off, the retry the BuildRetired message asks for (a new
    generation from ``root()``) meets the active build, not the dropped one again."""
    old_tree, new_tree = random_sequences(seed=5), random_sequences(seed=6)
    first = load_tree(pg_dsn, "kg", old_tree, threshold=1)
    with open_index(pg_dsn, "kg", follow=False) as index:
        cursor = index.root()  # a generation on `first`; its root row is cached
        newest = load_tree(pg_dsn, "kg", new_tree, threshold=1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert first in apply_retention(conn, "refactx", "kg", keep=1, grace_s=0)
        token = int(cursor.next_tokens().tokens[0])
        with pytest.raises(BuildRetired, match="dropped while being read"):
            index.advance(cursor, token)
        for fact in sorted(new_tree)[:20]:  # the retried generation
            assert walk(index, fact) == [expected_next(new_tree, fact[:k]) for k in range(len(fact) + 1)]
        assert index.info.build_id == newest


def test_with_follow_off_a_generation_started_after_a_drop_reads_the_active_build(pg_dsn):
    """A generation that starts after its index's build was dropped: ``root()`` switches to the
    active build by itself (nothing of the dropped build is in use yet)."""
    first = load_tree(pg_dsn, "kg", random_sequences(seed=5), threshold=1)
    new_tree = random_sequences(seed=6)
    with open_index(pg_dsn, "kg", follow=False) as index:
        newest = load_tree(pg_dsn, "kg", new_tree, threshold=1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert first in apply_retention(conn, "refactx", "kg", keep=1, grace_s=0)
        fact = sorted(new_tree)[0]
        assert walk(index, fact) == [expected_next(new_tree, fact[:k]) for k in range(len(fact) + 1)]
        assert index.info.build_id == newest


@pytest.fixture()
def reader_role(pg_dsn):
    role = f"refactx_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    params = conninfo_to_dict(pg_dsn)
    params["user"] = role
    yield role, make_conninfo(**params)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_reader_role_serves_across_builds_with_the_loader_grants_only(pg_dsn, reader_role):
    role, role_dsn = reader_role
    load_tree(pg_dsn, "kg", {(1, 2)}, reader_role=role)
    with open_index(role_dsn, "kg", check_interval_s=3600) as index:
        assert index.next_tokens((1,)).tokens.tolist() == [2]
        for token in (3, 4, 5):
            build = load_tree(pg_dsn, "kg", {(1, token)}, reader_role=role)
            assert index.wait_for_build(build, timeout_s=20)
            assert index.next_tokens((1,)).tokens.tolist() == [token]
    with psycopg.connect(role_dsn, autocommit=True) as conn:  # nothing more than reading
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM refactx.active")
    # a table the role may not read (a grant revoked): a mapped error that says what is missing
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("REVOKE SELECT ON {} FROM {}").format(
            sql.Identifier("refactx", pgcatalog.table_name(build)), sql.Identifier(role)))
    with pytest.raises(PermissionDenied, match="reader_role"):
        with open_index(role_dsn, "kg") as index:
            index.next_tokens((1,))


def test_activation_refuses_a_build_its_readers_cannot_read(pg_dsn, reader_role):
    """A build loaded without the reader's grant (``pg.reader_role`` empty)
    is refused at activation, in one line saying what the role lacks; the served build serves
    on, its readers never see PermissionDenied, and the name is free for the next build."""
    role, role_dsn = reader_role
    served = load_tree(pg_dsn, "kg", {(1, 2)}, reader_role=role)
    with open_index(role_dsn, "kg", check_interval_s=3600) as index:
        with pytest.raises(ActivationRefused) as refused:
            load_tree(pg_dsn, "kg", {(1, 9)})  # loaded and activated without pg.reader_role
        message = str(refused.value)
        assert "\n" not in message
        assert f"role '{role}' (which reads the served build {served})" in message
        assert f"--set pg.reader_role={role}" in message and f"build {served} still serves" in message
        assert index.refresh() is False  # nothing switched
        assert index.info.build_id == served and index.next_tokens((1,)).tokens.tolist() == [2]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert pgcatalog.active_build(conn, "refactx", "kg") == served
            assert pgcatalog.name_holder(conn, "refactx", "kg") is None  # the name is free
            blocked = conn.execute("SELECT max(build_id) FROM refactx.builds").fetchone()[0]
            # the first build of a name is checked against pg.reader_role alone
            first = load_tree(pg_dsn, "other", {(3, 4)}, activate=False)
            pgcatalog.set_status(conn, "refactx", first, "validated")
            with pytest.raises(ActivationRefused, match=f"role '{role}' \\(pg.reader_role\\) cannot "
                               f"read build {first}: it lacks SELECT on refactx.tree_b{first}"):
                activate_build(conn, "refactx", first, reader_role=role)
            # once granted, the refused build activates, and the readers follow it
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier("refactx", pgcatalog.table_name(blocked)), sql.Identifier(role)))
            activate_build(conn, "refactx", blocked, reader_role=role)
        assert index.wait_for_build(blocked, timeout_s=20)
        assert index.next_tokens((1,)).tokens.tolist() == [9]
    load_tree(pg_dsn, "kg", {(1, 10)}, reader_role=role)  # the next build of the name goes ahead


def test_a_reader_role_that_does_not_exist_is_one_line(pg_dsn):
    """``pg.reader_role=nosuchrole``: a ConfigError naming the setting, before anything is
    granted or loaded (it was a 41-line driver traceback)."""
    from refactx_pipeline.cli.failures import describe_failure

    role = f"nosuchrole_{uuid.uuid4().hex[:8]}"
    with pytest.raises(ConfigError) as missing:
        load_tree(pg_dsn, "kg", {(1, 2)}, reader_role=role)
    line = describe_failure(missing.value)
    assert line == (f"pg.reader_role: role '{role}' does not exist on this server; create it "
                    f"(CREATE ROLE {role} LOGIN) or set pg.reader_role to the role that serves")
    load_tree(pg_dsn, "kg", {(1, 2)})
    build = load_tree(pg_dsn, "kg", {(1, 3)}, activate=False)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pgcatalog.set_status(conn, "refactx", build, "validated")
        with pytest.raises(ConfigError, match=f"role '{role}' does not exist"):
            activate_build(conn, "refactx", build, reader_role=role)
        assert pgcatalog.name_holder(conn, "refactx", "kg") is None


def test_retention_keeps_builds_that_served_and_drops_the_others(pg_dsn):
    served = [load_tree(pg_dsn, "kg", {(1, t)}) for t in (1, 2, 3)]
    never = load_tree(pg_dsn, "kg", {(1, 7)}, activate=False)  # loaded, superseded, never served
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pgcatalog.set_status(conn, "refactx", never, "failed")
        active = load_tree(pg_dsn, "kg", {(1, 4)})
        # within the grace period every build that served stays, whatever the count says;
        # a build that never served goes at once
        assert apply_retention(conn, "refactx", "kg", keep=1, grace_s=3600) == [never]
        # keep 2: the active build and the one that served last
        assert sorted(apply_retention(conn, "refactx", "kg", keep=2, grace_s=0)) == served[:2]
        assert apply_retention(conn, "refactx", "kg", keep=1, grace_s=0) == [served[2]]
        left = conn.execute("SELECT build_id FROM refactx.builds WHERE dropped_at IS NULL").fetchall()
    assert [b for (b,) in left] == [active]


def test_a_drop_behind_a_readers_lock_is_skipped_not_waited_for(pg_dsn):
    first = load_tree(pg_dsn, "kg", {(1, 2)})
    load_tree(pg_dsn, "kg", {(1, 3)})
    with psycopg.connect(pg_dsn) as reader:  # an open transaction reading the old build
        reader.execute(f"SELECT count(*) FROM refactx.{pgcatalog.table_name(first)}").fetchone()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert apply_retention(conn, "refactx", "kg", keep=1, lock_timeout_ms=200) == []
            newest = load_tree(pg_dsn, "kg", {(1, 4)})  # activation is not blocked meanwhile
        reader.rollback()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT build_id FROM refactx.active").fetchone()[0] == newest
        assert first in apply_retention(conn, "refactx", "kg", keep=1, lock_timeout_ms=200)


def test_the_shrink_guard_refuses_a_much_smaller_build(pg_dsn):
    big = random_sequences(seed=3, n=300)
    load_tree(pg_dsn, "kg", big)
    small = set(list(sorted(big))[:100])
    with pytest.raises(ActivationRefused, match="fewer than the served build") as refusal:
        load_tree(pg_dsn, "kg", small, max_shrink=0.2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        refused = conn.execute("SELECT max(build_id) FROM refactx.builds").fetchone()[0]
        assert conn.execute("SELECT build_id FROM refactx.active").fetchone()[0] != refused
        # the refusal says what to do, and releases the name
        assert str(refusal.value).endswith(
            "the name is free for the next build. To activate build "
            f"{refused} later: refactx-pipeline build --stages activate --build-id {refused} --set pg.max_shrink=1")
        assert pgcatalog.name_holder(conn, "refactx", "kg") is None
        # forced: the same build activates
        activate_build(conn, "refactx", refused, max_shrink=1.0)
        assert conn.execute("SELECT build_id FROM refactx.active").fetchone()[0] == refused


def test_one_build_of_an_index_name_at_a_time(pg_dsn):
    first = load_tree(pg_dsn, "kg", {(1, 2)}, activate=False)  # loaded, not yet activated
    with pytest.raises(LoadError, match=f"build {first} .* is being built; one build per index name"):
        load_tree(pg_dsn, "kg", {(1, 3)})
    load_tree(pg_dsn, "other", {(1, 4)})  # another name is not held up
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        pgcatalog.set_status(conn, "refactx", first, "validated")
        activate_build(conn, "refactx", first)  # activation frees the name
    second = load_tree(pg_dsn, "kg", {(1, 5)}, activate=False)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # its run died: an operator frees it
        assert pgcatalog.release_claim(conn, "refactx", "kg") == second
        assert pgcatalog.get_build(conn, "refactx", second)["status"] == "failed"
    load_tree(pg_dsn, "kg", {(1, 6)})
