"""Prefix rows job (Spark, local mode) against a plain in-memory trie built here."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Mapping, Sequence

import pytest

from refactx_index.tree import format as fmt
pytestmark = pytest.mark.spark


class ReferenceTrie:
    """The tree of docs/tree.md computed the obvious way: every prefix of every distinct fact."""

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
    rows: Mapping[bytes, bytes], facts: Iterable[Sequence[int]], threshold: int, max_tokens: int,
    dictionary: fmt.PresetDictionary | None = None, pack_facts: int = 0, pack_child_facts: int = 0,
) -> int:
    """Walk the stored rows from the root, following external nodes into their rows,
    and compare every node with the reference trie. Returns the number of nodes checked.

    Also checks: every stored row is reached exactly once, and the cut rule holds
    (expanded exactly when more than T facts or B tokens lie below; every other row
    within both bounds; an expanded row of at most ``pack_facts`` facts and ``B x
    pack_facts / T`` tokens stores whole exactly its children of at most
    ``pack_child_facts`` facts and B tokens, any other expanded row none).
    """
    ref = ReferenceTrie(facts)
    tokens_below: Counter[tuple[int, ...]] = Counter()
    for f in ref.facts:
        for k in range(len(f) + 1):
            tokens_below[f[:k]] += len(f) - k
    reached: set[bytes] = set()
    checked = 0
    stack = [()]
    while stack:
        row_prefix = stack.pop()
        key = fmt.encode_prefix(row_prefix)
        assert key in rows, f"no row for prefix {row_prefix}"
        assert key not in reached, f"row {row_prefix} reached twice"
        reached.add(key)
        frag = fmt.decode_fragment(rows[key], dictionary=dictionary)
        expanded = ref.leaves[row_prefix] > threshold or tokens_below[row_prefix] > max_tokens
        packs = expanded and ref.leaves[row_prefix] <= pack_facts and (
            tokens_below[row_prefix] <= max_tokens * pack_facts // threshold)
        if not expanded:
            assert not frag.external.any()
        elif not packs:
            assert bool(frag.external[1:].all()) and frag.n_nodes == 1 + len(ref.children[row_prefix])
        else:
            toks, _ = frag.children(0)
            start = int(frag.child_start[0])
            for i, t in enumerate(toks.tolist()):
                child = row_prefix + (t,)
                whole = ref.leaves[child] <= pack_child_facts and tokens_below[child] <= max_tokens
                assert bool(frag.external[start + i]) != whole, f"packed child {child}"
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


def build_rows(spark, facts: list[list[int]], threshold: int, max_tokens: int,
               partitions: int = 3, pack_facts: int = 0, pack_child_facts: int = 0) -> dict[bytes, bytes]:
    from refactx_pipeline.stages.prefix_rows import prefix_rows
    from refactx_pipeline.stages.schemas import TOKENS

    tokens = spark.createDataFrame([(i, f) for i, f in enumerate(facts)], TOKENS)
    out = prefix_rows(tokens, threshold, max_tokens, partitions, pack_facts=pack_facts,
                      pack_child_facts=pack_child_facts).collect()
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


@pytest.mark.parametrize("threshold,max_tokens,partitions",
                         [(1, 4096, 1), (2, 4096, 3), (64, 4096, 2), (1, 1, 5), (64, 6, 4), (3, 10, 9)])
def test_rows_match_reference(spark, threshold, max_tokens, partitions):
    from refactx_index.tree.memory import build_rows as reference_rows

    rows = build_rows(spark, FACTS, threshold, max_tokens, partitions)
    assert check_rows_against_trie(rows, FACTS, threshold, max_tokens) > 0
    assert rows == reference_rows(FACTS, threshold=threshold, max_subtree_tokens=max_tokens)
    root = fmt.decode_fragment(rows[b""])
    assert root.leaves[0] == len({tuple(f) for f in FACTS})


def decoded_content(rows: Mapping[bytes, bytes], dictionary: fmt.PresetDictionary | None = None
                    ) -> dict[tuple[int, ...], tuple[int, bool, list[tuple[int, int]]]]:
    """Every prefix of a stored tree -> (leaves, ends, [(child token, child leaves)]), walked
    from the root across rows: what a reader sees, whatever the cut."""
    out = {}
    stack = [()]
    while stack:
        row_prefix = stack.pop()
        frag = fmt.decode_fragment(rows[fmt.encode_prefix(row_prefix)], dictionary=dictionary)
        nodes = [(0, row_prefix)]
        while nodes:
            i, full = nodes.pop()
            if frag.external[i]:
                stack.append(full)
                continue
            toks, leaves = frag.children(i)
            out[full] = (int(frag.leaves[i]), bool(frag.ends[i]), list(zip(toks.tolist(), leaves.tolist())))
            s = int(frag.child_start[i])
            nodes.extend((j, full + (int(frag.tokens[j]),)) for j in range(s, s + int(frag.child_count[i])))
    return out


# many facts below a few hot prefixes, most of their children a fact or two: the shape packed
# rows are for (subjects sharing a first word, each with a few facts)
PACKED_FACTS = ([[3, 1, i, 7, i % 5] for i in range(300)] + [[3, 1, i, 8] for i in range(0, 300, 3)]
                + [[3, 2, i // 40, i % 40, 9] for i in range(400)] + [[3], [3, 1], [4, 4, 4], [70000, 2]])


@pytest.mark.parametrize("pack_facts,pack_child_facts,partitions",
                         [(1000, 2, 1), (1000, 2, 7), (450, 45, 5), (8000, 1, 3), (100, 2, 4)])
def test_packed_rows_match_reference_and_read_the_same(spark, pack_facts, pack_child_facts, partitions):
    """Packed rows (an expanded prefix stores its small children whole): the Spark job's rows
    are the reference's byte for byte, across partition edges; the cut rule holds; and every
    prefix reads the same children, leaf counts and ends as in the plain layout, with fewer rows."""
    from refactx_index.tree.memory import build_rows as reference_rows

    rows = build_rows(spark, PACKED_FACTS, 16, 4096, partitions, pack_facts, pack_child_facts)
    assert rows == reference_rows(PACKED_FACTS, threshold=16, max_subtree_tokens=4096,
                                  pack_facts=pack_facts, pack_child_facts=pack_child_facts)
    check_rows_against_trie(rows, PACKED_FACTS, 16, 4096, pack_facts=pack_facts, pack_child_facts=pack_child_facts)
    plain = reference_rows(PACKED_FACTS, threshold=16, max_subtree_tokens=4096)
    assert decoded_content(rows) == decoded_content(plain)
    if pack_facts >= 1000:
        assert len(rows) < len(plain) / 4


def test_a_hot_prefix_is_cut_into_bounded_rows_across_partitions(spark):
    """2,000 facts under one 6-token prefix, sorted into 8 partitions: every partition
    edge falls inside the hot prefix, yet its rows are whole and bounded."""
    from refactx_index.tree.memory import build_rows as reference_rows

    hot = [9, 9, 9, 9, 9, 9]
    facts = [hot + [i // 100, i % 100, 7] for i in range(2000)] + [[1, 2, 3], hot[:3]]
    rows = build_rows(spark, facts, 16, 64, partitions=8)
    assert rows == reference_rows(facts, threshold=16, max_subtree_tokens=64)
    check_rows_against_trie(rows, facts, 16, 64)
    for node in rows.values():
        frag = fmt.decode_fragment(node)
        if not frag.external.any():
            assert frag.leaves[0] <= 16


def test_bad_rows_are_counted_not_lost(spark):
    from refactx_pipeline.stages.prefix_rows import input_counts, prefix_rows
    from pyspark.sql.types import ArrayType, IntegerType, LongType, StructField, StructType

    loose = StructType([StructField("fact_id", LongType()), StructField("token_ids", ArrayType(IntegerType()))])
    df = spark.createDataFrame([(1, [1, 2]), (2, []), (3, None), (4, [3, -1]), (5, [1, 2]), (6, [4, None]),
                                (7, [None]), (8, [None, -1, 5])], loose)
    counts = input_counts(df)
    assert counts["facts"] == 8
    assert counts["rejected_by_reason"] == {
        "empty token sequence": 1,
        "null token_ids": 1,
        "negative or null token id": 4,
    }
    observed: dict[str, int] = {}
    rows = prefix_rows(df, 1, 4096, 2, observed=observed).collect()
    assert observed == {"valid_facts": 2}  # [1, 2] twice: duplicates are counted
    assert sorted(bytes(r["prefix"]) for r in rows) == [b""]
    assert fmt.decode_fragment(rows[0]["node"]).leaves[0] == 1


@pytest.mark.parametrize("bad", [[], [(100, []), (101, [3, -1]), (102, [4, 5, -2])]], ids=["valid", "rejects"])
def test_run_writes_rows_and_counts(spark, cfg, bad):
    """Valid input is counted from the Parquet footers and the sort; input with rejects gets a
    pass that counts them by reason."""
    from refactx_pipeline.stages import prefix_rows as job
    from refactx_pipeline.stages.schemas import TOKENS
    from refactx_pipeline.config import VocabularyConfig
    from refactx_pipeline.stages.contract import StageContext

    cfg = cfg.updated({
        "tokenize.vocabularies": [VocabularyConfig(name="toy", path="")],
        "tree.subtree_threshold": 1,
        "tree.max_subtree_tokens": 8,
        "tree.facts_per_partition": 3,
    })
    src = cfg.stage_dir("tokenize") / "toy" / "tokens"
    spark.createDataFrame([(i, f) for i, f in enumerate(FACTS)] + bad, TOKENS).write.parquet(str(src))
    counts = job.run(StageContext(cfg, spark=spark))["vocabularies"]["toy"]
    assert counts["facts"] == len(FACTS) + len(bad)
    assert counts["rejected"] == len(bad)
    assert counts["rejected_by_reason"] == ({"empty token sequence": 1, "negative or null token id": 2} if bad else {})
    assert counts["distinct_facts"] == len({tuple(f) for f in FACTS})
    assert counts["duplicate_facts"] == 1
    written = spark.read.parquet(str(cfg.stage_dir("prefix_rows") / "toy" / "rows")).collect()
    assert counts["rows"] == len(written)
    assert counts["partitions"] >= 3  # 8 distinct facts, at most 3 per partition
    assert counts["largest_row_bytes"] >= counts["p99_row_bytes"] > 0
    rows = {bytes(r["prefix"]): bytes(r["node"]) for r in written}
    path = cfg.stage_dir("prefix_rows") / "toy" / job.DICTIONARY_FILE
    dictionary = fmt.PresetDictionary(path.read_bytes()) if path.exists() else None
    assert counts["format_version"] == fmt.FORMAT_VERSION == 5
    assert counts["dictionary_bytes"] == (len(dictionary.data) if dictionary else 0)
    check_rows_against_trie(rows, FACTS, 1, 8, dictionary)
    assert (cfg.stage_dir("prefix_rows") / "toy" / "counts.json").exists()


def random_facts(count: int, seed: int = 0) -> list[list[int]]:
    """Facts that share a vocabulary of tokens, as real ones do (what a dictionary learns)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    common = rng.integers(0, 151_000, 40)
    return [[int(common[i % 7]), *map(int, rng.choice(common, int(rng.integers(2, 12)))), int(rng.integers(0, 70_000))]
            for i in range(count)]


