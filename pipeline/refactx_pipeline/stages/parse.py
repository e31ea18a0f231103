"""Stage 1, parse: Wikidata truthy N-Triples -> statements, terms, properties, rejects.

Two phases, one scan of the dump:

1. **lex** (JVM only): every line of every input file goes once through
   ``NTriplesLexer`` (``refactx_pipeline/java``: one left-to-right scan, literal escapes
   decoded in the same scan, no regex), which classifies it as statement, term,
   property_type, reject or skip. ``write_staged`` writes all but the skips to one
   staged Parquet dataset and counts every kind and reason during that write.
   Rejects keep their raw line; only they later go through the reason rules
   (``reject_reason``).
2. **resolve** (on the staged Parquet): property datatypes (the dump's own
   ``wikibase:propertyType`` lines, else a property table, else inferred from
   the objects' shapes), the configured filters, and the outputs of
   ``refactx_pipeline/stages/schemas.py`` plus ``counts.json``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any, Iterable

from py4j.java_gateway import JavaClass
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from refactx_pipeline.config import Config
from refactx_index.errors import ConfigError

from refactx_pipeline.common import observe_outcomes, remove_tree, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import PROPERTIES, REJECTS, STATEMENTS, TERMS

log = logging.getLogger(__name__)

MAX_REJECT_LINE = 10_000

# The predicates, namespaces and datatype IRIs a line is classified by live in the
# lexer (NTriplesLexer.java), the only code that reads them.

# Wikidata JSON datatype names (property tables) -> RDF names (propertyType lines)
JSON_DATATYPES = {
    "wikibase-item": "WikibaseItem",
    "wikibase-property": "WikibaseProperty",
    "wikibase-lexeme": "WikibaseLexeme",
    "wikibase-form": "WikibaseForm",
    "wikibase-sense": "WikibaseSense",
    "string": "String",
    "external-id": "ExternalId",
    "quantity": "Quantity",
    "time": "Time",
    "globe-coordinate": "GlobeCoordinate",
    "monolingualtext": "Monolingualtext",
    "url": "Url",
    "commonsmedia": "CommonsMedia",
    "math": "Math",
    "geo-shape": "GeoShape",
    "tabular-data": "TabularData",
    "musical-notation": "MusicalNotation",
    "entity-schema": "EntitySchema",
}

# ---------------------------------------------------------------- lexical patterns
# What ``reject_reason`` names refused lines with (Java regex; the lexer itself is
# ``refactx_pipeline/java/org/refactx/ntriples/NTriplesLexer.java``, no regex).
IRI_CHAR = r'[^\x00-\x20<>"{}|^`\\]'
IRI = "<" + IRI_CHAR + "*>"
BNODE = r"_:[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"
LANG_TAG = r"[A-Za-z]+(?:-[A-Za-z0-9]+)*"
LANG_OR_DATATYPE = r"^(?:@" + LANG_TAG + r"|\^\^" + IRI + r")?$"
HEX = "[0-9A-Fa-f]"
# every escape N-Triples allows in a literal; \U only up to U+10FFFF
VALID_ESCAPE = r"""\\(?:[tbnrf"'\\]|u""" + HEX + "{4}|U(?:000" + HEX + "|0010)" + HEX + "{4})"
# an odd backslash run before \uD800-\uDBFF not followed by a low surrogate, or a low one alone
LONE_SURROGATE = (
    r"(?i)(?<!\\)(?:\\\\)*(?:\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})"
    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2})"
)

# ---------------------------------------------------------------- phase 1: lex

LEXER_CLASS = "org.refactx.ntriples.NTriplesLexer"
# what the lexer returns per line, in its order (NTriplesLexer.row)
LEXED = StructType([StructField(name, StringType(), True) for name in (
    "kind",  # statement | term | property_type | reject | skip
    "reason",  # why a line is skipped (a reject's reason is named later, by name_rejects)
    "subject",  # Q/P id of a statement, term or property_type line
    "property",  # P id of a statement
    "object_kind",  # item | string | time | quantity | coordinate | monolingual | other
    "object_item",  # Q id of an item object
    "object_value",  # a literal's unescaped text, or an IRI object (not an item) without its <>
    "object_datatype",  # a literal's datatype IRI
    "object_lang",  # a literal's language tag, lower case
    "inferred_datatype",  # the property datatype the object's shape implies
    "term_kind",  # label | description | alias
    "declared_datatype",  # a propertyType line's datatype name
)])


