"""The paths stage (a path build, ``path_index.enabled``): reasoning paths from seed entities.

GCR's KG-Trie, built by the pipeline: every simple path (no entity twice) of 1..L edges
(``path_index.max_hops``) that starts at a seed entity, over the statements the verbalize
stage keeps (its own ``resolve_statements``) and, with ``verbalize.inverse``, their inverse
facts. A path is written ``A -> r -> B -> r2 -> C .`` (``path_index.separator`` and
``path_index.end``) with the display labels and rendered objects of the facts; a literal
object (a date, a number) ends a path. The texts go on to tokenize ... activate unchanged.

Seeds (a union): the ids of ``path_index.seeds_file`` (one per line), the ids under
``path_index.questions_field`` of the lines of ``path_index.questions_file`` (JSON Lines),
and, with ``path_index.min_facts`` = k > 0, every entity that is the subject of at least k
kept statements. A seed with no display label is counted (``seeds.unknown``), not used.

Caps, applied the same way by the runtime's ``refactx_index.prompting.paths`` and by the tests' oracle:

* ``max_fanout`` F: a node's out-edges are ranked by (relation label, target label, target
  id) and only the first F are followed. A path that reaches a node with d > F out-edges
  counts d - F paths capped by ``fanout`` (their own extensions are never enumerated).
* an edge to an entity already on the path is not a path (``not_simple``, not a cap).
* ``max_paths`` P per seed: each hop's new paths of a seed are ranked by text and kept
  while the seed holds fewer than P paths; the rest count as capped by ``max_paths`` and are
  not extended.

Hubs (Q5 "human" has ~10M incoming statements; its inverse edges make it a source of
10M): a node's first F edges are chosen in two windows, first per (node, salt) over a hash of
the edge, then per node over at most ``_SALTS`` x F rows, so no task holds a hub's edges;
the out-degree is an aggregation. Every hop is one join of the frontier with the capped
edges, written to Parquet before the next (no lineage grows with L); adaptive query
execution splits a join partition that many frontier paths share (a hub reached from many
seeds). No Python UDF: joins, windows and expressions only.

Outputs: ``paths/paths`` (schema FACTS, kind ``path``) and ``paths/counts.json``.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from refactx_pipeline.common import ingest_stage, remove_tree, stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.config import PathIndexConfig, VerbalizeConfig
from refactx_pipeline.errors import ConfigError
from refactx_pipeline.stages.schemas import FACTS
from refactx_pipeline.stages.verbalize import (
    drop_id_collisions,
    label_table,
    property_label_table,
    resolve_statements,
)

log = logging.getLogger(__name__)

STAGE = "paths"
KIND = "path"
# the first window that ranks a node's edges works per (node, salt): a hub's edges spread
# over this many tasks, each keeping at most max_fanout of them
_SALTS = 32
OUTCOMES = ("kept", "not_simple", "max_paths")


# ---------------------------------------------------------------- the graph
def path_edges(resolved: DataFrame, vcfg: VerbalizeConfig) -> DataFrame:
    """(src, relation, dst, dst_label) of every kept statement (dst null for a literal, whose
    dst_label is its rendered text), plus inverse edges of item statements with an inverse
    label when ``verbalize.inverse`` is on; distinct."""
    kept = resolved.where(F.col("drop_reason").isNull())
    forward = kept.select(
        F.col("subject").alias("src"),
        F.col("property_label").alias("relation"),
        F.when(F.col("object_kind") == "item", F.col("object_item")).alias("dst"),
        F.col("object_text").alias("dst_label"),
    )
    edges = forward
    if vcfg.inverse and vcfg.inverse_labels:
        pairs = [F.lit(x) for pid, label in sorted(vcfg.inverse_labels.items()) for x in (pid, label.strip())]
        inverse_label = F.create_map(*pairs)[F.col("property")]
        inverse = kept.where((F.col("object_kind") == "item") & inverse_label.isNotNull()).select(
            F.col("object_item").alias("src"),
            inverse_label.alias("relation"),
            F.col("subject").alias("dst"),
            F.col("subject_label").alias("dst_label"),
        )
        edges = edges.unionByName(inverse)
    return edges.dropDuplicates(["src", "relation", "dst", "dst_label"])


def _edge_order() -> list[Column]:
    # the documented choice of a capped node's edges; dst null (a literal) sorts first
    return [F.col("relation"), F.col("dst_label"), F.col("dst").asc_nulls_first()]


def capped_edges(edges: DataFrame, max_fanout: int) -> tuple[DataFrame, DataFrame]:
    """(the followed edges: each node's first ``max_fanout`` by (relation, dst_label, dst),
    (src, over): the nodes with more out-edges and by how many)."""
    salted = edges.withColumn("salt", F.pmod(F.xxhash64("relation", "dst_label", "dst"), F.lit(_SALTS)))
    in_salt = salted.withColumn(
        "rank", F.row_number().over(Window.partitionBy("src", "salt").orderBy(*_edge_order()))
    ).where(F.col("rank") <= max_fanout)
    followed = in_salt.withColumn(
        "rank", F.row_number().over(Window.partitionBy("src").orderBy(*_edge_order()))
    ).where(F.col("rank") <= max_fanout).select("src", "relation", "dst", "dst_label")
    over = (
        edges.groupBy("src").count()
        .where(F.col("count") > max_fanout)
        .select("src", (F.col("count") - max_fanout).alias("over"))
    )
    return followed, over


# ---------------------------------------------------------------- seeds
_CORRUPT = "_corrupt_record"


def read_seeds(spark: SparkSession, pcfg: PathIndexConfig, statements_kept: DataFrame) -> tuple[DataFrame, int]:
    """((seed) distinct: the union of the configured sources (module doc), the number of
    question lines that are not JSON objects: counted, not used)."""
    parts: list[DataFrame] = []
    malformed = 0
    if pcfg.seeds_file:
        lines = spark.read.text(pcfg.seeds_file)
        parts.append(lines.select(F.trim("value").alias("seed")).where(F.col("seed") != ""))
    if pcfg.questions_file:
        # cached: Spark refuses a query of a raw JSON file's corrupt-record column alone
        questions = spark.read.json(pcfg.questions_file, mode="PERMISSIVE",
                                    columnNameOfCorruptRecord=_CORRUPT).cache()
        if _CORRUPT in questions.columns:
            malformed = questions.where(F.col(_CORRUPT).isNotNull()).count()
        if pcfg.questions_field not in questions.columns:
            raise ConfigError(f"path_index.questions_file {pcfg.questions_file}: no line has the field "
                              f"{pcfg.questions_field!r} (path_index.questions_field)")
        parts.append(questions.select(F.explode_outer(F.col(pcfg.questions_field)).alias("seed"))
                     .where(F.col("seed").isNotNull()).select(F.trim("seed").alias("seed")))
    if pcfg.min_facts:
        parts.append(statements_kept.groupBy(F.col("subject").alias("seed")).count()
                     .where(F.col("count") >= pcfg.min_facts).select("seed"))
    if not parts:
        raise ConfigError("a path build needs seeds: set path_index.seeds_file, path_index.questions_file "
                          "or path_index.min_facts")
    seeds = parts[0]
    for part in parts[1:]:
        seeds = seeds.unionByName(part)
    return seeds.distinct(), malformed


# ---------------------------------------------------------------- enumeration
def extend(frontier: DataFrame, followed: DataFrame, separator: str) -> DataFrame:
    """Every one-edge extension of ``frontier`` (seed, nodes, last, text) by a followed edge,
    with ``simple``: whether its target is not on the path already."""
    joined = frontier.join(followed, frontier["last"] == followed["src"])
    simple = ~F.coalesce(F.array_contains(F.col("nodes"), F.col("dst")), F.lit(False))
    return joined.select(
        "seed",
        F.concat("nodes", F.array("dst")).alias("nodes"),
        F.col("dst").alias("last"),
        F.concat("text", F.lit(separator), "relation", F.lit(separator), "dst_label").alias("text"),
        simple.alias("simple"),
    )


def budgeted(extended: DataFrame, held: DataFrame, max_paths: int) -> DataFrame:
    """``extended`` with ``outcome``: kept, not_simple, or max_paths (a seed's simple paths
    beyond what its budget, ``max_paths`` minus the ``held`` paths of earlier hops, leaves,
    ranked by text)."""
    simple = extended.where("simple").join(held, "seed", "left")
    rank = F.row_number().over(Window.partitionBy("seed").orderBy("text"))
    ranked = simple.withColumn(
        "outcome",
        F.when(rank <= F.lit(max_paths) - F.coalesce(F.col("held"), F.lit(0)), F.lit("kept"))
        .otherwise(F.lit("max_paths")),
    ).drop("held", "simple")
    dead = extended.where(~F.col("simple")).drop("simple").withColumn("outcome", F.lit("not_simple"))
    return ranked.unionByName(dead)


def enumerate_paths(
    spark: SparkSession,
    seeds: DataFrame,
    labels: DataFrame,
    edges: DataFrame,
    pcfg: PathIndexConfig,
    work_dir,
) -> tuple[DataFrame, dict[str, Any]]:
    """(every kept path: seed, hops, text without the end; counts), one hop at a time, each
    hop's paths written under ``work_dir`` before the next."""
    entity_labels = label_table(labels)
    known = seeds.join(entity_labels.withColumnRenamed("entity", "seed"), "seed", "left")
    frontier = known.where(F.col("label").isNotNull()).select(
        "seed", F.array("seed").alias("nodes"), F.col("seed").alias("last"), F.col("label").alias("text")
    )
    seeds_total = known.count()
    seeds_used = frontier.count()
    followed, over = capped_edges(edges, pcfg.max_fanout)
    followed = followed.cache()
    held = spark.createDataFrame([], "seed string, held long")
    capped = {"fanout": 0, "max_paths": 0}
    not_simple = 0
    by_hops: dict[str, int] = {}
    hop_paths: list[DataFrame] = []
    for hop in range(1, pcfg.max_hops + 1):
        fanout = frontier.join(over, frontier["last"] == over["src"]).agg(F.sum("over")).first()[0]
        capped["fanout"] += int(fanout or 0)
        out = work_dir / f"hop={hop}"
        budgeted(extend(frontier, followed, pcfg.separator), held, pcfg.max_paths) \
            .write.mode("overwrite").parquet(str(out))
        written = spark.read.parquet(str(out))
        outcomes = {r["outcome"]: int(r["count"]) for r in written.groupBy("outcome").count().collect()}
        capped["max_paths"] += outcomes.get("max_paths", 0)
        not_simple += outcomes.get("not_simple", 0)
        by_hops[str(hop)] = outcomes.get("kept", 0)
        frontier = written.where(F.col("outcome") == "kept").drop("outcome")
        hop_paths.append(frontier.select("seed", F.lit(hop).alias("hops"), "text"))
        new_held = frontier.groupBy("seed").agg(F.count("*").alias("n"))
        held = held.join(new_held, "seed", "full").select(
            "seed", (F.coalesce("held", F.lit(0)) + F.coalesce("n", F.lit(0))).alias("held")
        )
        if not by_hops[str(hop)]:
            break
    followed.unpersist()
    paths = hop_paths[0]
    for part in hop_paths[1:]:
        paths = paths.unionByName(part)
    counts = {
        "seeds": {"given": seeds_total, "used": seeds_used, "unknown": seeds_total - seeds_used},
        "paths_by_hops": by_hops,
        "capped": capped,
        "not_simple": not_simple,
    }
    return paths, counts


