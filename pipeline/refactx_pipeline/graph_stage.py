"""Stage ``graph``: a team's own graph (``[graph]`` config) in place of parse, sitelinks and labels.

The triples and labels are read and checked by ``refactx_pipeline.graph`` (the rules the
in-process build uses too) and written as the datasets those three stages would write, so
verbalize, tokenize, prefix_rows, load, validate and activate run unchanged:

- ``parse/statements`` (STATEMENTS): entity ids prefixed ``E:`` (``graph.ENTITY_PREFIX``),
  properties the predicate ids as given (what ``verbalize.inverse_labels`` is keyed by);
- ``parse/terms`` (TERMS): the descriptions of labelled entities, in the first language of
  ``filter.languages`` (verbalize's description facts);
- ``parse/properties`` (PROPERTIES): one row per predicate with its label;
- ``labels/labels`` (LABELS): one display label per entity a kept triple mentions;
- ``graph/rejects`` (REJECTS) and ``graph/counts.json``: every row not kept, with its reason.

The inputs are read on the driver (Python ``csv``, pyarrow): a corporate graph of millions of
triples fits; a dump the size of Wikidata goes through ``parse``.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from refactx_pipeline.common import write_counts
from refactx_pipeline.config import Config
from refactx_pipeline.graph import ENTITY_PREFIX, MAX_REJECT_LINE, load_graph
from refactx_pipeline.schemas import LABELS, PROPERTIES, REJECTS, STATEMENTS, TERMS

log = logging.getLogger(__name__)

STAGE = "graph"


def _write(spark: SparkSession, columns: dict[str, list], schema, path) -> None:
    frame = pd.DataFrame({name: pd.Series(columns[name], dtype=object) for name in schema.fieldNames()})
    spark.createDataFrame(frame, schema=schema).write.mode("overwrite").parquet(str(path))


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Write the parse and labels datasets of ``cfg.graph`` and ``graph/counts.json``."""
    graph = load_graph(cfg)
    parse_dir, labels_dir = cfg.stage_dir("parse"), cfg.stage_dir("labels")
    e = ENTITY_PREFIX
    st = graph.statements
    is_item = [s.kind == "item" for s in st]
    _write(spark, {
        "subject": [e + s.subject for s in st],
        "property": [s.predicate for s in st],
        "object_kind": [s.kind for s in st],
        "object_item": [e + s.object if item else None for s, item in zip(st, is_item)],
        "object_value": [None if item else s.object for s, item in zip(st, is_item)],
        "object_datatype": [None] * len(st),
        "object_lang": [None] * len(st),
    }, STATEMENTS, parse_dir / "statements")
    described = sorted(graph.descriptions.items())
    _write(spark, {
        "entity": [e + entity for entity, _ in described],
        "kind": ["description"] * len(described),
        "lang": [cfg.filter.languages[0]] * len(described),
        "value": [value for _, value in described],
    }, TERMS, parse_dir / "terms")
    predicates = sorted({s.predicate for s in st})
    _write(spark, {
        "property": predicates,
        "datatype": [None] * len(predicates),
        "label": [graph.predicate_labels[p] for p in predicates],
    }, PROPERTIES, parse_dir / "properties")
    labelled = sorted(graph.labels.items())
    _write(spark, {
        "entity": [e + entity for entity, _ in labelled],
        "label": [label for _, (label, _) in labelled],
        "label_source": [source for _, (_, source) in labelled],
    }, LABELS, labels_dir / "labels")
    _write(spark, {
        "source": [source for source, _, _ in graph.rejects],
        "line": [line[:MAX_REJECT_LINE] for _, line, _ in graph.rejects],
        "reason": [reason for _, _, reason in graph.rejects],
    }, REJECTS, cfg.stage_dir(STAGE) / "rejects")
    counts = dict(graph.counts, format=cfg.graph.format)
    write_counts(cfg, STAGE, counts)
    log.info("graph: %s", counts)
    return counts
