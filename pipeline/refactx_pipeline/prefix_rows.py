"""Stage 6 -- prefix rows: the tree of one vocabulary's facts, by Spark group-by aggregation.

Input ``tokenize/<vocab>/tokens`` (schema ``TOKENS``), output ``prefix_rows/<vocab>/rows``
(schema ``ROWS``): exactly one row per stored prefix.

The cut rule (``refactx_index.format``), with ``D = cfg.tree.depth`` and
``T = cfg.tree.subtree_threshold``: the root is a row; a prefix with more than ``T``
facts below it and fewer than ``D`` tokens is *expanded* (its row lists its children,
all external, each child then a row of its own); every other row root stores its
whole subtree. The expanded set is closed under taking prefixes (a parent has at
least the leaves of its child and is shorter), which is what makes every step below
a plain group-by or join:

1. distinct facts; explode every fact into its prefixes of length ``0..min(len, D)``;
2. ``groupBy(prefix)`` -> ``leaves`` (facts below), ``ends`` (a fact equals it);
3. expanded rows: children (stats rows whose parent is expanded) grouped per parent;
4. subtree roots: non-expanded prefixes whose parent is expanded (or the root);
   each fact meets exactly one of them among its prefixes (none when it ends at an
   expanded prefix: that is the expanded row's ``ends``); group the facts' suffixes
   by that root and encode them.

Python runs only in the Arrow encoders (``mapInArrow``), one ``format.encode_*`` call
per output row over numpy arrays sliced from the batch.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from refactx_pipeline.common import write_counts
from refactx_pipeline.schemas import ROWS
from refactx_index import format as fmt
from refactx_pipeline.config import Config
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


# --------------------------------------------------------------------------- input


def reject_reason() -> Column:
    """Why a token row cannot be a fact (null when it is fine)."""
    ids = F.col("token_ids")
    return (
        F.when(ids.isNull(), F.lit("null token_ids"))
        .when(F.size(ids) == 0, F.lit("empty token sequence"))
        .when(F.exists(ids, lambda t: t.isNull() | (t < 0)), F.lit("negative or null token id"))
    )


def distinct_facts(tokens: DataFrame) -> DataFrame:
    """Valid, distinct token sequences: ``(token_ids, n)``."""
    return (
        tokens.where(reject_reason().isNull())
        .select("token_ids")
        .distinct()
        .withColumn("n", F.size("token_ids"))
    )


def explode_prefixes(facts: DataFrame, depth: int) -> DataFrame:
    """One row per (fact, prefix length ``k`` in ``0..min(n, D)``).

    Columns: ``token_ids, n, k, prefix`` (key bytes), ``token`` (last token, null at
    the root). The key of the first ``D`` tokens is built once per fact; each prefix
    key is a substring of it.
    """
    head_key = F.expr(fmt.prefix_key_sql("token_ids", depth))
    return (
        facts.withColumn("head_key", head_key)
        .withColumn("k", F.explode(F.sequence(F.lit(0), F.least(F.col("n"), F.lit(depth)))))
        .select(
            "token_ids",
            "n",
            "k",
            F.expr("substring(head_key, 1, 4 * k)").alias("prefix"),
            F.when(F.col("k") > 0, F.element_at("token_ids", F.col("k"))).alias("token"),
        )
    )


def is_expanded(depth: int, threshold: int) -> Column:
    """The cut rule on a row's ``leaves`` and ``depth``: more than ``T`` facts below, fewer than ``D`` tokens."""
    return (F.col("leaves") > threshold) & (F.col("depth") < depth)