# every (kind, reason) the lexer gives a line (NTriplesLexer: a reject's reason is named later)
LINE_OUTCOMES = (
    ("statement", None), ("term", None), ("property_type", None), ("reject", None),
    ("skip", "blank_or_comment"), ("skip", "non_item_subject"), ("skip", "unknown_value"),
    ("skip", "other_language"), ("skip", "term_of_other_subject"), ("skip", "no_value"),
    ("skip", "other_predicate"),
)
# the staged dataset: the lexer's fields plus a reject's source file and raw line
STAGED = StructType(LEXED.fields[:2] + [StructField("source", StringType(), True),
                                        StructField("line", StringType(), True)] + LEXED.fields[2:])


def lexer_function(spark: SparkSession, languages: Iterable[str], entity_namespace: str,
                   direct_claim_namespace: str) -> str:
    """Register the JVM lexer, configured, as a SQL function of a line's bytes;
    return its name (one per configuration, so sessions can hold several)."""
    langs = sorted({lang.lower() for lang in languages})
    key = json.dumps([entity_namespace, direct_claim_namespace, langs])
    name = "refactx_lex_ntriples_" + hashlib.sha1(key.encode()).hexdigest()[:12]
    jvm, gateway = spark._jvm, spark.sparkContext._gateway  # noqa: SLF001 (py4j: a Java UDF instance)
    jlangs = gateway.new_array(jvm.java.lang.String, len(langs))
    for i, lang in enumerate(langs):
        jlangs[i] = lang
    lexer_class = functools.reduce(getattr, LEXER_CLASS.split("."), jvm)
    if not isinstance(lexer_class, JavaClass):  # py4j names a missing class as a package
        raise ConfigError(
            f"{LEXER_CLASS} is not on Spark's classpath: pass the project jar "
            "(`python -m refactx_pipeline.jvm` builds it and prints its path) to spark-submit with --jars"
        )
    lexer = lexer_class(entity_namespace, direct_claim_namespace, jlangs)
    return_type = jvm.org.apache.spark.sql.types.DataType.fromJson(LEXED.json())
    spark._jsparkSession.udf().register(name, lexer, return_type)  # noqa: SLF001
    return name


def lex_lines(
    lines: DataFrame,
    languages: Iterable[str],
    entity_namespace: str,
    direct_claim_namespace: str,
) -> DataFrame:
    """Staged rows from raw lines (columns ``value``, ``source``): exactly one row
    per line, whose ``kind`` is statement, term, property_type, reject or skip
    (``reason`` says which valid line this stage does not need).

    Each line is lexed once, in the JVM (``NTriplesLexer``): no regex, no Python.
    A reject keeps its ``source`` and raw ``line`` and a null ``reason``:
    ``name_rejects`` names it later, on the rejects alone."""
    function = lexer_function(lines.sparkSession, languages, entity_namespace, direct_claim_namespace)
    value = F.col("value")
    lexed = lines.select(value, F.col("source"), F.call_function(function, value.cast("binary")).alias("t"))
    is_reject = F.col("t.kind") == "reject"
    return lexed.select(
        F.col("t.kind").alias("kind"),
        F.col("t.reason").alias("reason"),
        F.when(is_reject, F.col("source")).alias("source"),
        F.when(is_reject, value).alias("line"),  # whole and as read: name_rejects needs it
        *[F.col("t." + name).alias(name) for name in LEXED.fieldNames()[2:]],
    )


def reject_reason(raw: Column) -> Column:
    """Why a line the lexer refused is malformed (never null).

    Evaluated only for refused lines, so its splits and regexes cost nothing on
    valid input; the first failing rule names the reason."""
    text = F.btrim(raw, F.lit(" \t\r"))
    parts = F.split(text, r"[ \t]+", 3)
    s, p, rest = F.get(parts, 0), F.get(parts, 1), F.get(parts, 2)
    o = F.btrim(F.substring(rest, F.lit(1), F.length(rest) - 1), F.lit(" \t"))
    is_lit = o.startswith('"')
    suffix = F.substring_index(o, '"', -1)
    body_len = F.length(o) - F.length(suffix) - 2
    body = F.when(body_len >= 0, F.substring(o, F.lit(2), body_len))
    stripped = F.regexp_replace(body, VALID_ESCAPE, "")
    term_re = "^(?:" + IRI + "|" + BNODE + ")$"
    return (
        F.when(~F.is_valid_utf8(raw), "invalid_utf8")
        .when(rest.isNull(), "too_few_terms")
        .when(~rest.endswith("."), "missing_final_dot")
        .when(~s.rlike(term_re), "bad_subject")
        .when(~p.rlike("^" + IRI + "$"), "bad_predicate")
        .when(is_lit & body.isNull(), "unterminated_literal")
        .when(is_lit & ~suffix.rlike(LANG_OR_DATATYPE), "bad_language_or_datatype")
        .when(is_lit & stripped.contains("\\"), "bad_escape")
        .when(is_lit & stripped.contains('"'), "unescaped_quote")
        .when(is_lit & body.rlike(LONE_SURROGATE), "lone_surrogate")
        .when(~is_lit & ~o.rlike(term_re), "bad_object")
        # only a raw line feed or carriage return inside a literal is left
        .otherwise("bad_literal_character")
    )


