"""Template questions from a build's stored facts, with gold answers and ids.

The build's ``parse/statements``, ``labels/labels``, ``parse/properties`` and
``verbalize/facts`` are read (under ``paths.build_root``, as the verbalize stage left them;
a graph build's ``graph`` stage writes the same datasets). Each statement is resolved by the
verbalize stage's own functions and kept only when its fact text is stored, so a gold answer
is always the object of a stored fact:

- ``forward``: about the subject (``Who owns {subject}?``); the answers are every object of
  that subject and property;
- ``inverse``: about an item object (``Who owns {object}?``), only where the inverse fact
  ``<object> <inverse label> <subject> .`` is stored; the answers are the subjects;
- ``yes_no``: ``Does {subject} own {object}?``; half ask a stored fact (``yes``), half the
  same subject and property with another object of that property that the subject does not
  have (``no``);
- ``two_hop``: a forward question whose subject is the first hop's noun phrase (``Who is a
  director of the company owned by {subject}?``): a chain of two stored item facts through a
  shared entity; the answers are every end of such a chain.

Candidates are ranked by a seeded 64-bit hash of their key within each property (pair of
properties for two-hop), and taken round-robin over the properties, so a type's questions
spread over its properties and the same seed gives the same questions. Questions with more
than ``max_answers`` gold answers are left out (an exact-match score of a 100-answer
question says little). All of this is DataFrame joins and windows; only the sampled
questions (a few hundred rows) come to the driver, where templates are filled in.
"""

from __future__ import annotations

import json
import logging
from importlib.resources import files
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from refactx_pipeline.common import ingest_stage, stage_input
from refactx_pipeline.config import Config
from refactx_pipeline.stages.verbalize import fact_text, property_label_table, resolve_statements

log = logging.getLogger(__name__)

QUESTION_TYPES = ("forward", "inverse", "yes_no", "two_hop")
DEFAULT_MAX_ANSWERS = 10
# distractor objects drawn per property for "no" questions
_DISTRACTORS = 20


def load_templates(path: str | Path | None = None) -> dict[str, dict[str, str]]:
    """The templates by property id (``_default`` for the others): the packaged
    ``templates.json``, or ``path`` laid over it (its entries replace the packaged ones)."""
    templates = json.loads(files(__package__).joinpath("templates.json").read_text(encoding="utf-8"))
    if path is not None:
        templates.update(json.loads(Path(path).read_text(encoding="utf-8")))
    templates.pop("_comment", None)
    return templates


def stored_statements(statements: DataFrame, labels: DataFrame, properties: DataFrame | None,
                      facts: DataFrame, inverse_labels: Mapping[str, str]) -> DataFrame:
    """Statements whose fact is stored: ids, labels, the object as written, ``fact_id``, and
    ``inverse_fact_id`` where the inverse fact is stored too (else null)."""
    resolved = resolve_statements(statements, labels, property_label_table(labels, properties)).where(
        F.col("drop_reason").isNull())
    if inverse_labels:
        pairs = [F.lit(x) for pid, label in sorted(inverse_labels.items()) for x in (pid, label.strip())]
        inverse = F.when(F.col("object_kind") == "item", F.create_map(*pairs)[F.col("property")])
    else:
        inverse = F.lit(None).cast("string")
    resolved = resolved.withColumn("inverse_label", inverse).select(
        "*",
        fact_text(F.col("subject_label"), F.col("property_label"), F.col("object_text")).alias("text"),
        fact_text(F.col("object_label"), F.col("inverse_label"), F.col("subject_label")).alias("inverse_text"),
    )
    stored = facts.select("text", "fact_id")
    inverse_stored = facts.select(F.col("text").alias("inverse_text"), F.col("fact_id").alias("inverse_fact_id"))
    return resolved.join(stored, "text").join(inverse_stored, "inverse_text", "left").select(
        "subject", "subject_label", "property", "property_label", "object_kind", "object_item",
        "object_text", "text", "fact_id", "inverse_label", "inverse_text", "inverse_fact_id",
    )


def _answer(label: str, item: str, fact: str, fact_id: str) -> Column:
    """A gold answer (the columns named): its label, entity id (null for a literal), fact and fact id."""
    return F.struct(F.col(label).alias("label"), F.col(item).alias("id"), F.col(fact).alias("fact"),
                    F.col(fact_id).alias("fact_id"))