def prefix_stats(exploded: DataFrame, depth: int, threshold: int) -> DataFrame:
    """``groupBy(prefix)``: ``prefix, depth, token, leaves, ends, expanded, parent``."""
    return (
        exploded.groupBy("prefix")
        .agg(
            F.min("k").alias("depth"),
            F.min("token").alias("token"),
            F.count(F.lit(1)).alias("leaves"),
            F.max((F.col("n") == F.col("k")).cast("int")).cast("boolean").alias("ends"),
        )
        .withColumn("expanded", is_expanded(depth, threshold))
        .withColumn(
            "parent",
            F.when(F.col("depth") > 0, F.expr("substring(prefix, 1, 4 * (depth - 1))")),
        )
    )


def children_of_expanded(stats: DataFrame) -> DataFrame:
    """Stats rows whose parent is expanded (every non-root row below the root)."""
    parents = stats.where("expanded").select(F.col("prefix").alias("parent"))
    return stats.where(F.col("depth") > 0).join(parents, "parent", "left_semi")


# --------------------------------------------------------------------------- encoders


def _encode_expanded_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        children = batch.column("children")
        offsets = children.offsets.to_numpy()
        values = children.values  # struct<token, leaves>, nulls only for a childless row
        tokens = values.field("token").to_numpy(zero_copy_only=False)
        leaves = values.field("leaves").to_numpy(zero_copy_only=False)
        ends = batch.column("ends").to_numpy(zero_copy_only=False)
        # ListArray.offsets index the un-sliced .values, so they are used as they are
        # (a batch sliced from a larger array has offsets[0] > 0)
        nodes = [
            fmt.encode_children(
                tokens[offsets[i] : offsets[i + 1]], leaves[offsets[i] : offsets[i + 1]], bool(ends[i])
            )
            for i in range(batch.num_rows)
        ]
        yield pa.RecordBatch.from_arrays(
            [batch.column("prefix"), pa.array(nodes, pa.binary()), batch.column("depth"),
             batch.column("leaves")],
            schema=_ROWS_ARROW,
        )


def _encode_subtree_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        suffixes = batch.column("suffixes")  # list<list<int>>
        outer = suffixes.offsets.to_numpy()
        inner = suffixes.values.offsets.to_numpy()
        values = suffixes.values.values.to_numpy(zero_copy_only=False)
        # both offset levels are absolute (into the un-sliced child arrays), and
        # encode_subtree_flat slices ``values`` by the offsets it is given
        nodes = [
            fmt.encode_subtree_flat(values, inner[outer[i] : outer[i + 1] + 1])
            for i in range(batch.num_rows)
        ]
        yield pa.RecordBatch.from_arrays(
            [batch.column("prefix"), pa.array(nodes, pa.binary()), batch.column("depth"),
             batch.column("leaves")],
            schema=_ROWS_ARROW,
        )


# --------------------------------------------------------------------------- the tree


def prefix_rows(
    tokens: DataFrame, depth: int, threshold: int, cached: list[DataFrame] | None = None
) -> DataFrame:
    """Token rows -> tree rows (schema ``ROWS``), one per stored prefix.

    Two intermediate frames are persisted (read twice each); they are appended to
    ``cached`` when given, for the caller to unpersist once the rows are written.
    """
    if depth < 1:
        raise ConfigError(f"tree.depth must be at least 1, got {depth}")
    if threshold < 1:
        raise ConfigError(f"tree.subtree_threshold must be at least 1, got {threshold}")
    facts = distinct_facts(tokens).persist(StorageLevel.MEMORY_AND_DISK)
    stats = prefix_stats(explode_prefixes(facts, depth), depth, threshold).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    if cached is not None:
        cached.extend((facts, stats))
    kids = children_of_expanded(stats)

    grouped_children = kids.groupBy("parent").agg(
        F.sort_array(
            F.collect_list(F.struct(F.col("token").alias("token"), F.col("leaves").alias("leaves")))
        ).alias("children")
    )
    expanded_rows = (
        stats.where("expanded")
        .select("prefix", "depth", "leaves", "ends")
        .join(grouped_children.withColumnRenamed("parent", "prefix"), "prefix", "inner")
        .mapInArrow(_encode_expanded_batches, ROWS)
    )

    roots = kids.where(~F.col("expanded")).select("prefix").unionByName(
        stats.where((F.col("depth") == 0) & ~F.col("expanded")).select("prefix")
    )
    subtree_rows = (
        explode_prefixes(facts, depth)
        .join(roots, "prefix", "left_semi")
        .select(
            "prefix",
            "k",
            F.expr("slice(token_ids, k + 1, n - k)").alias("suffix"),
        )
        .groupBy("prefix")
        .agg(
            F.min("k").alias("depth"),
            F.count(F.lit(1)).alias("leaves"),
            F.collect_list("suffix").alias("suffixes"),
        )
        .mapInArrow(_encode_subtree_batches, ROWS)
    )
    return expanded_rows.unionByName(subtree_rows)