# every reason ``reject_reason`` names, in its order (the rejects are counted by these)
REJECT_REASONS = (
    "invalid_utf8", "too_few_terms", "missing_final_dot", "bad_subject", "bad_predicate",
    "unterminated_literal", "bad_language_or_datatype", "bad_escape", "unescaped_quote",
    "lone_surrogate", "bad_object", "bad_literal_character",
)


def name_rejects(staged: DataFrame) -> DataFrame:
    """``staged`` with each reject's ``reason`` named and its ``line`` cut to
    ``MAX_REJECT_LINE`` characters of valid UTF-8. Run it on few rows (the staged
    rejects): the reason rules cost several regexes per row."""
    is_reject = F.col("kind") == "reject"
    line = F.col("line")
    return staged.withColumns({
        "reason": F.when(is_reject, reject_reason(line)).otherwise(F.col("reason")),
        "line": F.when(is_reject, F.substring(F.make_valid_utf8(line), 1, MAX_REJECT_LINE)),
    }).select(*staged.columns)


def write_staged(staged: DataFrame, path: str) -> dict[str, dict[str, int]]:
    """Write the lex phase's output (``lex_lines``) as Parquet and return the number
    of lines by kind and reason (``LINE_OUTCOMES``).

    Skipped lines are counted, not written: they are most of a real dump (terms in
    other languages, sitelink metadata: 81% of the 2018 dump's head) and nothing
    reads them again. The counts are observed during the write itself, not by
    another pass over the lines (``observe_outcomes``). One flat dataset:
    partitioning it by kind would sort every task's rows first."""
    kind, reason = F.col("kind"), F.col("reason")
    outcomes = {(k, r): (kind == k) & (reason.isNull() if r is None else reason == r) for k, r in LINE_OUTCOMES}
    named = {f"{k}:{r or ''}": condition for (k, r), condition in outcomes.items()}
    # the lexer and LINE_OUTCOMES disagreeing is a bug, not bad input: exhaustive
    staged, counted = observe_outcomes(staged, named, exhaustive=True)
    staged.where(kind != "skip").write.mode("overwrite").parquet(path)
    observed = counted().by_outcome
    counts: dict[str, dict[str, int]] = {}
    for (k, r), name in zip(outcomes, named):
        if observed[name]:
            counts.setdefault(k, {})[r or ""] = observed[name]
    return counts


def read_staged(spark: SparkSession, path: str) -> DataFrame:
    """The staged rows ``write_staged`` wrote (empty when every line was skipped)."""
    return spark.read.schema(STAGED).parquet(path)


def read_dump_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Lines of every input file (globs and directories allowed; .gz/.bz2 by extension,
    bz2 split across tasks). A missing input is a configuration error, not an empty build."""
    if not paths:
        raise ConfigError("input.dumps is empty: nothing to parse")
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001 (Hadoop glob API)
    for path in paths:
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        matches = hpath.getFileSystem(conf).globStatus(hpath)
        if matches is None or len(matches) == 0:
            raise ConfigError(f"input dump {path!r} matches no file")
    # lineSep unset: \n, \r\n and \r all end a line (CRLF files parse like LF files)
    return spark.read.text(paths).select(F.col("value"), F.input_file_name().alias("source"))


# ---------------------------------------------------------------- phase 2: resolve


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Columns of ``schema`` in its order and types."""
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def read_property_table(spark: SparkSession, path: str) -> DataFrame:
    """A CSV with header ``id,label,datatype``; datatypes in RDF (``WikibaseItem``) or
    JSON (``wikibase-item``) spelling."""
    table = spark.read.option("header", True).option("mode", "PERMISSIVE").csv(path)
    missing = {"id", "datatype"} - set(table.columns)
    if missing:
        raise ConfigError(f"property table {path}: missing column(s) {', '.join(sorted(missing))}")
    mapping = F.create_map([F.lit(x) for kv in JSON_DATATYPES.items() for x in kv])
    dtype = F.btrim(F.col("datatype"))
    label = F.col("label") if "label" in table.columns else F.lit(None).cast("string")
    return table.select(
        F.upper(F.btrim(F.col("id"))).alias("property"),
        F.coalesce(F.element_at(mapping, F.lower(dtype)), dtype).alias("table_datatype"),
        label.alias("table_label"),
    ).where(F.col("property").rlike("^P[1-9][0-9]*$"))