@pytest.mark.parametrize("threshold,max_tokens,partitions,compress", [(8, 4096, 3, False), (64, 64, 5, False),
                                                                     (8, 4096, 3, True)])
def test_dictionary_rows_match_the_reference_byte_for_byte(spark, threshold, max_tokens, partitions, compress):
    """The Spark job's dictionary and rows are ``memory.compress_rows`` of the reference rows
    (the same bytes, whatever the partitioning, and whether the rows were zlib-compressed
    before the dictionary pass or encoded raw, as the stage now does), and decode to the rows
    of the previous format: the same children, leaf counts and ends for every prefix."""
    from refactx_index.tree.memory import build_rows as reference_rows, compress_rows
    from refactx_pipeline.stages.prefix_rows import build_dictionary, prefix_rows, with_dictionary
    from refactx_pipeline.stages.schemas import TOKENS

    facts = random_facts(1500)
    tokens = spark.createDataFrame([(i, f) for i, f in enumerate(facts)], TOKENS)
    plain = prefix_rows(tokens, threshold, max_tokens, partitions, compress=compress).cache()
    dictionary = build_dictionary(plain)
    rows = {bytes(r["prefix"]): bytes(r["node"]) for r in with_dictionary(plain, dictionary).collect()}
    reference = reference_rows(facts, threshold=threshold, max_subtree_tokens=max_tokens)
    expected, expected_dictionary = compress_rows(reference)
    assert dictionary == expected_dictionary and dictionary is not None
    assert rows == expected
    assert sum(node[1] & 4 != 0 for node in rows.values()) > len(rows) // 2
    assert sum(map(len, rows.values())) < sum(map(len, reference.values()))
    for key, node in reference.items():
        new, old = fmt.decode_fragment(rows[key], fmt.FORMAT_VERSION, dictionary), fmt.decode_fragment(node, fmt.FORMAT_VERSION)
        for field in ("tokens", "child_count", "ends", "external", "leaves"):
            assert getattr(new, field).tolist() == getattr(old, field).tolist()
    check_rows_against_trie(rows, facts, threshold, max_tokens, dictionary)


