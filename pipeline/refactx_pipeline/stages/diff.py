"""The diff of two builds: which verbalized facts a build added, removed and re-labelled
against a previous build (issue 55: the base of an incremental build).

A fact is a distinct text (``verbalize/facts``); what it was read from is its provenance
(``verbalize/provenance``: one row per source, a statement's ``kind, subject, property,
object, value`` or an entity's description). A fact of the new build that the previous one
does not hold is either

* ``relabelled_added``: one of its sources was a source of the previous build too, under
  another text. The source did not change, so a label did: a label change rewrites every
  fact that names the entity (``<label (description)> ...``), and a description change
  rewrites every fact of an entity labelled by it;
* ``added``: none of its sources was in the previous build (a statement added, an entity
  created or newly labelled, a description changed: the description is the source's value).

A fact of the previous build that the new one does not hold is ``relabelled_removed`` (one of
its sources is in the new build, under another text) or ``removed``. So, as sets of texts,
new = previous - removed - relabelled_removed + added + relabelled_added, which
:func:`check_counts` verifies. Which entities' labels changed, and how many re-labelled facts
name each, comes from the two builds' ``labels/labels`` (:func:`relabelled_entities`).

Pure DataFrame functions (the tests call them on a local session); :func:`run` reads the two
work directories and writes ``diff/changes`` (schema ``CHANGES``: one row per fact added or
removed), ``diff/relabelled_entities`` (schema ``RELABELLED_ENTITIES``) and
``diff/counts.json`` (:func:`diff_counts`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from refactx_pipeline.common import write_counts
from refactx_pipeline.errors import StageInputMissing
from refactx_pipeline.stages.contract import StageContext, StageCounts

log = logging.getLogger(__name__)

STAGE = "diff"

# a fact's change, as ``CHANGES.change`` writes it
ADDED, REMOVED = "added", "removed"
RELABELLED_ADDED, RELABELLED_REMOVED = "relabelled_added", "relabelled_removed"
CHANGE_KINDS = (ADDED, REMOVED, RELABELLED_ADDED, RELABELLED_REMOVED)

# what identifies a source across builds: every PROVENANCE column but the fact it makes
SOURCE_KEY = ("kind", "subject", "property", "object", "value")

# diff/changes -- one row per fact of either build that the other does not hold
CHANGES = StructType(
    [
        StructField("fact_id", LongType(), False),  # FACTS.fact_id (xxhash64 of the text)
        StructField("text", StringType(), False),
        StructField("kind", StringType(), False),  # FACTS.kind
        StructField("property", StringType(), True),  # FACTS.property
        StructField("change", StringType(), False),  # CHANGE_KINDS
    ]
)

# diff/relabelled_entities -- entities whose display label changed, with the facts it rewrote
RELABELLED_ENTITIES = StructType(
    [
        StructField("entity", StringType(), False),
        StructField("old_label", StringType(), False),
        StructField("new_label", StringType(), False),
        StructField("facts", LongType(), False),  # relabelled_added facts naming the entity
    ]
)

_FACT_COLUMNS = ("fact_id", "text", "kind", "property")


def _with_source_elsewhere(provenance: DataFrame, other: DataFrame) -> DataFrame:
    """The distinct ``fact_id`` of ``provenance`` rows whose source (``SOURCE_KEY``, nulls
    equal) is a source in ``other`` too."""
    mine, theirs = provenance.alias("mine"), other.select(*SOURCE_KEY).alias("theirs")
    same = None
    for column in SOURCE_KEY:
        equal = F.col(f"mine.{column}").eqNullSafe(F.col(f"theirs.{column}"))
        same = equal if same is None else same & equal
    return mine.join(theirs, same, "left_semi").select("fact_id").distinct()


def _one_side(facts: DataFrame, provenance: DataFrame, other_facts: DataFrame, other_provenance: DataFrame,
              plain: str, relabelled: str) -> DataFrame:
    """The ``facts`` the other build does not hold, each marked ``plain`` or ``relabelled``."""
    gone = facts.select(*_FACT_COLUMNS).join(other_facts.select("fact_id", "text"), ["fact_id", "text"], "left_anti")
    sources = provenance.join(gone.select("fact_id"), "fact_id", "left_semi")
    moved = _with_source_elsewhere(sources, other_provenance).withColumn("_moved", F.lit(True))
    return gone.join(moved, "fact_id", "left").select(
        *_FACT_COLUMNS, F.when(F.col("_moved"), F.lit(relabelled)).otherwise(F.lit(plain)).alias("change"))


def diff_facts(old_facts: DataFrame, old_provenance: DataFrame,
               new_facts: DataFrame, new_provenance: DataFrame) -> DataFrame:
    """The facts (schema ``CHANGES``) of either build that the other does not hold, each
    ``added``, ``removed``, ``relabelled_added`` or ``relabelled_removed`` (module docstring).
    Facts are compared by text (and its id); sources by ``SOURCE_KEY``."""
    added = _one_side(new_facts, new_provenance, old_facts, old_provenance, ADDED, RELABELLED_ADDED)
    removed = _one_side(old_facts, old_provenance, new_facts, new_provenance, REMOVED, RELABELLED_REMOVED)
    return added.unionByName(removed)


def label_changes(old_labels: DataFrame, new_labels: DataFrame) -> DataFrame:
    """(entity, old_label, new_label) of the entities labelled in both builds, differently."""
    old = old_labels.select("entity", F.col("label").alias("old_label"))
    new = new_labels.select("entity", F.col("label").alias("new_label"))
    return old.join(new, "entity").where(F.col("old_label") != F.col("new_label"))


def relabelled_entities(changes: DataFrame, new_provenance: DataFrame, labels_changed: DataFrame) -> DataFrame:
    """The entities whose label changed (``label_changes``) and the ``relabelled_added`` facts
    that name them (schema ``RELABELLED_ENTITIES``): a fact names the subject, the item object
    and the property of each of its sources. An entity whose facts did not change (it names
    none) is left out."""
    relabelled = changes.where(F.col("change") == RELABELLED_ADDED).select("fact_id")
    named = (
        new_provenance.join(relabelled, "fact_id", "left_semi")
        .select("fact_id", F.explode(F.array("subject", "object", "property")).alias("entity"))
        .where(F.col("entity").isNotNull())
        .distinct()
    )
    return named.join(labels_changed, "entity").groupBy("entity", "old_label", "new_label").agg(
        F.count("*").alias("facts"))


def diff_counts(changes: DataFrame, facts_before: int, facts_after: int,
                relabelled: DataFrame | None = None) -> dict[str, Any]:
    """The counts of a diff: facts before and after, facts of each change (``CHANGE_KINDS``),
    the same by kind and by property (facts without a property, descriptions, count in
    ``by_kind`` only), and ``relabelled_entities`` (with ``relabelled``, the rows of
    :func:`relabelled_entities`)."""
    totals = dict.fromkeys(CHANGE_KINDS, 0)
    by_kind: dict[str, dict[str, int]] = {}
    by_property: dict[str, dict[str, int]] = {}
    for row in changes.groupBy("change", "kind", "property").count().collect():
        n = int(row["count"])
        totals[row["change"]] += n
        entry = by_kind.setdefault(row["kind"], dict.fromkeys(CHANGE_KINDS, 0))
        entry[row["change"]] += n
        if row["property"] is not None:
            entry = by_property.setdefault(row["property"], dict.fromkeys(CHANGE_KINDS, 0))
            entry[row["change"]] += n
    counts: dict[str, Any] = {
        "facts_before": int(facts_before),
        "facts_after": int(facts_after),
        "unchanged": int(facts_before) - totals[REMOVED] - totals[RELABELLED_REMOVED],
        **totals,
        "by_kind": dict(sorted(by_kind.items())),
        "by_property": dict(sorted(by_property.items(), key=lambda kv: _property_order(kv[0]))),
    }
    if relabelled is not None:
        counts["relabelled_entities"] = relabelled.count()
    return counts


def _property_order(pid: str) -> tuple[int, str]:
    return (int(pid[1:]), pid) if pid[1:].isdigit() else (1 << 62, pid)


def check_counts(counts: dict[str, Any]) -> None:
    """A ``ValueError`` unless the changes account for every fact: after = before - removed
    - relabelled_removed + added + relabelled_added."""
    expected = (counts["facts_before"] - counts[REMOVED] - counts[RELABELLED_REMOVED]
                + counts[ADDED] + counts[RELABELLED_ADDED])
    if expected != counts["facts_after"]:
        raise ValueError(f"diff: {counts['facts_before']} facts before, {counts['facts_after']} after, but the "
                         f"changes account for {expected} ({ {k: counts[k] for k in CHANGE_KINDS} })")


def previous_work_dir(rows_dir: str | Path) -> Path:
    """The work directory of a build from the rows directory its load recorded in the catalog
    (``builds.parquet_path``: ``<work dir>/[path_index/]prefix_rows/<vocabulary>/rows``)."""
    rows = Path(rows_dir)
    stage_dir = rows.parent.parent
    if rows.name != "rows" or stage_dir.name != "prefix_rows":
        raise ValueError(f"{rows}: not the rows directory of a build (<work dir>/prefix_rows/<vocabulary>/rows)")
    work = stage_dir.parent
    return work.parent if work.name == "path_index" else work


def run(ctx: StageContext, previous: str | Path) -> StageCounts:
    """The diff of this run's verbalized facts against those of the build whose work
    directory is ``previous`` (:func:`previous_work_dir` finds it from the catalog); writes
    ``diff/changes``, ``diff/relabelled_entities`` and ``diff/counts.json``."""
    spark, cfg = ctx.spark, ctx.cfg
    previous = Path(previous)
    inputs = {}
    for side, work in (("old", previous), ("new", cfg.build_dir())):
        for name in ("facts", "provenance"):
            path = work / "verbalize" / name
            if not path.exists():
                raise StageInputMissing(STAGE, "verbalize", path)
            inputs[side, name] = spark.read.parquet(str(path))
    out = cfg.stage_dir(STAGE)
    changes = diff_facts(inputs["old", "facts"], inputs["old", "provenance"],
                         inputs["new", "facts"], inputs["new", "provenance"])
    changes.write.mode("overwrite").parquet(str(out / "changes"))
    changes = spark.read.parquet(str(out / "changes"))
    relabelled = None
    old_labels, new_labels = previous / "labels" / "labels", cfg.build_dir() / "labels" / "labels"
    if old_labels.exists() and new_labels.exists():
        relabelled_entities(changes, inputs["new", "provenance"],
                            label_changes(spark.read.parquet(str(old_labels)), spark.read.parquet(str(new_labels)))
                            ).write.mode("overwrite").parquet(str(out / "relabelled_entities"))
        relabelled = spark.read.parquet(str(out / "relabelled_entities"))
    else:
        log.info("diff: %s or %s is absent: relabelled entities are not named", old_labels, new_labels)
    counts = {"previous": str(previous),
              **diff_counts(changes, inputs["old", "facts"].count(), inputs["new", "facts"].count(), relabelled)}
    check_counts(counts)
    write_counts(cfg, STAGE, counts)
    return counts