def _candidates(stored: DataFrame, max_answers: int, only: Sequence[str] | None
                ) -> dict[str, tuple[DataFrame, list[str]]]:
    """Per question type: (one row per candidate question with ``stratum`` and ``answers``, its key);
    ``only``: the properties questions may be about (every one when None)."""
    if only is not None:
        stored = stored.where(F.col("property").isin(list(only)))
    first = F.min  # every row of a group carries the same label: any one
    forward = stored.groupBy("subject", "property").agg(
        first("subject_label").alias("subject_label"), first("property_label").alias("property_label"),
        F.sort_array(F.collect_set(_answer("object_text", "object_item", "text", "fact_id"))).alias("answers"),
    ).withColumn("stratum", F.col("property"))
    inverse = stored.where(F.col("inverse_fact_id").isNotNull()).groupBy("object_item", "property").agg(
        first("object_text").alias("object_label"), first("inverse_label").alias("inverse_label"),
        first("property_label").alias("property_label"),
        F.sort_array(F.collect_set(_answer("subject_label", "subject", "inverse_text", "inverse_fact_id")))
        .alias("answers"),
    ).withColumn("stratum", F.col("property"))
    yes_no = stored.select(
        "subject", "subject_label", "property", "property_label", "object_text", "object_item",
        F.array(_answer("object_text", "object_item", "text", "fact_id")).alias("answers"),
    ).withColumn("stratum", F.col("property"))
    hop1 = stored.where(F.col("object_kind") == "item").select(
        F.col("subject"), F.col("subject_label"), F.col("property").alias("property1"),
        F.col("property_label").alias("property_label1"), F.col("object_item").alias("middle"),
        F.col("text").alias("text1"), F.col("fact_id").alias("fact_id1"))
    hop2 = stored.select(
        F.col("subject").alias("middle"), F.col("property").alias("property2"),
        F.col("property_label").alias("property_label2"), F.col("object_text"), F.col("object_item"),
        F.col("text").alias("text2"), F.col("fact_id").alias("fact_id2"))
    chains = hop1.join(hop2, "middle").where(
        F.col("object_item").isNull() | (F.col("object_item") != F.col("subject")))
    two_hop = chains.groupBy("subject", "property1", "property2").agg(
        first("subject_label").alias("subject_label"), first("property_label1").alias("property_label1"),
        first("property_label2").alias("property_label2"),
        F.sort_array(F.collect_set(F.struct(
            F.col("object_text").alias("label"), F.col("object_item").alias("id"),
            F.array("text1", "text2").alias("chain"), F.array("fact_id1", "fact_id2").alias("chain_ids"),
        ))).alias("answers"),
    ).withColumn("stratum", F.concat_ws("/", "property1", "property2"))
    keys = {"forward": ["subject", "property"], "inverse": ["object_item", "property"],
            "yes_no": ["subject", "property", "object_text"], "two_hop": ["subject", "property1", "property2"]}
    frames = {"forward": forward, "inverse": inverse, "yes_no": yes_no, "two_hop": two_hop}
    return {t: (frames[t].where(F.size("answers") <= max_answers), keys[t]) for t in QUESTION_TYPES}


def _round_robin(frame: DataFrame, keys: Sequence[str], seed: int, limit: int) -> list[Any]:
    """Up to ``limit`` rows: each stratum's rows in seeded hash order, taken one per stratum in turn."""
    order = F.xxhash64(F.lit(seed), *keys)
    ranked = frame.withColumn("_order", order).withColumn(
        "_rank", F.row_number().over(Window.partitionBy("stratum").orderBy("_order", *keys)))
    return ranked.where(F.col("_rank") <= limit).orderBy("_rank", "_order", *keys).limit(limit).collect()


def _quotas(count: int, available: Mapping[str, int]) -> dict[str, int]:
    """``count`` split evenly over the types, a type's shortfall going to those with more."""
    quotas = {t: 0 for t in QUESTION_TYPES}
    left = count
    while left > 0:
        open_types = [t for t in QUESTION_TYPES if available.get(t, 0) > quotas[t]]
        if not open_types:
            break
        share, extra = divmod(left, len(open_types))
        for i, t in enumerate(open_types):
            take = min(share + (i < extra), available[t] - quotas[t])
            quotas[t] += take
            left -= take
    return quotas


