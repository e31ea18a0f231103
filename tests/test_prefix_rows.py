"""Prefix rows job (Spark, local mode) against a plain in-memory trie built here."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Mapping, Sequence

import pytest

from refactx_index import format as fmt

pytestmark = pytest.mark.spark


class ReferenceTrie:
    """The tree of DESIGN.md computed the obvious way: every prefix of every distinct fact."""

    def __init__(self, facts: Iterable[Sequence[int]]):
        self.facts = {tuple(f) for f in facts}
        self.leaves: Counter[tuple[int, ...]] = Counter()
        self.children: dict[tuple[int, ...], set[int]] = defaultdict(set)
        for f in self.facts:
            for k in range(len(f) + 1):
                self.leaves[f[:k]] += 1
                if k < len(f):
                    self.children[f[:k]].add(f[k])

    def ends(self, prefix: tuple[int, ...]) -> bool:
        return prefix in self.facts

    def child_leaves(self, prefix: tuple[int, ...]) -> list[tuple[int, int]]:
        return sorted((t, self.leaves[prefix + (t,)]) for t in self.children.get(prefix, ()))


def check_rows_against_trie(
    rows: Mapping[bytes, bytes], facts: Iterable[Sequence[int]], depth: int, threshold: int
) -> int:
    """Walk the stored rows from the root, following external nodes into their rows,
    and compare every node with the reference trie. Returns the number of nodes checked.

    Also checks: every stored row is reached exactly once, and the cut rule holds.
    """
    ref = ReferenceTrie(facts)
    reached: set[bytes] = set()
    checked = 0
    stack = [()]
    while stack:
        row_prefix = stack.pop()
        key = fmt.encode_prefix(row_prefix)
        assert key in rows, f"no row for prefix {row_prefix}"
        assert key not in reached, f"row {row_prefix} reached twice"
        reached.add(key)
        frag = fmt.decode_fragment(rows[key])
        expanded = ref.leaves[row_prefix] > threshold and len(row_prefix) < depth
        assert bool(frag.external[1:].all()) == expanded or frag.n_nodes == 1
        node_stack = [(0, row_prefix)]
        while node_stack:
            i, full = node_stack.pop()
            assert int(frag.leaves[i]) == ref.leaves[full], f"leaves of {full}"
            if frag.external[i]:
                stack.append(full)
                continue
            checked += 1
            assert bool(frag.ends[i]) == ref.ends(full), f"ends of {full}"
            toks, leaves = frag.children(i)
            assert list(zip(toks.tolist(), leaves.tolist())) == ref.child_leaves(full), (
                f"children of {full}"
            )
            s = int(frag.child_start[i])
            for j in range(s, s + int(frag.child_count[i])):
                node_stack.append((j, full + (int(frag.tokens[j]),)))
    assert reached == set(rows), "rows not reachable from the root"
    return checked


def build_rows(spark, facts: list[list[int]], depth: int, threshold: int) -> dict[bytes, bytes]:
    from refactx_pipeline.prefix_rows import prefix_rows
    from refactx_pipeline.schemas import TOKENS

    tokens = spark.createDataFrame([(i, f) for i, f in enumerate(facts)], TOKENS)
    out = prefix_rows(tokens, depth, threshold).collect()
    keys = [bytes(r["prefix"]) for r in out]
    assert len(keys) == len(set(keys)), "duplicate prefix rows"
    for r in out:
        assert r["depth"] * 4 == len(r["prefix"])
        assert fmt.decode_fragment(r["node"]).leaves[0] == r["leaves"]
    return {bytes(r["prefix"]): bytes(r["node"]) for r in out}


FACTS = [
    [1, 2, 3],
    [1, 2, 3],  # duplicate
    [1, 2],  # strict prefix of another fact
    [1, 2, 4, 5, 6, 7, 8, 9, 10, 11],
    [1, 7],
    [70000, 1, 2],  # id above 65,535
    [70000, 1, 3],
    [5],
    [5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
]


@pytest.mark.parametrize("depth,threshold", [(2, 1), (3, 2), (8, 64), (1, 1), (4, 1)])
def test_rows_match_reference_trie(spark, depth, threshold):
    rows = build_rows(spark, FACTS, depth, threshold)
    assert check_rows_against_trie(rows, FACTS, depth, threshold) > 0
    root = fmt.decode_fragment(rows[b""])
    assert root.leaves[0] == len({tuple(f) for f in FACTS})


def test_bad_rows_are_counted_not_lost(spark):
    from refactx_pipeline.prefix_rows import input_counts, prefix_rows
    from pyspark.sql.types import ArrayType, IntegerType, LongType, StructField, StructType

    loose = StructType([StructField("fact_id", LongType()), StructField("token_ids", ArrayType(IntegerType()))])
    df = spark.createDataFrame([(1, [1, 2]), (2, []), (3, None), (4, [3, -1]), (5, [1, 2])], loose)
    counts = input_counts(df)
    assert counts["facts"] == 5
    assert counts["rejected_by_reason"] == {
        "empty token sequence": 1,
        "null token_ids": 1,
        "negative or null token id": 1,
    }
    rows = prefix_rows(df, 4, 1).collect()
    assert sorted(bytes(r["prefix"]) for r in rows) == [b""]
    assert fmt.decode_fragment(rows[0]["node"]).leaves[0] == 1


def test_run_writes_rows_and_counts(spark, cfg):
    from refactx_pipeline import prefix_rows as job
    from refactx_pipeline.schemas import TOKENS
    from refactx_pipeline.config import VocabularyConfig

    cfg = cfg.updated({
        "tokenize.vocabularies": [VocabularyConfig(name="toy", path="")],
        "tree.depth": 3,
        "tree.subtree_threshold": 1,
    })
    src = cfg.stage_dir("tokenize") / "toy" / "tokens"
    spark.createDataFrame([(i, f) for i, f in enumerate(FACTS)], TOKENS).write.parquet(str(src))
    counts = job.run(spark, cfg)["vocabularies"]["toy"]
    assert counts["facts"] == len(FACTS)
    assert counts["distinct_facts"] == len({tuple(f) for f in FACTS})
    assert counts["duplicate_facts"] == 1
    written = spark.read.parquet(str(cfg.stage_dir("prefix_rows") / "toy" / "rows")).collect()
    assert counts["rows"] == len(written)
    assert counts["rows_by_kind"]["expanded"] + counts["rows_by_kind"]["subtree"] == len(written)
    rows = {bytes(r["prefix"]): bytes(r["node"]) for r in written}
    check_rows_against_trie(rows, FACTS, 3, 1)
    assert (cfg.stage_dir("prefix_rows") / "toy" / "counts.json").exists()


def test_arrow_encoders_read_sliced_batches_by_absolute_offsets():
    """A batch sliced out of a larger Arrow array keeps absolute list offsets; the
    encoders must give each row its own children/suffixes, not the previous row's."""
    import pyarrow as pa

    from refactx_pipeline.prefix_rows import _encode_expanded_batches, _encode_subtree_batches
    from refactx_index.format import decode_fragment, iter_suffixes

    child = pa.struct([("token", pa.int32()), ("leaves", pa.int64())])
    common = {"prefix": pa.array([b"a", b"b"]), "depth": pa.array([1, 1], pa.int32()),
              "leaves": pa.array([3, 5], pa.int64())}
    expanded = pa.RecordBatch.from_pydict({
        **common,
        "children": pa.array([[{"token": 1, "leaves": 1}, {"token": 2, "leaves": 2}],
                              [{"token": 10, "leaves": 2}, {"token": 11, "leaves": 3}]], pa.list_(child)),
        "ends": pa.array([False, False]),
    })
    (out,) = _encode_expanded_batches(iter([expanded.slice(1)]))
    frag = decode_fragment(out.column("node")[0].as_py())
    assert frag.children(0)[0].tolist() == [10, 11]
    assert frag.children(0)[1].tolist() == [2, 3]

    subtree = pa.RecordBatch.from_pydict({
        **common,
        "suffixes": pa.array([[[1, 2], [3]], [[7, 8, 9], [7]]], pa.list_(pa.list_(pa.int32()))),
    })
    (out,) = _encode_subtree_batches(iter([subtree.slice(1)]))
    frag = decode_fragment(out.column("node")[0].as_py())
    assert {p for p, _ in iter_suffixes(frag)} == {(7, 8, 9), (7,)}
