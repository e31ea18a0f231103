"""Stage 3, labels: one display label per entity.

Items: the English Wikipedia title (``sitelinks``), else ``label (description)``
from the dump's terms, else the item is dropped (counted). Properties: their
plain label (``date of birth``): they are not Wikipedia articles.

Collisions (one label shared by several entities, counted among items and among
properties separately) follow ``labels.collision_policy``:

* ``disambiguate`` (the default): each colliding entity gets the first of these that sets it
  apart from the others sharing its label: its description (``label (description)``, for a
  title or a plain label that does not hold it yet); a distinguishing property
  (``label (country: Egypt)``: the first of ``labels.distinguishing_properties`` whose value
  no other entity of the collision has); its id (``label (Q42)``), the last resort and the
  choice for any label that would still be shared. Every label becomes unique, so facts of
  different entities never merge under one subject;
* ``keep``: every entity keeps the shared label (their facts read as one entity's, and
  identical fact texts merge);
* ``drop``: every colliding entity is dropped, with its facts;
* ``qualify``: `` (Qid)`` appended to each colliding label.

Collisions are written to ``labels/collisions`` (label, entities, n); the counts say what the
policy did with them (``collision_outcome``: entities per choice) and how many labels are
still shared after it (``labels_still_shared``).
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame, Observation, Window
from pyspark.sql import functions as F

from refactx_index.errors import ConfigError

from refactx_pipeline.common import observe_outcomes, remove_tree, stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import LABELS
from refactx_pipeline.stages.verbalize import render_object

log = logging.getLogger(__name__)

POLICIES = ("disambiguate", "keep", "drop", "qualify")
# what ``candidate_labels`` chose an entity's label from (``none``: it has none)
LABEL_SOURCES = ("wikipedia", "label_description", "label", "none")
# what a colliding entity's label became (``resolved_by``; null for one that did not collide)
RESOLUTIONS = ("description", "property", "entity_id", "kept_shared")


def candidate_labels(
    entities: DataFrame, terms: DataFrame, properties: DataFrame, sitelinks: DataFrame | None, lang: str
) -> DataFrame:
    """(entity, label, label_source) per entity of ``entities`` (repeats allowed) that has one;
    entities without a label get a null label (source ``none``).

    One shuffle: the entities and every source's values, as rows of one union, grouped by
    entity. A join per source cost a shuffle and a Spark job each, a fixed cost that was most
    of this stage at 1M facts. A value is the smallest of its source's for the entity (one
    deterministic term per entity and kind); only entities of ``entities`` are kept."""
    none = F.lit(None).cast("string")
    in_lang = F.col("lang") == lang

    def rows(frame: DataFrame, listed: bool, label=none, description=none, property_label=none,
             wikipedia=none) -> DataFrame:
        return frame.select("entity", F.lit(listed).alias("listed"), label.alias("label"),
                            description.alias("description"), property_label.alias("property_label"),
                            wikipedia.alias("wikipedia"))

    sources = [
        rows(entities, True),
        rows(terms.where(in_lang & F.col("kind").isin("label", "description")), False,
             label=F.when(F.col("kind") == "label", F.col("value")),
             description=F.when(F.col("kind") == "description", F.col("value"))),
        rows(properties.withColumnRenamed("property", "entity"), False, property_label=F.col("label")),
    ]
    if sitelinks is not None:
        sources.append(rows(sitelinks, False, wikipedia=F.col("title")))
    df = functools.reduce(DataFrame.union, sources).groupBy("entity").agg(
        F.max("listed").alias("listed"),
        *[F.min(name).alias(name) for name in ("label", "description", "property_label", "wikipedia")],
    ).where(F.col("listed"))
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
        "description",  # what ``disambiguate`` tells colliding entities apart by first
    )


def distinguishing_values(entities: DataFrame, statements: DataFrame, terms: DataFrame,
                          properties: DataFrame, order: Sequence[str], lang: str) -> DataFrame:
    """(entity, rank, qualifier) for each of ``entities`` and each property of ``order`` it has
    a statement of: ``rank`` the property's place in ``order`` (1 first), ``qualifier``
    ``property label: value`` with the value as a fact writes it (an item by its plain label;
    the smallest value when there are several)."""
    if not order:
        return entities.select("entity", F.lit(0).alias("rank"), F.lit("").alias("qualifier")).limit(0)
    plain_label = (terms.where((F.col("kind") == "label") & (F.col("lang") == lang))
                   .groupBy("entity").agg(F.min("value").alias("plain_label")))
    rank = F.array_position(F.array(*[F.lit(p) for p in order]), F.col("property")).cast("int")
    stated = (
        statements.where(F.col("property").isin(list(order)))
        .join(entities.select(F.col("entity").alias("subject")), "subject")
        .join(plain_label.withColumnRenamed("entity", "object_item"), "object_item", "left")
        .select(F.col("subject").alias("entity"), "property", rank.alias("rank"),
                render_object(F.col("object_kind"), F.col("object_value"), F.col("plain_label")).alias("value"))
        .where(F.col("value").isNotNull())
        .groupBy("entity", "property", "rank").agg(F.min("value").alias("value"))
    )
    names = properties.select("property", F.col("label").alias("property_label"))
    return stated.join(names, "property", "left").select(
        "entity", "rank",
        F.concat(F.coalesce("property_label", "property"), F.lit(": "), F.col("value")).alias("qualifier"),
    )


def disambiguate(marked: DataFrame, qualifiers_of: Callable[[DataFrame], DataFrame] | None) -> DataFrame:
    """``marked`` (entity, label, label_source, description, namespace, collides) with each
    colliding label made unique (see the module docstring) and ``resolved_by`` (description,
    property, entity_id; null for a label that did not collide). ``qualifiers_of(entities)``:
    (entity, rank, qualifier) of those entities (``distinguishing_values``); None: none."""
    group = ["namespace", "label"]
    colliding = marked.where(F.col("collides")).withColumn("shared", F.col("label"))
    by_description = F.when(
        (F.col("label_source") != "label_description") & F.col("description").isNotNull()
        & (F.col("description") != ""),
        F.concat(F.col("label"), F.lit(" ("), F.col("description"), F.lit(")")))
    colliding = colliding.withColumn("by_description", by_description).withColumn(
        "description_unique",
        F.col("by_description").isNotNull()
        & (F.count("*").over(Window.partitionBy(*group, "by_description")) == 1))
    # a property value held by this entity alone among those sharing its label; the first in order
    values = colliding.select("entity", *group)
    if qualifiers_of is None:
        values = values.select("*", F.lit(0).alias("rank"), F.lit("").alias("qualifier")).limit(0)
    else:
        values = values.join(qualifiers_of(colliding.select("entity")), "entity")
    unique = values.withColumn("holders", F.count("*").over(Window.partitionBy(*group, "rank", "qualifier")))
    best = (unique.where(F.col("holders") == 1).groupBy("entity")
            .agg(F.min(F.struct("rank", "qualifier"))["qualifier"].alias("by_property")))
    colliding = colliding.join(best, "entity", "left")
    by_id = F.concat(F.col("shared"), F.lit(" ("), F.col("entity"), F.lit(")"))
    resolved = colliding.select(
        "entity", "label_source", "description", "namespace", "collides", "shared",
        F.when(F.col("description_unique"), F.col("by_description"))
        .when(F.col("by_property").isNotNull(), F.concat(F.col("shared"), F.lit(" ("), F.col("by_property"), F.lit(")")))
        .otherwise(by_id).alias("label"),
        F.when(F.col("description_unique"), F.lit("description"))
        .when(F.col("by_property").isNotNull(), F.lit("property"))
        .otherwise(F.lit("entity_id")).alias("resolved_by"),
    )
    untouched = marked.where(~F.col("collides")).select(
        "entity", "label_source", "description", "namespace", "collides",
        F.lit(None).cast("string").alias("shared"), "label", F.lit(None).cast("string").alias("resolved_by"))
    # a new label that another entity already has (a title equal to `label (description)`):
    # the id settles it
    together = untouched.unionByName(resolved).withColumn(
        "clash", F.count("*").over(Window.partitionBy(*group)) > 1)
    settle = F.col("clash") & F.col("resolved_by").isin("description", "property")
    return together.select(
        "entity", "label_source", "description", "namespace", "collides",
        F.when(settle, by_id).otherwise(F.col("label")).alias("label"),
        F.when(settle, F.lit("entity_id")).otherwise(F.col("resolved_by")).alias("resolved_by"),
    )


def apply_collision_policy(labels: DataFrame, policy: str,
                           qualifiers_of: Callable[[DataFrame], DataFrame] | None = None
                           ) -> tuple[DataFrame, DataFrame]:
    """(labels after ``policy``, collisions) for non-null candidate labels (entity, label,
    label_source, description). The labels carry ``resolved_by``: what became of a colliding
    entity's label (``disambiguate``: description, property, entity_id; ``qualify``:
    entity_id; ``keep``: kept_shared), null for the others; ``qualifiers_of`` gives what
    ``disambiguate`` may tell the colliding entities apart by (see ``disambiguate``)."""
    if policy not in POLICIES:
        raise ConfigError(f"labels.collision_policy {policy!r}: expected one of {', '.join(POLICIES)}")
    namespace = F.substring("entity", 1, 1)  # items collide with items, properties with properties
    groups = labels.groupBy(namespace.alias("namespace"), "label").agg(
        F.sort_array(F.collect_list("entity")).alias("entities"), F.count("*").cast("int").alias("n")
    )
    collisions = groups.where(F.col("n") > 1)
    colliding = collisions.select("namespace", "label", F.lit(True).alias("collides"))
    marked = (labels.withColumn("namespace", namespace).join(colliding, ["namespace", "label"], "left")
              .withColumn("collides", F.coalesce(F.col("collides"), F.lit(False))))
    collides = F.col("collides")
    if policy == "drop":
        result = marked.where(~collides).withColumn("resolved_by", F.lit(None).cast("string"))
    elif policy == "qualify":
        result = marked.select(
            "*",
            F.when(collides, F.concat("label", F.lit(" ("), F.col("entity"), F.lit(")"))).otherwise(F.col("label")).alias("qualified"),
            F.when(collides, F.lit("entity_id")).alias("resolved_by"),
        ).drop("label").withColumnRenamed("qualified", "label")
    elif policy == "disambiguate":
        result = disambiguate(marked, qualifiers_of)
    else:
        result = marked.withColumn("resolved_by", F.when(collides, F.lit("kept_shared")))
    return (result.select("entity", "label", "label_source", "resolved_by"),
            collisions.select("label", "entities", "n"))


def entities_to_label(statements: DataFrame, terms: DataFrame, properties: DataFrame) -> DataFrame:
    """Every entity the later stages may mention: statement subjects, item objects,
    properties, and entities with terms; with repeats (``candidate_labels`` groups them)."""
    return (
        statements.select(F.col("subject").alias("entity"))
        .union(statements.where(F.col("object_item").isNotNull()).select(F.col("object_item").alias("entity")))
        .union(statements.select(F.col("property").alias("entity")))
        .union(terms.select("entity"))
        .union(properties.select(F.col("property").alias("entity")))
    )


def run(ctx: StageContext) -> StageCounts:
    """Write ``labels/labels`` and ``labels/collisions`` from parse (and sitelinks, when configured)."""
    spark, cfg = ctx.spark, ctx.cfg
    out = cfg.stage_dir("labels")
    statements = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "statements")))
    terms = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "terms")))
    properties = spark.read.parquet(str(stage_input(cfg, "labels", "parse", "properties")))
    sitelinks = None
    # only sitelinks this config asked for: a stale sitelinks/ from another config is ignored
    if cfg.input.sitelinks_source():
        sitelinks = spark.read.parquet(str(stage_input(cfg, "labels", "sitelinks", "sitelinks")))
    lang = cfg.filter.languages[0]

    # Each output is counted by its own write (``observe_outcomes``), not by another job.
    candidates = candidate_labels(entities_to_label(statements, terms, properties), terms, properties, sitelinks, lang)
    source = F.col("label_source")
    candidates, candidates_counted = observe_outcomes(
        candidates, {name: source == name for name in LABEL_SOURCES}, exhaustive=True)
    candidates.write.mode("overwrite").parquet(str(out / "_candidates"))
    by_source = {name: n for name, n in candidates_counted().by_outcome.items() if n}
    candidates = spark.read.parquet(str(out / "_candidates"))
    labelled = candidates.where(F.col("label").isNotNull())
    policy = cfg.labels.collision_policy
    labels, collisions = apply_collision_policy(
        labelled, policy,
        lambda colliding: distinguishing_values(colliding, statements, terms, properties,
                                                cfg.labels.distinguishing_properties, lang))
    resolved_by = F.col("resolved_by")
    labels, labels_counted = observe_outcomes(
        labels, {"": resolved_by.isNull(), **{name: resolved_by == name for name in RESOLUTIONS}}, exhaustive=True)
    labels.select([F.col(f.name) for f in LABELS.fields]).write.mode("overwrite").parquet(str(out / "labels"))
    resolved = labels_counted()
    outcome = {name: n for name, n in resolved.by_outcome.items() if name and n}
    collided = Observation("collisions")
    collisions.observe(collided, F.count(F.lit(1)).alias("labels"), F.sum("n").alias("entities")).write.mode(
        "overwrite").parquet(str(out / "collisions"))
    colliding_labels, colliding_entities = collided.get["labels"] or 0, collided.get["entities"] or 0
    still_shared = (spark.read.parquet(str(out / "labels")).groupBy(F.substring("entity", 1, 1), "label").count()
                    .where(F.col("count") > 1).count())

    counts: dict[str, Any] = {
        "entities_in": sum(by_source.values()),
        "labels": resolved.rows,
        "labels_by_source": {k: v for k, v in sorted(by_source.items()) if k != "none"},
        "dropped_without_label": by_source.get("none", 0),
        "collision_policy": policy,
        "colliding_labels": colliding_labels,
        "colliding_entities": colliding_entities,
        # what the policy did with each colliding entity (drop: dropped them all)
        "collision_outcome": dict(sorted(outcome.items())) if policy != "drop"
        else {"dropped": colliding_entities},
        "labels_still_shared": still_shared,
        "sitelinks_used": sitelinks is not None,
    }
    remove_tree(spark, out / "_candidates")
    write_counts(cfg, "labels", counts)
    log.info("labels: %s", counts)
    return counts
