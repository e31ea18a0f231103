"""Stage 3, labels: one display label per entity.

Items: the English Wikipedia title (``sitelinks``), else ``label (description)``
from the dump's terms, else the item is dropped (counted). Properties: their
plain label (``date of birth``): they are not Wikipedia articles.

Collisions (one label shared by several entities, counted among items and among
properties separately) follow ``labels.collision_policy``:
``keep`` keeps every entity with the shared label; ``drop`` drops them all;
``qualify`` appends `` (Qid)`` to each colliding label, which makes it unique.
Collisions are written to ``labels/collisions`` (label, entities, n).
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from refactx_pipeline.config import Config
from refactx_index.errors import ConfigError

from refactx_pipeline.common import remove_tree, stage_input, write_counts
from refactx_pipeline.stages.schemas import LABELS

log = logging.getLogger(__name__)

POLICIES = ("keep", "drop", "qualify")


def candidate_labels(
    entities: DataFrame, terms: DataFrame, properties: DataFrame, sitelinks: DataFrame | None, lang: str
) -> DataFrame:
    """(entity, label, label_source) per entity of ``entities`` that has one;
    entities without a label get a null label (source ``none``)."""
    first_term = lambda kind: (  # noqa: E731 -- one deterministic term per entity and kind
        terms.where((F.col("kind") == kind) & (F.col("lang") == lang))
        .groupBy("entity")
        .agg(F.min("value").alias(kind))
    )
    df = entities.join(first_term("label"), "entity", "left").join(first_term("description"), "entity", "left")
    df = df.join(
        properties.select(F.col("property").alias("entity"), F.col("label").alias("property_label")), "entity", "left"
    )
    if sitelinks is not None:
        df = df.join(sitelinks.select("entity", F.col("title").alias("wikipedia")), "entity", "left")
    else:
        df = df.withColumn("wikipedia", F.lit(None).cast("string"))
    is_property = F.col("entity").startswith("P")
    label_description = F.concat(F.col("label"), F.lit(" ("), F.col("description"), F.lit(")"))
    chosen = (
        F.when(is_property, F.struct(F.coalesce("property_label", "label").alias("l"), F.lit("label").alias("s")))
        .when(F.col("wikipedia").isNotNull(), F.struct(F.col("wikipedia").alias("l"), F.lit("wikipedia").alias("s")))
        .when(
            F.col("label").isNotNull() & F.col("description").isNotNull(),
            F.struct(label_description.alias("l"), F.lit("label_description").alias("s")),
        )
    )
    return df.select(
        "entity",
        chosen["l"].alias("label"),
        F.coalesce(F.when(chosen["l"].isNotNull(), chosen["s"]), F.lit("none")).alias("label_source"),
    )


def apply_collision_policy(labels: DataFrame, policy: str) -> tuple[DataFrame, DataFrame]:
    """(labels after ``policy``, collisions) for non-null candidate labels."""
    if policy not in POLICIES:
        raise ConfigError(f"labels.collision_policy {policy!r}: expected one of {', '.join(POLICIES)}")
    namespace = F.substring("entity", 1, 1)  # items collide with items, properties with properties
    groups = labels.groupBy(namespace.alias("namespace"), "label").agg(
        F.sort_array(F.collect_list("entity")).alias("entities"), F.count("*").cast("int").alias("n")
    )
    collisions = groups.where(F.col("n") > 1)
    colliding = collisions.select("namespace", "label", F.lit(True).alias("collides"))
    marked = labels.withColumn("namespace", namespace).join(colliding, ["namespace", "label"], "left")
    collides = F.coalesce(F.col("collides"), F.lit(False))
    if policy == "drop":
        result = marked.where(~collides)
    elif policy == "qualify":
        result = marked.withColumn(
            "label", F.when(collides, F.concat("label", F.lit(" ("), F.col("entity"), F.lit(")"))).otherwise(F.col("label"))
        )
    else:
        result = marked
    return result.select("entity", "label", "label_source"), collisions.select("label", "entities", "n")


def entities_to_label(statements: DataFrame, terms: DataFrame, properties: DataFrame) -> DataFrame:
    """Every entity the later stages may mention: statement subjects, item objects,
    properties, and entities with terms."""
    return (
        statements.select(F.col("subject").alias("entity"))
        .union(statements.where(F.col("object_item").isNotNull()).select(F.col("object_item").alias("entity")))
        .union(statements.select(F.col("property").alias("entity")))
        .union(terms.select("entity"))
        .union(properties.select(F.col("property").alias("entity")))
        .distinct()
    )


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Write ``labels/labels`` and ``labels/collisions`` from parse (and sitelinks, when configured)."""
    out = cfg.stage_dir("labels")
    statements = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "statements")))
    terms = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "terms")))
    properties = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "properties")))
    sitelinks = None
    # only sitelinks this config asked for: a stale sitelinks/ from another config is ignored
    if cfg.input.sitelinks_source():
        sitelinks = spark.read.parquet(str(stage_input(cfg, "labels", "sitelinks", "sitelinks")))
    lang = cfg.filter.languages[0]

    candidates = candidate_labels(entities_to_label(statements, terms, properties), terms, properties, sitelinks, lang)
    candidates.write.mode("overwrite").parquet(str(out / "_candidates"))
    candidates = spark.read.parquet(str(out / "_candidates"))
    labelled = candidates.where(F.col("label").isNotNull())
    labels, collisions = apply_collision_policy(labelled, cfg.labels.collision_policy)
    labels.select([F.col(f.name) for f in LABELS.fields]).write.mode("overwrite").parquet(str(out / "labels"))
    collisions.write.mode("overwrite").parquet(str(out / "collisions"))

    by_source = {r["label_source"]: r["count"] for r in candidates.groupBy("label_source").count().collect()}
    collisions = spark.read.parquet(str(out / "collisions"))
    agg = collisions.agg(F.count("*").alias("labels"), F.sum("n").alias("entities")).first()
    counts: dict[str, Any] = {
        "entities_in": sum(by_source.values()),
        "labels": spark.read.parquet(str(out / "labels")).count(),
        "labels_by_source": {k: v for k, v in sorted(by_source.items()) if k != "none"},
        "dropped_without_label": by_source.get("none", 0),
        "collision_policy": cfg.labels.collision_policy,
        "colliding_labels": agg["labels"] or 0,
        "colliding_entities": agg["entities"] or 0,
        "sitelinks_used": sitelinks is not None,
    }
    remove_tree(spark, out / "_candidates")
    write_counts(cfg, "labels", counts)
    log.info("labels: %s", counts)
    return counts