def resolve_properties(
    statements: DataFrame,
    terms: DataFrame,
    declared: DataFrame,
    table: DataFrame | None,
    label_lang: str,
) -> DataFrame:
    """One row per property seen: datatype from the dump's propertyType lines, else
    the property table, else the most frequent shape of its objects; label in
    ``label_lang``. Columns: property, datatype, label, datatype_source.

    The dump's own sources (statements, propertyType lines, labels) are rows of one union
    grouped by property: two shuffles (the objects' shapes, then the properties) where a join
    per source cost a shuffle and a Spark job each. The property table, when given, is joined
    as it is."""
    none = F.lit(None).cast("string")
    shapes = statements.groupBy("property", "inferred_datatype").count()
    # the most frequent shape (ties: the larger name) is the largest (count, shape) pair
    shape = F.when(F.col("inferred_datatype").isNotNull(), F.struct("count", "inferred_datatype"))
    no_shape = F.lit(None).cast("struct<count:bigint,inferred_datatype:string>")
    rows = [
        shapes.select("property", none.alias("declared_datatype"), shape.alias("shape"), none.alias("term_label")),
        declared.select("property", "declared_datatype", no_shape.alias("shape"), none.alias("term_label")),
        terms.where((F.col("kind") == "label") & (F.col("lang") == label_lang) & F.col("entity").startswith("P"))
        .select(F.col("entity").alias("property"), none.alias("declared_datatype"), no_shape.alias("shape"),
                F.col("value").alias("term_label")),
    ]
    if table is not None:
        rows.append(table.select("property", none.alias("declared_datatype"), no_shape.alias("shape"),
                                 none.alias("term_label")))
    props = functools.reduce(DataFrame.unionByName, rows).groupBy("property").agg(
        F.min("declared_datatype").alias("declared_datatype"),
        F.max("shape")["inferred_datatype"].alias("inferred_datatype"),
        F.min("term_label").alias("term_label"),
    )
    if table is not None:
        props = props.join(table, "property", "left")
    else:
        props = props.withColumn("table_datatype", none).withColumn("table_label", none)
    dtype_source = (
        F.when(F.col("declared_datatype").isNotNull(), "declared")
        .when(F.col("table_datatype").isNotNull(), "table")
        .when(F.col("inferred_datatype").isNotNull(), "inferred")
        .otherwise("unknown")
    )
    return props.select(
        "property",
        F.coalesce("declared_datatype", "table_datatype", "inferred_datatype").alias("datatype"),
        F.coalesce("term_label", "table_label").alias("label"),
        dtype_source.alias("datatype_source"),
    )


# where ``resolve_properties`` found a property's datatype
DATATYPE_SOURCES = ("declared", "table", "inferred", "unknown")


def filter_reasons(datatypes: Iterable[str], cfg: Config) -> tuple[str, ...]:
    """Every reason ``filter_reason`` can give a statement whose property has one of
    ``datatypes`` (those of the resolved properties)."""
    keep = set(cfg.filter.keep_datatypes)
    named_after_datatype = tuple(f"datatype_{d}" for d in sorted(set(datatypes) - keep))
    return ("denied_property", "not_in_allow_list", "datatype_unknown", *named_after_datatype,
            "object_not_item", "excluded_class")


def filter_reason(statements: DataFrame, properties: DataFrame, cfg: Config) -> DataFrame:
    """``statements`` with ``datatype`` and ``filter_reason`` (null: kept).

    The configured lists are literal sets in the plan (broadcast by construction);
    the property table is small and broadcast; only the excluded-subject set,
    derived from the data, is an anti-join."""
    f = cfg.filter
    df = statements.join(F.broadcast(properties.select("property", "datatype")), "property", "left")
    keep = [d for d in f.keep_datatypes]
    reason = (
        F.when(F.col("property").isin(list(f.deny_properties)) if f.deny_properties else F.lit(False),
               "denied_property")
        .when(~F.col("property").isin(list(f.allow_properties)) if f.allow_properties else F.lit(False),
              "not_in_allow_list")
        .when(F.col("datatype").isNull(), "datatype_unknown")
        .when(~F.col("datatype").isin(keep), F.concat(F.lit("datatype_"), F.col("datatype")))
        .when((F.col("object_kind") == "other") & F.col("datatype").isin("WikibaseItem"), "object_not_item")
    )
    df = df.withColumn("filter_reason", reason)
    if f.exclude_classes:
        excluded = (
            statements.where((F.col("property") == "P31") & F.col("object_item").isin(list(f.exclude_classes)))
            .select(F.col("subject").alias("excluded_subject"))
            .distinct()
        )
        df = df.join(excluded, df.subject == excluded.excluded_subject, "left").withColumn(
            "filter_reason",
            F.coalesce(F.col("filter_reason"),
                       F.when(F.col("excluded_subject").isNotNull(), F.lit("excluded_class"))),
        ).drop("excluded_subject")
    return df


