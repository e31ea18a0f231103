"""Stage 2, sitelinks: the English Wikipedia title (and short description) per item.

From ``enwiki-*-page.sql(.gz)`` + ``enwiki-*-page_props.sql(.gz)`` (``wikibase_item``,
``wikibase-shortdesc``) when both are configured, else from
``wikidatawiki-*-wb_items_per_site.sql(.gz)`` (rows with ``ips_site_id = 'enwiki'``).
Only main-namespace pages are kept; underscores in titles become spaces.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from refactx_index.errors import ConfigError

from refactx_pipeline.common import remove_tree, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import REJECTS, SITELINKS
from refactx_pipeline.stages.sqldump import RAW, REASON, read_mysql_table

log = logging.getLogger(__name__)

ARROW_LINES_PER_BATCH = "16"  # each INSERT line is ~1 MB
ITEM_ID = "^Q[1-9][0-9]*$"
# English Wikipedia namespace prefixes (and aliases) of non-main pages; wb_items_per_site
# stores titles with their prefix, so a title starting with one of these is not an article
ENWIKI_NAMESPACES = (
    "Talk", "User", "User talk", "Wikipedia", "Wikipedia talk", "WP", "Project", "File", "File talk",
    "Image", "MediaWiki", "MediaWiki talk", "Template", "Template talk", "Help", "Help talk",
    "Category", "Category talk", "Portal", "Portal talk", "Draft", "Draft talk", "TimedText",
    "TimedText talk", "Module", "Module talk", "Book", "Book talk", "Education Program",
    "Gadget", "Gadget definition", "Topic", "Special", "Media",
)
NON_MAIN_TITLE = "^(?:" + "|".join(ns.replace(" ", "[ _]") for ns in ENWIKI_NAMESPACES) + "):"


def require_columns(df: DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ConfigError(f"{what}: the dump's CREATE TABLE lacks column(s) {', '.join(missing)}")


def sitelinks_from_page_tables(page: DataFrame, page_props: DataFrame) -> DataFrame:
    """Rows of ``page`` and ``page_props`` -> (entity, title, short_description, drop_reason)."""
    require_columns(page, ["page_id", "page_namespace", "page_title"], "page dump")
    require_columns(page_props, ["pp_page", "pp_propname", "pp_value"], "page_props dump")
    redirect = F.col("page_is_redirect") == "1" if "page_is_redirect" in page.columns else F.lit(False)
    pages = page.select(
        F.col("page_id").alias("page"),
        F.col("page_namespace").alias("namespace"),
        F.translate("page_title", "_", " ").alias("title"),
        redirect.alias("redirect"),
    )
    props = (
        page_props.where(F.col("pp_propname").isin("wikibase_item", "wikibase-shortdesc"))
        .groupBy(F.col("pp_page").alias("page"))
        .agg(
            F.max(F.when(F.col("pp_propname") == "wikibase_item", F.upper(F.btrim("pp_value")))).alias("entity"),
            F.max(F.when(F.col("pp_propname") == "wikibase-shortdesc", F.col("pp_value"))).alias(
                "short_description"
            ),
        )
    )
    joined = props.join(pages, "page", "left")
    reason = (
        F.when(F.col("entity").isNull(), "no_wikibase_item")
        .when(~F.col("entity").rlike(ITEM_ID), "bad_item_id")
        .when(F.col("title").isNull(), "page_not_in_page_dump")
        .when(F.col("namespace") != "0", "non_main_namespace")
        .when(F.col("redirect"), "redirect")
    )
    return joined.select("entity", "title", "short_description", reason.alias("drop_reason"))


def sitelinks_from_items_per_site(items_per_site: DataFrame, site: str = "enwiki") -> DataFrame:
    """Rows of ``wb_items_per_site`` -> (entity, title, short_description, drop_reason)."""
    require_columns(items_per_site, ["ips_item_id", "ips_site_id", "ips_site_page"], "wb_items_per_site dump")
    rows = items_per_site.where(F.col("ips_site_id") == site)
    entity = F.concat(F.lit("Q"), F.col("ips_item_id"))
    title = F.translate("ips_site_page", "_", " ")
    reason = (
        F.when(~entity.rlike(ITEM_ID), "bad_item_id")
        .when(title.rlike(NON_MAIN_TITLE), "non_main_namespace")
        .when(F.btrim(title) == "", "empty_title")
    )
    return rows.select(
        entity.alias("entity"), title.alias("title"), F.lit(None).cast("string").alias("short_description"),
        reason.alias("drop_reason"),
    )


def one_title_per_entity(candidates: DataFrame) -> DataFrame:
    """Kept candidates, one per entity (the smallest title when a dump maps
    several pages to one item), in the SITELINKS schema."""
    kept = candidates.where(F.col("drop_reason").isNull())
    best = kept.groupBy("entity").agg(F.min(F.struct("title", "short_description")).alias("best"))
    return best.select(
        "entity", F.col("best.title").alias("title"), F.col("best.short_description").alias("short_description")
    )


def _stage_table(spark: SparkSession, path: str, out: str) -> DataFrame:
    """Parse one dump into Parquet once, so rows and rejects are not re-parsed per use."""
    _, table = read_mysql_table(spark, path)
    table.write.mode("overwrite").parquet(out)
    return spark.read.parquet(out)


def run(ctx: StageContext) -> StageCounts:
    """Write ``sitelinks/sitelinks`` and ``sitelinks/rejects`` from the configured SQL dumps."""
    spark, cfg = ctx.spark, ctx.cfg
    inp = cfg.input
    out = cfg.stage_dir("sitelinks")
    conf_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, ARROW_LINES_PER_BATCH)
    try:
        tables: dict[str, DataFrame] = {}
        source = inp.sitelinks_source()
        if source == "enwiki_page_props":
            tables["page"] = _stage_table(spark, inp.enwiki_page, str(out / "_page"))
            tables["page_props"] = _stage_table(spark, inp.enwiki_page_props, str(out / "_page_props"))
        elif source == "wb_items_per_site":
            tables["wb_items_per_site"] = _stage_table(spark, inp.wb_items_per_site, str(out / "_wb_items_per_site"))
        else:
            raise ConfigError("sitelinks: set input.enwiki_page + input.enwiki_page_props, or input.wb_items_per_site")
    finally:
        if previous is None:
            spark.conf.unset(conf_key)
        else:
            spark.conf.set(conf_key, previous)

    rows = {name: t.where(F.col(REASON).isNull()) for name, t in tables.items()}
    if source == "enwiki_page_props":
        candidates = sitelinks_from_page_tables(rows["page"], rows["page_props"])
    else:
        candidates = sitelinks_from_items_per_site(rows["wb_items_per_site"])

    one_title_per_entity(candidates).select([F.col(f.name) for f in SITELINKS.fields]).write.mode(
        "overwrite"
    ).parquet(str(out / "sitelinks"))
    rejects = None
    for name, t in tables.items():
        part = t.where(F.col(REASON).isNotNull()).select(
            F.lit(name).alias("source"), F.col(RAW).alias("line"), F.col(REASON).alias("reason")
        )
        rejects = part if rejects is None else rejects.union(part)
    rejects.select([F.col(f.name) for f in REJECTS.fields]).write.mode("overwrite").parquet(str(out / "rejects"))

    sitelinks = spark.read.parquet(str(out / "sitelinks"))
    rejected = {
        f"{r['source']}:{r['reason']}": r["count"]
        for r in spark.read.parquet(str(out / "rejects")).groupBy("source", "reason").count().collect()
    }
    # one pass each: the null drop_reason group holds the kept candidates
    by_reason = candidates.groupBy("drop_reason").count().collect()
    dropped = {r["drop_reason"]: r["count"] for r in by_reason if r["drop_reason"] is not None}
    written = sitelinks.agg(F.count("*").alias("sitelinks"), F.count("short_description").alias("with_short")).first()
    counts: dict[str, Any] = {
        "source": source,
        "rows_in": {name: t.count() for name, t in rows.items()},
        "candidates": sum(r["count"] for r in by_reason),
        "sitelinks": written["sitelinks"],
        "with_short_description": written["with_short"],
        "dropped_by_reason": dict(sorted(dropped.items())),
        "rejected": sum(rejected.values()),
        "rejected_by_reason": dict(sorted(rejected.items())),
    }
    for name in tables:
        remove_tree(spark, out / f"_{name}")
    write_counts(cfg, "sitelinks", counts)
    log.info("sitelinks: %s", counts)
    return counts