def _fill(template: str, **values: str) -> str:
    return template.format(**values)


def _template(templates: Mapping[str, Mapping[str, str]], prop: str, form: str) -> str:
    return templates.get(prop, {}).get(form) or templates["_default"][form]


def _aliases(spark: SparkSession, terms: DataFrame | None, ids: Iterable[str],
             languages: Sequence[str]) -> dict[str, list[str]]:
    """Labels and aliases of ``ids`` in ``languages`` (parse/terms): the other names an answer may have."""
    wanted = sorted({i for i in ids if i})
    if terms is None or not wanted:
        return {}
    entities = spark.createDataFrame([(i,) for i in wanted], "entity string")
    rows = terms.join(F.broadcast(entities), "entity").where(
        F.col("kind").isin("label", "alias") & F.col("lang").isin(list(languages))
    ).groupBy("entity").agg(F.sort_array(F.collect_set("value")).alias("names")).collect()
    return {r["entity"]: list(r["names"]) for r in rows}


def _distractors(stored: DataFrame, properties: Sequence[str], seed: int) -> dict[str, list[tuple[str, str]]]:
    """Per property, up to ``_DISTRACTORS`` of its objects (text, item id) in seeded hash order."""
    if not properties:
        return {}
    objects = stored.where(F.col("property").isin(list(properties))).select(
        "property", "object_text", "object_item").distinct()
    order = F.xxhash64(F.lit(seed + 1), "object_text")
    ranked = objects.withColumn("_rank", F.row_number().over(
        Window.partitionBy("property").orderBy(order, "object_text")))
    found: dict[str, list[tuple[str, str]]] = {}
    for r in ranked.where(F.col("_rank") <= _DISTRACTORS).orderBy("property", "_rank").collect():
        found.setdefault(r["property"], []).append((r["object_text"], r["object_item"]))
    return found


def _objects_of(stored: DataFrame, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], set[str]]:
    """Every stored object text of each (subject, property) pair."""
    if not pairs:
        return {}
    spark = stored.sparkSession
    keys = spark.createDataFrame(sorted(set(pairs)), "subject string, property string")
    rows = stored.join(F.broadcast(keys), ["subject", "property"]).groupBy("subject", "property").agg(
        F.collect_set("object_text").alias("objects")).collect()
    return {(r["subject"], r["property"]): set(r["objects"]) for r in rows}


