"""Old builds stay served: every format version a PostgreSQL build may hold (2, and the current
4 with its dictionary) in both shapes of the catalog -- the shape of catalogs created before
0.2.0 (the vocabulary in columns ``tokenizer`` and ``tokenizer_hash``), read as it is by the
read-only runtime, and the same catalog after the loader's upgrade renamed its columns (which
a second upgrade leaves alone). Index files of every layout are tests/runtime/test_memory_index.py's;
format versions 1 and 3 rows are tests/runtime/test_format.py's."""

from __future__ import annotations

import json

import psycopg

from ..pgtree import as_old_catalog, load_tree
from ..treedata import expected_next, random_sequences
from refactx_index.tree.format import FORMAT_VERSION
from refactx_index.tree.pg import open_index
from refactx_pipeline.catalog import pgcatalog

SHA = "ab" * 32


def build_columns(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'refactx' "
            "AND table_name = 'builds'")}


def answers_like_brute_force(dsn: str, name: str, seqs: set[tuple[int, ...]], version: int) -> None:
    with open_index(dsn, name, follow=False, vocabulary=SHA) as index:
        assert (index.info.vocabulary, index.info.vocabulary_sha256) == ("old-vocab", SHA)
        assert index.info.format_version == version
        for seq in sorted(seqs):
            for k in range(len(seq) + 1):
                got = index.next_tokens(seq[:k])
                children, ends = expected_next(seqs, seq[:k])
                assert dict(zip(got.tokens.tolist(), got.leaves.tolist())) == children and got.ends == ends


def test_builds_of_every_format_version_in_an_old_catalog_serve_before_and_after_its_upgrade(pg_dsn, capsys):
    as_old_catalog(pg_dsn)
    assert {"tokenizer", "tokenizer_hash"} <= build_columns(pg_dsn)
    assert not {"vocabulary", "vocabulary_sha256"} & build_columns(pg_dsn)
    builds = {}
    for version, seed in ((2, 3), (FORMAT_VERSION, 4)):
        seqs = random_sequences(seed=seed)
        load_tree(pg_dsn, f"v{version}", seqs, vocabulary="old-vocab", vocabulary_sha256=SHA,
                  format_version=version, old_columns=True, threshold=2)
        builds[version] = seqs
    for version, seqs in builds.items():  # the runtime reads the old shape as it is
        answers_like_brute_force(pg_dsn, f"v{version}", seqs, version)

    from refactx_pipeline.cli.commands import main

    assert main(["builds", "--dsn", pg_dsn, "--json"]) == 0  # the pipeline lists them too
    listed = json.loads(capsys.readouterr().out)["builds"]
    assert sorted(b["vocabulary"] for b in listed) == ["old-vocab", "old-vocab"]

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what every load does first
        assert pgcatalog.rename_build_columns(conn, "refactx") == [
            "tokenizer -> vocabulary", "tokenizer_hash -> vocabulary_sha256"]
        pgcatalog.apply_schema(conn, "refactx")
        assert pgcatalog.rename_build_columns(conn, "refactx") == []
    assert {"vocabulary", "vocabulary_sha256"} <= build_columns(pg_dsn)
    assert not {"tokenizer", "tokenizer_hash"} & build_columns(pg_dsn)
    for version, seqs in builds.items():
        answers_like_brute_force(pg_dsn, f"v{version}", seqs, version)
    # a build loaded after the upgrade, by the new names, beside them
    seqs = random_sequences(seed=5)
    load_tree(pg_dsn, "new", seqs, vocabulary="old-vocab", vocabulary_sha256=SHA, threshold=2)
    answers_like_brute_force(pg_dsn, "new", seqs, FORMAT_VERSION)
    assert main(["builds", "--dsn", pg_dsn]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[:4] == ["id", "name", "vocabulary", "status"]
