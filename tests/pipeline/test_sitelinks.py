"""Stage 2 (sitelinks) on the real 2015 SQL heads and on hand-written dumps."""

from __future__ import annotations

import gzip

from refactx_pipeline.stages import sitelinks
from refactx_pipeline.stages.contract import StageContext
from tests.conftest import shared_path

HEADER = "CREATE TABLE `{t}` (\n{cols}\n) ENGINE=InnoDB;\n"


def _dump(path, table, columns, values):
    cols = "\n".join(f"  `{c}` varbinary(255)," for c in columns)
    text = "-- MySQL dump\n/*!40101 SET NAMES utf8 */;\n" + HEADER.format(t=table, cols=cols)
    text += f"INSERT INTO `{table}` VALUES {values};\n"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(text)
    return str(path)


def test_page_and_page_props_real_heads(spark, cfg):
    base = ("data", "wikipedia")
    cfg = cfg.updated({
        "input.enwiki_page": str(shared_path(*base, "enwiki-20150112-page.head1MiB.sql")),
        "input.enwiki_page_props": str(shared_path(*base, "enwiki-20150112-page_props.head1MiB.sql")),
    })
    counts = sitelinks.run(StageContext(cfg, spark=spark))
    assert counts["rows_in"] == {"page": 9559, "page_props": 22934}
    assert counts["rejected_by_reason"] == {"page:truncated_row": 1, "page_props:truncated_row": 1}
    links = {r["entity"]: r["title"] for r in spark.read.parquet(str(cfg.stage_dir("sitelinks") / "sitelinks")).collect()}
    assert links["Q6199"] == "Anarchism"  # page 12
    assert counts["sitelinks"] == len(links) > 5000
    assert all("_" not in t for t in links.values())
    assert counts["dropped_by_reason"]["non_main_namespace"] > 0


def test_items_per_site_real_head_has_no_enwiki_rows(spark, cfg):
    cfg = cfg.updated({
        "input.wb_items_per_site": str(
            shared_path("data", "wikipedia", "wikidatawiki-20150113-wb_items_per_site.head1MiB.sql")
        ),
    })
    counts = sitelinks.run(StageContext(cfg, spark=spark))
    # the head is sorted by site and stops in cawiki
    assert counts["rows_in"] == {"wb_items_per_site": 18165}
    assert counts["sitelinks"] == 0 and counts["rejected"] == 1


def test_items_per_site_keeps_enwiki_main_namespace(spark, cfg, tmp_path):
    cfg = cfg.updated({
        "input.wb_items_per_site": _dump(
            tmp_path / "ips.sql.gz", "wb_items_per_site",
            ["ips_row_id", "ips_item_id", "ips_site_id", "ips_site_page"],
            "(1,42,'enwiki','Douglas Adams'),(2,42,'dewiki','Douglas Adams'),(3,5,'enwiki','Category:Humans'),"
            "(4,7,'enwiki','Star Trek: The Next Generation'),(5,8,'enwiki','O\\'Brien')",
        ),
    })
    counts = sitelinks.run(StageContext(cfg, spark=spark))
    links = {r["entity"]: r["title"] for r in spark.read.parquet(str(cfg.stage_dir("sitelinks") / "sitelinks")).collect()}
    assert links == {"Q42": "Douglas Adams", "Q7": "Star Trek: The Next Generation", "Q8": "O'Brien"}
    assert counts["dropped_by_reason"] == {"non_main_namespace": 1}


def test_short_descriptions_and_redirects(spark, cfg, tmp_path):
    cfg = cfg.updated({
        "input.enwiki_page": _dump(
            tmp_path / "page.sql.gz", "page", ["page_id", "page_namespace", "page_title", "page_is_redirect"],
            "(1,0,'Douglas_Adams','0'),(2,0,'Old_name','1'),(3,4,'Some_project_page','0')",
        ),
        "input.enwiki_page_props": _dump(
            tmp_path / "pp.sql.gz", "page_props", ["pp_page", "pp_propname", "pp_value", "pp_sortkey"],
            "(1,'wikibase_item','Q42',NULL),(1,'wikibase-shortdesc','English writer',NULL),"
            "(2,'wikibase_item','Q1',NULL),(3,'wikibase_item','Q2',NULL),(4,'wikibase_item','Q3',NULL)",
        ),
    })
    counts = sitelinks.run(StageContext(cfg, spark=spark))
    rows = spark.read.parquet(str(cfg.stage_dir("sitelinks") / "sitelinks")).collect()
    assert [(r["entity"], r["title"], r["short_description"]) for r in rows] == [
        ("Q42", "Douglas Adams", "English writer")
    ]
    assert counts["dropped_by_reason"] == {"redirect": 1, "non_main_namespace": 1, "page_not_in_page_dump": 1}
