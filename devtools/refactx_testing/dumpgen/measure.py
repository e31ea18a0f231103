"""Measuring a dump: the distributions of the real extracts in ../shared, or of a generated dump,
the same way.
"""

from __future__ import annotations

import bz2
import collections
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from refactx_testing.dumpgen.shape import DIRECT, MANIFEST_FILE, NORMALIZED, WIKIBASE, XSD


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    q = np.percentile(values, [50, 90, 99, 99.9])
    return {"items": int(len(values)), "mean": round(float(values.mean()), 2), "median": float(q[0]),
            "p90": float(q[1]), "p99": float(q[2]), "p99.9": float(q[3]), "max": int(values.max()),
            "over_1000": int((values > 1000).sum())}


# ====================================================================== measure


_SQL_COLUMN = re.compile(r"^\s+`([^`]+)`\s")
_SQL_QUOTED = r"'[^'\\]*(?:\\.[^'\\]*)*'"
_SQL_ROW = re.compile(r"\(((?:" + _SQL_QUOTED + r"|[^'()])*)\)")
_SQL_VALUE = re.compile(_SQL_QUOTED + r"|[^,]+")


def _sql_value(token: str) -> str:
    if token.startswith("'"):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


_NT_LINE = re.compile(r'^(<[^>]*>|_:\S+)\s+<([^>]*)>\s+(.*?)\s*\.\s*$')


def _open_text(path: Path):
    if path.suffix == ".bz2":
        return bz2.open(path, "rt", encoding="utf-8", errors="replace")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