def test_partition_reads_sliced_batches_by_absolute_offsets():
    """A batch sliced out of a larger Arrow array keeps absolute list offsets; a
    partition must read each fact's own tokens, not its neighbour's."""
    import pyarrow as pa

    from refactx_pipeline.stages.prefix_rows import _partition

    column = pa.array([[5, 5], [1, 2, 3], [1, 2, 3], [1, 4]], pa.list_(pa.int32()))
    batch = pa.RecordBatch.from_arrays([column], ["token_ids"]).slice(1)
    part = _partition(iter([batch]))
    assert part.size == 2  # the duplicate collapsed
    assert [part.values[a:b].tolist() for a, b in zip(part.start, part.stop)] == [[1, 2, 3], [1, 4]]
    assert part.lcp.tolist() == [0, 1]


def test_spark_sql_expression_matches_the_encoder(spark):
    """The prefix key's Spark SQL expression (fmt.prefix_key_sql) gives the encoder's bytes."""
    from pyspark.sql import functions as F

    rows = [([5, 151643, 2**31 - 1, 0, 42],), ([7],), ([],)]
    df = spark.createDataFrame(rows, "token_ids array<int>")
    for depth in (1, 3, 8):
        got = [bytes(r.key) for r in df.select(F.expr(fmt.prefix_key_sql("token_ids", depth)).alias("key")).collect()]
        assert got == [fmt.encode_prefix(r[0][:depth]) for r in rows]