# ---------------------------------------------------------------- the job


def run(ctx: StageContext) -> StageCounts:
    """Parse ``cfg.input.dumps`` into ``parse/{statements,terms,properties,rejects}``."""
    spark, cfg = ctx.spark, ctx.cfg
    out = cfg.stage_dir("parse")
    staged_path = str(out / "_staged")
    languages = cfg.filter.languages

    lines = read_dump_lines(spark, cfg.input.dumps)
    staged = lex_lines(lines, languages, cfg.input.entity_namespace, cfg.input.direct_claim_namespace)
    by_kind = write_staged(staged, staged_path)

    staged = read_staged(spark, staged_path)
    reason = F.col("reason")
    rejects, rejects_counted = observe_outcomes(
        conform(name_rejects(staged.where(F.col("kind") == "reject")), REJECTS),
        {name: reason == name for name in REJECT_REASONS}, exhaustive=True)
    rejects.write.mode("overwrite").parquet(str(out / "rejects"))
    by_kind["reject"] = {name: n for name, n in rejects_counted().by_outcome.items() if n}

    stmts = staged.where(F.col("kind") == "statement")
    terms = staged.where(F.col("kind") == "term").select(
        F.col("subject").alias("entity"),
        F.col("term_kind").alias("kind"),
        F.col("object_lang").alias("lang"),
        F.col("object_value").alias("value"),
    )
    declared = staged.where(F.col("kind") == "property_type").select(
        F.col("subject").alias("property"), "declared_datatype"
    )
    table = read_property_table(spark, cfg.input.property_table) if cfg.input.property_table else None

    terms, terms_counted = observe_outcomes(conform(terms, TERMS), {})
    terms.write.mode("overwrite").parquet(str(out / "terms"))
    terms = spark.read.parquet(str(out / "terms"))

    # Counted while written, with the datatypes the filter may name a reason after: the
    # properties are read once, by their own write, and not again for their counts.
    props = resolve_properties(stmts, terms, declared, table, languages[0].lower())
    source = F.col("datatype_source")
    props, props_counted = observe_outcomes(props, {name: source == name for name in DATATYPE_SOURCES},
                                            exhaustive=True)
    seen_datatypes = Observation("datatypes")
    props = props.observe(seen_datatypes, F.collect_set("datatype").alias("datatypes"))
    conform(props, PROPERTIES).write.mode("overwrite").parquet(str(out / "properties"))
    datatype_sources = {name: n for name, n in props_counted().by_outcome.items() if n}
    props = spark.read.parquet(str(out / "properties"))

    why = F.col("filter_reason")
    reasons = filter_reasons(seen_datatypes.get["datatypes"] or [], cfg)
    flagged, flagged_counted = observe_outcomes(
        filter_reason(stmts, props, cfg),
        {"": why.isNull(), **{name: why == name for name in reasons}}, exhaustive=True)
    conform(flagged.where(why.isNull()), STATEMENTS).write.mode("overwrite").parquet(str(out / "statements"))
    by_reason = flagged_counted().by_outcome
    filtered = {name: by_reason[name] for name in reasons if by_reason[name]}

    rejected = by_kind.get("reject", {})
    counts: dict[str, Any] = {
        "lines_in": sum(sum(v.values()) for v in by_kind.values()),
        "statements": by_reason[""],
        "terms": terms_counted().rows,
        "properties": sum(datatype_sources.values()),
        "rejected": sum(rejected.values()),
        "rejected_by_reason": dict(sorted(rejected.items())),
        "skipped_by_reason": dict(sorted(by_kind.get("skip", {}).items())),
        "statements_seen": sum(by_kind.get("statement", {}).values()),
        "statements_filtered_by_reason": dict(sorted(filtered.items())),
        "property_types_declared": sum(by_kind.get("property_type", {}).values()),
        "datatype_source": dict(sorted(datatype_sources.items())),
        "datatype_inferred": datatype_sources.get("inferred", 0),
    }
    remove_tree(spark, staged_path)
    write_counts(cfg, "parse", counts)
    log.info("parse: %s", counts)
    return counts