def input_counts(tokens: DataFrame) -> dict[str, Any]:
    """Facts in, and rejects by reason (one pass)."""
    reasons = tokens.select(reject_reason().alias("reason")).groupBy("reason").count().collect()
    rejected = {r["reason"]: int(r["count"]) for r in reasons if r["reason"] is not None}
    total = sum(int(r["count"]) for r in reasons)
    return {"facts": total, "rejected": sum(rejected.values()), "rejected_by_reason": rejected}


def output_counts(rows: DataFrame, depth: int, threshold: int) -> dict[str, Any]:
    """Counts of a written rows dataset (kinds follow from the cut rule)."""
    expanded = is_expanded(depth, threshold)
    agg = rows.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(expanded.cast("long")).alias("expanded"),
        F.sum(F.when(F.col("depth") == 0, F.col("leaves"))).alias("distinct_facts"),
        F.sum(F.length("prefix") + F.length("node")).alias("bytes"),
        F.sum(F.length("node")).alias("node_bytes"),
        F.max("depth").alias("max_depth"),
    ).collect()[0]
    n_rows = int(agg["rows"] or 0)
    n_expanded = int(agg["expanded"] or 0)
    return {
        "rows": n_rows,
        "rows_by_kind": {"expanded": n_expanded, "subtree": n_rows - n_expanded},
        "distinct_facts": int(agg["distinct_facts"] or 0),
        "bytes": int(agg["bytes"] or 0),
        "node_bytes": int(agg["node_bytes"] or 0),
        "max_depth": int(agg["max_depth"] or 0),
    }


def run(spark: SparkSession, cfg: Config) -> dict:
    """Build the rows of every configured vocabulary; returns counts per vocabulary."""
    depth, threshold = cfg.tree.depth, cfg.tree.subtree_threshold
    result: dict[str, Any] = {"depth": depth, "subtree_threshold": threshold,
                              "format_version": fmt.FORMAT_VERSION, "vocabularies": {}}
    for vocab in cfg.tokenize.vocabularies:
        src = cfg.stage_dir("tokenize") / vocab.name / "tokens"
        out = cfg.stage_dir(STAGE) / vocab.name / "rows"
        tokens = spark.read.parquet(str(src))
        counts = input_counts(tokens)
        cached: list[DataFrame] = []
        prefix_rows(tokens, depth, threshold, cached).write.mode("overwrite").parquet(str(out))
        for frame in cached:
            frame.unpersist()
        counts.update(output_counts(spark.read.parquet(str(out)), depth, threshold))
        counts["rows_per_fact"] = counts["rows"] / max(counts["distinct_facts"], 1)
        counts["bytes_per_fact"] = counts["bytes"] / max(counts["distinct_facts"], 1)
        counts["duplicate_facts"] = counts["facts"] - counts["rejected"] - counts["distinct_facts"]
        counts["path"] = str(out)
        log.info("prefix rows %s: %s", vocab.name, counts)
        write_counts(cfg, STAGE, counts, name=f"{vocab.name}/counts.json")
        result["vocabularies"][vocab.name] = counts
    write_counts(cfg, STAGE, result)
    return result