def generate_questions(spark: SparkSession, statements: DataFrame, labels: DataFrame,
                       properties: DataFrame | None, terms: DataFrame | None, facts: DataFrame, *,
                       inverse_labels: Mapping[str, str], languages: Sequence[str], count: int, seed: int,
                       templates: Mapping[str, Mapping[str, str]] | None = None,
                       max_answers: int = DEFAULT_MAX_ANSWERS, only_templated: bool = False
                       ) -> list[dict[str, Any]]:
    """About ``count`` questions (fewer when the facts allow fewer), as JSON-ready dicts:
    ``id``, ``type``, ``property``, ``question``, ``answers`` (``label``, ``aliases``, ``id``),
    ``facts`` (the stored fact texts behind the gold answers: two per answer for two-hop) and
    ``fact_ids``; a yes/no question also has ``fact`` (the fact it asks about).
    ``only_templated``: only about properties that have templates of their own (no ``_default``)."""
    templates = templates or load_templates()
    only = sorted(p for p in templates if not p.startswith("_")) if only_templated else None
    stored = stored_statements(statements, labels, properties, facts, inverse_labels).persist()
    try:
        candidates = _candidates(stored, max_answers, only)
        sampled = {t: _round_robin(frame, keys, seed, count) for t, (frame, keys) in candidates.items()}
        quotas = _quotas(count, {t: len(rows) for t, rows in sampled.items()})
        chosen = {t: sampled[t][:quotas[t]] for t in QUESTION_TYPES}
        # every other yes/no question asks about an object the subject does not have
        negatives = chosen["yes_no"][1::2]
        distractors = _distractors(stored, sorted({r["property"] for r in negatives}), seed)
        objects = _objects_of(stored, [(r["subject"], r["property"]) for r in negatives])
        answer_ids = [a["id"] for rows in chosen.values() for r in rows for a in r["answers"]]
        names = _aliases(spark, terms, answer_ids, languages)
    finally:
        stored.unpersist()

    def answers(row) -> list[dict[str, Any]]:
        return [{"label": a["label"], "aliases": [n for n in names.get(a["id"], []) if n != a["label"]],
                 "id": a["id"]} for a in row["answers"]]

    log.info("questions: quotas %s of %s candidates sampled", quotas, {t: len(r) for t, r in sampled.items()})
    questions: list[dict[str, Any]] = []
    for kind in QUESTION_TYPES:
        for i, row in enumerate(chosen[kind]):
            record: dict[str, Any] = {"id": f"{kind}-{i + 1:04d}", "type": kind}
            if kind == "forward":
                record.update(property=row["property"], question=_fill(
                    _template(templates, row["property"], "forward"), subject=row["subject_label"],
                    property=row["property_label"]), answers=answers(row))
            elif kind == "inverse":
                record.update(property=row["property"], question=_fill(
                    _template(templates, row["property"], "inverse"), object=row["object_label"],
                    inverse=row["inverse_label"], property=row["property_label"]), answers=answers(row))
            elif kind == "yes_no":
                obj, fact = row["object_text"], row["answers"][0]["fact"]
                gold = "yes"
                if i % 2 == 1:  # a "no": the first distractor the subject does not have
                    have = objects.get((row["subject"], row["property"]), set())
                    other = next((d for d in distractors.get(row["property"], []) if d[0] not in have), None)
                    if other is None:
                        continue  # every distractor is one of the subject's objects: no "no" to ask
                    obj, gold, fact = other[0], "no", None
                record.update(property=row["property"], question=_fill(
                    _template(templates, row["property"], "yes_no"), subject=row["subject_label"],
                    object=obj, property=row["property_label"]),
                    answers=[{"label": gold, "aliases": [], "id": None}], fact=fact)
            else:
                first_phrase = _fill(_template(templates, row["property1"], "phrase"),
                                     subject=row["subject_label"], property=row["property_label1"])
                record.update(property=f"{row['property1']}/{row['property2']}", question=_fill(
                    _template(templates, row["property2"], "forward"), subject=first_phrase,
                    property=row["property_label2"]), answers=answers(row))
            if kind == "two_hop":
                record["facts"] = [t for a in row["answers"] for t in a["chain"]]
                record["fact_ids"] = [int(x) for a in row["answers"] for x in a["chain_ids"]]
            elif kind == "yes_no":
                record["facts"] = [record["fact"]] if record["fact"] else []
                record["fact_ids"] = [int(row["answers"][0]["fact_id"])] if record["fact"] else []
            else:
                record["facts"] = [a["fact"] for a in row["answers"]]
                record["fact_ids"] = [int(a["fact_id"]) for a in row["answers"]]
            questions.append(record)
    return questions


def run(spark: SparkSession, cfg: Config, *, count: int, seed: int, templates: str | Path | None = None,
        max_answers: int = DEFAULT_MAX_ANSWERS, only_templated: bool = False) -> list[dict[str, Any]]:
    """The questions of the build ``cfg`` points at (its verbalize stage has run)."""
    first = ingest_stage(cfg)
    labels_by = first if first == "graph" else "labels"
    read = spark.read.parquet
    statements = read(str(stage_input(cfg, "questions", "parse", "statements", written_by=first)))
    labels = read(str(stage_input(cfg, "questions", "labels", "labels", written_by=labels_by)))
    facts = read(str(stage_input(cfg, "questions", "verbalize", "facts")))
    properties_dir, terms_dir = cfg.stage_dir("parse") / "properties", cfg.stage_dir("parse") / "terms"
    properties = read(str(properties_dir)) if properties_dir.exists() else None
    terms = read(str(terms_dir)) if terms_dir.exists() else None
    inverse = dict(cfg.verbalize.inverse_labels) if cfg.verbalize.inverse else {}
    return generate_questions(spark, statements, labels, properties, terms, facts, inverse_labels=inverse,
                              languages=cfg.filter.languages, count=count, seed=seed,
                              templates=load_templates(templates), max_answers=max_answers,
                              only_templated=only_templated)
