"""Stage 4, verbalize: statements and terms -> de-duplicated textual facts.

``<subject label> <property label> <object> .`` per kept statement, plus
``<entity> <description> <…> .`` and ``<entity> <short description> <…> .`` once
per entity that appears in a kept statement, plus optional inverse facts
``<object> <inverse label> <subject> .`` for item-valued statements.

Literal values are rendered for people by Spark SQL expressions (no Python UDF);
the rules, with an example each, are in docs/verbalize.md. A statement that
cannot be verbalized (a label is missing, a literal does not parse) is dropped
and counted by reason in ``verbalize/counts.json``.

Outputs: ``verbalize/facts`` (schema FACTS), ``verbalize/provenance`` (schema PROVENANCE:
one row per kept fact and source; docs/provenance.md), ``verbalize/provenance_blocks`` (schema
PROVENANCE_BLOCKS: those sources packed into the blocks the load stage stores) and
``verbalize/counts.json``.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from refactx_pipeline.config import DEFAULT_LANGUAGES, VerbalizeConfig
from refactx_pipeline.stages.render import DESCRIPTION_LABEL, ENTITY_PREFIX, KIND_ORDER, SHORT_DESCRIPTION_LABEL

from refactx_pipeline.common import (ingest_stage, move_tree, observe_outcomes, remove_tree, stage_input,
                                     write_counts)
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import FACTS, PROVENANCE
from refactx_index.tree import provenance as prov
log = logging.getLogger(__name__)

STAGE = "verbalize"

# Java regexes, applied by Spark SQL functions
_SPACES = r"(?U)\s+"
_TIME = r"^([+-]?)(\d+)-(\d{2})-(\d{2})(?:T.*)?$"
_DECIMAL = r"^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?)(\d+))?$"
_POINT = r"^\s*(?:<([^>]*)>\s*)?(?i:point)\s*\(\s*(\S+)\s+(\S+)\s*\)\s*$"


# ---------------------------------------------------------------- literal rendering
def clean_text(col: Column) -> Column:
    """Whitespace runs (newlines, tabs, Unicode spaces) to one space, trimmed: facts are one line."""
    return F.trim(F.regexp_replace(col, _SPACES, " "))


def render_decimal(col: Column) -> Column:
    """``+1.500`` -> ``1.5``, ``+10`` -> ``10``, ``-0.20`` -> ``-0.2``, ``+0.0`` -> ``0``; null if not a decimal."""
    value = F.trim(col)
    matches = value.rlike(_DECIMAL) & value.rlike(r"\d")
    sign = F.regexp_extract(value, _DECIMAL, 1)
    integer = F.regexp_replace(F.regexp_extract(value, _DECIMAL, 2), r"^0+", "")
    fraction = F.regexp_replace(F.regexp_extract(value, _DECIMAL, 3), r"0+$", "")
    exp_sign = F.regexp_extract(value, _DECIMAL, 4)
    exp_digits = F.regexp_replace(F.regexp_extract(value, _DECIMAL, 5), r"^0+", "")
    integer = F.when(integer == "", F.lit("0")).otherwise(integer)
    is_zero = (integer == "0") & (fraction == "")
    mantissa = F.concat(
        F.when((sign == "-") & ~is_zero, F.lit("-")).otherwise(F.lit("")),
        integer,
        F.when(fraction != "", F.concat(F.lit("."), fraction)).otherwise(F.lit("")),
    )
    exponent = F.when(
        (exp_digits != "") & ~is_zero,
        F.concat(F.lit("e"), F.when(exp_sign == "-", F.lit("-")).otherwise(F.lit("")), exp_digits),
    ).otherwise(F.lit(""))
    return F.when(matches, F.concat(mantissa, exponent))


def render_time(col: Column) -> Column:
    """``+1952-03-11T00:00:00Z`` -> ``1952-03-11``; ``-0500-01-01T…`` -> ``-0500-01-01``.

    The time of day is dropped (Wikidata's finest precision is the day). Month or
    day ``00`` (unknown, as in Wikibase JSON) shortens the date to ``1952-03`` or
    ``1952``. Years keep at least four digits and a ``-`` sign (XSD 1.1 astronomical
    numbering, as in the dump); a leading ``+`` is dropped. Null if not a date.
    """
    value = F.trim(col)
    matches = value.rlike(_TIME)
    sign = F.when(F.regexp_extract(value, _TIME, 1) == "-", F.lit("-")).otherwise(F.lit(""))
    digits = F.regexp_replace(F.regexp_extract(value, _TIME, 2), r"^0+", "")
    year = F.concat(sign, F.when(F.length(digits) < 4, F.lpad(digits, 4, "0")).otherwise(digits))
    month = F.regexp_extract(value, _TIME, 3)
    day = F.regexp_extract(value, _TIME, 4)
    rendered = (
        F.when(month == "00", year)
        .when(day == "00", F.concat_ws("-", year, month))
        .otherwise(F.concat_ws("-", year, month, day))
    )
    return F.when(matches, rendered)


def render_coordinate(col: Column) -> Column:
    """``Point(-5.84 54.5909)`` (WKT: longitude first) -> ``54.5909, -5.84`` (latitude first).

    A globe IRI before the point (``<…/Q111> Point(…)``, coordinates on Mars) is
    not rendered. Null if not a WKT point with two decimals.
    """
    value = F.trim(col)
    lon = render_decimal(F.regexp_extract(value, _POINT, 2))
    lat = render_decimal(F.regexp_extract(value, _POINT, 3))
    return F.when(value.rlike(_POINT) & lat.isNotNull() & lon.isNotNull(), F.concat(lat, F.lit(", "), lon))


def rendered_object(kind: Column, value: Column, object_label: Column) -> Column:
    """The object as written in a fact, empty when it renders to nothing (``render_object``
    makes that null)."""
    return (
        F.when(kind == "item", object_label)
        .when(kind == "time", render_time(value))
        .when(kind == "quantity", render_decimal(value))
        .when(kind == "coordinate", render_coordinate(value))
        .otherwise(clean_text(value))  # string, monolingual, other: the text itself
    )


def render_object(kind: Column, value: Column, object_label: Column) -> Column:
    """The object as written in a fact; null when it cannot be rendered.

    One expression (it names the rendering twice); ``resolve_statements`` renders each
    statement's object once, in a projection of its own, instead."""
    rendered = rendered_object(kind, value, object_label)
    return F.when(rendered != "", rendered)


def fact_text(subject: Column, predicate: Column, obj: Column) -> Column:
    """``<subject> <predicate> <object> .``"""
    return F.concat(F.lit("<"), subject, F.lit("> <"), predicate, F.lit("> <"), obj, F.lit("> ."))


# ---------------------------------------------------------------- facts
def label_table(labels: DataFrame) -> DataFrame:
    """(entity, label) with labels cleaned to one line; empty labels count as missing."""
    label = clean_text(F.col("label"))
    return labels.select("entity", label.alias("label")).where(F.col("label") != "")


def property_label_table(labels: DataFrame, properties: DataFrame | None) -> DataFrame:
    """(property, property_label): the display label, else the parse stage's property label."""
    from_labels = label_table(labels).where(F.col("entity").startswith("P")).select(
        F.col("entity").alias("property"), F.col("label").alias("display")
    )
    if properties is None:
        return from_labels.select("property", F.col("display").alias("property_label"))
    from_parse = properties.select("property", clean_text(F.col("label")).alias("parsed")).where(
        F.col("parsed") != ""
    ).dropDuplicates(["property"])
    return from_labels.join(from_parse, "property", "full").select(
        "property", F.coalesce("display", "parsed").alias("property_label")
    )


def resolve_statements(statements: DataFrame, labels: DataFrame, property_labels: DataFrame) -> DataFrame:
    """Statements with their labels and rendered object, and ``drop_reason`` (null: kept)."""
    entity_labels = label_table(labels)
    subjects = entity_labels.select(F.col("entity").alias("subject"), F.col("label").alias("subject_label"))
    objects = entity_labels.select(F.col("entity").alias("object_item"), F.col("label").alias("object_label"))
    joined = (
        statements.join(subjects, "subject", "left")
        .join(property_labels, "property", "left")
        .join(objects, "object_item", "left")
    )
    kind = F.col("object_kind")
    # The object is rendered in a projection of its own and the drop reason read from its
    # column: Spark evaluates a CASE WHEN branch where it is written, so one expression that
    # named the rendering three times (the text, twice in the reason) ran its regexes three
    # to six times per literal (measured on the realistic 1M build: 5.4 -> 3.1 s for the
    # statements' labels and objects; docs/scale.md). The optimizer does not merge the
    # projections back: it keeps an expensive expression that the next one reads twice.
    rendered = joined.select("*", rendered_object(kind, F.col("object_value"), F.col("object_label")).alias("_rendered"))
    with_object = rendered.select("*", F.when(F.col("_rendered") != "", F.col("_rendered")).alias("object_text"))
    obj = F.col("object_text")
    reason = (
        F.when(F.col("subject_label").isNull(), F.lit("missing_subject_label"))
        .when(F.col("property_label").isNull(), F.lit("missing_property_label"))
        .when((kind == "item") & F.col("object_label").isNull(), F.lit("missing_object_label"))
        .when(obj.isNull() & kind.isin("time", "quantity", "coordinate"), F.concat(F.lit("unparseable_"), kind))
        .when(obj.isNull(), F.lit("empty_object"))
    )
    return with_object.select(
        "subject",
        "property",
        "object_kind",
        "object_item",
        "object_value",
        "subject_label",
        "property_label",
        "object_label",
        "object_text",
        reason.alias("drop_reason"),
    )


def _statement_source(resolved: DataFrame) -> list[Column]:
    """The source columns of a fact read from a statement: its ids, or its literal as read."""
    item = F.col("object_kind") == "item"
    return [
        "subject",
        F.when(item, F.col("object_item")).alias("object"),
        F.when(~item, F.col("object_value")).alias("value"),
    ]


def _entity_source(value: Column) -> list[Column]:
    """The source columns of a description fact: the entity and the description."""
    return [F.col("entity").alias("subject"), F.lit(None).cast("string").alias("object"), value.alias("value")]


def statement_facts(resolved: DataFrame) -> DataFrame:
    """(text, kind, property, subject, object, value) of kept statements."""
    return resolved.where(F.col("drop_reason").isNull()).select(
        fact_text(F.col("subject_label"), F.col("property_label"), F.col("object_text")).alias("text"),
        F.lit("statement").alias("kind"),
        "property",
        *_statement_source(resolved),
    )


def inverse_facts(resolved: DataFrame, inverse_labels: Mapping[str, str]) -> DataFrame | None:
    """``<object> <inverse label> <subject> .`` for kept item statements with a configured inverse label."""
    if not inverse_labels:
        return None
    pairs = [F.lit(x) for pid, label in sorted(inverse_labels.items()) for x in (pid, label.strip())]
    inverse_label = F.create_map(*pairs)[F.col("property")]
    return resolved.where(
        F.col("drop_reason").isNull() & (F.col("object_kind") == "item") & inverse_label.isNotNull()
    ).select(
        fact_text(F.col("object_label"), inverse_label, F.col("subject_label")).alias("text"),
        F.lit("inverse").alias("kind"),
        "property",
        *_statement_source(resolved),  # the statement's ids, as stored: the kind says it reads backwards
    )


def described_entities(resolved: DataFrame) -> DataFrame:
    """(entity, label) of every subject and item object of a kept statement."""
    kept = resolved.where(F.col("drop_reason").isNull())
    subjects = kept.select(F.col("subject").alias("entity"), F.col("subject_label").alias("label"))
    objects = kept.where(F.col("object_kind") == "item").select(
        F.col("object_item").alias("entity"), F.col("object_label").alias("label")
    )
    return subjects.unionByName(objects).dropDuplicates(["entity"])


def description_facts(entities: DataFrame, terms: DataFrame, languages: Sequence[str]) -> DataFrame:
    """``<entity> <description> <…> .``: one per entity, in the first configured language that has one."""
    rank = F.array_position(F.array(*[F.lit(lang) for lang in languages]), F.col("lang"))
    best = (
        terms.where((F.col("kind") == "description") & F.col("lang").isin(list(languages)))
        .select("entity", rank.alias("rank"), clean_text(F.col("value")).alias("value"))
        .where(F.col("value") != "")
        .groupBy("entity")
        .agg(F.min_by("value", "rank").alias("value"))
    )
    return entities.join(best, "entity").select(
        fact_text(F.col("label"), F.lit(DESCRIPTION_LABEL), F.col("value")).alias("text"),
        F.lit("description").alias("kind"),
        F.lit(None).cast("string").alias("property"),
        *_entity_source(F.col("value")),
    )


def short_description_facts(entities: DataFrame, sitelinks: DataFrame) -> DataFrame:
    """``<entity> <short description> <…> .`` from the English Wikipedia short description."""
    short = (
        sitelinks.select("entity", clean_text(F.col("short_description")).alias("value"))
        .where(F.col("value").isNotNull() & (F.col("value") != ""))
        .groupBy("entity")
        .agg(F.min("value").alias("value"))
    )
    return entities.join(short, "entity").select(
        fact_text(F.col("label"), F.lit(SHORT_DESCRIPTION_LABEL), F.col("value")).alias("text"),
        F.lit("short_description").alias("kind"),
        F.lit(None).cast("string").alias("property"),
        *_entity_source(F.col("value")),
    )


def dedupe_facts(candidates: DataFrame) -> DataFrame:
    """One row per distinct text (schema FACTS); ``fact_id = xxhash64(text)``.

    A text produced by several sources keeps the first kind of KIND_ORDER (then
    the smallest property), so the result does not depend on partitioning.
    """
    order = F.array_position(F.array(*[F.lit(k) for k in KIND_ORDER]), F.col("kind"))
    first = (
        candidates.select("text", F.struct(order.alias("order"), "kind", "property").alias("source"))
        .groupBy("text")
        .agg(F.min("source").alias("source"))
    )
    return first.select(
        F.xxhash64("text").alias("fact_id"),
        "text",
        F.col("source.kind").alias("kind"),
        F.col("source.property").alias("property"),
    )


def provenance_candidates(candidates: DataFrame, graph_ids: bool = False) -> DataFrame:
    """One row per distinct (text, source), with the text's ``fact_id``: the PROVENANCE
    columns plus ``text`` (to keep only the sources of the facts that survive the id check).

    ``graph_ids``: the statements came from the graph stage, whose entity ids carry
    ENTITY_PREFIX; provenance gives the ids as the graph's input rows wrote them.
    """
    return _source_columns(candidates, graph_ids).dropDuplicates()


def _source_columns(candidates: DataFrame, graph_ids: bool) -> DataFrame:
    """Each candidate's PROVENANCE columns and ``text`` (:func:`provenance_candidates`)."""
    ids = [F.col("subject"), F.col("object")]
    if graph_ids:
        ids = [F.when(c.startswith(ENTITY_PREFIX), F.substring(c, len(ENTITY_PREFIX) + 1, 1 << 30)).otherwise(c)
               for c in ids]
    return candidates.select(
        F.xxhash64("text").alias("fact_id"),
        "kind",
        ids[0].alias("subject"),
        "property",
        ids[1].alias("object"),
        "value",
        "text",
    )


def block_candidates(candidates: DataFrame, bits: int, graph_ids: bool = False) -> DataFrame:
    """The rows of :func:`provenance_candidates` for a build in which no two texts share a
    fact id, as the packing reads them: the text replaced by its :func:`value_codes` columns,
    with each row's ``block`` key, and hashed by that key, so that the shuffle that makes the
    rows distinct also puts every block whole in one partition (the packing then shuffles
    nothing), and neither that shuffle nor a cached copy carries the texts.

    One row per distinct (fact id, source) is one per distinct (text, source) only when
    every id names one text: with a collision, use :func:`provenance_candidates`."""
    rows = value_codes(_source_columns(candidates, graph_ids))
    return rows.select(_block_key(bits).alias("block"), "*").repartition("block").dropDuplicates()


def kept_sources(provenance: DataFrame, kept_facts: DataFrame) -> DataFrame:
    """The provenance candidates (with their ``text``) of the facts kept: a source whose text
    lost an id collision is dropped with its fact (its id names another text)."""
    return provenance.join(kept_facts.select("fact_id", "text"), ["fact_id", "text"], "left_semi")


def kept_provenance(provenance: DataFrame, kept_facts: DataFrame) -> DataFrame:
    """The provenance rows (schema PROVENANCE) of the facts kept (:func:`kept_sources`)."""
    return kept_sources(provenance, kept_facts).select(*PROVENANCE.fieldNames())


def statements_merged(provenance: DataFrame) -> dict[str, int]:
    """Of the provenance candidates (one row per distinct source and text), the distinct
    statements (``sources``: a statement given twice in the dump is one) and the distinct texts
    they make (``texts``: statements whose labels collide make one text)."""
    row = provenance.where(F.col("kind") == "statement").agg(
        F.count("*").alias("sources"), F.countDistinct("fact_id").alias("texts")).first()
    return {"sources": int(row["sources"]), "texts": int(row["texts"])}


def colliding_ids(facts: DataFrame) -> DataFrame:
    """(fact_id, n, kept_text) of every id that more than one text hashes to; ``kept_text``:
    the smallest of them, which keeps the id."""
    return facts.groupBy("fact_id").agg(F.count("*").alias("n"), F.min("text").alias("kept_text")).where(
        F.col("n") > 1
    )


def has_id_collision(facts: DataFrame) -> bool:
    """Whether two of ``facts`` (one row per distinct text) share a ``fact_id``: a group-by of
    the ids alone, which reads and shuffles no text (``colliding_ids`` does, to pick the text
    that keeps the id, and runs only when this says there is one)."""
    return not facts.groupBy("fact_id").count().where(F.col("count") > 1).isEmpty()


def drop_id_collisions(facts: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(facts with unique fact_id, the colliding facts dropped).

    With n facts about n^2 / 2^65 collisions are expected (0.02 for 800 million):
    rare but possible, and a shared id would make the token datasets ambiguous.
    The smallest text keeps the id; the others are dropped and counted.
    """
    colliding = colliding_ids(facts)
    flagged = facts.join(F.broadcast(colliding.select("fact_id", "kept_text")), "fact_id", "left")
    is_loser = F.col("kept_text").isNotNull() & (F.col("text") != F.col("kept_text"))
    kept = flagged.where(~is_loser).select(*FACTS.fieldNames())
    dropped = flagged.where(is_loser).select(*FACTS.fieldNames())
    return kept, dropped


def fact_candidates(
    statements: DataFrame,
    labels: DataFrame,
    properties: DataFrame | None,
    terms: DataFrame | None,
    sitelinks: DataFrame | None,
    vcfg: VerbalizeConfig,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
) -> tuple[DataFrame, DataFrame]:
    """(every fact text with its source, one row per source: ``text, kind, property,
    subject, object, value``; resolved statements with ``drop_reason``). The facts are
    :func:`dedupe_facts` of the candidates, their provenance :func:`provenance_candidates`."""
    resolved = resolve_statements(statements, labels, property_label_table(labels, properties))
    parts = [statement_facts(resolved)]
    if vcfg.inverse:
        inverse = inverse_facts(resolved, vcfg.inverse_labels)
        if inverse is None:
            log.warning("verbalize.inverse is on but verbalize.inverse_labels is empty: no inverse facts")
        else:
            parts.append(inverse)
    entities = None
    if (vcfg.descriptions and terms is not None) or (vcfg.short_descriptions and sitelinks is not None):
        entities = described_entities(resolved)
    if vcfg.descriptions and terms is not None:
        parts.append(description_facts(entities, terms, languages))
    if vcfg.short_descriptions and sitelinks is not None:
        parts.append(short_description_facts(entities, sitelinks))
    candidates = parts[0]
    for part in parts[1:]:
        candidates = candidates.unionByName(part)
    return candidates, resolved


# ---------------------------------------------------------------- provenance blocks
PROVENANCE_BLOCKS = "block long, facts int, sources int, data binary"


def _id_columns(name: str, wikidata: Column) -> list[Column]:
    """An id as a block stores it (refactx_index.tree.provenance.split_id): code, number, text;
    ``wikidata``: whether it matches prov.WIKIDATA_ID_PATTERN."""
    value = F.col(name)
    return [
        F.when(value.isNull(), F.lit(prov.CODE_NULL)).when(wikidata, F.ascii(value) - 64)
        .otherwise(F.lit(prov.CODE_STRING)).alias(f"{name}_code"),
        F.when(wikidata, F.substring(value, 2, 18).cast("long")).otherwise(F.lit(0)).alias(f"{name}_number"),
        F.when(value.isNotNull() & ~wikidata, value).alias(f"{name}_text"),
    ]


def _block_key(bits: int) -> Column:
    """The key of the block that holds a source: the top ``bits`` bits of its fact id."""
    return F.shiftright(F.col("fact_id"), 64 - bits) if bits else F.lit(0).cast("long")


def value_codes(sources: DataFrame) -> DataFrame:
    """``sources`` (with the fact's ``text``) without the text, with how a block stores each
    value (``value_code``, and ``value_length`` for a value the text holds): a value that the
    fact's text ends with (``> <value> .``: a description, a plain string literal) is not
    kept (or its length alone, when it holds a ``> <`` itself).

    The two tests against the text are columns of a projection of their own: the codes read
    each of them up to three times, and Spark evaluates an expression where it is written."""
    value, text = F.col("value"), F.col("text")
    last = (value.isNotNull() & ~value.contains(prov.SEPARATOR)
            & text.endswith(F.concat(F.lit(prov.SEPARATOR), value, F.lit(prov.END))))
    sized = value.isNotNull() & text.endswith(F.concat(F.lit("<"), value, F.lit(prov.END)))
    flagged = sources.select("*", last.alias("_last"), sized.alias("_sized"))
    last, sized = F.col("_last"), F.col("_sized")
    code = (F.when(value.isNull(), F.lit(prov.VALUE_NULL)).when(last, F.lit(prov.VALUE_IN_TEXT))
            .when(sized, F.lit(prov.VALUE_IN_TEXT_SIZED)).otherwise(F.lit(prov.VALUE_STRING)))
    return flagged.select(*(c for c in sources.columns if c != "text"), code.alias("value_code"),
                          F.when(sized, F.length(value)).otherwise(F.lit(0)).alias("value_length"))


def block_sources(sources: DataFrame, bits: int) -> DataFrame:
    """The provenance candidates (PROVENANCE columns and the fact's ``text``, or instead of the
    text the :func:`value_codes` columns) as the integer columns of a block, with each row's
    block key (kept when ``sources`` has a ``block`` column)."""
    if "value_code" not in sources.columns:
        sources = value_codes(sources)
    if "block" not in sources.columns:
        sources = sources.select(_block_key(bits).alias("block"), "*")
    # each id's Wikidata test once, in a projection of its own (each of its three columns reads it)
    ids = ("subject", "property", "object")
    tested = sources.select("*", *(F.col(n).rlike(prov.WIKIDATA_ID_PATTERN).alias(f"_{n}_wikidata") for n in ids))
    kind = F.array_position(F.array(*[F.lit(k) for k in prov.KINDS]), F.col("kind")) - 1
    code = F.col("value_code")
    # the values a block stores as strings: neither in the text as its last part nor sized
    in_text = code.isin(prov.VALUE_IN_TEXT, prov.VALUE_IN_TEXT_SIZED)
    return tested.select(
        "block", "fact_id", kind.alias("kind_code"),
        *(c for name in ids for c in _id_columns(name, F.col(f"_{name}_wikidata"))),
        code.alias("value_code"),
        "value_length",
        F.when(~in_text, F.col("value")).alias("value_text"),
    )


def pack_table(bits: int, table: pa.Table) -> pa.RecordBatch:
    """PROVENANCE_BLOCKS rows of whole blocks (``table``: block_sources rows sorted by block,
    then fact id): numpy per block, one zstd frame each."""
    table = table.combine_chunks()
    keys = table.column("block").to_numpy()
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    number = {c: table.column(c).to_numpy() for c in (
        "fact_id", "kind_code", "value_code", "value_length",
        *(f"{n}_{part}" for n in ("subject", "property", "object") for part in ("code", "number")))}
    texts = [table.column(f"{n}_text") for n in ("subject", "property", "object", "value")]
    codes = np.stack([number[f"{n}_code"] for n in ("subject", "property", "object")]).astype(np.uint64)
    numbers = np.stack([number[f"{n}_number"] for n in ("subject", "property", "object")]).astype(np.uint64)
    out: dict[str, list] = {"block": [], "facts": [], "sources": [], "data": []}
    for a, b in zip(starts.tolist(), ends.tolist()):
        ids = number["fact_id"][a:b]
        strings = [s for t in texts for s in t.slice(a, b - a).drop_null().to_pylist()]
        out["block"].append(int(keys[a]))
        out["facts"].append(int(np.count_nonzero(np.r_[True, ids[1:] != ids[:-1]])))
        out["sources"].append(b - a)
        out["data"].append(prov.encode_block(
            int(keys[a]), bits, ids, number["kind_code"][a:b], codes[:, a:b], numbers[:, a:b],
            number["value_code"][a:b], number["value_length"][a:b], strings))
    return pa.RecordBatch.from_pydict(out, schema=pa.schema(
        [("block", pa.int64()), ("facts", pa.int32()), ("sources", pa.int32()), ("data", pa.binary())]))


def pack_blocks(bits: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: a partition's block_sources rows (sorted by block, then
    fact id; every block whole in one partition) in, one PROVENANCE_BLOCKS row per block out.
    A block that runs on into the next batch is held back until it ends."""
    carry: pa.Table | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        table = pa.Table.from_batches([batch])
        if carry is not None:
            table = pa.concat_tables([carry, table])
        keys = table.column("block").to_numpy()
        last = int(np.searchsorted(keys, keys[-1]))  # where the last block starts: keys are sorted
        if last:
            yield pack_table(bits, table.slice(0, last))
        carry = table.slice(last)
    if carry is not None and carry.num_rows:
        yield pack_table(bits, carry)


def provenance_blocks(sources: DataFrame, bits: int, by_block: bool = False) -> DataFrame:
    """One PROVENANCE_BLOCKS row per block that holds a source of ``sources`` (PROVENANCE
    columns and the fact's ``text``, or :func:`block_candidates`): its key, facts, sources and
    bytes (refactx_index.tree.provenance.encode_block), packed on the executors. ``by_block``:
    ``sources`` are :func:`block_candidates`, already partitioned by block (no shuffle here)."""
    sources = block_sources(sources, bits)
    # hashed by block (no sampling job, as a range partitioning would run): a block is whole in
    # one partition, which the sort streams to pack_blocks block by block
    if not by_block:
        sources = sources.repartition("block")
    ordered = sources.sortWithinPartitions("block", "fact_id")
    return ordered.mapInArrow(functools.partial(pack_blocks, bits), PROVENANCE_BLOCKS)


# ---------------------------------------------------------------- job
def _read(spark: SparkSession, path: Path) -> DataFrame | None:
    """An optional input: absent, its facts are skipped."""
    if not path.exists():
        log.info("%s is absent: its facts are skipped", path)
        return None
    return spark.read.parquet(str(path))


def _count_map(rows: Sequence[Any]) -> dict[str, int]:
    return {str(key): int(n) for key, n in sorted(rows, key=lambda r: str(r[0])) if key is not None}


def write_provenance_blocks(sources: DataFrame, out: Path, bits: int, by_block: bool = False) -> dict[str, int]:
    """Pack the provenance candidates of the kept facts (with their ``text``, or
    :func:`block_candidates` with ``by_block``) into blocks keyed by the top ``bits`` bits of
    the fact id; their counts (``bits``, ``blocks``, ``facts``, ``sources``, ``bytes``), observed
    as the blocks are written (no job reads them back)."""
    from pyspark.sql import Observation

    observation = Observation()
    provenance_blocks(sources, bits, by_block).observe(
        observation, F.count(F.lit(1)).alias("blocks"), F.sum("facts").alias("facts"),
        F.sum("sources").alias("sources"), F.sum(F.length("data")).alias("bytes"),
    ).write.mode("overwrite").parquet(str(out))
    row = observation.get
    return {"bits": bits, **{k: int(row[k] or 0) for k in ("blocks", "facts", "sources", "bytes")}}


def run(ctx: StageContext) -> StageCounts:
    """Read parse/labels/sitelinks outputs, write verbalize/facts and counts.json."""
    spark, cfg = ctx.spark, ctx.cfg
    first = ingest_stage(cfg)
    statements = spark.read.parquet(str(stage_input(cfg, STAGE, "parse", "statements", written_by=first)))
    labels_by = first if first == "graph" else "labels"
    labels = spark.read.parquet(str(stage_input(cfg, STAGE, "labels", "labels", written_by=labels_by)))
    properties = _read(spark, cfg.stage_dir("parse") / "properties")
    terms = _read(spark, cfg.stage_dir("parse") / "terms") if cfg.verbalize.descriptions else None
    # a sitelinks folder left over from a config without sitelinks dumps must not be used
    sitelinks = (
        _read(spark, cfg.stage_dir("sitelinks") / "sitelinks")
        if cfg.verbalize.short_descriptions and cfg.input.sitelinks_source()
        else None
    )
    candidates, resolved = fact_candidates(
        statements, labels, properties, terms, sitelinks, cfg.verbalize, cfg.filter.languages)
    graph_ids = first == "graph"
    # the candidates feed the facts and their provenance: rendered (labels joined, literals
    # parsed, descriptions joined) once, not once per output
    resolved.persist(StorageLevel.MEMORY_AND_DISK)
    candidates.persist(StorageLevel.MEMORY_AND_DISK)
    out = cfg.stage_dir(STAGE) / "facts"
    provenance_out = cfg.stage_dir(STAGE) / "provenance"
    blocks_out = cfg.stage_dir(STAGE) / "provenance_blocks"
    staged = cfg.stage_dir(STAGE) / "_deduped"
    staged_provenance = cfg.stage_dir(STAGE) / "_provenance"
    try:
        by_reason = resolved.groupBy("drop_reason").count().collect()
        statements_in = sum(int(r["count"]) for r in by_reason)
        dropped = _count_map([(r["drop_reason"], r["count"]) for r in by_reason])

        # Counted by their writes (``observe_outcomes``), not by jobs that read them back. A
        # text with a statement among its sources is a fact of kind statement: KIND_ORDER puts
        # statements first.
        is_statement = F.col("kind") == "statement"
        deduped, deduped_counted = observe_outcomes(dedupe_facts(candidates), {"statement": is_statement})
        deduped.write.mode("overwrite").parquet(str(staged))
        distinct = deduped_counted()
        distinct_texts = distinct.rows
        if not has_id_collision(spark.read.parquet(str(staged))):
            # the usual case (0.02 collisions expected in 800 million facts): the distinct
            # texts are the facts as they are, and every source is kept
            remove_tree(spark, out)
            move_tree(spark, staged, out)
            # the sources, made distinct by block and without their texts (their value codes
            # instead): written as the provenance, then packed from the same cached rows
            bits = prov.block_bits(distinct_texts)
            by_block = block_candidates(candidates, bits, graph_ids).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                provenance, provenance_counted = observe_outcomes(
                    by_block.select(*PROVENANCE.fieldNames()), {"statement": is_statement})
                provenance.write.mode("overwrite").parquet(str(provenance_out))
                sources = provenance_counted()
                blocks = write_provenance_blocks(by_block, blocks_out, bits, by_block=True)
            finally:
                by_block.unpersist()
            provenance_rows = sources.rows
            # one text, one id: the distinct ids of the statements' sources are their texts
            merged = {"sources": sources.by_outcome["statement"], "texts": distinct.by_outcome["statement"]}
        else:
            provenance_candidates(candidates, graph_ids).write.mode("overwrite").parquet(str(staged_provenance))
            merged = statements_merged(spark.read.parquet(str(staged_provenance)))
            kept, _ = drop_id_collisions(spark.read.parquet(str(staged)))
            kept.write.mode("overwrite").parquet(str(out))
            kept_with_text = kept_sources(spark.read.parquet(str(staged_provenance)), spark.read.parquet(str(out)))
            kept_with_text.select(*PROVENANCE.fieldNames()).write.mode("overwrite").parquet(str(provenance_out))
            provenance_rows = spark.read.parquet(str(provenance_out)).count()
            blocks = write_provenance_blocks(kept_with_text, blocks_out, prov.block_bits(distinct_texts))
    finally:
        candidates.unpersist()
        resolved.unpersist()

    written = spark.read.parquet(str(out))
    by_kind_property = written.groupBy("kind", "property").count().collect()
    by_kind: dict[str, int] = {}
    by_property: dict[str, int] = {}
    for row in by_kind_property:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + int(row["count"])
        if row["property"] is not None:
            by_property[row["property"]] = by_property.get(row["property"], 0) + int(row["count"])
    facts_out = sum(by_kind.values())
    # every deduplicated fact is either written or dropped as an id collision
    collisions = distinct_texts - facts_out
    if collisions:
        dropped["fact_id_collision"] = collisions
    statements_kept = statements_in - sum(v for k, v in dropped.items() if k != "fact_id_collision")
    counts = {
        "statements_in": statements_in,
        "statements_kept": statements_kept,
        # a kept statement that is not a fact of its own: statements_kept = duplicate_statement
        # + same_text + the distinct statement texts
        "statements_merged": {"duplicate_statement": statements_kept - merged["sources"],
                              "same_text": merged["sources"] - merged["texts"]},
        "dropped": dropped,
        "facts": facts_out,
        "distinct_texts": distinct_texts,
        "provenance_rows": provenance_rows,
        "provenance_blocks": blocks,
        "by_kind": dict(sorted(by_kind.items())),
        "by_property": dict(sorted(by_property.items())),
        "inputs": {
            "properties": properties is not None,
            "terms": terms is not None,
            "sitelinks": sitelinks is not None,
        },
    }
    if (blocks["facts"], blocks["sources"]) != (facts_out, provenance_rows):
        raise RuntimeError(f"the provenance blocks hold {blocks['facts']} facts and {blocks['sources']} sources; "
                           f"verbalize wrote {facts_out} facts and {provenance_rows} sources")
    remove_tree(spark, staged)
    remove_tree(spark, staged_provenance)
    write_counts(cfg, STAGE, counts)
    return counts