def path_facts(paths: DataFrame, end: str) -> DataFrame:
    """One FACTS row per distinct path text (``end`` appended); ``fact_id = xxhash64(text)``."""
    texts = paths.select(F.concat("text", F.lit(end)).alias("text")).distinct()
    return texts.select(
        F.xxhash64("text").alias("fact_id"),
        "text",
        F.lit(KIND).alias("kind"),
        F.lit(None).cast("string").alias("property"),
    )


# ---------------------------------------------------------------- job
def run(ctx: StageContext) -> StageCounts:
    """Read parse's statements and labels, write paths/paths and counts.json."""
    spark, cfg = ctx.spark, ctx.cfg
    pcfg = cfg.path_index
    first = ingest_stage(cfg)
    statements = spark.read.parquet(str(stage_input(cfg, STAGE, "parse", "statements", written_by=first)))
    labels_by = first if first == "graph" else "labels"
    labels = spark.read.parquet(str(stage_input(cfg, STAGE, "labels", "labels", written_by=labels_by)))
    properties_dir = cfg.stage_dir("parse") / "properties"
    properties = spark.read.parquet(str(properties_dir)) if properties_dir.exists() else None
    resolved = resolve_statements(statements, labels, property_label_table(labels, properties))
    kept_statements = resolved.where(F.col("drop_reason").isNull())

    work = cfg.stage_dir(STAGE) / "_hops"
    seeds, malformed_questions = read_seeds(spark, pcfg, kept_statements)
    paths, counts = enumerate_paths(spark, seeds, labels, path_edges(resolved, cfg.verbalize), pcfg, work)
    counts["seeds"]["malformed_question_lines"] = malformed_questions
    staged = cfg.stage_dir(STAGE) / "_distinct"
    path_facts(paths, pcfg.end).write.mode("overwrite").parquet(str(staged))
    kept, _ = drop_id_collisions(spark.read.parquet(str(staged)))
    out = cfg.stage_dir(STAGE) / "paths"
    kept.select(*FACTS.fieldNames()).write.mode("overwrite").parquet(str(out))
    distinct = spark.read.parquet(str(staged)).count()
    written = spark.read.parquet(str(out)).count()
    remove_tree(spark, staged)
    remove_tree(spark, work)
    counts.update({
        "max_hops": pcfg.max_hops,
        "max_fanout": pcfg.max_fanout,
        "max_paths": pcfg.max_paths,
        "paths": sum(counts["paths_by_hops"].values()),
        "distinct_texts": distinct,
        "written": written,
        "dropped": {"fact_id_collision": distinct - written} if distinct != written else {},
    })
    write_counts(cfg, STAGE, counts)
    log.info("paths: %d written from %d seeds, capped %s", written, counts["seeds"]["used"], counts["capped"])
    return counts
