"""Stage 6 -- prefix rows: the tree of one vocabulary's facts, one row per stored prefix.

Input ``tokenize/<vocab>/tokens`` (schema ``TOKENS``), output ``prefix_rows/<vocab>/rows``
(schema ``ROWS``).

The cut rule (``refactx_index.tree.memory.build_rows`` is the reference, row for row): the
root is a row; a prefix is *expanded* when more than ``T = tree.subtree_threshold``
facts lie below it, or their tokens after the prefix number more than ``B =
tree.max_subtree_tokens``; an expanded prefix's row lists its children, each an
external row of its own; every other row stores its whole subtree. So every row is
bounded by facts and bytes, at any depth (a prefix shared by a million facts is
expanded token by token until its subtrees are small).

How (no group ever holds more than one row, no task more than its partition):

1. Valid facts are range-partitioned and sorted by their token sequence (array order
   is key byte order): every prefix's facts are one contiguous run, cut only at
   partition edges; duplicates are neighbours and collapse.
2. Edge statistics: each partition reports, for each prefix of its first and last
   fact, its facts below it and their tokens (at most two facts' worth of numbers);
   the driver sums them per prefix -- the global counts of the only prefixes a
   partition cannot see whole -- and the partitions' facts (the valid facts in: only when
   they are fewer than the input's rows, read from its Parquet footers, does a pass over
   the input count the rejects by reason).
3. Rows: each partition walks its runs level by level in numpy (runs of facts with
   equal ``k``-prefix follow from the common prefix length of neighbours), decides
   the cut with global counts at its edges, and encodes every row it sees whole. A
   row whose prefix spans partitions leaves in shares (children with partial leaf
   counts, or part of the suffixes) that a group-by merges: at most two per level
   per partition edge.

Python runs only in the Arrow functions (``mapInArrow``), vectorized per level with
one ``format.encode_*`` call per output row.

4. Preset dictionary (format version 4): the rows, encoded raw and persisted, are sampled by
   ``crc32(prefix)`` (a top-k: ``format.DICTIONARY_SAMPLE_ROWS`` rows reach the driver),
   ``format.make_dictionary`` trains the build's zstd dictionary on them (at most 64 KiB, the
   same bytes for the same rows), and one more ``mapInArrow`` compresses every row against it
   (``format.with_dictionary``). It is written beside the rows (``dictionary.bin``) for the
   load stage, which stores it in the catalog.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    IntegerType,
    LongType,
    ArrayType,
    StructField,
    StructType,
)

from refactx_pipeline.common import DICTIONARY_FILE, stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import ROWS
from refactx_index.tree import format as fmt
from refactx_index.errors import ConfigError

log = logging.getLogger(__name__)

STAGE = "prefix_rows"

_ROWS_ARROW = pa.schema(
    [
        pa.field("prefix", pa.binary(), False),
        pa.field("node", pa.binary(), False),
        pa.field("depth", pa.int32(), False),
        pa.field("leaves", pa.int64(), False),
    ]
)

# step 2: one partition's counts of the prefixes of its first and last fact; ``rows``: the
# partition's valid facts, duplicates included, on its root's row (0 on the others)
EDGE_STATS = StructType(
    [
        StructField("prefix", BinaryType(), False),
        StructField("leaves", LongType(), False),
        StructField("tokens", LongType(), False),
        StructField("rows", LongType(), False),
    ]
)

# step 3: whole rows (share 0) and shares of rows that span partitions
WHOLE, EXPANDED_SHARE, SUBTREE_SHARE = 0, 1, 2
ROW_SHARES = StructType(
    [
        StructField("prefix", BinaryType(), False),
        StructField("node", BinaryType(), True),  # whole rows only
        StructField("depth", IntegerType(), False),
        StructField("leaves", LongType(), False),  # this share's facts
        StructField("share", ByteType(), False),
        StructField("ends", BooleanType(), False),
        StructField("child_tokens", ArrayType(LongType()), True),
        StructField("child_leaves", ArrayType(LongType()), True),
        StructField("suffixes", ArrayType(ArrayType(IntegerType())), True),
    ]
)
_ROW_SHARES_ARROW = pa.schema(
    [
        pa.field("prefix", pa.binary(), False),
        pa.field("node", pa.binary(), True),
        pa.field("depth", pa.int32(), False),
        pa.field("leaves", pa.int64(), False),
        pa.field("share", pa.int8(), False),
        pa.field("ends", pa.bool_(), False),
        pa.field("child_tokens", pa.list_(pa.int64()), True),
        pa.field("child_leaves", pa.list_(pa.int64()), True),
        pa.field("suffixes", pa.list_(pa.list_(pa.int32())), True),
    ]
)
_EDGE_ARROW = pa.schema(
    [pa.field("prefix", pa.binary(), False), pa.field("leaves", pa.int64(), False),
     pa.field("tokens", pa.int64(), False), pa.field("rows", pa.int64(), False)]
)


# --------------------------------------------------------------------------- input


def reject_reason() -> Column:
    """Why a token row cannot be a fact (null when it is fine)."""
    ids = F.col("token_ids")
    return (
        F.when(ids.isNull(), F.lit("null token_ids"))
        .when(F.size(ids) == 0, F.lit("empty token sequence"))
        # built-ins, not a lambda per element: this runs over every fact, three times (the
        # counts, the range partitioner's sample, the shuffle). arrays_overlap(ids, [-1]) of a
        # non-empty array is null exactly when it holds a null and no -1 (which array_min
        # catches): one compiled scan, where array_compact is a lambda per element (Spark
        # rewrites it as filter(x -> x IS NOT NULL)): 0.56 against 2.3 s on 1M facts
        .when(F.arrays_overlap(ids, F.array(F.lit(-1))).isNull() | (F.array_min(ids) < 0),
              F.lit("negative or null token id"))
    )


def sorted_facts(tokens: DataFrame, partitions: int) -> DataFrame:
    """Valid token sequences, range-partitioned and sorted (duplicates not yet removed)."""
    return (
        tokens.where(reject_reason().isNull())
        .select("token_ids")
        .repartitionByRange(partitions, "token_ids")
        .sortWithinPartitions("token_ids")
    )


class _Partition:
    """One partition's sorted, distinct facts as numpy arrays.

    ``values[start[i]:stop[i]]`` are fact ``i``'s tokens, ``n`` their counts, ``mat`` the
    facts padded with -1, ``lcp[i]`` the common prefix length of facts ``i - 1`` and
    ``i`` (0 for the first: the previous partition is not seen), ``cum_n`` the running
    token count (``cum_n[j] - cum_n[i]`` = tokens of facts ``i..j-1``); ``input_rows`` the
    facts it was given, duplicates included.
    """

    def __init__(self, column: pa.ListArray) -> None:
        self.input_rows = len(column)
        offsets = column.offsets.to_numpy().astype(np.int64)
        values = column.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        start = offsets[:-1] - offsets[0]
        n = np.diff(offsets)
        width = int(n.max())
        mat = np.full((n.size, width), -1, dtype=np.int32)
        mat[np.arange(width)[None, :] < n[:, None]] = values
        lcp = np.zeros(n.size, dtype=np.int64)
        if n.size > 1:
            differs = mat[1:] != mat[:-1]
            distinct = differs.any(axis=1)
            lcp[1:] = np.where(distinct, differs.argmax(axis=1), width)
            keep = np.concatenate(([True], distinct))  # sorted: duplicates are neighbours
            if not keep.all():
                mat, n, lcp, start = mat[keep], n[keep], lcp[keep], start[keep]
        self.values = values
        self.start = start
        self.stop = self.start + n
        self.n = n
        self.mat = mat
        self.lcp = lcp
        self.cum_n = np.concatenate(([0], np.cumsum(n)))

    @property
    def size(self) -> int:
        return int(self.n.size)

    def key(self, fact: int, length: int) -> bytes:
        return fmt.encode_prefix(self.mat[fact, :length])

    def keys(self, facts: np.ndarray, length: int) -> list[bytes]:
        """``key`` of many facts at one length (ids are non-negative int32: big-endian
        uint32 bytes are ``format.encode_prefix``'s)."""
        buf = self.mat[facts, :length].astype(">u4").tobytes()
        step = 4 * length
        return [buf[i : i + step] for i in range(0, len(buf), step)] if step else [b""] * len(facts)

    def edge_runs(self) -> list[tuple[bytes, int, int]]:
        """(key, facts, tokens below) of every prefix of the first and of the last fact,
        counted in this partition (a prefix of both covers the whole partition)."""
        m = self.size
        out: dict[bytes, tuple[int, int]] = {}
        for fact, lcps in ((0, self.lcp[1:]), (m - 1, self.lcp[1:][::-1])):
            # facts sharing the first k tokens of ``fact``: 1 + the leading lcps >= k
            running = np.minimum.accumulate(lcps) if lcps.size else lcps
            ks = np.arange(int(self.n[fact]) + 1)
            sizes = 1 + np.searchsorted(-running, -ks, side="right")
            for k, size in zip(ks.tolist(), sizes.tolist()):
                lo, hi = (0, size) if fact == 0 else (m - size, m)
                tokens = int(self.cum_n[hi] - self.cum_n[lo]) - k * size
                out.setdefault(self.key(fact, k), (size, tokens))
        return [(key, leaves, tokens) for key, (leaves, tokens) in out.items()]


def _partition(batches: Iterator[pa.RecordBatch]) -> _Partition | None:
    columns = [b.column("token_ids") for b in batches if b.num_rows]
    if not columns:
        return None
    return _Partition(pa.concat_arrays(columns))


def _edge_stats_fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    part = _partition(batches)
    if part is None:
        return
    runs = part.edge_runs()
    yield pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in runs], pa.binary()), pa.array([r[1] for r in runs], pa.int64()),
         pa.array([r[2] for r in runs], pa.int64()),
         pa.array([part.input_rows if r[0] == b"" else 0 for r in runs], pa.int64())],
        schema=_EDGE_ARROW,
    )


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], stops[i])``."""
    lengths = stops - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    out = np.ones(total, dtype=np.int64)
    out[0] = starts[0]
    nonempty = lengths > 0
    firsts = (ends - lengths)[nonempty]
    out[firsts[1:]] = starts[nonempty][1:] - (stops[nonempty][:-1] - 1)
    return np.cumsum(out)


_SUBTREE_CHUNK = 32_768


class _ShareWriter:
    """Collects step 3's output rows (whole rows, or shares of a row spanning partitions)."""

    def __init__(self, compress: bool = True) -> None:
        self._compress = compress
        self._cols: dict[str, list[Any]] = {f.name: [] for f in _ROW_SHARES_ARROW}

    def __len__(self) -> int:
        return len(self._cols["prefix"])

    def _add(self, key: bytes, node: bytes | None, depth: int, leaves: int, share: int, ends: bool,
             child_tokens: Any = None, child_leaves: Any = None, suffixes: Any = None) -> None:
        c = self._cols
        c["prefix"].append(key)
        c["node"].append(node)
        c["depth"].append(depth)
        c["leaves"].append(leaves)
        c["share"].append(share)
        c["ends"].append(ends)
        c["child_tokens"].append(child_tokens)
        c["child_leaves"].append(child_leaves)
        c["suffixes"].append(suffixes)

    def subtree_share(self, part: _Partition, lo: int, hi: int, depth: int) -> None:
        starts, stops = part.start[lo:hi] + depth, part.stop[lo:hi]
        suffixes = [part.values[a:b].tolist() for a, b in zip(starts.tolist(), stops.tolist())]
        self._add(part.key(lo, depth), None, depth, hi - lo, SUBTREE_SHARE, bool(part.n[lo] == depth),
                  suffixes=suffixes)

    def subtrees(self, part: _Partition, lo: np.ndarray, hi: np.ndarray, depth: int) -> None:
        """Whole subtree rows, encoded together (``format.encode_subtree_runs``) in chunks
        of at most ``_SUBTREE_CHUNK`` facts: the encoder's matrices stay small."""
        if lo.size == 0:
            return
        facts = np.cumsum(hi - lo)
        start = 0
        while start < lo.size:
            base = facts[start - 1] if start else 0
            stop = max(start + 1, int(np.searchsorted(facts, base + _SUBTREE_CHUNK, side="right")))
            chunk_lo, chunk_hi = lo[start:stop], hi[start:stop]
            nodes = fmt.encode_subtree_runs(part.mat, part.n, part.lcp, chunk_lo, chunk_hi,
                                            np.full(chunk_lo.size, depth), compress=self._compress)
            keys = part.keys(chunk_lo, depth)
            for key, a, b, node in zip(keys, chunk_lo.tolist(), chunk_hi.tolist(), nodes):
                self._add(key, node, depth, b - a, WHOLE, False)
            start = stop

    def expanded(self, part: _Partition, lo: int, depth: int, leaves: int, ends: bool,
                 child_tokens: np.ndarray, child_leaves: np.ndarray, crossing: bool,
                 whole: np.ndarray | None = None) -> None:
        """An expanded row, or its share; ``whole``: the facts (partition indices) of the
        children it stores whole (a packed row)."""
        key = part.key(lo, depth)
        if crossing:
            suffixes = None if whole is None else [
                part.values[x:y].tolist() for x, y in zip((part.start[whole] + depth).tolist(),
                                                          part.stop[whole].tolist())]
            self._add(key, None, depth, leaves, EXPANDED_SHARE, ends,
                      child_tokens=child_tokens.tolist(), child_leaves=child_leaves.tolist(),
                      suffixes=suffixes)
        elif whole is not None:
            # the fact equal to the prefix (ends) is an empty suffix: its own index, from its start
            facts = np.concatenate(([lo], whole)) if ends else whole
            starts = part.start[facts] + depth
            node = fmt.encode_packed_ranges(part.values, starts, np.maximum(part.stop[facts], starts),
                                            child_tokens, child_leaves, compress=self._compress)
            self._add(key, node, depth, leaves, WHOLE, ends)
        else:
            self._add(key, fmt.encode_children(child_tokens, child_leaves, ends, compress=self._compress), depth,
                      leaves, WHOLE, ends)

    def flush(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_pydict(self._cols, schema=_ROW_SHARES_ARROW)
        self._cols = {f.name: [] for f in _ROW_SHARES_ARROW}
        return batch


def _row_shares_fn(threshold: int, max_tokens: int, edges: dict[bytes, tuple[int, int, int]],
                   compress: bool = True, pack_facts: int = 0, pack_child_facts: int = 0):
    """Step 3's Arrow function; ``edges``: prefix key -> (global facts, global tokens, partitions);
    ``compress``: zlib rows that gain from it (off when a dictionary pass follows);
    ``pack_facts``, ``pack_child_facts``: the packed rows' bounds (``memory.build_rows``)."""
    pack_tokens = max_tokens * pack_facts // threshold

    def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = _partition(batches)
        if part is None:
            return
        out = _ShareWriter(compress)
        m = part.size
        # level 0: the root, one run of every fact
        rs = np.zeros(1, dtype=np.int64)
        re = np.full(1, m, dtype=np.int64)
        depth = 0
        while rs.size:
            leaves = re - rs
            tokens = part.cum_n[re] - part.cum_n[rs] - depth * leaves
            crossing = np.zeros(rs.size, dtype=bool)
            # a run at an edge may go on in a neighbour partition: decided on global counts
            # (every partition decides it alike); its shares still carry local counts
            g_leaves, g_tokens = leaves.copy(), tokens.copy()
            for j in np.flatnonzero((rs == 0) | (re == m)).tolist():
                g_leaves[j], g_tokens[j], parts = edges[part.key(int(rs[j]), depth)]
                crossing[j] = parts > 1
            big = (g_leaves > threshold) | (g_tokens > max_tokens)
            ends = part.n[rs] == depth
            small = ~big
            for j in np.flatnonzero(small & crossing).tolist():  # shares of subtree rows
                out.subtree_share(part, int(rs[j]), int(re[j]), depth)
            whole = small & ~crossing
            out.subtrees(part, rs[whole], re[whole], depth)
            # the next level: children of expanded runs
            prs, pre = rs[big], re[big]
            pends = ends[big]
            pcross = crossing[big]
            first = prs + pends  # a fact equal to the prefix is its run's first
            idx = _ranges(first, pre)
            parent = np.repeat(np.arange(prs.size), pre - first)
            is_start = np.ones(idx.size, dtype=bool)
            if idx.size > 1:
                is_start[1:] = (parent[1:] != parent[:-1]) | (part.lcp[idx[1:]] < depth + 1)
            crs = idx[is_start]
            cparent = parent[is_start]
            cre = np.empty_like(crs)
            if crs.size:
                cre[:-1] = crs[1:]
                last = np.ones(crs.size, dtype=bool)
                last[:-1] = cparent[1:] != cparent[:-1]
                cre[last] = pre[cparent[last]]
            ctoken = part.mat[crs, depth].astype(np.int64) if crs.size else np.zeros(0, np.int64)
            cleaves = cre - crs
            # packed rows: an expanded prefix of at most pack_facts facts stores whole its
            # children of at most pack_child_facts facts (global counts at the edges)
            inline = np.zeros(crs.size, dtype=bool)
            if pack_facts and crs.size:
                packs = (g_leaves[big] <= pack_facts) & (g_tokens[big] <= pack_tokens)
                cg_leaves = cleaves.copy()
                cg_tokens = part.cum_n[cre] - part.cum_n[crs] - (depth + 1) * cleaves
                for c in np.flatnonzero((crs == 0) | (cre == m)).tolist():
                    cg_leaves[c], cg_tokens[c], _ = edges[part.key(int(crs[c]), depth + 1)]
                inline = packs[cparent] & (cg_leaves <= pack_child_facts) & (cg_tokens <= max_tokens)
            bounds = np.searchsorted(cparent, np.arange(prs.size + 1))
            for j in range(prs.size):
                a, b = int(bounds[j]), int(bounds[j + 1])
                inl = inline[a:b]
                facts = _ranges(crs[a:b][inl], cre[a:b][inl]) if inl.any() else None
                out.expanded(part, int(prs[j]), depth, int(pre[j] - prs[j]), bool(pends[j]),
                             ctoken[a:b][~inl], cleaves[a:b][~inl], bool(pcross[j]), facts)
            rs, re = crs[~inline], cre[~inline]
            depth += 1
            if len(out) >= 4096:
                yield out.flush()
        if len(out):
            yield out.flush()

    return rows


def _merge_shares_fn(compress: bool = True):
    """Rows spanning partitions: their shares (grouped per prefix) -> one encoded row."""

    def merge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            nodes, leaves_out = [], []
            for shares, total in zip(batch.column("shares").to_pylist(), batch.column("leaves").to_pylist()):
                if shares[0]["share"] == EXPANDED_SHARE:
                    toks = np.array([t for s in shares for t in s["child_tokens"]], dtype=np.int64)
                    counts = np.array([c for s in shares for c in s["child_leaves"]], dtype=np.int64)
                    # a child that spans the edge comes once from each side: add its counts
                    unique, inverse = np.unique(toks, return_inverse=True)
                    summed = np.bincount(inverse, weights=counts, minlength=unique.size).astype(np.int64)
                    ends = any(s["ends"] for s in shares)
                    # a packed row: the children stored whole come as their facts' suffixes
                    inline = [x for s in shares for x in (s["suffixes"] or ())]
                    if inline:
                        nodes.append(fmt.encode_packed(inline + [[]] if ends else inline, unique, summed,
                                                       compress=compress))
                    else:
                        nodes.append(fmt.encode_children(unique, summed, ends, compress=compress))
                else:
                    nodes.append(fmt.encode_subtree([x for s in shares for x in s["suffixes"]], compress=compress))
                leaves_out.append(total)
            yield pa.RecordBatch.from_arrays(
                [batch.column("prefix"), pa.array(nodes, pa.binary()), batch.column("depth"),
                 pa.array(leaves_out, pa.int64())],
                schema=_ROWS_ARROW,
            )

    return merge


def _dictionary_fn(dictionary: bytes):
    """Rows encoded without a dictionary -> the same rows compressed against the build's
    preset dictionary (``format.with_dictionary``: one call per row, as the encoders)."""

    def compress(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # its crc32 and its zstd compressor (the dictionary digested) once per task, not per row
        preset = fmt.PresetDictionary(dictionary)
        for batch in batches:
            nodes = [fmt.with_dictionary(node, preset) for node in batch.column("node").to_pylist()]
            yield pa.RecordBatch.from_arrays(
                [batch.column("prefix"), pa.array(nodes, pa.binary()), batch.column("depth"),
                 batch.column("leaves")],
                schema=_ROWS_ARROW,
            )

    return compress


def build_dictionary(rows: DataFrame) -> fmt.PresetDictionary | None:
    """The build's preset dictionary from a deterministic sample of its rows: the
    ``format.DICTIONARY_SAMPLE_ROWS`` first by ``crc32(prefix)`` (then prefix), whatever the
    partitioning (a top-k per task, merged on the driver), given to ``format.make_dictionary``
    -- the bytes ``refactx_index.tree.memory.compress_rows`` makes from the same rows.

    The top-k picks keys only, and the sampled rows' bodies are fetched by a join with those
    keys: a top-k over the bodies themselves sends every task's k largest-ranked bodies to the
    driver (a 20M-fact build's ~100 tasks: over 1 GiB, past ``spark.driver.maxResultSize``)."""
    keys = (
        rows.select(F.crc32("prefix").alias("h"), "prefix")
        .orderBy("h", "prefix")
        .limit(fmt.DICTIONARY_SAMPLE_ROWS)
    )
    sample = rows.join(F.broadcast(keys), "prefix").select("prefix", "node").collect()
    return fmt.make_dictionary((bytes(r["prefix"]), bytes(r["node"])) for r in sample)


def with_dictionary(rows: DataFrame, dictionary: fmt.PresetDictionary | None) -> DataFrame:
    """``rows`` compressed against ``dictionary`` (made first, then sent to every task with
    the function's closure: 64 KiB at most)."""
    if dictionary is None:
        return rows
    return rows.mapInArrow(_dictionary_fn(dictionary.data), ROWS)


def edge_counts(facts: DataFrame) -> tuple[dict[bytes, tuple[int, int, int]], int]:
    """Step 2: prefix key -> (facts below, their tokens after it, partitions it spans), for
    the prefixes of every partition's first and last fact; and the facts sorted, duplicates
    included (the input's valid facts, counted on the way)."""
    rows = (
        facts.mapInArrow(_edge_stats_fn, EDGE_STATS)
        .groupBy("prefix")
        .agg(F.sum("leaves").alias("leaves"), F.sum("tokens").alias("tokens"),
             F.count(F.lit(1)).alias("parts"), F.sum("rows").alias("rows"))
        .collect()
    )
    edges = {bytes(r["prefix"]): (int(r["leaves"]), int(r["tokens"]), int(r["parts"])) for r in rows}
    return edges, sum(int(r["rows"]) for r in rows)


def prefix_rows(
    tokens: DataFrame,
    threshold: int,
    max_subtree_tokens: int,
    partitions: int,
    cached: list[DataFrame] | None = None,
    compress: bool = True,
    observed: dict[str, int] | None = None,
    pack_facts: int = 0,
    pack_child_facts: int = 0,
) -> DataFrame:
    """Token rows -> tree rows (schema ``ROWS``), one per stored prefix.

    ``partitions``: range partitions of the sorted facts (each task holds one). Two
    frames are persisted (each read twice); they are appended to ``cached`` when
    given, for the caller to unpersist once the rows are written. ``compress``: zlib each row
    that gains from it; off when the rows go through ``with_dictionary`` next, which would
    inflate them again before compressing them against the dictionary (the same bytes come
    out either way: it compresses the raw body). ``observed``, when given, gets
    ``valid_facts``: the facts that passed ``reject_reason``, duplicates included.
    """
    if threshold < 1:
        raise ConfigError(f"tree.subtree_threshold must be at least 1, got {threshold}")
    if max_subtree_tokens < 1:
        raise ConfigError(f"tree.max_subtree_tokens must be at least 1, got {max_subtree_tokens}")
    facts = sorted_facts(tokens, max(1, partitions)).persist(StorageLevel.MEMORY_AND_DISK)
    edges, valid_facts = edge_counts(facts)
    if observed is not None:
        observed["valid_facts"] = valid_facts
    shares = facts.mapInArrow(_row_shares_fn(threshold, max_subtree_tokens, edges, compress, pack_facts,
                                             pack_child_facts), ROW_SHARES).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    if cached is not None:
        cached.extend((facts, shares))
    whole = shares.where(F.col("share") == WHOLE).select("prefix", "node", "depth", "leaves")
    merged = (
        shares.where(F.col("share") != WHOLE)
        .groupBy("prefix")
        .agg(
            F.first("depth").alias("depth"),
            F.sum("leaves").alias("leaves"),
            F.collect_list(F.struct("share", "ends", "child_tokens", "child_leaves", "suffixes")).alias("shares"),
        )
        .mapInArrow(_merge_shares_fn(compress), ROWS)
    )
    return whole.unionByName(merged)


def write_dictionary(path: Path, dictionary: fmt.PresetDictionary | None) -> dict[str, Any]:
    """The build's preset dictionary beside its rows (the load stage stores it in the
    catalog); its size and crc32 for the counts. No dictionary: no file."""
    path.unlink(missing_ok=True)
    if dictionary is None:
        return {"dictionary_bytes": 0, "dictionary_crc32": None}
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(dictionary.data)
    tmp.replace(path)
    return {"dictionary_bytes": len(dictionary.data), "dictionary_crc32": dictionary.crc}


def partitions_for(facts: int, facts_per_partition: int, parallelism: int) -> int:
    """Range partitions for ``facts`` valid facts: at most ``facts_per_partition`` each,
    and at least one per core."""
    return max(parallelism, math.ceil(facts / max(1, facts_per_partition)), 1)


def input_counts(tokens: DataFrame) -> dict[str, Any]:
    """Facts in, and rejects by reason (one pass over the token arrays)."""
    reasons = tokens.select(reject_reason().alias("reason")).groupBy("reason").count().collect()
    rejected = {r["reason"]: int(r["count"]) for r in reasons if r["reason"] is not None}
    total = sum(int(r["count"]) for r in reasons)
    return {"facts": total, "rejected": sum(rejected.values()), "rejected_by_reason": rejected}


def output_counts(rows: DataFrame) -> dict[str, Any]:
    """Counts and sizes of a written rows dataset."""
    size = F.length("prefix") + F.length("node")
    agg = rows.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("depth") == 0, F.col("leaves"))).alias("distinct_facts"),
        F.sum(size).alias("bytes"),
        F.sum(F.length("node")).alias("node_bytes"),
        F.max(size).alias("largest_row_bytes"),
        F.percentile_approx(size, 0.99).alias("p99_row_bytes"),
        F.max("depth").alias("max_depth"),
    ).collect()[0]
    return {key: int(agg[key] or 0) for key in
            ("rows", "distinct_facts", "bytes", "node_bytes", "largest_row_bytes", "p99_row_bytes", "max_depth")}