_NT_ESCAPE = re.compile(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")
_NT_SIMPLE = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(body: str) -> str:
    """A literal's text (N-Triples escapes decoded; surrogate pairs joined)."""
    if "\\" not in body:
        return body
    text = _NT_ESCAPE.sub(lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) > 1
                          else _NT_SIMPLE.get(m.group(1), m.group(1)), body)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def measure_nt(paths: Sequence[Path], property_types: dict[str, str] | None = None,
               property_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Shape of truthy N-Triples files: statements per item, datatypes, term lengths, hot
    objects and label prefixes. Datatypes come from propertyType lines when the files have
    them; else from the object's shape, a plain literal being an external id when its
    property has direct-normalized lines, or its English label (``property_labels``) says
    ID or identifier, or it has no label there (a property newer than the labels: nearly
    all new properties are external ids)."""
    E = "http://www.wikidata.org/entity/"
    per_item: collections.Counter[str] = collections.Counter()
    dtypes: collections.Counter[str] = collections.Counter()
    objects: collections.Counter[str] = collections.Counter()
    declared = dict(property_types or {})
    plabels = dict(property_labels or {})
    labels: dict[str, str] = {}
    descs: dict[str, str] = {}
    item_terms: collections.Counter[str] = collections.Counter()
    item_langs: dict[str, set] = collections.defaultdict(set)
    plain_by_prop: collections.Counter[str] = collections.Counter()
    lines = normalized = 0
    normalized_props: set[str] = set()
    declared_counts: collections.Counter[str] = collections.Counter()
    statements = []
    for path in paths:
        with _open_text(Path(path)) as fh:
            for line in fh:
                lines += 1
                m = _NT_LINE.match(line)
                if not m:
                    continue
                s, p, o = m.groups()
                if p == WIKIBASE + "propertyType" and s.startswith("<" + E + "P"):
                    declared[s[len(E) + 1:-1]] = o.rsplit("#", 1)[-1].rstrip(">")
                    continue
                if p.startswith(NORMALIZED):
                    normalized += 1
                    normalized_props.add(p[len(NORMALIZED):])
                    continue
                if p in (WIKIBASE + "identifiers", WIKIBASE + "statements"):
                    declared_counts[p.rsplit("#", 1)[1]] += int(re.sub(r"\D", "", o.split("^^")[0]) or 0)
                    continue
                subject = s[len(E) + 1:-1] if s.startswith("<" + E) else ""
                lit = re.match(r'^"(.*)"(@([A-Za-z-]+)|\^\^<([^>]*)>)?$', o)
                if p in ("http://www.w3.org/2000/01/rdf-schema#label", "http://schema.org/description") and lit:
                    if subject.startswith("Q"):
                        item_terms[subject] += 1
                        item_langs[subject].add(lit.group(3))
                    if lit.group(3) == "en":
                        text = _unescape(lit.group(1))
                        if p.endswith("label"):
                            if subject.startswith("P"):
                                plabels.setdefault(subject, text)
                            labels[subject] = text
                        else:
                            descs[subject] = text
                    continue
                if not p.startswith(DIRECT) or not subject.startswith("Q"):
                    continue
                per_item[subject] += 1
                pid = p[len(DIRECT):]
                if o.startswith("<" + E + "Q"):
                    shape = "WikibaseItem"
                    objects[o[len(E) + 1:-1]] += 1
                elif o.startswith("<" + E + "P"):
                    shape = "WikibaseProperty"
                elif o.startswith("<") and "/.well-known/genid/" in o:
                    shape = "unknown value"
                elif o.startswith("<"):
                    shape = "CommonsMedia" if "Special:FilePath" in o else "Url"
                elif lit and lit.group(4):
                    shape = {XSD + "dateTime": "Time", XSD + "decimal": "Quantity",
                             "http://www.opengis.net/ont/geosparql#wktLiteral": "GlobeCoordinate"}.get(
                        lit.group(4), "other")
                elif lit and lit.group(3):
                    shape = "Monolingualtext"
                else:
                    shape = "plain"
                    plain_by_prop[pid] += 1
                statements.append((pid, shape))
    id_label = re.compile(r"\b(ID|iD|identifier)\b")
    for pid, shape in statements:
        if shape == "plain":
            if pid in declared:
                shape = declared[pid]
            elif pid in normalized_props or pid not in plabels or id_label.search(plabels[pid]):
                shape = "ExternalId"
            else:
                shape = "String"
        elif pid in declared and shape not in ("unknown value",):
            shape = declared[pid]
        dtypes[shape] += 1
    counts = np.array(sorted(per_item.values()), dtype=np.int64)
    total = sum(dtypes.values()) or 1
    item_labels = [t for k, t in labels.items() if k.startswith("Q")]
    item_descs = [t for k, t in descs.items() if k.startswith("Q")]
    first2 = collections.Counter(" ".join(t.split()[:2]) for t in item_labels if len(t.split()) > 2)
    top_objects = objects.most_common(10)
    n_obj = sum(objects.values()) or 1
    terms = np.array([len(item_langs[q]) for q in per_item], dtype=np.int64)
    return {
        "files": [Path(p).name for p in paths],
        "lines": lines,
        "items_with_statements": int(len(counts)),
        "statements": int(counts.sum()),
        "statements_per_item": _quantiles(counts),
        "datatype_share": {k: round(v / total, 4) for k, v in dtypes.most_common()},
        "datatype_counts": dict(dtypes.most_common()),
        "normalized_lines_per_external_id": round(normalized / max(dtypes.get("ExternalId", 0), 1), 3),
        # the items' own counts (2024 metadata lines wikiba:identifiers / wikiba:statements)
        "declared_identifier_share": (round(declared_counts["identifiers"] / declared_counts["statements"], 3)
                                      if declared_counts["statements"] else None),
        "label_chars": _quantiles(np.array([len(t) for t in item_labels])),
        "description_chars": _quantiles(np.array([len(t) for t in item_descs])),
        "languages_per_item": _quantiles(terms),
        "top_objects": [(q, n, round(n / n_obj, 4)) for q, n in top_objects],
        "top10_objects_share": round(sum(n for _, n in top_objects) / n_obj, 4),
        "top_label_prefixes": first2.most_common(8),
        "properties_with_id_label": sum(1 for t in plabels.values() if id_label.search(t)),
        "properties_labelled": len(plabels),
    }


def measure_sql(page: Path, page_props: Path) -> dict[str, Any]:
    """Namespaces, redirects and page_props coverage of enwiki page/page_props dumps."""
    def rows(path: Path):
        cols: list[str] = []
        with _open_text(path) as fh:
            for line in fh:
                m = _SQL_COLUMN.match(line)
                if m and not line.startswith("INSERT"):
                    cols.append(m.group(1))
                elif line.startswith("INSERT INTO"):
                    for row in _SQL_ROW.finditer(line):
                        values = [_sql_value(v) for v in _SQL_VALUE.findall(row.group(1))]
                        if len(values) == len(cols):
                            yield dict(zip(cols, values))

    pages = list(rows(page))
    props = list(rows(page_props))
    ns = collections.Counter(p["page_namespace"] for p in pages)
    articles = {p["page_id"] for p in pages if p["page_namespace"] == "0" and p.get("page_is_redirect") == "0"}
    redirects = sum(1 for p in pages if p["page_namespace"] == "0" and p.get("page_is_redirect") == "1")
    last_page = max(int(p["page_id"]) for p in pages)
    with_item = {r["pp_page"] for r in props if r["pp_propname"] == "wikibase_item"}
    propnames = collections.Counter(r["pp_propname"] for r in props)
    covered = sum(1 for a in articles if a in with_item)
    return {
        "page_rows": len(pages),
        "namespaces": dict(ns.most_common()),
        "articles": len(articles),
        "redirects_per_article": round(redirects / max(len(articles), 1), 3),
        "talk_pages_per_article": round(ns.get("1", 0) / max(len(articles), 1), 3),
        "articles_with_wikibase_item": round(covered / max(len(articles), 1), 3),
        "page_props_rows": len(props),
        "page_props_in_page_range": sum(1 for r in props if int(r["pp_page"]) <= last_page),
        "propnames": dict(propnames.most_common(8)),
        "title_chars": _quantiles(np.array([len(p["page_title"]) for p in pages if p["page_id"] in articles])),
    }


def measure(shared_data: str | os.PathLike) -> dict[str, Any]:
    """The distributions the generator's constants come from, measured on ../shared/data."""
    data = Path(shared_data)
    wd = data / "wikidata"
    sample = wd / "truthy-2018-sample500-en.nt"
    plabels: dict[str, str] = {}
    if sample.exists():  # English labels of all 4,472 properties (2018)
        plabels = {k: v for k, v in _en_labels(sample).items() if k.startswith("P")}
    out: dict[str, Any] = {}
    for name in ("truthy-2018-head10k.nt", "truthy-2018-sample500-en.nt", "truthy-2024-Q42-Q37599471-Q24628793.nt"):
        path = wd / name
        if path.exists():
            out[name] = measure_nt([path], property_labels=plabels)
    full = [wd / n for n in ("truthy-2018-head10k.nt", "truthy-2024-Q42-Q37599471-Q24628793.nt") if (wd / n).exists()]
    if full:
        out["full items (2018 head + 2024 file)"] = measure_nt(full, property_labels=plabels)
    page = data / "wikipedia" / "enwiki-20150112-page.head1MiB.sql"
    props = data / "wikipedia" / "enwiki-20150112-page_props.head1MiB.sql"
    if page.exists() and props.exists():
        out["enwiki 2015 heads"] = measure_sql(page, props)
    return out


def _en_labels(path: Path) -> dict[str, str]:
    out = {}
    pat = re.compile(r'^<http://www\.wikidata\.org/entity/([QP]\d+)> <http://www\.w3\.org/2000/01/rdf-schema#label> "(.*)"@en \.$')
    with _open_text(path) as fh:
        for line in fh:
            m = pat.match(line.rstrip("\n"))
            if m:
                out[m.group(1)] = _unescape(m.group(2))
    return out


def measure_dump(dump_dir: str | os.PathLike) -> dict[str, Any]:
    """The same measures on a generated dump (its folder)."""
    d = Path(dump_dir)
    manifest = json.loads((d / MANIFEST_FILE).read_text())
    return {"truthy": measure_nt([d / manifest["truthy"]]),
            "sql": measure_sql(d / manifest["page"], d / manifest["page_props"])}
