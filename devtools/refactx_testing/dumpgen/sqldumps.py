"""The enwiki ``page`` and ``page_props`` SQL dumps that give the sitelinked items their titles.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from refactx_testing.dumpgen.shape import (
    ALL_CLASSES,
    CLASS_INDEX,
    CORE_ITEMS,
    DEFAULTSORT_SHARE,
    PAGE_FILE,
    PAGE_IMAGE_SHARE,
    PAGE_PROPS_FILE,
    PROJECT_PAGES_PER_ARTICLE,
    REDIRECTS_PER_ARTICLE,
    SCIENCE,
    SQL_LINE_BYTES,
    TALK_PAGES_PER_ARTICLE,
    UNCONNECTED_ARTICLE_SHARE,
)
from refactx_testing.dumpgen.basics import Plan, _join, sql_quote
from refactx_testing.dumpgen.render import Vocabulary, _ranks


# ====================================================================== SQL dumps

PAGE_COLUMNS = """  `page_id` int(10) unsigned NOT NULL AUTO_INCREMENT,
  `page_namespace` int(11) NOT NULL DEFAULT 0,
  `page_title` varbinary(255) NOT NULL DEFAULT '',
  `page_is_redirect` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_is_new` tinyint(1) unsigned NOT NULL DEFAULT 0,
  `page_random` double unsigned NOT NULL DEFAULT 0,
  `page_touched` binary(14) NOT NULL,
  `page_links_updated` varbinary(14) DEFAULT NULL,
  `page_latest` int(10) unsigned NOT NULL DEFAULT 0,
  `page_len` int(10) unsigned NOT NULL DEFAULT 0,
  `page_content_model` varbinary(32) DEFAULT NULL,
  `page_lang` varbinary(35) DEFAULT NULL,
  PRIMARY KEY (`page_id`),
  UNIQUE KEY `page_name_title` (`page_namespace`,`page_title`),
  KEY `page_random` (`page_random`),
  KEY `page_len` (`page_len`),
  KEY `page_redirect_namespace_len` (`page_is_redirect`,`page_namespace`,`page_len`)"""
PAGE_PROPS_COLUMNS = """  `pp_page` int(10) unsigned NOT NULL,
  `pp_propname` varbinary(60) NOT NULL,
  `pp_value` blob NOT NULL,
  `pp_sortkey` float DEFAULT NULL,
  PRIMARY KEY (`pp_page`,`pp_propname`),
  UNIQUE KEY `pp_propname_page` (`pp_propname`,`pp_page`),
  UNIQUE KEY `pp_propname_sortkey_page` (`pp_propname`,`pp_sortkey`,`pp_page`)"""


def _sql_head(table: str, columns: str) -> str:
    return f"""/*M!999999\\- enable the sandbox mode */ 
-- MariaDB dump 10.19  Distrib 10.6.16-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: db1206    Database: enwiki
-- ------------------------------------------------------
-- Server version	10.6.16-MariaDB-log

/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET @OLD_CHARACTER_SET_RESULTS=@@CHARACTER_SET_RESULTS */;
/*!40101 SET @OLD_COLLATION_CONNECTION=@@COLLATION_CONNECTION */;
/*!40101 SET NAMES utf8mb4 */;
/*!40103 SET @OLD_TIME_ZONE=@@TIME_ZONE */;
/*!40103 SET TIME_ZONE='+00:00' */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;
/*!40111 SET @OLD_SQL_NOTES=@@SQL_NOTES, SQL_NOTES=0 */;

--
-- Table structure for table `{table}`
--

DROP TABLE IF EXISTS `{table}`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8 */;
CREATE TABLE `{table}` (
{columns}
) ENGINE=InnoDB DEFAULT CHARSET=binary ROW_FORMAT=COMPRESSED;
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table `{table}`
--

/*!40000 ALTER TABLE `{table}` DISABLE KEYS */;
"""


def _sql_tail(table: str) -> str:
    return f"""/*!40000 ALTER TABLE `{table}` ENABLE KEYS */;
/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

/*!40101 SET SQL_MODE=@OLD_SQL_MODE */;
/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
/*!40101 SET CHARACTER_SET_CLIENT=@OLD_CHARACTER_SET_CLIENT */;
/*!40101 SET CHARACTER_SET_RESULTS=@OLD_CHARACTER_SET_RESULTS */;
/*!40101 SET COLLATION_CONNECTION=@OLD_COLLATION_CONNECTION */;
/*!40111 SET SQL_NOTES=@OLD_SQL_NOTES */;

-- Dump completed on 2024-04-02  9:12:43
"""


def _write_sql(path: Path, table: str, columns: str, rows: Iterable[str]) -> int:
    """A gzip'd mysqldump of ``rows`` (each ``(v1,v2,...)``) in ~1 MB INSERT lines."""
    prefix = f"INSERT INTO `{table}` VALUES "
    n = 0
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6,
                                                mtime=0) as gz:
        out = io.TextIOWrapper(gz, encoding="utf-8", newline="\n")
        out.write(_sql_head(table, columns))
        batch: list[str] = []
        size = 0
        for row in rows:
            batch.append(row)
            size += len(row) + 1
            n += 1
            if size >= SQL_LINE_BYTES:
                out.write(prefix + ",".join(batch) + ";\n")
                batch, size = [], 0
        if batch:
            out.write(prefix + ",".join(batch) + ";\n")
        out.write(_sql_tail(table))
        out.flush()
        out.detach()
    return n


def _unique_titles(titles: list[str], nouns: list[str]) -> list[str]:
    """Wikipedia titles are unique: a repeated one gets its class noun, then a number."""
    arr = np.array(titles, dtype=object)
    order = np.argsort(arr, kind="stable")
    ranks = np.empty(len(arr), dtype=np.int64)
    ranks[order] = _ranks(arr[order]) if len(arr) else ranks
    out = [t if r == 0 else f"{t} ({nouns[i]})" if r == 1 else f"{t} ({nouns[i]} {r})"
           for i, (t, r) in enumerate(zip(titles, ranks.tolist()))]
    seen: set[str] = set()
    for i, t in enumerate(out):  # a generated "X (noun)" may meet a real one: number it
        k = 2
        while t in seen:
            t = f"{out[i]} {k}"
            k += 1
        seen.add(t)
        out[i] = t
    return out


def write_sql_dumps(out_dir: Path, plan: Plan, v: Vocabulary, sitelinks: dict[str, Any],
                    seed: int) -> dict[str, Any]:
    """The enwiki page and page_props dumps for the plan's sitelinked items."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    items = sitelinks["items"]
    labels = sitelinks["labels"]
    descs = sitelinks["descs"]
    lost = plan.lost_sitelink[items]
    cat = plan.cls[items] == CLASS_INDEX["category"]
    # core items with an English article are sitelinked too
    core_titled = [c for c in CORE_ITEMS if c.title]
    titles = [lab.removeprefix("Category:") if c else lab for lab, c in zip(labels, cat.tolist())]
    nouns = [ALL_CLASSES[int(c)].noun or "topic" for c in plan.cls[items].tolist()]
    titles = _unique_titles([c.title for c in core_titled] + titles, ["topic"] * len(core_titled) + nouns)
    qids = [c.qid for c in core_titled] + plan.qid[items].tolist()
    namespaces = [0] * len(core_titled) + [14 if c else 0 for c in cat.tolist()]
    shortdesc = [c.description for c in core_titled] + [
        (d[:1].upper() + d[1:]) if s and d else "" for d, s in zip(descs, plan.shortdesc[items].tolist())]
    is_lost = [False] * len(core_titled) + lost.tolist()
    is_disambig = [False] * len(core_titled) + (plan.cls[items] == CLASS_INDEX["disambiguation"]).tolist()
    is_human = [False] * len(core_titled) + (plan.cls[items] == CLASS_INDEX["human"]).tolist()
    n_articles = len(titles)

    # other pages: unconnected articles, redirects, talk and project pages
    n_main = sum(1 for ns in namespaces if ns == 0)  # the ratios are per main-namespace article
    n_unconnected = int(round(n_main * UNCONNECTED_ARTICLE_SHARE))
    n_redirect = int(round(n_main * REDIRECTS_PER_ARTICLE))
    n_talk = int(round(n_main * TALK_PAGES_PER_ARTICLE))
    n_project = int(round(n_main * PROJECT_PAGES_PER_ARTICLE))
    extra_titles = [f"{t} ({k})" for t, k in zip(
        _join(np.array(SCIENCE, dtype=object)[rng.integers(0, len(SCIENCE), (n_unconnected, 3))],
              np.full(n_unconnected, 3)), range(n_unconnected))]
    main = [i for i, ns in enumerate(namespaces) if ns == 0] or [0]
    redirect_src = [main[i] for i in rng.choice(len(main), min(n_redirect, len(main)), replace=False).tolist()]
    redirect_titles = [f"{titles[i].lower() if k % 2 else titles[i].upper()}" for k, i in enumerate(redirect_src)]
    talk_src = [main[i] for i in rng.choice(len(main), min(n_talk, len(main)), replace=False).tolist()]

    pages: list[tuple[int, str, int, bool]] = []  # (ns, title, article index or -1, redirect)
    pages += [(ns, t, i, False) for i, (ns, t, gone) in enumerate(zip(namespaces, titles, is_lost)) if not gone]
    pages += [(0, t, -1, False) for t in extra_titles]
    pages += [(0, t, -1, True) for t in redirect_titles]
    pages += [(1, titles[i], -1, False) for i in sorted(set(talk_src))]
    pages += [(4 if k % 3 else 2, f"Project page {k}", -1, False) for k in range(n_project)]
    # drop repeated (namespace, title) pairs: a redirect may equal an article's title
    seen: set[tuple[int, str]] = set()
    unique_pages = []
    for p in pages:
        if (p[0], p[1]) not in seen:
            seen.add((p[0], p[1]))
            unique_pages.append(p)
    pages = unique_pages
    n_pages = len(pages)
    page_ids = np.sort(rng.choice(np.arange(10, 10 + 3 * n_pages + 1000), n_pages, replace=False))
    page_ids = page_ids[rng.permutation(n_pages)]  # ids are not in title order
    article_page = {}
    page_rows = []
    randoms = rng.random(n_pages).tolist()
    latest = rng.integers(10**8, 1.2 * 10**9, n_pages).tolist()
    lengths = rng.integers(200, 150_000, n_pages).tolist()
    touched = rng.integers(0, 10**6, n_pages).tolist()
    for k, ((ns, title, art, redirect), pid) in enumerate(zip(pages, page_ids.tolist())):
        if art >= 0:
            article_page[art] = pid
        t = title.replace(" ", "_")
        stamp = f"2024{3 + touched[k] % 2:02d}{1 + touched[k] % 28:02d}{touched[k] % 24:02d}{touched[k] % 60:02d}00"
        page_rows.append((pid, f"({pid},{ns},{sql_quote(t)},{int(redirect)},{int(k % 17 == 0)},"
                               f"{randoms[k]!r},'{stamp}','{stamp}',{latest[k]},"
                               f"{60 if redirect else lengths[k]},'wikitext',NULL)"))
    page_rows.sort()

    props: list[tuple[int, str, str]] = []
    missing_page = 10 + 3 * n_pages + 1000  # ids above every page id: not in the page dump
    for i in range(n_articles):
        if is_lost[i]:
            pid = missing_page
            missing_page += 1
        else:
            pid = article_page[i]
        props.append((pid, "wikibase_item", sql_quote(f"Q{qids[i]}") + ",NULL"))
        if shortdesc[i] and not is_lost[i] and namespaces[i] == 0:
            props.append((pid, "wikibase-shortdesc", sql_quote(shortdesc[i]) + ",NULL"))
        if is_disambig[i]:
            props.append((pid, "disambiguation", "'',NULL"))
    extras = rng.random((n_articles, 2))
    for i in range(n_articles):
        if is_lost[i]:
            continue
        pid = article_page[i]
        if extras[i, 0] < PAGE_IMAGE_SHARE:
            props.append((pid, "page_image_free", sql_quote(f"{titles[i].replace(' ', '_')[:40]}.jpg") + ",NULL"))
        if is_human[i] and extras[i, 1] < DEFAULTSORT_SHARE:
            words = titles[i].split()
            props.append((pid, "defaultsort", sql_quote(", ".join(words[::-1][:2])) + ",NULL"))
    props.sort()
    prop_rows = [f"({p},'{name}',{rest})" for p, name, rest in props]
    # one hostile row: three values instead of four (a reject with its reason, column_count)
    if prop_rows:
        at = len(prop_rows) // 2
        prop_rows.insert(at, "(1,'wikibase_item','Q1')")

    page_path, props_path = out_dir / PAGE_FILE, out_dir / PAGE_PROPS_FILE
    n_page = _write_sql(page_path, "page", PAGE_COLUMNS, (r for _, r in page_rows))
    n_props = _write_sql(props_path, "page_props", PAGE_PROPS_COLUMNS, prop_rows)
    main_ns = sum(1 for i in range(n_articles) if namespaces[i] == 0 and not is_lost[i])
    return {
        "page_rows": n_page,
        "page_props_rows": n_props,
        "sitelinks": main_ns,  # what the sitelinks stage keeps
        "sitelinks_short_description": sum(1 for i in range(n_articles)
                                           if namespaces[i] == 0 and not is_lost[i] and shortdesc[i]),
        "dropped": {k: v for k, v in (
            ("non_main_namespace", sum(1 for i in range(n_articles) if namespaces[i] != 0 and not is_lost[i])),
            ("page_not_in_page_dump", int(sum(is_lost)))) if v},
        "rejected": {"page_props:column_count": 1 if prop_rows else 0},
        "titles": {"core": len(core_titled), "items": len(items)},
    }