def run(ctx: StageContext) -> StageCounts:
    """Build the rows of every configured vocabulary; returns counts per vocabulary."""
    spark, cfg = ctx.spark, ctx.cfg
    tree = cfg.tree
    pack_facts, pack_child_facts = tree.pack_bounds()
    result: dict[str, Any] = {"subtree_threshold": tree.subtree_threshold,
                              "max_subtree_tokens": tree.max_subtree_tokens,
                              "pack_facts": pack_facts, "pack_child_facts": pack_child_facts,
                              "format_version": fmt.FORMAT_VERSION, "vocabularies": {}}
    for vocab in cfg.tokenize.vocabularies:
        src = stage_input(cfg, STAGE, "tokenize", vocab.name, "tokens")
        out = cfg.stage_dir(STAGE) / vocab.name / "rows"
        tokens = spark.read.parquet(str(src))
        # the facts in from the Parquet footers (no token array read); the valid ones are counted
        # as they are sorted, and only a difference (rejects) costs a pass for their reasons
        facts_in = tokens.count()
        partitions = partitions_for(facts_in, tree.facts_per_partition, spark.sparkContext.defaultParallelism)
        cached: list[DataFrame] = []
        observed: dict[str, int] = {}
        # rows are encoded first, then compressed against the dictionary made from them
        plain = prefix_rows(tokens, tree.subtree_threshold, tree.max_subtree_tokens, partitions,
                            cached, compress=False, observed=observed, pack_facts=pack_facts,
                            pack_child_facts=pack_child_facts).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(plain)
        dictionary = build_dictionary(plain)
        with_dictionary(plain, dictionary).write.mode("overwrite").parquet(str(out))
        for frame in cached:
            frame.unpersist()
        if observed["valid_facts"] == facts_in:
            counts: dict[str, Any] = {"facts": facts_in, "rejected": 0, "rejected_by_reason": {}}
        else:
            counts = input_counts(tokens)
        counts.update(write_dictionary(out.parent / DICTIONARY_FILE, dictionary))
        counts["format_version"] = fmt.FORMAT_VERSION
        counts.update(output_counts(spark.read.parquet(str(out))))
        counts["partitions"] = partitions
        counts["rows_per_fact"] = counts["rows"] / max(counts["distinct_facts"], 1)
        counts["bytes_per_fact"] = counts["bytes"] / max(counts["distinct_facts"], 1)
        counts["duplicate_facts"] = counts["facts"] - counts["rejected"] - counts["distinct_facts"]
        counts["path"] = str(out)
        log.info("prefix rows %s: %s", vocab.name, counts)
        write_counts(cfg, STAGE, counts, name=f"{vocab.name}/counts.json")
        result["vocabularies"][vocab.name] = counts
    write_counts(cfg, STAGE, result)
    return result
